"""Parallel-beam scan geometry: ``ParallelGeometry``."""

from __future__ import annotations

import numpy as np

from .. import _validate as v
from ._frozen import Frozen
from .volume import VolumeGeometry


class ParallelGeometry(Frozen):
    """A parallel-beam scan: one detector row (2D) or several (3D) per angle.

    Parameters
    ----------
    angles : array_like of float
        Projection angles in radians, any order, any range.
    n_cols : int
        Detector columns per row.
    n_rows : int or None
        Detector rows. None makes a 2D geometry whose sinograms are
        ``(n_angles, n_cols)``; an int gives projections
        ``(n_angles, n_rows, n_cols)``.
    det_spacing, row_spacing : float
        Column and row pitch in the length unit of the volume.
    center : float or None
        Rotation-axis position in column pixels (pixel centres at integers);
        default ``(n_cols - 1) / 2``. Must lie on the detector.
    axis_shift : array_like of float or None
        Per-projection correction of the axis position, in pixels, added to
        ``center`` (e.g. measured wobble).

    Notes
    -----
    At angle t the rays run along ``d(t) = (-sin t, cos t, 0)`` and a point
    projects to ``s = x cos t + y sin t``; column ``c`` sits at
    ``s = (c - center - axis_shift[n]) det_spacing`` and row ``r`` at
    ``z = (r - (n_rows - 1)/2) row_spacing``.
    """

    __slots__ = ("angles", "n_cols", "n_rows", "det_spacing", "row_spacing", "center", "axis_shift")
    _fields = __slots__

    def __init__(self, angles, n_cols, n_rows=None, det_spacing=1.0, row_spacing=1.0, center=None, axis_shift=None):
        angles = v.finite_vector("angles", angles)
        n_cols = v.positive_int("n_cols", n_cols)
        if n_rows is not None:
            n_rows = v.positive_int("n_rows", n_rows)
        det_spacing = v.positive_float("det_spacing", det_spacing)
        row_spacing = v.positive_float("row_spacing", row_spacing)
        if center is None:
            center = (n_cols - 1) / 2
        center = v.finite_float("center", center)
        if not (0 <= center <= n_cols - 1):
            raise ValueError(
                f"center: expected a column position on the detector, 0 <= center <= {n_cols - 1}, got {center:g}"
            )
        if axis_shift is not None:
            axis_shift = v.finite_vector("axis_shift", axis_shift, length=angles.size)
        for name, value in zip(self._fields, (angles, n_cols, n_rows, det_spacing, row_spacing, center, axis_shift)):
            self._set(name, value)

    # -- shapes --------------------------------------------------------------
    @property
    def n_angles(self) -> int:
        return self.angles.size

    @property
    def is_2d(self) -> bool:
        return self.n_rows is None

    @property
    def projection_shape(self) -> tuple[int, ...]:
        """``(n_angles, n_cols)`` in 2D, ``(n_angles, n_rows, n_cols)`` in 3D."""
        if self.is_2d:
            return (self.n_angles, self.n_cols)
        return (self.n_angles, self.n_rows, self.n_cols)

    def centers(self) -> np.ndarray:
        """Axis position in column pixels for every projection (center + axis_shift)."""
        c = np.full(self.n_angles, self.center)
        return c if self.axis_shift is None else c + self.axis_shift

    # -- where things project --------------------------------------------------
    def project_columns(self, x, y) -> np.ndarray:
        """Column coordinate (pixels) of world points ``(x, y)`` at every angle.

        Returns an array of shape ``(n_angles,) + broadcast(x, y).shape``.
        """
        x, y = np.broadcast_arrays(np.asarray(x, float), np.asarray(y, float))
        t = self.angles.reshape((-1,) + (1,) * x.ndim)
        s = x * np.cos(t) + y * np.sin(t)
        return s / self.det_spacing + self.centers().reshape(t.shape)

    def project_rows(self, z) -> np.ndarray:
        """Row coordinate (pixels) of world heights ``z`` (same at every angle)."""
        if self.is_2d:
            raise ValueError("project_rows: a 2D geometry has no detector rows")
        return np.asarray(z, float) / self.row_spacing + (self.n_rows - 1) / 2

    def row_positions(self) -> np.ndarray:
        """World z of every detector row centre."""
        if self.is_2d:
            raise ValueError("row_positions: a 2D geometry has no detector rows")
        return (np.arange(self.n_rows) - (self.n_rows - 1) / 2) * self.row_spacing

    def column_positions(self, index: int = 0) -> np.ndarray:
        """Detector coordinate ``s`` of every column centre at projection ``index``."""
        return (np.arange(self.n_cols) - self.centers()[index]) * self.det_spacing

    def default_volume(self) -> VolumeGeometry:
        """The grid FBP uses when none is given.

        A square of ``n_cols`` pixels of ``det_spacing`` in xy, centred on the
        rotation axis; in 3D one slice per detector row, ``row_spacing`` thick.
        """
        if self.is_2d:
            return VolumeGeometry((self.n_cols, self.n_cols), self.det_spacing)
        return VolumeGeometry(
            (self.n_rows, self.n_cols, self.n_cols), (self.row_spacing, self.det_spacing, self.det_spacing)
        )

    def angular_weights(self, max_gap_factor: float = 2.0) -> np.ndarray:
        """Quadrature weights (radians) for integrating over the half circle.

        Lines at t and t + pi coincide, so the angles are folded modulo pi and
        each one gets half the gap to each folded neighbour: a uniform
        180-degree scan gets ``pi / n`` everywhere, a 360-degree scan too, and a
        scan whose first and last projections are 180 degrees apart gives the
        two end views half a step each. The weights sum to pi. A gap wider
        than ``max_gap_factor`` times the median gap is a missing wedge, not
        data: the views beside it are credited half a median step for it.
        """
        n = self.n_angles
        if n == 1:
            return np.array([np.pi])
        folded = np.mod(self.angles, np.pi)
        order = np.argsort(folded, kind="stable")
        f = folded[order]
        gaps = np.diff(np.concatenate([f, [f[0] + np.pi]]))  # gap after each sorted angle
        nonzero = gaps[gaps > 1e-12]
        median = np.median(nonzero) if nonzero.size else np.pi / n
        wedge = gaps > max_gap_factor * median
        gaps = np.where(wedge, median, gaps)
        w_sorted = 0.5 * (gaps + np.roll(gaps, 1))
        weights = np.empty(n)
        weights[order] = w_sorted
        return weights

    # -- presentation ------------------------------------------------------------
    def __repr__(self) -> str:
        a = np.degrees(self.angles)
        rows = "None (2D)" if self.is_2d else str(self.n_rows)
        shift = "None" if self.axis_shift is None else (f"[{self.axis_shift.min():g} .. {self.axis_shift.max():g}] px")
        return (
            f"ParallelGeometry({self.n_angles} angles from {a.min():g} to {a.max():g} deg, "
            f"n_cols={self.n_cols}, n_rows={rows}, det_spacing={self.det_spacing:g}, "
            f"row_spacing={self.row_spacing:g}, center={self.center:g}, axis_shift={shift})"
        )

    def plot(self, volume: VolumeGeometry | None = None, ax=None, n_views: int = 4, n_rays: int = 7):
        """Draw rays, detector and volume in the xy plane; returns the Axes."""
        from .plotting import plot_parallel

        return plot_parallel(
            self, volume if volume is not None else self.default_volume(), ax=ax, n_views=n_views, n_rays=n_rays
        )
