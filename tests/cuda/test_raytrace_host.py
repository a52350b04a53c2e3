"""The raytrace_*.cu kernels' own source, compiled for the CPU (g++,
tests/cuda/raytrace_host_harness.cpp), equals the Numba operators: the general
kernels bit for bit in the forward direction (same rays, same float64
operations), the transposes and the structured Siddon kernel to float64
rounding; the float32 marches (precision="float32": structured Siddon,
structured and general Joseph) within their documented bounds and 1e-5 of the
float64 operators; the gather transpose to float32 rounding of the atomic one;
the tiled z-fastest copies exactly. Also the launcher's checks (validity of the
structured path, the gather transpose's reach) and a NumPy transcription of the
structured Siddon algorithm. No GPU needed; what this cannot check (parallel
threads, atomics, launch configuration) tests/cuda/test_raytrace_gpu.py does."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from leveret.cuda._module import KERNEL_DIR, kernel_files
from leveret.cuda.raytrace import (
    JOSEPH_PAD_Z,
    KERNEL_CONSTANTS,
    joseph_float32_bound,
    joseph_padded_nz,
    structured_float32_bound,
    structured_ratio,
    view_parameters,
    voxel_kz,
    voxel_row_extent,
    voxel_rows_per_voxel,
    voxel_view_floats,
    voxel_z_range,
    voxel_z_slices,
)
from leveret.geometry import ConeGeometry, ParallelGeometry, VolumeGeometry
from leveret.operators import Projector

from cases import FEW_ROWS, GEOMETRIES, ROW_WINDOWS, STRUCTURED, TALL, UNCLAMPED_ROWS, adjoint_scale
from host_build import build_host_harness  # this folder is on sys.path (pytest's rootdir-relative import)

CASES = {**GEOMETRIES, **STRUCTURED}


def _defines(**overrides) -> tuple[str, ...]:
    """raytrace.py's kernel constants as -D options, some replaced."""
    return tuple(f"{k}={v}" for k, v in {**KERNEL_CONSTANTS, **overrides}.items())


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    """The kernels built with the constants the GPU build uses."""
    return build_host_harness(tmp_path_factory, "raytrace", _defines())


@pytest.fixture(scope="module")
def lib_patch2(tmp_path_factory):
    """The gather transpose with 2 x 2 voxel columns per warp (LEVERET_JV_PATCH=2)."""
    return build_host_harness(tmp_path_factory, "raytrace", _defines(LEVERET_JV_PATCH=2))


@pytest.mark.parametrize("path", [p for p in kernel_files() if p.name.startswith("raytrace_")], ids=lambda p: p.name)
def test_kernel_files_need_the_python_constants(lib, path):
    """Each raytrace_*.cu file preprocesses with raytrace.py's constants, and
    those that use one stop with an #error naming it when it is missing
    (preprocessor only: no CUDA needed)."""
    cxx = shutil.which("g++") or shutil.which("c++")  # there: the lib fixture built with it
    cmd = [cxx, "-E", "-x", "c++", f"-I{KERNEL_DIR}", str(path), "-o", "/dev/null"]
    assert subprocess.run(cmd + [f"-D{d}" for d in _defines()], capture_output=True).returncode == 0
    text = path.read_text()
    for name in KERNEL_CONSTANTS:
        if name in text:
            res = subprocess.run(
                cmd + [f"-D{d}" for d in _defines() if not d.startswith(name + "=")], capture_output=True, text=True
            )
            assert res.returncode != 0 and "#error" in res.stderr and name in res.stderr, (name, res.stderr)


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
    lib.run_general(which, _ptr(x), _ptr(out), nx, ny, nz, _ptr(params), _ptr(g), shape[0], n_rows, n_cols, kind, is2d)
    ref = A(x)
    np.testing.assert_array_equal(out, ref)  # same rays, same operations: bit for bit
    back = np.zeros(volume.shape)
    lib.run_general(
        which + 1, _ptr(back), _ptr(y), nx, ny, nz, _ptr(params), _ptr(g), shape[0], n_rows, n_cols, kind, is2d
    )
    ref_back = A.T(y)  # other summation order: rounding
    # measured at most 8.4e-16 of the largest value (worst of 5 seeds)
    np.testing.assert_allclose(back, ref_back, rtol=0, atol=1e-14 * np.abs(ref_back).max())
    # The structured kernel splits each ray into other pieces: measured at most
    # 7.5e-14 (forward) and 3.6e-14 (transpose) of the largest value.
    if kind == 1 and model == "siddon" and structured_ratio(params, n_rows, n_cols, 1 / A._scale) <= 1:
        volT = np.ascontiguousarray(x.transpose(1, 2, 0))
        out = np.full(shape, np.nan)
        lib.run_structured(0, _ptr(volT), _ptr(out), nx, ny, nz, _ptr(params), _ptr(g), shape[0], n_rows, n_cols)
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-12 * np.abs(ref).max())
        backT = np.zeros((ny, nx, nz))
        lib.run_structured(1, _ptr(backT), _ptr(y), nx, ny, nz, _ptr(params), _ptr(g), shape[0], n_rows, n_cols)
        np.testing.assert_allclose(backT.transpose(2, 0, 1), ref_back, rtol=0, atol=1e-12 * np.abs(ref_back).max())


