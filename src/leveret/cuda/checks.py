"""Launcher for ``checks.cu``: how many values of a device array are NaN, Inf
or beyond a magnitude limit, in one pass without a temporary array."""
from __future__ import annotations

import numpy as np

from ._module import load_module

BLOCK = 256
DEFINES = (f"LEVERET_CHECKS_BLOCK={BLOCK}",)
BLOCKS_PER_SM = 8      # a grid-stride loop: enough blocks to fill the GPU, no more
_SUFFIX = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}


def count_outside(arr, limit: float) -> int:
    """The number of values of ``arr`` (a CuPy array of float16, float32 or
    float64; any layout) that are NaN, Inf or larger than ``limit`` in
    magnitude. Waits for the result (one 8-byte read)."""
    import cupy

    if arr.size == 0:
        return 0
    suffix = _SUFFIX.get(np.dtype(arr.dtype))
    if suffix is None:
        raise TypeError(f"arr: expected float16, float32 or float64, got {arr.dtype}")
    # a strided view costs one contiguous copy; the operators' arrays are contiguous already
    arr = cupy.ascontiguousarray(arr)
    if suffix == "f16":
        arr = arr.view(cupy.uint16)
    count = cupy.zeros(1, cupy.uint64)
    n_sm = cupy.cuda.Device().attributes["MultiProcessorCount"]
    grid = int(min(-(-arr.size // BLOCK), BLOCKS_PER_SM * n_sm))
    load_module("checks").get_function(f"count_outside_{suffix}")(
        (grid,), (BLOCK,), (arr, np.int64(arr.size), np.float64(limit), count))
    return int(count.get()[0])
