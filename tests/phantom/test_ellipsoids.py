"""3D ellipsoid phantoms: exact line integrals against independent references."""

import math

import numpy as np
import pytest

from leveret.geometry import ParallelGeometry, VolumeGeometry
from leveret.phantom import (
    Ellipse,
    EllipsePhantom,
    Ellipsoid,
    EllipsoidPhantom,
    ball,
    euler_rotation,
    random_ellipsoids,
    shepp_logan,
    shepp_logan_3d,
    shepp_logan_ellipses,
)


# -- independent references ----------------------------------------------------------
def indicator_sum(phantom, x, y, z):
    """Phantom values at points from the documented meaning: the columns of
    rotation_matrix are the own axes, semi_axes the lengths along them."""
    out = np.zeros(np.broadcast(x, y, z).shape)
    for e in phantom.ellipsoids:
        d = (x - e.center[0], y - e.center[1], z - e.center[2])
        total = 0.0
        for k in range(3):
            axis = e.rotation_matrix[:, k]
            total = total + ((d[0] * axis[0] + d[1] * axis[1] + d[2] * axis[2]) / e.semi_axes[k]) ** 2
        out += e.value * (total <= 1)
    return out


def riemann_line_integrals(phantom, points, directions, half_length, n):
    """Midpoint rule along points + tau * unit(directions), |tau| <= half_length.

    Per ellipsoid the midpoint sum of the chord's indicator misses its length
    by less than one step: the error is below sum(|value|) * step.
    """
    units = directions / np.linalg.norm(directions, axis=-1, keepdims=True)
    step = 2 * half_length / n
    tau = -half_length + (np.arange(n) + 0.5) * step
    pts = points[..., None, :] + tau[:, None] * units[..., None, :]
    vals = indicator_sum(phantom, pts[..., 0], pts[..., 1], pts[..., 2])
    bound = step * sum(abs(e.value) for e in phantom.ellipsoids)
    return vals.sum(axis=-1) * step, bound


def overlapping_phantom():
    return EllipsoidPhantom(
        [
            Ellipsoid(1.0, (0.6, 0.3, 0.45), (0.1, -0.05, 0.1), (0.4, 0.9, -0.3)),
            Ellipsoid(-0.5, (0.2, 0.45, 0.3), (0.25, 0.1, 0.0), (-1.1, 0.3, 2.0)),  # overlaps
            Ellipsoid(0.7, (0.15, 0.05, 0.3), (-0.4, 0.35, -0.3), 2.5),
            *random_ellipsoids(3, np.random.default_rng(5), radius=0.9),
        ]
    )


def awkward_geometry(n_rows=5, n_cols=16, det_spacing=0.11, row_spacing=0.3):
    angles = [0.2, 3.9, 1.1, 6.8]
    return ParallelGeometry(
        angles,
        n_cols,
        n_rows=n_rows,
        det_spacing=det_spacing,
        row_spacing=row_spacing,
        center=0.45 * n_cols,
        axis_shift=[0.5, -1.3, 2.2, 0.0],
    )


def detector_points(g):
    """World point s e(t) + z ez of every detector pixel, written from docs/conventions.md."""
    t = g.angles[:, None, None]
    s = np.stack([g.column_positions(n) for n in range(g.n_angles)])[:, None, :]
    z = ((np.arange(g.n_rows) - (g.n_rows - 1) / 2) * g.row_spacing)[None, :, None]
    pts = np.stack(np.broadcast_arrays(s * np.cos(t), s * np.sin(t), z), axis=-1)
    dirs = np.stack(np.broadcast_arrays(-np.sin(t), np.cos(t), 0 * t), axis=-1)
    return pts, np.broadcast_to(dirs, pts.shape)


