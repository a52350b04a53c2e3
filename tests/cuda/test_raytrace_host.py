"""raytrace.cu's own source, compiled for the CPU (g++, tests/cuda/raytrace_host_harness.cpp),
equals the Numba operators: the general kernels bit for bit in the forward
direction (same rays, same float64 operations), the transposes and paper 003's
structured kernel to float64 rounding; the float32 marches (precision="float32":
structured Siddon, structured and general Joseph) within their documented
bounds and 1e-5 of the float64 operators; the tiled z-fastest copies exactly.
No GPU needed; what this cannot check
(parallel threads, atomics, launch configuration) the `gpu` tests in
tests/operators/test_projector_cuda.py do."""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np
import pytest

from leveret.cuda.raytrace import (JOSEPH_PAD_Z, joseph_float32_bound, structured_float32_bound, structured_ratio,
                                   view_parameters, voxel_row_extent, voxel_rows_per_voxel,
                                   voxel_view_floats)
from leveret.geometry import ConeGeometry, ParallelGeometry, VolumeGeometry
from leveret.operators import Projector

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operators"))
from test_projector import GEOMETRIES, adjoint_scale  # noqa: E402
from test_projector_cuda import STRUCTURED  # noqa: E402

from host_build import build_host_harness  # noqa: E402 (this folder is on sys.path)

CASES = {**GEOMETRIES, **STRUCTURED}


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    # LEVERET_JG_K=8: structured Joseph's gather in z chunks of 8 (32 on the
    # GPU), so that the test volumes (nz 7-23) span one to three chunks;
    # LEVERET_JV_KZ=1: the voxel transpose's warps cover 32 z voxels (512 on
    # the GPU), so the tall case below spans three.
    return build_host_harness(tmp_path_factory, "raytrace", ("LEVERET_JG_K=8", "LEVERET_JV_KZ=1"))


def _ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def _kernel_inputs(geometry, A):
    """What raytrace.py passes the general kernels: kind, per-view parameters,
    g (spacings, grid offset and scale), is2d, n_rows, n_cols."""
    kind, params = view_parameters(geometry)
    g = np.zeros(8)
    g[0] = getattr(geometry, "det_spacing", 1.0)
    g[1] = getattr(geometry, "row_spacing", 1.0)
    g[2:5], g[5:8] = A._offset, A._scale
    is2d = int(isinstance(geometry, ParallelGeometry) and geometry.is_2d)
    shape = geometry.projection_shape
    n_rows, n_cols = (1, shape[1]) if is2d else (shape[1], shape[2])
    return kind, params, g, is2d, n_rows, n_cols


@pytest.mark.parametrize("model", ["siddon", "joseph"])
@pytest.mark.parametrize("name", list(CASES))
def test_host_build_equals_numba(lib, name, model, rng):
    geometry, volume = CASES[name]
    A = Projector(geometry, volume, model=model, precision="float64", backend="cpu")
    kind, params, g, is2d, n_rows, n_cols = _kernel_inputs(geometry, A)
    shape = geometry.projection_shape
    nz, ny, nx = A._grid3
    x = rng.standard_normal(volume.shape)
    y = rng.standard_normal(shape)
    which = 0 if model == "siddon" else 2
    out = np.full(shape, np.nan)
    lib.run_general(which, _ptr(x), _ptr(out), nx, ny, nz, _ptr(params), _ptr(g), shape[0], n_rows, n_cols,
                    kind, is2d)
    ref = A(x)
    np.testing.assert_array_equal(out, ref)           # same rays, same operations: bit for bit
    back = np.zeros(volume.shape)
    lib.run_general(which + 1, _ptr(back), _ptr(y), nx, ny, nz, _ptr(params), _ptr(g), shape[0], n_rows,
                    n_cols, kind, is2d)
    ref_back = A.T(y)                                  # other summation order: rounding
    np.testing.assert_allclose(back, ref_back, rtol=0, atol=1e-13 * np.abs(ref_back).max())
    if kind == 1 and model == "siddon" and structured_ratio(params, n_rows, n_cols, 1 / A._scale) <= 1:
        volT = np.ascontiguousarray(x.transpose(1, 2, 0))
        out = np.full(shape, np.nan)
        lib.run_structured(0, _ptr(volT), _ptr(out), nx, ny, nz, _ptr(params), _ptr(g), shape[0], n_rows, n_cols)
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-12 * np.abs(ref).max())
        backT = np.zeros((ny, nx, nz))
        lib.run_structured(1, _ptr(backT), _ptr(y), nx, ny, nz, _ptr(params), _ptr(g), shape[0], n_rows, n_cols)
        np.testing.assert_allclose(backT.transpose(2, 0, 1), ref_back, rtol=0,
                                   atol=1e-12 * np.abs(ref_back).max())
        # the gather form of the same transpose (voxel-driven, no atomics)
        gathered = np.full(volume.shape, np.nan)
        lib.run_gather(_ptr(gathered), _ptr(y), nx, ny, nz, _ptr(params), _ptr(g), shape[0], n_rows, n_cols)
        np.testing.assert_allclose(gathered, ref_back, rtol=0, atol=1e-12 * np.abs(ref_back).max())


