"""2D ellipse phantoms: exact line integrals against independent references."""

import math

import numpy as np
import pytest

from leveret.geometry import ParallelGeometry, VolumeGeometry
from leveret.phantom import Ellipse, EllipsePhantom, disk, random_ellipses, shepp_logan, shepp_logan_ellipses


# -- independent references ------------------------------------------------------
def indicator_sum(phantom, x, y):
    """Phantom values at points, written from the documented meaning of the
    parameters (own x axis along (cos angle, sin angle)), not from the module."""
    out = np.zeros(np.broadcast(x, y).shape)
    for e in phantom.ellipses:
        a, b = e.semi_axes
        ex = np.array([math.cos(e.angle), math.sin(e.angle)])
        ey = np.array([-math.sin(e.angle), math.cos(e.angle)])
        dx, dy = x - e.center[0], y - e.center[1]
        u = dx * ex[0] + dy * ex[1]
        w = dx * ey[0] + dy * ey[1]
        out += e.value * ((u / a) ** 2 + (w / b) ** 2 <= 1)
    return out


def riemann_line_integrals(phantom, s, t, half_length, n):
    """Midpoint rule along the lines {x cos t + y sin t = s}, direction (-sin t, cos t).

    For each ellipse the midpoint sum of an interval's indicator misses its
    length by less than one step, so the error is below sum(|value|) * step.
    """
    step = 2 * half_length / n
    tau = -half_length + (np.arange(n) + 0.5) * step
    s, t = np.broadcast_arrays(np.asarray(s, float), np.asarray(t, float))
    s, t = s[..., None], t[..., None]
    x = s * np.cos(t) - tau * np.sin(t)
    y = s * np.sin(t) + tau * np.cos(t)
    bound = step * sum(abs(e.value) for e in phantom.ellipses)
    return indicator_sum(phantom, x, y).sum(axis=-1) * step, bound


def awkward_geometry(n_cols=48, det_spacing=0.05):
    """Unsorted angles over more than 2 pi, off-centre axis, per-view shifts."""
    angles = [0.1, 0.9, 2.0, 3.5, 5.9, 7.0]
    return ParallelGeometry(
        angles, n_cols, det_spacing=det_spacing, center=0.42 * n_cols, axis_shift=[0.5, -1.2, 0.0, 2.3, -0.7, 1.9]
    )


def overlapping_phantom():
    return EllipsePhantom(
        [
            Ellipse(1.0, (0.6, 0.3), (0.1, -0.05), 0.4),
            Ellipse(-0.5, (0.2, 0.45), (0.25, 0.1), -1.1),  # overlaps the first
            Ellipse(0.7, (0.15, 0.05), (-0.4, 0.35), 2.5),
            *random_ellipses(4, np.random.default_rng(7), radius=0.9),
        ]
    )


# -- disks ---------------------------------------------------------------------------
def test_disk_line_integrals_are_chords():
    R = 0.7
    s = np.linspace(-1.0, 1.0, 200)  # no sample at |s| = R
    t = np.linspace(0, 2 * np.pi, 13)[:, None]
    p = disk(R).line_integrals(s, t)
    expected = np.broadcast_to(2 * np.sqrt(np.maximum(R * R - s * s, 0)), p.shape)
    np.testing.assert_allclose(p, expected, rtol=0, atol=1e-12)
    assert np.all(p[:, np.abs(s) >= R] == 0)
    # At tangency the chord is sqrt(rounding of R^2 - s^2): ~1e-8 R, not 0.
    assert np.all(np.abs(disk(R).line_integrals([-R, R], t)) < 1e-7)


def test_off_centre_disk_shifts_by_projected_centre():
    R, x0, y0 = 0.3, 0.4, -0.25
    s = np.linspace(-1.0, 1.0, 101)
    t = np.linspace(-3, 3, 7)[:, None]
    s_loc = s - (x0 * np.cos(t) + y0 * np.sin(t))
    expected = 2.5 * 2 * np.sqrt(np.maximum(R * R - s_loc**2, 0))
    p = disk(R, value=2.5, center=(x0, y0)).line_integrals(s, t)
    np.testing.assert_allclose(p, expected, rtol=0, atol=1e-12)


