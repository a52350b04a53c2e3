"""What the preprocessing modules share: argument checks, output arrays, the
array library's ndimage and FFT."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .._validate import array_module, positive_int


def check_real(name, arr):
    if arr.dtype.kind not in "buif":
        raise ValueError(f"{name}: expected real numbers, got dtype {arr.dtype}")


def average_fields(name, images, image_shape, xp):
    """One float32 image from one image or a stack (mean along axis 0)."""
    images = xp.asarray(images)
    check_real(name, images)
    if images.shape == image_shape:
        return images.astype(xp.float32)  # a copy: the caller modifies it
    if images.ndim == len(image_shape) + 1 and images.shape[1:] == image_shape and len(images):
        return _mean(images) if xp is np else images.mean(axis=0, dtype=xp.float32)
    raise ValueError(
        f"{name}: expected one image of shape {image_shape} or a non-empty stack "
        f"(k, {', '.join(map(str, image_shape))}) matching projections, got shape {images.shape}"
    )


#: Values of a stack each thread averages at least (a 2048^2 stack of ten: 10 threads).
MEAN_PER_THREAD = 1 << 22


def _mean(images: np.ndarray) -> np.ndarray:
    """``images.mean(axis=0, dtype=float32)`` in bands of rows on threads (NumPy's
    reductions let go of the GIL); each pixel's sum runs over the stack in the same
    order as in one call, so the result is the same."""
    rows = images.shape[1]
    threads = max(1, min(os.cpu_count() or 1, images.size // MEAN_PER_THREAD, rows))
    if threads == 1:
        return images.mean(axis=0, dtype=np.float32)
    out = np.empty(images.shape[1:], np.float32)
    bounds = np.linspace(0, rows, threads + 1).astype(int)

    def band(a, b):
        np.mean(images[:, a:b], axis=0, dtype=np.float32, out=out[a:b])

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(band, bounds[:-1], bounds[1:]))
    return out


def output_array(out, shape, dtype, xp):
    if out is None:
        return xp.empty(shape, dtype=dtype)
    if not hasattr(out, "dtype"):
        raise TypeError(f"out: expected a {xp.__name__} array like the input, got {type(out).__name__}")
    if array_module(out) is not xp:
        raise ValueError(f"out: expected a {xp.__name__} array like the input, got {type(out).__name__}")
    if out.shape != tuple(shape) or out.dtype != dtype:
        raise ValueError(
            f"out: expected shape {tuple(shape)} and dtype {np.dtype(dtype)}, "
            f"got shape {out.shape} and dtype {out.dtype}"
        )
    return out


def projection_like(name: str, arr):
    """(xp, array) for a sinogram (n_angles, n_cols) or a stack (n_angles, n_rows, n_cols)."""
    xp = array_module(arr)
    x = xp.asarray(arr)
    check_real(name, x)
    if x.ndim not in (2, 3):
        raise ValueError(
            f"{name}: expected shape (n_angles, n_cols) or (n_angles, n_rows, n_cols), got shape {x.shape}"
        )
    return xp, x


def odd_size(size) -> int:
    size = positive_int("size", size)
    if size < 3 or size % 2 == 0:
        raise ValueError(f"size: expected an odd integer >= 3, got {size}")
    return size


def ndimage_module(xp):
    if xp is np:
        import scipy.ndimage

        return scipy.ndimage
    import cupyx.scipy.ndimage

    return cupyx.scipy.ndimage


def to_numpy(arr):
    return arr.get() if hasattr(arr, "get") else np.asarray(arr)


def fft_module(xp):
    """scipy.fft for NumPy (float32 stays complex64, unlike numpy.fft), cupy.fft for CuPy."""
    if xp is np:
        import scipy.fft

        return scipy.fft
    import cupy.fft

    return cupy.fft


def next_fast_len(n: int) -> int:
    """The smallest length >= ``n`` whose only prime factors are 2, 3 and 5 (fast for FFTW-like and cuFFT)."""
    import scipy.fft

    return int(scipy.fft.next_fast_len(int(n), real=True))


def select_rows(data, row, xp):
    """``data`` (n_angles, n_rows, n_cols) restricted to the detector rows ``row`` (an int, a
    sequence of ints, or None for all), checked."""
    if row is None:
        return data
    n_rows = data.shape[1]
    rows = np.atleast_1d(np.asarray(row))
    if rows.dtype.kind not in "iu" or rows.ndim != 1 or rows.min() < 0 or rows.max() >= n_rows:
        raise ValueError(f"row: expected row indices in [0, {n_rows - 1}], got {row!r}")
    return data[:, xp.asarray(rows), :]