@pytest.mark.parametrize("name", list(STRUCTURED))
def test_host_build_structured_float32(lib, name, rng):
    """The float32 march of the structured path (precision="float32" on the GPU)
    against the float64 CPU operator: inside the bound documented in raytrace.cu
    (structured_float32_bound) and inside the issue's 1e-5 of the largest value;
    its transpose uses the same weights (adjoint identity to float32 rounding)."""
    geometry, volume = STRUCTURED[name]
    A = Projector(geometry, volume, model="siddon", precision="float64", backend="cpu")
    _, params, g, _, n_rows, n_cols = _kernel_inputs(geometry, A)
    n_views = geometry.n_views
    nz, ny, nx = volume.shape
    x = rng.standard_normal(volume.shape).astype(np.float32)
    y = rng.standard_normal(geometry.projection_shape).astype(np.float32)
    ref = A(x.astype(np.float64))
    volT = np.ascontiguousarray(x.transpose(1, 2, 0))
    out = np.full(geometry.projection_shape, np.nan, np.float32)
    lib.run_structured_fast(0, _ptr(volT), _ptr(out), nx, ny, nz, _ptr(params), _ptr(g), n_views, n_rows, n_cols)
    assert not np.isnan(out).any()
    err = np.abs(out - ref).max()
    bound = structured_float32_bound(params, n_rows, n_cols, volume.shape, 1 / A._scale,
                                     np.abs(x).max(), np.abs(ref).max())
    assert err <= bound, (err, bound)
    assert err <= 1e-5 * np.abs(ref).max()
    backT = np.zeros((ny, nx, nz), np.float32)
    lib.run_structured_fast(1, _ptr(backT), _ptr(y), nx, ny, nz, _ptr(params), _ptr(g), n_views, n_rows, n_cols)
    back = backT.transpose(2, 0, 1).astype(np.float64)
    ref_back = A.T(y.astype(np.float64))
    assert np.abs(back - ref_back).max() <= 1e-5 * np.abs(ref_back).max()
    lhs = np.vdot(out.astype(np.float64), y.astype(np.float64))
    rhs = np.vdot(x.astype(np.float64), back)
    assert abs(lhs - rhs) <= 1e-5 * adjoint_scale(lhs, out, y)


@pytest.mark.parametrize("name", list(CASES))
def test_host_build_joseph_float32(lib, name, rng):
    """The float32 Joseph march (precision="float32" on the GPU) against the
    float64 CPU operator: inside joseph_float32_bound (raytrace.cu's derivation)
    and the issue's 1e-5 of the largest value; the transpose uses the same
    weights (adjoint identity to float32 rounding)."""
    geometry, volume = CASES[name]
    A = Projector(geometry, volume, model="joseph", precision="float64", backend="cpu")
    kind, params, g, is2d, n_rows, n_cols = _kernel_inputs(geometry, A)
    shape = geometry.projection_shape
    nz, ny, nx = A._grid3
    x = rng.standard_normal(volume.shape).astype(np.float32)
    y = rng.standard_normal(shape).astype(np.float32)
    ref = A(x.astype(np.float64))
    out = np.full(shape, np.nan, np.float32)
    lib.run_joseph_fast(0, _ptr(x), _ptr(out), nx, ny, nz, _ptr(params), _ptr(g), shape[0], n_rows, n_cols,
                        kind, is2d)
    assert not np.isnan(out).any()
    err = np.abs(out - ref).max()
    assert err <= joseph_float32_bound(A._grid3, 1 / A._scale, np.abs(x).max(), np.abs(ref).max())
    assert err <= 1e-5 * np.abs(ref).max()
    back = np.zeros(volume.shape, np.float32)
    lib.run_joseph_fast(1, _ptr(back), _ptr(y), nx, ny, nz, _ptr(params), _ptr(g), shape[0], n_rows, n_cols,
                        kind, is2d)
    ref_back = A.T(y.astype(np.float64))
    assert np.abs(back - ref_back).max() <= 1e-5 * np.abs(ref_back).max()
    lhs = np.vdot(out.astype(np.float64), y.astype(np.float64))
    rhs = np.vdot(x.astype(np.float64), back.astype(np.float64))
    assert abs(lhs - rhs) <= 1e-5 * adjoint_scale(lhs, out, y)