def test_angle_is_counter_clockwise_from_x():
    # Long axis (a = 1) along (cos 30deg, sin 30deg): rays along it, i.e.
    # t = 30 + 90 deg, see the full length 2a through the centre; rays
    # across it (t = 30 deg) see 2b.
    e = EllipsePhantom([Ellipse(1.0, (1.0, 0.1), angle=math.radians(30))])
    assert e.line_integrals(0.0, math.radians(120)) == pytest.approx(2.0, abs=1e-12)
    assert e.line_integrals(0.0, math.radians(30)) == pytest.approx(0.2, abs=1e-12)
    # The support along e(t) at t = 30 deg is [-a, a].
    assert e.line_integrals(0.99, math.radians(30)) > 0
    assert e.line_integrals(0.11, math.radians(120)) == 0


# -- against an independent numerical integral ---------------------------------------
def test_project_matches_riemann_sums_on_awkward_geometry():
    phantom = overlapping_phantom()
    g = awkward_geometry()
    p = phantom.project(g)
    assert p.shape == (g.n_angles, g.n_cols) and p.dtype == np.float64
    s = np.stack([g.column_positions(n) for n in range(g.n_angles)])
    ref, bound = riemann_line_integrals(phantom, s, g.angles[:, None], 1.5, 8000)
    assert bound < 2e-3
    np.testing.assert_allclose(p, ref, rtol=0, atol=bound)
    assert np.abs(p).max() > 0.3  # the rays do hit the phantom


def test_line_integrals_broadcast():
    phantom = overlapping_phantom()
    s = np.linspace(-0.9, 0.9, 5)[None, :]
    t = np.array([0.2, 1.3, 4.0])[:, None]
    p = phantom.line_integrals(s, t)
    assert p.shape == (3, 5)
    for i in range(3):
        for j in range(5):
            assert p[i, j] == pytest.approx(float(phantom.line_integrals(s[0, j], t[i, 0])), abs=1e-14)


# -- conventions ------------------------------------------------------------------------
def test_small_disk_projects_to_documented_column():
    # p(s)^2 / 4 = R^2 - (s - s0)^2 is a parabola: its vertex is the column
    # of the disk centre, exactly, whatever the sampling.
    x0, y0, R = 0.3, -0.2, 0.15
    g = awkward_geometry(n_cols=60, det_spacing=0.04)
    p = disk(R, center=(x0, y0)).project(g)
    cols = np.arange(g.n_cols)
    for n, t in enumerate(g.angles):
        lit = p[n] > 0
        assert lit.sum() >= 5
        c2, c1, _ = np.polyfit(cols[lit], p[n, lit] ** 2, 2)
        expected = g.center + g.axis_shift[n] + (x0 * math.cos(t) + y0 * math.sin(t)) / g.det_spacing
        assert -c1 / (2 * c2) == pytest.approx(expected, abs=1e-6)
        assert np.argmax(p[n]) == round(expected)


# -- mass conservation --------------------------------------------------------------------
def integrate_over_s(phantom, t, order=48):
    """High-order quadrature of s -> p(t, s) over the real line.

    Between consecutive support edges c.theta +- r of the ellipses each term
    is smooth inside and has square-root ends; s = m + h sin(phi) makes it
    smooth in phi, so Gauss-Legendre in phi converges fast.
    """
    edges = []
    for e in phantom.ellipses:
        a, b = e.semi_axes
        sc = e.center[0] * math.cos(t) + e.center[1] * math.sin(t)
        r = math.hypot(a * math.cos(t - e.angle), b * math.sin(t - e.angle))
        edges += [sc - r, sc + r]
    edges = np.unique(edges)
    lo, hi = edges[:-1, None], edges[1:, None]
    m, h = (lo + hi) / 2, (hi - lo) / 2
    x, w = np.polynomial.legendre.leggauss(order)
    phi = x * np.pi / 2
    s = m + h * np.sin(phi)
    jac = h * np.cos(phi) * np.pi / 2
    return float((phantom.line_integrals(s, t) * jac * w).sum())


def test_closed_form_line_integrals_conserve_mass():
    phantom = overlapping_phantom()
    for t in (0.3, 2.0, 5.0):
        assert integrate_over_s(phantom, t) == pytest.approx(phantom.mass, rel=1e-12)


