"""3D ellipsoid phantoms with exact (closed-form) line integrals.

Coordinates follow docs/conventions.md: world (x, y, z) in the user's length unit,
z is the rotation axis of circular scans, volumes are ``(nz, ny, nx)``
arrays, x fastest. Points and directions given to this module are ``(..., 3)``
arrays in (x, y, z) order.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from .. import _validate as v
from ..geometry._frozen import Frozen
from ..geometry.volume import VolumeGeometry
from . import _common as common
from .ellipses import Ellipse, EllipsePhantom, shepp_logan_ellipses
from .tables import SHEPP_LOGAN_3D


def euler_rotation(phi: float, theta: float = 0.0, psi: float = 0.0) -> np.ndarray:
    """Rotation matrix ``R = Rz(phi) @ Rx(theta) @ Rz(psi)`` (z-x-z Euler angles).

    Each factor is an active, counter-clockwise (right-hand) rotation about
    a world axis, angles in radians. Read right to left: turn by ``psi`` about
    z, tilt by ``theta`` about x, then turn by ``phi`` about z. With
    ``theta = psi = 0`` this is the 2D rotation by ``phi`` in the xy plane.

    Returns
    -------
    numpy.ndarray
        ``(3, 3)`` float64, orthogonal with determinant +1.
    """

    def rz(a):
        co, si = math.cos(a), math.sin(a)
        return np.array([[co, -si, 0.0], [si, co, 0.0], [0.0, 0.0, 1.0]])

    co, si = math.cos(theta), math.sin(theta)
    rx = np.array([[1.0, 0.0, 0.0], [0.0, co, -si], [0.0, si, co]])
    return rz(phi) @ rx @ rz(psi)


def _rotation(value) -> np.ndarray:
    """The ``rotation`` argument of Ellipsoid as a read-only 3x3 matrix."""
    arr = common.finite_array("rotation", value)
    if arr.ndim == 0:
        out = euler_rotation(float(arr))
    elif arr.shape == (3,):
        out = euler_rotation(*map(float, arr))
    elif arr.shape == (3, 3):
        err = np.abs(arr.T @ arr - np.eye(3)).max()
        if err > 1e-9 or np.linalg.det(arr) < 0:
            raise ValueError(
                f"rotation: expected a rotation matrix (orthogonal, determinant +1), "
                f"got one with |R^T R - I| = {err:.3g} and det {np.linalg.det(arr):.6g}"
            )
        out = arr.copy()
    else:
        raise ValueError(
            f"rotation: expected an angle phi, Euler angles (phi, theta, psi) "
            f"or a 3x3 matrix, got an array of shape {arr.shape}"
        )
    out.setflags(write=False)
    return out


class Ellipsoid(Frozen):
    """One filled ellipsoid of constant value.

    Parameters
    ----------
    value : float
        Value inside (attenuation per length unit); may be negative, values of
        overlapping ellipsoids add.
    semi_axes : float or (float, float, float)
        Semi-axes ``(a, b, c)`` along the ellipsoid's own x, y and z axes, in
        length units; a scalar gives a ball.
    center : (float, float, float)
        Centre ``(x, y, z)`` in world coordinates (x first, unlike array order).
    rotation : float, (phi, theta, psi) or (3, 3) array
        Orientation. A scalar is the angle phi (radians) about z,
        counter-clockwise seen from +z, as for :class:`Ellipse`; three numbers
        are z-x-z Euler angles, see :func:`euler_rotation`; a 3x3 matrix is
        used as is. Stored as the matrix ``rotation`` whose columns are the
        ellipsoid's own x, y, z axes in world coordinates.

    Notes
    -----
    A point ``p`` is inside when ``|D^-1 R^T (p - center)| <= 1`` with
    ``D = diag(a, b, c)``.
    """

    __slots__ = ("value", "semi_axes", "center", "rotation")
    _fields = __slots__

    def __init__(self, value: float, semi_axes, center=(0.0, 0.0, 0.0), rotation=0.0):
        self._set("value", v.finite_float("value", value))
        self._set("semi_axes", common.lengths("semi_axes", semi_axes, 3))
        self._set("center", common.point("center", center, 3))
        self._set("rotation", _rotation(rotation))

    @property
    def rotation_matrix(self) -> np.ndarray:
        """``(3, 3)`` read-only; columns are the own x, y, z axes in world coordinates."""
        return self.rotation

    @property
    def volume(self) -> float:
        """``4/3 pi a b c`` in cubed length units."""
        a, b, cc = self.semi_axes
        return 4.0 / 3.0 * math.pi * a * b * cc

    @property
    def half_extent(self) -> tuple[float, float, float]:
        """Half size of the axis-aligned bounding box, ``(hx, hy, hz)``."""
        scaled_axes = self.rotation * np.asarray(self.semi_axes)[None, :]
        return tuple(float(h) for h in np.sqrt((scaled_axes**2).sum(axis=1)))

    def _to_unit(self) -> np.ndarray:
        """``M = D^-1 R^T``: maps a world offset from the centre to unit-sphere coordinates."""
        return self.rotation.T / np.asarray(self.semi_axes)[:, None]

    def contains(self, x, y, z) -> np.ndarray:
        """Boolean mask of the world points ``(x, y, z)`` (broadcast) inside or on the ellipsoid."""
        m = self._to_unit()
        d = (
            np.asarray(x, dtype=np.float64) - self.center[0],
            np.asarray(y, dtype=np.float64) - self.center[1],
            np.asarray(z, dtype=np.float64) - self.center[2],
        )
        total = 0.0
        for j in range(3):
            q = m[j, 0] * d[0] + m[j, 1] * d[1] + m[j, 2] * d[2]
            total = total + q * q
        return total <= 1.0

    def _line_integrals(self, points: np.ndarray, units: np.ndarray) -> np.ndarray:
        """Chord length times value for lines through ``points`` along unit ``units``.

        Unchecked; :meth:`EllipsoidPhantom.line_integrals` is the public entry.
        """
        m = self._to_unit()
        # In unit-sphere coordinates the line is q + tau w, tau = world arc
        # length (|units| = 1). It meets the sphere where |q + tau w|^2 = 1;
        # with q_perp the part of q orthogonal to w the two roots are
        # tau = (-q.w +- sqrt(|w|^2 (1 - |q_perp|^2))) / |w|^2, so the chord is
        # 2 sqrt((1 - |q_perp|^2) / |w|^2). Using q_perp instead of the
        # textbook B^2 - AC avoids cancellation for far-off lines.
        q = (points - np.asarray(self.center)) @ m.T
        w = units @ m.T
        ww = np.einsum("...k,...k->...", w, w)
        qw = np.einsum("...k,...k->...", q, w)
        q_perp = q - (qw / ww)[..., None] * w
        dist2 = np.einsum("...k,...k->...", q_perp, q_perp)
        return self.value * 2.0 * np.sqrt(np.maximum(1.0 - dist2, 0.0) / ww)

    def section(self, z: float) -> Ellipse | None:
        """The cross-section with the plane at height ``z``, or None if they miss.

        Returns an :class:`Ellipse` of the same value in the (x, y) plane.
        """
        z = v.finite_float("z", z)
        m = self._to_unit()
        quad = m.T @ m  # p in ellipsoid iff (p - c)^T quad (p - c) <= 1
        dz = z - self.center[2]
        q2 = quad[:2, :2]
        q_xz = quad[:2, 2]
        # Complete the square in (x, y): the minimum of the form over the plane
        # sits at shift = -dz q2^-1 q_xz; what is left of the budget 1 is k.
        shift = -dz * np.linalg.solve(q2, q_xz)
        k = 1.0 - dz * dz * (quad[2, 2] - q_xz @ np.linalg.solve(q2, q_xz))
        if k <= 0.0:
            return None
        lam, vec = np.linalg.eigh(q2)
        semi = np.sqrt(k / lam)
        angle = math.atan2(vec[1, 0], vec[0, 0])
        return Ellipse(self.value, tuple(semi), (self.center[0] + shift[0], self.center[1] + shift[1]), angle)

    def scaled(self, factor: float) -> "Ellipsoid":
        """The same ellipsoid with centre and semi-axes multiplied by ``factor``."""
        f = v.positive_float("factor", factor)
        return Ellipsoid(
            self.value, tuple(f * x for x in self.semi_axes), tuple(f * x for x in self.center), self.rotation
        )

    def __repr__(self) -> str:
        fmt = lambda t: "(" + ", ".join(f"{x:g}" for x in t) + ")"
        rot = np.array2string(self.rotation, precision=4, separator=", ").replace("\n", "")
        return (
            f"Ellipsoid(value={self.value:g}, semi_axes={fmt(self.semi_axes)}, "
            f"center={fmt(self.center)}, rotation={rot})"
        )


class EllipsoidPhantom(Frozen):
    """A sum of constant-valued ellipsoids, with exact line integrals.

    Parameters
    ----------
    ellipsoids : iterable of Ellipsoid
        Where they overlap their values add. May be empty (the zero volume).
    """

    __slots__ = ("ellipsoids",)
    _fields = __slots__

    def __init__(self, ellipsoids: Iterable[Ellipsoid]):
        self._set("ellipsoids", common.shapes_tuple("ellipsoids", ellipsoids, Ellipsoid))

    def __len__(self) -> int:
        return len(self.ellipsoids)

    def __iter__(self):
        return iter(self.ellipsoids)

    @property
    def mass(self) -> float:
        """Integral of the phantom over space: sum of value * volume."""
        return float(sum(e.value * e.volume for e in self.ellipsoids))

    def evaluate(self, x, y, z) -> np.ndarray:
        """Phantom values at the world points ``(x, y, z)`` (broadcast), float64."""
        x, y, z = np.broadcast_arrays(
            common.finite_array("x", x), common.finite_array("y", y), common.finite_array("z", z)
        )
        out = np.zeros(x.shape)
        for e in self.ellipsoids:
            out += e.value * e.contains(x, y, z)
        return out

    def rasterize(self, volume: VolumeGeometry, supersampling: int = 1) -> np.ndarray:
        """Voxel values of the phantom on a 3D grid.

        Parameters
        ----------
        volume : VolumeGeometry
            A 3D grid, shape ``(nz, ny, nx)``; voxel ``[k, j, i]`` is centred
            at ``(cx + (i - (nx-1)/2) dx, cy + (j - (ny-1)/2) dy,
            cz + (k - (nz-1)/2) dz)``. For one plane use ``nz = 1``.
        supersampling : int
            Each voxel value is the mean over ``supersampling**3`` points of a
            regular sub-grid of the voxel; 1 samples the centre.

        Returns
        -------
        numpy.ndarray
            ``(nz, ny, nx)`` float64.
        """
        volume = common.check_volume(volume, 3)
        n_sub = v.positive_int("supersampling", supersampling)
        dz, dy, dx = volume.voxel_size
        xs, ys, zs = (volume.coordinates(a) for a in "xyz")
        offsets = common.sub_offsets(n_sub)
        out = np.zeros(volume.shape)
        for e in self.ellipsoids:
            # Only the voxels of the bounding box can be lit: work there.
            (hx, hy, hz), (cx, cy, cz) = e.half_extent, e.center
            bx = common.box(xs, dx, cx - hx, cx + hx)
            by = common.box(ys, dy, cy - hy, cy + hy)
            bz = common.box(zs, dz, cz - hz, cz + hz)
            if bx.start == bx.stop or by.start == by.stop or bz.start == bz.stop:
                continue
            hits = np.zeros((bz.stop - bz.start, by.stop - by.start, bx.stop - bx.start))
            for oz in offsets:
                z = (zs[bz] + oz * dz)[:, None, None]
                for oy in offsets:
                    y = (ys[by] + oy * dy)[None, :, None]
                    for ox in offsets:
                        hits += e.contains((xs[bx] + ox * dx)[None, None, :], y, z)
            out[bz, by, bx] += e.value * hits / n_sub**3
        return out

    def line_integrals(self, points, directions) -> np.ndarray:
        """Exact integrals of the phantom along straight lines (any geometry).

        Parameters
        ----------
        points : array_like, (..., 3)
            A world point ``(x, y, z)`` on each line.
        directions : array_like, (..., 3)
            Direction of each line; any non-zero length (normalised here).
            ``points`` and ``directions`` broadcast against each other.

        Returns
        -------
        numpy.ndarray
            float64 of the broadcast shape without the last axis: the
            integral over the whole infinite line, in value times length
            units. For a ray from a source outside the phantom this is the
            ray sum.
        """
        p = common.finite_array("points", points)
        d = common.finite_array("directions", directions)
        for name, arr in (("points", p), ("directions", d)):
            if arr.ndim == 0 or arr.shape[-1] != 3:
                raise ValueError(f"{name}: expected an array of shape (..., 3) (x, y, z last), got shape {arr.shape}")
        try:
            shape = np.broadcast_shapes(p.shape, d.shape)
        except ValueError:
            raise ValueError(
                f"points, directions: expected shapes that broadcast, got {p.shape} and {d.shape}"
            ) from None
        norm = np.sqrt(np.einsum("...k,...k->...", d, d))
        if np.any(norm == 0.0):
            raise ValueError(
                f"directions: expected non-zero vectors, got {int(np.count_nonzero(norm == 0.0))} zero vector(s)"
            )
        units = d / norm[..., None]
        out = np.zeros(shape[:-1])
        for e in self.ellipsoids:
            out += e._line_integrals(p, units)
        return out

    def project(self, geometry) -> np.ndarray:
        """Exact projections for a 3D parallel-beam or cone-beam geometry.

        A ``ConeGeometry`` gets the line integral along the ray from each
        view's source through each pixel centre (computed view by view, so
        memory stays at one view's rays): see :meth:`project_cone`.
        Parallel beam:

        At angle t the rays run along ``d = (-sin t, cos t, 0)``; pixel
        ``[n, r, c]`` holds the line integral through
        ``s e(t) + z ez`` with ``e(t) = (cos t, sin t, 0)``,
        ``s = (c - center - axis_shift[n]) det_spacing`` and
        ``z = (r - (n_rows-1)/2) row_spacing``: the value at the detector
        pixel centre.

        Returns
        -------
        numpy.ndarray
            ``(n_angles, n_rows, n_cols)`` float64.
        """
        if hasattr(geometry, "pixel_rays"):
            return self.project_cone(geometry)
        geometry = common.check_parallel(geometry, want_2d=False)
        common.check_projection_memory(geometry)
        t = geometry.angles
        cos_t, sin_t, zero = np.cos(t), np.sin(t), np.zeros_like(t)
        e_dir = np.stack([cos_t, sin_t, zero], axis=-1)  # (n_angles, 3)
        d_dir = np.stack([-sin_t, cos_t, zero], axis=-1)  # unit already
        out = np.zeros(geometry.projection_shape)
        s_all = common.column_positions(geometry)  # (n_angles, n_cols)
        z_all = geometry.row_positions()
        for e in self.ellipsoids:
            # Only the pixels of the ellipsoid's shadow can be non-zero: rows
            # of its z extent, columns of its s extent at any angle (the
            # support |D R^T e(t)| about the projected centre). Work there.
            cz, hz = e.center[2], e.half_extent[2]
            rows = common.box(z_all, geometry.row_spacing, cz - hz, cz + hz)
            s_mid = e_dir @ np.asarray(e.center)
            reach = np.linalg.norm((e_dir @ e.rotation) * np.asarray(e.semi_axes), axis=1)
            lit = (s_all >= (s_mid - reach)[:, None] - geometry.det_spacing) & (
                s_all <= (s_mid + reach)[:, None] + geometry.det_spacing
            )
            hit_cols = np.flatnonzero(lit.any(axis=0))
            if rows.start == rows.stop or hit_cols.size == 0:
                continue
            cols = slice(int(hit_cols[0]), int(hit_cols[-1]) + 1)
            s = s_all[:, None, cols]  # (n_angles, 1, n_c)
            z = z_all[None, rows, None]  # (1, n_r, 1)

            # Same chord formula as _line_integrals, but q = s Me + z Mez - Mc
            # is linear in (s, z), and so is its part orthogonal to w = Md:
            # project the three per-angle vectors once, then combine them on
            # the (rows, cols) grid without building (..., 3) point arrays.
            m = e._to_unit()
            w = d_dir @ m.T  # (n_angles, 3)
            ww = (w * w).sum(axis=1)

            def perp(vec):
                vec = np.broadcast_to(vec, w.shape)
                return vec - ((vec * w).sum(axis=1) / ww)[:, None] * w

            a_s = perp(e_dir @ m.T)
            a_z = perp(m[:, 2])
            a_0 = perp(m @ np.asarray(e.center))
            dist2 = 0.0
            for k in range(3):
                qk = s * a_s[:, k, None, None] + z * a_z[:, k, None, None] - a_0[:, k, None, None]
                dist2 = dist2 + qk * qk
            out[:, rows, cols] += e.value * 2.0 * np.sqrt(np.maximum(1.0 - dist2, 0.0) / ww[:, None, None])
        return out

    def project_cone(self, geometry) -> np.ndarray:
        """Exact cone-beam projections ``(n_views, n_rows, n_cols)`` float64:
        the integral along the line from each view's source through each
        detector pixel centre (``ConeGeometry.pixel_rays``), in closed form."""
        common.check_projection_memory(geometry)
        out = np.empty(geometry.projection_shape)
        for n in range(geometry.n_views):
            sources, directions = geometry.pixel_rays(views=slice(n, n + 1))
            out[n] = self.line_integrals(sources, directions)[0]
        return out

    def plane_integrals(self, directions, t) -> np.ndarray:
        """Exact integrals over the planes ``{x . n = t}`` (3D Radon transform).

        ``directions`` is ``(..., 3)`` unit vectors, ``t`` (length units)
        broadcasts against ``directions[..., 0]``; returns float64 value x
        area. See :func:`leveret.phantom.planes.plane_integrals`.
        """
        from .planes import plane_integrals

        return plane_integrals(self, directions, t)

    def project_radon(self, geometry) -> np.ndarray:
        """Exact ``(n_dirs, n_samples)`` plane integrals for a ``RadonGeometry``;
        see :func:`leveret.phantom.planes.project_radon`."""
        from .planes import project_radon

        return project_radon(self, geometry)

    def slice_2d(self, z: float) -> EllipsePhantom:
        """The 2D phantom of the cross-section at height ``z`` (length units).

        Its :meth:`EllipsePhantom.rasterize` equals :meth:`rasterize` of a
        one-slice volume at that height (up to ties on ellipse boundaries).
        """
        z = v.finite_float("z", z)
        sections = (e.section(z) for e in self.ellipsoids)
        return EllipsePhantom(s for s in sections if s is not None)

    def scaled(self, factor: float) -> "EllipsoidPhantom":
        """All lengths (centres, semi-axes) multiplied by ``factor`` > 0.

        Values stay: line integrals scale by ``factor``, the mass by
        ``factor**3``.
        """
        v.positive_float("factor", factor)
        return EllipsoidPhantom(e.scaled(factor) for e in self.ellipsoids)

    def __repr__(self) -> str:
        inner = ",\n    ".join(map(repr, self.ellipsoids))
        return f"EllipsoidPhantom([\n    {inner}])" if inner else "EllipsoidPhantom([])"


# -- ready-made phantoms -------------------------------------------------------
def shepp_logan_3d(radius: float = 1.0, modified: bool = True) -> EllipsoidPhantom:
    """The 3D Shepp-Logan head phantom, 10 ellipsoids (the version ODL uses).

    The ellipses of :func:`shepp_logan_ellipses`, unchanged in x and y, given
    the z semi-axes of Kak & Slaney's 3D table (as in Schabel's phantom3d and
    tomopy), all centred on the plane z = 0 and rotated about z only. So the
    z = 0 section is exactly ``shepp_logan_ellipses(radius, modified)``; the
    skull ellipsoid has semi-axes ``(0.69, 0.92, 0.81) radius``.

    Parameters
    ----------
    radius : float
        Length scale; the head fits in the cube ``[-radius, radius]^3``.
    modified : bool
        Toft's higher-contrast values (True, all values in [0, 1]) or the
        original ones (False); see :func:`shepp_logan_ellipses`.
    """
    radius = v.positive_float("radius", radius)
    col = 1 if modified else 0
    return EllipsoidPhantom(
        Ellipsoid(
            row[col], tuple(radius * x for x in row[2:5]), tuple(radius * x for x in row[5:8]), math.radians(row[8])
        )
        for row in SHEPP_LOGAN_3D
    )


def ball(radius: float, value: float = 1.0, center=(0.0, 0.0, 0.0)) -> EllipsoidPhantom:
    """A ball of ``radius`` (length units) and ``value`` centred at ``center = (x, y, z)``."""
    radius = v.positive_float("radius", radius)
    return EllipsoidPhantom([Ellipsoid(value, (radius, radius, radius), center)])


def _random_rotation(rng: np.random.Generator) -> np.ndarray:
    """A rotation matrix drawn uniformly (Haar measure) via QR of a Gaussian matrix."""
    q, r = np.linalg.qr(rng.standard_normal((3, 3)))
    q = q * np.sign(np.diag(r))[None, :]
    if np.linalg.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


def random_ellipsoids(n: int, rng=None, radius: float = 1.0) -> EllipsoidPhantom:
    """``n`` random, arbitrarily rotated ellipsoids inside the ball of ``radius``.

    Semi-axes are uniform in ``[0.05, 0.45] radius``, orientations uniform,
    values uniform in ``[0.2, 1]``; each centre is uniform in the ball of
    ``radius - max(a, b, c)``, so every ellipsoid lies inside the ball of
    ``radius`` about the origin. Ellipsoids may overlap (values then add).

    Parameters
    ----------
    n : int
        Number of ellipsoids (>= 1).
    rng : numpy.random.Generator, int or None
        Random source or seed.
    radius : float
        Radius of the ball containing the phantom, length units.
    """
    n = v.positive_int("n", n)
    rng = common.as_rng(rng)
    radius = v.positive_float("radius", radius)
    ellipsoids = []
    for _ in range(n):
        semi = rng.uniform(0.05, 0.45, size=3) * radius
        direction = rng.standard_normal(3)
        direction /= np.linalg.norm(direction)
        r = (radius - semi.max()) * rng.uniform() ** (1.0 / 3.0)
        ellipsoids.append(Ellipsoid(rng.uniform(0.2, 1.0), tuple(semi), tuple(r * direction), _random_rotation(rng)))
    return EllipsoidPhantom(ellipsoids)


def shepp_logan(shape, modified: bool = True, supersampling: int = 1) -> np.ndarray:
    """The Shepp-Logan head as an image or volume, for quick looks.

    Parameters
    ----------
    shape : (ny, nx) or (nz, ny, nx)
        Grid size. The grid spans ``[-1, 1]`` along every axis: voxel size
        ``2 / n`` per axis, centred on the origin (so the head has unit
        ``radius``). 2D uses :func:`shepp_logan_ellipses`, 3D
        :func:`shepp_logan_3d`.
    modified : bool
        Toft's higher-contrast values (default; values in [0, 1]) or the
        original ones.
    supersampling : int
        Sub-points per pixel and axis, see ``rasterize``.

    Returns
    -------
    numpy.ndarray
        float64 of ``shape``; row ``j`` grows with y (show 2D images with
        ``imshow(..., origin="lower")``).
    """
    shape = v.shape_tuple("shape", shape, (2, 3))
    volume = VolumeGeometry(shape, voxel_size=tuple(2.0 / n for n in shape), center=0.0)
    if len(shape) == 2:
        return shepp_logan_ellipses(1.0, modified).rasterize(volume, supersampling)
    return shepp_logan_3d(1.0, modified).rasterize(volume, supersampling)
