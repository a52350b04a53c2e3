"""2D ellipse phantoms with exact (closed-form) line integrals.

Coordinates follow docs/conventions.md: world (x, y) in the user's length unit,
angles in radians, a line at angle t and offset s is
``{(x, y): x cos t + y sin t = s}``. Images are ``(ny, nx)`` arrays, x fastest,
and row ``j`` grows with y (show them with ``imshow(..., origin="lower")``).
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from .. import _validate as v
from ..geometry._frozen import Frozen
from ..geometry.parallel import ParallelGeometry
from ..geometry.volume import VolumeGeometry
from . import _common as common
from .tables import SHEPP_LOGAN_2D


class Ellipse(Frozen):
    """One filled ellipse of constant value.

    Parameters
    ----------
    value : float
        Value inside (attenuation per length unit); may be negative, values of
        overlapping ellipses add.
    semi_axes : float or (float, float)
        Semi-axes ``(a, b)`` along the ellipse's own x and y axes, in length
        units; a scalar gives a disk.
    center : (float, float)
        Centre ``(x, y)`` in world coordinates (x first, unlike array order).
    angle : float
        Rotation in radians, counter-clockwise from +x: the ellipse's own x
        axis points along ``(cos angle, sin angle)``.
    """

    __slots__ = ("value", "semi_axes", "center", "angle")
    _fields = __slots__

    def __init__(self, value: float, semi_axes, center=(0.0, 0.0), angle: float = 0.0):
        self._set("value", v.finite_float("value", value))
        self._set("semi_axes", common.lengths("semi_axes", semi_axes, 2))
        self._set("center", common.point("center", center, 2))
        self._set("angle", v.finite_float("angle", angle))

    @property
    def area(self) -> float:
        """``pi a b`` in squared length units."""
        a, b = self.semi_axes
        return math.pi * a * b

    @property
    def half_extent(self) -> tuple[float, float]:
        """Half width of the axis-aligned bounding box, ``(hx, hy)``."""
        a, b = self.semi_axes
        co, si = math.cos(self.angle), math.sin(self.angle)
        return (math.hypot(a * co, b * si), math.hypot(a * si, b * co))

    def contains(self, x, y) -> np.ndarray:
        """Boolean mask of the world points ``(x, y)`` (broadcast) inside or on the ellipse."""
        a, b = self.semi_axes
        co, si = math.cos(self.angle), math.sin(self.angle)
        dx = np.asarray(x, dtype=np.float64) - self.center[0]
        dy = np.asarray(y, dtype=np.float64) - self.center[1]
        # coordinates along the ellipse's own axes
        u = (dx * co + dy * si) / a
        w = (dy * co - dx * si) / b
        return u * u + w * w <= 1.0

    def _line_integrals(self, s, angles) -> np.ndarray:
        """Exact integral of this ellipse along the lines ``x cos t + y sin t = s``.

        Unchecked; :meth:`EllipsePhantom.line_integrals` is the public entry.
        """
        s, t = np.broadcast_arrays(np.asarray(s, dtype=np.float64), np.asarray(angles, dtype=np.float64))
        a, b = self.semi_axes
        # Move the ellipse to the origin (shifts s) and unrotate it (shifts t);
        # for the centred, axis-aligned ellipse the chord of the line at
        # normal angle t' and offset s' is 2ab sqrt(r^2 - s'^2) / r^2 with
        # r^2 = a^2 cos^2 t' + b^2 sin^2 t' (r is the support function).
        s_loc = s - (self.center[0] * np.cos(t) + self.center[1] * np.sin(t))
        t_loc = t - self.angle
        r2 = (a * np.cos(t_loc)) ** 2 + (b * np.sin(t_loc)) ** 2
        chord = (2.0 * a * b) * np.sqrt(np.maximum(r2 - s_loc * s_loc, 0.0)) / r2
        return self.value * chord

    def scaled(self, factor: float) -> "Ellipse":
        """The same ellipse with centre and semi-axes multiplied by ``factor``."""
        f = v.positive_float("factor", factor)
        return Ellipse(self.value, tuple(f * x for x in self.semi_axes), tuple(f * x for x in self.center), self.angle)

    def __repr__(self) -> str:
        return (
            f"Ellipse(value={self.value:g}, semi_axes=({self.semi_axes[0]:g}, "
            f"{self.semi_axes[1]:g}), center=({self.center[0]:g}, {self.center[1]:g}), "
            f"angle={self.angle:g})"
        )


class EllipsePhantom(Frozen):
    """A sum of constant-valued ellipses, with exact projections.

    Parameters
    ----------
    ellipses : iterable of Ellipse
        The ellipses; where they overlap their values add. May be empty (the
        zero image).

    Notes
    -----
    The phantom is immutable; :meth:`scaled` and ``replace(ellipses=...)``
    make new ones.
    """

    __slots__ = ("ellipses",)
    _fields = __slots__

    def __init__(self, ellipses: Iterable[Ellipse]):
        self._set("ellipses", common.shapes_tuple("ellipses", ellipses, Ellipse))

    def __len__(self) -> int:
        return len(self.ellipses)

    def __iter__(self):
        return iter(self.ellipses)

    @property
    def mass(self) -> float:
        """Integral of the phantom over the plane: sum of value * area."""
        return float(sum(e.value * e.area for e in self.ellipses))

    def evaluate(self, x, y) -> np.ndarray:
        """Phantom values at the world points ``(x, y)`` (broadcast), float64."""
        x, y = np.broadcast_arrays(common.finite_array("x", x), common.finite_array("y", y))
        out = np.zeros(x.shape)
        for e in self.ellipses:
            out += e.value * e.contains(x, y)
        return out

    def rasterize(self, volume: VolumeGeometry, supersampling: int = 1) -> np.ndarray:
        """Pixel values of the phantom on a 2D grid.

        Parameters
        ----------
        volume : VolumeGeometry
            A 2D grid, shape ``(ny, nx)``; pixel ``[j, i]`` is centred at
            ``x = cx + (i - (nx-1)/2) dx``, ``y = cy + (j - (ny-1)/2) dy``.
        supersampling : int
            Each pixel value is the mean of the phantom at
            ``supersampling**2`` points on a regular sub-grid of the pixel
            (the midpoint rule for the pixel average); 1 samples the centre.

        Returns
        -------
        numpy.ndarray
            ``(ny, nx)`` float64.
        """
        volume = common.check_volume(volume, 2)
        n_sub = v.positive_int("supersampling", supersampling)
        dy, dx = volume.voxel_size
        xs, ys = volume.coordinates("x"), volume.coordinates("y")
        offsets = common.sub_offsets(n_sub)
        out = np.zeros(volume.shape)
        for e in self.ellipses:
            # Only the pixels of the bounding box can be lit: work there.
            hx, hy = e.half_extent
            bx = common.box(xs, dx, e.center[0] - hx, e.center[0] + hx)
            by = common.box(ys, dy, e.center[1] - hy, e.center[1] + hy)
            if bx.start == bx.stop or by.start == by.stop:
                continue
            hits = np.zeros((by.stop - by.start, bx.stop - bx.start))
            for oy in offsets:
                y = (ys[by] + oy * dy)[:, None]
                for ox in offsets:
                    hits += e.contains((xs[bx] + ox * dx)[None, :], y)
            out[by, bx] += e.value * hits / n_sub**2
        return out

    def line_integrals(self, s, angles) -> np.ndarray:
        """Exact line integrals ``p(t, s)`` of the phantom.

        Parameters
        ----------
        s : array_like
            Signed distance of the line from the origin, in length units.
        angles : array_like
            Angle t of the line normal, radians; the line is
            ``{x cos t + y sin t = s}`` and runs along ``(-sin t, cos t)``.
            ``s`` and ``angles`` broadcast against each other.

        Returns
        -------
        numpy.ndarray
            float64, the broadcast shape; values times length units.
        """
        s = common.finite_array("s", s)
        t = common.finite_array("angles", angles)
        try:
            shape = np.broadcast_shapes(s.shape, t.shape)
        except ValueError:
            raise ValueError(f"s, angles: expected shapes that broadcast, got {s.shape} and {t.shape}") from None
        out = np.zeros(shape)
        for e in self.ellipses:
            out += e._line_integrals(s, t)
        return out

    def project(self, geometry: ParallelGeometry) -> np.ndarray:
        """Exact sinogram for a 2D parallel-beam geometry.

        Column ``c`` of projection ``n`` holds the line integral at
        ``s = (c - center - axis_shift[n]) * det_spacing``, angle
        ``geometry.angles[n]``: the value at the column centre, not a
        detector-pixel average.

        Returns
        -------
        numpy.ndarray
            ``(n_angles, n_cols)`` float64.
        """
        geometry = common.check_parallel(geometry, want_2d=True)
        common.check_projection_memory(geometry, copies=4)  # the positions, angles and temporaries beside it
        return self.line_integrals(common.column_positions(geometry), geometry.angles[:, None])

    def scaled(self, factor: float) -> "EllipsePhantom":
        """All lengths (centres, semi-axes) multiplied by ``factor`` > 0.

        Values stay: they are per length unit, so line integrals scale by
        ``factor`` and the mass by ``factor**2``.
        """
        v.positive_float("factor", factor)
        return EllipsePhantom(e.scaled(factor) for e in self.ellipses)

    def __repr__(self) -> str:
        inner = ",\n    ".join(map(repr, self.ellipses))
        return f"EllipsePhantom([\n    {inner}])" if inner else "EllipsePhantom([])"


# -- ready-made phantoms -------------------------------------------------------
def shepp_logan_ellipses(radius: float = 1.0, modified: bool = True) -> EllipsePhantom:
    """The 10-ellipse Shepp-Logan head phantom (Kak & Slaney, Table 3.1).

    Parameters
    ----------
    radius : float
        Length scale: the outer (skull) ellipse has semi-axes
        ``0.69 radius`` along x by ``0.92 radius`` along y, so the head fits
        in the square ``[-radius, radius]^2``.
    modified : bool
        True: Toft's higher-contrast values (skull 1, brain 0.2, the two large
        dark ellipses 0, the small features 0.1 to 0.4; all values in
        [0, 1]), as Matlab's
        ``phantom('Modified Shepp-Logan')``. False: the original values
        (skull 2, brain 1.02, features differing by 0.01 to 0.03).

    Notes
    -----
    y points to the top of the head: the three small ellipses of the
    "mouth" are at y = -0.605 radius.
    """
    radius = v.positive_float("radius", radius)
    col = 1 if modified else 0
    return EllipsePhantom(
        Ellipse(row[col], (row[2] * radius, row[3] * radius), (row[4] * radius, row[5] * radius), math.radians(row[6]))
        for row in SHEPP_LOGAN_2D
    )


def disk(radius: float, value: float = 1.0, center=(0.0, 0.0)) -> EllipsePhantom:
    """A disk of ``radius`` (length units) and ``value`` centred at ``center = (x, y)``."""
    radius = v.positive_float("radius", radius)
    return EllipsePhantom([Ellipse(value, (radius, radius), center)])


def random_ellipses(n: int, rng=None, radius: float = 1.0) -> EllipsePhantom:
    """``n`` random ellipses inside the disk of ``radius`` about the origin.

    Semi-axes are uniform in ``[0.05, 0.45] radius``, angles uniform in
    ``[0, pi)``, values uniform in ``[0.2, 1]``; each centre is uniform in the
    disk of ``radius - max(a, b)``, so every ellipse lies inside the disk of
    ``radius``. Ellipses may overlap (values then add).

    Parameters
    ----------
    n : int
        Number of ellipses (>= 1).
    rng : numpy.random.Generator, int or None
        Random source or seed.
    radius : float
        Radius of the disk containing the phantom, length units.
    """
    n = v.positive_int("n", n)
    rng = common.as_rng(rng)
    radius = v.positive_float("radius", radius)
    ellipses = []
    for _ in range(n):
        a, b = rng.uniform(0.05, 0.45, size=2) * radius
        r = (radius - max(a, b)) * math.sqrt(rng.uniform())
        phi = rng.uniform(0.0, 2.0 * math.pi)
        ellipses.append(
            Ellipse(rng.uniform(0.2, 1.0), (a, b), (r * math.cos(phi), r * math.sin(phi)), rng.uniform(0.0, math.pi))
        )
    return EllipsePhantom(ellipses)
