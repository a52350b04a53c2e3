"""Launcher for ``running_median.cu``: medians of odd windows along the last
axis of float32 CuPy arrays, ends reflected (scipy.ndimage's "reflect"), over
every value or at listed positions. One build per window size."""

from __future__ import annotations

import numpy as np

from ._module import load_module

TILE = 128
#: Widest window the kernels take (its padded copy lives in registers:
#: 128 of them); wider ones are the caller's to take elsewhere.
MAX_SIZE = 127
#: Most blocks along the grid's y axis (CUDA's limit); the kernels loop beyond it.
MAX_GRID_Y = 65535


def window_defines(size: int) -> tuple[str, ...]:
    """The constants of the build for windows of ``size`` (odd, at most ``MAX_SIZE``)."""
    if size % 2 == 0 or not 1 <= size <= MAX_SIZE:
        raise ValueError(f"size: expected an odd window of 1 to {MAX_SIZE}, got {size}")
    return (f"LEVERET_MEDIAN_TILE={TILE}", f"LEVERET_MEDIAN_SIZE={size}", f"LEVERET_MEDIAN_POW2={_pow2(size)}")


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


DEFINES = window_defines(21)  # the small-stripe step's default; the CI compiles these
EXTRA_BUILDS = {"running_median": (window_defines(5), window_defines(51))}


def running_median(x, size: int, out=None):
    """The ``size``-wide running median along the last axis of the
    C-contiguous float32 CuPy array ``x``, ends reflected; into ``out`` (a
    new array by default, not ``x``)."""
    import cupy

    module = load_module("running_median", window_defines(size))
    out = cupy.empty_like(x) if out is None else out
    if x.size == 0:
        return out
    n = x.shape[-1] if x.ndim else 1
    n_lines = x.size // n
    grid = (-(-n // TILE), min(n_lines, MAX_GRID_Y))
    module.get_function("running_median")(grid, (TILE,), (x, out, np.int64(n_lines), np.int32(n)))
    return out


def medians_at(x, rows, cols, size: int):
    """``out[a, k]``: the ``size``-wide median across columns of the
    C-contiguous float32 CuPy stack ``x`` (n_angles, n_rows, n_cols) at row
    ``rows[k]``, column ``cols[k]`` of every angle ``a``, ends reflected:
    ``(n_angles, len(rows))`` float32."""
    import cupy

    module = load_module("running_median", window_defines(size))
    n_angles, n_rows, n_cols = x.shape
    n_points = int(rows.size)
    out = cupy.empty((n_angles, n_points), cupy.float32)
    if n_points == 0 or n_angles == 0:
        return out
    rows = cupy.ascontiguousarray(rows, dtype=cupy.int32)
    cols = cupy.ascontiguousarray(cols, dtype=cupy.int32)
    grid = (-(-n_points // TILE), min(n_angles, MAX_GRID_Y))
    module.get_function("medians_at")(
        grid, (TILE,), (x, out, np.int32(n_angles), np.int32(n_rows), np.int32(n_cols), rows, cols, np.int32(n_points))
    )
    return out
