"""The raytrace_*.cu kernels on the GPU (``gpu`` marker; skipped without one):
the structured paths against the general one and against the float64 CPU
operators (the float32 marches within their documented bounds), structured
Joseph's two transposes against each other, with views in several batches.
Outputs are poisoned with NaN first; every test checks the adjoint identity of
the pair it runs. The same kernels' source runs on the CPU in
test_raytrace_host.py."""

from __future__ import annotations

import numpy as np
import pytest

from leveret import phantom
from leveret.cuda.raytrace import (
    VOXEL_KZ,
    CudaRaytracer,
    joseph_float32_bound,
    structured_float32_bound,
    view_parameters,
)
from leveret.geometry import ConeGeometry, VolumeGeometry
from leveret.operators import Projector

from cases import FEW_ROWS, GEOMETRIES, ROW_WINDOWS, STRUCTURED, TALL, UNCLAMPED_ROWS, adjoint_scale, assert_close

pytestmark = pytest.mark.gpu

ALL = {**GEOMETRIES, **STRUCTURED}
# Relative to the largest value: float32 to 1e-5, float64 to 1e-12 (the GPU's
# float64 atomics add in another order than the CPU's private buffers).
TOL = {"float32": 1e-5, "float64": 1e-12}


def _cupy():
    import cupy

    return cupy


def _adjoint_error(Ax, y, x, ATy) -> tuple[float, float]:
    """|<Ax, y> - <x, A^T y>| and its scale (cases.adjoint_scale); CuPy or NumPy arrays."""
    cp = _cupy()
    f64 = [cp.asarray(a).astype(cp.float64) for a in (Ax, y, x, ATy)]
    lhs = float(cp.vdot(f64[0], f64[1]))
    rhs = float(cp.vdot(f64[2], f64[3]))
    return abs(lhs - rhs), adjoint_scale(lhs, Ax, y)


def _check_float32_transpose(G, A, x, y, got):
    """A float32 GPU operator's transpose (output poisoned) against the float64
    CPU operator's to 1e-5, and the adjoint identity with its forward ``got``."""
    cp = _cupy()
    back = cp.full(x.shape, np.nan, cp.float32)
    G.T(cp.asarray(y), out=back)
    assert_close(back, A.T(y.astype(np.float64)), 1e-5)
    err, scale = _adjoint_error(got, y, x, back)
    assert err <= 1e-5 * scale


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("name", list(STRUCTURED))
def test_structured_siddon_equals_general(name, precision, rng):
    cp = _cupy()
    geometry, volume = STRUCTURED[name]
    S = Projector(geometry, volume, model="siddon", precision=precision, backend="cuda", structured=True)
    G = Projector(geometry, volume, model="siddon", precision=precision, backend="cuda", structured=False)
    assert S.structured and not G.structured and S.transpose == "scatter"
    assert Projector(geometry, volume, backend="cuda").structured  # "auto" takes it
    x = cp.asarray(rng.standard_normal(volume.shape), dtype=precision)
    y = cp.asarray(rng.standard_normal(geometry.projection_shape), dtype=precision)
    out = cp.full(geometry.projection_shape, np.nan, precision)
    S(x, out=out)
    assert_close(out, G(x), TOL[precision])
    back = cp.full(volume.shape, np.nan, precision)
    S.T(y, out=back)
    assert_close(back, G.T(y), TOL[precision])
    err, scale = _adjoint_error(out, y, x, back)
    assert err <= TOL[precision] * scale


