"""Stripe (ring artefact) suppression in sinograms.

Every method works on a whole stack of sinograms at once, ``(n_angles,
n_rows, n_cols)`` (one sinogram per detector row), with array operations of
NumPy or CuPy: no loop over rows. Sorting each column along the angles, the
costly step of the sorting-based methods, runs as one CUDA kernel for the
whole stack on the GPU (:mod:`leveret.cuda.sort_columns`).
"""

from __future__ import annotations

import numpy as np

from .._validate import choice, finite_float, positive_int
from ._common import fft_module, ndimage_module, odd_size, projection_like
from ._wavelet import wavelet_filters, wavedec_ad, waverec_ad

#: Default filter widths across columns: "sort" and "mean" (small stripes),
#: "all"'s small-stripe step and its large-stripe and dead-stripe steps (the
#: values of Vo et al. 2018 for detectors 2000 to 2500 pixels wide).
SIZES = {"sort": 5, "mean": 5, "all": 21}
LARGE_SIZE = 51
#: Angles of the moving average against which a column's fluctuation is
#: measured when looking for dead (unresponsive) and fluctuating columns.
DEAD_WINDOW = 9
#: Sorted rows (evenly spaced) whose medians across columns give the smooth
#: profile that large stripes are measured against.
PROFILE_ROWS = 256
# The medians at the large stripes are gathered in batches of at most this many values, or, when
# more than this share of the columns are stripes, taken from one median filter of the whole stack.
GATHER_VALUES = 1 << 26
FULL_MEDIAN_SHARE = 0.125
# NumPy's running medians partition batches of at most this many window values.
MEDIAN_VALUES = 1 << 24


def remove_stripes(
    sinogram_or_projections,
    *,
    method: str = "sort",
    size: int | None = None,
    snr: float = 3.0,
    large_size: int = LARGE_SIZE,
    drop_ratio: float = 0.1,
    wavelet: str = "db5",
    level: int | None = None,
    sigma: float = 2.0,
):
    """Suppress stripes in sinograms (ring artefacts in the reconstruction).

    Stripes are columns whose response is off by a (possibly angle- or
    intensity-dependent) offset or gain, or dead: defective or miscalibrated
    detector pixels, or scintillator defects.

    Methods:

    - "sort" (default): the sorting-based method of Vo, Atwood and Drakopoulos
      (2018), for small and partial stripes: sort each column along the angle
      axis, median-filter the sorted sinogram across columns (``size`` wide,
      wider than the stripes), and put every value back at its angle.
      Sorting turns a stripe into a column that differs from its neighbours
      over all of its length, which the median removes; object structure is
      left mostly intact.
    - "mean": normalisation by the smoothed column mean (in the spirit of
      Raven 1998): subtract from each column its mean over angles minus the
      ``size``-wide median of those means across columns. Constant offsets only.
    - "all": the combination of Vo et al. (2018) for every kind of stripe, in
      this order: dead and fluctuating columns found and replaced by
      interpolation (:func:`remove_dead_stripes`, ``snr``, ``large_size``);
      large stripes found and replaced in the sorted sinogram
      (:func:`remove_large_stripes`, ``snr``, ``large_size``,
      ``drop_ratio``); then "sort" with ``size`` (default 21) for the small
      and partial ones. The columns are sorted once for both sorted steps.
    - "wavelet-fft": the combined wavelet-Fourier filter of Münch, Trtik,
      Marone and Stampanoni (2009): a ``level``-deep 2D wavelet decomposition
      (``wavelet``, a PyWavelets name), whose detail coefficients across the
      columns (where a stripe lives) are damped along the angles by
      ``1 - exp(-k^2 / (2 sigma^2))`` (``k``: the angular frequency index), then
      the inverse transform. Needs PyWavelets (for the filter coefficients).

    Parameters
    ----------
    sinogram_or_projections : array, (n_angles, n_cols) or (n_angles, n_rows, n_cols)
        Line integrals (after :func:`minus_log`), NumPy or CuPy; each detector
        row's sinogram is treated apart.
    method : {"sort", "mean", "all", "wavelet-fft"}
    size : int, optional
        Odd filter width across columns, >= 3: "sort" and "mean" (default 5),
        "all"'s small-stripe step (default 21). Not used by "wavelet-fft".
        The defaults of "all" (21 and ``large_size`` 51) are the paper's, for
        detectors 2000 or more columns wide; on narrower ones the object's own
        structure is a larger share of the window and suffers: about 5 and 11
        suit 160 columns.
    snr : float
        "all": how far (> 1) a column's statistic must stand out of the
        spread of its row's to count as a stripe (Vo et al. 2018's ``snr``;
        larger finds fewer).
    large_size : int
        "all": odd width across columns of the median that large stripes are
        measured against and replaced by (wider than twice the widest stripe).
    drop_ratio : float
        "all": share of the sorted values, half at each end, left out of a
        column's mean when large stripes are measured, in [0, 0.8].
    wavelet : str
        "wavelet-fft": the wavelet (PyWavelets name, e.g. "db5", "db9", "sym8").
    level : int, optional
        "wavelet-fft": decomposition levels (default: as many as the shorter
        axis allows, at most 6).
    sigma : float
        "wavelet-fft": width of the Gaussian damping, in angular frequency
        indices of each level.

    Returns
    -------
    array, float32 (float64 for float64 input), shape of the input
    """
    xp, x = projection_like("sinogram_or_projections", sinogram_or_projections)
    method = choice("method", method, ("sort", "mean", "all", "wavelet-fft"))
    x = x.astype(xp.float64 if x.dtype == xp.float64 else xp.float32)  # a copy: the input stays intact
    stack = x if x.ndim == 3 else x[:, None, :]
    if method == "wavelet-fft":
        out = _wavelet_fft(stack, wavelet, level, sigma, xp)
        return out if x.ndim == 3 else out[:, 0, :]
    size = odd_size(SIZES[method] if size is None else size)
    if method == "mean":
        means = stack.mean(axis=0, keepdims=True)
        out = stack - (means - median_across_columns(means, size, xp))
    elif method == "sort":
        ordered, order = sort_angles(stack, xp)
        out = unsort_angles(median_across_columns(ordered, size, xp), order, xp)
    else:
        snr, large_size, drop_ratio = _stripe_args(snr, large_size, drop_ratio)
        stack = _interpolate_columns(stack, _dead_columns(stack, snr, large_size, xp), xp)
        ordered, order = sort_angles(stack, xp)
        _remove_large_sorted(ordered, snr, large_size, drop_ratio, xp)
        out = unsort_angles(median_across_columns(ordered, size, xp), order, xp)
    return out if x.ndim == 3 else out[:, 0, :]