@pytest.mark.parametrize("name", list(STRUCTURED))
def test_host_build_structured_joseph(lib, name, rng):
    """Structured Joseph (float32, planes shared by a column's rows) against
    the float64 CPU Joseph: inside joseph_float32_bound and 1e-5 of the largest
    value; its transpose has the same weights."""
    geometry, volume = STRUCTURED[name]
    A = Projector(geometry, volume, model="joseph", precision="float64", backend="cpu")
    _, params, g, _, n_rows, n_cols = _kernel_inputs(geometry, A)
    assert structured_ratio(params, n_rows, n_cols, 1 / A._scale) <= 1
    n_views = geometry.n_views
    nz, ny, nx = volume.shape
    x = rng.standard_normal(volume.shape).astype(np.float32)
    y = rng.standard_normal(geometry.projection_shape).astype(np.float32)
    ref = A(x.astype(np.float64))
    pad = JOSEPH_PAD_Z
    volP = np.zeros((ny + 2, nx + 2, nz + 2 * pad), np.float32)   # zero borders, z fastest
    volP[1:-1, 1:-1, pad:-pad] = x.transpose(1, 2, 0)
    out = np.full(geometry.projection_shape, np.nan, np.float32)
    lib.run_structured_joseph(0, _ptr(volP), _ptr(out), nx, ny, nz, _ptr(params), _ptr(g), n_views, n_rows, n_cols)
    assert not np.isnan(out).any()
    err = np.abs(out - ref).max()
    assert err <= joseph_float32_bound(volume.shape, 1 / A._scale, np.abs(x).max(), np.abs(ref).max())
    assert err <= 1e-5 * np.abs(ref).max()
    backP = np.zeros_like(volP)
    lib.run_structured_joseph(1, _ptr(backP), _ptr(y), nx, ny, nz, _ptr(params), _ptr(g), n_views, n_rows, n_cols)
    back = backP[1:-1, 1:-1, pad:-pad].transpose(2, 0, 1).astype(np.float64)
    ref_back = A.T(y.astype(np.float64))
    assert np.abs(back - ref_back).max() <= 1e-5 * np.abs(ref_back).max()
    lhs = np.vdot(out.astype(np.float64), y.astype(np.float64))
    assert abs(lhs - np.vdot(x.astype(np.float64), back)) <= 1e-5 * adjoint_scale(lhs, out, y)
    # The gather form of the same transpose (poisoned output: every voxel
    # written): it gathers the same float32 terms the scatter adds, and on
    # the host both add each voxel's terms in the same order (views, then
    # columns, then rows, ascending), so the two are bit-identical: a missing,
    # extra or differently rounded weight anywhere would show.
    gathered = np.full(volume.shape, np.nan, np.float32)
    lib.run_joseph_gather(_ptr(gathered), _ptr(y), nx, ny, nz, _ptr(params), _ptr(g), n_views, n_rows, n_cols)
    np.testing.assert_array_equal(gathered, back)
    # The voxel-driven transpose (default on the GPU): the same weights from the
    # same set-up, its z fractions in float64 where the forward's march rounds
    # in float32, so equal to the scatter to that march's rounding; z-fastest
    # output poisoned: every voxel written.
    volT = np.full((ny, nx, nz), np.nan, np.float32)
    lib.run_joseph_voxel(_ptr(volT), _ptr(y), nx, ny, nz, _ptr(params), _ptr(g), n_views, n_rows, n_cols,
                         _ptr(voxel_view_floats(params)))
    voxel = volT.transpose(2, 0, 1).astype(np.float64)
    assert not np.isnan(voxel).any()
    assert np.abs(voxel - back).max() <= 2e-6 * np.abs(back).max()
    assert np.abs(voxel - ref_back).max() <= 1e-5 * np.abs(ref_back).max()
    assert abs(lhs - np.vdot(x.astype(np.float64), voxel)) <= 1e-5 * adjoint_scale(lhs, out, y)


@pytest.fixture(scope="module")
def lib_patch2(tmp_path_factory):
    """raytrace.cu built with the voxel transpose's 2 x 2 patches per warp."""
    return build_host_harness(tmp_path_factory, "raytrace", ("LEVERET_JV_PATCH=2", "LEVERET_JV_KZ=1"))