@pytest.mark.parametrize("name", list(STRUCTURED))
def test_structured_siddon_transpose_in_any_view_group_and_slab(name, rng):
    """Structured float32 Siddon's transpose with the views side by side in
    groups of 16, 8 (siddon_view_group's two choices) and 3 (not dividing
    the views), each in one z slab and in slabs of 4 slices: the general
    path's transpose to 1e-5 of the largest value; outputs poisoned."""
    cp = _cupy()
    geometry, volume = STRUCTURED[name]
    S = Projector(geometry, volume, model="siddon", precision="float32", backend="cuda", structured=True)
    G = Projector(geometry, volume, model="siddon", precision="float32", backend="cuda", structured=False)
    y = cp.asarray(rng.standard_normal(geometry.projection_shape), dtype=cp.float32)
    ref = G.T(y)
    for group in (16, 8, 3):
        for slab in (volume.shape[0], 4):
            r = CudaRaytracer(
                geometry,
                S._grid3,
                S._offset,
                S._scale,
                "siddon",
                np.float32,
                structured=True,
                z_slab=slab,
                view_group=group,
            )
            back = cp.full(volume.shape, np.nan, cp.float32)
            r.adjoint(y, back.reshape(S._grid3))
            assert not bool(cp.isnan(back).any()), (group, slab)
            assert_close(back, ref, TOL["float32"])


def test_structured_siddon_opts_in_to_more_shared_memory_on_wide_grids(rng):
    """At 1024^2 columns structured Siddon's float32 block needs more than the 48 KiB
    a launch gets by default: it opts in, writes every ray within the float32
    march's documented bound of the float64 operator, and its transpose applies
    the same weights (adjoint identity)."""
    from leveret.cuda.raytrace import SHARED_DEFAULT
    from leveret.geometry import ConeGeometry, VolumeGeometry

    cp = _cupy()
    volume = VolumeGeometry((16, 1024, 1024), 0.01)
    geometry = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 5, endpoint=False), sid=20.0, sdd=30.0, n_rows=6, n_cols=160, pixel_size=0.05
    )
    A = Projector(geometry, volume, model="siddon", precision="float64", backend="cpu")
    S = Projector(geometry, volume, model="siddon", precision="float32", backend="cuda", structured=True)
    assert S._gpu.shared_bytes > SHARED_DEFAULT
    x = rng.standard_normal(volume.shape).astype(np.float32)
    ref = A(x.astype(np.float64))
    out = cp.full(geometry.projection_shape, np.nan, cp.float32)
    S(cp.asarray(x), out=out)
    got = cp.asnumpy(out).astype(np.float64)
    assert not np.isnan(got).any() and np.count_nonzero(got) == got.size
    _, params = view_parameters(geometry)
    bound = structured_float32_bound(
        params, geometry.n_rows, geometry.n_cols, volume.shape, 1 / A._scale, np.abs(x).max(), np.abs(ref).max()
    )
    assert np.abs(got - ref).max() <= bound
    y = cp.asarray(rng.standard_normal(geometry.projection_shape), dtype=cp.float32)
    back = cp.full(volume.shape, np.nan, cp.float32)
    S.T(y, out=back)
    assert not bool(cp.isnan(back).any())
    err, scale = _adjoint_error(out, y, cp.asarray(x), back)
    assert err <= TOL["float32"] * scale


@pytest.mark.parametrize("name", list(STRUCTURED))
def test_structured_siddon_float32_march_against_float64(name, rng):
    """precision="float32" marches in float32 (raytrace_siddon.cu,
    structured_fast): against the float64 CPU operator, inside the documented
    bound and 1e-5 of the largest value, on random data and an analytic
    phantom; its transpose has the same weights (adjoint identity), launched
    in one z slab or in slabs of 3 slices (uneven last slab; grids of 512
    slices or more run in two)."""
    cp = _cupy()
    geometry, volume = STRUCTURED[name]
    A = Projector(geometry, volume, model="siddon", precision="float64", backend="cpu")
    S = Projector(geometry, volume, model="siddon", precision="float32", backend="cuda", structured=True)
    _, params = view_parameters(geometry)
    ph = phantom.EllipsoidPhantom([phantom.Ellipsoid(1.0, (3.0, 3.5, 3.2), (0.2, -0.1, 0.3), 0.4)])
    for x in (
        rng.standard_normal(volume.shape).astype(np.float32),
        ph.rasterize(volume, supersampling=2).astype(np.float32),
    ):
        ref = A(x.astype(np.float64))
        out = cp.full(geometry.projection_shape, np.nan, cp.float32)
        S(cp.asarray(x), out=out)
        got = cp.asnumpy(out).astype(np.float64)
        assert not np.isnan(got).any()
        err = np.abs(got - ref).max()
        bound = structured_float32_bound(
            params, geometry.n_rows, geometry.n_cols, volume.shape, 1 / A._scale, np.abs(x).max(), np.abs(ref).max()
        )
        assert err <= bound and err <= 1e-5 * np.abs(ref).max(), (err, bound)
    y = rng.standard_normal(geometry.projection_shape).astype(np.float32)
    assert S._gpu.z_slab == volume.nz
    _check_float32_transpose(S, A, x, y, got)
    S._gpu.z_slab = 3
    _check_float32_transpose(S, A, x, y, got)


