"""Parallel-beam voxel-driven back-projection on the CPU (Numba, all cores).

Both backends evaluate the same function: for pixel (j, i) of slice k and
projection n, the detector is sampled at column ``x = u - 0.5`` with

    u = (i * a[n] + j * b[n]) + c[n]

(``u`` is the CUDA texture coordinate, ``column + 0.5``), and the
back-projection sums these samples over n. Outside the detector the sinogram
is zero: linear interpolation between the last column and the outside blends
with that zero, as the texture unit's border mode does.

Interpolation modes (``MODES``):

nearest
    ``q[floor(u)]``, u rounded in float32 exactly as the CUDA kernel does.
linear
    exact weights: the reference. The coordinate is computed in float64; for
    float32 data the inner loop instead steps a 32.32 fixed-point coordinate
    along the image row (about 1e-8 pixel from exact over a 2048-pixel row,
    twice as fast). Either loop runs branch-free over the span where both
    neighbours lie on the detector; the few pixels at the detector's edges
    are treated separately.
linear8
    the texture unit's arithmetic: u in float32 as the CUDA kernel rounds it,
    the weight rounded to 8 fractional bits. It reproduces a hardware-filtered
    fetch to float rounding, so CPU and GPU can be compared to 1e-5.
linear8-fp16
    linear8 on fp16 texels (precision="float16"'s half2/half4 textures; the
    caller rounds the sinograms to float16): the texture unit returns the
    filtered value of 16-bit float texels rounded to float16 as well, so each
    sample is computed exactly (float64: 11-bit values times 9-bit weights)
    and rounded to the nearest float16, ties away from zero, as the texture
    unit does: without this final rounding the CPU differs from the GPU by
    the rms of one float16 rounding per sample (~2e-4 relative on white
    noise); with it, about 0.1 % of the samples land one fp16 step apart
    (the hardware's internal arithmetic is not reproduced bit for bit; the
    bound is in docs/accuracy.md).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from . import serialized

MODES = ("nearest", "linear", "linear8", "linear8-fp16")
_FIX = 4294967296.0  # 2**32: the fixed-point scale of the linear mode


@numba.njit(inline="always")
def _span(a, base, lo, hi, nx, margin):
    """Pixels i in [0, nx) with lo <= base + i a <= hi, moved ``margin`` pixels
    inwards (margin > 0) or outwards (margin < 0) to absorb rounding."""
    if a > 1e-12:
        i_lo = math.ceil((lo - base) / a) + margin
        i_hi = math.floor((hi - base) / a) - margin + 1
    elif a < -1e-12:
        i_lo = math.ceil((hi - base) / a) + margin
        i_hi = math.floor((lo - base) / a) - margin + 1
    elif lo <= base <= hi:
        return 0, nx
    else:
        return 0, 0
    i_lo = min(max(i_lo, 0), nx)
    i_hi = min(max(i_hi, i_lo), nx)
    return i_lo, i_hi


@numba.njit(inline="always")
def _linear_zero_padded(q, x):
    """q sampled at column x, zero outside [0, ncols - 1] and blended at the edges."""
    fl = math.floor(x)
    i0 = int(fl)
    f = x - fl
    ncols = q.shape[0]
    v0 = q[i0] if 0 <= i0 < ncols else 0.0
    v1 = q[i0 + 1] if 0 <= i0 + 1 < ncols else 0.0
    return (1.0 - f) * v0 + f * v1


@numba.njit(inline="always")
def _fixed(x):
    """x (>= 0) as a 32.32 fixed-point integer; steps keep their sign."""
    return np.int64(x * _FIX) if x >= 0 else -np.int64(-x * _FIX)


@numba.njit(inline="always")
def _line(row, q, a, base, i_from, i_to, exact):
    """Add projection q's samples at x = base + i a to row[i] for i in [i_from, i_to)."""
    ncols = q.shape[0]
    t_lo, t_hi = _span(a, base, -1.0, ncols, row.shape[0], -1)  # may touch the detector
    i_lo, i_hi = _span(a, base, 0.0, ncols - 1.0, row.shape[0], 1)  # both neighbours on it
    t_lo, t_hi = max(t_lo, i_from), min(t_hi, i_to)
    i_lo, i_hi = max(i_lo, t_lo), min(i_hi, t_hi)
    if i_hi <= i_lo:
        i_lo = i_hi = t_hi
    for i in range(t_lo, i_lo):
        row[i] += _linear_zero_padded(q, base + i * a)
    if exact:
        for i in range(i_lo, i_hi):
            x = base + i * a
            i0 = np.uint64(x)  # x >= 0 here, so truncation is floor
            f = x - np.float64(i0)
            v0 = q[i0]
            row[i] += v0 + f * (q[i0 + np.uint64(1)] - v0)
    elif i_hi > i_lo:
        inv_frac = row.dtype.type(1.0 / 16777216.0)
        fixed = _fixed(base + i_lo * a)
        step = _fixed(a)
        for i in range(np.uint64(i_lo), np.uint64(i_hi)):
            i0 = np.uint64(fixed >> 32)
            f = row.dtype.type(np.int32((fixed >> 8) & 0xFFFFFF)) * inv_frac
            v0 = q[i0]
            row[i] += v0 + f * (q[i0 + np.uint64(1)] - v0)
            fixed += step
    for i in range(max(i_hi, t_lo), t_hi):
        row[i] += _linear_zero_padded(q, base + i * a)


