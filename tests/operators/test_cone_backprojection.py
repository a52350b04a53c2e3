"""Cone-beam back-projection operator: CPU against a float64 transcription of
RabbitCT's formula, the CUDA kernels against their CPU mirrors, the pass
planning, slabs, bad input. Kernel-level GPU tests: tests/cuda/test_backproject_cone_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest
from cases import TEXTURE_VS_EXACT_RANDOM, rel, scrambled_scan, smooth_noise

from leveret.geometry import ConeGeometry, VolumeGeometry
from leveret.operators import ConeBackprojection


def rabbitct_reference(projections, matrices, volume):
    """RabbitCT's per-voxel formula, float64, as the RabbitCT papers state it:
    x = O + i R; (uw, vw, w) = A (x, y, z, 1); result += interpolate(u, v) / w^2,
    bilinear with floor, pixel centres on integers, zero off the detector."""
    n_views, n_rows, n_cols = projections.shape
    z, y, x = np.meshgrid(volume.coordinates("z"), volume.coordinates("y"), volume.coordinates("x"), indexing="ij")
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
        iu = np.clip(iu.astype(int) + 1, 0, n_cols + 1)  # +1: the zero border of `padded`
        iv = np.clip(iv.astype(int) + 1, 0, n_rows + 1)
        iu1, iv1 = np.clip(iu + 1, 0, n_cols + 1), np.clip(iv + 1, 0, n_rows + 1)
        inside = (u > -1) & (u < n_cols) & (v > -1) & (v < n_rows)
        q = padded[n]
        val = (1 - a) * (1 - b) * q[iv, iu] + a * (1 - b) * q[iv, iu1] + (1 - a) * b * q[iv1, iu] + a * b * q[iv1, iu1]
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
    tex = ConeBackprojection(g, vol, backend="cpu", interpolation="linear8", kernel="texture")(proj)
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
    behind = VolumeGeometry((4, 4, 4), voxel_size=50.0)  # corners at 75 mm, the sources at 60 mm
    with pytest.raises(ValueError, match="matrices: expected w > 0"):
        ConeBackprojection(g, behind, backend="cpu")
    with pytest.raises(TypeError, match="geometry"):
        ConeBackprojection("cone", vol)
    with pytest.raises(ValueError, match="kernel: expected one of"):
        ConeBackprojection(g, vol, backend="cpu", kernel="global")  # exact weights: interpolation="linear32"
    from leveret.cuda.backproject_cone import CudaConeBackprojector

    for per_pass in (0, 1025):  # the ray kernels' matrices and texture handles sit in constant memory
        with pytest.raises(ValueError, match="views_per_pass: expected 1 .. 1024"):
            CudaConeBackprojector(kernel="ray", views_per_pass=per_pass)


@pytest.mark.parametrize("old,interpolation", [("shared", "linear32"), ("hybrid", "linear")])
def test_removed_kernel_names_are_refused(small_scan, old, interpolation):
    """The 0.x names "shared" and "hybrid" (now "global" and "ray-hybrid") are gone, not aliased."""
    g, vol, proj = small_scan
    with pytest.raises(ValueError, match=f"^kernel: expected one of .*, got '{old}'"):
        ConeBackprojection(g, vol, backend="cpu", interpolation=interpolation, kernel=old)


def test_repr_names_the_operator_and_its_choices(small_scan):
    g, vol, _ = small_scan
    text = repr(ConeBackprojection(g, vol, backend="cpu", interpolation="linear32", kernel="quad"))
    assert text.startswith("ConeBackprojection(ConeGeometry(")
    assert "backend='cpu', interpolation='linear32', kernel='quad')" in text


def test_cpu_backend_refuses_gpu_arrays_by_name(small_scan):
    """A CuPy input with backend="cpu" is an error naming the argument (checked
    with a stand-in: the array policy looks at the array's module)."""
    g, vol, proj = small_scan

    class FakeCupyArray(np.ndarray):
        pass

    FakeCupyArray.__module__ = "cupy._core.core"
    with pytest.raises(ValueError, match="projections: the CPU backend takes NumPy arrays"):
        ConeBackprojection(g, vol, backend="cpu")(proj.view(FakeCupyArray))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(11, 13, 17), (1, 15, 17), (33, 8, 9), (20, 37, 35)])
