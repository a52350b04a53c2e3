"""3D Radon FBP (EPR imaging) and its matched projector pair, on the CPU."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.fft

import leveret
from leveret import RadonGeometry, VolumeGeometry, radon3d_fbp, radon3d_forward
from leveret.algorithms.radon3d import second_derivative_kernel, second_derivative_response
from leveret.cpu import radon3d as kernels
from leveret.algorithms.radon3d import TwoStagePlan, grid_shape
from leveret.backends import cuda_available
from leveret.phantom import Ellipsoid, EllipsoidPhantom, ball

# Ball of radius 0.5 sampled at 0.01 over [-0.635, 0.635]; a 32^3 grid over [-0.5, 0.5]^3.
R = 0.5
VOL = VolumeGeometry((32, 32, 32), 1.0 / 32)


@pytest.fixture(scope="module")
def uniform2000():
    return RadonGeometry.uniform(2000, 128, spacing=0.01)


def _radius(volume):
    z, y, x = (volume.coordinates(a) for a in "zyx")
    return np.sqrt(x[None, None, :] ** 2 + y[None, :, None] ** 2 + z[:, None, None] ** 2)


def test_exports():
    assert leveret.radon3d_fbp is radon3d_fbp
    assert leveret.algorithms.radon3d_fbp is radon3d_fbp


def test_second_derivative_filter_sign_and_scale():
    """A Gaussian's filtered second derivative matches the analytic one to 2e-5 of its peak."""
    tau, n = 0.01, 256
    t = (np.arange(n) - (n - 1) / 2) * tau
    sigma = 0.08
    p = np.exp(-(t**2) / (2 * sigma**2))
    resp = second_derivative_response(n, spacing=tau)
    n_pad = 2 * (resp.size - 1)
    got = scipy.fft.irfft(scipy.fft.rfft(p, n_pad) * resp, n_pad)[:n]
    exact = (t**2 / sigma**4 - 1 / sigma**2) * p
    assert np.abs(got - exact).max() < 2e-5 * np.abs(exact).max()
    # Constants have no second derivative: no DC response, and the centre tap
    # is the band-limited -pi^2 / (3 tau^2) up to the cut tail.
    h = second_derivative_kernel(512, tau)
    assert abs(h.sum()) < 1e-12 * abs(h[0]) and resp[0] == pytest.approx(0.0, abs=1e-8)
    assert h[0] == pytest.approx(-(math.pi**2) / (3 * tau**2), rel=1e-4)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 1e-5)])
def test_forward_is_the_transpose_of_backproject(rng, dtype, tol):
    g = RadonGeometry.uniform(60, 40, spacing=0.03)
    vol = VolumeGeometry((9, 11, 13), (0.05, 0.04, 0.045), center=(0.02, -0.03, 0.01))
    table = kernels.sample_table(g.directions, g.n_samples, g.spacing, vol)
    x = rng.standard_normal(vol.shape).astype(dtype)
    y = rng.standard_normal(g.projection_shape).astype(dtype)
    ax = kernels.forward(x, table, np.empty(g.projection_shape, dtype))
    aty = kernels.backproject(y, table, np.empty(vol.shape, dtype))
    lhs, rhs = np.vdot(ax.astype(np.float64), y), np.vdot(x.astype(np.float64), aty)
    assert abs(lhs - rhs) <= tol * np.sqrt(np.vdot(ax, ax) * np.vdot(y, y))
    # radon3d_forward is that transpose times voxel volume / spacing.
    scaled = radon3d_forward(x, g, vol)
    np.testing.assert_allclose(scaled, ax * (0.05 * 0.04 * 0.045 / 0.03), rtol=tol * 10, atol=tol * 1e-3)


def test_forward_of_rasterized_ball_matches_closed_form():
    g = RadonGeometry.uniform(40, 64, spacing=0.02)
    vol = VolumeGeometry((48, 48, 48), 1.0 / 48)
    p = radon3d_forward(ball(0.4).rasterize(vol, supersampling=2), g, vol)
    exact = ball(0.4).project_radon(g)
    assert np.abs(p - exact).max() < 0.03 * exact.max()