def remove_dead_stripes(sinogram_or_projections, *, snr: float = 3.0, size: int = LARGE_SIZE):
    """Replace dead (unresponsive) and fluctuating detector columns by
    interpolation between their neighbours (Vo et al. 2018, the first step of
    ``remove_stripes(method="all")``).

    A column's fluctuation is the sum over angles of ``|x - moving average of
    x over DEAD_WINDOW angles|``; divided by the ``size``-wide median of the
    fluctuations across columns it is about 1 for a working column, near 0
    for one that does not respond (a constant) and large for one that
    fluctuates. Outliers of that ratio are found as for large stripes
    (:func:`detect_stripes`, ``snr``), widened by one column each side, and
    replaced at every angle by linear interpolation between the nearest
    working columns of the same row.

    Parameters and returns as :func:`remove_stripes`.
    """
    xp, x = projection_like("sinogram_or_projections", sinogram_or_projections)
    snr, size, _ = _stripe_args(snr, size, 0.0, "size")
    x = x.astype(xp.float64 if x.dtype == xp.float64 else xp.float32)
    stack = x if x.ndim == 3 else x[:, None, :]
    out = _interpolate_columns(stack, _dead_columns(stack, snr, size, xp), xp)
    return out if x.ndim == 3 else out[:, 0, :]


def remove_large_stripes(sinogram_or_projections, *, snr: float = 3.0, size: int = LARGE_SIZE, drop_ratio: float = 0.1):
    """Remove large (wide) stripes (Vo et al. 2018, the second step of
    ``remove_stripes(method="all")``).

    Each column is sorted along the angles. Its mean over the sorted values,
    without the ``drop_ratio`` share of extreme ones, is compared with the
    same mean of the ``size``-wide median across columns: the difference is
    the column's offset. The columns whose offset stands out
    (:func:`detect_stripes` with ``snr``, widened by one column each side)
    are replaced, in the sorted sinogram, by that median; every other column
    is corrected by its offset (the normalisation of Vo et al., here on line
    integrals, where a detector pixel's gain is an offset). Every value then
    goes back to its angle.

    Parameters and returns as :func:`remove_stripes`.
    """
    xp, x = projection_like("sinogram_or_projections", sinogram_or_projections)
    snr, size, drop_ratio = _stripe_args(snr, size, drop_ratio, "size")
    x = x.astype(xp.float64 if x.dtype == xp.float64 else xp.float32)
    stack = x if x.ndim == 3 else x[:, None, :]
    ordered, order = sort_angles(stack, xp)
    _remove_large_sorted(ordered, snr, size, drop_ratio, xp)
    out = unsort_angles(ordered, order, xp)
    return out if x.ndim == 3 else out[:, 0, :]