@pytest.mark.parametrize("name", list(STRUCTURED))
def test_host_build_structured_float32(lib, name, rng):
    """The float32 march of the structured path (precision="float32" on the GPU)
    against the float64 CPU operator: inside the bound documented in raytrace.cu
    (structured_float32_bound) and inside 1e-5 of the largest value;
    its transpose uses the same weights (adjoint identity to float32 rounding),
    launched in one z slab or in slabs of 3 slices (uneven last slab): the
    slabs split each ray at their faces and add up to the one-slab transpose."""
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
    lib.run_structured_fast(0, _ptr(volT), _ptr(out), nx, ny, nz, _ptr(params), _ptr(g), n_views, n_rows, n_cols, nz)
    assert not np.isnan(out).any()
    err = np.abs(out - ref).max()
    bound = structured_float32_bound(
        params, n_rows, n_cols, volume.shape, 1 / A._scale, np.abs(x).max(), np.abs(ref).max()
    )
    assert err <= bound, (err, bound)
    assert err <= 1e-5 * np.abs(ref).max()
    ref_back = A.T(y.astype(np.float64))
    lhs = np.vdot(out.astype(np.float64), y.astype(np.float64))
    backs = []
    assert nz > 6  # several slabs of 3, the last one shorter or not
    for z_slab in (nz, 3):
        backT = np.zeros((ny, nx, nz), np.float32)
        lib.run_structured_fast(
            1, _ptr(backT), _ptr(y), nx, ny, nz, _ptr(params), _ptr(g), n_views, n_rows, n_cols, z_slab
        )
        back = backT.transpose(2, 0, 1).astype(np.float64)
        assert np.abs(back - ref_back).max() <= 1e-5 * np.abs(ref_back).max(), z_slab
        rhs = np.vdot(x.astype(np.float64), back)
        assert abs(lhs - rhs) <= 1e-5 * adjoint_scale(lhs, out, y), z_slab
        backs.append(back)
    np.testing.assert_allclose(backs[1], backs[0], rtol=0, atol=1e-6 * np.abs(backs[0]).max())


