"""Flat/dark-field normalisation and the minus-log transform.

Arrays are NumPy or CuPy (CuPy in, CuPy out); projections are
``(n_angles, n_rows, n_cols)`` or sinograms ``(n_angles, n_cols)`` as in
CONVENTIONS.md.
"""
from __future__ import annotations

import numpy as np

from ._validate import array_module, positive_float

# Transmission given to pixels whose flat - dark is not positive: 1 means no
# attenuation, so after minus_log the pixel contributes 0 to every line
# integral instead of an Inf or NaN that would spread through a reconstruction.
DEAD_PIXEL_TRANSMISSION = 1.0


def normalize(projections, flats, darks, *, out=None):
    """Flat- and dark-field correction: ``(projections - dark) / (flat - dark)``.

    Parameters
    ----------
    projections : array, shape (n_angles, n_rows, n_cols) or (n_angles, n_cols)
        Raw counts, any real dtype (NumPy or CuPy).
    flats, darks : array, shape ``projections.shape[1:]`` or (k, *projections.shape[1:])
        One flat (dark) image, or a stack of k of them averaged along axis 0.
    out : array, optional
        float32 array of ``projections.shape`` (same array library) to write
        into; it may be ``projections`` itself when that is float32 (in place).

    Returns
    -------
    array, float32, shape of ``projections``
        Transmission, about 1 where nothing attenuates. Pixels where the
        averaged ``flat - dark <= 0`` (or is NaN), i.e. dead or saturated
        detector pixels, are set to 1 (zero attenuation) in every projection.
        No other clipping is done: values slightly above 1 or below 0 from
        noise are kept (see :func:`minus_log`).

    Raises
    ------
    ValueError
        Naming ``projections``, ``flats``, ``darks`` or ``out`` on a wrong shape,
        dtype or array library.
    """
    xp = array_module(projections)
    projections = xp.asarray(projections)
    _check_real("projections", projections)
    if projections.ndim not in (2, 3):
        raise ValueError(
            "projections: expected shape (n_angles, n_rows, n_cols) or (n_angles, n_cols), "
            f"got shape {projections.shape}")
    image_shape = projections.shape[1:]
    flat = _average("flats", flats, image_shape, xp)
    dark = _average("darks", darks, image_shape, xp)
    out = _output(out, projections.shape, xp.float32, xp)

    denom = flat - dark
    valid = denom > 0  # False for NaN too
    denom[~valid] = 1  # any positive value: these pixels are overwritten below
    out[...] = projections  # cast to float32 (a no-op when computing in place)
    out -= dark
    out /= denom
    out[:, ~valid] = DEAD_PIXEL_TRANSMISSION
    return out


def minus_log(transmission, *, min_transmission: float = 1e-6, out=None):
    """Line integrals from transmission: ``-log(max(transmission, min_transmission))``.

    Parameters
    ----------
    transmission : array
        Normalised projections (see :func:`normalize`), any shape, NumPy or CuPy.
    min_transmission : float
        Values below it, zero and negative ones included (noise in dark,
        fully absorbing parts), are raised to it before the log, so finite
        input gives finite output, at most ``-log(min_transmission)``
        (13.8 for the default). NaN stays NaN.
    out : array, optional
        Array of ``transmission.shape`` and the result dtype to write into;
        may be ``transmission`` itself (in place).

    Returns
    -------
    array
        Line integrals (dimensionless attenuation), float64 for float64 input,
        else float32.
    """
    xp = array_module(transmission)
    transmission = xp.asarray(transmission)
    _check_real("transmission", transmission)
    floor = positive_float("min_transmission", min_transmission)
    dtype = xp.float64 if transmission.dtype == xp.float64 else xp.float32
    out = _output(out, transmission.shape, dtype, xp)
    # A NumPy scalar of the result dtype, so the floor does not promote float32.
    xp.maximum(transmission, np.dtype(dtype).type(floor), out=out)
    xp.log(out, out=out)
    xp.negative(out, out=out)
    return out


def _check_real(name, arr):
    if arr.dtype.kind not in "buif":
        raise ValueError(f"{name}: expected real numbers, got dtype {arr.dtype}")


def _average(name, images, image_shape, xp):
    """One float32 image from one image or a stack (mean along axis 0)."""
    images = xp.asarray(images)
    _check_real(name, images)
    if images.shape == image_shape:
        return images.astype(xp.float32)  # a copy: the caller modifies it
    if images.ndim == len(image_shape) + 1 and images.shape[1:] == image_shape and len(images):
        return images.mean(axis=0, dtype=xp.float32)
    raise ValueError(
        f"{name}: expected one image of shape {image_shape} or a non-empty stack "
        f"(k, {', '.join(map(str, image_shape))}) matching projections, got shape {images.shape}")


def _output(out, shape, dtype, xp):
    if out is None:
        return xp.empty(shape, dtype=dtype)
    if array_module(out) is not xp or not hasattr(out, "dtype"):
        raise ValueError(f"out: expected a {xp.__name__} array like the input, got {type(out).__name__}")
    if out.shape != tuple(shape) or out.dtype != dtype:
        raise ValueError(
            f"out: expected shape {tuple(shape)} and dtype {np.dtype(dtype)}, "
            f"got shape {out.shape} and dtype {out.dtype}")
    return out