def test_ball_reconstructs_to_one(uniform2000):
    """2000 uniform directions: 1 within 0.5 % in the interior (r < 0.8 R),
    inside the 2 % the issue asks for (measured 0.12 %); mean within 2e-3 (measured 1.0e-3)."""
    rec = radon3d_fbp(ball(R).project_radon(uniform2000), uniform2000, VOL)
    assert rec.dtype == np.float32 and rec.shape == VOL.shape
    r = _radius(VOL)
    inside = rec[r < 0.8 * R]
    assert np.abs(inside - 1).max() < 5e-3
    assert abs(inside.mean() - 1) < 2e-3
    # Outside the ball the mean over a shell is ~0 (single voxels carry the
    # angular-sampling streaks, see test_ellipsoid_phantom_relative_error).
    assert abs(rec[(r > 1.1 * R) & (r < 1.2 * R)].mean()) < 0.01


@pytest.mark.parametrize(
    "geometry",
    [
        RadonGeometry.uniform(1000, 128, spacing=0.01, hemisphere=True),
        RadonGeometry.grid(30, 60, 128, spacing=0.01),
        RadonGeometry.grid(20, 60, 128, spacing=0.01, hemisphere=True),
    ],
    ids=["uniform-hemisphere", "grid-sphere", "grid-hemisphere"],
)
def test_hemisphere_and_grid_sets(geometry):
    c = (0.05, -0.03, 0.02)
    rec = radon3d_fbp(ball(0.4, center=c).project_radon(geometry), geometry, VOL)
    z, y, x = (VOL.coordinates(a) for a in "zyx")
    r = np.sqrt((x[None, None, :] - c[0]) ** 2 + (y[None, :, None] - c[1]) ** 2 + (z[:, None, None] - c[2]) ** 2)
    assert np.abs(rec[r < 0.3] - 1).max() < 0.01


SPECS = [
    (1.0, (0.42, 0.3, 0.25), (0.0, 0.0, 0.0), (0.3, 0.5, 0.2)),
    (0.5, (0.15, 0.12, 0.1), (0.1, -0.05, 0.05), (1.1, 0.4, -0.6)),
]


@pytest.fixture(scope="module")
def two_ellipsoids():
    """The phantom, its rasterised truth, and the voxels at least 2 voxels from
    every surface (growing or shrinking each ellipsoid by 2 voxels does not
    change whether they are inside) where every plane through them is
    sampled (r < 0.6)."""
    phantom = EllipsoidPhantom(Ellipsoid(*s) for s in SPECS)
    h = 2 * VOL.voxel_size[0]
    far = _radius(VOL) < 0.6
    for value, semi, centre, rot in SPECS:
        grown = Ellipsoid(1.0, tuple(a + h for a in semi), centre, rot)
        shrunk = Ellipsoid(1.0, tuple(a - h for a in semi), centre, rot)
        far &= EllipsoidPhantom([grown]).rasterize(VOL) == EllipsoidPhantom([shrunk]).rasterize(VOL)
    return phantom, phantom.rasterize(VOL), far


def _errors(rec, truth, far):
    """Relative RMS error over ``far``, and the largest error inside the objects there."""
    d = rec[far] - truth[far]
    rel = np.sqrt(np.mean(d**2) / np.mean(truth[far] ** 2))
    return rel, np.abs(d[truth[far] != 0]).max()


def test_ellipsoid_phantom_relative_error(two_ellipsoids):
    """Two rotated, overlapping ellipsoids, 2000 uniform directions, samples of
    0.02, Hann window: relative RMS error < 2 % (measured 1.5 %) and every
    voxel inside the objects within 0.015 (measured 0.0096) of the truth.

    Unlike a centred ball, whose projections are the same in every direction,
    an ellipsoid's edges move from direction to direction: away from the
    centre, at radius r, neighbouring directions (about 0.08 rad apart for
    2000) see a plane shift of 0.08 r, and where that exceeds the sample
    pitch the angular sampling aliases into streaks outside the objects. A
    coarser pitch and a window keep the band matched to 2000 directions.
    """
    phantom, truth, far = two_ellipsoids
    g = RadonGeometry.uniform(2000, 64, spacing=0.02)
    rec = radon3d_fbp(phantom.project_radon(g), g, VOL, precision="float64", window="hann")
    rel, inside = _errors(rec, truth, far)
    assert rel < 0.02
    assert inside < 0.015