@pytest.mark.parametrize("name", list(CASES))
def test_host_build_joseph_float32(lib, name, rng):
    """The float32 Joseph march (precision="float32" on the GPU) against the
    float64 CPU operator: inside joseph_float32_bound (raytrace.cu's derivation)
    and 1e-5 of the largest value; the transpose uses the same
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
    lib.run_joseph_fast(0, _ptr(x), _ptr(out), nx, ny, nz, _ptr(params), _ptr(g), shape[0], n_rows, n_cols, kind, is2d)
    assert not np.isnan(out).any()
    err = np.abs(out - ref).max()
    assert err <= joseph_float32_bound(A._grid3, 1 / A._scale, np.abs(x).max(), np.abs(ref).max())
    assert err <= 1e-5 * np.abs(ref).max()
    back = np.zeros(volume.shape, np.float32)
    lib.run_joseph_fast(1, _ptr(back), _ptr(y), nx, ny, nz, _ptr(params), _ptr(g), shape[0], n_rows, n_cols, kind, is2d)
    ref_back = A.T(y.astype(np.float64))
    assert np.abs(back - ref_back).max() <= 1e-5 * np.abs(ref_back).max()
    lhs = np.vdot(out.astype(np.float64), y.astype(np.float64))
    rhs = np.vdot(x.astype(np.float64), back.astype(np.float64))
    assert abs(lhs - rhs) <= 1e-5 * adjoint_scale(lhs, out, y)


@pytest.mark.parametrize("name", list(STRUCTURED))
def test_host_build_structured_joseph(lib, name, rng):
    """Structured Joseph (float32, planes shared by a column's rows) against
    the float64 CPU Joseph: inside joseph_float32_bound and 1e-5 of the largest
    value; its transposes (the scatter, the voxel gather and the band) have the
    same weights."""
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
    volP = np.zeros((ny + 2, nx + 2, joseph_padded_nz(nz)), np.float32)  # zero borders, z fastest
    volP[1:-1, 1:-1, pad : pad + nz] = x.transpose(1, 2, 0)
    out = np.full(geometry.projection_shape, np.nan, np.float32)
    lib.run_structured_joseph(0, _ptr(volP), _ptr(out), nx, ny, nz, _ptr(params), _ptr(g), n_views, n_rows, n_cols)
    assert not np.isnan(out).any()
    err = np.abs(out - ref).max()
    assert err <= joseph_float32_bound(volume.shape, 1 / A._scale, np.abs(x).max(), np.abs(ref).max())
    assert err <= 1e-5 * np.abs(ref).max()
    backP = np.zeros_like(volP)
    lib.run_structured_joseph(1, _ptr(backP), _ptr(y), nx, ny, nz, _ptr(params), _ptr(g), n_views, n_rows, n_cols)
    back = backP[1:-1, 1:-1, pad : pad + nz].transpose(2, 0, 1).astype(np.float64)
    ref_back = A.T(y.astype(np.float64))
    assert np.abs(back - ref_back).max() <= 1e-5 * np.abs(ref_back).max()
    lhs = np.vdot(out.astype(np.float64), y.astype(np.float64))
    assert abs(lhs - np.vdot(x.astype(np.float64), back)) <= 1e-5 * adjoint_scale(lhs, out, y)
    # The voxel-driven transpose (transpose="gather" on the GPU): the same weights from the
    # same set-up, its z fractions in float64 where the forward's march rounds
    # in float32, so equal to the scatter to that march's rounding; z-fastest
    # output poisoned: every voxel written.
    volT = np.full((ny, nx, nz), np.nan, np.float32)
    kz = voxel_kz(nz)
    lib.run_joseph_voxel(
        _ptr(volT),
        _ptr(y),
        nx,
        ny,
        nz,
        _ptr(params),
        _ptr(g),
        n_views,
        n_rows,
        n_cols,
        _ptr(voxel_view_floats(params)),
        kz,
        0,
        -(-nz // (32 * kz)),
    )
    voxel = volT.transpose(2, 0, 1).astype(np.float64)
    assert not np.isnan(voxel).any()
    assert np.abs(voxel - back).max() <= 2e-6 * np.abs(back).max()  # measured at most 3.1e-7
    assert np.abs(voxel - ref_back).max() <= 1e-5 * np.abs(ref_back).max()
    assert abs(lhs - np.vdot(x.astype(np.float64), voxel)) <= 1e-5 * adjoint_scale(lhs, out, y)
    # The band transpose (transpose="scatter" where the gather transpose applies): the voxel
    # transpose's weights, added per (column, plane) voxel; the zero border collects nothing
    # the volume keeps.
    band = _band_transpose(lib, geometry, volume, A, y).astype(np.float64)
    assert np.abs(band - voxel).max() <= 2e-6 * np.abs(voxel).max()
    assert np.abs(band - ref_back).max() <= 1e-5 * np.abs(ref_back).max()
    assert abs(lhs - np.vdot(x.astype(np.float64), band)) <= 1e-5 * adjoint_scale(lhs, out, y)


@pytest.mark.parametrize(
    "build, kz", [("lib", 1), ("lib", 4), ("lib", 16), ("lib_patch2", 1), ("lib_patch2", 12), ("lib_patch2", 16)]
)
def test_host_build_joseph_voxel_tall(build, kz, request, rng):
    """The gather transpose on 70 z voxels, anisotropic voxels, an off-centre
    detector and rows up to ~1.4 per voxel, with one voxel column per warp and
    with 2 x 2 patches (odd nx, ny: partial patches), at z depths per lane kz
    that give three z tiles of 32 voxels (kz 1) and one tile
    mostly beyond nz whose lanes' rows lie far outside the detector (kz 4, 12,
    16: the clamped rows read zeros): the float64 CPU transpose to 1e-6 of the
    largest value; output poisoned."""
    # measured at most 2.6e-7 of the largest value (float32 sums)
    _check_voxel_transpose([request.getfixturevalue(build)], *TALL, kz, (1, 4), 1e-6, rng)


@pytest.mark.parametrize("kz", [1, 16])
def test_host_build_joseph_voxel_dense_rows(lib, kz, rng):
    """The gather transpose where the detector rows are 4.7 to 7.2 per z voxel
    (the row windows of 5 and 7 rows either side, LEVERET_JV_HMAX): the
    float64 CPU transpose to 4e-6 of the largest value (float32 sums of up to
    16 rows per column; measured at most 1.6e-6 over 10 seeds); output poisoned."""
    _check_voxel_transpose([lib], *_dense_rows_case(), kz, (4, 8), 4e-6, rng)


@pytest.mark.parametrize("kz", [1, 8, 16])
def test_host_build_joseph_voxel_every_row_window(lib, lib_patch2, kz, rng):
    """The gather transpose from 0.8 (the voxels farthest from the source:
    36 / ((28 + 12 sqrt 2) 0.98)) to ~6 detector rows per z voxel
    (cases.ROW_WINDOWS): every row window from two rows to the widest, the
    odd ones (centred on the nearest row) and the even ones, with one voxel
    column per warp and 2 x 2 patches: the float64 CPU transpose to 4e-6 of
    the largest value (float32 sums of up to 16 rows per column); output
    poisoned."""
    _check_voxel_transpose([lib, lib_patch2], *ROW_WINDOWS, kz, (6, 8), 4e-6, rng)


@pytest.mark.parametrize("kz", [1, 8])
def test_host_build_joseph_voxel_sparse_rows(lib, lib_patch2, kz, rng):
    """The gather transpose where the detector rows are 0.3 to 0.7 per z voxel,
    so that some (view, column, plane) numbers take the one-row window (rows
    two or more voxels apart) and others the two-row one, with one voxel
    column per warp and 2 x 2 patches: the float64 CPU transpose to 1e-6 of
    the largest value; output poisoned."""
    # the densest rows: two-row windows there, one-row windows further from the source
    _check_voxel_transpose([lib, lib_patch2], *_sparse_rows_case(), kz, (0.5, 1), 1e-6, rng)


def _dense_rows_case():
    volume = VolumeGeometry((16, 16, 16), 1.0)
    return ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 7, endpoint=False), sid=60, sdd=90, n_rows=120, n_cols=30, pixel_size=0.25
    ), volume


def _sparse_rows_case():
    return ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 9, endpoint=False), 40, 60, 10, 30, 6.0, det_offset=(0.0, 1.3)
    ), VolumeGeometry((40, 20, 20), 1.0)


@pytest.mark.parametrize(
    "case, rows_per_voxel, tol",
    [("tall", (1, 4), 1e-6), ("dense", (4, 8), 4e-6), ("windows", (6, 8), 4e-6), ("sparse", (0.5, 1), 1e-6)],
)
def test_host_build_joseph_band_row_windows(lib, case, rows_per_voxel, tol, rng):
    """The band transpose (transpose="scatter" where the gather transpose
    applies) on the gather transpose's row-window scans: rows 0.3 to 7.2 per z
    voxel (windows of two rows, of four and six, and the any-width loop up to
    LEVERET_JV_HMAX either side), a tall grid with anisotropic voxels and an
    off-centre detector: the float64 CPU transpose to ``tol`` of the largest value."""
    geometry, volume = {
        "tall": lambda: TALL,
        "dense": _dense_rows_case,
        "windows": lambda: ROW_WINDOWS,
        "sparse": _sparse_rows_case,
    }[case]()
    _check_transposes(
        [lambda A, y: _band_transpose(lib, geometry, volume, A, y)], geometry, volume, rows_per_voxel, tol, rng
    )


def _band_transpose(lib, geometry, volume, A, y):
    """The host build's band transpose of ``y`` into structured Joseph's zero-bordered volume, as (nz, ny, nx)."""
    _, params, g, _, n_rows, n_cols = _kernel_inputs(geometry, A)
    nz, ny, nx = volume.shape
    pad = JOSEPH_PAD_Z
    volP = np.zeros((ny + 2, nx + 2, joseph_padded_nz(nz)), np.float32)
    lib.run_structured_joseph(
        2, _ptr(volP), _ptr(y), nx, ny, nz, _ptr(params), _ptr(g), geometry.n_views, n_rows, n_cols
    )
    return volP[1:-1, 1:-1, pad : pad + nz].transpose(2, 0, 1)


def _check_voxel_transpose(builds, geometry, volume, kz, rows_per_voxel, tol, rng):
    """Each host build's gather transpose at ``kz`` z voxels per lane: :func:`_check_transposes`."""
    runs = [lambda A, y, build=build: _voxel_transpose(build, geometry, volume, A, y, kz) for build in builds]
    _check_transposes(runs, geometry, volume, rows_per_voxel, tol, rng)


