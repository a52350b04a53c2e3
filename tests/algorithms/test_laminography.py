"""Laminography FBP (leveret.laminography_fbp): exact outside the missing cone
at 20, 45 and 70 degrees of tilt, parallel and cone beam; the iterative
methods reduce the missing-cone artefacts; a full turn is required."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

import leveret
from leveret import phantom
from leveret.algorithms.laminography import angle_weights, row_axis_cosines, rows_seen
from leveret.geometry import ConeGeometry, ParallelGeometry, ParallelVecGeometry, VolumeGeometry

E = phantom.Ellipsoid
N_VIEWS = 360
ANGLES = np.arange(N_VIEWS) * 2 * np.pi / N_VIEWS
VOLUME = VolumeGeometry((24, 48, 48), 1.0)


def sample():
    """A flat sample: a plate with inclusions (what laminography is for)."""
    return phantom.EllipsoidPhantom(
        [E(1.0, (20, 18, 6)), E(0.5, (5, 7, 3), (6, -4, 1)), E(-0.4, (4, 4, 2), (-8, 5, -1)), E(0.7, 2.5, (-3, -9, 2))]
    )


def without_missing_cone(truth: np.ndarray, tilt: float) -> np.ndarray:
    """``truth`` with the frequencies within ``tilt`` of the z axis removed (unit
    voxels), on a grid padded far along z (the band-limited object reaches far
    beyond the plate) and a little in xy."""
    pz, pxy = 244, 40
    spectrum = np.fft.fftn(np.pad(truth, [(pz, pz), (pxy, pxy), (pxy, pxy)]))
    kz, ky, kx = np.meshgrid(*(np.fft.fftfreq(n) for n in spectrum.shape), indexing="ij")
    spectrum[np.hypot(kx, ky) < np.abs(kz) * np.tan(tilt)] = 0.0
    return np.real(np.fft.ifftn(spectrum))[pz:-pz, pxy:-pxy, pxy:-pxy]


@pytest.fixture(scope="module")
def truth():
    return sample().rasterize(VOLUME, supersampling=3)


@pytest.fixture(scope="module")
def core(truth):
    """The sample's voxels two voxels away from its surface."""
    return ndimage.binary_erosion(sample().rasterize(VOLUME) != 0, iterations=2)


def parallel(tilt):
    return ParallelVecGeometry.laminography(ANGLES, tilt, 64, 64, 1.0)


def cone(tilt):
    return ConeGeometry.laminography(ANGLES, tilt, 400.0, 600.0, 64, 64, 1.5)


@pytest.mark.parametrize("make", [parallel, cone], ids=["parallel", "cone"])
@pytest.mark.parametrize("degrees", [20, 45, 70])
def test_exact_outside_the_missing_cone(truth, core, make, degrees):
    """FBP equals the object without its missing cone (the frequencies within
    ``tilt`` of z) to the discretisation's error: about tilt 0's (0.021 here)."""
    tilt = np.radians(degrees)
    g = make(tilt)
    rec = leveret.laminography_fbp(sample().project(g).astype(np.float32), g, VOLUME, backend="cpu")
    expected = without_missing_cone(truth, tilt)
    err = (rec - expected)[core]
    rmse, bias = float(np.sqrt(np.mean(err**2))), float(err.mean())
    plain = float(np.sqrt(np.mean((rec - truth)[core] ** 2)))
    print(
        f"{make.__name__} {degrees} deg: rmse {rmse:.4f} bias {bias:.4f} against the cone-free object; "
        f"{plain:.4f} against the object"
    )
    assert rmse < 0.03 and abs(bias) < 0.012
    assert plain > 3 * rmse  # the missing cone is what differs


@pytest.mark.parametrize("make", [parallel, cone], ids=["parallel", "cone"])
def test_a_slab_from_the_rows_it_sees_equals_the_whole_calls_slab(make):
    """What an out-of-core driver does: each z-slab from projections[:, r0:r1]
    and geometry.crop_rows(r0, r1) alone."""
    g = make(np.radians(40))
    proj = sample().project(g).astype(np.float32)
    vol = VolumeGeometry((24, 40, 40), 1.0)
    whole = leveret.laminography_fbp(proj, g, vol, backend="cpu")
    for k0, k1 in ((0, 8), (8, 20), (20, 24)):
        slab = vol.slab(k0, k1)
        r0, r1 = rows_seen(g, slab)
        assert 0 < r1 - r0 < g.n_rows
        part = leveret.laminography_fbp(proj[:, r0:r1], g.crop_rows(r0, r1), slab, backend="cpu")
        np.testing.assert_allclose(part, whole[k0:k1], rtol=0, atol=1e-5 * np.abs(whole).max())
    assert rows_seen(g, VolumeGeometry((2, 4, 4), 1.0, center=(500.0, 0.0, 0.0))) is None


def test_tilt_0_is_fbp_of_a_full_turn():
    pg = ParallelGeometry(ANGLES, 64, 64, 1.0, 1.0)
    g = ParallelVecGeometry.from_parallel(pg)
    proj = sample().project(pg).astype(np.float32)
    ours = leveret.laminography_fbp(proj, g, VOLUME, backend="cpu")
    np.testing.assert_allclose(ours, leveret.fbp(proj, pg, VOLUME, backend="cpu"), atol=1e-5)