def test_sampled_projections_conserve_mass():
    phantom = overlapping_phantom()
    g = awkward_geometry(n_cols=2000, det_spacing=0.0012)
    p = phantom.project(g)
    np.testing.assert_allclose(p.sum(axis=1) * g.det_spacing, phantom.mass, rtol=1e-4)


def test_mass_of_shepp_logan():
    sl = shepp_logan_ellipses(radius=2.0, modified=False)
    expected = sum(e.value * math.pi * e.semi_axes[0] * e.semi_axes[1] for e in sl)
    assert sl.mass == pytest.approx(expected)
    assert sl.ellipses[0].semi_axes == pytest.approx((0.69 * 2, 0.92 * 2))


# -- rasterize -------------------------------------------------------------------------
def test_rasterize_shape_and_pixel_centres():
    # (y, x) order: dy = 0.5, dx = 0.25, centre y = 1, x = -2.
    vol = VolumeGeometry((7, 9), voxel_size=(0.5, 0.25), center=(1.0, -2.0))
    j, i = 5, 2
    x = -2.0 + (i - 4) * 0.25
    y = 1.0 + (j - 3) * 0.5
    img = disk(0.01, value=3.0, center=(x, y)).rasterize(vol)
    assert img.shape == (7, 9) and img.dtype == np.float64
    assert img[j, i] == 3.0
    assert np.count_nonzero(img) == 1


def test_rasterize_equals_independent_point_evaluation():
    phantom = overlapping_phantom()
    vol = VolumeGeometry((50, 60), voxel_size=(0.041, 0.037), center=(0.05, -0.02))
    x = vol.coordinates("x")[None, :]
    y = vol.coordinates("y")[:, None]
    np.testing.assert_allclose(phantom.rasterize(vol), indicator_sum(phantom, x, y), rtol=0, atol=1e-12)
    np.testing.assert_allclose(phantom.evaluate(x, y), indicator_sum(phantom, x, y), rtol=0, atol=1e-12)


def test_supersampling_converges_to_area_fraction():
    # A huge disk is a half-plane across one pixel: its edge x = 0.2 cuts
    # the pixel [-0.5, 0.5]^2, covering the fraction 0.3.
    big = 1e4
    half_plane = disk(big, center=(0.2 + big, 0.0))
    vol = VolumeGeometry((1, 1))
    for n_sub in (1, 4, 7, 16, 33):
        frac = half_plane.rasterize(vol, supersampling=n_sub)[0, 0]
        # exactly the share of the n_sub x n_sub sample centres beyond the edge
        centres = (np.arange(n_sub) + 0.5) / n_sub - 0.5
        assert frac == pytest.approx(np.mean(centres > 0.2), abs=1e-12)
        assert abs(frac - 0.3) <= 1 / n_sub
    # The mass of a disk on a coarse grid converges to pi R^2.
    d = disk(0.93, center=(0.07, -0.11))
    grid = VolumeGeometry((12, 12), voxel_size=0.2)
    errors = [abs(d.rasterize(grid, n).sum() * 0.04 - d.mass) / d.mass for n in (1, 4, 16)]
    assert errors[2] < errors[0] and errors[2] < 2e-4  # measured 1.6e-2, 8.0e-4, 6.6e-5


# -- Shepp-Logan ----------------------------------------------------------------------------
def test_shepp_logan_2d_values_and_orientation():
    img = shepp_logan((129, 129))  # pixel 64 is at 0; pixel size 2/129
    assert img.shape == (129, 129)
    assert img.min() == 0.0 and img.max() == 1.0
    h = 2 / 129

    def at(x, y):
        return img[round(y / h) + 64, round(x / h) + 64]

    assert at(0.0, 0.0) == pytest.approx(0.2)  # brain
    assert at(0.0, 0.9) == pytest.approx(1.0)  # skull, top of the head (y up)
    assert at(0.0, 0.35) == pytest.approx(0.3)  # the large ellipse above the centre
    assert at(0.0, -0.35) == pytest.approx(0.2)  # ... is not mirrored below
    assert at(0.0, -0.606) == pytest.approx(0.3)  # the small "mouth" ellipses
    assert at(0.22, 0.0) == pytest.approx(0.0)  # dark ellipse
    assert at(0.0, 0.98) == 0.0  # outside
    original = shepp_logan((64, 64), modified=False)
    assert original.max() == pytest.approx(2.0) and original.min() >= 0