def test_voronoi_weights_fix_a_nonuniform_set(two_ellipsoids):
    """Half of 4000 random directions crowded into the cap around +z: with the
    Voronoi weights the objects come back within 2 %; equal weights (which
    count the cap several times over) miss by far more."""
    phantom, truth, far = two_ellipsoids
    rng = np.random.default_rng(5)
    d = rng.standard_normal((4000, 3))
    d[:2000, 2] = np.abs(d[:2000, 2]) + 2.0
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    g = RadonGeometry(d, 64, spacing=0.02)
    p = phantom.project_radon(g)
    rel_good, inside_good = _errors(radon3d_fbp(p, g, VOL, window="hann"), truth, far)
    rel_bad, inside_bad = _errors(radon3d_fbp(p, g, VOL, window="hann", angle_weights="uniform"), truth, far)
    # Measured: 5.5 % RMS (random directions leave gaps, so more streaks than
    # the spiral) and 0.011 inside the objects, against 114 % and 0.45.
    assert rel_good < 0.08 and inside_good < 0.02
    assert rel_bad > 10 * rel_good and inside_bad > 0.2


def test_float32_agrees_with_float64(uniform2000):
    p = ball(R, center=(0.03, 0.0, -0.02)).project_radon(uniform2000)
    r32 = radon3d_fbp(p, uniform2000, VOL, precision="float32", window="hann")
    r64 = radon3d_fbp(p, uniform2000, VOL, precision="float64", window="hann")
    assert r32.dtype == np.float32 and r64.dtype == np.float64
    # Measured 3.5e-7: the filter runs in float64 and the back-projection sums
    # batches of 64 directions (a single running float32 sum with a float32
    # FFT gave 2e-5 on some balls; see filter_projections).
    assert np.abs(r32 - r64).max() < 2e-6 * np.abs(r64).max()


@pytest.mark.parametrize("window", ["shepp-logan", "cosine", "hamming", "hann"])
def test_windows_keep_the_interior_quantitative(uniform2000, window):
    rec = radon3d_fbp(ball(R).project_radon(uniform2000), uniform2000, VOL, window=window, cutoff=0.8)
    assert np.abs(rec[_radius(VOL) < 0.7 * R] - 1).max() < 0.02


def test_default_volume():
    g = RadonGeometry.uniform(300, 40, spacing=0.05)
    rec = radon3d_fbp(ball(0.5).project_radon(g), g)
    assert rec.shape == g.default_volume().shape == (23, 23, 23)


def test_bad_input(uniform2000):
    g = uniform2000
    p = np.zeros(g.projection_shape)
    if not cuda_available():  # never a silent fallback to the CPU
        with pytest.raises(RuntimeError, match="backend='cuda' needs a CUDA GPU"):
            radon3d_fbp(p, g, VOL, backend="cuda")
        with pytest.raises(RuntimeError, match="backend='cuda' needs a CUDA GPU"):
            radon3d_forward(np.zeros(VOL.shape), g, VOL, backend="cuda")
    with pytest.raises(ValueError, match="backend: expected one of"):
        radon3d_fbp(p, g, VOL, backend="opencl")
    with pytest.raises(ValueError, match="method: expected one of"):
        radon3d_fbp(p, g, VOL, method="three-stage")
    with pytest.raises(ValueError, match="method: 'two-stage' needs directions on a theta-major"):
        radon3d_fbp(p, g, VOL, method="two-stage")  # a Fibonacci set is no grid
    with pytest.raises(ValueError, match=r"projections: expected shape \(n_dirs, n_samples\) = \(2000, 128\)"):
        radon3d_fbp(p[:, :100], g, VOL)
    bad = p.copy()
    bad[3, 4] = np.nan
    with pytest.raises(ValueError, match="projections: expected finite values, got 1 NaN"):
        radon3d_fbp(bad, g, VOL)
    with pytest.raises(TypeError, match="geometry: expected a RadonGeometry"):
        radon3d_fbp(p, "nope", VOL)
    with pytest.raises(ValueError, match=r"volume: expected a 3D VolumeGeometry"):
        radon3d_fbp(p, g, VolumeGeometry((8, 8)))
    with pytest.raises(ValueError, match="window: expected one of"):
        radon3d_fbp(p, g, VOL, window="parzen")
    with pytest.raises(ValueError, match="cutoff"):
        radon3d_fbp(p, g, VOL, cutoff=1.5)
    with pytest.raises(ValueError, match="weights: expected 2000 values, got 3"):
        radon3d_fbp(p, g, VOL, angle_weights=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="precision: expected one of"):
        radon3d_fbp(p, g, VOL, precision="half")
    with pytest.raises(ValueError, match=r"volume_array: expected shape \(nz, ny, nx\)"):
        radon3d_forward(np.zeros((4, 4, 4)), g, VOL)


