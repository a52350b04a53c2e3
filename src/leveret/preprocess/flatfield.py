"""Flat/dark-field normalisation and the minus-log transform, and the checks of
flats and darks before a run."""

from __future__ import annotations

import numpy as np

from .._validate import array_module, positive_float
from ._common import average_fields, check_real, output_array


# Transmission given to pixels whose flat - dark is not positive: 1 means no
# attenuation, so after minus_log the pixel contributes 0 to every line
# integral instead of an Inf or NaN that would spread through a reconstruction.
DEAD_PIXEL_TRANSMISSION = 1.0


def normalize(projections, flats, darks, *, out=None, require_valid: bool = True):
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
    require_valid : bool
        Refuse flats/darks without a single valid pixel in these rows (a
        swapped or empty flat). Callers that checked the whole detector once
        (the slab driver, live reconstruction) pass False: a slab of rows
        outside the beam is legitimate there.

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
    check_real("projections", projections)
    if projections.ndim not in (2, 3):
        raise ValueError(
            "projections: expected shape (n_angles, n_rows, n_cols) or (n_angles, n_cols), "
            f"got shape {projections.shape}"
        )
    image_shape = projections.shape[1:]
    flat = average_fields("flats", flats, image_shape, xp)
    dark = average_fields("darks", darks, image_shape, xp)
    out = output_array(out, projections.shape, xp.float32, xp)

    denom = flat - dark
    valid = denom > 0  # False for NaN too
    if require_valid and not bool(valid.any()):
        raise ValueError(
            "flats: the flat field is nowhere brighter than the dark field (or not finite) "
            "in these detector rows: every projection would become zero attenuation; "
            "check that --flat and --dark are not swapped"
        )
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
    check_real("transmission", transmission)
    floor = positive_float("min_transmission", min_transmission)
    dtype = xp.float64 if transmission.dtype == xp.float64 else xp.float32
    out = output_array(out, transmission.shape, dtype, xp)
    # A NumPy scalar of the result dtype, so the floor does not promote float32.
    xp.maximum(transmission, np.dtype(dtype).type(floor), out=out)
    xp.log(out, out=out)
    xp.negative(out, out=out)
    return out


#: Largest share of detector pixels where a flat may be no brighter than the
#: dark (dead or saturated pixels); more means swapped or wrong files.
MAX_BAD_FLAT_SHARE = 0.5


def check_flats_darks(flats, darks, image_shape, *, averaged: bool = False):
    """Flats and darks for a whole detector, checked before a run: NumPy arrays
    of one image or a stack of ``image_shape``, finite, and the flat brighter
    than the dark in most pixels. Returned as NumPy arrays, as given; with
    ``averaged`` as the float32 images averaged for the check (what
    :func:`normalize` would average them to).

    Raises ValueError naming ``flats`` or ``darks`` otherwise; normalising
    with a NaN or swapped field gives a volume of zeros or NaN without any
    other sign of trouble.
    """
    image_shape = tuple(int(n) for n in image_shape)
    out = []
    for name, images in (("flats", flats), ("darks", darks)):
        images = np.asarray(images)
        check_real(name, images)
        if images.shape != image_shape and images.shape[-len(image_shape) :] != image_shape:
            raise ValueError(
                f"{name}: expected one image of shape {image_shape} or a stack (k, "
                f"{', '.join(map(str, image_shape))}) matching the projections' rows and "
                f"columns, got shape {images.shape}"
            )
        bad = ~np.isfinite(images) if images.dtype.kind == "f" else None  # integer counts are finite
        if bad is not None and bad.any():
            raise ValueError(f"{name}: expected finite values, got {int(bad.sum())} NaN/Inf value(s) of {images.size}")
        out.append(images)
    flat = average_fields("flats", out[0], image_shape, np)
    dark = average_fields("darks", out[1], image_shape, np)
    share = float(np.mean(flat <= dark))
    if share > MAX_BAD_FLAT_SHARE:
        raise ValueError(
            f"flats: the flat field is not brighter than the dark field in {share:.0%} of the "
            "detector pixels; check that --flat and --dark are not swapped"
        )
    return (flat, dark) if averaged else (out[0], out[1])


def sinogram_fields(name: str, images, n_cols: int) -> np.ndarray:
    """Flats or darks for one sinogram (n_angles, n_cols), as a stack (k, 1, n_cols).

    Accepted: one row ``(n_cols,)``, ``(1, n_cols)``, or a stack of rows
    ``(k, 1, n_cols)``. A detector image ``(n_rows, n_cols)`` is refused: which
    of its rows the sinogram was measured with is unknown, and averaging all
    of them normalises with the wrong row (errors of several percent).
    """
    images = np.asarray(images)
    check_real(name, images)
    if images.shape == (n_cols,):
        return images[None, None, :]
    if images.ndim == 2 and images.shape == (1, n_cols):
        return images[:, None, :]
    if images.ndim == 3 and images.shape[1:] == (1, n_cols):
        return images
    raise ValueError(
        f"{name}: the input is one sinogram with {n_cols} columns, so give the {name} of its "
        f"detector row, shape ({n_cols},) (for example image[row]) or a stack (k, 1, {n_cols}); "
        f"got shape {images.shape}, whose rows would all be averaged"
    )
