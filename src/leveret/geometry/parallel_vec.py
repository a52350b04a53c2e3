"""Parallel-beam scans with any ray direction per view: ``ParallelVecGeometry``.

``ParallelGeometry`` keeps every ray perpendicular to the rotation axis (z),
which is what its back-projection, FBP and exact phantom projections rely
on. A beam tilted out of the xy plane (laminography) needs rays with a z
component, so it is its own class, as ASTRA's 'parallel3d_vec' is beside
'parallel3d': each view is a ray direction and a flat detector
(``vectors``), from which the projection of a point is affine
(:attr:`matrices`, third row ``(0, 0, 0, 1)``: ``w = 1``), which the
cone-beam back-projection and the ray-driven ``Projector`` both take.
"""

from __future__ import annotations

import numpy as np

from .. import _validate as v
from ._frozen import Frozen
from .tilted import check_tilt, tilted_frame
from .volume import VolumeGeometry


def _check_vectors(vectors) -> np.ndarray:
    try:
        vec = np.array(vectors, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"vectors: expected numbers, got {type(vectors).__name__}") from None
    if vec.shape == (12,):
        vec = vec[None]
    if vec.ndim != 2 or vec.shape[1] != 12 or vec.shape[0] == 0:
        raise ValueError(
            f"vectors: expected shape (n_views, 12) (ray, detector centre, u, v per view), got shape {vec.shape}"
        )
    v.check_finite_array("vectors", vec)
    ray, u, vv = vec[:, 0:3], vec[:, 6:9], vec[:, 9:12]
    volume = np.abs(np.einsum("ni,ni->n", np.cross(u, vv), ray))
    size = np.linalg.norm(u, axis=1) * np.linalg.norm(vv, axis=1) * np.linalg.norm(ray, axis=1)
    bad = ~(volume > 1e-9 * size)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"vectors[{i}]: expected a ray direction off the detector plane and non-parallel, "
            f"non-zero u and v, got a degenerate view"
        )
    vec[:, 0:3] = ray / np.linalg.norm(ray, axis=1, keepdims=True)
    vec.setflags(write=False)
    return vec


