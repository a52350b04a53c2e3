"""``Projector(adjoint="unmatched")``: the unmatched adjoint (the voxel-driven cone
back-projection, scaled) approximates the exact transpose on smooth
projections, and SIRT converges with it to an error close to the matched
pair's. CPU; the CUDA checks are in test_projector_cuda.py."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.geometry import ConeGeometry, ParallelGeometry, VolumeGeometry
from leveret.operators import Projector


def _scan(n: int, sampling: float, n_views: int) -> tuple[ConeGeometry, VolumeGeometry]:
    """An n^3 grid of unit voxels seen by a detector with ``sampling`` pixels
    per voxel at the isocentre (magnification 1.5), covering 4/3 of the grid."""
    n_det = int(round(n * 4 / 3 * sampling))
    geometry = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, n_views, endpoint=False),
        sid=100,
        sdd=150,
        n_rows=n_det,
        n_cols=n_det,
        pixel_size=1.5 / sampling,
    )
    return geometry, VolumeGeometry((n, n, n), 1.0)


def _gaussian(volume: VolumeGeometry) -> np.ndarray:
    n = volume.nx
    z, y, x = np.mgrid[:n, :n, :n] - (n - 1) / 2
    return np.exp(-(x * x + y * y + z * z) / (2 * (n / 6) ** 2))


@pytest.mark.parametrize("sampling, bound", [(1.0, 0.03), (2.0, 0.015)])
def test_voxel_adjoint_approximates_exact_transpose_on_smooth_projections(sampling, bound):
    """On the projections of a smooth volume the scaled back-projection is the
    exact transpose to ``bound`` (relative 2-norm; measured 1.8e-2 at one
    pixel per voxel, 8.9e-3 at two: interpolation against Joseph's
    footprints) and has the same total to 0.2 % (measured 0.05 %, 0.06 %):
    the scale is right."""
    geometry, volume = _scan(32, sampling, 90)
    A = Projector(geometry, volume, model="joseph", backend="cpu", precision="float64")
    V = Projector(geometry, volume, model="joseph", backend="cpu", precision="float64", adjoint="unmatched")
    y = A(_gaussian(volume))
    exact, approx = A.T(y), V.T(y)
    assert np.linalg.norm(approx - exact) <= bound * np.linalg.norm(exact)
    assert abs(approx.sum() / exact.sum() - 1) <= 2e-3
    assert V.adjoint_kind == "unmatched" and V.transpose is None and A.adjoint_kind == "exact"


def test_sirt_converges_with_voxel_adjoint():
    """SIRT with the unmatched pair (1.5 detector pixels per voxel): the
    residual falls at every iteration and ends, with the error to the
    phantom, within 10 % of the matched pair's (measured here: residual
    0.88x, error 0.90x of the matched pair's, both pairs on the same data)."""
    geometry, volume = _scan(24, 1.5, 48)
    truth = phantom.shepp_logan_3d(radius=0.45 * 24).rasterize(volume).astype(np.float32)
    results = {}
    for adjoint in ("exact", "unmatched"):
        P = Projector(geometry, volume, model="joseph", backend="cpu", adjoint=adjoint)
        residuals = []
        x = leveret.sirt(P(truth), P, 20, callback=lambda x, info: residuals.append(info["residual"]))
        assert np.all(np.diff(residuals) < 0), adjoint
        results[adjoint] = residuals[-1], np.linalg.norm(x - truth) / np.linalg.norm(truth)
    (res_e, err_e), (res_v, err_v) = results["exact"], results["unmatched"]
    assert res_v <= 1.1 * res_e and err_v <= 1.1 * err_e, results


def test_voxel_adjoint_of_a_subset_is_its_views_share():
    """A subset's unmatched adjoint (OS-SART's) back-projects its own views
    with their own pixel weights: the whole operator's adjoint of projections
    that are zero outside those views, to float64 rounding."""
    geometry, volume = _scan(12, 1.0, 8)
    V = Projector(geometry, volume, model="joseph", backend="cpu", precision="float64", adjoint="unmatched")
    views = [5, 1, 6]
    y = np.random.default_rng(3).standard_normal(V.projection_shape)
    full = np.zeros_like(y)
    full[views] = y[views]
    np.testing.assert_allclose(V.subset(views).T(y[views]), V.T(full), rtol=0, atol=1e-12 * np.abs(V.T(full)).max())


def test_voxel_adjoint_refused_where_it_does_not_apply():
    """adjoint names the argument: an unknown value, a parallel geometry, several devices."""
    geometry, volume = _scan(8, 1.0, 4)
    with pytest.raises(ValueError, match="^adjoint: "):
        Projector(geometry, volume, backend="cpu", adjoint="matched")
    parallel = ParallelGeometry(np.linspace(0, np.pi, 4, endpoint=False), 8)
    with pytest.raises(ValueError, match="^adjoint: 'unmatched' .* ConeGeometry"):
        Projector(parallel, parallel.default_volume(), backend="cpu", adjoint="unmatched")


@pytest.mark.gpu
def test_voxel_adjoint_cuda_equals_cpu():
    """On CUDA the unmatched adjoint is the CPU's up to the texture unit's
    8-bit interpolation weights (ConeBackprojection's "linear" on CUDA):
    within 1e-2 relative 2-norm on smooth projections; CuPy in, CuPy out."""
    import cupy

    geometry, volume = _scan(32, 1.5, 90)
    C = Projector(geometry, volume, model="joseph", backend="cpu", adjoint="unmatched")
    G = Projector(geometry, volume, model="joseph", backend="cuda", adjoint="unmatched")
    y = C(_gaussian(volume).astype(np.float32))
    ref = C.T(y)
    got = G.T(cupy.asarray(y))
    assert isinstance(got, cupy.ndarray) and got.dtype == np.float32
    assert np.linalg.norm(got.get() - ref) <= 1e-2 * np.linalg.norm(ref)
    assert G.transpose is None and G.adjoint_kind == "unmatched"
