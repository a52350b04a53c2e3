"""Cone-beam back-projection: CPU against a float64 transcription of RabbitCT's
formula, the CPU texture mode against the CUDA kernel, bad input."""
from __future__ import annotations

import numpy as np
import pytest

from leveret.geometry import ConeGeometry, VolumeGeometry
from leveret.operators import ConeBackprojection

# Texture unit (8-bit fractions, corner weight rounded to 1/256) against exact
# bilinear weights on white noise, relative 2-norm: measured 4.3e-3 to 5.6e-3 on
# volumes of 255 voxels or more (a 35-voxel one spreads to 9e-3: too few samples).
TEXTURE_VS_EXACT_RANDOM = 8e-3


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def rabbitct_reference(projections, matrices, volume):
    """RabbitCT's per-voxel formula, float64, straight from the papers (000, Fig. 2):
    x = O + i R; (uw, vw, w) = A (x, y, z, 1); result += interpolate(u, v) / w^2,
    bilinear with floor, pixel centres on integers, zero off the detector."""
    n_views, n_rows, n_cols = projections.shape
    z, y, x = np.meshgrid(volume.coordinates("z"), volume.coordinates("y"), volume.coordinates("x"),
                          indexing="ij")
    pts = np.stack([x, y, z, np.ones_like(x)], axis=-1)
    out = np.zeros(volume.shape)
    padded = np.zeros((n_views, n_rows + 2, n_cols + 2))
    padded[:, 1:-1, 1:-1] = projections
    for n in range(n_views):
        uvw = pts @ matrices[n].T
        w = uvw[..., 2]
        u, v = uvw[..., 0] / w, uvw[..., 1] / w
        iu, iv = np.floor(u), np.floor(v)
        a, b = u - iu, v - iv
        iu = np.clip(iu.astype(int) + 1, 0, n_cols + 1)   # +1: the zero border of `padded`
        iv = np.clip(iv.astype(int) + 1, 0, n_rows + 1)
        iu1, iv1 = np.clip(iu + 1, 0, n_cols + 1), np.clip(iv + 1, 0, n_rows + 1)
        inside = (u > -1) & (u < n_cols) & (v > -1) & (v < n_rows)
        q = padded[n]
        val = ((1 - a) * (1 - b) * q[iv, iu] + a * (1 - b) * q[iv, iu1]
               + (1 - a) * b * q[iv1, iu] + a * b * q[iv1, iu1])
        out += np.where(inside, val, 0.0) / w**2
    return out


@pytest.fixture
def small_scan(rng):
    angles = np.sort(rng.uniform(0, 2 * np.pi, 23))
    g = ConeGeometry.circular(angles, sid=60.0, sdd=100.0, n_rows=21, n_cols=27, pixel_size=1.7)
    vol = VolumeGeometry((11, 13, 17), voxel_size=(1.9, 2.1, 1.6), center=(0.5, -1.0, 2.0))
    proj = rng.standard_normal(g.projection_shape).astype(np.float32)
    return g, vol, proj


def test_cpu_matches_rabbitct_formula(small_scan):
    g, vol, proj = small_scan
    got = ConeBackprojection(g, vol, backend="cpu")(proj)
    ref = rabbitct_reference(proj, g.matrices, vol)
    assert np.abs(ref).max() > 0
    assert rel(got, ref) < 1e-6
    got64 = ConeBackprojection(g, vol, backend="cpu")(proj.astype(np.float64))
    assert rel(got64, ref) < 1e-12


def test_cpu_texture_mode_close_to_exact(small_scan):
    g, vol, proj = small_scan
    exact = ConeBackprojection(g, vol, backend="cpu")(proj)
    tex = ConeBackprojection(g, vol, backend="cpu", interpolation="linear8")(proj)
    assert 0 < rel(tex, exact) < TEXTURE_VS_EXACT_RANDOM


def test_cpu_float32_software_mode_close_to_exact(small_scan):
    """linear32 (exact weights, float32 arithmetic: what the CUDA global-memory
    kernel computes) stays within float32 coordinate rounding of the reference."""
    g, vol, proj = small_scan
    exact = ConeBackprojection(g, vol, backend="cpu")(proj)
    soft = ConeBackprojection(g, vol, backend="cpu", interpolation="linear32")(proj)
    assert 0 < rel(soft, exact) < 1e-5


def test_accumulate_and_view_subsets(small_scan):
    g, vol, proj = small_scan
    op = ConeBackprojection(g, vol, backend="cpu")
    full = op(proj)
    parts = op(proj[:10], views=slice(0, 10))
    op(proj[10:], parts, views=slice(10, None), accumulate=True)
    np.testing.assert_allclose(parts, full, rtol=1e-5, atol=1e-6)