def _check_transposes(runs, geometry, volume, rows_per_voxel, tol, rng):
    """Each ``run(A, y)`` (a host build's transpose of a random sinogram ``y``)
    against the float64 CPU transpose ``A.T`` to ``tol`` of its largest value,
    on a scan whose most rows per voxel lie in ``rows_per_voxel`` (lo, hi):
    the windows the case is meant to take."""
    A = Projector(geometry, volume, model="joseph", precision="float64", backend="cpu")
    _, params, _, _, _, n_cols = _kernel_inputs(geometry, A)
    lo, hi = rows_per_voxel
    assert lo < voxel_rows_per_voxel(params, n_cols, volume.shape, A._offset, A._scale) < hi
    y = rng.standard_normal(geometry.projection_shape).astype(np.float32)
    ref = A.T(y.astype(np.float64))
    for run in runs:
        np.testing.assert_allclose(run(A, y), ref, rtol=0, atol=tol * np.abs(ref).max())


def _voxel_transpose(lib, geometry, volume, A, y, kz, z_range=None):
    """The host build's gather transpose of ``y`` at ``kz`` z voxels per lane,
    into a z-fastest volume poisoned with NaN, as (nz, ny, nx); ``z_range``:
    the slices its z tiles cover (None: all; the launcher zeroes the rest,
    as here)."""
    _, params, g, _, n_rows, n_cols = _kernel_inputs(geometry, A)
    nz, ny, nx = volume.shape
    k_base, slices = voxel_z_slices(nz, z_range)
    n_tiles = -(-slices // (32 * kz))
    volT = np.full((ny, nx, nz), np.nan, np.float32)
    volT[:, :, :k_base] = 0
    volT[:, :, k_base + 32 * kz * n_tiles :] = 0
    lib.run_joseph_voxel(
        _ptr(volT),
        _ptr(y),
        nx,
        ny,
        nz,
        _ptr(params),
        _ptr(g),
        geometry.n_views,
        n_rows,
        n_cols,
        _ptr(voxel_view_floats(params)),
        kz,
        k_base,
        n_tiles,
    )
    return volT.transpose(2, 0, 1)


@pytest.mark.parametrize("kz", [1, 4])
def test_host_build_joseph_voxel_visits_the_reached_slices(lib, kz, rng):
    """A detector of 6 rows against 200 slices (cases.FEW_ROWS) reaches a band
    of them (voxel_z_range): the float64 CPU transpose is zero outside it, and the
    gather transpose over the band's z tiles only (from a multiple of 32) equals
    it to 1e-6 of the largest value (output poisoned inside the tiles)."""
    geometry, volume = FEW_ROWS
    A = Projector(geometry, volume, model="joseph", precision="float64", backend="cpu")
    _, params, _, _, n_rows, n_cols = _kernel_inputs(geometry, A)
    k_lo, k_hi = voxel_z_range(params, n_rows, n_cols, volume.shape, A._offset, A._scale)
    assert 32 < k_lo and k_hi < 200 - 32 and k_hi - k_lo < 32  # a band of the slices, away from the ends
    y = rng.standard_normal(geometry.projection_shape).astype(np.float32)
    ref = A.T(y.astype(np.float64))
    reached = np.flatnonzero(np.abs(ref).max(axis=(1, 2)))
    assert k_lo <= reached.min() and reached.max() < k_hi and reached.size > 3
    got = _voxel_transpose(lib, geometry, volume, A, y, kz, (k_lo, k_hi))
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("shape", [(70, 3, 45), (32, 32, 32), (1, 5, 33), (33, 2, 1)])
def test_host_build_zfast_copies(lib, shape, padded, rng):
    """The tiled copies between the volume (nz, ny, nx) and the structured
    kernels' z-fastest layout (ny, nx, nz), plain or with structured Joseph's
    borders (one voxel in x and y, JOSEPH_PAD_Z in z below and the rest of
    joseph_padded_nz above, left untouched), at sizes that are and are not
    multiples of the 32 x 32 tile; outputs poisoned first."""
    nz, ny, nx = shape
    p, q = (1, JOSEPH_PAD_Z) if padded else (0, 0)
    vol = rng.standard_normal(shape).astype(np.float32)
    volT = np.full((ny + 2 * p, nx + 2 * p, joseph_padded_nz(nz) if padded else nz), np.nan, np.float32)
    lib.run_zfast(1, int(padded), _ptr(vol), _ptr(volT), nx, ny, nz)
    inner = volT[p : p + ny, p : p + nx, q : q + nz]
    np.testing.assert_array_equal(inner, vol.transpose(1, 2, 0))
    border = np.ones(volT.shape, bool)
    border[p : p + ny, p : p + nx, q : q + nz] = False
    assert np.isnan(volT[border]).all()
    back = np.full(shape, np.nan, np.float32)
    lib.run_zfast(0, int(padded), _ptr(volT), _ptr(back), nx, ny, nz)
    np.testing.assert_array_equal(back, vol)


def test_voxel_transpose_reach_checks():
    """The gather transpose's launcher checks: rows per z voxel ``h`` (finer
    rows need more padding than the kernel has: its caller falls back to the
    scatter transpose) and the row-coordinate extent; a source inside the grid's
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
    assert h_fine == pytest.approx(h_coarse * 1.5 / 0.2, rel=0.05)  # the narrower detector: other end columns
    assert 0 < voxel_row_extent(*args[0]) < 2**30
    params, n_cols, shape, offset, scale = args[0]
    inside = params.copy()
    inside[:, :2] = 0.0  # the source at the grid's centre
    assert voxel_rows_per_voxel(inside, n_cols, shape, offset, scale) == np.inf


# -- CPU: the algorithm of the structured path -------------------------------------------


def _structured_forward_numpy(x, geometry, A):
    """NumPy transcription of ``structured_siddon_forward`` in raytrace_siddon.cu (slow; tiny problems)."""
    _, params = view_parameters(geometry)
    g = np.zeros(8)
    g[2:5], g[5:8] = A._offset, A._scale
    nz, ny, nx = x.shape
    volT = np.ascontiguousarray(x.transpose(1, 2, 0)).ravel()
    out = np.zeros(geometry.projection_shape)
    for view, par in enumerate(params):
        for col in range(geometry.n_cols):
            u = float(col)
            qx, qy = par[3] * u + par[5], par[6] * u + par[8]
            qxy = np.hypot(qx, qy)
            ax, ay = qx / qxy * g[5], qy / qxy * g[6]
            px, py, pz = (par[0] - g[2]) * g[5], (par[1] - g[3]) * g[6], (par[2] - g[4]) * g[7]
            t_in, t_out, hit = 0.0, np.inf, True
            for p, a, n in ((px, ax, nx), (py, ay, ny)):
                if a == 0:
                    hit &= 0 <= p < n
                else:
                    t0, t1 = -p / a, (n - p) / a
                    t_in, t_out = max(t_in, min(t0, t1)), min(t_out, max(t0, t1))
            if not (hit and t_in < t_out):
                continue

            def faces(p, a, n):
                f = np.arange(n + 1, dtype=float)
                t = np.where(f <= p, t_in, t_out) if a == 0 else ((f if a > 0 else n - f) - p) / a
                return np.clip(t, t_in, t_out)

            X, Y = faces(px, ax, nx), faces(py, ay, ny)
            B = np.empty(nx + ny + 2)
            B[np.arange(nx + 1) + np.searchsorted(Y, X, "left")] = X
            B[np.arange(ny + 1) + np.searchsorted(X, Y, "right")] = Y
            assert np.all(np.diff(B) >= 0)
            mid = 0.5 * (B[:-1] + B[1:])
            cell = np.clip(np.floor(py + mid * ay).astype(int), 0, ny - 1) * nx + np.clip(
                np.floor(px + mid * ax).astype(int), 0, nx - 1
            )
            for row in range(geometry.n_rows):
                v = float(row)
                r = [par[3 + 3 * i] * u + par[4 + 3 * i] * v + par[5 + 3 * i] for i in range(3)]
                rxy = np.hypot(r[0], r[1])
                L = np.sqrt(r[0] ** 2 + r[1] ** 2 + r[2] ** 2) / rxy
                mz = r[2] / rxy * g[7]
                if mz != 0:
                    zlo, zhi = sorted([-pz / mz, (nz - pz) / mz])
                else:
                    zlo, zhi = (-np.inf, np.inf) if 0 <= pz < nz else (np.inf, -np.inf)
                step = 1 if mz >= 0 else -1
                ta = np.maximum(B[:-1], zlo)
                tb = np.maximum(np.minimum(B[1:], zhi), ta)
                za = pz + ta * mz
                kz = np.floor(za).astype(int) if mz >= 0 else np.ceil(za).astype(int) - 1
                kz = np.clip(kz, 0, nz - 1)
                tf = np.full_like(ta, np.inf) if mz == 0 else ((kz + (step > 0)) - pz) / mz
                tm = np.minimum(np.maximum(tf, ta), tb)
                kz2 = np.clip(kz + step, 0, nz - 1)
                out[view, row, col] = np.sum(
                    (tm - ta) * L * volT[cell * nz + kz] + (tb - tm) * L * volT[cell * nz + kz2]
                )
    return out


@pytest.mark.parametrize("name", ["cone_small", "cone_axes_wide"])
def test_structured_algorithm_equals_cpu_siddon(name, rng):
    """The kernel's algorithm (shared xy path, merged crossings, two z voxels per
    xy step), in NumPy, equals the general Siddon traversal to float64 rounding."""
    geometry, volume = STRUCTURED[name]
    A = Projector(geometry, volume, model="siddon", precision="float64", backend="cpu")
    _, params = view_parameters(geometry)
    assert structured_ratio(params, geometry.n_rows, geometry.n_cols, 1 / A._scale) <= 1
    x = rng.standard_normal(volume.shape)
    ref = A(x)
    got = _structured_forward_numpy(x, geometry, A)
    assert np.count_nonzero(ref) > 0.3 * ref.size and np.count_nonzero(ref == 0) > 0  # hits and misses
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12 * np.abs(ref).max())


def test_structured_validity_is_detected():
    volume = VolumeGeometry((8, 8, 8), 1.0)
    _, circular = view_parameters(STRUCTURED["cone_small"][0])
    assert structured_ratio(circular, 9, 13, (1.0, 1.0, 1.0)) <= 1
    # a tilted detector: the rows of a column no longer share their xy path
    _, tilted = view_parameters(GEOMETRIES["cone_matrices"][0])
    assert structured_ratio(tilted, 8, 11, (1.0, 1.0, 1.0)) == np.inf
    # a wide cone: a ray climbs more than one z voxel within one xy voxel
    wide = ConeGeometry.circular([0.0, 0.7], sid=10, sdd=12, n_rows=40, n_cols=5, pixel_size=1.0)
    _, p = view_parameters(wide)
    assert structured_ratio(p, 40, 5, (1.0, 1.0, 1.0)) > 1
    # flat voxels make the same cone too steep in voxel units
    _, p = view_parameters(STRUCTURED["cone_small"][0])
    assert structured_ratio(p, 9, 13, (1.0, 1.0, 0.05)) > 1
    with pytest.raises(ValueError, match="structured"):
        Projector(wide, volume, structured="yes")
    with pytest.raises(ValueError, match="structured"):
        Projector(wide, volume, structured=True, backend="cpu")


def test_host_build_joseph_voxel_unclamped_rows(lib, lib_patch2, rng):
    """2 x 2 columns at 16 z voxels read the rows unclamped where a warp's
    rows all lie inside the padded column (cases.UNCLAMPED_ROWS: every
    (view, column, plane) takes that path); both builds against the float64
    CPU transpose to 1e-6 of the largest value; output poisoned."""
    _check_voxel_transpose([lib, lib_patch2], *UNCLAMPED_ROWS, 16, (0.45, 0.55), 1e-6, rng)
