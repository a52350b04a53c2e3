"""radon3d.cu's global-memory back-projection and both forward kernels, compiled for
the CPU from their own source (g++, tests/cuda/radon3d_host_harness.cpp) over the
launcher's grid, against the Numba kernels. No GPU needed: this checks the
fallback kernels' index arithmetic, bounds (every read is range-checked; outputs
are NaN-poisoned) and the launcher's grid. What it cannot check (threads in
parallel, real atomics, CuPy's launch) the `gpu` tests in
tests/algorithms/test_radon3d_cuda.py do; the shared-memory back-projection
(inline PTX) is checked by its NumPy mirror (tests/algorithms/test_radon3d_kernel_mirror.py).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from leveret import RadonGeometry, VolumeGeometry
from leveret.algorithms.radon3d import TwoStagePlan
from leveret.cpu import radon3d as cpu
from leveret.cuda import radon3d as launcher

from host_build import build_host_harness

TOL = {np.float32: 1e-5, np.float64: 1e-12}
VOLUMES = {
    "odd-offcentre": VolumeGeometry((17, 23, 37), (0.05, 0.04, 0.045), center=(0.02, -0.03, 0.01)),
    "thin": VolumeGeometry((5, 3, 70), 0.02),
    "one-column": VolumeGeometry((33, 9, 1), (0.03, 0.05, 0.02)),
    "coarse-voxels": VolumeGeometry((6, 11, 35), 0.5, center=(0.3, -0.2, 0.1)),
}


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    dll = build_host_harness(tmp_path_factory, "radon3d", launcher.DEFINES)
    dll.bad_reads.restype = ctypes.c_longlong
    dll.run_bp_global.argtypes = (
        [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_longlong,
            ctypes.c_longlong,
            ctypes.c_void_p,
            ctypes.c_longlong,
            ctypes.c_int,
            ctypes.c_void_p,
        ]
        + [ctypes.c_int] * 7
        + [ctypes.c_uint] * 3
    )
    dll.run_forward.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p] + [
        ctypes.c_int
    ] * 6
    return dll


def bp_global(lib, proj, table, out, *, zpt=4, proj_bstride=0, table_bstride=0, b_offset=0, accumulate=False):
    """What launcher.backproject(..., path="global") launches, run on the host."""
    assert proj.flags.c_contiguous and out.flags.c_contiguous and proj.dtype == out.dtype
    table = np.ascontiguousarray(table, np.float64)
    nb, ny, nx = out.shape
    gx, gy, gz = launcher.backproject_grid(out.shape, zpt)
    before = lib.bad_reads()
    lib.run_bp_global(
        int(proj.dtype == np.float64),
        zpt,
        proj.ctypes.data,
        proj.nbytes,
        proj_bstride,
        table.ctypes.data,
        table.shape[0],
        table_bstride,
        out.ctypes.data,
        nx,
        ny,
        nb,
        proj.shape[-2],
        proj.shape[-1],
        b_offset,
        int(accumulate),
        gx,
        gy,
        gz,
    )
    assert lib.bad_reads() == before, "a read outside the projections or the table"
    return out


def rel(a, b):
    a = np.asarray(a, np.float64)
    return np.inf if not np.all(np.isfinite(a)) else float(np.abs(a - b).max() / np.abs(b).max())


def _geometry(vol, n_dirs=120, spacing=0.03):
    """Samples covering the volume (so most reads are inside), plus a margin that is not."""
    half = 0.5 * np.linalg.norm(np.multiply(vol.shape, vol.voxel_size)) + np.linalg.norm(vol.center)
    return RadonGeometry.uniform(n_dirs, int(1.6 * half / spacing) + 3, spacing=spacing)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(VOLUMES))
def test_global_backprojection_equals_numba(lib, rng, name, dtype):
    """zpt 4 and 1, a slab (b_offset), accumulate; random projections whose
    sample range leaves some voxels outside (1.6 x the half-diagonal, not 2)."""
    vol = VOLUMES[name]
    g = _geometry(vol)
    table = cpu.sample_table(g.directions, g.n_samples, g.spacing, vol)
    proj = rng.standard_normal(g.projection_shape).astype(dtype)
    ref = cpu.backproject(proj.astype(np.float64), table, np.empty(vol.shape))
    for zpt in (4, 1):
        out = bp_global(lib, proj, table, np.full(vol.shape, np.nan, dtype), zpt=zpt)
        assert rel(out, ref) < TOL[dtype]
    k = vol.nz // 2
    slab = bp_global(lib, proj, table, np.full((vol.nz - k,) + vol.shape[1:], np.nan, dtype), b_offset=k)
    assert rel(slab, ref[k:]) < TOL[dtype]
    out = bp_global(lib, proj, table, out, accumulate=True)
    assert rel(out, 2 * ref) < TOL[dtype]
    # The off-range branch ran: some voxel's plane misses the samples.
    corners = np.array([(k, j, i) for k in (0, vol.nz - 1) for j in (0, vol.ny - 1) for i in (0, vol.nx - 1)])
    u = (
        corners[:, 2, None] * table[:, 0]
        + corners[:, 1, None] * table[:, 1]
        + corners[:, 0, None] * table[:, 2]
        + table[:, 3]
    )
    assert u.min() < -1 or u.max() > g.n_samples


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_global_backprojection_two_stage_strides(lib, rng, dtype):
    """Per-b projections and tables (stage 1) and per-b projections (stage 2)."""
    g = RadonGeometry.grid(7, 12, 40, spacing=0.03)
    vol = VolumeGeometry((9, 13, 11), 0.04, center=(0.02, 0.0, -0.03))
    plan = TwoStagePlan(g, vol, oversampling=2)
    filt = rng.standard_normal(g.projection_shape)
    by_phi = np.ascontiguousarray(filt[plan.order]).reshape(plan.n_phi, plan.n_theta, -1).astype(dtype)
    planes = bp_global(
        lib,
        by_phi,
        plan.table1,
        np.full(plan.plane_shape, np.nan, dtype),
        zpt=1,
        proj_bstride=plan.n_theta * g.n_samples,
        table_bstride=plan.n_theta,
    )
    ref_planes = np.empty(plan.plane_shape)
    for j in range(plan.n_phi):
        cpu.backproject(
            by_phi[j].astype(np.float64), plan.table1[j * plan.n_theta : (j + 1) * plan.n_theta], ref_planes[j][None]
        )
    assert rel(planes, ref_planes) < TOL[dtype]
    slices = np.ascontiguousarray(ref_planes.transpose(1, 0, 2)).astype(dtype)
    out = bp_global(
        lib, slices, plan.table2, np.full(vol.shape, np.nan, dtype), zpt=1, proj_bstride=plan.n_phi * plan.n_r
    )
    ref = np.empty(vol.shape)
    for k in range(vol.nz):
        cpu.backproject(slices[k].astype(np.float64), plan.table2, ref[k][None])
    assert rel(out, ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shared", [1, 0], ids=["shared-histogram", "global-atomics"])
def test_forward_kernels_equal_numba(lib, rng, dtype, shared):
    """Both forward kernels over the launcher's grid, several z slabs per
    direction (k_per_block 1, 4 and the launcher's choice); zeros in the volume
    are skipped, voxels off the sampled range contribute nothing."""
    vol = VOLUMES["odd-offcentre"]
    g = _geometry(vol, n_dirs=50)
    table = cpu.sample_table(g.directions, g.n_samples, g.spacing, vol)
    x = rng.standard_normal(vol.shape).astype(dtype)
    x[::3] = 0
    ref = cpu.forward(x.astype(np.float64), table, np.empty(g.projection_shape))
    nz, ny, nx = vol.shape
    for kpb in (1, 4, launcher.forward_k_per_block(nz, g.n_dirs)):
        out = np.zeros(g.projection_shape, dtype)  # the launcher zeroes out first
        lib.run_forward(
            int(dtype == np.float64),
            shared,
            x.ctypes.data,
            out.ctypes.data,
            table.ctypes.data,
            nx,
            ny,
            nz,
            g.n_dirs,
            g.n_samples,
            kpb,
        )
        assert rel(out, ref) < TOL[dtype]