# -- rotations ---------------------------------------------------------------------------
def test_euler_rotation():
    phi = 0.7
    rz = [[math.cos(phi), -math.sin(phi), 0], [math.sin(phi), math.cos(phi), 0], [0, 0, 1]]
    np.testing.assert_allclose(euler_rotation(phi), rz, atol=1e-15)
    np.testing.assert_allclose(Ellipsoid(1, 1, rotation=phi).rotation_matrix, rz, atol=1e-15)
    # theta tilts about x: the own z axis goes to (0, -sin theta, cos theta).
    np.testing.assert_allclose(euler_rotation(0, math.pi / 2)[:, 2], [0, -1, 0], atol=1e-15)
    # Order: psi about z first, then theta about x, then phi about z.
    np.testing.assert_allclose(euler_rotation(math.pi / 2, math.pi / 2, 0)[:, 2], [1, 0, 0], atol=1e-15)
    np.testing.assert_allclose(euler_rotation(0, math.pi / 2, math.pi / 2)[:, 0], [0, 0, 1], atol=1e-15)
    r = euler_rotation(0.3, -1.2, 2.9)
    np.testing.assert_allclose(r.T @ r, np.eye(3), atol=1e-14)
    assert np.linalg.det(r) == pytest.approx(1.0)
    np.testing.assert_array_equal(Ellipsoid(1, 1, rotation=(0.3, -1.2, 2.9)).rotation_matrix, r)
    np.testing.assert_array_equal(Ellipsoid(1, 1, rotation=r).rotation_matrix, r)


def test_tilted_ellipsoid_lies_along_its_own_axis():
    # semi-axis 1 along the own z, tilted by theta = 90 deg onto -y.
    e = EllipsoidPhantom([Ellipsoid(1.0, (0.1, 0.1, 1.0), rotation=(0.0, math.pi / 2, 0.0))])
    assert e.line_integrals([0, 0, 0], [0, 1, 0]) == pytest.approx(2.0, abs=1e-12)
    assert e.line_integrals([0, 0, 0], [0, 0, 5]) == pytest.approx(0.2, abs=1e-12)
    assert e.line_integrals([0, 0.95, 0], [1, 0, 0]) > 0


# -- balls ------------------------------------------------------------------------------
def test_ball_line_integrals_are_chords():
    rng = np.random.default_rng(1)
    R, c = 0.6, np.array([0.1, -0.2, 0.3])
    d = rng.standard_normal((200, 3)) * rng.uniform(0.1, 10, (200, 1))  # not unit
    u = d / np.linalg.norm(d, axis=1, keepdims=True)
    perp = rng.standard_normal((200, 3))
    perp -= (perp * u).sum(1, keepdims=True) * u
    perp /= np.linalg.norm(perp, axis=1, keepdims=True)
    rho = np.linspace(0, 0.9, 200)
    rho[rho == R] = 0.61  # keep away from exact tangency (sqrt of rounding)
    points = c + rho[:, None] * perp + rng.uniform(-3, 3, (200, 1)) * u  # any point on the line
    p = ball(R, center=c).line_integrals(points, d)
    np.testing.assert_allclose(p, 2 * np.sqrt(np.maximum(R * R - rho * rho, 0)), rtol=0, atol=1e-12)
    assert np.all(p[rho > R] == 0)


def test_ball_projection():
    R, (x0, y0, z0) = 0.5, (0.2, -0.1, 0.15)
    g = awkward_geometry(n_rows=9, n_cols=20, det_spacing=0.07, row_spacing=0.09)
    p = ball(R, value=2.0, center=(x0, y0, z0)).project(g)
    assert p.shape == (4, 9, 20) and p.dtype == np.float64
    t = g.angles[:, None, None]
    s = np.stack([g.column_positions(n) for n in range(4)])[:, None, :]
    z = g.row_positions()[None, :, None]
    r2 = (s - x0 * np.cos(t) - y0 * np.sin(t)) ** 2 + (z - z0) ** 2
    np.testing.assert_allclose(p, 4 * np.sqrt(np.maximum(R * R - r2, 0)), rtol=0, atol=1e-12)


# -- against an independent numerical integral --------------------------------------------
def test_project_matches_riemann_sums_on_awkward_geometry():
    phantom = overlapping_phantom()
    g = awkward_geometry()
    pts, dirs = detector_points(g)
    ref, bound = riemann_line_integrals(phantom, pts, dirs, 1.6, 6000)
    assert bound < 3e-3
    p = phantom.project(g)
    np.testing.assert_allclose(p, ref, rtol=0, atol=bound)
    assert np.abs(p).max() > 0.3
    # The generic entry gives the same numbers (to rounding).
    np.testing.assert_allclose(phantom.line_integrals(pts, dirs), p, rtol=0, atol=1e-12)