@pytest.mark.parametrize("name", list(ALL))
def test_joseph_float32_march_against_float64(name, rng):
    """precision="float32" Joseph marches in float32 (raytrace_general.cu,
    joseph_fast; raytrace_joseph.cu on the structured cases): against the
    float64 CPU operator inside joseph_float32_bound and 1e-5 of the largest
    value; the transpose has the same weights, and on the structured cases so
    has the atomic one (where "auto" takes the voxel gather)."""
    cp = _cupy()
    geometry, volume = ALL[name]
    A = Projector(geometry, volume, model="joseph", precision="float64", backend="cpu")
    G = Projector(geometry, volume, model="joseph", precision="float32", backend="cuda")
    x = rng.standard_normal(volume.shape).astype(np.float32)
    y = rng.standard_normal(geometry.projection_shape).astype(np.float32)
    ref = A(x.astype(np.float64))
    out = cp.full(geometry.projection_shape, np.nan, cp.float32)
    G(cp.asarray(x), out=out)
    got = cp.asnumpy(out).astype(np.float64)
    assert not np.isnan(got).any()
    err = np.abs(got - ref).max()
    assert err <= joseph_float32_bound(A._grid3, 1 / A._scale, np.abs(x).max(), np.abs(ref).max())
    assert err <= 1e-5 * np.abs(ref).max()
    _check_float32_transpose(G, A, x, y, got)
    if G.structured:
        T = Projector(geometry, volume, model="joseph", precision="float32", backend="cuda", transpose="scatter")
        _check_float32_transpose(T, A, x, y, got)


@pytest.mark.parametrize("name", list(STRUCTURED))
def test_structured_joseph_equals_general(name, rng):
    """float32 Joseph: "auto" takes the structured kernel on circular scans; it
    equals the general float32 Joseph (both within their bounds of float64)."""
    cp = _cupy()
    geometry, volume = STRUCTURED[name]
    S = Projector(geometry, volume, model="joseph", precision="float32", backend="cuda")
    G = Projector(geometry, volume, model="joseph", precision="float32", backend="cuda", structured=False)
    assert S.structured and not G.structured
    assert not Projector(geometry, volume, model="joseph", precision="float64", backend="cuda").structured
    with pytest.raises(ValueError, match="structured"):
        Projector(geometry, volume, model="joseph", precision="float64", backend="cuda", structured=True)
    x = cp.asarray(rng.standard_normal(volume.shape), dtype=cp.float32)
    y = cp.asarray(rng.standard_normal(geometry.projection_shape), dtype=cp.float32)
    out = cp.full(geometry.projection_shape, np.nan, cp.float32)
    S(x, out=out)
    assert_close(out, G(x), 1e-5)
    back = cp.full(volume.shape, np.nan, cp.float32)
    S.T(y, out=back)
    assert_close(back, G.T(y), 1e-5)
    err, scale = _adjoint_error(out, y, x, back)
    assert err <= 1e-5 * scale