@pytest.mark.parametrize("build", ["lib", "lib_patch2"])
def test_host_build_joseph_voxel_tall(build, request, rng):
    """The voxel transpose over several z chunks (70 voxels, warps of 32),
    anisotropic voxels, an off-centre detector and rows up to ~1.4 per voxel,
    with one voxel column per warp and with 2 x 2 patches (odd nx, ny: partial
    patches): the float64 CPU transpose to 1e-6 of the largest value; output
    poisoned."""
    lib = request.getfixturevalue(build)
    geometry = ConeGeometry.circular(np.linspace(0, 2 * np.pi, 9, endpoint=False), sid=60, sdd=90, n_rows=61,
                                     n_cols=29, pixel_size=1.4, det_offset=(0.7, -1.3))
    volume = VolumeGeometry((70, 17, 19), (1.0, 1.1, 0.6), center=(0.3, -0.4, 1.1))
    A = Projector(geometry, volume, model="joseph", precision="float64", backend="cpu")
    _, params, g, _, n_rows, n_cols = _kernel_inputs(geometry, A)
    nz, ny, nx = volume.shape
    assert 1 < voxel_rows_per_voxel(params, n_cols, volume.shape, A._offset, A._scale) < 4
    y = rng.standard_normal(geometry.projection_shape).astype(np.float32)
    volT = np.full((ny, nx, nz), np.nan, np.float32)
    lib.run_joseph_voxel(_ptr(volT), _ptr(y), nx, ny, nz, _ptr(params), _ptr(g), geometry.n_views, n_rows, n_cols,
                         _ptr(voxel_view_floats(params)))
    ref = A.T(y.astype(np.float64))
    np.testing.assert_allclose(volT.transpose(2, 0, 1), ref, rtol=0, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("shape", [(70, 3, 45), (32, 32, 32), (1, 5, 33), (33, 2, 1)])
def test_host_build_zfast_copies(lib, shape, padded, rng):
    """The tiled copies between the volume (nz, ny, nx) and the structured
    kernels' z-fastest layout (ny, nx, nz), plain or with structured Joseph's
    borders (one voxel in x and y, JOSEPH_PAD_Z in z, left untouched), at sizes
    that are and are not multiples of the 32 x 32 tile; outputs poisoned first."""
    nz, ny, nx = shape
    p, q = (1, JOSEPH_PAD_Z) if padded else (0, 0)
    vol = rng.standard_normal(shape).astype(np.float32)
    volT = np.full((ny + 2 * p, nx + 2 * p, nz + 2 * q), np.nan, np.float32)
    lib.run_zfast(1, int(padded), _ptr(vol), _ptr(volT), nx, ny, nz)
    inner = volT[p:p + ny, p:p + nx, q:q + nz]
    np.testing.assert_array_equal(inner, vol.transpose(1, 2, 0))
    border = np.ones(volT.shape, bool)
    border[p:p + ny, p:p + nx, q:q + nz] = False
    assert np.isnan(volT[border]).all()
    back = np.full(shape, np.nan, np.float32)
    lib.run_zfast(0, int(padded), _ptr(volT), _ptr(back), nx, ny, nz)
    np.testing.assert_array_equal(back, vol)


def test_voxel_transpose_reach_checks():
    """The voxel transpose's launcher checks: rows per z voxel ``h`` (finer
    rows need more padding than the kernel has: its caller falls back to the
    atomic transpose) and the row-coordinate extent; a source inside the grid's
    box has no bound."""
    volume = VolumeGeometry((16, 16, 16), 1.0)
    coarse = ConeGeometry.circular(np.linspace(0, np.pi, 5), sid=60, sdd=90, n_rows=20, n_cols=30, pixel_size=1.5)
    fine = ConeGeometry.circular(np.linspace(0, np.pi, 5), sid=60, sdd=90, n_rows=200, n_cols=30, pixel_size=0.2)
    args = []
    for geometry in (coarse, fine):
        A = Projector(geometry, volume, model="joseph", backend="cpu")
        _, params = view_parameters(geometry)
        args.append((params, geometry.n_cols, volume.shape, A._offset, A._scale))
    h_coarse, h_fine = voxel_rows_per_voxel(*args[0]), voxel_rows_per_voxel(*args[1])
    # rows 1.5 (0.2) mm apart at 90 mm, so ~0.8-1.2 (5.9-8.9) rows per 1 mm voxel at 45-75 mm from the source
    assert 0.9 < h_coarse < 1.5 and h_fine > 4
    assert h_fine == pytest.approx(h_coarse * 1.5 / 0.2, rel=0.05)   # the narrower detector: other end columns
    assert 0 < voxel_row_extent(*args[0]) < 2 ** 30
    params, n_cols, shape, offset, scale = args[0]
    inside = params.copy()
    inside[:, :2] = 0.0   # the source at the grid's centre
    assert voxel_rows_per_voxel(inside, n_cols, shape, offset, scale) == np.inf