def test_shepp_logan_ellipses_scaling_and_scaled():
    sl = shepp_logan_ellipses()
    big = shepp_logan_ellipses(radius=5.0)
    assert big == sl.scaled(5.0)
    s = np.linspace(-0.9, 0.9, 31)
    t = np.linspace(0, 3, 4)[:, None]
    np.testing.assert_allclose(big.line_integrals(5 * s, t), 5 * sl.line_integrals(s, t), rtol=1e-12, atol=1e-12)
    assert big.mass == pytest.approx(25 * sl.mass)


def test_random_ellipses_stay_inside_radius():
    ph = random_ellipses(20, 3, radius=2.5)
    assert len(ph) == 20
    theta = np.linspace(0, 2 * np.pi, 400)
    for e in ph:
        assert math.hypot(*e.center) + max(e.semi_axes) <= 2.5 + 1e-12
    # No line at |s| >= radius meets it.
    assert np.all(ph.line_integrals(2.5, theta) == 0)
    assert random_ellipses(3, 11) == random_ellipses(3, np.random.default_rng(11))


# -- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(value=1.0, semi_axes=(0.0, 1.0)), r"semi_axes\[0\]: expected a positive"),
        (dict(value=1.0, semi_axes=(1.0, -2.0)), r"semi_axes\[1\]: expected a positive"),
        (dict(value=1.0, semi_axes=(1.0, 1.0, 1.0)), r"semi_axes: expected a scalar or 2"),
        (dict(value=float("nan"), semi_axes=1.0), r"value: expected a finite number, got nan"),
        (dict(value=1.0, semi_axes=1.0, center=(0.0, float("inf"))), r"center: expected finite"),
        (dict(value=1.0, semi_axes=1.0, center=(0.0, 0.0, 0.0)), r"center: expected 2 values, got 3"),
        (dict(value=1.0, semi_axes=1.0, angle=float("inf")), r"angle: expected a finite"),
    ],
)
def test_bad_ellipse(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Ellipse(**kwargs)


def test_bad_phantom_arguments():
    ph = disk(0.5)
    with pytest.raises(TypeError, match=r"ellipses\[1\]: expected an Ellipse, got int"):
        EllipsePhantom([Ellipse(1, 1), 3])
    with pytest.raises(ValueError, match=r"volume: expected a 2D VolumeGeometry .* got a 3D one"):
        ph.rasterize(VolumeGeometry((4, 4, 4)))
    with pytest.raises(TypeError, match=r"volume: expected a VolumeGeometry, got tuple"):
        ph.rasterize((4, 4))
    with pytest.raises(ValueError, match=r"supersampling: expected a positive integer, got 0"):
        ph.rasterize(VolumeGeometry((4, 4)), supersampling=0)
    with pytest.raises(ValueError, match=r"geometry: expected a 2D ParallelGeometry .* n_rows=3"):
        ph.project(ParallelGeometry([0.0, 1.0], 8, n_rows=3))
    with pytest.raises(TypeError, match=r"geometry: expected a ParallelGeometry, got str"):
        ph.project("parallel")
    with pytest.raises(ValueError, match=r"s: expected finite values"):
        ph.line_integrals([0.0, np.nan], 0.0)
    with pytest.raises(ValueError, match=r"angles: expected finite values"):
        ph.line_integrals(0.0, np.inf)
    with pytest.raises(ValueError, match=r"s, angles: expected shapes that broadcast"):
        ph.line_integrals(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match=r"factor: expected a positive number"):
        ph.scaled(-1.0)
    with pytest.raises(ValueError, match=r"radius: expected a positive number"):
        disk(0.0)
    with pytest.raises(ValueError, match=r"n: expected a positive integer"):
        random_ellipses(0, 1)
    with pytest.raises(ValueError, match=r"shape: expected 2 or 3 sizes"):
        shepp_logan((4,))


def test_phantom_is_immutable():
    ph = disk(0.5)
    with pytest.raises(AttributeError):
        ph.ellipses = ()
    with pytest.raises(AttributeError):
        ph.ellipses[0].value = 2.0
