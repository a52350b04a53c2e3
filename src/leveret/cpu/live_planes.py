"""Live reconstruction's back-projections on the CPU (Numba, all cores): the
mirror of ``leveret/cuda/live_planes.cu`` (launcher :mod:`leveret.cuda.live_planes`).

``backproject_points(q, views, coef, points, out, ...)`` adds
``sum_k coef[k] * sample(q[views[k]], point)`` to ``out`` for every point,
where ``sample`` is the bilinear value (zero off the detector) at the point's
detector position in view ``k``:

- parallel beam: ``column = x a[k] + y b[k] + c[k]`` (linear in the point)
  and ``row = z row_scale + row_offset`` (the same in every view);
- cone beam: ``(u w, v w, w) = P_k (x, y, z, 1)`` with FDK-normalised
  matrices, each sample weighted by ``1 / w^2``.

``backproject_plane(q, views, coef, frame, out, ...)`` adds the parallel-beam
back-projection onto a plane whose pixel positions follow from its frame (the
world position of pixel (0, 0) and the steps along its rows and columns).

Here in float64 arithmetic (the plane: float32 sums, as leveret.fbp's CPU
kernel), on the GPU in float32; both read float32 or float16 views.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from . import serialized
from .backproject_cone import _bilinear_zero_padded  # the bilinear fetch, zero outside
from .backproject_parallel import _fixed, _linear_zero_padded, _span

# Points go in blocks (a slice's rows): each thread takes a block and walks the
# views for all its points, so one view's nearby detector samples stay in cache.


@numba.njit(parallel=True, cache=True, nogil=True)
def _parallel_points(q, views, params, coef, points, out, row_scale, row_offset, block):
    n_blocks = -(-points.shape[0] // block)
    for blk in numba.prange(n_blocks):
        p0 = blk * block
        p1 = min(points.shape[0], p0 + block)
        acc = np.zeros(p1 - p0)
        for k in range(views.size):
            a, b, c, w = params[k, 0], params[k, 1], params[k, 2], coef[k]
            n = views[k]
            for p in range(p0, p1):
                row = points[p, 2] * row_scale + row_offset
                col = points[p, 0] * a + points[p, 1] * b + c
                acc[p - p0] += w * _bilinear_zero_padded(q[n], col, row)
        for p in range(p0, p1):
            out[p] += acc[p - p0]


@numba.njit(parallel=True, cache=True, nogil=True)
def _cone_points(q, views, params, coef, points, out, block):
    n_blocks = -(-points.shape[0] // block)
    for blk in numba.prange(n_blocks):
        p0 = blk * block
        p1 = min(points.shape[0], p0 + block)
        acc = np.zeros(p1 - p0)
        for k in range(views.size):
            m = params[k]
            n = views[k]
            for p in range(p0, p1):
                x, y, z = points[p, 0], points[p, 1], points[p, 2]
                w = m[2, 0] * x + m[2, 1] * y + m[2, 2] * z + m[2, 3]
                if w <= 0.0:
                    continue
                inv = 1.0 / w
                u = (m[0, 0] * x + m[0, 1] * y + m[0, 2] * z + m[0, 3]) * inv
                v = (m[1, 0] * x + m[1, 1] * y + m[1, 2] * z + m[1, 3]) * inv
                acc[p - p0] += coef[k] * _bilinear_zero_padded(q[n], u, v) * inv * inv
        for p in range(p0, p1):
            out[p] += acc[p - p0]


@numba.njit(inline="always")
def _add_row(acc, q, weight, base, step):
    """acc[i] += weight * q sampled linearly at column base + i step (zero off the
    detector), as leveret.fbp's CPU kernel samples float32 sinograms: between the
    detector's edges a 32.32 fixed-point column stepped along the row (about
    1e-8 pixel from exact over 2048 pixels), float32 weights and sums."""
    n_cols = q.shape[0]
    w = acc.shape[0]
    t_lo, t_hi = _span(step, base, -1.0, n_cols, w, -1)  # may touch the detector
    i_lo, i_hi = _span(step, base, 0.0, n_cols - 1.0, w, 1)  # both neighbours on it
    i_lo, i_hi = max(i_lo, t_lo), min(i_hi, t_hi)
    if i_hi <= i_lo:
        i_lo = i_hi = t_hi
    for i in range(t_lo, i_lo):
        acc[i] += weight * _linear_zero_padded(q, base + i * step)
    if i_hi > i_lo:
        wt = np.float32(weight)
        inv_frac = np.float32(1.0 / 16777216.0)
        fixed = _fixed(base + i_lo * step)  # >= 0 on this span
        fixed_step = _fixed(step)
        for i in range(i_lo, i_hi):
            i0 = fixed >> 32
            f = np.float32(np.int32((fixed >> 8) & 0xFFFFFF)) * inv_frac
            v0 = q[i0]
            acc[i] += wt * (v0 + f * (q[i0 + 1] - v0))
            fixed += fixed_step
    for i in range(max(i_hi, t_lo), t_hi):
        acc[i] += weight * _linear_zero_padded(q, base + i * step)


@numba.njit(inline="always")
def _add_row_bilinear(acc, q, weight, base, step, row, row_step):
    """acc[i] += weight * q (n_rows, n_cols) sampled bilinearly at column
    base + i step, row row + i row_step (zero off the detector); branch-free
    where all four neighbours lie on it."""
    n_rows, n_cols = q.shape
    w = acc.shape[0]
    c_lo, c_hi = _span(step, base, 0.0, n_cols - 1.0, w, 1)
    r_lo, r_hi = _span(row_step, row, 0.0, n_rows - 1.0, w, 1)
    i_lo, i_hi = max(c_lo, r_lo), min(c_hi, r_hi)
    if i_hi <= i_lo:
        i_lo = i_hi = w
    for i in range(i_lo):
        acc[i] += weight * _bilinear_zero_padded(q, base + i * step, row + i * row_step)
    for i in range(i_lo, i_hi):
        x = base + i * step
        y = row + i * row_step
        c0 = np.uint64(x)  # x, y >= 0 here: truncation is floor
        r0 = np.uint64(y)
        a = x - np.float64(c0)
        b = y - np.float64(r0)
        top = q[r0, c0] + a * (q[r0, c0 + np.uint64(1)] - q[r0, c0])
        bottom = q[r0 + np.uint64(1), c0] + a * (q[r0 + np.uint64(1), c0 + np.uint64(1)] - q[r0 + np.uint64(1), c0])
        acc[i] += weight * (top + b * (bottom - top))
    for i in range(i_hi, w):
        acc[i] += weight * _bilinear_zero_padded(q, base + i * step, row + i * row_step)


@numba.njit(parallel=True, cache=True, nogil=True)
def _parallel_plane(q, views, coef, cos_t, sin_t, frame, det_scale, center, row_scale, row_offset, out):
    """out[j, i] += sum_k coef[k] q[views[k]] at pixel (j, i) of the plane
    ``frame[0] + i frame[1] + j frame[2]`` (world x, y, z), parallel beam
    (the mirror of live_planes.cu's plane_f32).

    A plane whose rows keep their height (axial slices, unrotated xz / yz)
    samples two fixed detector rows per image row, linearly along the row
    as leveret.fbp's CPU kernel does (:func:`_add_row`); others bilinearly in
    float64. Sums in float32, as leveret.fbp's.
    """
    h, w = out.shape
    n_rows = q.shape[1]
    for j in numba.prange(h):
        acc = np.zeros(w, np.float32)
        px = frame[0, 0] + j * frame[2, 0]
        py = frame[0, 1] + j * frame[2, 1]
        pz = frame[0, 2] + j * frame[2, 2]
        row = pz * row_scale + row_offset
        row_step = frame[1, 2] * row_scale
        for k in range(views.size):
            n = views[k]
            step = (frame[1, 0] * cos_t[k] + frame[1, 1] * sin_t[k]) * det_scale
            base = (px * cos_t[k] + py * sin_t[k]) * det_scale + center
            if row_step == 0.0:
                r0 = math.floor(row + 1e-9)
                f = row - r0
                if f < 1e-9:  # on a detector row (within float64 noise): that row only
                    f = 0.0
                if 0 <= r0 < n_rows and f < 1.0:
                    _add_row(acc, q[n, r0], coef[k] * (1.0 - f), base, step)
                if f > 0.0 and 0 <= r0 + 1 < n_rows:
                    _add_row(acc, q[n, r0 + 1], coef[k] * f, base, step)
            else:
                _add_row_bilinear(acc, q[n], coef[k], base, step, row, row_step)
        for i in range(w):
            out[j, i] += acc[i]


@serialized
def backproject_plane(
    q, views, coef, frame, out, *, angles, det_spacing: float, center: float, row_spacing: float, chunk_views: int = 256
):
    """Add the weighted parallel-beam back-projection of ``q[views]`` onto a
    plane to ``out``.

    Parameters
    ----------
    q : ndarray (n, n_rows, n_cols), float32 or float16
        Filtered views (float16 converted ``chunk_views`` views at a time).
    views : ndarray of int (k,)
        Which views of ``q`` to use.
    coef : ndarray (k,)
        Weight of each of them.
    frame : ndarray (3, 3)
        World (x, y, z) of pixel (0, 0), the step of one pixel along a row and
        along a column (:meth:`leveret.live.Slice.frame`).
    out : ndarray (height, width) float32, C-contiguous
        Accumulated into.
    angles : ndarray (k,)
        The views' angles (radians).
    det_spacing, center, row_spacing : float
        As in :class:`leveret.ParallelGeometry`.
    """
    views = np.asarray(views, np.int64)
    if views.size == 0:
        return out
    coef = np.asarray(coef, np.float64)
    angles = np.asarray(angles, np.float64)
    frame = np.asarray(frame, np.float64)
    step = chunk_views if q.dtype != np.float32 else views.size
    for k0 in range(0, views.size, step):
        sel = slice(k0, k0 + step)
        if q.dtype != np.float32:  # Numba reads float32: this chunk's views only
            qs, vs = q[views[sel]].astype(np.float32), np.arange(views[sel].size)
        else:
            qs, vs = q, views[sel]
        _parallel_plane(
            qs,
            vs,
            coef[sel],
            np.cos(angles[sel]),
            np.sin(angles[sel]),
            frame,
            1.0 / det_spacing,
            float(center),
            1.0 / row_spacing,
            (q.shape[1] - 1) / 2,
            out,
        )
    return out


def parallel_params(angles, centers, det_spacing: float) -> np.ndarray:
    """(n, 3) ``(a, b, c)`` with ``column = x a + y b + c`` at each angle."""
    angles = np.asarray(angles, np.float64)
    return np.stack(
        [np.cos(angles) / det_spacing, np.sin(angles) / det_spacing, np.asarray(centers, np.float64)], axis=1
    )


@serialized
def backproject_points(
    q, views, coef, points, out, *, params, row_scale=None, row_offset=None, chunk_views: int = 256, block: int = 256
):
    """Add the weighted back-projection of stored views onto ``points`` to ``out``.

    Parameters
    ----------
    q : ndarray (n_stored, n_rows, n_cols), float32 or float16
        Filtered projections.
    views : ndarray of int (k,)
        Which stored views to use.
    coef : ndarray (k,)
        Weight of each of them.
    points : ndarray (n_points, 3)
        World (x, y, z) of the points.
    out : ndarray (n_points,) float32
        Accumulated into.
    params : ndarray
        Per view: (k, 3) parallel ``(a, b, c)`` (with ``row_scale`` and
        ``row_offset``), or (k, 3, 4) cone-beam normalised matrices.
    chunk_views : int
        CPU: views converted to float32 at a time (bounds the temporary when
        ``q`` is float16).
    block : int
        CPU: points per task (a slice's row: neighbours share detector samples).
    """
    views = np.asarray(views, np.int64)
    coef = np.asarray(coef, np.float64)
    params = np.asarray(params, np.float64)
    if views.size == 0:
        return out
    cone = params.ndim == 3
    acc = np.zeros(out.shape, np.float64)
    for k0 in range(0, views.size, chunk_views if q.dtype == np.float16 else views.size):
        sel = slice(k0, k0 + (chunk_views if q.dtype == np.float16 else views.size))
        if q.dtype == np.float16:  # Numba reads float32: convert this chunk's views only
            qs, vs = q[views[sel]].astype(np.float32), np.arange(views[sel].size)
        else:
            qs, vs = q, views[sel]
        if cone:
            _cone_points(qs, vs, params[sel], coef[sel], points, acc, int(block))
        else:
            _parallel_points(
                qs, vs, params[sel], coef[sel], points, acc, float(row_scale), float(row_offset), int(block)
            )
    out += acc.astype(out.dtype)
    return out
