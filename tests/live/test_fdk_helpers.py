"""What leveret.live takes from leveret.algorithms.fdk, through its public helpers:
the angular quadrature, the turn scale, the rotation angles and FDK's
weighting with the angular weights left to the caller."""

import numpy as np
import pytest

import leveret
from leveret.algorithms.fdk_weights import FDKWeighting, angular_steps, rotation_angles, turn_scale, view_frames


def test_angular_steps_are_each_views_share_of_the_range():
    a = np.radians([30.0, 0.0, 10.0, 60.0])  # any order
    np.testing.assert_allclose(np.degrees(angular_steps(a)), [25.0, 10.0, 15.0, 30.0], rtol=1e-12)
    assert angular_steps(np.array([1.0])).tolist() == [2 * np.pi]
    # a uniform full turn: 2 pi / n each, 2 pi in all (the ends count one full gap each)
    full = angular_steps(np.linspace(0, 2 * np.pi, 36, endpoint=False))
    np.testing.assert_allclose(full, 2 * np.pi / 36, rtol=1e-12)


def test_turn_scale_divides_by_the_turns_covered():
    one = np.linspace(0, 2 * np.pi, 40, endpoint=False)
    assert turn_scale(one) == pytest.approx(1.0)
    assert turn_scale(np.concatenate([one, one + 2 * np.pi])) == pytest.approx(0.5)
    assert turn_scale(one[:10]) == 1.0  # less than a turn


def test_rotation_angles_are_the_angles_of_a_circular_scan():
    angles = np.radians([0.0, 50.0, 170.0, 190.0, 300.0])
    g = leveret.ConeGeometry.circular(angles, 60.0, 120.0, 8, 10, 2.0)
    got = rotation_angles(g)
    np.testing.assert_allclose(np.angle(np.exp(1j * (got - angles))), 0.0, atol=1e-12)
    assert np.all(got > -np.pi) and np.all(got <= np.pi)
    np.testing.assert_allclose(view_frames(g)["angle"], np.unwrap(got) - got[0], atol=1e-12)


@pytest.mark.parametrize("short_scan", [False, True])
def test_fdk_weighting_with_its_own_angle_weights_given_is_the_default(short_scan):
    """``angle_weights`` replaces FDK's quadrature only: given FDK's own, the
    per-column weights are the default ones (Parker's too on a short scan)."""
    span = np.pi * 1.3 if short_scan else 2 * np.pi
    angles = np.linspace(0, span, 30, endpoint=False)
    g = leveret.ConeGeometry.circular(angles, 60.0, 120.0, 8, 10, 2.0)
    turn = view_frames(g)["angle"]
    own = angular_steps(turn) * (1.0 if short_scan else 0.5 * turn_scale(turn))
    default = FDKWeighting(g, short_scan=short_scan)
    given = FDKWeighting(g, short_scan=short_scan, angle_weights=own)
    np.testing.assert_allclose(given.per_column, default.per_column, rtol=1e-12)
    ones = FDKWeighting(g, short_scan=False, angle_weights=np.ones(30))
    np.testing.assert_allclose(ones.per_column, np.repeat(1 / view_frames(g)["pitch"][:, None], 10, axis=1), rtol=1e-12)
    with pytest.raises(ValueError, match="^angle_weights: expected 30 values"):
        FDKWeighting(g, angle_weights=np.ones(3))