@pytest.mark.parametrize(
    "interpolation,kernel,vs_mirror,vs_exact",
    [
        ("linear8", "texture", 1e-5, TEXTURE_VS_EXACT_RANDOM),  # kernel B
        ("linear32", "global", 1e-6, 1e-5),  # exact weights, global memory
    ],
)
def test_cuda_matches_its_cpu_mirror_and_the_exact_reference(
    rng, rel_mirror, shape, interpolation, kernel, vs_mirror, vs_exact
):
    import cupy as cp

    angles = np.sort(rng.uniform(0, 2 * np.pi, 40))
    g = ConeGeometry.circular(angles, sid=60.0, sdd=100.0, n_rows=21, n_cols=27, pixel_size=1.7)
    vol = VolumeGeometry(shape, voxel_size=(1.3, 2.1, 1.6), center=(0.5, -1.0, 2.0))
    proj = rng.standard_normal(g.projection_shape).astype(np.float32)
    out = cp.full(shape, cp.nan, cp.float32)  # poison: unwritten voxels show
    gpu_mode = "linear32" if interpolation == "linear32" else "linear"
    op = ConeBackprojection(g, vol, backend="cuda", interpolation=gpu_mode, kernel=kernel)
    got = op(cp.asarray(proj), out).get()
    assert op.last_kernel == kernel
    assert np.isfinite(got).all()
    mirror = ConeBackprojection(g, vol, backend="cpu", interpolation=interpolation, kernel=kernel)(proj)
    assert rel_mirror(got, mirror) < vs_mirror
    assert rel(got, ConeBackprojection(g, vol, backend="cpu")(proj)) < vs_exact


@pytest.mark.gpu
def test_cuda_many_views_passes(rng, rel_mirror):
    import cupy as cp

    angles = np.linspace(0, 2 * np.pi, 1500, endpoint=False)  # two constant-memory passes
    g = ConeGeometry.circular(angles, sid=60.0, sdd=100.0, n_rows=9, n_cols=11, pixel_size=3.0)
    vol = VolumeGeometry((9, 10, 11), voxel_size=2.0)
    proj = rng.standard_normal(g.projection_shape).astype(np.float32)
    got = ConeBackprojection(g, vol, backend="cuda", kernel="texture")(cp.asarray(proj)).get()
    emulated = ConeBackprojection(g, vol, backend="cpu", interpolation="linear8", kernel="texture")(proj)
    assert rel_mirror(got, emulated) < 1e-5


def test_cpu_backend_caches_nothing_so_every_view_fits_a_call(small_scan):
    g, vol, _ = small_scan
    assert ConeBackprojection(g, vol, backend="cpu").cached_views(share=4) == g.n_views


@pytest.mark.gpu
def test_cuda_call_of_cached_views_leaves_its_texture_in_the_cache(rng):
    """``cached_views(share)``: the most views whose texture takes at most
    1/share of the GPU's texture cache; a call of that many leaves its
    texture cached for the next (fdk sizes its workers' calls by it)."""
    import cupy as cp

    from leveret.cuda import texture

    g = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 80, endpoint=False), sid=600.0, sdd=1000.0, n_rows=512, n_cols=1024, pixel_size=1.0
    )
    vol = VolumeGeometry((16, 32, 32), voxel_size=4.0)
    op = ConeBackprojection(g, vol, backend="cuda", kernel="texture")
    n, view = op.cached_views(share=2), 512 * 1024 * 4
    assert n * view <= texture.CACHE_BYTES // 2 < (n + 1) * view
    texture.clear_cache()
    op(cp.asarray(rng.random((n, 512, 1024), dtype=np.float32)), views=slice(0, n))
    assert ((n, 512, 1024), 1, False) in texture.layered_cache().keys()


@pytest.mark.gpu
@pytest.mark.parametrize("kernel,mode", [("texture", "linear"), ("ray-hybrid", "linear"), ("quad", "linear32")])
def test_cuda_backend_takes_numpy_and_returns_numpy(rng, kernel, mode):
    """NumPy in, NumPy out on the CUDA backend (``out`` filled in place,
    accumulation included); the same values as CuPy in, CuPy out."""
    import cupy as cp

    g, matrices = scrambled_scan(rng, n_views=31)
    vol = VolumeGeometry((17, 19, 21), voxel_size=1.5)
    proj = smooth_noise(rng, g.projection_shape)
    op = ConeBackprojection(g, vol, backend="cuda", interpolation=mode, kernel=kernel, matrices=matrices)
    on_gpu = op(cp.asarray(proj)).get()
    got = op(proj)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, on_gpu)
    base = rng.standard_normal(vol.shape).astype(np.float32)
    out = base.copy()
    assert op(proj, out, accumulate=True) is out
    np.testing.assert_allclose(out, base + on_gpu, rtol=1e-5, atol=1e-5 * np.abs(on_gpu).max())


