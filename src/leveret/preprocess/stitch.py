"""360-degree scans with the rotation axis near one edge of the detector
("half acquisition", an offset axis): finding the axis and the overlap, and
stitching each view with the mirrored view 180 degrees later into 180-degree
data of nearly twice the width.

A view at ``t + pi`` sees the object mirrored: ``p(t + pi, s) = p(t, -s)``.
With the axis at column ``center`` near the right edge, the detector covers
``s`` from ``-center`` to ``n_cols - 1 - center`` at ``t`` (mostly the left
half of the object), and the mirrored view at ``t + pi`` covers the right
half; both see the ``2 (n_cols - 1 - center) + 1`` columns around the axis
(the overlap).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .._validate import finite_float, finite_vector, positive_int
from ._common import fft_module, projection_like, select_rows, to_numpy

# A 360-degree scan's view at t + pi may lie between two views: it is interpolated
# between them when they are at most this many times the median angular step apart.
MAX_GAP_STEPS = 2.5


class Center360(NamedTuple):
    """Result of :func:`find_center_360`.

    center : float
        The rotation axis in column pixels of the detector (the ``center`` of
        :func:`half_acquisition`).
    side : str
        "right" or "left": the edge of the detector the axis is nearer to.
    overlap : float
        Width in columns of the part of the object both a view and its
        mirrored opposite see, ``2 min(center, n_cols - 1 - center) + 1``.
    confidence : float
        In [0, 1]: one minus the normalised mismatch of the overlapping
        columns at the estimate (1: they match exactly).
    details : dict
        "mismatch": the mismatch over the trial lags, "lags" (in columns,
        ``2 center - (n_cols - 1)``), "pairs": the view index pairs used.
    """

    center: float
    side: str
    overlap: float
    confidence: float
    details: dict


class HalfAcquisition(NamedTuple):
    """Result of :func:`half_acquisition`: 180-degree data of the doubled width.

    projections : array, (n_views, n_rows, width) or (n_views, width)
        The stitched views (NumPy or CuPy, as the input).
    angles : numpy.ndarray (n_views,)
        Their angles: the input's views in ``[angles[0], angles[0] + pi)``.
    center : float
        The rotation axis in columns of the stitched detector:
        ``ParallelGeometry(angles, width, center=center)`` is their geometry.
    overlap : tuple of int
        The first and last stitched column where both views contribute.
    """

    projections: object
    angles: np.ndarray
    center: float
    overlap: tuple


def half_acquisition(projections, angles, center):
    """Stitch a 360-degree half-acquisition scan into 180-degree data of the doubled width.

    Each view at ``t`` in ``[angles[0], angles[0] + pi)`` is joined with the
    view at ``t + pi`` mirrored left-right (linearly interpolated between the
    two nearest views when no view lies exactly there, and between columns
    when ``2 center`` is not a whole number). In the overlap both are blended
    with linear weights that fall to 0 at each view's own edge, so that a
    difference between them (flat-field drift, a slightly wrong centre)
    fades across the overlap instead of making a seam. ``fbp`` of the result
    with ``ParallelGeometry(result.angles, width, center=result.center)``
    reconstructs the whole field of view, a disk of radius about ``center``
    (or ``n_cols - 1 - center``) pixels.

    Parameters
    ----------
    projections : array, (n_angles, n_rows, n_cols) or sinogram (n_angles, n_cols)
        Line integrals over 360 degrees, NumPy or CuPy; each detector row is
        stitched apart (no context between rows is needed).
    angles : array (n_angles,)
        Radians, covering 360 degrees (every view's opposite must lie within
        ``MAX_GAP_STEPS`` angular steps of views).
    center : float
        The rotation axis in columns, in ``[0, n_cols - 1]``
        (:func:`find_center_360` finds it). An axis right of the middle
        extends the detector to the right, one left of it to the left.

    Returns
    -------
    HalfAcquisition
        float32 (float64 for float64 input) projections of width
        ``floor(2 center) + 1`` (axis right of the middle) or
        ``n_cols + floor(n_cols - 1 - 2 center)`` (left of it).

    Raises
    ------
    ValueError
        Naming ``center`` outside the detector, ``angles`` that do not cover
        360 degrees (a 180-degree scan), or ``projections`` of a wrong shape.
    """
    xp, data, sinogram = _stack("projections", projections)
    n_angles, _, n_cols = data.shape
    layout = half_acquisition_layout(angles, n_cols, center, n_angles=n_angles)
    dtype = xp.float64 if data.dtype == xp.float64 else xp.float32
    data = data.astype(dtype, copy=False)
    direct = data[xp.asarray(layout.views)]
    w = xp.asarray(layout.opposite_weight, dtype=dtype)[:, None, None]
    opposite = (1 - w) * data[xp.asarray(layout.opposite[0])] + w * data[xp.asarray(layout.opposite[1])]
    out = xp.asarray(layout.weights[0], dtype=dtype) * direct[..., xp.asarray(layout.columns[0])]
    for k in (1, 2):  # the mirrored view, between two columns
        out += xp.asarray(layout.weights[k], dtype=dtype) * opposite[..., xp.asarray(layout.columns[k])]
    out = xp.ascontiguousarray(out[:, 0] if sinogram else out)
    return HalfAcquisition(projections=out, angles=layout.angles, center=layout.center, overlap=layout.overlap)


class HalfAcquisitionLayout(NamedTuple):
    """Where :func:`half_acquisition` takes each stitched value from (no data needed).

    angles : numpy.ndarray (n_views,)
        The stitched views' angles (read-only).
    width : int
        Columns of the stitched detector.
    center : float
        The rotation axis in stitched columns.
    overlap : tuple of int
        First and last stitched column where both views contribute.
    views : numpy.ndarray (n_views,)
        The input views of the first half-turn.
    opposite : (numpy.ndarray, numpy.ndarray)
        For each, the two input views its opposite is interpolated between...
    opposite_weight : numpy.ndarray
        ...with this weight on the second.
    columns, weights : three numpy.ndarray (width,) each
        Stitched column ``j`` is ``weights[0][j] * view[columns[0][j]] + weights[1][j] *
        mirrored[columns[1][j]] + weights[2][j] * mirrored[columns[2][j]]``.
    """

    angles: np.ndarray
    width: int
    center: float
    overlap: tuple
    views: np.ndarray
    opposite: tuple
    opposite_weight: np.ndarray
    columns: tuple
    weights: tuple


def half_acquisition_layout(angles, n_cols: int, center, *, n_angles: int | None = None) -> HalfAcquisitionLayout:
    """The geometry of :func:`half_acquisition`'s result, and where it takes each value from,
    without the data: for planning a run (the stitched width, angles and centre make its
    ``ParallelGeometry``) and checking ``center`` and ``angles`` before any is read.

    Raises ValueError naming ``center`` outside ``[0, n_cols - 1]`` or ``angles`` that do not
    cover 360 degrees.
    """
    n_cols = positive_int("n_cols", n_cols)
    angles = finite_vector("angles", angles, length=n_angles)
    c = finite_float("center", center)
    if not 0 <= c <= n_cols - 1:
        raise ValueError(
            f"center: expected the rotation axis inside the detector, a column in [0, {n_cols - 1}], got {center!r}"
        )
    first, (i0, i1, w) = _opposite_views(angles)
    shift = max(0, math.floor(n_cols - 1 - 2 * c))  # columns added on the left
    width = shift + max(n_cols, math.floor(2 * c) + 1)
    new_center = c + shift
    j = np.arange(width, dtype=np.float64)
    col_direct = j - shift  # s = j - new_center
    col_opposite = c + new_center - j  # p(t + pi, c - s)
    in_direct = (col_direct >= 0) & (col_direct <= n_cols - 1)
    in_opposite = (col_opposite >= -1e-9) & (col_opposite <= n_cols - 1 + 1e-9)
    both = in_direct & in_opposite
    lo, hi = (int(j[both][0]), int(j[both][-1])) if both.any() else (-1, -1)
    # weight of the direct view: 1 where only it sees, falling to 0 at its own edge in the overlap
    weight = in_direct.astype(np.float64)
    if hi > lo:
        ramp = (j[lo : hi + 1] - lo) / (hi - lo)
        weight[lo : hi + 1] = 1 - ramp if shift == 0 else ramp
    elif hi == lo >= 0:
        weight[lo] = 0.5
    base = np.clip(np.floor(col_opposite), 0, n_cols - 1).astype(np.int64)
    frac = np.clip(col_opposite - base, 0, 1)
    mirrored = (1 - weight) * in_opposite
    result_angles = angles[first].copy()
    result_angles.setflags(write=False)
    return HalfAcquisitionLayout(
        angles=result_angles,
        width=width,
        center=new_center,
        overlap=(lo, hi),
        views=first,
        opposite=(i0, i1),
        opposite_weight=w,
        columns=(np.clip(col_direct, 0, n_cols - 1).astype(np.int64), base, np.minimum(base + 1, n_cols - 1)),
        weights=(weight, (1 - frac) * mirrored, frac * mirrored),
    )


def find_center_360(
    projections_or_sinogram, angles, *, row=None, min_overlap: int | None = None, max_pairs: int = 16
) -> Center360:
    """Find the rotation axis of a 360-degree scan, the overlap and the side, from the data.

    Each view ``p(t)`` is compared with its opposite ``q``, the view at ``t +
    pi`` mirrored left-right: ``q(c) = p(t, c + d)`` with ``d = 2 center -
    (n_cols - 1)``, over the columns both see. For every lag ``d`` whose
    overlap is at least ``min_overlap`` columns, the mismatch
    ``sum (a(c + d) - b(c))^2 / sum (a(c + d)^2 + b(c)^2)`` of the column
    derivatives ``a``, ``b`` (an offset between the views drops out) is summed
    over up to ``max_pairs`` view pairs and the rows, with FFTs and running
    sums for all lags at once; the smallest, refined by a parabola through
    its neighbours, gives ``center = (n_cols - 1 + d) / 2``. Works for any
    axis position: near either edge (half acquisition) or near the middle.

    Parameters
    ----------
    projections_or_sinogram : array, (n_angles, n_rows, n_cols) or (n_angles, n_cols)
        Line integrals over 360 degrees, NumPy or CuPy.
    angles : array (n_angles,)
        Radians.
    row : int, sequence of ints or None
        Detector rows to use (default all).
    min_overlap : int, optional
        Fewest overlapping columns a trial lag may have (default
        ``max(8, n_cols // 32)``): fewer give chance matches.
    max_pairs : int
        Most view pairs used, evenly spread.

    Returns
    -------
    Center360
    """
    xp, data, _ = _stack("projections_or_sinogram", projections_or_sinogram)
    n_angles, n_rows, n_cols = data.shape
    angles = finite_vector("angles", angles, length=n_angles)
    data = select_rows(data, row, xp)
    min_overlap = max(8, n_cols // 32) if min_overlap is None else positive_int("min_overlap", min_overlap)
    if not 2 <= min_overlap <= n_cols:
        raise ValueError(f"min_overlap: expected 2 to {n_cols} columns, got {min_overlap}")
    first, (i0, i1, w) = _opposite_views(angles, name="angles")
    pick = np.unique(
        np.linspace(0, first.size - 1, min(positive_int("max_pairs", max_pairs), first.size)).round().astype(int)
    )
    a = data[xp.asarray(first[pick])].astype(xp.float64)
    wk = xp.asarray(w[pick])[:, None, None]
    b = ((1 - wk) * data[xp.asarray(i0[pick])] + wk * data[xp.asarray(i1[pick])]).astype(xp.float64)
    lags, mismatch = _mismatch(xp.diff(a, axis=-1), xp.diff(b[..., ::-1], axis=-1), min_overlap - 1, xp)
    k = int(np.argmin(mismatch))
    d = float(lags[k])
    if 0 < k < lags.size - 1:
        y0, y1, y2 = mismatch[k - 1 : k + 2]
        den = y0 - 2 * y1 + y2
        if den > 0:
            d += float(np.clip(0.5 * (y0 - y2) / den, -0.5, 0.5))
    center = (n_cols - 1 + d) / 2
    side = "right" if center >= (n_cols - 1) / 2 else "left"
    overlap = 2 * min(center, n_cols - 1 - center) + 1
    return Center360(
        center=center,
        side=side,
        overlap=overlap,
        confidence=float(np.clip(1 - mismatch[k], 0, 1)),
        details={"mismatch": mismatch, "lags": lags, "pairs": list(zip(first[pick].tolist(), i0[pick].tolist()))},
    )


def _stack(name, arr):
    """(xp, (n_angles, n_rows, n_cols) view, whether the input was one sinogram)."""
    xp, data = projection_like(name, arr)
    return (xp, data[:, None, :], True) if data.ndim == 2 else (xp, data, False)


def _opposite_views(angles, name="angles"):
    """The views of the first half-turn ``[angles[0], angles[0] + pi)`` and, for each, where
    its opposite ``t + pi`` lies: (first, (i0, i1, w)), the opposite being
    ``(1 - w) view[i0] + w view[i1]`` (periodic linear interpolation in the angle)."""
    two_pi = 2 * np.pi
    rel = np.mod(angles - angles[0], two_pi)
    first = np.flatnonzero(rel < np.pi - 1e-9)
    order = np.argsort(rel, kind="stable")
    sorted_rel = rel[order]
    step = float(np.median(np.diff(sorted_rel))) if angles.size > 1 else two_pi
    span = float(np.ptp(np.unwrap(angles))) if angles.size > 1 else 0.0
    target = rel[first] + np.pi
    # bracketing views, periodically: positions in the sorted angles
    hi = np.searchsorted(sorted_rel, target, side="left")
    lo_rel = np.where(hi > 0, sorted_rel[np.maximum(hi - 1, 0)], sorted_rel[-1] - two_pi)
    hi_rel = np.where(hi < sorted_rel.size, sorted_rel[np.minimum(hi, sorted_rel.size - 1)], sorted_rel[0] + two_pi)
    gap = hi_rel - lo_rel
    if not step > 0 or np.any(gap > MAX_GAP_STEPS * step + 1e-9) or span < np.pi + step:
        raise ValueError(
            f"{name}: expected a 360-degree scan, every view's opposite (180 degrees later) "
            f"within {MAX_GAP_STEPS:g} angular steps of views; these angles span "
            f"{np.degrees(span):.1f} degrees in steps of about {np.degrees(step):.3g} "
            "(a 180-degree scan needs no stitching)"
        )
    i0 = order[np.where(hi > 0, hi - 1, sorted_rel.size - 1)]
    i1 = order[np.where(hi < sorted_rel.size, hi, 0) % sorted_rel.size]
    w = np.where(gap > 0, (target - lo_rel) / np.where(gap > 0, gap, 1), 0.0)
    w = np.where(w < 1e-6, 0.0, np.where(w > 1 - 1e-6, 1.0, w))
    return first, (i0, i1, w)


def _mismatch(a, b, min_overlap, xp):
    """(lags, mismatch) of ``a(c + d)`` against ``b(c)`` (last axis, length n), summed over the
    other axes, for every lag ``|d| <= n - min_overlap``."""
    n = a.shape[-1]
    fft = fft_module(xp)
    n_fft = 2 * n
    # cross[m] = sum_c a(c + m) b(c)
    cross = fft.irfft(fft.rfft(a, n_fft) * xp.conj(fft.rfft(b, n_fft)), n_fft)
    cross = cross.reshape(-1, n_fft).sum(axis=0)
    a2 = (a * a).reshape(-1, n).sum(axis=0)
    b2 = (b * b).reshape(-1, n).sum(axis=0)
    ca = xp.concatenate([xp.zeros(1, a2.dtype), xp.cumsum(a2)])  # ca[k] = sum a2[:k]
    cb = xp.concatenate([xp.zeros(1, b2.dtype), xp.cumsum(b2)])
    lags = np.arange(-(n - min_overlap), n - min_overlap + 1)
    m = xp.asarray(lags)
    # lag m >= 0: a over [m, n), b over [0, n - m); m < 0: a over [0, n + m), b over [-m, n)
    ea = xp.where(m >= 0, ca[n] - ca[xp.clip(m, 0, n)], ca[xp.clip(n + m, 0, n)])
    eb = xp.where(m >= 0, cb[xp.clip(n - m, 0, n)], cb[n] - cb[xp.clip(-m, 0, n)])
    energy = ea + eb
    c = cross[m % n_fft]
    mismatch = xp.where(energy > 0, 1 - 2 * c / xp.where(energy > 0, energy, 1), 1.0)
    return lags, to_numpy(mismatch)
