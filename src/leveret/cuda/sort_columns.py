"""Launcher for ``sort_columns.cu``: every column of a stack of sinograms sorted
along the angle axis on the GPU (a stable sort), and the inverse scatter."""

from __future__ import annotations

import numpy as np

from ._module import load_module

BLOCK = 256
DEFINES = (f"LEVERET_SORT_BLOCK={BLOCK}",)
#: Most angles one block sorts in shared memory (8-byte keys: 32 KiB, under the
#: 48 KiB a block gets without opting in); longer columns use CuPy's argsort.
MAX_ANGLES = 4096
BLOCKS_PER_SM = 8  # the scatter's grid-stride loop: enough blocks to fill the GPU


def sort_columns(x):
    """``(sorted, order)`` for a C-contiguous float32 CuPy array ``x`` of shape
    ``(n_angles, ...)``: ``sorted[i, j] = x[order[i, j], j]`` ascending along
    axis 0 for every column ``j``, equal values in angle order (NaN last);
    ``order`` is int32."""
    import cupy

    n_angles = x.shape[0]
    n_columns = x.size // n_angles if n_angles else 0
    sorted_ = cupy.empty_like(x)
    order = cupy.empty(x.shape, cupy.int32)
    if x.size == 0:
        return sorted_, order
    if n_angles > MAX_ANGLES:
        order[...] = cupy.argsort(x, axis=0, kind="stable")
        sorted_[...] = cupy.take_along_axis(x, order, axis=0)
        return sorted_, order
    n_pow2 = 1 << (n_angles - 1).bit_length()
    load_module("sort_columns").get_function("sort_columns")(
        (n_columns,),
        (BLOCK,),
        (x, sorted_, order, np.int32(n_angles), np.int64(n_columns), np.int32(n_pow2)),
        shared_mem=8 * n_pow2,
    )
    return sorted_, order


def unsort_columns(values, order, out):
    """``out[order[i, j], j] = values[i, j]`` (CuPy arrays of one shape, C-contiguous;
    ``values`` and ``out`` float32, ``order`` int32 from :func:`sort_columns`)."""
    import cupy

    if values.size == 0:
        return out
    n_columns = values.size // values.shape[0]
    n_sm = cupy.cuda.Device().attributes["MultiProcessorCount"]
    grid = int(min(-(-values.size // BLOCK), BLOCKS_PER_SM * n_sm))
    load_module("sort_columns").get_function("unsort_columns")(
        (grid,), (BLOCK,), (values, order, out, np.int64(n_columns), np.int64(values.size))
    )
    return out
