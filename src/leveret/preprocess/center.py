"""Centre-of-rotation estimation: 180-degree pair registration and a
reconstruction sweep."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .._validate import array_module, choice, finite_float, finite_vector, positive_int
from ._common import check_real, to_numpy


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
    check_real("projections_or_sinogram", data)
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
    from ..algorithms.parallel_fbp import fbp
    from ..geometry import ParallelGeometry

    xp = array_module(sinogram)
    sinogram = xp.asarray(sinogram)
    check_real("sinogram", sinogram)
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
    d, peak = to_numpy(d), to_numpy(peak)
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

