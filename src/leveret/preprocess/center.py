"""Centre-of-rotation estimation: 180-degree pair registration, the
Fourier-space method of Vo et al. (2014) and a reconstruction sweep."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .._validate import array_module, choice, finite_float, finite_vector, positive_int
from ._common import check_real, fft_module, next_fast_len, select_rows, to_numpy


class CenterEstimate(NamedTuple):
    """Result of :func:`find_center`.

    center : float
        Rotation axis in column pixels (docs/conventions.md: column ``c`` sits at
        ``s = (c - center) det_spacing``), i.e. the ``center`` to give
        :class:`leveret.ParallelGeometry`.
    confidence : float
        In [0, 1], higher is better. "pairs": the median normalised
        cross-correlation peak of the flipped 180-degree pairs (1: the flipped
        projection matches the other exactly). "sweep" and "vo": ``1 - best /
        median`` of the scores (0: the metric does not discriminate). Halved
        when the estimate sits on the edge of the search range.
    method : str
        "pairs", "vo" or "sweep".
    details : dict
        "spread": robust spread of the individual estimates in pixels
        (1.4826 x median absolute deviation; 0 for a single one),
        "estimates": the individual estimates (one per pair and row for
        "pairs"; the scores for "sweep" and "vo", with "centers"),
        "at_edge": the estimate is within half a pixel of the search range's
        ends, so the axis may lie beyond it.
    """

    center: float
    confidence: float
    method: str
    details: dict


# Two views count as a 180-degree pair when their angles differ by pi within this (radians).
PAIR_TOLERANCE = 1e-3

#: Object radius as a share of the detector's half width that bounds the
#: "forbidden" double wedge of :func:`find_center` (method "vo").
VO_RATIO = 1.0
#: Angular frequencies up to this are left out of the wedge: rings and the
#: slow drifts of a scan live there whatever the centre.
VO_DROP = 2


def find_center(
    projections_or_sinogram,
    angles,
    *,
    method: str = "auto",
    row=None,
    search=None,
    max_pairs: int = 8,
    ratio: float = VO_RATIO,
) -> CenterEstimate:
    """Estimate the rotation axis (centre of rotation) of a parallel-beam scan.

    Parameters
    ----------
    projections_or_sinogram : array, (n_angles, n_rows, n_cols) or (n_angles, n_cols)
        Line integrals (after :func:`minus_log`), NumPy or CuPy.
    angles : array (n_angles,)
        Radians.
    method : {"auto", "pairs", "vo", "sweep"}
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
        "vo": the Fourier-space method of Vo, Drakopoulos, Atwood and Reinhard
        (2014). The views of the first half-turn ``[angles[0], angles[0] +
        pi)``, followed by the same views mirrored and shifted by ``d`` (the
        views a half-turn later if the axis is at ``(n_cols - 1 + d) / 2``),
        form a 360-degree sinogram. When it is consistent, its 2D Fourier
        transform has no energy in the double wedge ``|m| > R omega`` (``m``:
        angular frequency, ``omega``: spatial frequency in radians per pixel,
        ``R = ratio * n_cols / 2``: the object's radius); a wrong centre puts
        a seam at every half-turn, whose energy spreads there. The wedge's
        energy, each coefficient weighted by the inverse magnitude there, is
        found for every whole ``d`` at once with one FFT, then at steps of
        0.01 around the smallest. Needs no 180-degree pair (0 to 179 degree
        scans), uses the first half-turn of 360-degree scans, and is not
        pulled by rings (constant along the angles, they stay at low ``m``,
        left out of the wedge). The rows are averaged into one sinogram
        (they share the axis). About 0.4 s on the CPU for 1800 views of
        2048 columns.
        "sweep": :func:`center_sweep` (negativity metric) over ``search`` at
        1-pixel steps, then at 0.1 pixel around the best, on one row (``row``,
        default the middle one).
        "auto": "vo" for 360-degree scans, for scans without a 180-degree
        pair (0 to 179 degrees) and for scans with strong rings (a few
        columns of the rows' mean sinogram stand out of their neighbours at
        every angle by more than ``RING_Z`` standard errors);
        "pairs" for the other 180-degree scans; "sweep" when the views do
        not cover a half-turn.
    row : int, sequence of ints or None
        Detector rows to use (projection stacks only); default: all rows
        (pairs, vo) or the middle row (sweep).
    search : (float, float), optional
        Range of columns the centre may lie in; default the middle half of
        the detector, ``[(n_cols-1)/4, 3(n_cols-1)/4]``.
    max_pairs : int
        Most 180-degree pairs used (evenly chosen among those found).
    ratio : float
        "vo": the object's radius as a share of the detector's half width
        (1: the object fills the field of view), > 0.

    Returns
    -------
    CenterEstimate

    Raises
    ------
    ValueError
        Naming ``method`` where the angles do not allow it ("pairs" without a
        180-degree pair, "vo" on views that do not cover a half-turn),
        ``search``, ``row``, ``ratio`` or the data.
    """
    xp = array_module(projections_or_sinogram)
    data = xp.asarray(projections_or_sinogram)
    check_real("projections_or_sinogram", data)
    if data.ndim == 2:
        data = data[:, None, :]
    elif data.ndim != 3:
        raise ValueError(
            "projections_or_sinogram: expected shape (n_angles, n_rows, n_cols) or "
            f"(n_angles, n_cols), got shape {data.shape}"
        )
    n_angles, n_rows, n_cols = data.shape
    angles = finite_vector("angles", angles, length=n_angles)
    method = choice("method", method, ("auto", "pairs", "vo", "sweep"))
    ratio = finite_float("ratio", ratio)
    if not ratio > 0:
        raise ValueError(
            f"ratio: expected the object's radius as a positive share of the detector's half width, got {ratio!r}"
        )
    lo, hi = _search_range(search, n_cols)
    data = select_rows(data, row, xp)
    pairs = _pairs(angles)
    if method == "auto":
        method = _auto_method(data, angles, pairs, xp)
    if method == "pairs":
        if not pairs:
            raise ValueError(
                f"method: 'pairs' needs two views 180 degrees apart (within {PAIR_TOLERANCE} rad); the angles have none"
            )
        est = _center_from_pairs(data, pairs, lo, hi, positive_int("max_pairs", max_pairs), xp)
    elif method == "vo":
        est = _center_vo(data.mean(axis=1, dtype=xp.float64), angles, lo, hi, ratio, VO_DROP, xp)
    else:
        sino = data[:, data.shape[1] // 2, :] if row is None or data.shape[1] > 1 else data[:, 0, :]
        est = _center_from_sweep(sino, angles, lo, hi)
    # On the edge of the search range the estimate is a bound, not a measurement:
    # the best match may lie beyond it, however well the views match there.
    at_edge = min(est.center - lo, hi - est.center) < 0.5
    est.details["at_edge"] = at_edge
    return est._replace(confidence=est.confidence / 2) if at_edge else est


def center_sweep(
    sinogram, angles, centers, *, metric: str = "negativity", filter: str = "ram-lak", det_spacing: float = 1.0
):
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
        raise TypeError(f"search: expected (low, high) columns, got {search!r}") from None
    if not 0 <= lo < hi <= n_cols - 1:
        raise ValueError(f"search: expected 0 <= low < high <= {n_cols - 1}, got {search!r}")
    return lo, hi


def _pairs(angles):
    """(i, j) index pairs of views pi apart (mod 2 pi)."""
    out = []
    for i, a in enumerate(angles):
        diff = np.abs(np.mod(angles - a, 2 * np.pi) - np.pi)  # |(a_j - a) - pi| mod 2 pi
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
    a = data[xp.asarray(i)].astype(xp.float64)  # (P, R, C)
    b = data[xp.asarray(j)][..., ::-1].astype(xp.float64)  # flipped partners
    # Correlate the column derivatives: a constant background drops out, and zero
    # padding adds no edges at the detector ends that would pull the peak to lag 0.
    a = xp.diff(a, axis=-1)
    b = xp.diff(b, axis=-1)
    n_fft = 2 * n_cols
    # corr[m] = sum_c a(c + m) b(c); with b(c) = a(c + d) it peaks at m = d.
    cross = xp.fft.rfft(a, n_fft) * xp.conj(xp.fft.rfft(b, n_fft))  # (P, R, F)
    corr = xp.fft.irfft(cross, n_fft)
    norm = xp.sqrt((a * a).sum(-1) * (b * b).sum(-1))
    keep = norm.reshape(-1) > 0
    norm = xp.where(norm > 0, norm, 1)[..., None]
    corr = (corr / norm).reshape(-1, n_fft)[keep]
    cross = (cross / norm).reshape(-1, cross.shape[-1])[keep]
    if corr.shape[0] == 0:
        raise ValueError("projections_or_sinogram: the paired views are constant; no centre to find")
    shifts = xp.arange(n_fft)
    shifts[shifts >= n_cols] -= n_fft  # lag of each FFT bin
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
        lags = d[:, None] + u[None, :]  # (N, U)
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
    return CenterEstimate(
        center=center,
        confidence=float(np.clip(np.median(peak), 0, 1)),
        method="pairs",
        details={"spread": spread, "estimates": estimates, "peaks": peak, "pairs": pairs},
    )


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
    if 0 < k < fine.size - 1:  # parabola through the minimum
        y0, y1, y2 = s2[k - 1], s2[k], s2[k + 1]
        den = y0 - 2 * y1 + y2
        if den > 0:
            center += float(np.clip(0.5 * (y0 - y2) / den, -0.5, 0.5)) * (fine[1] - fine[0])
    med = float(np.median(s1))
    conf = float(np.clip(1 - s2[k] / med, 0, 1)) if med > 0 else 0.0
    return CenterEstimate(
        center=center,
        confidence=conf,
        method="sweep",
        details={
            "spread": float(fine[1] - fine[0]) if fine.size > 1 else 1.0,
            "centers": np.concatenate([coarse, fine]),
            "estimates": np.concatenate([s1, s2]),
        },
    )


# -- Vo et al. 2014: sinogram consistency in Fourier space -----------------------------------------


def _center_vo(sino, angles, lo, hi, ratio, drop, xp):
    """The Fourier-space centre of Vo, Drakopoulos, Atwood and Reinhard (2014) (see :func:`find_center`)."""
    n_cols = sino.shape[1]
    half = _half_turn(angles)
    a = sino[xp.asarray(half)].astype(xp.float32)
    n = a.shape[0]
    fft = fft_module(xp)
    size = next_fast_len(2 * n_cols)
    # The double wedge where a consistent 360-degree sinogram of an object inside radius
    # R = ratio * n_cols / 2 has no energy: |m| > R omega (m: angular frequency, omega = 2 pi k / size),
    # |m| > drop, k >= 1; and k only up to where the allowed band |m| <= R omega reaches the angular
    # Nyquist limit n: beyond it too few views alias the object's own energy into the wedge.
    slope = ratio * np.pi * n_cols / size  # R omega per k
    k_max = max(1, min(size // 2, int(n / slope)))
    full = fft.rfft(a, size, axis=1)  # (n, size // 2 + 1)
    share = _signal_share(full, xp)[: k_max + 1]
    rows = full[:, : k_max + 1]  # (n, K)
    spectrum_a = fft.fft(rows, 2 * n, axis=0)  # (2n, K): [A; 0]
    k = xp.arange(k_max + 1, dtype=xp.float32)
    m = xp.asarray(np.abs(np.fft.fftfreq(2 * n) * 2 * n).astype(np.float32))
    # The mirrored half-turn p(t + pi, c) = p(t, n_cols - 1 - c), before its shift, needs no FFT of
    # its own: the DFT of a reversed real row is a phase times the conjugate of the row's DFT, and
    # its angular DFT that at -m; placed at rows n..2n-1 it changes sign at odd m.
    reversed_m = xp.concatenate([spectrum_a[:1], spectrum_a[:0:-1]])
    sign = xp.asarray(np.where(np.arange(2 * n) % 2 == 0, 1, -1).astype(np.float32))
    mirror = xp.exp(-2j * np.pi * k.astype(xp.float64) * (n_cols - 1) / size).astype(xp.complex64)
    spectrum_b = (sign[:, None] * mirror[None, :]) * xp.conj(reversed_m)
    wedge = (m[:, None] > slope * k[None, :]) & (m[:, None] > drop) & (k[None, :] >= 1)
    # |A + shifted B|^2 = |A|^2 + |B|^2 + 2 Re(conj(A) shifted B): the last term for every shift at
    # once is one FFT over k of the (weighted) sum over m. Each coefficient's energy is divided by
    # the magnitude of the two halves' there, so that weak and strong frequencies weigh more alike
    # (Vo et al. average magnitudes): the strongest, at low frequencies, carry the inconsistencies
    # of real data beyond the centre's (an object reaching out of the field of view, drifts).
    energy = (spectrum_a.real**2 + spectrum_a.imag**2) + (spectrum_b.real**2 + spectrum_b.imag**2)
    weight = wedge / xp.sqrt(energy + 1e-12 * float(energy.mean()) + 1e-30)
    weight *= share[None, :]  # less where noise dominates
    total = float((weight * energy).sum(dtype=xp.float64))
    if not total > 0:
        raise ValueError("projections_or_sinogram: the sinogram has no structure to find a centre from")
    cross = (weight * xp.conj(spectrum_a) * spectrum_b).sum(axis=0, dtype=xp.complex128)  # (K,)
    # mismatch(d) = 1 + 2 Re sum_k cross[k] exp(-2 pi i k d / size) / total, d = 2 center - (n_cols - 1)
    whole = to_numpy(fft.fft(cross, size)).real
    d_lo, d_hi = 2 * lo - (n_cols - 1), 2 * hi - (n_cols - 1)
    lags = np.arange(np.ceil(d_lo), np.floor(d_hi) + 1).astype(np.int64)
    if lags.size == 0:
        lags = np.array([int(round((d_lo + d_hi) / 2))])
    coarse = 1 + 2 * whole[lags % size] / total
    best = float(lags[int(np.argmin(coarse))])
    fine = np.clip(best + np.arange(-1.0, 1.0 + 1e-9, 0.01), d_lo, d_hi)
    phase = np.exp(-2j * np.pi * np.outer(fine, np.arange(k_max + 1)) / size)
    scores = 1 + 2 * (phase @ to_numpy(cross)).real / total
    d = float(fine[int(np.argmin(scores))])
    center = (n_cols - 1 + d) / 2
    median = float(np.median(coarse))
    confidence = float(np.clip(1 - float(scores.min()) / median, 0, 1)) if median > 0 else 0.0
    return CenterEstimate(
        center=center,
        confidence=confidence,
        method="vo",
        details={"spread": 0.005, "centers": (n_cols - 1 + lags) / 2, "estimates": coarse, "views": int(n)},
    )


def _signal_share(rows, xp):
    """Per spatial frequency k, the share of the views' power above the noise floor,
    ``max(0, 1 - noise / power(k))`` (a Wiener factor); the floor is the median power of the
    highest quarter of the frequencies of the whole row (white noise is flat; the object's
    spectrum falls off long before)."""
    power = (rows.real**2 + rows.imag**2).mean(axis=0)
    floor = float(xp.median(power[3 * power.shape[0] // 4 :]))
    return xp.clip(1 - floor / xp.maximum(power, 1e-30), 0, 1).astype(xp.float32)


def _half_turn(angles):
    """Indices of the views of the first half-turn ``[angles[0], angles[0] + pi)`` in angle order,
    without a view that repeats the first one mirrored; ValueError unless they cover it."""
    rel = np.mod(angles - angles[0], 2 * np.pi)
    keep = np.flatnonzero(rel < np.pi - PAIR_TOLERANCE)
    keep = keep[np.argsort(rel[keep], kind="stable")]
    steps = np.diff(rel[keep])
    step = float(np.median(steps)) if steps.size else np.pi
    covered = float(rel[keep][-1]) + step if keep.size else 0.0
    if keep.size < 8 or covered < np.pi - 1.5 * step or (steps.size and steps.max() > 3 * step):
        raise ValueError(
            f"method: 'vo' needs views over a half-turn (180 degrees in even steps); these "
            f"cover {np.degrees(covered):.1f} degrees of it with {keep.size} views"
        )
    return keep


#: Rings, for find_center's "auto": a column whose difference from the median
#: of its 5 neighbours has a mean over the angles beyond this many standard
#: errors of that mean stands out at every angle (a stripe); object structure
#: moves across the columns with the angle. Measured on the mean sinogram of the
#: bundled scan's 16 middle rows: at most 2 columns above 16 (its faint rings);
#: stripes of 0.05 on 1 % noise: 45, on 2 %: about 23.
RING_Z = 20.0
#: ...and this many such columns, at most RING_SHARE of them (more is an object
#: that is round about the axis: its sinogram is constant along the angles too)
#: and each off by more than RING_LEVEL times the sinogram's largest value,
#: make a scan one with rings.
RING_COLUMNS = 3
RING_SHARE = 0.1
RING_LEVEL = 1e-3


def _auto_method(data, angles, pairs, xp) -> str:
    """find_center's choice for "auto" (see its docstring)."""
    try:
        _half_turn(angles)
    except ValueError:
        return "pairs" if pairs else "sweep"
    span = float(np.ptp(np.unwrap(np.sort(np.mod(angles - angles[0], 2 * np.pi)))))
    step = float(np.median(np.diff(np.sort(np.mod(angles - angles[0], 2 * np.pi)))))
    if not pairs or span >= 2 * np.pi - 1.5 * step:
        return "vo"
    return "vo" if _has_rings(data.mean(axis=1, dtype=xp.float64), xp) else "pairs"


def _has_rings(sino, xp) -> bool:
    """Whether at least RING_COLUMNS columns of ``sino`` (n_angles, n_cols) are stripes (RING_Z)."""
    from ._common import ndimage_module

    if sino.shape[1] < 8 or sino.shape[0] < 8:
        return False
    deviation = sino - ndimage_module(xp).median_filter(sino, size=(1, 5), mode="reflect")
    offset = xp.abs(deviation.mean(axis=0))
    level = float(xp.abs(sino).max())
    z = offset / xp.maximum(deviation.std(axis=0) / np.sqrt(sino.shape[0]), 1e-12 * level + 1e-300)
    stripes = int(((z > RING_Z) & (offset > RING_LEVEL * level)).sum())
    return RING_COLUMNS <= stripes <= RING_SHARE * sino.shape[1]