@pytest.mark.parametrize("name", list(STRUCTURED) + ["tall", "few_rows"])
def test_structured_joseph_voxel_transpose_equals_atomic(name, rng):
    """Structured Joseph's transposes: the voxel-driven one (the forward's
    weights evaluated per voxel, z fractions in float64) in batches of two
    views and in one batch, with one and with 2 x 2 voxel columns per warp,
    the atomic one (the band transpose here) and the rows' scatter (the atomic
    one where the band does not apply). They differ by the forward march's float32 rounding (2e-6 of
    the largest value), the batches by float32 rounding of the views' partial
    sums; the voxel one is deterministic; outputs poisoned;
    the adjoint identity with the forward. "tall" has 70 z voxels and ~1.4
    rows per voxel; "few_rows" 6 rows against 200 slices, of which the voxel
    transpose visits the band they reach (the rest zero)."""
    cp = _cupy()
    geometry, volume = {"tall": TALL, "few_rows": FEW_ROWS}.get(name) or STRUCTURED[name]
    V = Projector(geometry, volume, model="joseph", precision="float32", backend="cuda", transpose="gather")
    T = Projector(geometry, volume, model="joseph", precision="float32", backend="cuda", transpose="scatter")
    assert V.structured and V.transpose == "gather" and T.structured and T.transpose == "scatter"
    k_lo, k_hi = V._gpu.voxel_z
    assert (k_hi - k_lo < volume.nz / 4) == (name == "few_rows")
    A = Projector(geometry, volume, model="joseph", precision="float32", backend="cpu")
    batched = CudaRaytracer(
        geometry, A._grid3, A._offset, A._scale, "joseph", np.float32, transpose="gather", views_per_batch=2
    )
    patches = {
        p: CudaRaytracer(
            geometry, A._grid3, A._offset, A._scale, "joseph", np.float32, transpose="gather", voxel_patch=p
        )
        for p in (1, 2)
    }
    assert T._gpu.band
    scatter = CudaRaytracer(geometry, A._grid3, A._offset, A._scale, "joseph", np.float32, transpose="scatter")
    scatter.band = False  # as where the gather transpose's conditions fail
    y = cp.asarray(rng.standard_normal(geometry.projection_shape), dtype=cp.float32)
    results = {}
    for mode, run in (
        ("gather", V.T),
        ("scatter", T.T),
        ("scatter", lambda y, out: scatter.adjoint(y, out.reshape(A._grid3))),
        ("gather_batched", lambda y, out: batched.adjoint(y, out.reshape(A._grid3))),
        ("gather_patch1", lambda y, out: patches[1].adjoint(y, out.reshape(A._grid3))),
        ("gather_patch2", lambda y, out: patches[2].adjoint(y, out.reshape(A._grid3))),
    ):
        results[mode] = cp.full(volume.shape, np.nan, cp.float32)
        run(y, out=results[mode])
        assert not bool(cp.isnan(results[mode]).any()), mode
    assert_close(results["gather"], results["scatter"], 2e-6)
    assert_close(results["scatter"], results["scatter"], 2e-6)
    assert_close(results["gather_batched"], results["gather"], 1e-6)  # batches: partial sums added in float32
    for patch in (1, 2):  # one or 2 x 2 voxel columns per warp: other float32 summation orders
        assert_close(results[f"gather_patch{patch}"], results["scatter"], 2e-6)
    assert bool((V.T(y) == results["gather"]).all())  # deterministic
    x = cp.asarray(rng.standard_normal(volume.shape), dtype=cp.float32)
    out = V(x)
    err, scale = _adjoint_error(out, y, x, results["gather"])
    assert err <= 1e-5 * scale