def test_bad_input(small_scan):
    g, vol, proj = small_scan
    op = ConeBackprojection(g, vol, backend="cpu")
    with pytest.raises(ValueError, match="projections: expected shape"):
        op(proj[:, :-1])
    with pytest.raises(ValueError, match="volume"):
        ConeBackprojection(g, VolumeGeometry((4, 4)), backend="cpu")
    behind = VolumeGeometry((4, 4, 4), voxel_size=50.0)   # corners at 75 mm, the sources at 60 mm
    with pytest.raises(ValueError, match="matrices: expected w > 0"):
        ConeBackprojection(g, behind, backend="cpu")
    with pytest.raises(ValueError, match="geometry"):
        ConeBackprojection("cone", vol)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(11, 13, 17), (1, 15, 17), (33, 8, 9), (20, 37, 35)])
@pytest.mark.parametrize("interpolation,kernel,vs_mirror,vs_exact", [
    ("linear8", "texture", 1e-5, TEXTURE_VS_EXACT_RANDOM),   # kernel B
    ("linear8", "hybrid", 1e-5, TEXTURE_VS_EXACT_RANDOM),    # B and S, views split
    ("linear32", "global", 1e-6, 1e-5),                      # exact weights, global memory
    ("linear32", "shared", 1e-6, 1e-5),                      # exact weights, shared-memory tiles
])
def test_cuda_matches_its_cpu_mirror_and_the_exact_reference(rng, shape, interpolation, kernel, vs_mirror,
                                                             vs_exact):
    import cupy as cp
    angles = np.sort(rng.uniform(0, 2 * np.pi, 40))
    g = ConeGeometry.circular(angles, sid=60.0, sdd=100.0, n_rows=21, n_cols=27, pixel_size=1.7)
    vol = VolumeGeometry(shape, voxel_size=(1.3, 2.1, 1.6), center=(0.5, -1.0, 2.0))
    proj = rng.standard_normal(g.projection_shape).astype(np.float32)
    out = cp.full(shape, cp.nan, cp.float32)   # poison: unwritten voxels show
    gpu_mode = "linear32" if interpolation == "linear32" else "linear"
    op = ConeBackprojection(g, vol, backend="cuda", interpolation=gpu_mode, kernel=kernel)
    got = op(cp.asarray(proj), out).get()
    assert op.last_kernel == kernel
    assert np.isfinite(got).all()
    mirror = ConeBackprojection(g, vol, backend="cpu", interpolation=interpolation, kernel=kernel)(proj)
    assert rel(got, mirror) < vs_mirror
    assert rel(got, ConeBackprojection(g, vol, backend="cpu")(proj)) < vs_exact


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["shared", "hybrid"])
def test_cuda_staged_kernels_fall_back_to_global_memory_for_large_tiles(rng, monkeypatch, kernel):
    """Views whose tile exceeds the capacity are read from global memory: same result."""
    import cupy as cp

    from leveret.cuda import backproject_cone as launcher
    monkeypatch.setattr(launcher, "MAX_TILE", 96)   # most tiles here need 150-400 floats
    angles = np.sort(rng.uniform(0, 2 * np.pi, 30))
    g = ConeGeometry.circular(angles, sid=60.0, sdd=100.0, n_rows=25, n_cols=31, pixel_size=1.1)
    vol = VolumeGeometry((18, 34, 33), voxel_size=1.4)
    proj = rng.standard_normal(g.projection_shape).astype(np.float32)
    mode = "linear32" if kernel == "shared" else "linear"
    got = ConeBackprojection(g, vol, backend="cuda", interpolation=mode, kernel=kernel)(cp.asarray(proj)).get()
    mirror = ConeBackprojection(g, vol, backend="cpu", interpolation="linear32" if kernel == "shared"
                                else "linear8", kernel=kernel)(proj)
    assert rel(got, mirror) < 1e-5


@pytest.mark.gpu
def test_cuda_many_views_passes(rng):
    import cupy as cp
    angles = np.linspace(0, 2 * np.pi, 1500, endpoint=False)   # two constant-memory passes
    g = ConeGeometry.circular(angles, sid=60.0, sdd=100.0, n_rows=9, n_cols=11, pixel_size=3.0)
    vol = VolumeGeometry((9, 10, 11), voxel_size=2.0)
    proj = rng.standard_normal(g.projection_shape).astype(np.float32)
    got = ConeBackprojection(g, vol, backend="cuda")(cp.asarray(proj)).get()
    emulated = ConeBackprojection(g, vol, backend="cpu", interpolation="linear8")(proj)
    assert rel(got, emulated) < 1e-5


