"""Closed-form plane integrals of ellipsoid phantoms (3D Radon ground truth)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from leveret import RadonGeometry
from leveret.phantom import Ellipsoid, EllipsoidPhantom, ball, random_ellipsoids
from leveret.phantom.planes import plane_integrals, project_radon


def _units(rng, n):
    d = rng.standard_normal((n, 3))
    return d / np.linalg.norm(d, axis=1, keepdims=True)


def test_ball_closed_form():
    r, c = 0.7, np.array([0.1, -0.2, 0.3])
    n = np.array([0.0, 0.6, 0.8])
    t = np.linspace(-1.5, 1.5, 61)
    got = ball(r, value=2.0, center=tuple(c)).plane_integrals(n, t)
    s = t - n @ c
    np.testing.assert_allclose(got, 2.0 * math.pi * np.maximum(r * r - s * s, 0.0), rtol=1e-13, atol=1e-15)


def test_ellipsoid_matches_integrated_line_integrals():
    """Independent check: the plane integral is the integral, across the plane,
    of the phantom's (closed-form) line integrals along lines in the plane."""
    rng = np.random.default_rng(7)
    phantom = EllipsoidPhantom(
        [
            Ellipsoid(1.0, (0.5, 0.3, 0.2), (0.1, 0.05, -0.1), (0.4, 0.9, -0.3)),
            Ellipsoid(-0.4, (0.2, 0.25, 0.1), (-0.1, 0.1, 0.05), (1.0, 0.2, 0.5)),
        ]
    )
    s = np.linspace(-1.0, 1.0, 20001)
    for n in _units(rng, 4):
        e1 = np.cross(n, [0.3, 0.5, 0.8])
        e1 /= np.linalg.norm(e1)
        e2 = np.cross(n, e1)
        for t in (-0.15, 0.0, 0.12):
            lines = phantom.line_integrals(t * n + s[:, None] * e1, e2)
            numeric = np.trapezoid(lines, s) if hasattr(np, "trapezoid") else np.trapz(lines, s)
            exact = phantom.plane_integrals(n, t)
            assert exact == pytest.approx(numeric, abs=2e-5 * phantom.ellipsoids[0].volume)


def test_mass_and_symmetry():
    rng = np.random.default_rng(11)
    phantom = random_ellipsoids(5, rng=rng, radius=1.0)
    g = RadonGeometry(_units(rng, 6), n_samples=4001, spacing=2.2 / 4000)
    p = phantom.project_radon(g)
    assert p.shape == (6, 4001)
    # Integrating over t gives the integral over space, for every direction.
    np.testing.assert_allclose(p.sum(axis=1) * g.spacing, phantom.mass, rtol=2e-6)  # measured 3.7e-7
    # p(t, -n) = p(-t, n): the samples are symmetric about t = 0.
    flipped = project_radon(phantom, g.replace(directions=-g.directions))
    np.testing.assert_allclose(flipped, p[:, ::-1], rtol=1e-12, atol=1e-14)


def test_broadcast_shapes():
    d = RadonGeometry.uniform(10, 3).directions
    out = plane_integrals(ball(1.0), d[:, None, :], np.zeros((1, 5)))
    np.testing.assert_allclose(out, math.pi)
    assert out.shape == (10, 5)


def test_bad_input():
    with pytest.raises(ValueError, match=r"directions: expected unit vectors"):
        ball(1.0).plane_integrals([0.0, 0.0, 2.0], 0.0)
    with pytest.raises(ValueError, match=r"directions: expected an array of shape \(\.\.\., 3\)"):
        ball(1.0).plane_integrals([0.0, 1.0], 0.0)
    with pytest.raises(ValueError, match=r"t: expected finite values"):
        ball(1.0).plane_integrals([0.0, 0.0, 1.0], np.nan)
    with pytest.raises(ValueError, match=r"directions, t: expected shapes that broadcast"):
        ball(1.0).plane_integrals(np.eye(3), np.zeros(2))
    with pytest.raises(TypeError, match=r"geometry: expected a RadonGeometry"):
        ball(1.0).project_radon("nope")
