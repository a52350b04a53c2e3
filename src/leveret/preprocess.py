"""Preprocessing: flat/dark-field normalisation, the minus-log transform,
centre-of-rotation estimation, zinger removal and stripe (ring) suppression.

Arrays are NumPy or CuPy (CuPy in, CuPy out); projections are
``(n_angles, n_rows, n_cols)`` or sinograms ``(n_angles, n_cols)`` as in
docs/conventions.md.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._validate import array_module, choice, finite_float, finite_vector, positive_float, positive_int

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
    if require_valid and not bool(valid.any()):
        raise ValueError("flats: the flat field is nowhere brighter than the dark field (or not finite) "
                         "in these detector rows: every projection would become zero attenuation; "
                         "check that --flat and --dark are not swapped")
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


#: Largest share of detector pixels where a flat may be no brighter than the
#: dark (dead or saturated pixels); more means swapped or wrong files.
MAX_BAD_FLAT_SHARE = 0.5


def check_flats_darks(flats, darks, image_shape):
    """Flats and darks for a whole detector, checked before a run: NumPy arrays
    of one image or a stack of ``image_shape``, finite, and the flat brighter
    than the dark in most pixels.

    Raises ValueError naming ``flats`` or ``darks`` otherwise; normalising
    with a NaN or swapped field gives a volume of zeros or NaN without any
    other sign of trouble.
    """
    image_shape = tuple(int(n) for n in image_shape)
    out = []
    for name, images in (("flats", flats), ("darks", darks)):
        images = np.asarray(images)
        _check_real(name, images)
        if images.shape != image_shape and images.shape[-len(image_shape):] != image_shape:
            raise ValueError(f"{name}: expected one image of shape {image_shape} or a stack (k, "
                             f"{', '.join(map(str, image_shape))}) matching the projections' rows and "
                             f"columns, got shape {images.shape}")
        bad = ~np.isfinite(images)
        if bad.any():
            raise ValueError(f"{name}: expected finite values, got {int(bad.sum())} NaN/Inf value(s) of "
                             f"{images.size}")
        out.append(images)
    flat = _average("flats", out[0], image_shape, np)
    dark = _average("darks", out[1], image_shape, np)
    share = float(np.mean(flat <= dark))
    if share > MAX_BAD_FLAT_SHARE:
        raise ValueError(f"flats: the flat field is not brighter than the dark field in {share:.0%} of the "
                         "detector pixels; check that --flat and --dark are not swapped")
    return out[0], out[1]


def sinogram_fields(name: str, images, n_cols: int) -> np.ndarray:
    """Flats or darks for one sinogram (n_angles, n_cols), as a stack (k, 1, n_cols).

    Accepted: one row ``(n_cols,)``, ``(1, n_cols)``, or a stack of rows
    ``(k, 1, n_cols)``. A detector image ``(n_rows, n_cols)`` is refused: which
    of its rows the sinogram was measured with is unknown, and averaging all
    of them normalises with the wrong row (errors of several percent).
    """
    images = np.asarray(images)
    _check_real(name, images)
    if images.shape == (n_cols,):
        return images[None, None, :]
    if images.ndim == 2 and images.shape == (1, n_cols):
        return images[:, None, :]
    if images.ndim == 3 and images.shape[1:] == (1, n_cols):
        return images
    raise ValueError(f"{name}: the input is one sinogram with {n_cols} columns, so give the {name} of its "
                     f"detector row, shape ({n_cols},) (for example image[row]) or a stack (k, 1, {n_cols}); "
                     f"got shape {images.shape}, whose rows would all be averaged")


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


# -- centre of rotation ------------------------------------------------------------------------

class CenterEstimate(NamedTuple):
    """Result of :func:`find_center`.

    center : float
        Rotation axis in column pixels (docs/conventions.md: column ``c`` sits at
        ``s = (c - center) det_spacing``), i.e. the ``center`` to give
        :class:`leveret.ParallelGeometry`.
    confidence : float
        In [0, 1], higher is better. "pairs": the median normalised
        cross-correlation peak of the flipped 180-degree pairs (1: the flipped
        projection matches the other exactly). "sweep": ``1 - best / median``
        of the sweep's scores (0: the metric does not discriminate). Halved
        when the estimate sits on the edge of the search range.
    method : str
        "pairs" or "sweep".
    details : dict
        "spread": robust spread of the individual estimates in pixels
        (1.4826 x median absolute deviation; 0 for a single one),
        "estimates": the individual estimates (one per pair and row for
        "pairs"; the scores for "sweep", with "centers"),
        "at_edge": the estimate is within half a pixel of the search range's
        ends, so the axis may lie beyond it.
    """
    center: float
    confidence: float
    method: str
    details: dict


# Two views count as a 180-degree pair when their angles differ by pi within this (radians).
PAIR_TOLERANCE = 1e-3


def find_center(projections_or_sinogram, angles, *, method: str = "auto", row=None, search=None,
                max_pairs: int = 8) -> CenterEstimate:
    """Estimate the rotation axis (centre of rotation) of a parallel-beam scan.

    Parameters
    ----------
    projections_or_sinogram : array, (n_angles, n_rows, n_cols) or (n_angles, n_cols)
        Line integrals (after :func:`minus_log`), NumPy or CuPy.
    angles : array (n_angles,)
        Radians.
    method : {"auto", "pairs", "sweep"}
        "pairs": 180-degree pair registration. Projections ``t`` and ``t + pi``
        (mod 2 pi, within ``PAIR_TOLERANCE``) see the object mirrored: with
        column ``c`` at ``s = c - center`` and ``p(t + pi, s) = p(t, -s)``,
        ``p(t + pi, c) = p(t, 2 center - c)``; the left-right flipped view
        ``q(c) = p(t + pi, n_cols - 1 - c)`` is therefore ``p(t, c + d)`` with
        ``d = 2 center - (n_cols - 1)``, so

            center = (n_cols - 1) / 2 + d / 2,

        where ``d`` is the shift that carries ``p(t)`` onto ``q`` (``q(c) = p(c + d)``).
        ``d`` is the peak of the FFT cross-correlation of the two (zero-padded,
        mean-removed) rows, refined to sub-pixel by a parabola through the peak
        and its neighbours. Up to ``max_pairs`` pairs and every selected row
        give one estimate each; the result is their median.
        "sweep": :func:`center_sweep` (negativity metric) over ``search`` at
        1-pixel steps, then at 0.1 pixel around the best, on one row (``row``,
        default the middle one).
        "auto": "pairs" when the angles hold a 180-degree pair, else "sweep".
    row : int, sequence of ints or None
        Detector rows to use (projection stacks only); default: all rows
        (pairs) or the middle row (sweep).
    search : (float, float), optional
        Range of columns the centre may lie in; default the middle half of
        the detector, ``[(n_cols-1)/4, 3(n_cols-1)/4]``.
    max_pairs : int
        Most 180-degree pairs used (evenly chosen among those found).

    Returns
    -------
    CenterEstimate
    """
    xp = array_module(projections_or_sinogram)
    data = xp.asarray(projections_or_sinogram)
    _check_real("projections_or_sinogram", data)
    if data.ndim == 2:
        data = data[:, None, :]
    elif data.ndim != 3:
        raise ValueError("projections_or_sinogram: expected shape (n_angles, n_rows, n_cols) or "
                         f"(n_angles, n_cols), got shape {data.shape}")
    n_angles, n_rows, n_cols = data.shape
    angles = finite_vector("angles", angles, length=n_angles)
    method = choice("method", method, ("auto", "pairs", "sweep"))
    lo, hi = _search_range(search, n_cols)
    if row is not None:
        rows = np.atleast_1d(np.asarray(row))
        if rows.dtype.kind not in "iu" or rows.ndim != 1 or rows.min() < 0 or rows.max() >= n_rows:
            raise ValueError(f"row: expected row indices in [0, {n_rows - 1}], got {row!r}")
        data = data[:, rows, :]
    pairs = _pairs(angles)
    if method == "auto":
        method = "pairs" if pairs else "sweep"
    if method == "pairs":
        if not pairs:
            raise ValueError("method: 'pairs' needs two views 180 degrees apart "
                             f"(within {PAIR_TOLERANCE} rad); the angles have none")
        est = _center_from_pairs(data, pairs, lo, hi, positive_int("max_pairs", max_pairs), xp)
    else:
        sino = data[:, data.shape[1] // 2, :] if row is None or data.shape[1] > 1 else data[:, 0, :]
        est = _center_from_sweep(sino, angles, lo, hi)
    # On the edge of the search range the estimate is a bound, not a measurement:
    # the best match may lie beyond it, however well the views match there.
    at_edge = min(est.center - lo, hi - est.center) < 0.5
    est.details["at_edge"] = at_edge
    return est._replace(confidence=est.confidence / 2) if at_edge else est


def center_sweep(sinogram, angles, centers, *, metric: str = "negativity", filter: str = "ram-lak",
                 det_spacing: float = 1.0):
    """Score trial centres by reconstructing one slice at each (lower score = better).

    Each centre ``c`` in ``centers`` gives ``leveret.fbp(sinogram,
    ParallelGeometry(angles, n_cols, center=c))`` on the default volume (the
    ``n_cols x n_cols`` square centred on the axis), scored by ``metric``:

    - "negativity": ``sum(min(f, 0)^2) / sum(f^2)``, the share of the image's
      energy in negative values. A wrong centre turns edges into
      positive/negative crescents; attenuation is non-negative.
    - "entropy": Shannon entropy of the 256-bin histogram of the image over
      its range (Donath et al., J. Opt. Soc. Am. A 23, 1048, 2006).

    Parameters
    ----------
    sinogram : array (n_angles, n_cols)
        Line integrals, NumPy or CuPy (then reconstructed on the GPU).
    angles : array (n_angles,)
    centers : array of floats
        Trial centres in column pixels, each in ``[0, n_cols - 1]``.

    Returns
    -------
    numpy.ndarray (len(centers),) float64
        The scores; ``centers[argmin]`` is the sweep's best centre.
    """
    from .algorithms.parallel_fbp import fbp
    from .geometry import ParallelGeometry

    xp = array_module(sinogram)
    sinogram = xp.asarray(sinogram)
    _check_real("sinogram", sinogram)
    if sinogram.ndim != 2:
        raise ValueError(f"sinogram: expected shape (n_angles, n_cols), got shape {sinogram.shape}")
    metric = choice("metric", metric, ("negativity", "entropy"))
    centers = finite_vector("centers", centers)
    scores = np.empty(centers.size)
    for k, c in enumerate(centers):
        g = ParallelGeometry(angles, sinogram.shape[1], center=float(c), det_spacing=det_spacing)
        scores[k] = _score(fbp(sinogram, g, filter=filter), metric, xp)
    return scores


def _score(img, metric, xp):
    img = img.astype(xp.float64)
    if metric == "negativity":
        neg = xp.minimum(img, 0)
        return float((neg * neg).sum() / max(float((img * img).sum()), 1e-300))
    lo, hi = float(img.min()), float(img.max())
    hist, _ = xp.histogram(img, bins=256, range=(lo, hi if hi > lo else lo + 1))
    p = hist[hist > 0] / img.size
    return float(-(p * xp.log(p)).sum())


def _search_range(search, n_cols):
    if search is None:
        return (n_cols - 1) / 4, 3 * (n_cols - 1) / 4
    try:
        lo, hi = (finite_float("search", s) for s in search)
    except TypeError:
        raise ValueError(f"search: expected (low, high) columns, got {search!r}") from None
    if not 0 <= lo < hi <= n_cols - 1:
        raise ValueError(f"search: expected 0 <= low < high <= {n_cols - 1}, got {search!r}")
    return lo, hi


def _pairs(angles):
    """(i, j) index pairs of views pi apart (mod 2 pi)."""
    out = []
    for i, a in enumerate(angles):
        diff = np.abs(np.mod(angles - a, 2 * np.pi) - np.pi)       # |(a_j - a) - pi| mod 2 pi
        j = int(np.argmin(np.where(np.arange(angles.size) > i, diff, np.inf))) if i + 1 < angles.size else -1
        if j > i and diff[j] <= PAIR_TOLERANCE:
            out.append((i, j))
    return out


def _center_from_pairs(data, pairs, lo, hi, max_pairs, xp):
    n_cols = data.shape[2]
    if len(pairs) > max_pairs:
        pick = np.unique(np.linspace(0, len(pairs) - 1, max_pairs).round().astype(int))
        pairs = [pairs[k] for k in pick]
    i, j = np.array(pairs).T
    a = data[xp.asarray(i)].astype(xp.float64)                     # (P, R, C)
    b = data[xp.asarray(j)][..., ::-1].astype(xp.float64)          # flipped partners
    # Correlate the column derivatives: a constant background drops out, and zero
    # padding adds no edges at the detector ends that would pull the peak to lag 0.
    a = xp.diff(a, axis=-1)
    b = xp.diff(b, axis=-1)
    n_fft = 2 * n_cols
    # corr[m] = sum_c a(c + m) b(c); with b(c) = a(c + d) it peaks at m = d.
    cross = xp.fft.rfft(a, n_fft) * xp.conj(xp.fft.rfft(b, n_fft))   # (P, R, F)
    corr = xp.fft.irfft(cross, n_fft)
    norm = xp.sqrt((a * a).sum(-1) * (b * b).sum(-1))
    keep = norm.reshape(-1) > 0
    norm = xp.where(norm > 0, norm, 1)[..., None]
    corr = (corr / norm).reshape(-1, n_fft)[keep]
    cross = (cross / norm).reshape(-1, cross.shape[-1])[keep]
    if corr.shape[0] == 0:
        raise ValueError("projections_or_sinogram: the paired views are constant; no centre to find")
    shifts = xp.arange(n_fft)
    shifts[shifts >= n_cols] -= n_fft                               # lag of each FFT bin
    d_lo, d_hi = 2 * lo - (n_cols - 1), 2 * hi - (n_cols - 1)
    allowed = (shifts >= np.floor(d_lo)) & (shifts <= np.ceil(d_hi))
    d = shifts[xp.argmax(xp.where(allowed, corr, -xp.inf), axis=1)].astype(xp.float64)
    # Sub-pixel: the correlation is a trigonometric polynomial in the lag; evaluate it
    # (DFT upsampling, Guizar-Sicairos et al. 2008) on ever finer grids around the peak.
    freq = xp.arange(cross.shape[-1], dtype=xp.float64)
    w = xp.full(freq.shape, 2.0)
    w[0] = 1.0
    if n_fft % 2 == 0:
        w[-1] = 1.0
    for half, step in ((1.0, 0.05), (0.05, 0.002)):
        u = xp.arange(-half, half + step / 2, step)
        lags = d[:, None] + u[None, :]                               # (N, U)
        phase = xp.exp(2j * np.pi / n_fft * lags[..., None] * freq)  # (N, U, F)
        values = (phase * (w * cross)[:, None, :]).real.sum(-1) / n_fft
        best = xp.argmax(values, axis=1)
        d = lags[xp.arange(d.size), best]
        peak = values[xp.arange(d.size), best]
    d, peak = _to_numpy(d), _to_numpy(peak)
    estimates = (n_cols - 1) / 2 + d / 2
    weights_ok = peak > 0
    est = estimates[weights_ok] if weights_ok.any() else estimates
    center = float(np.median(est))
    spread = float(1.4826 * np.median(np.abs(est - center))) if est.size > 1 else 0.0
    return CenterEstimate(center=center, confidence=float(np.clip(np.median(peak), 0, 1)),
                          method="pairs",
                          details={"spread": spread, "estimates": estimates, "peaks": peak,
                                   "pairs": pairs})


def _center_from_sweep(sino, angles, lo, hi):
    coarse = np.arange(np.ceil(lo), np.floor(hi) + 1)
    if coarse.size < 3:
        coarse = np.linspace(lo, hi, 5)
    s1 = center_sweep(sino, angles, coarse)
    best = coarse[int(np.argmin(s1))]
    fine = np.round(np.arange(max(lo, best - 1), min(hi, best + 1) + 1e-9, 0.1), 6)
    s2 = center_sweep(sino, angles, fine)
    k = int(np.argmin(s2))
    center = float(fine[k])
    if 0 < k < fine.size - 1:                                         # parabola through the minimum
        y0, y1, y2 = s2[k - 1], s2[k], s2[k + 1]
        den = y0 - 2 * y1 + y2
        if den > 0:
            center += float(np.clip(0.5 * (y0 - y2) / den, -0.5, 0.5)) * (fine[1] - fine[0])
    med = float(np.median(s1))
    conf = float(np.clip(1 - s2[k] / med, 0, 1)) if med > 0 else 0.0
    return CenterEstimate(center=center, confidence=conf, method="sweep",
                          details={"spread": float(fine[1] - fine[0]) if fine.size > 1 else 1.0,
                                   "centers": np.concatenate([coarse, fine]),
                                   "estimates": np.concatenate([s1, s2])})


def _to_numpy(arr):
    return arr.get() if hasattr(arr, "get") else np.asarray(arr)


# -- zingers -----------------------------------------------------------------------------------

def remove_zingers(projections, *, threshold: float = 6.0, size: int = 3, axes: str = "image"):
    """Replace outliers (zingers, hot pixels) by the local median.

    A pixel is an outlier when ``|x - median_filter(x)| > threshold * sigma``,
    where ``sigma = 1.4826 * median(|x[i+1] - x[i]|) / sqrt(2)`` (neighbours
    along the columns, or along the angles for ``axes="angle"``, over the
    whole array) is a robust estimate of the pixel noise: edges and zingers
    are too few to move the median. When that is 0 (noise-free data) the mean
    of ``|x - median_filter(x)|`` is used instead. Outliers get the filtered
    value; every other pixel is returned unchanged. Works on raw counts (bright
    zingers), transmission or line integrals (dark ones): both signs count.

    Parameters
    ----------
    projections : array, (n_angles, n_rows, n_cols) or (n_angles, n_cols)
        NumPy (scipy.ndimage) or CuPy (cupyx.scipy.ndimage).
    threshold : float
        In units of sigma.
    size : int
        Median filter width (odd, >= 3).
    axes : {"image", "angle"}
        "image": the ``size x size`` median over the last two axes, i.e.
        within each projection for a stack, over angles and columns for a
        sinogram. "angle": the ``size``-long median along the angle axis
        (pixel by pixel in time; keeps fine image detail, needs a fine angular step).

    Returns
    -------
    array, float32 (float64 for float64 input), shape of ``projections``
    """
    xp, x = _projection_like("projections", projections)
    threshold = positive_float("threshold", threshold)
    size = _odd_size(size)
    axes = choice("axes", axes, ("image", "angle"))
    x = x.astype(xp.float64 if x.dtype == xp.float64 else xp.float32)
    footprint = [1] * x.ndim
    if axes == "image":
        footprint[-1] = footprint[-2] = size
    else:
        footprint[0] = size
    med = _ndimage(xp).median_filter(x, size=tuple(footprint), mode="mirror")
    dev = xp.abs(x - med)
    sigma = _noise_sigma(x, 0 if axes == "angle" else -1, xp)
    if sigma == 0:
        sigma = float(dev.mean())
    if sigma == 0:
        return x
    bad = dev > threshold * sigma
    return xp.where(bad, med, x)


def _noise_sigma(x, axis, xp):
    step = xp.abs(xp.diff(x, axis=axis))
    return 1.4826 * float(xp.median(step)) / np.sqrt(2)


# -- stripes (ring artefacts) ------------------------------------------------------------------

def remove_stripes(sinogram_or_projections, *, method: str = "sort", size: int = 5):
    """Suppress stripes in sinograms (ring artefacts in the reconstruction).

    Stripes are columns whose response is off by a (possibly angle-dependent)
    offset or gain: defective or miscalibrated detector pixels.

    Methods (``size``: the filter width across columns, wider than the stripes):

    - "sort" (default): the sorting-based method of Vo, Atwood and Drakopoulos,
      "Superior techniques for eliminating ring artifacts in X-ray
      micro-tomography", Optics Express 26, 28396 (2018), algorithm 3: sort
      each column along the angle axis, median-filter the sorted sinogram
      across columns (``size`` wide), and put every value back at its angle.
      Sorting turns a stripe into a column that differs from its neighbours
      over all of its length, which the median removes; object structure is
      left mostly intact. Handles constant and intensity-dependent stripes.
    - "mean": normalisation by the smoothed column mean (in the spirit of
      Raven, Rev. Sci. Instrum. 69, 2978, 1998): subtract from each column
      its mean over angles minus the ``size``-wide median of those means
      across columns. Removes constant offsets only.

    (The wavelet-Fourier filter of Münch et al. 2009 needs a wavelet library,
    which leveret does not depend on.)

    Parameters
    ----------
    sinogram_or_projections : array, (n_angles, n_cols) or (n_angles, n_rows, n_cols)
        Line integrals, NumPy or CuPy; each detector row's sinogram is treated apart.
    method : {"sort", "mean"}
    size : int
        Odd width, >= 3, across columns.

    Returns
    -------
    array, float32 (float64 for float64 input), shape of the input
    """
    xp, x = _projection_like("sinogram_or_projections", sinogram_or_projections)
    method = choice("method", method, ("sort", "mean"))
    size = _odd_size(size)
    x = x.astype(xp.float64 if x.dtype == xp.float64 else xp.float32)
    footprint = (1,) * (x.ndim - 1) + (size,)
    ndi = _ndimage(xp)
    if method == "mean":
        means = x.mean(axis=0, keepdims=True)
        return x - (means - ndi.median_filter(means, size=footprint, mode="reflect"))
    order = xp.argsort(x, axis=0)
    smoothed = ndi.median_filter(xp.take_along_axis(x, order, axis=0), size=footprint,
                                 mode="reflect")
    return xp.take_along_axis(smoothed, xp.argsort(order, axis=0), axis=0)


def _projection_like(name: str, arr):
    """(xp, array) for a sinogram (n_angles, n_cols) or a stack (n_angles, n_rows, n_cols)."""
    xp = array_module(arr)
    x = xp.asarray(arr)
    _check_real(name, x)
    if x.ndim not in (2, 3):
        raise ValueError(f"{name}: expected shape (n_angles, n_cols) or "
                         f"(n_angles, n_rows, n_cols), got shape {x.shape}")
    return xp, x


def _odd_size(size) -> int:
    size = positive_int("size", size)
    if size < 3 or size % 2 == 0:
        raise ValueError(f"size: expected an odd integer >= 3, got {size}")
    return size


def _ndimage(xp):
    if xp is np:
        import scipy.ndimage
        return scipy.ndimage
    import cupyx.scipy.ndimage
    return cupyx.scipy.ndimage
