"""Launcher for ``fdk_weighting.cu``: FDK's cosine and column weights fused
with the FFT's zero padding, then the ramp filter through cuFFT."""

from __future__ import annotations

import numpy as np

from ._module import load_module

BLOCK = 256
MAX_GRID_Y = 65535


def weight_and_filter(raw, frames: np.ndarray, per_column: np.ndarray, response: np.ndarray, row0: int = 0):
    """Weighted, zero-padded, ramp-filtered views.

    Parameters
    ----------
    raw : cupy.ndarray (n_views, n_rows, n_cols) float32, C-contiguous
        Line integrals.
    frames : ndarray (n_views, 4), NumPy or CuPy
        Per view: principal point u0, v0 and reciprocal focal lengths
        1 / focal_u, 1 / focal_v (pixels).
    per_column : ndarray (n_views, n_cols), NumPy or CuPy
        Angular quadrature x Parker weight / isocentre pitch.
    response : ndarray (n_pad // 2 + 1,), NumPy or CuPy
        The filter's frequency response (``leveret.filters.filter_response``).
    row0 : int
        The detector row of ``raw``'s first row (``frames`` are the whole
        detector's): rows are weighted as in a call with every row.

    Returns
    -------
    cupy.ndarray (n_views, n_rows, n_cols) float32
    """
    import cupy

    n_views, n_rows, n_cols = raw.shape
    n_pad = 2 * (response.size - 1)
    total = n_views * n_rows
    padded = cupy.empty((total, n_pad), cupy.float32)
    kernel = load_module("fdk_weighting").get_function("fdk_weight_pad")
    grid = (-(-n_pad // BLOCK), min(total, MAX_GRID_Y))
    # Tables may come as device arrays: a pageable upload would wait for the stream's earlier work.
    kernel(
        grid,
        (BLOCK,),
        (
            cupy.ascontiguousarray(raw, cupy.float32),
            padded,
            cupy.ascontiguousarray(cupy.asarray(per_column, cupy.float32)),
            cupy.ascontiguousarray(cupy.asarray(frames, cupy.float32)),
            np.int32(n_rows),
            np.int32(n_cols),
            np.int32(n_pad),
            np.int32(total),
            np.int32(row0),
        ),
    )
    spectrum = cupy.fft.rfft(padded, axis=-1)
    del padded
    spectrum *= cupy.asarray(response, cupy.float32)
    filtered = cupy.fft.irfft(spectrum, n=n_pad, axis=-1)
    del spectrum
    return cupy.ascontiguousarray(filtered[:, :n_cols]).reshape(n_views, n_rows, n_cols)