# -- two-stage back-projection ----------------------------------------------------------------


@pytest.fixture(scope="module")
def grid_ball():
    g = RadonGeometry.grid(32, 64, 128, spacing=0.01)
    p = ball(R).project_radon(g)
    return g, p, radon3d_fbp(p, g, VOL, precision="float64")


def test_grid_shape_found_and_refused():
    assert grid_shape(RadonGeometry.grid(5, 7, 16)) == (5, 7)
    assert grid_shape(RadonGeometry.grid(4, 6, 16, hemisphere=True)) == (4, 6)
    g = RadonGeometry.grid(5, 7, 16)
    shuffled = RadonGeometry(g.directions[np.r_[1, 0, 2:35]], 16)
    with pytest.raises(ValueError, match="two-stage"):
        grid_shape(shuffled)
    with pytest.raises(ValueError, match="two-stage"):
        grid_shape(RadonGeometry.grid(1, 7, 16))  # one theta: no second stage to speak of
    with pytest.raises(ValueError, match="oversampling: expected a positive integer"):
        TwoStagePlan(g, VOL, oversampling=0)


@pytest.mark.parametrize("oversampling, interior, everywhere", [(2, 2e-4, 0.05), (4, 5e-5, 0.015)])
def test_two_stage_matches_single_stage_within_its_bound(grid_ball, oversampling, interior, everywhere):
    """The accuracy cost of the intermediate planes (r pitch = spacing / oversampling).

    Measured on this ball (32 x 64 grid, 128 samples of 0.01, 32^3 voxels of
    1/32), relative to max |single-stage|: oversampling 2: 6.3e-5 in the
    interior (r < 0.8 R), 3.6e-2 at worst (at the ball's surface, where the
    second derivative is sharpest), rms 7e-3; oversampling 4: 1.9e-5, 1.1e-2,
    rms 2.4e-3. The extra interpolation in r acts where the filtered
    projections vary within a sample, so the error falls about as
    oversampling^-2 (linear interpolation) and the interior stays quantitative.
    """
    g, p, single = grid_ball
    two = radon3d_fbp(p, g, VOL, precision="float64", method="two-stage", oversampling=oversampling)
    diff = np.abs(two - single)
    scale = np.abs(single).max()
    assert diff[_radius(VOL) < 0.8 * R].max() < interior * scale
    assert diff.max() < everywhere * scale
    assert np.abs(two[_radius(VOL) < 0.8 * R] - 1).max() < 0.005


def test_two_stage_single_precision_and_off_centre_volume(grid_ball):
    """float32 two-stage == float64 two-stage to float32 rounding; an off-centre,
    anisotropic grid goes through the same plan (its own centre for r)."""
    g, p, _ = grid_ball
    vol = VolumeGeometry((9, 14, 11), (0.03, 0.025, 0.035), center=(0.05, -0.04, 0.06))
    two64 = radon3d_fbp(p, g, vol, precision="float64", method="two-stage", oversampling=4)
    two32 = radon3d_fbp(p, g, vol, method="two-stage", oversampling=4)
    assert two32.dtype == np.float32
    assert np.abs(two32 - two64).max() < 1e-5 * np.abs(two64).max()
    one = radon3d_fbp(p, g, vol, precision="float64")
    inside = _radius_at(vol, (0.05, -0.04, 0.06)) + np.hypot(0.05, 0.04) + 0.06 < 0.8 * R
    assert np.abs(two64 - one)[inside].max() < 1e-4 * np.abs(one).max()


def _radius_at(volume, centre):
    z, y, x = (volume.coordinates(a) for a in "zyx")
    cz, cy, cx = centre
    return np.sqrt((x[None, None, :] - cx) ** 2 + (y[None, :, None] - cy) ** 2 + (z[:, None, None] - cz) ** 2)
