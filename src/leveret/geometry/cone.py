"""Cone-beam scan geometry from per-view projection matrices: ``ConeGeometry``.

One 3x4 matrix ``P`` per view maps a world point to detector pixels,
``(u w, v w, w) = P (x, y, z, 1)`` (RabbitCT's convention, docs/conventions.md
"Cone beam"). Everything else (source positions, rays, intrinsics, the
ASTRA and TIGRE descriptions) is derived from the matrices, so nothing here
assumes a perfect circle.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import _validate as v
from ._frozen import Frozen
from .tilted import check_tilt, tilted_frame
from .volume import VolumeGeometry, volume_3d

# Largest condition number of the (row-equilibrated) left 3x3 block: beyond it
# the view has no well-defined source point.
_COND_LIMIT = 1e12
# Relative tolerance when deciding that per-view values are "the same".
_SAME = 1e-9


class Decomposition(NamedTuple):
    """``P = ||P[2, :3]|| K [R | t]`` for every view (see ``ConeGeometry.decompose``)."""

    K: np.ndarray
    """(n_views, 3, 3) upper-triangular intrinsics in pixels, positive diagonal, ``K[2, 2] = 1``."""
    R: np.ndarray
    """(n_views, 3, 3) orthonormal; rows: world directions of increasing u, increasing v,
    and the principal ray (source towards detector)."""
    t: np.ndarray
    """(n_views, 3) translation in length units: the world origin in the camera frame."""


class DetectorFrame(NamedTuple):
    """A flat detector in world coordinates, one row per view (all (n_views, 3))."""

    source: np.ndarray
    """Source position."""
    center: np.ndarray
    """Detector centre: the position of pixel ((n_cols-1)/2, (n_rows-1)/2)."""
    u: np.ndarray
    """One column step: the vector from pixel (row 0, col 0) to (row 0, col 1)."""
    v: np.ndarray
    """One row step: the vector from pixel (row 0, col 0) to (row 1, col 0)."""


# -- small helpers ---------------------------------------------------------------
def _rot_x(a: np.ndarray) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    one, zero = np.ones_like(a), np.zeros_like(a)
    return np.stack([np.stack([one, zero, zero], -1), np.stack([zero, c, -s], -1), np.stack([zero, s, c], -1)], -2)


def _rot_y(a: np.ndarray) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    one, zero = np.ones_like(a), np.zeros_like(a)
    return np.stack([np.stack([c, zero, s], -1), np.stack([zero, one, zero], -1), np.stack([-s, zero, c], -1)], -2)


def _rot_z(a: np.ndarray) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    one, zero = np.ones_like(a), np.zeros_like(a)
    return np.stack([np.stack([c, -s, zero], -1), np.stack([s, c, zero], -1), np.stack([zero, zero, one], -1)], -2)


def _rot_zyx(ax: np.ndarray, ay: np.ndarray, az: np.ndarray) -> np.ndarray:
    """``Rz(az) Ry(ay) Rx(ax)``: about x first, then the fixed y, then the fixed z."""
    return _rot_z(az) @ _rot_y(ay) @ _rot_x(ax)


def _per_view(name: str, value, n: int, k: int | None = None, *, positive: bool = False) -> np.ndarray:
    """A scalar / k-vector for all views, or one per view: float64 (n,) or (n, k)."""
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected numbers, got {type(value).__name__}") from None
    if k is None:
        if arr.ndim == 0:
            arr = np.full(n, float(arr))
        elif arr.shape != (n,):
            raise ValueError(f"{name}: expected a scalar or {n} values (one per view), got shape {arr.shape}")
    else:
        if arr.shape == (k,):
            arr = np.broadcast_to(arr, (n, k)).copy()
        elif arr.shape != (n, k):
            raise ValueError(
                f"{name}: expected {k} values or an array of shape ({n}, {k}) (one row per view), got shape {arr.shape}"
            )
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ValueError(f"{name}: expected finite values, got {arr[bad][0]}")
    if positive and (arr <= 0).any():
        raise ValueError(f"{name}: expected positive values, got {arr[arr <= 0][0]:g}")
    return arr


def _check_matrices(matrices) -> np.ndarray:
    try:
        P = np.array(matrices, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"matrices: expected an array of 3x4 projection matrices, got {type(matrices).__name__}"
        ) from None
    if P.shape == (3, 4):
        P = P[None]
    if P.ndim != 3 or P.shape[1:] != (3, 4):
        raise ValueError(f"matrices: expected shape (n_views, 3, 4) or (3, 4), got shape {P.shape}")
    if P.shape[0] == 0:
        raise ValueError("matrices: expected at least one view, got an empty stack of shape (0, 3, 4)")
    finite = np.isfinite(P).all(axis=(1, 2))
    if not finite.all():
        i = int(np.flatnonzero(~finite)[0])
        raise ValueError(
            f"matrices[{i}]: expected finite values, got NaN/Inf ({int((~finite).sum())} view(s) affected)"
        )
    # Rows are scaled to unit length first: the rows of a camera matrix carry
    # different units (pixels vs 1/length), and rescaling a row changes
    # neither the singularity nor the geometry's degeneracy.
    M = P[:, :, :3]
    norms = np.linalg.norm(M, axis=2, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        cond = np.linalg.cond(M / np.where(norms > 0, norms, 1.0))
    cond = np.where(np.isfinite(cond) & (norms[..., 0] > 0).all(axis=1), cond, np.inf)
    bad = cond >= _COND_LIMIT
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"matrices[{i}]: expected a non-singular left 3x3 block (condition number "
            f"< {_COND_LIMIT:.0e} with unit rows), got {cond[i]:.3g}; such a view has "
            f"no single source point"
        )
    P.setflags(write=False)
    return P


def _matrices_from_frame(source, pixel00, u_step, v_step) -> np.ndarray:
    """Matrices of flat detectors: pixel (row r, col c) sits at pixel00 + c u_step + r v_step.

    A point X lies on the ray to pixel (c, r) when X - source = w (pixel00 -
    source + c u_step + r v_step), so M = B^-1 with B = [u_step, v_step,
    pixel00 - source]; w = 1 on the detector. The result is then rescaled so
    that w = 1 at the world origin (where the origin is in front of the source).
    """
    B = np.stack([u_step, v_step, pixel00 - source], axis=-1)
    M = np.linalg.inv(B)
    p4 = -np.einsum("nij,nj->ni", M, source)
    P = np.concatenate([M, p4[:, :, None]], axis=2)
    w0 = P[:, 2, 3]
    return P / np.where(w0 > 0, w0, 1.0)[:, None, None]


def _range(a: np.ndarray, fmt: str = ".4g") -> str:
    lo, hi = float(np.min(a)), float(np.max(a))
    if hi - lo <= _SAME * max(abs(lo), abs(hi), 1e-300):
        return f"{lo:{fmt}}"
    return f"{lo:{fmt}}..{hi:{fmt}}"


def _compact(arr: np.ndarray):
    """One value (or row) when all views agree, else the per-view array."""
    scale = max(float(np.max(np.abs(arr))), 1.0)
    if np.all(np.abs(arr - arr[0]) <= 1e-12 * scale):
        return float(arr[0]) if arr.ndim == 1 else arr[0].copy()
    return arr.copy()


_MISSING = object()


def _tigre_field(geo, name: str, default=_MISSING):
    if isinstance(geo, dict):
        value = geo.get(name, default)
    else:
        value = getattr(geo, name, default)
    if value is _MISSING:
        raise ValueError(f"geo: expected TIGRE field {name!r}, which is missing")
    return value


# -- the geometry -------------------------------------------------------------------
class ConeGeometry(Frozen):
    """A cone-beam scan with a flat detector, one 3x4 projection matrix per view.

    Parameters
    ----------
    matrices : array_like, shape (n_views, 3, 4) or (3, 4)
        ``(u w, v w, w) = P (x, y, z, 1)``: ``u`` is the detector column and
        ``v`` the row, both in pixels with pixel centres at integers; world
        coordinates in length units. The sign of ``P`` matters: ``w > 0`` in
        front of the source. Stored read-only as float64, as given (no
        rescaling).
    n_rows, n_cols : int
        Detector size; projections are ``(n_views, n_rows, n_cols)``.
    pixel_size : float or (float, float) or None
        Detector pitch ``(du, dv)`` in length units: column pitch first, then
        row pitch (one number: square pixels). Metadata: a matrix fixes the
        detector only up to its distance from the source; the pitch fixes
        that distance (``source_detector_distance``, ``to_astra_vectors``,
        ``to_tigre``).
    angles : array_like or None
        Rotation angle of every view (radians) for circular scans, e.g. for
        Parker short-scan weights. Metadata, not used for projecting.

    Notes
    -----
    **Normalisation.** Matrices are projective: ``P`` and ``c P`` (c > 0)
    give the same ``(u, v)`` and only rescale ``w``. Every constructor here
    except ``from_rabbitct`` (and the plain constructor, which stores what it
    is given) returns matrices scaled per view so that **w = 1 at the world
    origin** (``P[2, 3] = 1``); :meth:`normalised` applies the same scaling
    to any geometry. Then ``w(x) = depth(x) / depth(origin)``, where depth is
    the distance from the source along the principal ray (the perpendicular
    from the source to the detector). For :meth:`circular` without tilt or
    perturbation ``depth(origin) = sid``, so ``w = depth / sid`` (RabbitCT's
    scaling) and ``1 / w**2`` is FDK's distance weight. :meth:`depth` gives
    the depth in length units for any scaling.

    **Handedness.** With docs/conventions.md's circular scan (u along
    ``e(t) = (cos t, sin t, 0)``, v along +z, principal ray along
    ``d(t) = (-sin t, cos t, 0)``), ``e x z = -d``: the pixel grid is
    left-handed seen from the source, so ``det(P[:, :3]) < 0``. This is why
    :meth:`decompose` returns ``R`` with ``det(R) = -1`` for such scans.
    """

    __slots__ = ("matrices", "n_rows", "n_cols", "pixel_size", "angles")
    _fields = __slots__

    def __init__(self, matrices, n_rows, n_cols, *, pixel_size=None, angles=None):
        P = _check_matrices(matrices)
        n_rows = v.positive_int("n_rows", n_rows)
        n_cols = v.positive_int("n_cols", n_cols)
        if pixel_size is not None:
            pixel_size = v.per_axis("pixel_size", pixel_size, 2, positive=True)
        if angles is not None:
            angles = v.finite_vector("angles", angles, length=P.shape[0])
        for name, value in zip(self._fields, (P, n_rows, n_cols, pixel_size, angles)):
            self._set(name, value)

    # -- shapes ------------------------------------------------------------------
    @property
    def n_views(self) -> int:
        return self.matrices.shape[0]

    @property
    def projection_shape(self) -> tuple[int, int, int]:
        """``(n_views, n_rows, n_cols)``."""
        return (self.n_views, self.n_rows, self.n_cols)

    def _select(self, views) -> np.ndarray:
        P = self.matrices[views]
        return P[None] if P.ndim == 2 else P

    # -- where things project ------------------------------------------------------
    def project(self, points) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Detector coordinates of world points in every view.

        Parameters
        ----------
        points : array_like, shape (..., 3)
            World ``(x, y, z)`` in length units.

        Returns
        -------
        u, v, w : ndarray, each (n_views,) + points.shape[:-1]
            Column and row in pixels (centres at integers) and the
            homogeneous depth ``w`` (> 0 in front of the source; see the class
            notes for its scaling). Points with ``w = 0`` give inf/nan.
        """
        pts = np.asarray(points, dtype=np.float64)
        if pts.ndim == 0 or pts.shape[-1] != 3:
            raise ValueError(f"points: expected an array of shape (..., 3) (x, y, z last), got shape {pts.shape}")
        flat = pts.reshape(-1, 3)
        P = self.matrices
        h = np.einsum("nij,kj->nki", P[:, :, :3], flat) + P[:, None, :, 3]
        shape = (self.n_views,) + pts.shape[:-1]
        w = h[..., 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            u, vv = h[..., 0] / w, h[..., 1] / w
        return u.reshape(shape), vv.reshape(shape), w.reshape(shape)

    def depth(self, points) -> np.ndarray:
        """Distance from the source along the principal ray, length units.

        ``(x - source) . axis`` with ``axis`` the unit principal-ray direction;
        shape ``(n_views,) + points.shape[:-1]``, whatever the matrices' scale.
        """
        _, _, w = self.project(points)
        scale = np.linalg.norm(self.matrices[:, 2, :3], axis=1)
        return w / scale.reshape((-1,) + (1,) * (w.ndim - 1))

    def source_positions(self, views=slice(None)) -> np.ndarray:
        """World position of the source, ``-M^-1 p4``: (n_views, 3) (or the selected views)."""
        P = self._select(views)
        return -np.linalg.solve(P[:, :, :3], P[:, :, 3:4])[..., 0]

    def ray_directions(self, u, v, views=slice(None)) -> np.ndarray:
        """Unit vectors from the source through detector position ``(u, v)`` (pixels).

        ``u`` (column) and ``v`` (row) broadcast; returns
        ``(n_views,) + broadcast shape + (3,)``. The direction points away
        from the source (``w`` grows along it).
        """
        uu, vv = np.broadcast_arrays(np.asarray(u, dtype=np.float64), np.asarray(v, dtype=np.float64))
        Minv = np.linalg.inv(self._select(views)[:, :, :3])
        q = np.stack([uu, vv, np.ones_like(uu)], axis=-1).reshape(-1, 3)
        d = np.einsum("nij,kj->nki", Minv, q)  # M d = (u, v, 1): w = +1 along d
        d /= np.linalg.norm(d, axis=-1, keepdims=True)
        return d.reshape((Minv.shape[0],) + uu.shape + (3,))

    def pixel_rays(self, views=slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """Rays through every pixel centre.

        Parameters
        ----------
        views : slice, int or index array
            Which views (default all).

        Returns
        -------
        sources : ndarray (n, 1, 1, 3)
            Source positions, shaped to broadcast against ``directions``.
        directions : ndarray (n, n_rows, n_cols, 3)
            Unit vectors from the source through pixel ``[row, col]``.
        """
        cols = np.arange(self.n_cols, dtype=np.float64)
        rows = np.arange(self.n_rows, dtype=np.float64)
        directions = self.ray_directions(cols[None, :], rows[:, None], views=views)
        sources = self.source_positions(views)[:, None, None, :]
        return sources, directions

    # -- camera parameters ------------------------------------------------------------
    def decompose(self) -> Decomposition:
        """Per-view intrinsics and pose by RQ decomposition (all views at once).

        Returns
        -------
        Decomposition (K, R, t)
            ``P = ||P[2, :3]|| K [R | t]`` exactly, with a positive scale.
            ``K`` (n_views, 3, 3): upper triangular, positive diagonal,
            ``K[2, 2] = 1``; ``K[0, 0]``, ``K[1, 1]`` are the source-detector
            distance in column / row pixels, ``K[:2, 2]`` the principal point.
            ``R`` (n_views, 3, 3): orthonormal, rows = unit world directions
            of increasing u, increasing v and of the principal ray (towards
            the detector). ``det R = +1`` for a right-handed pixel grid and
            ``-1`` for a left-handed one, which is what leveret's circular
            convention gives (see the class notes): positive focal lengths,
            a forward axis and a positive scale cannot all hold with
            ``det R = +1`` there. ``t`` (n_views, 3): ``source = -R^T t``.
        """
        # RQ of every view at once through NumPy's batched QR: with J the
        # row-reversing permutation, (J M)^T = Q' R' gives M = (J R'^T J)(J Q'^T).
        P = self.matrices
        J = np.eye(3)[::-1]
        q, r = np.linalg.qr((J @ P[:, :, :3]).transpose(0, 2, 1))
        upper = J @ r.transpose(0, 2, 1) @ J
        Q = J @ q.transpose(0, 2, 1)
        # Make the diagonal positive: upper @ D and D @ Q with D = D^-1 = diag(+-1).
        D = np.where(np.diagonal(upper, axis1=1, axis2=2) < 0, -1.0, 1.0)
        upper = upper * D[:, None, :]
        R = D[:, :, None] * Q
        t = np.linalg.solve(upper, P[:, :, 3:4])[..., 0]
        K = upper / upper[:, 2:3, 2:3]
        return Decomposition(K, R, t)

    def principal_point(self) -> np.ndarray:
        """(n_views, 2): ``(u0, v0)`` pixels, where the perpendicular from the source meets the detector."""
        return self.decompose().K[:, :2, 2].copy()

    def _pixel_size(self, pixel_size, what: str) -> tuple[float, float]:
        if pixel_size is not None:
            return v.per_axis("pixel_size", pixel_size, 2, positive=True)
        if self.pixel_size is None:
            raise ValueError(
                f"pixel_size: {what} needs the detector pitch; give pixel_size=(du, dv) "
                f"here or to ConeGeometry(..., pixel_size=...)"
            )
        return self.pixel_size

    def source_detector_distance(self, pixel_size=None) -> np.ndarray:
        """Perpendicular distance from the source to the detector plane, length units, (n_views,).

        The focal length in pixels times the pitch; with non-square pixels
        the geometric mean of ``K[0,0] du`` and ``K[1,1] dv`` (equal when
        the pitch matches the matrices).
        """
        du, dv = self._pixel_size(pixel_size, "source_detector_distance")
        K = self.decompose().K
        return np.sqrt(K[:, 0, 0] * du * K[:, 1, 1] * dv)

    def magnification(self, points, pixel_size=None) -> np.ndarray:
        """Source-detector distance over the depth of each point: (n_views,) + points.shape[:-1]."""
        sdd = self.source_detector_distance(pixel_size)
        depth = self.depth(points)
        return sdd.reshape((-1,) + (1,) * (depth.ndim - 1)) / depth

    def normalised(self) -> "ConeGeometry":
        """The same geometry with every matrix scaled so that w = 1 at the world origin.

        ``P / P[2, 3]``: then ``w(x) = depth(x) / depth(origin)`` and, for a
        circular scan, ``1 / w**2`` is FDK's distance weight. Needs the
        origin in front of every source (``P[2, 3] > 0``).
        """
        w0 = self.matrices[:, 2, 3]
        if np.any(w0 <= 0):
            i = int(np.flatnonzero(w0 <= 0)[0])
            raise ValueError(
                f"matrices[{i}]: normalising needs the world origin in front of the source (w > 0), got w = {w0[i]:.3g}"
            )
        return self._derived(matrices=self.matrices / w0[:, None, None])

    # -- the detector in space ------------------------------------------------------------
    def crop_rows(self, start: int, stop: int) -> "ConeGeometry":
        """The same views seeing only detector rows ``start:stop`` (row ``start``
        becomes row 0): what a z-slab of the volume needs."""
        if not (0 <= start < stop <= self.n_rows):
            raise ValueError(f"crop_rows: expected 0 <= start < stop <= {self.n_rows}, got {start}:{stop}")
        m = self.matrices.copy()
        m[:, 1, :] -= start * m[:, 2, :]  # v' = v - start
        return self._derived(matrices=m, n_rows=stop - start)

    def crop_views(self, start: int, stop: int) -> "ConeGeometry":
        """Views ``start:stop`` only (e.g. those a slab of a helical scan
        needs), with their matrices, pitch and angles."""
        if not (0 <= start < stop <= self.n_views):
            raise ValueError(f"crop_views: expected 0 <= start < stop <= {self.n_views}, got {start}:{stop}")
        angles = None if self.angles is None else self.angles[start:stop]
        return self._derived(matrices=self.matrices[start:stop], angles=angles)

    def _derived(self, *, matrices, **changes) -> "ConeGeometry":
        """A copy with ``matrices`` made from this geometry's checked ones by
        operations that keep each left 3x3 block non-singular (a subset of the
        views, a positive scale per view, a multiple of one row added to
        another), so not checked again: the condition numbers' SVDs cost
        milliseconds per call, and a helical slab plan crops once per slab."""
        new = object.__new__(type(self))
        matrices = np.array(matrices, dtype=np.float64)
        matrices.setflags(write=False)
        values = {f: getattr(self, f) for f in self._fields} | changes | {"matrices": matrices}
        for name in self._fields:
            new._set(name, values[name])
        return new

    def detector_frame(self, pixel_size=None, *, distance=None) -> DetectorFrame:
        """Source, detector centre and pixel step vectors in world coordinates.

        A matrix fixes the rays but not how far along them the detector is.
        The detector plane is placed at the source-detector distance implied
        by the pitch (``pixel_size`` here, else the geometry's), or at
        ``distance`` (length units, scalar or per view) from the source,
        measured along the principal ray. Pixel (row r, col c) then sits at
        ``center + (c - (n_cols-1)/2) u + (r - (n_rows-1)/2) v``.
        """
        P = self.matrices
        M = P[:, :, :3]
        scale = np.linalg.norm(M[:, 2], axis=1)
        if distance is None:
            L = scale * self.source_detector_distance(pixel_size)
        else:
            L = scale * _per_view("distance", distance, self.n_views, positive=True)
        Minv = np.linalg.inv(M)
        source = self.source_positions()
        # The plane {w = L} is parallel to the detector, at distance L / ||M[2]||.
        u = L[:, None] * Minv[:, :, 0]
        vv = L[:, None] * Minv[:, :, 1]
        pixel00 = source + L[:, None] * Minv[:, :, 2]
        center = pixel00 + (self.n_cols - 1) / 2 * u + (self.n_rows - 1) / 2 * vv
        return DetectorFrame(source, center, u, vv)

    # -- constructors ------------------------------------------------------------------
    @classmethod
    def circular(
        cls,
        angles,
        sid,
        sdd,
        n_rows,
        n_cols,
        pixel_size,
        *,
        row_pixel_size=None,
        det_offset=(0.0, 0.0),
        det_tilt=(0.0, 0.0, 0.0),
        source_offset=(0.0, 0.0),
        perturbation=None,
    ) -> "ConeGeometry":
        """A circular scan about the z axis, with optional detector and trajectory errors.

        Parameters
        ----------
        angles : array_like
            Rotation angle ``t`` of every view, radians.
        sid, sdd : float or array_like (n_views,)
            Source-isocentre and source-detector distances (length units),
            one value or one per view.
        n_rows, n_cols : int
            Detector size.
        pixel_size : float
            Column pitch (length units).
        row_pixel_size : float, optional
            Row pitch; default ``pixel_size``.
        det_offset : (du, dv) or array (n_views, 2)
            Shift of the detector, length units, along its (untilted) u and v
            axes. The principal ray then meets column
            ``(n_cols-1)/2 - du / pixel_size`` and row
            ``(n_rows-1)/2 - dv / row_pixel_size``.
        det_tilt : (roll, tilt_u, tilt_v) or array (n_views, 3)
            Rotation of the detector about its own centre, radians. In the
            untilted detector frame ``(n, u, v)`` with ``n = -d(t)`` the normal
            towards the source, ``u = e(t)``, ``v = z`` (right-handed), the
            detector axes become ``R (n, u, v)`` with
            ``R = R_v(tilt_v) R_u(tilt_u) R_n(roll)``: first the in-plane
            roll about the normal, then the tilt about the (fixed) u axis,
            then about the (fixed) v axis; positive angles turn
            counter-clockwise seen from the tip of the axis. This is TIGRE's
            ``rotDetector`` exactly (see :meth:`to_tigre`).
        source_offset : (du, dv) or array (n_views, 2)
            Shift of the source along ``e(t)`` and z (length units).
        perturbation : array (n_views, 6) or (6,), optional
            A rigid motion of the whole source-detector assembly per view,
            ``(dx, dy, dz, rx, ry, rz)``: rotate about the world origin by
            ``Rz(rz) Ry(ry) Rx(rx)`` (radians, about the fixed world axes, x
            first), then translate by ``(dx, dy, dz)`` (length units). The
            object moving by the inverse motion looks the same. Together with
            per-view ``sid``, ``sdd``, offsets and tilts this describes any
            flat-detector trajectory ("nothing may assume a perfect circle").

        Returns
        -------
        ConeGeometry
            Normalised (w = 1 at the world origin), with ``angles`` and
            ``pixel_size = (pixel_size, row_pixel_size)`` recorded.

        Notes
        -----
        docs/conventions.md: the source sits at ``-sid d(t) = (sid sin t,
        -sid cos t, 0)`` with ``d(t) = (-sin t, cos t, 0)`` the ray direction
        of the parallel geometry, the detector centre at ``(sdd - sid) d(t)``,
        u along ``e(t) = (cos t, sin t, 0)``, v along +z. A point at
        ``x = s e(t) + z ez`` (the plane through the axis parallel to the
        detector) lands on column ``(n_cols-1)/2 + s (sdd/sid) / pixel_size``
        and row ``(n_rows-1)/2 + z (sdd/sid) / row_pixel_size``; as
        ``sid -> inf`` this is the parallel geometry with
        ``det_spacing = pixel_size sid / sdd``. This is also ASTRA's 'cone'
        geometry with the same angles.
        """
        angles = v.finite_vector("angles", angles)
        n = angles.size
        n_rows = v.positive_int("n_rows", n_rows)
        n_cols = v.positive_int("n_cols", n_cols)
        sid = _per_view("sid", sid, n, positive=True)
        sdd = _per_view("sdd", sdd, n, positive=True)
        du = v.positive_float("pixel_size", pixel_size)
        dv = du if row_pixel_size is None else v.positive_float("row_pixel_size", row_pixel_size)
        det_offset = _per_view("det_offset", det_offset, n, 2)
        det_tilt = _per_view("det_tilt", det_tilt, n, 3)
        source_offset = _per_view("source_offset", source_offset, n, 2)

        c, s, zero = np.cos(angles), np.sin(angles), np.zeros(n)
        d = np.stack([-s, c, zero], axis=1)  # parallel-beam ray direction
        e = np.stack([c, s, zero], axis=1)  # detector u axis
        ez = np.stack([zero, zero, np.ones(n)], axis=1)
        source = -sid[:, None] * d + source_offset[:, :1] * e + source_offset[:, 1:] * ez
        center = (sdd - sid)[:, None] * d + det_offset[:, :1] * e + det_offset[:, 1:] * ez
        frame = np.stack([-d, e, ez], axis=-1)  # columns: normal, u, v
        axes = frame @ _rot_zyx(det_tilt[:, 0], det_tilt[:, 1], det_tilt[:, 2])
        u_step, v_step = axes[:, :, 1] * du, axes[:, :, 2] * dv

        if perturbation is not None:
            p = _per_view("perturbation", perturbation, n, 6)
            Rp = _rot_zyx(p[:, 3], p[:, 4], p[:, 5])
            move = lambda x: np.einsum("nij,nj->ni", Rp, x)
            source, center = move(source) + p[:, :3], move(center) + p[:, :3]
            u_step, v_step = move(u_step), move(v_step)

        pixel00 = center - (n_cols - 1) / 2 * u_step - (n_rows - 1) / 2 * v_step
        P = _matrices_from_frame(source, pixel00, u_step, v_step)
        return cls(P, n_rows, n_cols, pixel_size=(du, dv), angles=angles)

    @classmethod
    def helical(
        cls,
        angles,
        pitch,
        sid,
        sdd,
        n_rows,
        n_cols,
        pixel_size,
        *,
        row_pixel_size=None,
        z_center=0.0,
        det_offset=(0.0, 0.0),
        det_tilt=(0.0, 0.0, 0.0),
        perturbation=None,
    ) -> "ConeGeometry":
        """A helical (spiral) scan: the circular scan with source and detector
        rising ``pitch`` per turn.

        Parameters
        ----------
        angles : array_like
            Rotation angle ``t`` of every view, radians, in acquisition order:
            increasing (counter-clockwise) or decreasing; any number of turns.
        pitch : float
            Length units the source rises per turn of increasing ``t`` (not
            zero). Its sign is the helix's handedness: positive, a
            right-handed helix (z grows with ``t``); negative, a left-handed
            one. Whether z grows over the scan follows from the angles'
            direction.
        sid, sdd, n_rows, n_cols, pixel_size, row_pixel_size
            As for :meth:`circular`.
        z_center : float
            Height of the source at the middle angle ``(min + max) / 2``.
        det_offset, det_tilt, perturbation
            As for :meth:`circular` (offsets and tilts in the detector's own
            frame, which rises with the source).

        Returns
        -------
        ConeGeometry
            Normalised, with ``angles`` and ``pixel_size`` recorded. At angle
            ``t`` the source sits at ``(sid sin t, -sid cos t, z(t))`` with
            ``z(t) = z_center + pitch (t - t_mid) / (2 pi)``, the detector
            centre at ``(sdd - sid) d(t) + z(t) ez``, rows along +z: the
            circular scan's frame raised by ``z(t)``. The pitch factor of
            medical CT is ``pitch`` over the detector's height at the
            isocentre, ``n_rows row_pixel_size sid / sdd``.
            :func:`leveret.geometry.helix.fit_helix` finds these numbers
            back from any geometry's matrices.
        """
        angles = v.finite_vector("angles", angles)
        pitch = v.finite_float("pitch", pitch)
        if pitch == 0:
            raise ValueError(
                "pitch: expected a non-zero rise per turn (length units), got 0; "
                "a scan without rise is ConeGeometry.circular"
            )
        z_center = v.finite_float("z_center", z_center)
        n = angles.size
        z = z_center + pitch * (angles - (angles.min() + angles.max()) / 2) / (2 * np.pi)
        det_offset = _per_view("det_offset", det_offset, n, 2)
        det_offset[:, 1] += z
        source_offset = np.stack([np.zeros(n), z], axis=1)
        return cls.circular(
            angles,
            sid,
            sdd,
            n_rows,
            n_cols,
            pixel_size,
            row_pixel_size=row_pixel_size,
            det_offset=det_offset,
            det_tilt=det_tilt,
            source_offset=source_offset,
            perturbation=perturbation,
        )

    @classmethod
    def laminography(
        cls, angles, tilt, sid, sdd, n_rows, n_cols, pixel_size, *, row_pixel_size=None, det_offset=(0.0, 0.0)
    ) -> "ConeGeometry":
        """Cone-beam laminography: the rotation axis (world z) tilted towards the beam.

        Parameters
        ----------
        angles : array_like
            Rotation angle ``t`` of every view, radians (a full turn for
            :func:`leveret.laminography_fbp`).
        tilt : float
            Angle between the rotation axis and the detector plane, radians,
            ``0 <= tilt < pi/2``: 0 is the circular scan; the beam's central
            ray rises by ``tilt`` above the xy plane (the sample's plane).
            Frequencies within ``tilt`` of the z axis are never measured (the
            missing cone).
        sid, sdd, n_rows, n_cols, pixel_size, row_pixel_size
            As for :meth:`circular`.
        det_offset : (du, dv)
            Shift of the detector along its u and v axes (length units).

        Returns
        -------
        ConeGeometry
            Normalised, with ``angles`` and ``pixel_size`` recorded. In the
            object's frame the central ray runs along
            ``c(t) = cos(tilt) d(t) + sin(tilt) ez`` with ``d(t) = (-sin t,
            cos t, 0)``; the source sits at ``-sid c(t)`` (below the sample's
            plane for tilt > 0), the detector centre at ``(sdd - sid) c(t)``,
            perpendicular to ``c(t)``, with u along ``e(t) = (cos t, sin t,
            0)`` and v along ``cos(tilt) ez - sin(tilt) d(t)``. Tilt 0 gives
            :meth:`circular`'s matrices; ``sid -> inf`` gives
            :meth:`leveret.geometry.ParallelVecGeometry.laminography`.
        """
        angles = v.finite_vector("angles", angles)
        tilt = check_tilt(tilt)
        n = angles.size
        n_rows = v.positive_int("n_rows", n_rows)
        n_cols = v.positive_int("n_cols", n_cols)
        sid = _per_view("sid", sid, n, positive=True)
        sdd = _per_view("sdd", sdd, n, positive=True)
        du = v.positive_float("pixel_size", pixel_size)
        dv = du if row_pixel_size is None else v.positive_float("row_pixel_size", row_pixel_size)
        det_offset = _per_view("det_offset", det_offset, n, 2)
        central, e, up = tilted_frame(angles, tilt)
        source = -sid[:, None] * central
        center = (sdd - sid)[:, None] * central + det_offset[:, :1] * e + det_offset[:, 1:] * up
        u_step, v_step = e * du, up * dv
        pixel00 = center - (n_cols - 1) / 2 * u_step - (n_rows - 1) / 2 * v_step
        P = _matrices_from_frame(source, pixel00, u_step, v_step)
        return cls(P, n_rows, n_cols, pixel_size=(du, dv), angles=angles)

    # -- RabbitCT ------------------------------------------------------------------------
    @classmethod
    def from_rabbitct(cls, data, n_rows, n_cols, *, pixel_size=None, angles=None) -> "ConeGeometry":
        """Matrices from RabbitCT's layout: 12 doubles per view, column-major.

        ``data`` (any shape holding 12 n numbers, e.g. (n, 12)) gives
        ``P[n, r, c] = data[n, 3 c + r]``, i.e.
        ``reshape(n, 4, 3).transpose(0, 2, 1)``. Stored unscaled, so
        :meth:`rabbitct_matrices` gives the same numbers back. RabbitCT's
        detector is 1248 columns x 960 rows.
        """
        try:
            arr = np.array(data, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"data: expected numbers, got {type(data).__name__}") from None
        if arr.size == 0 or arr.size % 12:
            raise ValueError(f"data: expected 12 numbers per view (a column-major 3x4 matrix), got {arr.size} numbers")
        P = matrix_from_rabbitct(arr.reshape(-1, 12))
        return cls(P, n_rows, n_cols, pixel_size=pixel_size, angles=angles)

    def rabbitct_matrices(self) -> np.ndarray:
        """(n_views, 12) float64: each matrix as RabbitCT stores it, column-major."""
        return matrix_to_rabbitct(self.matrices)

    # -- ASTRA --------------------------------------------------------------------------
    def to_astra_vectors(self, pixel_size=None) -> np.ndarray:
        """Rows of ASTRA's 'cone_vec' geometry, (n_views, 12).

        ``(srcX, srcY, srcZ, dX, dY, dZ, uX, uY, uZ, vX, vY, vZ)``: the
        source, the detector centre, the vector from pixel (0,0) to (0,1)
        (one column step) and from (0,0) to (1,0) (one row step), in
        leveret's world coordinates and length units. ASTRA's "centre" is
        the centre of the pixel grid: its code
        (``ConeVecProjectionGeometry3D.cpp``) puts the detector corner at
        ``d - n_rows/2 v - n_cols/2 u`` and pixel centres half a step inside,
        so pixel (r, c) is at ``d + (c - (n_cols-1)/2) u + (r - (n_rows-1)/2) v``
        as here. The detector plane is put at the source-detector distance
        implied by ``pixel_size`` (or the geometry's); the projections are the
        same for any choice.

        Use with ``astra.create_proj_geom('cone_vec', n_rows, n_cols, vectors)``;
        ASTRA's projection data are ``(n_rows, n_views, n_cols)``
        (``np.swapaxes(p, 0, 1)`` of leveret's). ASTRA's 3D volume is
        ``(slices, rows, cols) = (z, y, x)`` with the same world axes, centred
        at the origin with unit voxels unless given a window:
        ``create_vol_geom(ny, nx, nz, x0, x1, y0, y1, z0, z1)`` with the
        extents of a ``VolumeGeometry`` matches it.
        """
        f = self.detector_frame(pixel_size)
        return np.hstack([f.source, f.center, f.u, f.v])

    @classmethod
    def from_astra_vectors(cls, vectors, n_rows, n_cols, *, angles=None) -> "ConeGeometry":
        """The geometry of ASTRA 'cone_vec' rows (see :meth:`to_astra_vectors`).

        ``pixel_size`` is set to ``(|u|, |v|)`` when every view agrees, else
        left None. The matrices are normalised (w = 1 at the origin).
        """
        try:
            vec = np.array(vectors, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"vectors: expected numbers, got {type(vectors).__name__}") from None
        if vec.shape == (12,):
            vec = vec[None]
        if vec.ndim != 2 or vec.shape[1] != 12 or vec.shape[0] == 0:
            raise ValueError(f"vectors: expected shape (n_views, 12), got shape {vec.shape}")
        v.check_finite_array("vectors", vec)
        n_rows = v.positive_int("n_rows", n_rows)
        n_cols = v.positive_int("n_cols", n_cols)
        source, center, u, vv = vec[:, 0:3], vec[:, 3:6], vec[:, 6:9], vec[:, 9:12]
        pixel00 = center - (n_cols - 1) / 2 * u - (n_rows - 1) / 2 * vv
        # The source must not lie in the detector plane (the matrix would be singular).
        normal = np.cross(u, vv)
        height = np.einsum("ni,ni->n", normal, pixel00 - source)
        size = np.linalg.norm(normal, axis=1) * np.linalg.norm(pixel00 - source, axis=1)
        bad = ~(np.abs(height) > 1e-12 * size)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"vectors[{i}]: expected a source off the detector plane and non-parallel u, v, got a degenerate view"
            )
        P = _matrices_from_frame(source, pixel00, u, vv)
        lu, lv = np.linalg.norm(u, axis=1), np.linalg.norm(vv, axis=1)
        same = np.ptp(lu) <= _SAME * lu.max() and np.ptp(lv) <= _SAME * lv.max()
        pixel_size = (float(lu.mean()), float(lv.mean())) if same else None
        return cls(P, n_rows, n_cols, pixel_size=pixel_size, angles=angles)

    # -- TIGRE ---------------------------------------------------------------------------
    def to_tigre(self, volume: VolumeGeometry | None = None, pixel_size=None) -> dict:
        """TIGRE's geometry fields for these views (a plain dict).

        Returns
        -------
        dict
            ``mode='cone'``, ``DSO``, ``DSD`` (length units), ``nDetector``
            ``(n_rows, n_cols)``, ``dDetector`` ``(dv, du)``, ``sDetector``,
            ``offDetector`` ``(offV, offU)``, ``rotDetector`` (radians),
            ``COR = 0``, ``offOrigin`` (the volume centre, ``(z, y, x)``,
            zeros without a volume), ``angles`` and, with a volume,
            ``nVoxel``, ``dVoxel``, ``sVoxel`` in ``(z, y, x)`` order. Values
            that are the same for all views are single numbers / rows,
            otherwise per-view arrays (TIGRE takes both). ``angles`` is
            ``(n,)`` (rotation alpha only) or ``(n, 3)`` (alpha, theta, psi)
            when a source leaves the z = 0 plane; TIGRE takes it as the
            separate argument of ``tigre.Ax(img, geo, angles)``. Copy the
            fields onto a ``tigre.geometry()`` object, as float32.

        Notes
        -----
        TIGRE (read from CERN/TIGRE ``Common/CUDA/Siddon_projection.cu``,
        ``computeDeltas_Siddon``, and ``Python/.../_types.pxd``) uses the
        same world frame and image order (``(z, y, x)``, x fastest, voxel
        centres at ``offOrigin + (i - (n-1)/2) dVoxel``). For a view with
        Euler angles ``E = Rz(alpha) Ry(theta) Rz(psi)`` it puts the source
        at ``E (DSO, 0, 0)`` and pixel ``[row, col]`` of the Python
        projection array at ``E (R_rpy (0, (col - (nU-1)/2) dU,
        (row - (nV-1)/2) dV) + (-(DSD - DSO), offU, offV))``, plus
        ``COR (-sin alpha, cos alpha, 0)`` on everything, with
        ``R_rpy = Rz(rotDetector[2]) Ry(rotDetector[1]) Rx(rotDetector[0])``
        and ``offDetector = (offV, offU)``. So with ``alpha = t - pi/2``
        TIGRE's frame ``E (x, y, z)`` is leveret's ``(-d(t), e(t), z)``:
        same column and row directions, no flips; ``DSO = sid``,
        ``DSD = sdd``, ``offDetector = det_offset[::-1]``,
        ``rotDetector = det_tilt``. Here each view is converted from its
        matrix: ``alpha``, ``theta`` (``psi = 0``) point E's x axis at the
        source, the detector centre and axes are expressed in E's frame.
        Needs square-angled pixels of one pitch for all views (TIGRE has one
        ``dDetector``).
        """
        f = self.detector_frame(pixel_size)
        lu, lv = np.linalg.norm(f.u, axis=1), np.linalg.norm(f.v, axis=1)
        for name, lengths in (("column", lu), ("row", lv)):
            if np.ptp(lengths) > 1e-6 * lengths.max():
                raise ValueError(
                    f"geometry: TIGRE needs one detector pitch for all views, got "
                    f"{name} pitches {lengths.min():.6g}..{lengths.max():.6g}"
                )
        u_hat, v_hat = f.u / lu[:, None], f.v / lv[:, None]
        skew = np.abs(np.einsum("ni,ni->n", u_hat, v_hat))
        if np.any(skew > 1e-6):
            i = int(np.argmax(skew))
            raise ValueError(
                f"matrices[{i}]: TIGRE needs perpendicular detector rows and columns, "
                f"got cos(angle) = {skew[i]:.3g} between them"
            )
        v_hat = v_hat - np.einsum("ni,ni->n", v_hat, u_hat)[:, None] * u_hat
        v_hat /= np.linalg.norm(v_hat, axis=1, keepdims=True)

        dso = np.linalg.norm(f.source, axis=1)
        if np.any(dso <= 0):
            raise ValueError("geometry: TIGRE needs every source away from the world origin")
        s_hat = f.source / dso[:, None]
        alpha = np.arctan2(s_hat[:, 1], s_hat[:, 0])
        theta = -np.arcsin(np.clip(s_hat[:, 2], -1.0, 1.0))
        if self.angles is not None:  # follow the recorded angles, not atan2's branch
            ref = self.angles - np.pi / 2
            alpha = ref + (alpha - ref + np.pi) % (2 * np.pi) - np.pi
        else:
            alpha = np.unwrap(alpha)
        E = _rot_z(alpha) @ _rot_y(theta)
        Et = E.transpose(0, 2, 1)
        c_local = np.einsum("nij,nj->ni", Et, f.center)
        R = Et @ np.stack([np.cross(u_hat, v_hat), u_hat, v_hat], axis=-1)
        # R = Rz(c) Ry(b) Rx(a) -> (a, b, c)
        rot = np.stack(
            [
                np.arctan2(R[:, 2, 1], R[:, 2, 2]),
                np.arctan2(-R[:, 2, 0], np.hypot(R[:, 0, 0], R[:, 1, 0])),
                np.arctan2(R[:, 1, 0], R[:, 0, 0]),
            ],
            axis=1,
        )

        # Round-off from the matrices (1e-15 mm offsets, 1e-17 rad tilts) reads as
        # a real offset in TIGRE's printout; snap it to zero.
        c_local[:, 1:] = np.where(np.abs(c_local[:, 1:]) < 1e-12 * dso[:, None], 0.0, c_local[:, 1:])
        rot = np.where(np.abs(rot) < 1e-12, 0.0, rot)
        theta = np.where(np.abs(theta) < 1e-12, 0.0, theta)
        n_det = np.array([self.n_rows, self.n_cols])
        d_det = np.array([lv.mean(), lu.mean()])
        geo = {
            "mode": "cone",
            "DSO": _compact(dso),
            "DSD": _compact(dso - c_local[:, 0]),
            "nDetector": n_det,
            "dDetector": d_det,
            "sDetector": n_det * d_det,
            "offDetector": _compact(c_local[:, [2, 1]]),
            "rotDetector": _compact(rot),
            "COR": 0.0,
            "offOrigin": np.zeros(3),
            "angles": alpha if np.all(theta == 0) else np.stack([alpha, theta, np.zeros_like(alpha)], axis=1),
        }
        if volume is not None:
            volume_3d(volume)
            geo["nVoxel"] = np.array(volume.shape)
            geo["dVoxel"] = np.array(volume.voxel_size)
            geo["sVoxel"] = geo["nVoxel"] * geo["dVoxel"]
            geo["offOrigin"] = np.array(volume.center)
        return geo

    @classmethod
    def from_tigre(cls, geo, angles=None) -> "ConeGeometry":
        """The geometry of a TIGRE cone-beam ``geo`` (object or dict) and its angles.

        ``angles`` defaults to ``geo.angles``; ``(n,)`` or ``(n, 3)``
        (alpha, theta, psi). Uses ``DSO``, ``DSD``, ``nDetector``,
        ``dDetector`` and, when present, ``offDetector``, ``rotDetector``,
        ``COR`` and a per-view ``offOrigin`` (its first row is the volume
        centre, see :meth:`tigre_volume`; later rows move the rig). The
        mapping is written out in :meth:`to_tigre`. ``angles`` are recorded
        as ``alpha + pi/2`` when theta = psi = 0.
        """
        mode = _tigre_field(geo, "mode", "cone")
        if mode is not None and str(mode).lower() != "cone":
            raise ValueError(f"geo: expected mode 'cone', got {mode!r}")
        if angles is None:
            angles = _tigre_field(geo, "angles", None)
            if angles is None:
                raise ValueError("angles: expected the projection angles (or geo.angles), got None")
        try:
            ang = np.array(angles, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"angles: expected numbers, got {type(angles).__name__}") from None
        if ang.ndim == 1:
            ang = np.stack([ang, np.zeros_like(ang), np.zeros_like(ang)], axis=1)
        if ang.ndim != 2 or ang.shape[1] != 3 or ang.shape[0] == 0:
            raise ValueError(f"angles: expected shape (n,) or (n, 3), got {np.shape(angles)}")
        v.check_finite_array("angles", ang)
        n = ang.shape[0]
        n_det = _per_view("geo.nDetector", _tigre_field(geo, "nDetector"), 1, 2, positive=True)[0]
        if np.any(n_det != np.round(n_det)):
            raise ValueError(f"geo.nDetector: expected whole numbers, got {n_det}")
        n_rows, n_cols = int(n_det[0]), int(n_det[1])
        dv, du = _per_view("geo.dDetector", _tigre_field(geo, "dDetector"), 1, 2, positive=True)[0]
        dso = _per_view("geo.DSO", _tigre_field(geo, "DSO"), n, positive=True)
        dsd = _per_view("geo.DSD", _tigre_field(geo, "DSD"), n, positive=True)
        off_det = _per_view("geo.offDetector", _tigre_field(geo, "offDetector", (0.0, 0.0)), n, 2)
        rot = _per_view("geo.rotDetector", _tigre_field(geo, "rotDetector", (0.0, 0.0, 0.0)), n, 3)
        cor = _per_view("geo.COR", _tigre_field(geo, "COR", 0.0), n)
        off_origin = _per_view("geo.offOrigin", _tigre_field(geo, "offOrigin", (0.0, 0.0, 0.0)), n, 3)

        alpha, theta, psi = ang.T
        E = _rot_z(alpha) @ _rot_y(theta) @ _rot_z(psi)
        R_rpy = _rot_zyx(rot[:, 0], rot[:, 1], rot[:, 2])
        zero = np.zeros(n)
        c_local = np.stack([dso - dsd, off_det[:, 1], off_det[:, 0]], axis=1)
        s_local = np.stack([dso, zero, zero], axis=1)
        to_world = lambda x: np.einsum("nij,nj->ni", E, x)
        # COR moves everything along (-sin alpha, cos alpha, 0); a per-view
        # image offset moves the rig the other way relative to the volume.
        shift = cor[:, None] * np.stack([-np.sin(alpha), np.cos(alpha), zero], axis=1)
        shift = shift + (off_origin[0] - off_origin)[:, ::-1]
        source = to_world(s_local) + shift
        center = to_world(c_local) + shift
        u_step = to_world(R_rpy[:, :, 1]) * du
        v_step = to_world(R_rpy[:, :, 2]) * dv  # TIGRE's pixelV runs downwards; the array row upwards
        pixel00 = center - (n_cols - 1) / 2 * u_step - (n_rows - 1) / 2 * v_step
        P = _matrices_from_frame(source, pixel00, u_step, v_step)
        planar = np.all(ang[:, 1:] == 0)
        return cls(P, n_rows, n_cols, pixel_size=(du, dv), angles=alpha + np.pi / 2 if planar else None)

    @staticmethod
    def tigre_volume(geo) -> VolumeGeometry:
        """The ``VolumeGeometry`` of a TIGRE ``geo``: ``nVoxel``, ``dVoxel``, ``offOrigin`` (first row)."""
        n_vox = _per_view("geo.nVoxel", _tigre_field(geo, "nVoxel"), 1, 3, positive=True)[0]
        d_vox = _per_view("geo.dVoxel", _tigre_field(geo, "dVoxel"), 1, 3, positive=True)[0]
        off = np.array(_tigre_field(geo, "offOrigin", (0.0, 0.0, 0.0)), dtype=np.float64)
        off = off.reshape(-1, 3)[0] if off.size >= 3 else np.zeros(3)
        return VolumeGeometry(tuple(int(round(x)) for x in n_vox), tuple(d_vox), tuple(off))

    # -- presentation ------------------------------------------------------------------
    def __repr__(self) -> str:
        parts = [f"{self.n_views} views", f"detector {self.n_rows} rows x {self.n_cols} cols"]
        if self.pixel_size is not None:
            parts.append("pixel_size=({:g}, {:g})".format(*self.pixel_size))
        from .helix import fit_helix

        helix = fit_helix(self)
        if helix is None:
            parts.append(f"source-origin {_range(np.linalg.norm(self.source_positions(), axis=1))}")
        else:
            parts.append(f"helix radius {helix.radius:.4g}, pitch {helix.pitch:.4g} per turn")
        if self.pixel_size is not None:
            parts.append(f"source-detector {_range(self.source_detector_distance())}")
        if self.angles is not None:
            a = np.degrees(self.angles)
            parts.append(f"angles {a.min():g} to {a.max():g} deg")
        return f"ConeGeometry({', '.join(parts)})"

    def plot(self, volume: VolumeGeometry | None = None, ax=None, n_views: int = 6):
        """3D figure: source trajectory, a few detectors and their corner rays, the volume box.

        Detectors sit at the source-detector distance when the pitch is
        known, else at twice the depth of the origin. Returns the Axes3D
        (made on a new ``matplotlib.figure.Figure`` when ``ax`` is None).
        """
        from .plotting import plot_cone

        return plot_cone(self, volume, ax=ax, n_views=n_views)


# -- RabbitCT's storage order --------------------------------------------------------------


def matrix_to_rabbitct(P) -> np.ndarray:
    """A projection matrix as RabbitCT stores it: 12 doubles, column-major.

    Parameters
    ----------
    P : array_like, shape (3, 4) or (..., 3, 4)
        Projection matrix (or a stack of them) mapping homogeneous world
        coordinates (x, y, z, 1), in mm, to (u w, v w, w), u and v in pixels.

    Returns
    -------
    ndarray, float64, shape (12,) or (..., 12)
        ``values[..., 3 c + r] = P[..., r, c]``: column 0 (rows 0, 1, 2), then
        column 1, ... This is the order of the file.

    Raises
    ------
    ValueError
        ``P`` is not (..., 3, 4) or holds NaN/Inf.
    """
    P = np.asarray(P, dtype=np.float64)
    if P.ndim < 2 or P.shape[-2:] != (3, 4):
        raise ValueError(f"P: expected a 3x4 matrix (shape (3, 4) or (..., 3, 4)), got shape {P.shape}")
    v.check_finite_array("P", P)
    # Column-major = the transpose, read in C order.
    return np.ascontiguousarray(np.swapaxes(P, -1, -2)).reshape(P.shape[:-2] + (12,))


def matrix_from_rabbitct(values) -> np.ndarray:
    """The 3x4 projection matrix from RabbitCT's 12 column-major doubles.

    Parameters
    ----------
    values : array_like, shape (12,) or (..., 12)
        ``values[3 c + r]`` is ``P[r, c]`` (the file's order).

    Returns
    -------
    ndarray, float64, shape (3, 4) or (..., 3, 4), C-contiguous
        ``P[r, c]``; P maps (x, y, z, 1) in mm to (u w, v w, w).

    Raises
    ------
    ValueError
        ``values`` does not end in an axis of 12.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim < 1 or values.shape[-1] != 12:
        raise ValueError(f"values: expected 12 numbers per matrix (shape (12,) or (..., 12)), got shape {values.shape}")
    cols = values.reshape(values.shape[:-1] + (4, 3))  # [c, r]
    return np.ascontiguousarray(np.swapaxes(cols, -1, -2))