def detect_stripes(profile, snr: float = 3.0):
    """Columns that stand out of a row's profile: Vo et al. (2018), algorithm 1.

    For each row of ``profile`` (n_rows, n_cols) (a per-column statistic),
    its values are sorted and a straight line fitted (least squares) to the
    middle half of the sorted values. The line's rise over the whole row,
    ``noise``, measures the spread of ordinary columns. When the largest value
    lies more than ``snr * noise`` above the line's upper end, every value
    more than ``snr * noise / 2`` above it is a stripe; likewise below the
    lower end. Rows of fewer than 8 columns find none.

    Returns
    -------
    array of bool, (n_rows, n_cols)
    """
    from .._validate import array_module

    xp = array_module(profile)
    profile = xp.asarray(profile)
    n = profile.shape[-1]
    mask = xp.zeros(profile.shape, dtype=bool)
    if n < 8:
        return mask
    s = xp.sort(profile, axis=-1).astype(xp.float64)
    lo, hi = n // 4, n - n // 4
    x = np.arange(lo, hi, dtype=np.float64)
    xc = x - x.mean()
    y = s[..., lo:hi]
    slope = (y * xp.asarray(xc)).sum(axis=-1) / float((xc * xc).sum())
    start = y.mean(axis=-1) - slope * x.mean()  # the line at sorted index 0
    end = start + slope * (n - 1)
    scale = xp.abs(s).max(axis=-1)
    noise = xp.maximum(end - start, 1e-6 * scale + 1e-30)  # sorted: the slope is >= 0
    upper = (s[..., -1] - end) / noise >= snr
    lower = (start - s[..., 0]) / noise >= snr
    p = profile.astype(xp.float64)
    mask |= upper[..., None] & (p > (end + 0.5 * snr * noise)[..., None])
    mask |= lower[..., None] & (p < (start - 0.5 * snr * noise)[..., None])
    return mask


