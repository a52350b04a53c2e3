"""The 2D discrete wavelet transform of a stack of sinograms, in NumPy or CuPy.

Sinograms ``(n_angles, n_rows, n_cols)`` are transformed over the angles
(axis 0) and the columns (axis 2), every row at once, with the symmetric
(half-sample) extension at the ends: the coefficients of PyWavelets'
``wavedec2(sinogram, wavelet, mode="symmetric")``, the same on the CPU and
the GPU. PyWavelets gives the filter coefficients only.

With ``F`` taps and ``x`` extended symmetrically, one level of a signal of
length ``n`` has ``M = (n + F - 1) // 2`` coefficients
``a[i] = sum_k lo[k] x[2i + 1 - k]`` (and ``d`` with ``hi``); the inverse is
``y[n] = sum_i a[i] rec_lo[n - 2i + F - 2] + d[i] rec_hi[n - 2i + F - 2]``,
cut to the signal's length.
"""

from __future__ import annotations

import numpy as np


def wavelet_filters(name: str):
    """``(dec_lo, dec_hi, rec_lo, rec_hi)`` of the discrete wavelet ``name`` (float64)."""
    try:
        import pywt
    except ImportError:
        raise ImportError(
            "method='wavelet-fft' needs PyWavelets: pip install PyWavelets (or leveret[preprocess])"
        ) from None
    if not isinstance(name, str) or name not in pywt.wavelist(kind="discrete"):
        raise ValueError(
            f"wavelet: expected the name of a discrete wavelet of PyWavelets (e.g. 'db5', 'sym8'), got {name!r}"
        )
    return tuple(np.asarray(f, dtype=np.float64) for f in pywt.Wavelet(name).filter_bank)


def _dwt(x, lo, hi, xp):
    """One level along axis 0: (approximation, detail)."""
    n, taps = x.shape[0], lo.size
    m = (n + taps - 1) // 2
    ext = xp.pad(x, [(taps - 1, taps - 1)] + [(0, 0)] * (x.ndim - 1), mode="symmetric")
    a = xp.zeros((m,) + x.shape[1:], x.dtype)
    d = xp.zeros_like(a)
    for k in range(taps):
        # a[i] += lo[k] x[2i + 1 - k], x[j] being ext[j + taps - 1]
        part = ext[taps - k : taps - k + 2 * m - 1 : 2]
        a += x.dtype.type(lo[k]) * part
        d += x.dtype.type(hi[k]) * part
    return a, d


def _idwt(a, d, lo, hi, n, xp):
    """The inverse of :func:`_dwt` along axis 0, cut to length ``n``."""
    m, taps = a.shape[0], lo.size
    up_a = xp.zeros((2 * m + 1,) + a.shape[1:], a.dtype)
    up_d = xp.zeros_like(up_a)
    up_a[1::2] = a
    up_d[1::2] = d
    y = xp.zeros((n,) + a.shape[1:], a.dtype)
    for k in range(taps):
        # y[j] += rec[k] up[j - k + taps - 1]
        s = taps - 1 - k
        y += a.dtype.type(lo[k]) * up_a[s : s + n] + a.dtype.type(hi[k]) * up_d[s : s + n]
    return y


def _front(x, axis, xp):
    return xp.moveaxis(x, axis, 0)


def wavedec_ad(stack, filters, level: int, xp):
    """``level`` levels over axes 0 (angles) and 2 (columns) of ``stack``.

    Returns
    -------
    approx : array
        The approximation of the last level.
    bands : list of (h, v, d), finest level first
        ``h``: detail over the angles (approximation over the columns), ``v``:
        approximation over the angles and detail over the columns (where a
        stripe, constant along the angles, lives), ``d``: detail over both;
        PyWavelets' (cH, cV, cD).
    lengths : list of (n_angles, n_cols) of each level's input, finest first
    """
    dec_lo, dec_hi = filters[0], filters[1]
    bands, lengths = [], []
    x = stack
    for _ in range(level):
        lengths.append((x.shape[0], x.shape[2]))
        low, high = (xp.moveaxis(b, 0, 2) for b in _dwt(_front(x, 2, xp), dec_lo, dec_hi, xp))
        aa, da = _dwt(low, dec_lo, dec_hi, xp)
        ad, dd = _dwt(high, dec_lo, dec_hi, xp)
        bands.append((da, ad, dd))
        x = aa
    return x, bands, lengths


def waverec_ad(approx, bands, lengths, filters, xp):
    """The inverse of :func:`wavedec_ad`."""
    rec_lo, rec_hi = filters[2], filters[3]
    x = approx
    for (da, ad, dd), (n_angles, n_cols) in zip(reversed(bands), reversed(lengths)):
        low = _idwt(x, da, rec_lo, rec_hi, n_angles, xp)
        high = _idwt(ad, dd, rec_lo, rec_hi, n_angles, xp)
        x = xp.moveaxis(_idwt(_front(low, 2, xp), _front(high, 2, xp), rec_lo, rec_hi, n_cols, xp), 0, 2)
    return x
