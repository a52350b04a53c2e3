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
MAGIC = np.float32(8388607.5)  # 2^23 - 1/2


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
        row = proj[b, q] if per_b else proj[q]  # per voxel (nb, ny, nx, n_samples), or one row

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


VOLUMES = [
    VolumeGeometry((17, 23, 37), (0.05, 0.04, 0.045), center=(0.02, -0.03, 0.01)),
    VolumeGeometry((9, 3, 70), 0.02),
    VolumeGeometry((12, 12, 12), 0.1, center=(0.3, -0.5, 0.7)),
]


@pytest.mark.parametrize("vol", VOLUMES, ids=["odd-offcentre", "thin", "coarse-voxels"])
@pytest.mark.parametrize("zpt", [1, 4])
def test_mirror_reads_inside_the_window_and_meets_the_float32_bound(rng, vol, zpt):
    g = RadonGeometry.uniform(150, 61, spacing=0.03)
    table = cpu.sample_table(g.directions, g.n_samples, g.spacing, vol)
    proj = rng.standard_normal(g.projection_shape).astype(np.float32)
    got, (lo, hi, W) = mirror(proj, table, vol.shape, zpt)
    assert 0 <= lo and hi <= W - 1
    ref = cpu.backproject(proj.astype(np.float64), table, np.empty(vol.shape))
    assert np.abs(got - ref).max() < 1e-5 * np.abs(ref).max()  # measured ~2e-6


def test_mirror_on_a_ball_fbp():
    """Filtered (float64 FFT, then rounded) ball projections: the float32
    kernel lands within 1e-5 of the float64 result (measured ~3e-7)."""
    g = RadonGeometry.uniform(600, 96, spacing=0.0125)
    vol = VolumeGeometry((11, 13, 15), 1.0 / 24)
    p = ball(0.5, center=(0.03, 0.0, -0.02)).project_radon(g)
    resp = second_derivative_response(g.n_samples, spacing=g.spacing)
    row = -g.direction_weights() / (8 * math.pi**2)
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
    planes, (lo, hi, W) = mirror(
        by_phi.astype(np.float32), plan.table1, plan.plane_shape, zpt=1, table_bstride=plan.n_theta
    )
    assert 0 <= lo and hi <= W - 1
    ref_planes = np.empty(plan.plane_shape)
    for jp in range(plan.n_phi):
        cpu.backproject(by_phi[jp], plan.table1[jp * plan.n_theta : (jp + 1) * plan.n_theta], ref_planes[jp][None])
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


# -- the global-memory fallback (radon3d.cu: backproject_global_impl) ----------------------------


def mirror_global(proj, table, shape, batch=64):
    """The global-memory kernel's float32 arithmetic: float64 coordinates in the CPU
    kernel's order, the fraction rounded to float32, ``fma(f, v1 - v0, v0)`` in
    float32 and partial sums per batch of directions."""
    nb, ny, nx = shape
    k, j, i = np.meshgrid(np.arange(nb), np.arange(ny), np.arange(nx), indexing="ij")
    n_samples = proj.shape[-1]
    total = np.zeros(shape, np.float32)
    part = np.zeros(shape, np.float32)
    for q in range(proj.shape[0]):
        a, b, c, d = table[q]
        u = (j * b + k * c + d) + i * a
        fl = np.floor(u)
        s = fl.astype(np.int64)
        f = (u - fl).astype(np.float32)

        def sample(idx):
            return np.where(
                (idx >= 0) & (idx < n_samples), proj[q][np.clip(idx, 0, n_samples - 1)], np.float32(0)
            ).astype(np.float32)

        v0 = sample(s)
        term = _f32_fma(f, (sample(s + 1) - v0).astype(np.float32), v0)
        part = (part + term).astype(np.float32)
        if q % batch == batch - 1 or q == proj.shape[0] - 1:
            total = (total + part).astype(np.float32)
            part[...] = 0
    return total


def _coarse_geometry(dx, n_dirs=100, spacing=0.03):
    """Voxels ``dx / spacing`` times the sample pitch; samples cover the whole volume."""
    vol = VolumeGeometry((8, 16, 40), dx)
    half = 0.5 * dx * math.sqrt(8**2 + 16**2 + 40**2)
    g = RadonGeometry.uniform(n_dirs, int(2 * half / spacing) + 5, spacing=spacing)
    return g, vol, cpu.sample_table(g.directions, g.n_samples, g.spacing, vol)