def test_generic_line_integrals_match_riemann_sums():
    rng = np.random.default_rng(2)
    phantom = overlapping_phantom()
    points = rng.uniform(-0.5, 0.5, (150, 3))
    directions = rng.standard_normal((150, 3)) * 3.0
    ref, bound = riemann_line_integrals(phantom, points, directions, 1.9, 4000)
    p = phantom.line_integrals(points, directions)
    assert p.shape == (150,)
    np.testing.assert_allclose(p, ref, rtol=0, atol=bound)
    # Broadcasting: one point, many directions; the direction's sign and length do not matter.
    one = phantom.line_integrals(points[0], -0.1 * directions)
    np.testing.assert_allclose(
        one, phantom.line_integrals(np.broadcast_to(points[0], (150, 3)), directions), rtol=0, atol=1e-12
    )


# -- conventions -----------------------------------------------------------------------------
def test_small_ball_projects_to_documented_pixel():
    # p^2 / 4 = R^2 - (s - s0)^2 - (z - z0)^2 is a quadric in (column, row);
    # its vertex is where the ball centre projects, exactly.
    x0, y0, z0, R = 0.3, -0.2, 0.12, 0.2
    g = awkward_geometry(n_rows=24, n_cols=40, det_spacing=0.03, row_spacing=0.04)
    p = ball(R, center=(x0, y0, z0)).project(g)
    rows, cols = np.meshgrid(np.arange(g.n_rows), np.arange(g.n_cols), indexing="ij")
    for n, t in enumerate(g.angles):
        lit = p[n] > 0
        assert lit.sum() > 20
        c, r = cols[lit], rows[lit]
        basis = np.stack([c * c, r * r, c, r, np.ones_like(c)], axis=1).astype(float)
        k = np.linalg.lstsq(basis, p[n][lit] ** 2, rcond=None)[0]
        col = g.center + g.axis_shift[n] + (x0 * math.cos(t) + y0 * math.sin(t)) / g.det_spacing
        row = z0 / g.row_spacing + (g.n_rows - 1) / 2
        assert -k[2] / (2 * k[0]) == pytest.approx(col, abs=1e-6)
        assert -k[3] / (2 * k[1]) == pytest.approx(row, abs=1e-6)
        assert np.unravel_index(np.argmax(p[n]), p[n].shape) == (round(row), round(col))


def test_central_row_of_shepp_logan_3d_is_the_2d_phantom():
    g3 = awkward_geometry(n_rows=7, n_cols=64, det_spacing=0.035, row_spacing=0.1)
    g2 = ParallelGeometry(g3.angles, 64, det_spacing=0.035, center=g3.center, axis_shift=g3.axis_shift)
    for modified in (True, False):
        p3 = shepp_logan_3d(1.3, modified).project(g3)
        p2 = shepp_logan_ellipses(1.3, modified).project(g2)
        np.testing.assert_allclose(p3[:, 3, :], p2, rtol=0, atol=1e-12)


def test_rows_are_projections_of_the_sections():
    # At height z the rays lie in the plane z: the row equals the 2D projection
    # of the cross-section (slice_2d), which the 2D tests check independently.
    phantom = overlapping_phantom()
    g3 = awkward_geometry(n_rows=9, n_cols=30, det_spacing=0.07, row_spacing=0.2)
    g2 = ParallelGeometry(g3.angles, 30, det_spacing=0.07, center=g3.center, axis_shift=g3.axis_shift)
    p3 = phantom.project(g3)
    for r, z in enumerate(g3.row_positions()):
        np.testing.assert_allclose(p3[:, r, :], phantom.slice_2d(z).project(g2), rtol=0, atol=1e-12)
    # And a ball's section is a disk of radius sqrt(R^2 - dz^2).
    sec = ball(0.5, 3.0, (0.1, 0.2, -0.1)).slice_2d(0.2)
    (e,) = sec.ellipses
    assert e.semi_axes == pytest.approx((0.4, 0.4)) and e.center == pytest.approx((0.1, 0.2))
    assert e.value == 3.0 and len(ball(0.5).slice_2d(0.51)) == 0