@numba.njit(parallel=True, fastmath=False, cache=True)
def _backproject_linear(sinos, table, out, exact):
    """Exact linear mode. Projections go in pairs: over the pixels where both
    are inside the detector one pass adds both samples, so row[i] is loaded
    and stored once per two updates; the rest goes through ``_line``."""
    n_slices, n_angles, ncols = sinos.shape
    ny, nx = out.shape[1], out.shape[2]
    inv_frac = out.dtype.type(1.0 / 16777216.0)
    for task in numba.prange(n_slices * ny):
        k = task // ny
        j = task % ny
        row = np.zeros(nx, dtype=out.dtype)
        n = 0
        while n + 1 < n_angles and not exact:
            q0, q1 = sinos[k, n], sinos[k, n + 1]
            a0, a1 = table[n, 0], table[n + 1, 0]
            b0 = (j * table[n, 1] + table[n, 2]) - 0.5
            b1 = (j * table[n + 1, 1] + table[n + 1, 2]) - 0.5
            lo0, hi0 = _span(a0, b0, 0.0, ncols - 1.0, nx, 1)
            lo1, hi1 = _span(a1, b1, 0.0, ncols - 1.0, nx, 1)
            c_lo, c_hi = max(lo0, lo1), min(hi0, hi1)
            if c_hi > c_lo:
                fixed0, step0 = _fixed(b0 + c_lo * a0), _fixed(a0)
                fixed1, step1 = _fixed(b1 + c_lo * a1), _fixed(a1)
                # Unsigned indices spare Numba's negative-index wrap-around, and the
                # weight comes from the top 24 fraction bits: an int32 converts to
                # float in one instruction and 2**-24 is float32's resolution.
                for i in range(np.uint64(c_lo), np.uint64(c_hi)):
                    i0 = np.uint64(fixed0 >> 32)
                    f0 = out.dtype.type(np.int32((fixed0 >> 8) & 0xFFFFFF)) * inv_frac
                    i1 = np.uint64(fixed1 >> 32)
                    f1 = out.dtype.type(np.int32((fixed1 >> 8) & 0xFFFFFF)) * inv_frac
                    v0 = q0[i0]
                    v1 = q1[i1]
                    row[i] += (v0 + f0 * (q0[i0 + np.uint64(1)] - v0)) + (v1 + f1 * (q1[i1 + np.uint64(1)] - v1))
                    fixed0 += step0
                    fixed1 += step1
            else:
                c_lo = c_hi = 0
            _line(row, q0, a0, b0, 0, c_lo, False)
            _line(row, q0, a0, b0, c_hi, nx, False)
            _line(row, q1, a1, b1, 0, c_lo, False)
            _line(row, q1, a1, b1, c_hi, nx, False)
            n += 2
        for m in range(n, n_angles):
            _line(row, sinos[k, m], table[m, 0], (j * table[m, 1] + table[m, 2]) - 0.5, 0, nx, exact)
        out[k, j, :] = row


