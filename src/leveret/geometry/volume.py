"""The reconstruction grid: ``VolumeGeometry``."""

from __future__ import annotations

import math

import numpy as np

from .. import _validate as v
from ._frozen import Frozen

_AXES = ("z", "y", "x")


class VolumeGeometry(Frozen):
    """A regular grid of voxels (3D) or pixels (2D).

    Parameters
    ----------
    shape : tuple of int
        ``(nz, ny, nx)`` for a volume, ``(ny, nx)`` for a 2D image. Arrays are
        C-ordered, x fastest.
    voxel_size : float or tuple of float
        Voxel edge length in the user's length unit (mm in the examples),
        one value or one per axis in the same order as ``shape``.
    center : float or tuple of float
        World position of the grid centre, one value or one per axis.

    Notes
    -----
    Voxel ``[k, j, i]`` has its centre at
    ``x = cx + (i - (nx-1)/2) dx``, ``y = cy + (j - (ny-1)/2) dy``,
    ``z = cz + (k - (nz-1)/2) dz``.
    """

    __slots__ = ("shape", "voxel_size", "center")
    _fields = ("shape", "voxel_size", "center")

    def __init__(self, shape, voxel_size=1.0, center=0.0):
        shape = v.shape_tuple("shape", shape, (2, 3))
        self._set("shape", shape)
        self._set("voxel_size", v.per_axis("voxel_size", voxel_size, len(shape), positive=True))
        self._set("center", v.per_axis("center", center, len(shape), positive=False))

    # -- sizes ---------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_2d(self) -> bool:
        return self.ndim == 2

    @property
    def nx(self) -> int:
        return self.shape[-1]

    @property
    def ny(self) -> int:
        return self.shape[-2]

    @property
    def nz(self) -> int:
        """Number of slices (1 for a 2D image)."""
        return self.shape[0] if self.ndim == 3 else 1

    @property
    def size(self) -> int:
        return math.prod(self.shape)  # Python ints: no overflow for huge shapes

    def _axis_index(self, axis: str) -> int:
        names = _AXES[-self.ndim :]
        if axis not in names:
            raise ValueError(f"axis: expected one of {names}, got {axis!r}")
        return names.index(axis)

    def spacing(self, axis: str) -> float:
        """Voxel size along ``axis`` ('x', 'y' or 'z'); 2D images have no 'z'."""
        return self.voxel_size[self._axis_index(axis)]

    def coordinates(self, axis: str) -> np.ndarray:
        """World coordinates of the voxel centres along ``axis``."""
        a = self._axis_index(axis)
        n = self.shape[a]
        return self.center[a] + (np.arange(n) - (n - 1) / 2) * self.voxel_size[a]

    def extent(self, axis: str) -> tuple[float, float]:
        """(low, high) world coordinate of the outer voxel faces along ``axis``."""
        a = self._axis_index(axis)
        half = self.shape[a] * self.voxel_size[a] / 2
        return (self.center[a] - half, self.center[a] + half)

    def slab(self, start: int, stop: int) -> "VolumeGeometry":
        """The sub-volume of slices ``start:stop`` (3D only), same voxels."""
        if self.ndim != 3:
            raise ValueError("slab: a 2D image has no slices")
        if not (0 <= start < stop <= self.nz):
            raise ValueError(f"slab: expected 0 <= start < stop <= {self.nz}, got {start}:{stop}")
        z = self.coordinates("z")
        cz = (z[start] + z[stop - 1]) / 2
        return VolumeGeometry((stop - start,) + self.shape[1:], self.voxel_size, (cz,) + self.center[1:])

    def __repr__(self) -> str:
        names = _AXES[-self.ndim :]
        fmt = lambda t: "(" + ", ".join(f"{x:g}" for x in t) + ")"
        ext = ", ".join(f"{n}: [{lo:g}, {hi:g}]" for n in names for lo, hi in [self.extent(n)])
        return (
            f"VolumeGeometry(shape={self.shape}, voxel_size={fmt(self.voxel_size)}, "
            f"center={fmt(self.center)})  # extent {ext}"
        )

    def plot(self, ax=None):
        """Draw the grid outline in the xy plane; returns the matplotlib Axes."""
        from .plotting import plot_volume

        return plot_volume(self, ax=ax)


def as_image_rows(array):
    """A slice or volume with its y axis reversed: leveret's row order to the image rows of
    scikit-image, ASTRA and tomopy, and back.

    leveret's row ``j`` of a slice ``(ny, nx)`` (or of each slice of a volume ``(nz, ny, nx)``)
    lies at ``y = cy + (j - (ny - 1)/2) dy``: y grows with the row, so ``imshow(slice)``, which
    puts row 0 at the top, shows y pointing down. Libraries that index images the way they are
    displayed (scikit-image's ``iradon``, ASTRA, tomopy) put the largest y in row 0: their slice
    of the same sinogram and angles is leveret's turned upside down. leveret's own pictures
    (``leveret preview``, ``leveret demo``) draw y upwards, so they look like those libraries'
    ``imshow`` of their arrays; this function gives the arrays that match too.

    Parameters
    ----------
    array : array, (..., ny, nx)
        A slice or volume in leveret's row order (or in image-row order: the function is its own
        inverse). NumPy, CuPy or any array that takes ``[..., ::-1, :]``.

    Returns
    -------
    array
        A view of ``array`` with the second-to-last axis reversed (no copy).

    Examples
    --------
    >>> import numpy as np
    >>> from leveret.geometry import as_image_rows
    >>> as_image_rows(np.arange(6).reshape(3, 2)).tolist()      # row 0 (smallest y) goes to the bottom
    [[4, 5], [2, 3], [0, 1]]
    """
    if not hasattr(array, "ndim"):
        raise TypeError(f"array: expected a slice (ny, nx) or a volume (nz, ny, nx), got {type(array).__name__}")
    if array.ndim < 2:
        raise ValueError(f"array: expected a slice (ny, nx) or a volume (nz, ny, nx), got shape {tuple(array.shape)}")
    return array[..., ::-1, :]


def volume_3d(volume) -> VolumeGeometry:
    """``volume`` if it is a 3D VolumeGeometry: TypeError naming ``volume`` if it
    is no VolumeGeometry, ValueError if it is a 2D one."""
    if not isinstance(volume, VolumeGeometry):
        raise TypeError(f"volume: expected a 3D VolumeGeometry, got {type(volume).__name__}")
    if volume.is_2d:
        raise ValueError(f"volume: expected a 3D VolumeGeometry, got {volume!r}")
    return volume