# -- mass conservation ------------------------------------------------------------------------
def test_sampled_projections_conserve_mass():
    phantom = overlapping_phantom()
    ds, dr = 0.016, 0.017
    g = ParallelGeometry([0.0, 0.7, 2.1, 4.4], 140, n_rows=130, det_spacing=ds, row_spacing=dr)
    p = phantom.project(g)
    np.testing.assert_allclose(p.sum(axis=(1, 2)) * ds * dr, phantom.mass, rtol=2e-3)


def test_sections_integrate_to_the_mass():
    # The mass of the section at height z is piecewise quadratic in z between
    # the ellipsoids' z extents: Gauss-Legendre with 3 nodes per piece is exact.
    phantom = overlapping_phantom()
    edges = np.unique([e.center[2] + sign * e.half_extent[2] for e in phantom.ellipsoids for sign in (-1, 1)])
    x, w = np.polynomial.legendre.leggauss(3)
    total = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        for xi, wi in zip(x, w):
            total += wi * (hi - lo) / 2 * phantom.slice_2d((lo + hi) / 2 + xi * (hi - lo) / 2).mass
    assert total == pytest.approx(phantom.mass, rel=1e-12)
    assert ball(0.7, 2.0).mass == pytest.approx(2.0 * 4 / 3 * math.pi * 0.7**3)


# -- rasterize ------------------------------------------------------------------------------------
def test_rasterize_shape_and_voxel_centres():
    vol = VolumeGeometry((5, 7, 9), voxel_size=(0.3, 0.5, 0.25), center=(0.6, 1.0, -2.0))
    k, j, i = 1, 5, 2
    x, y, z = -2.0 + (i - 4) * 0.25, 1.0 + (j - 3) * 0.5, 0.6 + (k - 2) * 0.3
    img = ball(0.01, value=3.0, center=(x, y, z)).rasterize(vol)
    assert img.shape == (5, 7, 9) and img.dtype == np.float64
    assert img[k, j, i] == 3.0 and np.count_nonzero(img) == 1


