"""Launcher for ``tv.cu``: total variation's fused primal and dual steps and
the sum of the gradient's norms, on CuPy arrays (float32 or float64).

The arguments and their meaning are those of :mod:`leveret.cpu.tv`, the
Numba mirror; :mod:`leveret.operators.tv` chooses between the two by the
arrays' kind. Arrays must be C-contiguous, of one dtype, on the current
device: the volume-sized ones of ``shape`` (nz, ny, nx) (2D: nz = 1 with
``ndim`` = 2) and the dual fields of ``(ndim,) + shape``.
"""

from __future__ import annotations

import numpy as np

from ._module import load_module

BLOCK = 256
DEFINES = (f"TV_BLOCK={BLOCK}",)
#: Blocks per SM of the elementwise steps' grid-stride loops, and of the
#: reduction (whose partial sums, one per thread, the caller adds).
BLOCKS_PER_SM = 8
_SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}


def _kernel(name: str, dtype):
    suffix = _SUFFIX.get(np.dtype(dtype))
    if suffix is None:
        raise TypeError(f"dtype: expected float32 or float64, got {np.dtype(dtype)}")
    return load_module("tv").get_function(f"{name}_{suffix}")


def _grid(n: int) -> tuple[int]:
    import cupy

    n_sm = cupy.cuda.Device().attributes["MultiProcessorCount"]
    return (int(max(1, min(-(-n // BLOCK), BLOCKS_PER_SM * n_sm))),)


def _dims(shape3, ndim):
    nz, ny, nx = shape3
    return np.int32(nz), np.int32(ny), np.int32(nx), np.int32(ndim)


def primal(a, b, c, s, q, out, lo, hi, shape3, ndim):
    """``out = clip(a + s (c b - D^T q), lo, hi)`` (``b`` None: no term;
    ``s`` a float or a volume). ``out`` may be ``a`` or ``b``."""
    t = np.dtype(a.dtype).type
    s_arr = s if getattr(s, "ndim", 0) > 0 else None
    _kernel("tv_primal", a.dtype)(
        _grid(a.size),
        (BLOCK,),
        (
            a,
            a if b is None else b,
            np.int32(b is not None),
            t(c),
            t(0 if s_arr is not None else s),
            a if s_arr is None else s_arr,
            np.int32(s_arr is not None),
            q,
            out,
            t(lo),
            t(hi),
            *_dims(shape3, ndim),
        ),
    )
    return out


def dual(z0, z1, c0, c1, r, q, r_out, sigma, beta, bound, shape3, ndim):
    """``q = project(r + sigma D (c0 z0 + c1 z1), bound)`` per voxel (``z1``
    None: no term); with ``r_out`` also ``r_out = q + beta (q - q_old)``.
    ``r``, ``q`` and ``r_out`` may be one array."""
    t = np.dtype(z0.dtype).type
    _kernel("tv_dual", z0.dtype)(
        _grid(z0.size),
        (BLOCK,),
        (
            z0,
            z0 if z1 is None else z1,
            np.int32(z1 is not None),
            t(c0),
            t(c1),
            r,
            q,
            q if r_out is None else r_out,
            np.int32(r_out is not None),
            t(sigma),
            t(beta),
            t(bound),
            *_dims(shape3, ndim),
        ),
    )
    return q


def norm_sum(x, shape3, ndim) -> float:
    """Sum over voxels of the gradient's norm, accumulated in float64 per
    thread and summed over the fixed grid (the same order each run). Waits
    for the result."""
    import cupy

    grid = _grid(x.size)
    partials = cupy.empty(grid[0] * BLOCK, cupy.float64)
    _kernel("tv_norm_sum", x.dtype)(grid, (BLOCK,), (x, partials, *_dims(shape3, ndim)))
    return float(partials.sum())
