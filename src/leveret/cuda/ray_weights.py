"""Launcher for ``ray_weights.cu``: the per-pixel ray-length weights of
``Projector(adjoint="unmatched")`` in one pass over the projections."""

from __future__ import annotations

import numpy as np

from ._module import load_module

BLOCK = 256
MAX_GRID_Y = 65535


def view_frames(minv: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The kernel's ten float64 numbers per view: M^-1 (n_views, 3, 3) row-major, then ``scale``."""
    minv = np.asarray(minv, np.float64).reshape(-1, 9)
    return np.ascontiguousarray(np.concatenate([minv, np.asarray(scale, np.float64).reshape(-1, 1)], axis=1))


def weight_by_ray_length(y, frames, out=None):
    """``y * scale |M^-1 (c, r, 1)|`` per pixel of ``y`` (n_views, n_rows, n_cols)
    float32 CuPy, C-contiguous; ``frames`` (n_views, 10) float64 from
    :func:`view_frames` (NumPy or CuPy). Returns ``out`` (new if None)."""
    n_views, n_rows, n_cols = y.shape
    if tuple(frames.shape) != (n_views, 10):
        raise ValueError(f"frames: expected ({n_views}, 10), got {tuple(frames.shape)}")
    import cupy

    if out is None:
        out = cupy.empty_like(y)
    frames = cupy.ascontiguousarray(cupy.asarray(frames, cupy.float64))
    total = n_views * n_rows
    grid = (-(-n_cols // BLOCK), min(total, MAX_GRID_Y))
    load_module("ray_weights").get_function("ray_length_weight")(
        grid, (BLOCK,), (y, out, frames, np.int32(n_rows), np.int32(n_cols), np.int64(total))
    )
    return out
