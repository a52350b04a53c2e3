"""Cone-beam voxel-driven back-projection on the CPU (Numba, all cores).

For voxel (k, j, i) and view n, ``(u w, v w, w) = P_n (i, j, k, 1)`` with P_n
the view's projection matrix composed with the voxel grid (index -> world), and

    out[k, j, i] = sum_n  q_n(u, v) / w^2

with q_n sampled by bilinear interpolation at pixel centres on integers
(``floor``-based, as RabbitCT defines it) and zero outside the detector:
each of the four neighbours that falls off the detector contributes zero, so
the half pixel around the detector blends with zero. The 1/w^2 factor is the
FDK distance weight when P_n is scaled so that w is the voxel's depth along
the central ray over the source-isocentre distance (``leveret.fdk`` does
that); RabbitCT's matrices come scaled that way.

Each image line (k, j) is clipped per view to the voxels whose projection can
touch the detector (u and v are ratios of linear functions of i, so each
bound is a linear inequality), and the rest of the line is skipped.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from . import serialized


@numba.njit(inline="always")
def _clip(a, b, lo, hi):
    """Shrink [lo, hi) to the i with a + b i > 0 (one linear inequality), with a
    pixel of slack on each side so rounding never drops a contributing voxel."""
    if b == 0:
        return (lo, lo) if a <= 0 else (lo, hi)
    t = min(max(-a / b, -1e9), 1e9)  # the crossing, kept in int range
    if b > 0:
        lo = max(lo, int(math.floor(t)) - 1)
    else:
        hi = min(hi, int(math.ceil(t)) + 2)
    return lo, hi


@numba.njit(inline="always")
def _bilinear_zero_padded(q, u, v):
    n_rows, n_cols = q.shape
    fu = math.floor(u)
    fv = math.floor(v)
    iu = int(fu)
    iv = int(fv)
    a = u - fu
    b = v - fv
    out = 0.0
    if 0 <= iv < n_rows:
        if 0 <= iu < n_cols:
            out += (1.0 - a) * (1.0 - b) * q[iv, iu]
        if 0 <= iu + 1 < n_cols:
            out += a * (1.0 - b) * q[iv, iu + 1]
    if 0 <= iv + 1 < n_rows:
        if 0 <= iu < n_cols:
            out += (1.0 - a) * b * q[iv + 1, iu]
        if 0 <= iu + 1 < n_cols:
            out += a * b * q[iv + 1, iu + 1]
    return out


@numba.njit(parallel=True, fastmath=False, cache=True)
def _backproject(projections, matrices, out, accumulate):
    n_views, n_rows, n_cols = projections.shape
    nz, ny, nx = out.shape
    for task in numba.prange(nz * ny):
        k = task // ny
        j = task % ny
        line = np.zeros(nx, dtype=np.float64)
        for n in range(n_views):
            m = matrices[n]
            bu = m[0, 1] * j + m[0, 2] * k + m[0, 3]
            bv = m[1, 1] * j + m[1, 2] * k + m[1, 3]
            bw = m[2, 1] * j + m[2, 2] * k + m[2, 3]
            su, sv, sw = m[0, 0], m[1, 0], m[2, 0]
            lo, hi = 0, nx
            lo, hi = _clip(bw, sw, lo, hi)  # w > 0
            lo, hi = _clip(bu + bw, su + sw, lo, hi)  # u > -1
            lo, hi = _clip(n_cols * bw - bu, n_cols * sw - su, lo, hi)  # u < n_cols
            lo, hi = _clip(bv + bw, sv + sw, lo, hi)  # v > -1
            lo, hi = _clip(n_rows * bw - bv, n_rows * sw - sv, lo, hi)  # v < n_rows
            lo = max(lo, 0)
            hi = min(hi, nx)
            q = projections[n]
            for i in range(lo, hi):
                w = bw + i * sw
                if w <= 0.0:
                    continue
                inv_w = 1.0 / w
                u = (bu + i * su) * inv_w
                v = (bv + i * sv) * inv_w
                line[i] += _bilinear_zero_padded(q, u, v) * inv_w * inv_w
        if accumulate:
            for i in range(nx):
                out[k, j, i] += line[i]
        else:
            for i in range(nx):
                out[k, j, i] = line[i]


@serialized
def backproject(
    projections: np.ndarray, index_matrices: np.ndarray, out: np.ndarray, *, accumulate: bool = False
) -> np.ndarray:
    """Back-project ``projections`` (n_views, n_rows, n_cols) into ``out`` (nz, ny, nx).

    ``index_matrices`` (n_views, 3, 4) map voxel indices (i, j, k, 1) to
    (u w, v w, w); arithmetic is float64 whatever the data type, so the float32
    and float64 results differ only by the data's rounding.
    """
    _backproject(projections, np.ascontiguousarray(index_matrices, np.float64), out, accumulate)
    return out


@numba.njit(inline="always")
def _texture_fetch8(q, x, y):
    """The texture unit's bilinear fetch at texture coordinates (x, y) = (u + 0.5,
    v + 0.5), border texels zero, as the texture unit computes it (probed with
    bench/probe_texture_weights.py): the fractions become A, B in 1/256 (rounded to nearest), the corner weight
    W11 = round(A B / 256), and the other three follow so the four sum to 256."""
    n_rows, n_cols = q.shape
    t = q.dtype.type
    xb = x - t(0.5)
    yb = y - t(0.5)
    fx = math.floor(xb)
    fy = math.floor(yb)
    a = int(math.floor((xb - fx) * t(256.0) + t(0.5)))
    b = int(math.floor((yb - fy) * t(256.0) + t(0.5)))
    w11 = (a * b + 128) >> 8
    w01 = a - w11
    w10 = b - w11
    w00 = 256 - a - b + w11
    iu = int(fx)
    iv = int(fy)
    t00 = q[iv, iu] if (0 <= iv < n_rows and 0 <= iu < n_cols) else t(0)
    t01 = q[iv, iu + 1] if (0 <= iv < n_rows and 0 <= iu + 1 < n_cols) else t(0)
    t10 = q[iv + 1, iu] if (0 <= iv + 1 < n_rows and 0 <= iu < n_cols) else t(0)
    t11 = q[iv + 1, iu + 1] if (0 <= iv + 1 < n_rows and 0 <= iu + 1 < n_cols) else t(0)
    s = t(1.0 / 256.0)
    return ((t(w00) * s) * t00 + (t(w01) * s) * t01) + ((t(w10) * s) * t10 + (t(w11) * s) * t11)


@numba.njit(inline="always")
def _software_fetch32(q, u, v):
    """backproject_cone_global's fetch: exact bilinear weights in float32,
    zero off the detector and blended with zero at its edges."""
    n_rows, n_cols = q.shape
    t = q.dtype.type
    if not (u > t(-1.0) and u < t(n_cols) and v > t(-1.0) and v < t(n_rows)):
        return t(0.0)
    fu = t(math.floor(u))
    fv = t(math.floor(v))
    a = u - fu
    b = v - fv
    iu = int(fu)
    iv = int(fv)
    t00 = q[iv, iu] if (iv >= 0 and iu >= 0) else t(0)
    t01 = q[iv, iu + 1] if (iv >= 0 and iu + 1 < n_cols) else t(0)
    t10 = q[iv + 1, iu] if (iv + 1 < n_rows and iu >= 0) else t(0)
    t11 = q[iv + 1, iu + 1] if (iv + 1 < n_rows and iu + 1 < n_cols) else t(0)
    top = t00 + a * (t01 - t00)  # the CUDA kernels' lerps (there fused: within a rounding)
    bottom = t10 + a * (t11 - t10)
    return top + b * (bottom - top)


@numba.njit(parallel=True, fastmath=False, cache=True)
def _backproject_gpu_mirror(projections, matrices, out, depth, accumulate, software, fma_steps, block0, block1):
    """float32 mirror of backproject_cone.cu: same rounding, same z steps
    within blocks of ``depth`` voxels (voxel k from the block's first in one
    fma for the views ``fma_steps`` marks, running sums for the others), same
    summation order; the texture kernel's fetch, or the software kernels' for
    the views ``software`` marks; z blocks [block0, block1) only."""
    n_views = projections.shape[0]
    nz, ny, nx = out.shape
    t = np.float32
    for task in numba.prange((block1 - block0) * ny):
        k0 = (block0 + task // ny) * depth
        j = task % ny
        sums = np.zeros((depth, nx), dtype=np.float32)
        fj, fk0 = t(j), t(k0)
        for n in range(n_views):
            m = matrices[n]
            q = projections[n]
            for i in range(nx):
                fi = t(i)
                qu0 = ((m[0, 0] * fi + m[0, 1] * fj) + m[0, 2] * fk0) + m[0, 3]
                qv0 = ((m[1, 0] * fi + m[1, 1] * fj) + m[1, 2] * fk0) + m[1, 3]
                qw0 = ((m[2, 0] * fi + m[2, 1] * fj) + m[2, 2] * fk0) + m[2, 3]
                qu, qv, qw = qu0, qv0, qw0
                for k in range(depth):
                    if fma_steps[n]:
                        # The kernels' fma(k, d, q0): k d and the sum are exact in float64
                        # (29 and < 53 bits for any sane geometry), then rounded once.
                        qu = t(np.float64(k) * np.float64(m[0, 2]) + np.float64(qu0))
                        qv = t(np.float64(k) * np.float64(m[1, 2]) + np.float64(qv0))
                        qw = t(np.float64(k) * np.float64(m[2, 2]) + np.float64(qw0))
                    inv_w = t(1.0) / qw
                    if software[n]:
                        value = _software_fetch32(q, qu * inv_w, qv * inv_w)
                    else:
                        value = _texture_fetch8(q, qu * inv_w, qv * inv_w)  # matrices shifted by half a texel
                    sums[k, i] = sums[k, i] + (value * inv_w) * inv_w
                    qu = qu + m[0, 2]  # running sums (overwritten above for fma steps)
                    qv = qv + m[1, 2]
                    qw = qw + m[2, 2]
        for k in range(depth):
            if k0 + k < nz:
                for i in range(nx):
                    out[k0 + k, j, i] = out[k0 + k, j, i] + sums[k, i] if accumulate else sums[k, i]


@serialized
def backproject_gpu_mirror(
    projections: np.ndarray,
    index_matrices: np.ndarray,
    out: np.ndarray,
    *,
    depth: int,
    software,
    fma_steps=None,
    accumulate: bool = False,
    slices=None,
) -> np.ndarray:
    """What a CUDA kernel computes, on the CPU (float32): the texture kernel
    (``software=False``), the software kernels ("global", "quad": ``True``),
    or a per-view mix (a boolean array: "ray-hybrid"). For tests, and for
    users who need GPU-identical results without a GPU. ``index_matrices``
    as the kernels take them (``leveret.cpu.cone_plan.kernel_matrices``:
    float32, texture views shifted by half a texel). ``slices=(k0, k1)``, k0 a
    multiple of ``depth``: only those z slices are written. ``fma_steps``: the
    views whose z coordinates the kernel computes in one fma per voxel
    (``leveret.cpu.cone_plan.fma_steps``; default: the software views)."""
    n_views = projections.shape[0]
    software = np.broadcast_to(np.asarray(software, bool), (n_views,)).copy()
    fma_steps = software if fma_steps is None else np.broadcast_to(np.asarray(fma_steps, bool), (n_views,)).copy()
    k0, k1 = (0, out.shape[0]) if slices is None else slices
    _backproject_gpu_mirror(
        np.ascontiguousarray(projections, np.float32),
        np.ascontiguousarray(index_matrices, np.float32),
        out,
        depth,
        accumulate,
        software,
        fma_steps,
        k0 // depth,
        -(-k1 // depth),
    )
    return out
