"""A helical trajectory found back from a cone-beam geometry's matrices: ``fit_helix``."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

#: A trajectory is a helix when its sources rise at least this many detector
#: rows (at the isocentre) over the scan and follow the fitted helix to within
#: ``_RESIDUAL_ROWS`` rows and ``_RADIUS_SPREAD`` of the radius.
_MIN_RISE_ROWS = 0.5
_RESIDUAL_ROWS = 0.25
_RADIUS_SPREAD = 1e-3


class Helix(NamedTuple):
    """A helical source trajectory about the z axis (see :func:`fit_helix`)."""

    radius: float
    """Distance of the sources from the z axis (length units; the mean)."""
    pitch: float
    """Rise per turn of increasing azimuth (length units): positive for a
    right-handed helix, as ``ConeGeometry.helical``'s ``pitch``."""
    azimuth: np.ndarray
    """(n_views,) each source's angle about z, ``atan2(y, x)``, unwrapped (radians)."""
    z: np.ndarray
    """(n_views,) each source's height."""
    orientation: float
    """+1 when the azimuth grows over the scan (counter-clockwise), else -1."""

    @property
    def rise(self) -> float:
        """Rise per turn in acquisition order (``pitch * orientation``)."""
        return self.pitch * self.orientation


def fit_helix(geometry) -> Helix | None:
    """The helix the sources of a ``ConeGeometry`` follow, or None.

    A trajectory is a helix when the sources' azimuth about z is strictly
    monotonic, their distance from the z axis constant (to 1e-3 of it), and
    their heights a straight line in the azimuth that rises at least half a
    detector row at the isocentre over the scan and that the heights follow
    to a quarter of a row. Planar scans (circular, laminography) and
    trajectories that only wobble give None.
    """
    src = geometry.source_positions()
    if src.shape[0] < 3 or np.ptp(src[:, 2]) <= 1e-12 * np.abs(src).max():  # planar: no need to look further
        return None
    radius = np.hypot(src[:, 0], src[:, 1])
    if radius.min() <= 0 or np.ptp(radius) > _RADIUS_SPREAD * radius.mean():
        return None
    azimuth = np.unwrap(np.arctan2(src[:, 1], src[:, 0]))
    steps = np.diff(azimuth)
    if not (np.all(steps > 0) or np.all(steps < 0)):
        return None
    slope, intercept = np.polyfit(azimuth, src[:, 2], 1)
    residual = np.abs(src[:, 2] - (intercept + slope * azimuth)).max()
    # A row's height at the isocentre: the origin's depth over the row focal length.
    K = geometry.decompose().K
    depth = geometry.depth(np.zeros(3))
    row = float(np.median(np.abs(depth) / K[:, 1, 1]))
    rise = abs(slope) * np.ptp(azimuth)
    if rise < _MIN_RISE_ROWS * row or residual > _RESIDUAL_ROWS * row:
        return None
    return Helix(
        float(radius.mean()), float(2 * np.pi * slope), azimuth, src[:, 2].copy(), 1.0 if steps[0] > 0 else -1.0
    )
