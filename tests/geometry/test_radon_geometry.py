"""RadonGeometry: conventions, direction sets, solid-angle weights, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from leveret import RadonGeometry
from leveret.geometry import RadonGeometry as FromGeometry


def test_exported_once():
    assert FromGeometry is RadonGeometry


def test_conventions_samples_and_angles():
    g = RadonGeometry.from_angles([0.0, math.pi / 2], [0.0, math.pi / 2], n_samples=5, spacing=0.5)
    np.testing.assert_allclose(g.directions, [[0, 0, 1], [0, 1, 0]], atol=1e-15)
    np.testing.assert_allclose(g.sample_positions(), [-1.0, -0.5, 0.0, 0.5, 1.0])
    assert g.projection_shape == (2, 5)
    # The point (0, 0.5, 1) lies on the plane t = 1 of n = z and t = 0.5 of n = y.
    np.testing.assert_allclose(g.project_samples([0.0, 0.5, 1.0]), [4.0, 3.0])
    th, ph = g.angles()
    np.testing.assert_allclose(th, [0.0, math.pi / 2], atol=1e-15)
    np.testing.assert_allclose(ph[1], math.pi / 2)


def test_immutable_hashable_replace():
    g = RadonGeometry.uniform(50, 16)
    with pytest.raises(AttributeError):
        g.spacing = 2.0
    with pytest.raises(ValueError):
        g.directions[0, 0] = 1.0  # read-only array
    h = g.replace(spacing=2.0)
    assert h.spacing == 2.0 and g.spacing == 1.0
    assert g == RadonGeometry.uniform(50, 16) and hash(g) == hash(RadonGeometry.uniform(50, 16))
    assert "50 directions on the sphere" in repr(g)


@pytest.mark.parametrize("hemisphere, total", [(False, 4 * math.pi), (True, 2 * math.pi)])
def test_uniform_weights_sum_and_equal_area(hemisphere, total):
    g = RadonGeometry.uniform(2000, 8, hemisphere=hemisphere)
    w = g.direction_weights()
    assert g.total_solid_angle == pytest.approx(total)
    assert w.sum() == pytest.approx(total, rel=1e-12)
    # The Fibonacci spiral's cells are of equal area to within 7 %; on a
    # hemisphere the spiral and its mirror image do not interleave at the
    # equator, so cells within z < 0.05 vary by up to 25 % (the weights
    # absorb that).
    rel = np.abs(w / (total / g.n_dirs) - 1)
    assert np.all(rel[g.directions[:, 2] > 0.05] < 0.07) if hemisphere else np.all(rel < 0.07)
    assert rel.max() < 0.3
    np.testing.assert_allclose(np.linalg.norm(g.directions, axis=1), 1.0, atol=1e-14)
    if hemisphere:
        assert np.all(g.directions[:, 2] > 0)
    # Uniform in solid angle: the mean direction is ~0 (sphere) or ~(0, 0, 1/2) (hemisphere);
    # measured 5.6e-6 and 2.7e-4 off: bounds 3e-5 and 1e-3.
    mean_z = 0.5 if hemisphere else 0.0
    np.testing.assert_allclose(g.directions.mean(axis=0), [0, 0, mean_z], atol=1e-3 if hemisphere else 3e-5)


@pytest.mark.parametrize("hemisphere", [False, True])
def test_grid_weights_follow_sin_theta(hemisphere):
    n_theta, n_phi = 24, 48
    g = RadonGeometry.grid(n_theta, n_phi, 8, hemisphere=hemisphere)
    assert g.n_dirs == n_theta * n_phi
    w = g.direction_weights()
    assert w.sum() == pytest.approx(g.total_solid_angle, rel=1e-12)
    th, _ = g.angles()
    d_theta = (math.pi / 2 if hemisphere else math.pi) / n_theta
    # The cell of a grid point is the (theta, phi) rectangle about it.
    exact = (np.cos(th - d_theta / 2) - np.cos(th + d_theta / 2)) * 2 * math.pi / n_phi
    np.testing.assert_allclose(w, exact, rtol=3e-3)  # measured 1.4e-3


def test_user_directions_nonuniform_weights():
    rng = np.random.default_rng(3)
    d = rng.standard_normal((300, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    g = RadonGeometry(d, 32, spacing=0.1)
    w = g.direction_weights()
    assert w.sum() == pytest.approx(4 * math.pi, rel=1e-12)
    assert np.all(w > 0)
    # Quadrature of a smooth function: int z^2 dn = 4 pi / 3. Measured 0.12 % off; equal
    # weights 4 pi / n would be 3.5 % off: bound 0.6 %.
    assert (w * d[:, 2] ** 2).sum() == pytest.approx(4 * math.pi / 3, rel=6e-3)


def test_tiny_or_flat_sets_get_equal_weights():
    g = RadonGeometry([[1, 0, 0], [0, 1, 0]], 4)
    np.testing.assert_allclose(g.direction_weights(), [2 * math.pi] * 2)
    ring = RadonGeometry.from_angles([math.pi / 2] * 6, np.arange(6) * math.pi / 6, 4, hemisphere=True)
    np.testing.assert_allclose(ring.direction_weights(), [2 * math.pi / 6] * 6)


def test_default_volume_inside_the_sampled_range():
    g = RadonGeometry.uniform(200, 64, spacing=0.5)
    vol = g.default_volume()
    assert vol.shape == (36, 36, 36)  # floor(64 / sqrt 3)
    corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])
    corners = corners * (vol.nx - 1) / 2 * 0.5
    u = g.project_samples(corners)
    assert u.min() >= 0 and u.max() <= g.n_samples - 1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(directions=[[1.0, 0, 0], [0, 1.01, 0]], n_samples=8), r"directions: expected unit vectors.*index 1"),
        (
            dict(directions=[[1.0, 0, 0], [0, 1, 0], [1.0, 0, 0]], n_samples=8),
            r"duplicate directions at indices 0 and 2",
        ),
        (
            dict(directions=[[1.0, 0, 0], [-1.0, 0, 0]], n_samples=8, hemisphere=True),
            r"antipodal directions at indices 0 and 1",
        ),
        (dict(directions=np.zeros((0, 3)), n_samples=8), r"directions: expected at least one direction"),
        (dict(directions=[[1.0, 0]], n_samples=8), r"directions: expected an \(n, 3\) array"),
        (dict(directions=[[np.nan, 0, 1.0]], n_samples=8), r"directions: expected finite values"),
        (dict(directions=[[0, 0, 1.0]], n_samples=0), r"n_samples: expected a positive integer"),
        (dict(directions=[[0, 0, 1.0]], n_samples=8, spacing=-1), r"spacing: expected a positive number"),
        (dict(directions=[[0, 0, 1.0]], n_samples=8, hemisphere="yes"), r"hemisphere: expected True or False"),
    ],
)
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RadonGeometry(**kwargs)


def test_bad_generator_input():
    with pytest.raises(ValueError, match="n_dirs"):
        RadonGeometry.uniform(0, 8)
    with pytest.raises(ValueError, match="phi: expected 2 values"):
        RadonGeometry.from_angles([0.1, 0.2], [0.0], 8)
    # On the full sphere n and -n are both allowed (each gets its own cell).
    RadonGeometry([[1.0, 0, 0], [-1.0, 0, 0]], 8)