def test_rasterize_equals_independent_point_evaluation():
    phantom = overlapping_phantom()
    vol = VolumeGeometry((20, 24, 28), voxel_size=(0.09, 0.08, 0.07), center=(0.02, -0.03, 0.05))
    z, y, x = np.meshgrid(*(vol.coordinates(a) for a in "zyx"), indexing="ij")
    ref = indicator_sum(phantom, x, y, z)
    np.testing.assert_allclose(phantom.rasterize(vol), ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(phantom.evaluate(x, y, z), ref, rtol=0, atol=1e-12)


def test_supersampling_converges_to_volume():
    b = ball(0.93, center=(0.07, -0.11, 0.05))
    vol = VolumeGeometry((10, 10, 10), voxel_size=0.2)
    errors = [abs(b.rasterize(vol, n).sum() * 0.008 - b.mass) / b.mass for n in (1, 3, 9)]
    assert errors[2] < errors[0] and errors[2] < 3e-3  # measured 9.1e-3, 8.2e-4, 1.3e-3


def test_section_rasterizes_like_the_volume_slice():
    phantom = random_ellipsoids(6, 9)
    for z in (-0.31, 0.0, 0.27):
        vol3 = VolumeGeometry((1, 60, 50), voxel_size=(0.1, 0.035, 0.04), center=(z, 0.01, -0.02))
        vol2 = VolumeGeometry((60, 50), voxel_size=(0.035, 0.04), center=(0.01, -0.02))
        diff = np.abs(phantom.rasterize(vol3)[0] - phantom.slice_2d(z).rasterize(vol2)) > 1e-12
        assert diff.sum() <= 2  # only ties on a boundary may differ


def test_shepp_logan_3d_rasterizes_plausibly():
    vol = VolumeGeometry((1, 96, 96), voxel_size=(0.1, 2 / 96, 2 / 96))  # the plane z = 0
    img = shepp_logan_3d().rasterize(vol)[0]
    assert np.count_nonzero(img) > 0.4 * 96 * 96  # the head covers half the square
    assert img.max() == 1.0 and img.min() == 0.0
    assert img[48, 48] == pytest.approx(0.2)  # brain
    same = np.abs(img - shepp_logan((96, 96))) < 1e-12
    assert same.mean() > 0.999
    head = shepp_logan((16, 32, 32))
    assert head.shape == (16, 32, 32)
    assert head.min() == 0.0 and head.max() == 1.0
    assert head[0].max() == 0.0  # z = -0.94 is below the skull (c = 0.81)


def test_random_ellipsoids_stay_inside_radius():
    ph = random_ellipsoids(12, 4, radius=2.0)
    assert len(ph) == 12
    for e in ph:
        assert np.linalg.norm(e.center) + max(e.semi_axes) <= 2.0 + 1e-12
        r = e.rotation_matrix
        np.testing.assert_allclose(r.T @ r, np.eye(3), atol=1e-12)
        assert np.linalg.det(r) > 0
    assert ph == random_ellipsoids(12, np.random.default_rng(4), radius=2.0)


def test_scaled():
    ph = overlapping_phantom()
    rng = np.random.default_rng(3)
    pts, dirs = rng.uniform(-0.5, 0.5, (20, 3)), rng.standard_normal((20, 3))
    np.testing.assert_allclose(
        ph.scaled(3.0).line_integrals(3 * pts, dirs), 3 * ph.line_integrals(pts, dirs), rtol=1e-12, atol=1e-12
    )
    assert shepp_logan_3d(2.0) == shepp_logan_3d().scaled(2.0)


# -- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(value=1.0, semi_axes=(1.0, 0.0, 1.0)), r"semi_axes\[1\]: expected a positive"),
        (dict(value=1.0, semi_axes=(1.0, 1.0)), r"semi_axes: expected a scalar or 3"),
        (dict(value=np.inf, semi_axes=1.0), r"value: expected a finite number"),
        (dict(value=1.0, semi_axes=1.0, center=(0.0, 0.0)), r"center: expected 3 values, got 2"),
        (dict(value=1.0, semi_axes=1.0, rotation=np.eye(2)), r"rotation: expected .* got an array of shape \(2, 2\)"),
        (dict(value=1.0, semi_axes=1.0, rotation=2 * np.eye(3)), r"rotation: expected a rotation matrix"),
        (dict(value=1.0, semi_axes=1.0, rotation=np.diag([1.0, 1.0, -1.0])), r"rotation: expected a rotation matrix"),
        (dict(value=1.0, semi_axes=1.0, rotation=(0.0, np.nan, 0.0)), r"rotation: expected finite"),
    ],
)
def test_bad_ellipsoid(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Ellipsoid(**kwargs)


def test_bad_phantom_arguments():
    ph = ball(0.5)
    with pytest.raises(TypeError, match=r"ellipsoids\[0\]: expected an Ellipsoid, got Ellipse"):
        EllipsoidPhantom([Ellipse(1, 1)])
    with pytest.raises(ValueError, match=r"volume: expected a 3D VolumeGeometry .* got a 2D one"):
        ph.rasterize(VolumeGeometry((4, 4)))
    with pytest.raises(ValueError, match=r"geometry: expected a 3D ParallelGeometry .* got a 2D one"):
        ph.project(ParallelGeometry([0.0, 1.0], 8))
    with pytest.raises(ValueError, match=r"volume: expected a 2D VolumeGeometry .* got a 3D one"):
        EllipsePhantom([]).rasterize(VolumeGeometry((2, 4, 4)))
    with pytest.raises(ValueError, match=r"points: expected an array of shape \(\.\.\., 3\)"):
        ph.line_integrals(np.zeros((5, 2)), [1, 0, 0])
    with pytest.raises(ValueError, match=r"directions: expected non-zero vectors, got 1 zero"):
        ph.line_integrals(np.zeros((2, 3)), [[1, 0, 0], [0, 0, 0]])
    with pytest.raises(ValueError, match=r"directions: expected finite values"):
        ph.line_integrals(np.zeros(3), [np.nan, 0, 0])
    with pytest.raises(ValueError, match=r"points, directions: expected shapes that broadcast"):
        ph.line_integrals(np.zeros((4, 3)), np.ones((5, 3)))
    with pytest.raises(ValueError, match=r"z: expected a finite number"):
        ph.slice_2d(np.nan)
    with pytest.raises(ValueError, match=r"radius: expected a positive number"):
        ball(-1.0)
    with pytest.raises(ValueError, match=r"rng: expected a numpy.random.Generator"):
        random_ellipsoids(3, "seed")