def test_tile_capacity_covers_every_block(rng):
    """The sampled capacity equals the largest tile over all blocks when the
    sample lattice holds every block (small volumes), and the tiles do cover
    every sample's neighbours (checked in float64 against each voxel)."""
    from leveret.cuda.backproject_cone import tile_capacity
    from leveret.operators.cone import index_matrices
    angles = np.sort(rng.uniform(0, 2 * np.pi, 12))
    g = ConeGeometry.circular(angles, sid=60.0, sdd=100.0, n_rows=25, n_cols=31, pixel_size=1.1)
    vol = VolumeGeometry((16, 40, 37), voxel_size=1.2)
    m = index_matrices(g.matrices, vol)
    block, k = (16, 16), 8
    cap = tile_capacity(m, vol.shape, block, k, g.n_rows, g.n_cols, limit=10**9)
    worst = 0
    z, y, x = np.meshgrid(*(np.arange(n) for n in vol.shape), indexing="ij")
    pts = np.stack([x, y, z, np.ones_like(x)]).reshape(4, -1).astype(float)
    q = m @ pts
    u = np.clip(q[:, 0] / q[:, 2], -2, g.n_cols).reshape((-1,) + vol.shape)   # as the kernels clamp
    v = np.clip(q[:, 1] / q[:, 2], -2, g.n_rows).reshape((-1,) + vol.shape)
    for k0 in range(0, vol.nz, k):
        for j0 in range(0, vol.ny, block[1]):
            for i0 in range(0, vol.nx, block[0]):
                box = (slice(None), slice(k0, k0 + k), slice(j0, j0 + block[1]), slice(i0, i0 + block[0]))
                fu, fv = np.floor(u[box]), np.floor(v[box])
                area = (fu.max(axis=(1, 2, 3)) - fu.min(axis=(1, 2, 3)) + 2) * \
                       (fv.max(axis=(1, 2, 3)) - fv.min(axis=(1, 2, 3)) + 2)
                worst = max(worst, int(area.max()))
    assert worst <= cap <= -(-(worst * 2) // 32) * 32   # covers, with the half-pixel margins at most


def test_hybrid_mirror_is_the_sum_of_its_two_view_sets(small_scan):
    from leveret.cuda.backproject_cone import staged_views
    g, vol, proj = small_scan
    soft = staged_views(g.n_views, "hybrid")
    assert 0 < soft.sum() < g.n_views
    hybrid = ConeBackprojection(g, vol, backend="cpu", interpolation="linear8", kernel="hybrid")(proj)
    parts = (ConeBackprojection(g, vol, backend="cpu", interpolation="linear32")(
        np.where(soft[:, None, None], proj, 0)) +
        ConeBackprojection(g, vol, backend="cpu", interpolation="linear8")(np.where(soft[:, None, None], 0, proj)))
    assert rel(hybrid, parts) < 1e-6


@pytest.mark.parametrize("interpolation,kernel", [("linear", "auto"), ("linear8", "texture"),
                                                  ("linear8", "hybrid"), ("linear32", "global")])
def test_slab_by_slab_equals_the_whole_volume(small_scan, interpolation, kernel):
    """``slices`` writes only its slabs, with the whole volume's arithmetic."""
    g, vol, proj = small_scan
    op = ConeBackprojection(g, vol, backend="cpu", interpolation=interpolation, kernel=kernel)
    whole = op(proj)
    a = op.slab_alignment
    parts = np.full(vol.shape, np.nan, np.float32)
    bounds = list(range(0, vol.nz, a)) + [vol.nz]
    for k0, k1 in zip(bounds[:-1], bounds[1:]):
        op(proj, parts, slices=(k0, k1))
        assert np.isnan(parts[k1:]).all()          # nothing past the slab written
    np.testing.assert_allclose(parts, whole, rtol=1e-6, atol=1e-6 * np.abs(whole).max())
    with pytest.raises(ValueError, match="slices"):
        op(proj, parts, slices=(1, 3) if a > 1 else (3, 2))


@pytest.mark.gpu
@pytest.mark.parametrize("kernel,interpolation", [("texture", "linear"), ("global", "linear32"),
                                                  ("hybrid", "linear")])
def test_cuda_slab_by_slab_is_identical(rng, kernel, interpolation):
    import cupy as cp
    angles = np.sort(rng.uniform(0, 2 * np.pi, 30))
    g = ConeGeometry.circular(angles, sid=60.0, sdd=100.0, n_rows=21, n_cols=27, pixel_size=1.7)
    vol = VolumeGeometry((27, 19, 23), voxel_size=1.5)
    proj = cp.asarray(rng.standard_normal(g.projection_shape).astype(np.float32))
    op = ConeBackprojection(g, vol, backend="cuda", interpolation=interpolation, kernel=kernel)
    whole = op(proj).get()
    parts = cp.full(vol.shape, cp.nan, cp.float32)
    a = op.slab_alignment
    for k0 in range(0, vol.nz, a):
        op(proj, parts, slices=(k0, min(vol.nz, k0 + a)))
    np.testing.assert_array_equal(parts.get(), whole)
