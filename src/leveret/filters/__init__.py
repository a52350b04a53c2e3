"""FBP filters: the band-limited ramp and its apodisation windows.

The ramp is built from its band-limited spatial kernel (Kak & Slaney, eq. 61),
sampled on a zero-padded grid and Fourier transformed, so its response has no
DC error, unlike a ramp ``|f|`` sampled directly in frequency.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import scipy.fft

from .. import _validate as v

FILTERS = ("ram-lak", "shepp-logan", "cosine", "hamming", "hann")
PADDINGS = ("zero", "edge")


def padded_length(n_cols: int, min_factor: float = 2.0) -> int:
    """FFT length used for a detector of ``n_cols``: at least ``min_factor``
    times the width, rounded up to an even length both FFT libraries do fast."""
    n = scipy.fft.next_fast_len(int(np.ceil(min_factor * n_cols)), real=True)
    while n % 2:  # even, so the response's length gives the FFT length back
        n = scipy.fft.next_fast_len(n + 1, real=True)
    return n


def ramp_kernel(n_pad: int, spacing: float = 1.0) -> np.ndarray:
    """The band-limited ramp's spatial kernel on a circular grid of ``n_pad``.

    h[0] = 1 / (4 tau^2), h[n] = -1 / (pi n tau)^2 for odd n, 0 for even n,
    with tau the detector spacing; index n and n_pad - n hold offset +-n.
    """
    n = np.arange(n_pad)
    offset = np.minimum(n, n_pad - n)
    h = np.zeros(n_pad)
    h[0] = 1.0 / (4.0 * spacing**2)
    odd = offset % 2 == 1
    h[odd] = -1.0 / (np.pi * offset[odd] * spacing) ** 2
    return h


def window(name: str, n_freq: int, cutoff: float = 1.0) -> np.ndarray:
    """Apodisation window on the ``n_freq`` non-negative frequencies of an rfft.

    ``cutoff`` is the fraction of the Nyquist frequency above which the
    response is zero; windows are stretched to end at the cutoff.
    """
    name = v.choice("filter", name, FILTERS)
    if not (0 < cutoff <= 1):
        raise ValueError(f"cutoff: expected a fraction of Nyquist in (0, 1], got {cutoff!r}")
    f = np.linspace(0.0, 1.0, n_freq) / cutoff  # 1 = the cutoff frequency
    if name == "ram-lak":
        w = np.ones_like(f)
    elif name == "shepp-logan":
        w = np.sinc(f / 2)  # sin(pi f/2) / (pi f/2)
    elif name == "cosine":
        w = np.cos(np.pi * f / 2)
    elif name == "hamming":
        w = 0.54 + 0.46 * np.cos(np.pi * f)
    else:  # hann
        w = 0.5 * (1 + np.cos(np.pi * f))
    w[f > 1] = 0.0
    return w


@lru_cache(maxsize=32)
def _response(n_cols: int, name: str, cutoff: float, spacing: float, pad_factor: float) -> np.ndarray:
    n_pad = padded_length(n_cols, pad_factor)
    # The convolution q = tau * (p * h) turns into a product with tau * FFT(h).
    h = spacing * np.real(scipy.fft.rfft(ramp_kernel(n_pad, spacing)))
    out = h * window(name, h.size, cutoff)
    out.setflags(write=False)
    return out


def filter_response(
    n_cols: int, filter: str = "ram-lak", *, cutoff: float = 1.0, det_spacing: float = 1.0, pad_factor: float = 2.0
) -> np.ndarray:
    """Real frequency response (length ``n_pad // 2 + 1``) applied by :func:`apply_filter`.

    Multiplying a detector row's rfft (zero-padded to ``padded_length(n_cols)``)
    by this response and transforming back gives the filtered row in the units
    FBP needs: line integrals (value x length) in, value / length out.
    """
    v.positive_int("n_cols", n_cols)
    name = v.choice("filter", filter, FILTERS)
    return _response(n_cols, name, float(cutoff), v.positive_float("det_spacing", det_spacing), float(pad_factor))


def apply_filter(rows, response, *, weights=None, padding: str = "zero", workers: int = -1):
    """Filter along the last axis and return a new C-contiguous array.

    Parameters
    ----------
    rows : ndarray (..., n_cols), NumPy or CuPy, any strides
        Detector rows; e.g. a sinogram stack ``(n_slices, n_angles, n_cols)``.
    response : ndarray
        From :func:`filter_response`; its length fixes the padding.
    weights : ndarray (n_angles,) or None
        Per-projection factors (angular quadrature) broadcast against axis -2.
    padding : {"zero", "edge"}
        What lies beyond the detector: zeros, or the edge values repeated
        (less cupping when the object is wider than the detector).
    workers : int
        scipy.fft threads on the CPU (-1: all cores). Ignored for CuPy, whose
        cuFFT plans are cached by CuPy's plan cache.
    """
    xp = v.array_module(rows)
    padding = v.choice("padding", padding, PADDINGS)
    n_cols = rows.shape[-1]
    n_pad = 2 * (response.size - 1)
    dtype = np.float64 if rows.dtype == np.float64 else np.float32
    resp = xp.asarray(response, dtype=dtype)
    if padding == "edge":
        extra = n_pad - n_cols
        left = extra // 2
        rows = xp.pad(rows.astype(dtype, copy=False), [(0, 0)] * (rows.ndim - 1) + [(left, extra - left)], mode="edge")
        # Move the left pad to the end so the detector keeps index 0.
        rows = xp.roll(rows, -left, axis=-1)
    if xp is np:
        spec = scipy.fft.rfft(rows.astype(dtype, copy=False), n=n_pad, axis=-1, workers=workers)
        spec *= resp
        full = scipy.fft.irfft(spec, n=n_pad, axis=-1, workers=workers)
    else:
        spec = xp.fft.rfft(rows.astype(dtype, copy=False), n=n_pad, axis=-1)
        spec *= resp
        full = xp.fft.irfft(spec, n=n_pad, axis=-1)
    out = full[..., :n_cols]
    if weights is not None:
        out = out * xp.asarray(weights, dtype=dtype)[:, None]
    return xp.ascontiguousarray(out, dtype=dtype)