@pytest.mark.parametrize("name, tol", [("tall", 2e-6), ("row_windows", 4e-6)])
def test_voxel_transpose_every_depth_and_patch(name, tol, rng):
    """Every build of the gather transpose: each z depth per lane (VOXEL_KZ)
    with one voxel column per warp and with 2 x 2 (voxel_patch), on the
    tall case (70 z voxels: one to three z tiles, lanes beyond nz) and on
    cases.ROW_WINDOWS (0.8 to ~6 rows per voxel: every row window from two
    rows up), against the scatter transpose to ``tol`` of the largest value
    (float32 sums of up to 16 rows per column on the second); outputs
    poisoned."""
    cp = _cupy()
    geometry, volume = TALL if name == "tall" else ROW_WINDOWS
    A = Projector(geometry, volume, model="joseph", precision="float32", backend="cpu")
    T = Projector(geometry, volume, model="joseph", precision="float32", backend="cuda", transpose="scatter")
    y = cp.asarray(rng.standard_normal(geometry.projection_shape), dtype=cp.float32)
    ref = T.T(y)
    for kz in VOXEL_KZ:
        for patch in (1, 2):
            r = CudaRaytracer(
                geometry, A._grid3, A._offset, A._scale, "joseph", np.float32, transpose="gather", voxel_patch=patch
            )
            r.voxel_kz = kz  # the depth the rule would take on another grid
            got = cp.full(volume.shape, np.nan, cp.float32)
            r.adjoint(y, got.reshape(A._grid3))
            assert not bool(cp.isnan(got).any()), (kz, patch)
            assert_close(got, ref, tol)


def test_voxel_transpose_unclamped_rows(rng):
    """The 2 x 2 build at 16 z voxels on its unclamped row path (every
    (view, column, plane) of cases.UNCLAMPED_ROWS takes it), with one column
    per warp at 16 beside it: the float64 CPU transpose to 2e-6 of the
    largest value, on a random sinogram and on a phantom's projections;
    outputs poisoned; the adjoint identity with the forward."""
    cp = _cupy()
    geometry, volume = UNCLAMPED_ROWS
    A = Projector(geometry, volume, model="joseph", precision="float64", backend="cpu")
    G = Projector(geometry, volume, model="joseph", precision="float32", backend="cuda", transpose="gather")
    x = phantom.shepp_logan(volume.shape).astype(np.float32)
    for y in (
        rng.standard_normal(geometry.projection_shape).astype(np.float32),
        A(x.astype(np.float64)).astype(np.float32),
    ):
        ref = A.T(y.astype(np.float64))
        for patch in (1, 2):
            r = CudaRaytracer(
                geometry, A._grid3, A._offset, A._scale, "joseph", np.float32, transpose="gather", voxel_patch=patch
            )
            r.voxel_kz = 16
            got = cp.full(volume.shape, np.nan, cp.float32)
            r.adjoint(cp.asarray(y), got.reshape(A._grid3))
            assert not bool(cp.isnan(got).any()), patch
            assert_close(got, ref, 2e-6)
            err, scale = _adjoint_error(G(cp.asarray(x)), cp.asarray(y), cp.asarray(x), got)
            assert err <= 1e-5 * scale


def test_voxel_transpose_refused_where_it_does_not_apply():
    """transpose="gather" names the argument where the gather transpose does not
    apply: Siddon, float64 Joseph, the general path, a tilted detector."""
    geometry, volume = STRUCTURED["cone_small"]
    for kwargs in (
        {"model": "siddon"},
        {"model": "joseph", "precision": "float64"},
        {"model": "joseph", "structured": False},
    ):
        with pytest.raises(ValueError, match="transpose: 'gather' applies to structured Joseph"):
            Projector(geometry, volume, backend="cuda", transpose="gather", **kwargs)
    tilted, grid = GEOMETRIES["cone_matrices"]
    with pytest.raises(ValueError, match="transpose"):
        Projector(tilted, grid, model="joseph", backend="cuda", transpose="gather")
    assert Projector(tilted, grid, model="joseph", backend="cuda").transpose == "scatter"


def test_band_transpose_only_where_the_voxel_transpose_applies():
    """The scatter transpose of structured Joseph runs column by column (the band
    transpose) where the gather transpose's conditions hold, and ray by ray
    where they do not (rows more than JV_HMAX + 1 per voxel)."""
    geometry, volume = STRUCTURED["cone_small"]
    assert Projector(geometry, volume, model="joseph", backend="cuda", transpose="scatter")._gpu.band
    dense = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 6, endpoint=False), sid=60, sdd=90, n_rows=400, n_cols=30, pixel_size=0.05
    )
    grid = VolumeGeometry((16, 16, 16), 1.0)
    T = Projector(dense, grid, model="joseph", backend="cuda", transpose="scatter")
    assert T.structured and not T._gpu.band
