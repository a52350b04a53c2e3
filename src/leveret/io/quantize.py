"""Volumes stored in fewer bytes: float16, or integers over a value range.

``float32`` is stored as computed. ``float16`` keeps about three significant
digits; values beyond its largest finite value (65504) are clipped to it.
``uint16`` and ``uint8`` map a value range ``[lo, hi]`` linearly onto
``0 .. 65535`` (``0 .. 255``), rounding to the nearest step; values below
``lo`` are stored as 0 and values above ``hi`` as the largest integer
(clipped). The range is written into the file's metadata with the CF
convention's names, so that ``value = stored * scale_factor + add_offset``
(:func:`value_metadata`, :func:`dequantize`).
"""

from __future__ import annotations

import math

import numpy as np

from .._validate import array_module

#: Output dtypes a volume may be stored in.
OUTPUT_DTYPES = ("float32", "float16", "uint16", "uint8")
#: float16's largest finite value: values beyond it are clipped to it.
FLOAT16_MAX = 65504.0


def output_dtype(dtype) -> np.dtype:
    """``dtype`` as one of :data:`OUTPUT_DTYPES` (ValueError naming ``output_dtype`` otherwise)."""
    try:
        out = np.dtype(dtype)
    except TypeError:
        out = None
    if out is None or out.name not in OUTPUT_DTYPES:
        raise ValueError(f"output_dtype: expected one of {', '.join(OUTPUT_DTYPES)}, got {dtype!r}")
    return out


def needs_range(dtype) -> bool:
    """Whether storing as ``dtype`` needs a value range (the integer types)."""
    return output_dtype(dtype).kind == "u"


def check_range(value_range) -> tuple[float, float]:
    """``(lo, hi)`` as finite floats with ``lo < hi`` (ValueError naming ``output_range``)."""
    try:
        lo, hi = (float(x) for x in value_range)
    except (TypeError, ValueError):
        raise ValueError(f"output_range: expected (lo, hi), two numbers, got {value_range!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"output_range: expected finite lo < hi, got ({lo!r}, {hi!r})")
    return lo, hi


def quantize(values, dtype, value_range=None, *, out=None):
    """``values`` (float, NumPy or CuPy) stored as ``dtype``.

    Parameters
    ----------
    values : array
    dtype : {"float32", "float16", "uint16", "uint8"}
    value_range : (lo, hi), optional
        Required for the integer types: ``lo`` is stored as 0, ``hi`` as the
        largest integer; values outside clip.
    out : array, optional
        Of ``values``' shape and ``dtype``, same array library.

    Returns
    -------
    array of ``dtype``
    """
    xp = array_module(values)
    dtype = output_dtype(dtype)
    if out is None:
        out = xp.empty(values.shape, dtype)
    if dtype == np.float32:
        out[...] = values
    elif dtype == np.float16:
        out[...] = xp.clip(values, -FLOAT16_MAX, FLOAT16_MAX)
    else:
        if value_range is None:
            raise ValueError(f"output_range: storing as {dtype.name} needs a value range (lo, hi)")
        lo, hi = check_range(value_range)
        top = float(np.iinfo(dtype).max)
        scaled = (values - np.float32(lo)) * np.float32(top / (hi - lo))
        xp.clip(scaled, 0, top, out=scaled)
        xp.rint(scaled, out=scaled)
        out[...] = scaled
    return out


def value_metadata(dtype, value_range=None) -> dict:
    """What the file's metadata says about stored values (empty for float32)."""
    dtype = output_dtype(dtype)
    if dtype == np.float32:
        return {}
    if dtype == np.float16:
        return {
            "stored_dtype": "float16",
            "clipped": f"values beyond +-{FLOAT16_MAX:g} are stored as +-{FLOAT16_MAX:g}",
        }
    lo, hi = check_range(value_range)
    top = int(np.iinfo(dtype).max)
    return {
        "stored_dtype": dtype.name,
        "value_range": [lo, hi],
        "scale_factor": (hi - lo) / top,
        "add_offset": lo,
        "clipped": f"values below {lo:.6g} are stored as 0, values above {hi:.6g} as {top}",
    }


def dequantize(stored, metadata: dict) -> np.ndarray:
    """Values (float32) from ``stored`` and the metadata :func:`value_metadata` wrote."""
    stored = np.asarray(stored)
    if stored.dtype.kind != "u":
        return stored.astype(np.float32)
    scale, offset = float(metadata["scale_factor"]), float(metadata["add_offset"])
    return (stored.astype(np.float64) * scale + offset).astype(np.float32)


#: Percentiles of a sample slab that bound the automatic range, and the margin
#: added on each side (a share of their span) for slabs the sample does not see.
AUTO_PERCENTILES = (0.01, 99.99)
AUTO_MARGIN = 0.1
#: Values of the sample the percentiles are taken from (every k-th beyond it).
AUTO_SAMPLES = 1 << 22


def auto_range(sample) -> tuple[float, float]:
    """The automatic value range from ``sample`` (reconstructed slices, NumPy or
    CuPy): its :data:`AUTO_PERCENTILES`, widened by :data:`AUTO_MARGIN` of their
    span on each side."""
    xp = array_module(sample)
    flat = sample.reshape(-1)
    flat = flat[:: max(1, flat.size // AUTO_SAMPLES)]
    lo, hi = (float(v) for v in xp.percentile(flat, xp.asarray(AUTO_PERCENTILES)))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError("output_range: the sample slab holds non-finite values; give the range (lo, hi)")
    span = hi - lo
    if span <= 0:  # a constant sample: a range around its value
        span = max(abs(lo), 1.0)
    return lo - AUTO_MARGIN * span, hi + AUTO_MARGIN * span