def _assert_slabs_equal_whole(op, proj, vol):
    """CUDA: the volume written slab by slab (poisoned first) equals the whole,
    bit for bit; returns the whole (NumPy)."""
    import cupy as cp

    whole = op(proj).get()
    parts = cp.full(vol.shape, cp.nan, cp.float32)
    a = op.slab_alignment
    for k0 in range(0, vol.nz, a):
        op(proj, parts, slices=(k0, min(vol.nz, k0 + a)))
    np.testing.assert_array_equal(parts.get(), whole)
    return whole


@pytest.mark.parametrize(
    "interpolation,kernel",
    [
        ("linear", "auto"),
        ("linear8", "texture"),
        ("linear32", "global"),
        ("linear8", "ray-hybrid"),
        ("linear32", "quad"),
    ],
)
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
        assert np.isnan(parts[k1:]).all()  # nothing past the slab written
    np.testing.assert_allclose(parts, whole, rtol=1e-6, atol=1e-6 * np.abs(whole).max())
    with pytest.raises(ValueError, match="slices"):
        op(proj, parts, slices=(1, 3) if a > 1 else (3, 2))


@pytest.mark.gpu
@pytest.mark.parametrize("kernel,interpolation", [("texture", "linear"), ("global", "linear32")])
def test_cuda_slab_by_slab_is_identical(rng, kernel, interpolation):
    import cupy as cp

    angles = np.sort(rng.uniform(0, 2 * np.pi, 30))
    g = ConeGeometry.circular(angles, sid=60.0, sdd=100.0, n_rows=21, n_cols=27, pixel_size=1.7)
    vol = VolumeGeometry((27, 19, 23), voxel_size=1.5)
    proj = cp.asarray(rng.standard_normal(g.projection_shape).astype(np.float32))
    op = ConeBackprojection(g, vol, backend="cuda", interpolation=interpolation, kernel=kernel)
    _assert_slabs_equal_whole(op, proj, vol)


# --- ray-aligned kernels ("ray", "quad", "ray-hybrid"): passes of similar direction