def median_across_columns(x, size: int, xp):
    """The ``size``-wide running median along the last axis (the columns), ends reflected
    (``d c b a | a b c d | d c b a``): scipy.ndimage's ``median_filter(x, (1, ..., size),
    mode="reflect")``. NumPy: a partition of sliding windows, in batches of rows (about six
    times faster than the N-D filter); CuPy float32: :mod:`leveret.cuda.running_median`
    (a sorting network per window); other CuPy dtypes and wider windows: cupyx."""
    if xp is not np:
        from ..cuda.running_median import MAX_SIZE, running_median

        if x.dtype == xp.float32 and size <= MAX_SIZE:
            return running_median(xp.ascontiguousarray(x), size)
        return ndimage_module(xp).median_filter(x, size=(1,) * (x.ndim - 1) + (size,), mode="reflect")
    half = size // 2
    rows = x.reshape(-1, x.shape[-1])
    padded = np.pad(rows, ((0, 0), (half, half)), mode="symmetric")
    windows = np.lib.stride_tricks.sliding_window_view(padded, size, axis=1)
    out = np.empty_like(rows)
    batch = max(1, MEDIAN_VALUES // (size * rows.shape[1]))
    for r0 in range(0, rows.shape[0], batch):
        out[r0 : r0 + batch] = np.partition(windows[r0 : r0 + batch], half, axis=-1)[..., half]
    return out.reshape(x.shape)


# -- sorting along the angles ------------------------------------------------------------------


def sort_angles(stack, xp):
    """``(sorted, order)``: every column of ``stack`` (n_angles, ...) sorted along
    axis 0, ``sorted = take_along_axis(stack, order, 0)``, a stable sort (equal
    values in angle order, NaN last), so that NumPy and CuPy agree."""
    if xp is np:
        # sorted along the contiguous axis: twice as fast as along axis 0
        angles_last = np.ascontiguousarray(np.moveaxis(stack, 0, -1))
        order = np.argsort(angles_last, axis=-1, kind="stable")
        return np.moveaxis(np.take_along_axis(angles_last, order, axis=-1), -1, 0), np.moveaxis(order, -1, 0)
    stack = xp.ascontiguousarray(stack)
    if stack.dtype == xp.float32:
        from ..cuda.sort_columns import sort_columns

        return sort_columns(stack)
    order = xp.argsort(stack, axis=0, kind="stable")
    return xp.take_along_axis(stack, order, axis=0), order


def unsort_angles(values, order, xp):
    """The inverse of :func:`sort_angles`: ``out[order[i, j], j] = values[i, j]``."""
    if xp is np:
        out = np.empty(values.shape[1:] + values.shape[:1], values.dtype)
        np.put_along_axis(out, np.moveaxis(order, 0, -1), np.moveaxis(values, 0, -1), axis=-1)
        return np.ascontiguousarray(np.moveaxis(out, -1, 0))
    values = xp.ascontiguousarray(values)
    out = xp.empty_like(values)
    if values.dtype == xp.float32 and order.dtype == xp.int32:
        from ..cuda.sort_columns import unsort_columns

        return unsort_columns(values, order, out)
    n_columns = values.size // values.shape[0]
    flat = order.reshape(values.shape[0], -1) * n_columns + xp.arange(n_columns)
    out.reshape(-1)[flat.reshape(-1)] = values.reshape(-1)
    return out


# -- the steps of "all" ------------------------------------------------------------------------


def _stripe_args(snr, size, drop_ratio, size_name="large_size"):
    snr = finite_float("snr", snr)
    if not snr > 1:
        raise ValueError(f"snr: expected a ratio > 1 (how far a stripe stands out of the noise), got {snr!r}")
    size = positive_int(size_name, size)
    if size < 3 or size % 2 == 0:
        raise ValueError(f"{size_name}: expected an odd integer >= 3, got {size}")
    drop_ratio = finite_float("drop_ratio", drop_ratio)
    if not 0 <= drop_ratio <= 0.8:
        raise ValueError(f"drop_ratio: expected a share in [0, 0.8], got {drop_ratio!r}")
    return snr, size, drop_ratio


def _widen(mask, xp):
    """``mask`` (n_rows, n_cols) grown by one column each side."""
    out = mask.copy()
    out[:, 1:] |= mask[:, :-1]
    out[:, :-1] |= mask[:, 1:]
    return out


def _dead_columns(stack, snr, size, xp):
    ndi = ndimage_module(xp)
    smooth = ndi.uniform_filter1d(stack, DEAD_WINDOW, axis=0, mode="reflect")
    fluctuation = xp.abs(stack - smooth).sum(axis=0, dtype=xp.float64)  # (n_rows, n_cols)
    background = median_across_columns(fluctuation, size, xp)
    tiny = 1e-6 * fluctuation.max(axis=-1, keepdims=True) + 1e-30
    # columns in a flat neighbourhood (no fluctuation anywhere: outside the beam, noise-free data) are kept
    ratio = xp.where(background > tiny, fluctuation / xp.maximum(background, tiny), 1.0)
    return _widen(detect_stripes(ratio, snr), xp)


def _interpolate_columns(stack, mask, xp):
    """``stack`` with the columns of ``mask`` (n_rows, n_cols) replaced, at every
    angle, by linear interpolation between the nearest unmasked columns of
    their row (the nearest one where there is none on one side)."""
    rows, cols = xp.nonzero(mask)
    if rows.size == 0:
        return stack
    n_cols = mask.shape[1]
    good = ~mask
    # the good columns of each row first, in order: column k of `listed` is the row's k-th good column
    listed = xp.argsort(xp.where(good, 0, n_cols) + xp.arange(n_cols), axis=1)
    rank = xp.cumsum(good, axis=1)  # good columns <= c
    n_good = rank[:, -1]
    k = rank[rows, cols]  # the next good one's rank
    has_left, has_right = k > 0, k < n_good[rows]
    left = listed[rows, xp.maximum(k - 1, 0)]
    right = listed[rows, xp.minimum(k, xp.maximum(n_good[rows] - 1, 0))]
    left = xp.where(has_left, left, xp.where(has_right, right, cols))
    right = xp.where(has_right, right, left)
    span = xp.maximum(right - left, 1)
    w = xp.where(right > left, (cols - left) / span, 0.0).astype(stack.dtype)
    out = stack.copy()
    out[:, rows, cols] = (1 - w) * stack[:, rows, left] + w * stack[:, rows, right]
    return out


def _remove_large_sorted(ordered, snr, size, drop_ratio, xp):
    """The large-stripe step on sorted columns, in place (see :func:`remove_large_stripes`)."""
    n_angles = ordered.shape[0]
    drop = int(0.5 * drop_ratio * n_angles)
    middle = ordered[drop : n_angles - drop]
    # both means over the same sorted rows: a column's values rise along them
    middle = middle[:: max(1, middle.shape[0] // PROFILE_ROWS)]
    # in float64: NumPy and CuPy then find the same stripes
    profile = middle.mean(axis=0, dtype=xp.float64)  # (n_rows, n_cols)
    smooth = median_across_columns(middle, size, xp)
    offset = profile - smooth.mean(axis=0, dtype=xp.float64)
    mask = _widen(detect_stripes(offset, snr), xp)
    rows, cols = xp.nonzero(mask)
    replaced = _window_medians(ordered, rows, cols, size, xp) if rows.size else None
    ordered -= offset[None].astype(ordered.dtype)
    if replaced is not None:
        ordered[:, rows, cols] = replaced


def _window_medians(ordered, rows, cols, size, xp):
    """The ``size``-wide medians across columns of ``ordered`` (n_angles, n_rows, n_cols)
    at the columns ``(rows, cols)`` (reflected at the ends as scipy.ndimage's "reflect"),
    for every angle: (n_angles, len(rows))."""
    n_angles, n_rows, n_cols = ordered.shape
    if xp is not np and ordered.dtype == xp.float32:
        from ..cuda.running_median import MAX_SIZE, medians_at

        if size <= MAX_SIZE:
            return medians_at(xp.ascontiguousarray(ordered), rows, cols, size)
    if rows.size > FULL_MEDIAN_SHARE * n_rows * n_cols:
        return median_across_columns(ordered, size, xp)[:, rows, cols]
    half = size // 2
    window = cols[:, None] + xp.arange(-half, half + 1)[None, :]  # (K, size)
    window = xp.where(window < 0, -window - 1, window)
    window = xp.where(window >= n_cols, 2 * n_cols - 1 - window, window)
    window = xp.clip(window, 0, n_cols - 1)
    batch = max(1, GATHER_VALUES // (n_angles * size))
    medians = [
        xp.median(ordered[:, rows[k : k + batch, None], window[k : k + batch]], axis=-1)
        for k in range(0, rows.size, batch)
    ]
    return xp.concatenate(medians, axis=1).astype(ordered.dtype)


# -- wavelet-Fourier -----------------------------------------------------------------------------

MAX_WAVELET_LEVEL = 6
#: Padding of each axis before the wavelet-Fourier filter, as a share of its length.
WAVELET_PAD = 0.1


def _wavelet_fft(stack, wavelet, level, sigma, xp):
    sigma = finite_float("sigma", sigma)
    if not sigma > 0:
        raise ValueError(f"sigma: expected a positive damping width, got {sigma!r}")
    filters = wavelet_filters(wavelet)
    n_angles, _, n_cols = stack.shape
    # pad against the FFT's wrap-around: the angles with each column's mean (a stripe stays constant
    # along them), the columns with the edge values
    pad_a, pad_c = (int(np.ceil(WAVELET_PAD * n)) for n in (n_angles, n_cols))
    most = _max_level(min(n_angles + 2 * pad_a, n_cols + 2 * pad_c), len(filters[0]))
    if level is None:
        level = min(most, MAX_WAVELET_LEVEL)
    level = positive_int("level", level)
    if level > most:
        raise ValueError(
            f"level: the sinogram ({n_angles} x {n_cols}) allows at most {most} levels of '{wavelet}', got {level}"
        )
    fft = fft_module(xp)

    def damp(details):
        k = xp.fft.fftfreq(details.shape[0]) * details.shape[0]  # frequency indices
        gain = (1 - xp.exp(-k * k / (2 * sigma * sigma))).astype(stack.dtype)
        spectrum = fft.fft(details, axis=0)
        return fft.ifft(spectrum * gain.reshape((-1,) + (1,) * (details.ndim - 1)), axis=0).real.astype(details.dtype)

    padded = xp.concatenate(
        [
            xp.broadcast_to(stack.mean(axis=0, keepdims=True), (pad_a,) + stack.shape[1:]),
            stack,
            xp.broadcast_to(stack.mean(axis=0, keepdims=True), (pad_a,) + stack.shape[1:]),
        ]
    )
    padded = xp.pad(padded, ((0, 0), (0, 0), (pad_c, pad_c)), mode="edge")
    approx, bands, lengths = wavedec_ad(padded, filters, level, xp)
    bands = [(h, damp(v), d) for h, v, d in bands]
    out = waverec_ad(approx, bands, lengths, filters, xp)
    return xp.ascontiguousarray(out[pad_a : pad_a + n_angles, :, pad_c : pad_c + n_cols])


def _max_level(n: int, filter_length: int) -> int:
    """PyWavelets' dwt_max_level: the levels after which a signal is still longer than the filter."""
    if filter_length < 2:
        return 0
    return max(0, int(np.floor(np.log2(n / (filter_length - 1)))))