def test_cone_laminography_weights_reduce_to_fdk_at_tilt_0():
    g = ConeGeometry.laminography(ANGLES[::6], 0.0, 400.0, 600.0, 32, 32, 1.5)
    proj = sample().project(g).astype(np.float32)
    np.testing.assert_allclose(
        leveret.laminography_fbp(proj, g, VOLUME, backend="cpu"),
        leveret.fdk(proj, g, VOLUME, backend="cpu", short_scan=False),
        atol=1e-5,
    )


def test_row_axis_cosines_and_angle_weights():
    tilt = np.radians(33)
    np.testing.assert_allclose(row_axis_cosines(parallel(tilt)), np.cos(tilt), atol=1e-14)
    g = cone(tilt)
    c = row_axis_cosines(g)
    # a cone's rows rise with the row: cos(tilt + the row's elevation)
    v0 = (g.n_rows - 1) / 2
    elevation = np.arctan((np.arange(g.n_rows) - v0) * 1.5 / 600.0)
    np.testing.assert_allclose(c[0], np.cos(tilt + elevation), atol=1e-12)
    np.testing.assert_allclose(angle_weights(g).sum(), 2 * np.pi, rtol=1e-12)
    two = ParallelVecGeometry.laminography(np.arange(2 * N_VIEWS) * 2 * np.pi / N_VIEWS, tilt, 64, 64, 1.0)
    np.testing.assert_allclose(angle_weights(two).sum(), 2 * np.pi, rtol=1e-12)  # each turn weighs half
    there_and_back = ParallelVecGeometry.laminography(np.concatenate([ANGLES, ANGLES[::-1]]), tilt, 8, 8, 1.0)
    with pytest.raises(ValueError, match="^geometry: .*monotonic"):
        angle_weights(there_and_back)


def test_less_than_a_full_turn_is_refused():
    g = ParallelVecGeometry.laminography(ANGLES[:200], 0.5, 16, 16, 1.0)
    with pytest.raises(ValueError, match="^geometry: laminography FBP needs views over a full turn"):
        leveret.laminography_fbp(np.zeros(g.projection_shape, np.float32), g, VOLUME, backend="cpu")


def test_bad_arguments_are_named():
    g = parallel(0.5)
    proj = np.zeros(g.projection_shape, np.float32)
    with pytest.raises(TypeError, match="^geometry: expected a ParallelVecGeometry or ConeGeometry"):
        leveret.laminography_fbp(proj, ParallelGeometry(ANGLES, 64, 64), VOLUME, backend="cpu")
    with pytest.raises(ValueError, match="^volume: expected a 3D VolumeGeometry"):
        leveret.laminography_fbp(proj, g, VolumeGeometry((8, 8)), backend="cpu")
    with pytest.raises(ValueError, match="^projections"):
        leveret.laminography_fbp(proj[:, :3], g, VOLUME, backend="cpu")
    bad = proj.copy()
    bad[3, 2, 1] = np.nan
    with pytest.raises(ValueError, match="^projections"):
        leveret.laminography_fbp(bad, g, VOLUME, backend="cpu")


def test_iterative_methods_reduce_the_missing_cone_artefacts():
    """At 45 degrees FBP misses the plate's frequencies near z; SIRT (non-negative)
    and CGLS on the thin volume recover part of them."""
    tilt = np.radians(45)
    ph = phantom.EllipsoidPhantom([E(1.0, (10, 9, 3)), E(0.5, (3, 3.5, 1.5), (3, -2, 0.5)), E(0.7, 1.5, (-2, -4, 0.5))])
    g = ParallelVecGeometry.laminography(np.arange(90) * 2 * np.pi / 90, tilt, 28, 32, 1.0)
    vol = VolumeGeometry((10, 24, 24), 1.0)
    proj = ph.project(g).astype(np.float32)
    truth = ph.rasterize(vol, supersampling=3)
    error = lambda x: float(np.linalg.norm(x - truth) / np.linalg.norm(truth))  # noqa: E731
    fbp = error(leveret.laminography_fbp(proj, g, vol, backend="cpu"))
    A = leveret.Projector(g, vol, model="joseph", backend="cpu")
    sirt = error(leveret.sirt(proj, A, 100, nonnegative=True))
    cgls = error(leveret.cgls(proj, A, 30))
    print(f"relative error: FBP {fbp:.3f}, SIRT+ {sirt:.3f}, CGLS {cgls:.3f}")
    assert sirt < 0.7 * fbp and cgls < 0.85 * fbp


# -- GPU -------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("make", [parallel, cone], ids=["parallel", "cone"])
def test_gpu_equals_cpu_within_float32_rounding(make):
    import cupy as cp

    g = make(np.radians(45))
    proj = sample().project(g).astype(np.float32)
    cpu = leveret.laminography_fbp(proj, g, VOLUME, backend="cpu", interpolation="linear32")
    gpu = leveret.laminography_fbp(proj, g, VOLUME, backend="cuda", interpolation="linear32", kernel="quad")
    assert isinstance(gpu, np.ndarray)
    assert np.abs(gpu - cpu).max() < 1e-4 * np.abs(cpu).max()
    on_device = leveret.laminography_fbp(cp.asarray(proj), g, VOLUME, interpolation="linear32", kernel="quad")
    assert isinstance(on_device, cp.ndarray)
    assert np.abs(on_device.get() - cpu).max() < 1e-4 * np.abs(cpu).max()
