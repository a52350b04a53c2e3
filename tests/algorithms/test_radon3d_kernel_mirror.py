"""A NumPy mirror of radon3d.cu's float32 back-projection arithmetic, checked on the CPU.

No GPU needed: this runs in CI. It mirrors what the kernel does per voxel
and direction -- the tile's window start w0 and coordinate origin in
float64, the float32 coordinate ``u = fma(z, c, fma(tx, a, fma(ty, b, d_loc)))``,
the magic-number floor, the staged pairs and the per-batch partial sums --
and checks (1) that every window index the kernel reads lies inside the
window the launcher sizes (``window_length``), for the single-stage and
both two-stage tables, and (2) the float32 accuracy the GPU tests assert
(1e-5 of the largest value against the float64 CPU reference).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from leveret import RadonGeometry, VolumeGeometry
from leveret.algorithms.radon3d import TwoStagePlan, filter_projections, second_derivative_response
from leveret.cpu import radon3d as cpu
from leveret.cuda import radon3d as launcher
from leveret.phantom import ball

BX, BY = launcher.BLOCK
MAGIC = np.float32(8388607.5)    # 2^23 - 1/2


def _f32_fma(x, y, z):
    """float32 fma: the product of two float32 values is exact in float64; one rounding."""
    return (np.asarray(x, np.float64) * np.asarray(y, np.float64) + np.asarray(z, np.float64)).astype(np.float32)


def mirror(proj, table, shape, zpt=4, db=64, table_bstride=0):
    """The kernel's output for ``proj`` ((n_dirs, n_samples), or (nb, n_dirs, n_samples)
    with per-b tables when ``table_bstride``), and the (lowest, highest) window index read."""
    nb, ny, nx = shape
    W = launcher.window_length(table, zpt)
    b, j, i = np.meshgrid(np.arange(nb), np.arange(ny), np.arange(nx), indexing="ij")
    i0, j0, b0 = (i // BX) * BX, (j // BY) * BY, (b // zpt) * zpt
    tx, ty, tz = (i - i0).astype(np.float32), (j - j0).astype(np.float32), (b - b0).astype(np.float32)
    per_b = table_bstride > 0
    n_dirs, n_samples = proj.shape[-2:]
    total = np.zeros(shape, np.float32)
    part = np.zeros(shape, np.float32)
    lo, hi = np.inf, -np.inf
    for q in range(n_dirs):
        rows = table[b0 * table_bstride + q] if per_b else table[q]
        a, bb, c, d = (rows[..., k] for k in range(4))
        base = i0 * a + j0 * bb + b0 * c + d
        umin = base + np.minimum(a, 0) * (BX - 1) + np.minimum(bb, 0) * (BY - 1) + np.minimum(c, 0) * (zpt - 1)
        w0 = np.floor(umin).astype(np.int64) - 1
        d_loc = (base - w0).astype(np.float32)
        u0 = _f32_fma(tx, np.asarray(a, np.float32), _f32_fma(ty, np.asarray(bb, np.float32), d_loc))
        u = _f32_fma(tz, np.asarray(c, np.float32), u0)
        t = (u + MAGIC).astype(np.float32)
        k = t.view(np.int32).astype(np.int64) - 0x4B000000
        f = (u - (t - np.float32(8388608.0))).astype(np.float32)
        lo, hi = min(lo, k.min()), max(hi, k.max())
        s = w0 + k
        row = proj[b, q] if per_b else proj[q]     # per voxel (nb, ny, nx, n_samples), or one row

        def sample(idx):
            ok = (idx >= 0) & (idx < n_samples)
            cl = np.clip(idx, 0, n_samples - 1)
            vals = np.take_along_axis(row, cl[..., None], axis=-1)[..., 0] if per_b else row[cl]
            return np.where(ok, vals, 0).astype(np.float32)

        v0 = sample(s)
        dv = (sample(s + 1) - v0).astype(np.float32)
        part = (part + _f32_fma(f, dv, v0)).astype(np.float32)
        if q % db == db - 1 or q == n_dirs - 1:
            total = (total + part).astype(np.float32)
            part[...] = 0
    return total, (int(lo), int(hi), W)


VOLUMES = [VolumeGeometry((17, 23, 37), (0.05, 0.04, 0.045), center=(0.02, -0.03, 0.01)),
           VolumeGeometry((9, 3, 70), 0.02), VolumeGeometry((12, 12, 12), 0.1, center=(0.3, -0.5, 0.7))]


@pytest.mark.parametrize("vol", VOLUMES, ids=["odd-offcentre", "thin", "coarse-voxels"])
@pytest.mark.parametrize("zpt", [1, 4])
def test_mirror_reads_inside_the_window_and_meets_the_float32_bound(rng, vol, zpt):
    g = RadonGeometry.uniform(150, 61, spacing=0.03)
    table = cpu.sample_table(g.directions, g.n_samples, g.spacing, vol)
    proj = rng.standard_normal(g.projection_shape).astype(np.float32)
    got, (lo, hi, W) = mirror(proj, table, vol.shape, zpt)
    assert 0 <= lo and hi <= W - 1
    ref = cpu.backproject(proj.astype(np.float64), table, np.empty(vol.shape))
    assert np.abs(got - ref).max() < 1e-5 * np.abs(ref).max()   # measured ~2e-6


def test_mirror_on_a_ball_fbp():
    """Filtered (float64 FFT, then rounded) ball projections: the float32
    kernel lands within 1e-5 of the float64 result (measured ~3e-7)."""
    g = RadonGeometry.uniform(600, 96, spacing=0.0125)
    vol = VolumeGeometry((11, 13, 15), 1.0 / 24)
    p = ball(0.5, center=(0.03, 0.0, -0.02)).project_radon(g)
    resp = second_derivative_response(g.n_samples, spacing=g.spacing)
    row = -g.direction_weights() / (8 * math.pi ** 2)
    f64 = filter_projections(p, resp, row, np.float64)
    table = cpu.sample_table(g.directions, g.n_samples, g.spacing, vol)
    ref = cpu.backproject(f64, table, np.empty(vol.shape))
    got, _ = mirror(f64.astype(np.float32), table, vol.shape)
    assert np.abs(got - ref).max() < 1e-5 * np.abs(ref).max()


def test_mirror_two_stage_tables_stay_in_their_windows(rng):
    g = RadonGeometry.grid(9, 14, 80, spacing=0.01)
    vol = VolumeGeometry((10, 21, 19), (0.03, 0.025, 0.035), center=(0.05, -0.04, 0.06))
    plan = TwoStagePlan(g, vol, oversampling=2)
    filt = rng.standard_normal(g.projection_shape)
    by_phi = np.ascontiguousarray(filt[plan.order]).reshape(plan.n_phi, plan.n_theta, -1)
    planes, (lo, hi, W) = mirror(by_phi.astype(np.float32), plan.table1, plan.plane_shape, zpt=1,
                                 table_bstride=plan.n_theta)
    assert 0 <= lo and hi <= W - 1
    ref_planes = np.empty(plan.plane_shape)
    for jp in range(plan.n_phi):
        cpu.backproject(by_phi[jp], plan.table1[jp * plan.n_theta:(jp + 1) * plan.n_theta], ref_planes[jp][None])
    assert np.abs(planes - ref_planes).max() < 1e-5 * np.abs(ref_planes).max()
    slices = np.ascontiguousarray(ref_planes.transpose(1, 0, 2))
    table2 = np.ascontiguousarray(plan.table2)
    out, (lo, hi, W) = mirror_stage2(slices.astype(np.float32), table2, vol.shape)
    assert 0 <= lo and hi <= W - 1
    ref = plan.backproject_cpu(filt, np.empty(vol.shape))
    assert np.abs(out - ref).max() < 1e-5 * np.abs(ref).max()


def mirror_stage2(slices, table2, shape):
    """Stage 2: per-b projections (the z slice's planes), one shared table."""
    nb = shape[0]
    n_phi = table2.shape[0]
    per_b_table = np.broadcast_to(table2, (nb, n_phi, 4)).reshape(nb * n_phi, 4)
    return mirror(slices, np.ascontiguousarray(per_b_table), shape, zpt=1, table_bstride=n_phi)