def ray_lanes(nx, ny, y_major, slope, by=8):
    """The voxel (i, j) of every thread of a ray kernel's pass, transcribed
    from backproject_ray in backproject_cone.cu (grid over (a, b0))."""
    na, nb = (ny, nx) if y_major else (nx, ny)
    a, b0 = np.meshgrid(np.arange(-(-na // 32) * 32), np.arange(-(-nb // by) * by), indexing="ij")
    live = (a < na) & (b0 < nb)
    a, b0 = a[live], b0[live]
    lane = a % 32
    shift = np.fmod(np.rint((lane * np.float32(slope)).astype(np.float32)).astype(int), nb)
    shift = np.where(shift < 0, shift + nb, shift)
    b = np.where(b0 + shift >= nb, b0 + shift - nb, b0 + shift)
    return (b, a) if y_major else (a, b)


@pytest.mark.parametrize("nx,ny", [(37, 29), (29, 37), (5, 64), (64, 3), (1, 1)])
@pytest.mark.parametrize("y_major,slope", [(False, 0.0), (False, 0.83), (True, -1.0), (True, 0.31), (False, -0.49)])
def test_ray_mapping_is_a_bijection(nx, ny, y_major, slope):
    i, j = ray_lanes(nx, ny, y_major, slope)
    hits = np.zeros((ny, nx), int)
    np.add.at(hits, (j, i), 1)
    assert (hits == 1).all()


def test_plan_passes_groups_views_by_direction(rng):
    from leveret.operators.cone import index_matrices
    from leveret.cpu.cone_plan import plan_passes, software_mask, view_directions

    angles = rng.permutation(np.linspace(0, 2 * np.pi, 200, endpoint=False))  # unsorted
    g = ConeGeometry.circular(angles, sid=60.0, sdd=100.0, n_rows=23, n_cols=31, pixel_size=1.7)
    vol = VolumeGeometry((21, 29, 37), voxel_size=1.3)
    m = index_matrices(g.matrices, vol)
    passes = plan_passes(m, vol.shape, views_per_pass=32, split=(1, 3))
    views = np.concatenate([p.views for p in passes])
    assert sorted(views.tolist()) == list(range(200))  # a partition
    assert all(p.views.size <= 32 and (np.diff(p.views) > 0).all() for p in passes)  # call order kept
    assert len(passes) == 7
    # directions: azimuth of the central ray is the scan angle +- 90 degrees here
    phi = view_directions(m, vol.shape)
    np.testing.assert_allclose(np.cos(2 * phi), np.cos(2 * (g.angles + np.pi / 2)), atol=1e-9)
    for p in passes:
        spread = np.angle(np.exp(2j * (phi[p.views] - phi[p.views[0]]))) / 2
        assert np.ptp(spread) < np.radians(180 / 7 + 1)  # one bin of the half circle
        assert abs(p.slope) <= 1
        lane_dir = np.array([p.slope, 1.0]) if p.y_major else np.array([1.0, p.slope])
        lane_dir /= np.linalg.norm(lane_dir)
        along = np.abs(np.cos(phi[p.views]) * lane_dir[0] + np.sin(phi[p.views]) * lane_dir[1])
        assert along.min() > np.cos(np.radians(180 / 7 + 1))
    mask = software_mask(passes, 200)
    assert mask.sum() == sum(-(-p.views.size // 3) for p in passes)
    # the same scan in another order: the same groups
    perm = rng.permutation(200)
    again = plan_passes(m[perm], vol.shape, views_per_pass=32)
    assert sorted(tuple(sorted(perm[p.views])) for p in again) == sorted(tuple(p.views) for p in passes)


RAY_CASES = [
    ("ray", "linear", "linear8", TEXTURE_VS_EXACT_RANDOM),
    ("quad", "linear32", "linear32", 1e-5),
    ("ray-hybrid", "linear", "linear8", TEXTURE_VS_EXACT_RANDOM),
]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(21, 29, 37), (1, 15, 17), (33, 8, 9), (20, 37, 35)])
@pytest.mark.parametrize("kernel,mode,mirror_mode,vs_exact", RAY_CASES)
def test_cuda_ray_kernels_match_their_mirror_and_the_exact_reference(
    rng, rel_mirror, shape, kernel, mode, mirror_mode, vs_exact
):
    import cupy as cp

    g, matrices = scrambled_scan(rng)
    vol = VolumeGeometry(shape, voxel_size=(1.3, 2.1, 1.6), center=(0.5, -1.0, 2.0))
    proj = smooth_noise(rng, g.projection_shape)
    op = ConeBackprojection(g, vol, backend="cuda", interpolation=mode, kernel=kernel, matrices=matrices)
    out = cp.full(shape, cp.nan, cp.float32)  # poison: unwritten voxels show
    got = op(cp.asarray(proj), out).get()
    assert op.last_kernel == kernel
    assert np.isfinite(got).all()
    mirror = ConeBackprojection(g, vol, backend="cpu", interpolation=mirror_mode, kernel=kernel, matrices=matrices)(
        proj
    )
    assert rel_mirror(got, mirror) < 1e-5
    exact = ConeBackprojection(g, vol, backend="cpu", matrices=matrices)(proj)
    assert rel(got, exact) < vs_exact
    # accumulate adds to what is there
    base = rng.standard_normal(shape).astype(np.float32)
    acc = op(cp.asarray(proj), cp.asarray(base), accumulate=True).get()
    np.testing.assert_allclose(acc, base + got, rtol=1e-5, atol=1e-5 * np.abs(got).max())


@pytest.mark.gpu
@pytest.mark.parametrize("kernel,mode", [("ray", "linear"), ("quad", "linear32"), ("ray-hybrid", "linear")])
def test_cuda_ray_kernels_slab_by_slab_is_identical(rng, rel_mirror, kernel, mode):
    import cupy as cp

    g, matrices = scrambled_scan(rng, n_views=45)
    vol = VolumeGeometry((27, 19, 23), voxel_size=1.5)
    proj = cp.asarray(smooth_noise(rng, g.projection_shape))
    op = ConeBackprojection(g, vol, backend="cuda", interpolation=mode, kernel=kernel, matrices=matrices)
    whole = _assert_slabs_equal_whole(op, proj, vol)
    # views in two calls (FDK's chunks): each call plans its own passes (and,
    # for "ray-hybrid", its own software views), as the CPU mirror of the same two calls does
    first = op(proj[:20], views=slice(0, 20))
    op(proj[20:], first, views=slice(20, None), accumulate=True)
    mirror_mode = "linear32" if mode == "linear32" else "linear8"
    cpu = ConeBackprojection(g, vol, backend="cpu", interpolation=mirror_mode, kernel=kernel, matrices=matrices)
    host = proj.get()
    expected = cpu(host[:20], views=slice(0, 20))
    cpu(host[20:], expected, views=slice(20, None), accumulate=True)
    assert rel_mirror(first.get(), expected) < 1e-5
    if kernel != "ray-hybrid":  # the same software views as one call: the whole, up to the passes' rounding
        assert rel(first.get(), whole) < 1e-5


@pytest.mark.gpu
def test_cuda_ray_kernels_many_views(rng, rel_mirror):
    import cupy as cp

    angles = np.linspace(0, 2 * np.pi, 1500, endpoint=False)  # more than one constant-memory load
    g = ConeGeometry.circular(angles, sid=60.0, sdd=100.0, n_rows=9, n_cols=11, pixel_size=3.0)
    vol = VolumeGeometry((9, 10, 11), voxel_size=2.0)
    proj = smooth_noise(rng, g.projection_shape)
    got = ConeBackprojection(g, vol, backend="cuda", kernel="ray")(cp.asarray(proj)).get()
    assert (
        rel_mirror(got, ConeBackprojection(g, vol, backend="cpu", interpolation="linear8", kernel="ray")(proj)) < 1e-5
    )
    got = ConeBackprojection(g, vol, backend="cuda", interpolation="linear32", kernel="quad")(cp.asarray(proj)).get()
    assert rel(got, ConeBackprojection(g, vol, backend="cpu")(proj)) < 1e-5


@pytest.mark.parametrize("size, expected", [(512, "ray-hybrid"), (1024, "ray-hybrid"), (4096, "texture")])
def test_auto_kernel_follows_the_projected_voxel_size(size, expected):
    """RabbitCT's geometry: a 0.5 mm voxel spans ~2.4 detector pixels at the
    centre, a 0.25 mm one ~1.2 (the ray-aligned passes for whole scans), a
    0.0625 mm one ~0.3 (kernel B); explicit kernels and "linear32" are left
    alone."""
    from leveret.operators.cone import RAY_MIN_PIXELS, RAY_MIN_VIEWS, projected_voxel_pixels

    geometry = ConeGeometry.circular(
        np.radians(np.arange(0, 496, 2) * 0.4), sid=750.0, sdd=1200.0, n_rows=960, n_cols=1248, pixel_size=0.308
    )
    volume = VolumeGeometry((size,) * 3, voxel_size=256.0 / size)
    op = ConeBackprojection(geometry, volume, backend="cpu")
    pixels = projected_voxel_pixels(op._index, volume)
    assert pixels == pytest.approx(1.6 * 256.0 / size / 0.308, rel=0.1)  # magnification x voxel / pixel
    assert (pixels >= RAY_MIN_PIXELS) == (expected == "ray-hybrid")
    assert op.kernel_for(geometry.n_views) == expected == op.last_kernel
    assert op.kernel_for(RAY_MIN_VIEWS - 1) == "texture"  # FDK's chunks: kernel B (measured faster there)
    assert ConeBackprojection(geometry, volume, backend="cpu", interpolation="linear8").last_kernel == expected
    assert ConeBackprojection(geometry, volume, backend="cpu", kernel="texture").last_kernel == "texture"
    assert ConeBackprojection(geometry, volume, backend="cpu", interpolation="linear32").last_kernel == "quad"


def test_cuda_asked_for_without_a_gpu_says_why(small_scan):
    """backend="cuda" where CuPy finds no GPU: a RuntimeError with the reason,
    never a silent fallback to the CPU (the operator base's backend resolution)."""
    from leveret.backends import cuda_status

    if cuda_status()[0]:
        pytest.skip("a GPU is present")
    g, vol, _ = small_scan
    with pytest.raises(RuntimeError, match="backend='cuda' needs a CUDA GPU: "):
        ConeBackprojection(g, vol, backend="cuda")
    assert ConeBackprojection(g, vol).backend == "cpu"  # "auto" without a GPU


def test_cpu_kernels_and_the_view_planning_load_no_launcher():
    """leveret.cpu and the planning both backends share (cpu.cone_plan) stand
    without the CUDA launchers and CuPy: a CPU-only install never loads them
    (leveret itself loads the GPU plumbing that imports nothing of CuPy)."""
    import subprocess
    import sys

    code = (
        "import sys, leveret.cpu.backproject_cone, leveret.cpu.backproject_parallel, leveret.cpu.radon3d, "
        "leveret.cpu.cone_plan; print(sorted(m for m in sys.modules if m.startswith(('leveret.cuda', 'cupy'))))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    plumbing = {"leveret.cuda", "leveret.cuda.devices", "leveret.cuda.device_state", "leveret.cuda.pipeline"}
    assert set(eval(res.stdout)) <= plumbing
