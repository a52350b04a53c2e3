"""Helpers shared by the 2D and 3D phantoms (argument checks, grids)."""

from __future__ import annotations

import math

import numpy as np

from .. import _validate as v
from ..geometry.parallel import ParallelGeometry
from ..geometry.volume import VolumeGeometry


def lengths(name: str, value, n: int) -> tuple[float, ...]:
    """``n`` positive finite lengths; a scalar means the same length ``n`` times."""
    if np.ndim(value) == 0:
        return (v.positive_float(name, value),) * n
    arr = v.finite_vector(name, value)  # also rejects NaN / Inf with the index
    if arr.size != n:
        raise ValueError(f"{name}: expected a scalar or {n} lengths, got {arr.size} values")
    return tuple(v.positive_float(f"{name}[{i}]", x) for i, x in enumerate(arr))


def point(name: str, value, n: int) -> tuple[float, ...]:
    """A point of ``n`` finite world coordinates, in (x, y[, z]) order."""
    return tuple(float(x) for x in v.finite_vector(name, value, length=n))


def finite_array(name: str, value) -> np.ndarray:
    """``value`` as a float64 array of finite numbers (any shape)."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected an array of numbers, got {type(value).__name__}") from None
    v.check_finite_array(name, arr)
    return arr


def check_volume(volume, ndim: int) -> VolumeGeometry:
    if not isinstance(volume, VolumeGeometry):
        raise TypeError(f"volume: expected a VolumeGeometry, got {type(volume).__name__}")
    if volume.ndim != ndim:
        want = "(ny, nx)" if ndim == 2 else "(nz, ny, nx)"
        raise ValueError(
            f"volume: expected a {ndim}D VolumeGeometry of shape {want}, "
            f"got a {volume.ndim}D one of shape {volume.shape}"
        )
    return volume


def check_parallel(geometry, want_2d: bool) -> ParallelGeometry:
    if not isinstance(geometry, ParallelGeometry):
        raise TypeError(f"geometry: expected a ParallelGeometry, got {type(geometry).__name__}")
    if want_2d and not geometry.is_2d:
        raise ValueError(
            f"geometry: expected a 2D ParallelGeometry (n_rows=None) for a 2D "
            f"phantom, got a 3D one with n_rows={geometry.n_rows}"
        )
    if not want_2d and geometry.is_2d:
        raise ValueError(
            "geometry: expected a 3D ParallelGeometry (n_rows set) for a 3D phantom, got a 2D one (n_rows=None)"
        )
    return geometry


def column_positions(geometry: ParallelGeometry) -> np.ndarray:
    """Detector coordinate s of every column centre, ``(n_angles, n_cols)``.

    Same as ``geometry.column_positions(n)`` for every n, without the loop.
    """
    cols = np.arange(geometry.n_cols, dtype=np.float64)
    return (cols[None, :] - geometry.centers()[:, None]) * geometry.det_spacing


def sub_offsets(supersampling: int) -> np.ndarray:
    """Sub-point offsets inside a pixel, in units of the pixel size.

    ``S`` points per axis at the centres of ``S`` equal sub-intervals, so the
    mean over them is the midpoint rule for the pixel average; ``S = 1`` gives
    the pixel centre alone.
    """
    return (np.arange(supersampling) + 0.5) / supersampling - 0.5


def box(coords: np.ndarray, spacing: float, lo: float, hi: float) -> slice:
    """Indices of the pixels along one axis whose cell can meet [lo, hi].

    ``coords`` are the (increasing, evenly spaced) pixel centres. The slice
    errs on the generous side; the inside test decides what is lit.
    """
    n = coords.size
    first = (lo - coords[0]) / spacing - 0.5
    last = (hi - coords[0]) / spacing + 0.5
    start = max(0, math.floor(first))
    stop = min(n, math.floor(last) + 1)
    return slice(start, max(start, stop))


def as_rng(rng) -> np.random.Generator:
    """A NumPy Generator from a Generator, a seed, or None."""
    if isinstance(rng, np.random.Generator):
        return rng
    try:
        return np.random.default_rng(rng)
    except (TypeError, ValueError):
        raise ValueError(f"rng: expected a numpy.random.Generator or an integer seed, got {rng!r}") from None


def shapes_tuple(name: str, shapes, kind: type) -> tuple:
    """``shapes`` (one ``kind`` or an iterable of them) as a tuple, each checked."""
    if isinstance(shapes, kind):
        shapes = (shapes,)
    try:
        items = tuple(shapes)
    except TypeError:
        raise TypeError(f"{name}: expected an iterable of {kind.__name__}, got {type(shapes).__name__}") from None
    for i, item in enumerate(items):
        if not isinstance(item, kind):
            raise TypeError(f"{name}[{i}]: expected an {kind.__name__}, got {type(item).__name__}")
    return items


def check_projection_memory(geometry, copies: int = 1) -> None:
    """Raise naming ``geometry`` before exact projections (float64, ``copies``
    arrays of the projections' size at once) are computed that the memory
    this process may use cannot hold."""
    v.check_allocation("geometry", copies * 8 * math.prod(geometry.projection_shape), "the exact projections")
