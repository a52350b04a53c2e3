"""Single-distance phase retrieval (Paganin et al. 2002, and its generalised
form of Paganin et al. 2020) for propagation-based phase-contrast scans."""

from __future__ import annotations

import math

import numpy as np

from .._validate import array_module, choice, finite_float
from ._common import check_real, fft_module, next_fast_len, output_array
from .flatfield import minus_log

#: h c in keV metres: the wavelength of a photon of energy E keV is ``HC_KEV_M / E`` metres.
HC_KEV_M = 1.239841984e-9

# Physical ranges accepted (a value outside is a unit mistake: eV for keV, mm or um for m).
ENERGY_RANGE_KEV = (0.1, 1000.0)
DISTANCE_MAX_M = 1000.0
PIXEL_SIZE_RANGE_M = (1e-9, 1e-2)

#: The share of the filter's weight allowed to lie beyond the padding (and beyond
#: a slab's border rows, :func:`phase_border`).
BORDER_TOLERANCE = 1e-3

# Padded FFT buffers of one chunk of projections stay below this many complex values.
CHUNK_VALUES = 1 << 25


def wavelength(energy: float) -> float:
    """The X-ray wavelength in metres for a photon energy in keV (``h c / E``)."""
    return HC_KEV_M / _energy(energy)