class ParallelVecGeometry(Frozen):
    """A parallel-beam scan whose views each have their own ray direction and flat detector.

    Parameters
    ----------
    vectors : array_like, shape (n_views, 12)
        Per view, as ASTRA's 'parallel3d_vec': the ray direction (stored
        normalised; its sign is the beam's direction, which line integrals
        do not see), the detector centre (the centre of the pixel grid), the
        step from pixel (row 0, col 0) to (0, 1) and the step from (0, 0) to
        (1, 0), in world coordinates and length units. Pixel (row r, col c)
        is the line along the ray through ``centre + (c - (n_cols-1)/2) u +
        (r - (n_rows-1)/2) v``.
    n_rows, n_cols : int
        Detector size; projections are ``(n_views, n_rows, n_cols)``.
    angles : array_like or None
        Rotation angle of every view (radians), metadata (the laminography
        constructor records them).

    Notes
    -----
    :meth:`laminography` builds the usual tilted-axis scan. With no tilt it
    is ``ParallelGeometry``'s scan (:meth:`from_parallel` converts any 3D
    one), and the operators agree on it.
    """

    __slots__ = ("vectors", "n_rows", "n_cols", "angles")
    _fields = __slots__

    def __init__(self, vectors, n_rows, n_cols, *, angles=None):
        vec = _check_vectors(vectors)
        n_rows = v.positive_int("n_rows", n_rows)
        n_cols = v.positive_int("n_cols", n_cols)
        if angles is not None:
            angles = v.finite_vector("angles", angles, length=vec.shape[0])
        for name, value in zip(self._fields, (vec, n_rows, n_cols, angles)):
            self._set(name, value)

    # -- shapes ------------------------------------------------------------------
    @property
    def n_views(self) -> int:
        return self.vectors.shape[0]

    @property
    def projection_shape(self) -> tuple[int, int, int]:
        """``(n_views, n_rows, n_cols)``."""
        return (self.n_views, self.n_rows, self.n_cols)

    @property
    def rays(self) -> np.ndarray:
        """(n_views, 3) unit ray directions."""
        return self.vectors[:, 0:3]

    @property
    def centers(self) -> np.ndarray:
        """(n_views, 3) detector centres."""
        return self.vectors[:, 3:6]

    @property
    def u(self) -> np.ndarray:
        """(n_views, 3) one column step."""
        return self.vectors[:, 6:9]

    @property
    def v(self) -> np.ndarray:
        """(n_views, 3) one row step."""
        return self.vectors[:, 9:12]

    def pixel00(self) -> np.ndarray:
        """(n_views, 3) the centre of pixel (row 0, col 0)."""
        return self.centers - (self.n_cols - 1) / 2 * self.u - (self.n_rows - 1) / 2 * self.v

    # -- where things project ------------------------------------------------------
    @property
    def matrices(self) -> np.ndarray:
        """(n_views, 3, 4) affine projection matrices: ``(u, v, 1) = P (x, y, z, 1)``.

        ``u`` (column) and ``v`` (row) in pixels with centres at integers,
        as ``ConeGeometry``'s with ``w = 1`` everywhere (third row
        ``(0, 0, 0, 1)``): what :class:`leveret.operators.ConeBackprojection`
        applies (no distance weight).
        """
        B = np.stack([self.u, self.v, self.rays], axis=-1)  # x = pixel00 + c u + r v + t ray
        Binv = np.linalg.inv(B)
        P = np.zeros((self.n_views, 3, 4))
        P[:, :2, :3] = Binv[:, :2]
        P[:, :2, 3] = -np.einsum("nij,nj->ni", Binv[:, :2], self.pixel00())
        P[:, 2, 3] = 1.0
        return P

    def project(self, points) -> tuple[np.ndarray, np.ndarray]:
        """Detector column and row (pixels) of world points in every view.

        ``points`` (..., 3); returns ``u, v``, each ``(n_views,) + points.shape[:-1]``.
        """
        pts = np.asarray(points, dtype=np.float64)
        if pts.ndim == 0 or pts.shape[-1] != 3:
            raise ValueError(f"points: expected an array of shape (..., 3) (x, y, z last), got shape {pts.shape}")
        flat = pts.reshape(-1, 3)
        P = self.matrices
        h = np.einsum("nij,kj->nki", P[:, :2, :3], flat) + P[:, None, :2, 3]
        shape = (self.n_views,) + pts.shape[:-1]
        return h[..., 0].reshape(shape), h[..., 1].reshape(shape)

    def pixel_rays(self, views=slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """Lines through every pixel centre: ``origins`` (n, n_rows, n_cols, 3)
        on the detector and unit ``directions`` (n, 1, 1, 3), which broadcast
        (as ``ConeGeometry.pixel_rays``; ``leveret.phantom``'s exact
        projections take them)."""
        idx = np.arange(self.n_views)[views]
        idx = np.atleast_1d(idx)
        cols = np.arange(self.n_cols, dtype=np.float64)[None, None, :, None]
        rows = np.arange(self.n_rows, dtype=np.float64)[None, :, None, None]
        origins = (self.pixel00()[idx][:, None, None, :] + cols * self.u[idx][:, None, None, :]) + rows * self.v[idx][
            :, None, None, :
        ]
        return origins, self.rays[idx][:, None, None, :].copy()

    def crop_rows(self, start: int, stop: int) -> "ParallelVecGeometry":
        """The same views seeing only detector rows ``start:stop`` (row ``start``
        becomes row 0): what a z-slab of the volume needs."""
        if not (0 <= start < stop <= self.n_rows):
            raise ValueError(f"crop_rows: expected 0 <= start < stop <= {self.n_rows}, got {start}:{stop}")
        vec = np.array(self.vectors)
        vec[:, 3:6] += ((start + stop - 1) / 2 - (self.n_rows - 1) / 2) * self.v  # the new grid's centre
        return self.replace(vectors=vec, n_rows=stop - start)

    def axis_cosines(self) -> np.ndarray:
        """(n_views,) ``cos`` of the angle between each view's rays and the xy
        plane: ``cos(tilt)`` for a laminography scan, 1 for ``ParallelGeometry``'s."""
        return np.hypot(self.rays[:, 0], self.rays[:, 1])

    # -- constructors ------------------------------------------------------------------
    @classmethod
    def laminography(
        cls, angles, tilt, n_rows, n_cols, pixel_size, *, row_pixel_size=None, center=None, row_center=None
    ) -> "ParallelVecGeometry":
        """Parallel-beam laminography: the rotation axis (world z) tilted towards the beam.

        Parameters
        ----------
        angles : array_like
            Rotation angle ``t`` of every view, radians (a full turn for
            :func:`leveret.laminography_fbp`).
        tilt : float
            Angle between the rotation axis and the detector plane, radians,
            ``0 <= tilt < pi/2`` (0: ``ParallelGeometry``'s scan). In the
            object's frame the rays run along ``cos(tilt) d(t) + sin(tilt)
            ez`` with ``d(t) = (-sin t, cos t, 0)``: upwards through the
            sample's plane (xy) at ``tilt`` from it. Frequencies within
            ``tilt`` of the z axis are never measured (the missing cone).
        n_rows, n_cols : int
            Detector size.
        pixel_size : float
            Column pitch (length units).
        row_pixel_size : float, optional
            Row pitch; default ``pixel_size``.
        center, row_center : float, optional
            The detector column and row (pixels) the world origin projects to;
            default the detector's centre, ``(n_cols - 1)/2`` and ``(n_rows - 1)/2``.

        Returns
        -------
        ParallelVecGeometry
            Columns along ``e(t) = (cos t, sin t, 0)``, rows along
            ``cos(tilt) ez - sin(tilt) d(t)`` (the rotation axis projects onto
            a detector column), ``angles`` recorded. A point ``x`` lands on
            column ``center + x . e(t) / pixel_size``: with ``tilt = 0`` this
            is ``ParallelGeometry(angles, n_cols, n_rows, pixel_size,
            row_pixel_size, center)``'s detector exactly.
        """
        angles = v.finite_vector("angles", angles)
        tilt = check_tilt(tilt)
        n_rows = v.positive_int("n_rows", n_rows)
        n_cols = v.positive_int("n_cols", n_cols)
        du = v.positive_float("pixel_size", pixel_size)
        dv = du if row_pixel_size is None else v.positive_float("row_pixel_size", row_pixel_size)
        center = (n_cols - 1) / 2 if center is None else v.finite_float("center", center)
        row_center = (n_rows - 1) / 2 if row_center is None else v.finite_float("row_center", row_center)
        beam, e, up = tilted_frame(angles, tilt)
        # The origin lands on (center, row_center): the grid's centre sits the difference away.
        centre = ((n_cols - 1) / 2 - center) * du * e + ((n_rows - 1) / 2 - row_center) * dv * up
        vectors = np.hstack([beam, centre, du * e, dv * up])
        return cls(vectors, n_rows, n_cols, angles=angles)

    @classmethod
    def from_parallel(cls, geometry) -> "ParallelVecGeometry":
        """The same scan as a 3D ``ParallelGeometry`` (axis shifts included)."""
        from .parallel import ParallelGeometry

        if not isinstance(geometry, ParallelGeometry):
            raise TypeError(f"geometry: expected a 3D ParallelGeometry, got {type(geometry).__name__}")
        if geometry.is_2d:
            raise ValueError(f"geometry: expected a 3D ParallelGeometry, got {geometry!r}")
        t = geometry.angles
        beam, e, up = tilted_frame(t, 0.0)
        shift = ((geometry.n_cols - 1) / 2 - geometry.centers()) * geometry.det_spacing
        vectors = np.hstack([beam, shift[:, None] * e, geometry.det_spacing * e, geometry.row_spacing * up])
        return cls(vectors, geometry.n_rows, geometry.n_cols, angles=t)

    # -- ASTRA --------------------------------------------------------------------------
    def to_astra_vectors(self) -> np.ndarray:
        """Rows of ASTRA's 'parallel3d_vec' geometry, (n_views, 12): ``vectors`` as stored.

        ``(rayX, rayY, rayZ, dX, dY, dZ, uX, uY, uZ, vX, vY, vZ)``; ASTRA
        (``ParallelVecProjectionGeometry3D.cpp``) puts the detector corner at
        ``d - n_rows/2 v - n_cols/2 u`` and pixel centres half a step inside,
        as here. Use with ``astra.create_proj_geom('parallel3d_vec', n_rows,
        n_cols, vectors)``; ASTRA's projection data are ``(n_rows, n_views,
        n_cols)``.
        """
        return np.array(self.vectors)

    @classmethod
    def from_astra_vectors(cls, vectors, n_rows, n_cols, *, angles=None) -> "ParallelVecGeometry":
        """The geometry of ASTRA 'parallel3d_vec' rows (see :meth:`to_astra_vectors`)."""
        return cls(vectors, n_rows, n_cols, angles=angles)

    # -- presentation ------------------------------------------------------------------
    def __repr__(self) -> str:
        parts = [f"{self.n_views} views", f"detector {self.n_rows} rows x {self.n_cols} cols"]
        lu, lv = np.linalg.norm(self.u, axis=1), np.linalg.norm(self.v, axis=1)
        parts.append(f"pixel ({lu.mean():.4g}, {lv.mean():.4g})")
        elevation = np.degrees(np.arcsin(np.clip(np.abs(self.rays[:, 2]), 0.0, 1.0)))
        parts.append(
            f"rays {elevation.min():.4g}"
            + ("" if np.ptp(elevation) < 1e-9 else f"..{elevation.max():.4g}")
            + " deg out of the xy plane"
        )
        if self.angles is not None:
            a = np.degrees(self.angles)
            parts.append(f"angles {a.min():g} to {a.max():g} deg")
        return f"ParallelVecGeometry({', '.join(parts)})"

    def plot(self, volume: VolumeGeometry | None = None, ax=None, n_views: int = 6):
        """3D figure: a few detectors with their corner rays, the rotation axis, the volume box.

        Returns the Axes3D (on a new ``matplotlib.figure.Figure`` when ``ax`` is None).
        """
        from .plotting import plot_parallel_vec

        return plot_parallel_vec(self, volume, ax=ax, n_views=n_views)
