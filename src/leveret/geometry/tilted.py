"""The frame of a scan whose rotation axis (world z) is tilted towards the beam
(laminography), shared by the cone- and parallel-beam constructors."""

from __future__ import annotations

import numpy as np

from .. import _validate as v


def check_tilt(tilt) -> float:
    """``tilt`` in radians, ``0 <= tilt < pi/2``; ValueError naming ``tilt`` otherwise."""
    value = v.finite_float("tilt", tilt)
    if not 0.0 <= value < np.pi / 2:
        raise ValueError(
            f"tilt: expected radians in [0, pi/2) (0 to 90 degrees, 90 excluded: the beam "
            f"would run along the rotation axis), got {value:g} ({np.degrees(value):g} degrees)"
        )
    return value


def tilted_frame(angles: np.ndarray, tilt: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per view (each (n, 3)): the beam direction ``cos(tilt) d(t) + sin(tilt) ez``,
    the detector's u axis ``e(t)`` and its v axis ``cos(tilt) ez - sin(tilt) d(t)``,
    with ``d(t) = (-sin t, cos t, 0)``, ``e(t) = (cos t, sin t, 0)``
    (docs/conventions.md): tilt 0 is the circular frame (v along +z)."""
    c, s = np.cos(angles), np.sin(angles)
    zero, one = np.zeros_like(angles), np.ones_like(angles)
    d = np.stack([-s, c, zero], axis=1)
    e = np.stack([c, s, zero], axis=1)
    ez = np.stack([zero, zero, one], axis=1)
    beam = np.cos(tilt) * d + np.sin(tilt) * ez
    up = np.cos(tilt) * ez - np.sin(tilt) * d
    return beam, e, up