def test_global_kernel_mirror_keeps_float32_accuracy_where_windows_are_wide(rng):
    """Voxels 8 x the sample pitch: a 259-sample float32 window would lose
    precision (the shared kernel's mirror: ~1e-5), so "auto" takes the global
    kernel, whose float64 coordinates keep the float32 result within 1e-6."""
    g, vol, table = _coarse_geometry(0.24)
    plan = launcher.plan_backprojection(table, 4, np.float32, g.n_dirs)
    assert plan.path == "global" and "precision" in plan.reason
    assert launcher.window_length(table, 4) > launcher.MAX_WINDOW_F32
    proj = rng.standard_normal(g.projection_shape).astype(np.float32)
    ref = cpu.backproject(proj.astype(np.float64), table, np.empty(vol.shape))
    got = mirror_global(proj, table, vol.shape)
    assert np.abs(got - ref).max() < 1e-6 * np.abs(ref).max()


# -- the launcher's plans (which kernel runs), checked without a GPU ------------------------------


def test_plan_backprojection_benchmark_problems_stage_in_shared_memory():
    for n, n_dirs in ((128, 208), (256, 2000)):
        g = RadonGeometry.uniform(n_dirs, int(math.ceil(math.sqrt(3) * n)) + 1)
        table = cpu.sample_table(g.directions, g.n_samples, g.spacing, VolumeGeometry((n, n, n)))
        for dtype in (np.float32, np.float64):
            plan = launcher.plan_backprojection(table, 4, dtype, g.n_dirs)
            assert (plan.path, plan.W, plan.DB) == ("shared", 36, 64)
            assert plan.shared_bytes == launcher.shared_bytes(36, 64, np.dtype(dtype).itemsize)
            assert plan.shared_bytes <= launcher.SHARED_BUDGET


def test_plan_backprojection_falls_back_to_global_memory():
    # 0.24 / 0.03: W = 259. float64 stages it (11 directions per batch); float32
    # would lose precision, so it takes the global kernel unless told otherwise.
    _, _, table = _coarse_geometry(0.24)
    p64 = launcher.plan_backprojection(table, 4, np.float64, 100)
    assert (p64.path, p64.W, p64.DB) == ("shared", 259, 11) and p64.shared_bytes <= launcher.SHARED_BUDGET
    assert launcher.plan_backprojection(table, 4, np.float32, 100).path == "global"
    forced = launcher.plan_backprojection(table, 4, np.float32, 100, path="shared")
    assert forced.path == "shared" and forced.shared_bytes <= launcher.SHARED_BUDGET
    # 6.0 / 0.03: a window of 6372 samples fits neither precision.
    _, _, huge = _coarse_geometry(6.0)
    W = launcher.window_length(huge, 4)
    assert launcher.batch_size(W, 4, 100) == 0 and launcher.batch_size(W, 8, 100) == 0
    for dtype in (np.float32, np.float64):
        plan = launcher.plan_backprojection(huge, 4, dtype, 100)
        assert plan.path == "global" and "does not fit" in plan.reason
        with pytest.raises(ValueError, match="path: 'shared' was asked for, but a block's window"):
            launcher.plan_backprojection(huge, 4, dtype, 100, path="shared")
    assert launcher.plan_backprojection(table, 1, np.float64, 100, path="global").path == "global"
    with pytest.raises(ValueError, match="path: expected one of"):
        launcher.plan_backprojection(table, 4, np.float32, 100, path="texture")
    with pytest.raises(ValueError, match="expected float32 or float64"):
        launcher.plan_backprojection(table, 4, np.float16, 100)


def test_plan_backprojection_of_two_stage_tables():
    """Stage 2 reads planes at pitch spacing / oversampling: fine oversampling
    widens its window past the float32 limit and moves it to global memory."""
    g = RadonGeometry.grid(13, 16, 223)
    vol = VolumeGeometry((128, 128, 128))
    for over, path in ((2, "shared"), (8, "global")):
        plan = TwoStagePlan(g, vol, oversampling=over)
        assert launcher.plan_backprojection(plan.table1, 1, np.float32, plan.n_theta).path == "shared"
        assert launcher.plan_backprojection(plan.table2, 1, np.float32, plan.n_phi).path == path


@pytest.mark.parametrize("dtype, limit", [(np.float32, 12288), (np.float64, 6144)])
def test_plan_forward_uses_global_atomics_past_the_shared_histogram(dtype, limit):
    assert launcher.plan_forward(limit, dtype) == "shared"
    assert launcher.plan_forward(limit + 1, dtype) == "global"
    assert launcher.plan_forward(10, dtype, path="global") == "global"
    with pytest.raises(ValueError, match="path: 'shared' was asked for, but a histogram of n_samples"):
        launcher.plan_forward(limit + 1, dtype, path="shared")
    with pytest.raises(ValueError, match="path: expected one of"):
        launcher.plan_forward(10, dtype, path="atomic")