def retrieve_phase(
    transmission,
    *,
    energy,
    distance,
    pixel_size,
    delta_beta,
    pad: bool = True,
    method: str = "paganin",
    width=None,
    min_transmission: float = 1e-6,
    out=None,
):
    """Line integrals from the transmission of a single-material (or constant
    delta/beta) object, by single-distance phase retrieval.

    Paganin, Mayo, Gureyev, Miller and Wilkins (2002): under the transport of
    intensity equation, a sample of one material (refractive index
    ``1 - delta + i beta``, attenuation ``mu = 4 pi beta / wavelength``) seen at
    ``distance`` R behind it has ``I / I0 = (1 - (R delta / mu) laplacian) exp(-mu T)``.
    The inverse is a low-pass filter of the transmission; this function returns

        ``-log( F^-1[ F[transmission] / (1 + delta_beta * wavelength * R * |k|^2 / (4 pi)) ] )``

    with ``k`` in radians per metre (``delta_beta * wavelength * R / (4 pi)`` is
    ``R delta / mu``). That is ``mu T``, the line integral of the attenuation:
    filtered back-projection of the result gives ``mu`` as it does after
    :func:`minus_log` without phase retrieval, with the phase-contrast fringes
    turned into contrast and far less noise.

    ``method="generalized"`` (Paganin et al. 2020) replaces
    ``|k|^2`` by ``(2 / W^2) (2 - cos(W k_x) - cos(W k_y))``, the same at low
    frequencies but without the excess blur of the highest ones: it keeps
    finer detail for the same ``delta_beta``. ``W`` is ``width`` (default the
    pixel size).

    Parameters
    ----------
    transmission : array, (n_angles, n_rows, n_cols)
        Flat- and dark-field corrected projections (:func:`normalize`), NumPy
        or CuPy; each projection is filtered over its rows and columns.
    energy : float
        Photon energy in keV, in (0.1, 1000).
    distance : float
        Sample to detector propagation distance in metres, in [0, 1000).
    pixel_size : float
        Detector pixel size at the sample in metres, in (1e-9, 1e-2).
    delta_beta : float
        The ratio delta / beta of the sample's material, > 0 (hundreds for
        soft tissue at 20 keV, tens for bone or metals).
    pad : bool
        Pad each projection with copies of its edge pixels, far enough that
        the filter's tail beyond the padding weighs less than
        :data:`BORDER_TOLERANCE` (:func:`phase_border`), to a fast FFT size.
        Without padding the FFT wraps around: the left edge is filtered with
        the right one and the top with the bottom.
    method : {"paganin", "generalized"}
    width : float, optional
        ``W`` of the generalised method, in metres (default ``pixel_size``).
    min_transmission : float
        Floor of the filtered transmission before the logarithm, as in :func:`minus_log`.
    out : array, optional
        Result array (shape of ``transmission``, float32; float64 for float64
        input); may be ``transmission`` itself.

    Returns
    -------
    array, float32 (float64 for float64 input), shape of ``transmission``
        Line integrals.

    Raises
    ------
    ValueError
        Naming ``energy``, ``distance``, ``pixel_size``, ``delta_beta`` or
        ``width`` outside its physical range, or ``transmission`` of a wrong shape.

    Examples
    --------
    >>> import numpy as np
    >>> from leveret.preprocess import retrieve_phase
    >>> t = np.full((2, 32, 32), 0.5, np.float32)            # a uniform slab: no contrast to retrieve
    >>> lines = retrieve_phase(t, energy=20.0, distance=0.1, pixel_size=1e-6, delta_beta=300.0)
    >>> round(float(lines[0, 16, 16]), 4)                    # -log(0.5)
    0.6931
    """
    xp = array_module(transmission)
    t = xp.asarray(transmission)
    check_real("transmission", t)
    if t.ndim != 3:
        raise ValueError(
            "transmission: expected projections (n_angles, n_rows, n_cols), each filtered over its "
            f"rows and columns, got shape {t.shape}; give one image as image[None]"
        )
    method = choice("method", method, ("paganin", "generalized"))
    a = _filter_area(energy, distance, pixel_size, delta_beta)
    w = pixel_size if width is None else _width(width)
    dtype = xp.float64 if t.dtype == xp.float64 else xp.float32
    out = output_array(out, t.shape, dtype, xp)
    n_angles, n_rows, n_cols = t.shape
    margin = _margin(a, pixel_size) if pad else 0
    shape = tuple(next_fast_len(n + 2 * min(margin, n)) if pad else n for n in (n_rows, n_cols))
    h = _filter(shape, pixel_size, a, method, w, xp).astype(dtype)
    fft = fft_module(xp)
    chunk = max(1, CHUNK_VALUES // (shape[0] * (shape[1] // 2 + 1)))
    buf = xp.empty((min(chunk, n_angles),) + shape, dtype)
    r0, c0 = (shape[0] - n_rows) // 2, (shape[1] - n_cols) // 2
    for v0 in range(0, n_angles, chunk):
        v1 = min(v0 + chunk, n_angles)
        b = buf[: v1 - v0]
        _pad_edges(b, t[v0:v1], r0, c0)
        filtered = fft.irfft2(fft.rfft2(b) * h, s=shape)
        minus_log(filtered[:, r0 : r0 + n_rows, c0 : c0 + n_cols], min_transmission=min_transmission, out=out[v0:v1])
    return out


def phase_border(*, energy, distance, pixel_size, delta_beta, tolerance: float = BORDER_TOLERANCE) -> int:
    """Detector rows (or columns) of context :func:`retrieve_phase` needs on each side.

    The Paganin filter ``1 / (1 + sigma^2 |k|^2)`` with ``sigma^2 = delta_beta *
    wavelength * distance / (4 pi)`` is, along one axis, the convolution with
    ``exp(-|x| / sigma) / (2 sigma)``: the weight beyond ``b`` pixels on one side
    is ``exp(-b / sigma_px) / 2``. A slab of rows retrieved with ``b =
    ceil(sigma_px log(1 / (2 tolerance)))`` extra rows on each side (and those
    rows dropped afterwards) matches the retrieval of the whole detector: its
    filtered transmission differs by at most ``tolerance`` times the jump of
    the transmission beyond those rows (its line integrals by that over the
    transmission). The same margin pads each projection against the FFT's
    wrap-around.

    Returns
    -------
    int
        Rows each side, >= 1 (0 for a zero distance).
    """
    tolerance = finite_float("tolerance", tolerance)
    if not 0 < tolerance < 0.5:
        raise ValueError(f"tolerance: expected a share of the filter's weight in (0, 0.5), got {tolerance!r}")
    return _margin(_filter_area(energy, distance, pixel_size, delta_beta), pixel_size, tolerance)


def _margin(area: float, pixel_size: float, tolerance: float = BORDER_TOLERANCE) -> int:
    if area == 0:
        return 0
    sigma_px = math.sqrt(area) / pixel_size
    return max(1, math.ceil(sigma_px * math.log(1 / (2 * tolerance))))


def _filter_area(energy, distance, pixel_size, delta_beta) -> float:
    """``delta_beta * wavelength * distance / (4 pi)`` in square metres, the arguments checked."""
    lam = wavelength(energy)
    distance = finite_float("distance", distance)
    if not 0 <= distance < DISTANCE_MAX_M:
        raise ValueError(
            f"distance: expected a sample-detector distance in metres, >= 0 and below "
            f"{DISTANCE_MAX_M:g}, got {distance!r}"
        )
    _pixel_size(pixel_size)
    delta_beta = finite_float("delta_beta", delta_beta)
    if not delta_beta > 0:
        raise ValueError(f"delta_beta: expected the ratio delta/beta of the material, > 0, got {delta_beta!r}")
    return delta_beta * lam * distance / (4 * math.pi)


def _energy(energy) -> float:
    return _within("energy", energy, ENERGY_RANGE_KEV, "a photon energy in keV")


def _pixel_size(pixel_size) -> float:
    return _within("pixel_size", pixel_size, PIXEL_SIZE_RANGE_M, "a pixel size in metres", " (1 nm to 1 cm)")


def _width(width) -> float:
    return _within("width", width, PIXEL_SIZE_RANGE_M, "a length in metres")


def _within(name, value, bounds, what, hint="") -> float:
    """``value`` as a float strictly inside ``bounds``, else a ValueError naming ``name``."""
    value = finite_float(name, value)
    lo, hi = bounds
    if not lo < value < hi:
        raise ValueError(f"{name}: expected {what} between {lo:g} and {hi:g}{hint}, got {value!r}")
    return value


def _filter(shape, pixel_size, area, method, width, xp):
    """The filter on the rfft2 grid of ``shape`` (float64)."""
    ky = 2 * np.pi * xp.fft.fftfreq(shape[0], d=pixel_size)[:, None]  # radians per metre
    kx = 2 * np.pi * xp.fft.rfftfreq(shape[1], d=pixel_size)[None, :]
    if method == "paganin":
        k2 = ky * ky + kx * kx
    else:
        k2 = (2 / width**2) * (2 - xp.cos(width * kx) - xp.cos(width * ky))
    return 1 / (1 + area * k2)


def _pad_edges(buf, images, r0: int, c0: int) -> None:
    """``images`` into the middle of ``buf``, the rest filled with copies of their edge pixels."""
    n_rows, n_cols = images.shape[1:]
    r1, c1 = r0 + n_rows, c0 + n_cols
    buf[:, r0:r1, c0:c1] = images
    buf[:, :r0, c0:c1] = buf[:, r0 : r0 + 1, c0:c1]
    buf[:, r1:, c0:c1] = buf[:, r1 - 1 : r1, c0:c1]
    buf[:, :, :c0] = buf[:, :, c0 : c0 + 1]
    buf[:, :, c1:] = buf[:, :, c1 - 1 : c1]