@numba.njit(inline="always")
def _round_fp16(x):
    """x (float64) rounded to the nearest IEEE binary16 value, ties AWAY FROM
    ZERO (what the texture unit returns for fp16 texels, docs/accuracy.md), returned as float64: 11 significant bits for
    |x| >= 2**-14, a fixed spacing of 2**-24 below (subnormals), +-inf from
    65520 on (65520 itself is a tie between 65504 and the first step beyond)."""
    ax = abs(x)
    if ax >= 65520.0:
        return math.copysign(math.inf, x)
    if ax < 6.103515625e-05:  # 2**-14: subnormal spacing 2**-24
        return math.copysign(math.floor(ax * 16777216.0 + 0.5) / 16777216.0, x)
    m, e = math.frexp(ax)  # |x| = m 2**e, 0.5 <= m < 1
    # m 2**11 + 0.5 is exact in float64 (m has 53 bits, 2**11 m < 2**11)
    return math.copysign(math.ldexp(math.floor(math.ldexp(m, 11) + 0.5), e - 11), x)


@numba.njit(parallel=True, fastmath=False, cache=True)
def _backproject_texture_like(sinos, table, out, quantise):
    """nearest (quantise < 0), linear8 (quantise == 1) and linear8 with the
    filtered sample rounded to float16 (quantise == 2) in the kernel's float32
    arithmetic."""
    n_slices, n_angles, ncols = sinos.shape
    ny, nx = out.shape[1], out.shape[2]
    t = table.dtype.type
    for task in numba.prange(n_slices * ny):
        k = task // ny
        j = task % ny
        row = np.zeros(nx, dtype=out.dtype)
        fj = t(j)
        for n in range(n_angles):
            q = sinos[k, n]
            a = table[n, 0]
            jb = fj * table[n, 1]
            c = table[n, 2]
            for i in range(nx):
                u = (t(i) * a + jb) + c
                if quantise < 0:
                    i0 = int(math.floor(u))
                    if 0 <= i0 < ncols:
                        row[i] += q[i0]
                    continue
                xb = u - t(0.5)
                fl = math.floor(xb)
                i0 = int(fl)
                f = t(math.floor((xb - fl) * t(256.0) + t(0.5))) * t(1.0 / 256.0)
                v0 = q[i0] if 0 <= i0 < ncols else 0.0
                v1 = q[i0 + 1] if 0 <= i0 + 1 < ncols else 0.0
                if quantise == 2:
                    # exact in float64 (fp16 values, 9-bit weights), one rounding to
                    # fp16, ties away from zero, as the texture unit returns it
                    row[i] += _round_fp16((1.0 - np.float64(f)) * np.float64(v0) + np.float64(f) * np.float64(v1))
                    continue
                row[i] += (t(1.0) - f) * v0 + f * v1
        out[k, j, :] = row


@serialized
def backproject(sinos: np.ndarray, table: np.ndarray, out: np.ndarray, mode: str = "linear") -> np.ndarray:
    """Back-project a sinogram stack into ``out`` (overwritten).

    Parameters
    ----------
    sinos : ndarray (n_slices, n_angles, n_cols), float32 or float64, C-contiguous
        Filtered sinograms, one per output slice.
    table : ndarray (n_angles, 3)
        ``(a, b, c)`` per projection (see the module docstring). "linear"
        reads it in float64; "nearest" and "linear8" in the dtype of ``sinos``,
        as the CUDA kernel does in float32.
    out : ndarray (n_slices, ny, nx), same dtype as ``sinos``
    mode : {"nearest", "linear", "linear8", "linear8-fp16"}
        "linear8-fp16" expects values already rounded to float16 (stored as
        float32) and rounds each filtered sample to float16 as the texture
        unit does for 16-bit float texels.
    """
    if mode == "linear":
        # float64 data gets float64 coordinates; float32 data the faster fixed
        # point, whose 2**-32 pixel steps are far below float32 resolution.
        _backproject_linear(sinos, np.asarray(table, np.float64), out, sinos.dtype == np.float64)
    elif mode in ("nearest", "linear8", "linear8-fp16"):
        _backproject_texture_like(
            sinos, np.asarray(table, sinos.dtype), out, {"nearest": -1, "linear8": 1, "linear8-fp16": 2}[mode]
        )
    else:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    return out
