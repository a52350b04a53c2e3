"""Watched slices: planes through the volume at any position and orientation."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..geometry import VolumeGeometry
from ..geometry.volume import volume_3d


@dataclass(frozen=True)
class Slice:
    """A plane of ``shape = (height, width)`` pixels in world coordinates.

    Pixel ``[j, i]`` lies at ``origin + (i - (width-1)/2) spacing[1] u +
    (j - (height-1)/2) spacing[0] v``: ``origin`` is the plane's centre, ``u``
    the direction of its columns (left to right), ``v`` of its rows.
    """

    name: str
    origin: tuple[float, float, float]
    u: tuple[float, float, float]
    v: tuple[float, float, float]
    shape: tuple[int, int]
    spacing: tuple[float, float]

    def __post_init__(self):
        for name in ("origin", "u", "v"):
            value = np.asarray(getattr(self, name), np.float64)
            if value.shape != (3,) or not np.all(np.isfinite(value)):
                raise ValueError(f"{name}: expected three finite numbers (x, y, z), got {getattr(self, name)!r}")
            object.__setattr__(self, name, tuple(float(c) for c in value))
        for name in ("u", "v"):
            if abs(np.linalg.norm(getattr(self, name)) - 1) > 1e-6:
                raise ValueError(f"{name}: expected a unit vector, got {getattr(self, name)!r}")
        if abs(np.dot(self.u, self.v)) > 1e-6:
            raise ValueError("v: expected a direction at right angles to u")
        shape = tuple(int(s) for s in self.shape)
        if len(shape) != 2 or min(shape) < 1:
            raise ValueError(f"shape: expected (height, width) of positive integers, got {self.shape!r}")
        spacing = tuple(float(s) for s in self.spacing)
        if len(spacing) != 2 or min(spacing) <= 0:
            raise ValueError(f"spacing: expected two positive pixel sizes, got {self.spacing!r}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "spacing", spacing)

    @property
    def is_axial(self) -> bool:
        """Columns along +x and rows along +y: a slice the volume operators compute."""
        return self.u == (1.0, 0.0, 0.0) and self.v == (0.0, 1.0, 0.0)

    def points(self) -> np.ndarray:
        """World (x, y, z) of every pixel, (height * width, 3) float64, row by row."""
        h, w = self.shape
        a = (np.arange(w) - (w - 1) / 2) * self.spacing[1]
        b = (np.arange(h) - (h - 1) / 2) * self.spacing[0]
        p = (
            np.asarray(self.origin)[None, None, :]
            + a[None, :, None] * np.asarray(self.u)
            + b[:, None, None] * np.asarray(self.v)
        )
        return p.reshape(-1, 3)

    def frame(self) -> np.ndarray:
        """(3, 3) float64: world (x, y, z) of pixel (0, 0), and the steps of one
        pixel along a row (``u``) and along a column (``v``)."""
        h, w = self.shape
        dv, du = self.spacing
        u, v = np.asarray(self.u), np.asarray(self.v)
        corner = np.asarray(self.origin) - (w - 1) / 2 * du * u - (h - 1) / 2 * dv * v
        return np.stack([corner, du * u, dv * v])

    def image_volume(self) -> VolumeGeometry:
        """The 2D grid of an axial slice (its xy pixels)."""
        return VolumeGeometry(self.shape, self.spacing, center=(self.origin[1], self.origin[0]))

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "origin": list(self.origin),
            "u": list(self.u),
            "v": list(self.v),
            "shape": list(self.shape),
            "spacing": list(self.spacing),
        }


def rotation(angles) -> np.ndarray:
    """Rotation matrix ``Rz(a) Ry(b) Rx(c)`` for ``angles = (a, b, c)`` in degrees."""
    a, b, c = np.radians(np.asarray(angles, np.float64).reshape(3))
    rz = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
    ry = np.array([[np.cos(b), 0, np.sin(b)], [0, 1, 0], [-np.sin(b), 0, np.cos(b)]])
    rx = np.array([[1, 0, 0], [0, np.cos(c), -np.sin(c)], [0, np.sin(c), np.cos(c)]])
    return rz @ ry @ rx


def _unit(vec) -> tuple:
    """Exact axis vectors stay exact (so an unrotated slice is recognised as axial)."""
    vec = np.asarray(vec, np.float64)
    vec[np.abs(vec) < 1e-12] = 0.0
    return tuple(vec / np.linalg.norm(vec))


def orthogonal_slices(volume: VolumeGeometry, point=None, angles=(0.0, 0.0, 0.0)) -> list[Slice]:
    """Three orthogonal slices through ``point`` (default: the volume's centre),
    rotated by ``angles`` (degrees about z, y, x: :func:`rotation`), as in RECAST3D.

    "xy" has the volume's x by y grid, "xz" its x by z grid and "yz" its y by z
    grid (rows along z, upwards); unrotated and through voxel centres they are
    the volume's own slices.
    """
    volume_3d(volume)
    point = tuple(volume.center[::-1]) if point is None else point
    point = np.asarray(point, np.float64).reshape(-1)
    if point.shape != (3,) or not np.all(np.isfinite(point)):
        raise ValueError(f"point: expected three finite numbers (x, y, z), got {point!r}")
    r = rotation(angles)
    ex, ey, ez = (_unit(r[:, k]) for k in range(3))
    dz, dy, dx = volume.voxel_size
    nz, ny, nx = volume.shape
    centre = np.asarray(volume.center[::-1], np.float64)  # (x, y, z)

    def through_point(u, v):
        # the plane through the point, centred where the volume's centre projects onto it
        normal = np.cross(u, v)
        return tuple(centre + np.dot(point - centre, normal) * normal)

    return [
        Slice("xy", through_point(ex, ey), ex, ey, (ny, nx), (dy, dx)),
        Slice("xz", through_point(ex, ez), ex, ez, (nz, nx), (dz, dx)),
        Slice("yz", through_point(ey, ez), ey, ez, (nz, ny), (dz, dy)),
    ]


def axial_slices(volume: VolumeGeometry, z) -> list[Slice]:
    """Axial slices of the volume's xy grid at the heights ``z`` (world units),
    named "z0", "z1", ..."""
    volume_3d(volume)
    z = np.atleast_1d(np.asarray(z, np.float64))
    if z.ndim != 1 or not np.all(np.isfinite(z)):
        raise ValueError(f"z: expected finite heights, got {z!r}")
    cz, cy, cx = volume.center
    return [
        Slice(
            f"z{k}",
            (cx, cy, float(h)),
            (1.0, 0.0, 0.0),
            (0.0, 1.0, 0.0),
            (volume.ny, volume.nx),
            (volume.spacing("y"), volume.spacing("x")),
        )
        for k, h in enumerate(z)
    ]
