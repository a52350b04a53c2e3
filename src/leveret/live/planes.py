"""Back-projection onto arbitrary 3D points: the pixels of a slice at any orientation.

``backproject_points(q, views, coef, points, out, ...)`` adds
``sum_k coef[k] * sample(q[views[k]], point)`` to ``out`` for every point,
where ``sample`` is the bilinear value (zero off the detector) at the point's
detector position in view ``k``:

- parallel beam: ``column = x a[k] + y b[k] + c[k]`` (linear in the point)
  and ``row = z row_scale + row_offset`` (the same in every view);
- cone beam: ``(u w, v w, w) = P_k (x, y, z, 1)`` with FDK-normalised
  matrices, each sample weighted by ``1 / w^2``.

The CPU version (Numba, all cores, float64 arithmetic) and the CUDA version
(planes.cu, float32 arithmetic, float32 or float16 storage) evaluate the same
sum. Axial slices on the volume's grid go through
:class:`leveret.operators.ParallelBackprojection` /
:class:`leveret.operators.ConeBackprojection` instead.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numba
import numpy as np

from ..cpu.backproject_cone import _bilinear_zero_padded   # the CPU mirror's bilinear fetch, zero outside

BLOCK = 256   # threads per CUDA block


# Points go in blocks (a slice's rows): each thread takes a block and walks the
# views for all its points, so one view's nearby detector samples stay in cache.

@numba.njit(parallel=True, cache=True)
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


@numba.njit(parallel=True, cache=True)
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


def parallel_params(angles, centers, det_spacing: float) -> np.ndarray:
    """(n, 3) ``(a, b, c)`` with ``column = x a + y b + c`` at each angle."""
    angles = np.asarray(angles, np.float64)
    return np.stack([np.cos(angles) / det_spacing, np.sin(angles) / det_spacing,
                     np.asarray(centers, np.float64)], axis=1)


def backproject_points(q, views, coef, points, out, *, params, row_scale=None, row_offset=None,
                       chunk_views: int = 256, block: int = 256):
    """Add the weighted back-projection of stored views onto ``points`` to ``out``.

    Parameters
    ----------
    q : ndarray (n_stored, n_rows, n_cols), NumPy or CuPy, float32 or float16
        Filtered projections.
    views : ndarray of int (k,)
        Which stored views to use.
    coef : ndarray (k,)
        Weight of each of them.
    points : ndarray (n_points, 3)
        World (x, y, z) of the points; on the same array module as ``q``.
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
    if type(q).__module__.startswith("cupy"):
        _gpu_points(q, views, coef, points, out, params, row_scale, row_offset, cone)
        return out
    acc = np.zeros(out.shape, np.float64)
    for k0 in range(0, views.size, chunk_views if q.dtype == np.float16 else views.size):
        sel = slice(k0, k0 + (chunk_views if q.dtype == np.float16 else views.size))
        if q.dtype == np.float16:   # Numba reads float32: convert this chunk's views only
            qs, vs = q[views[sel]].astype(np.float32), np.arange(views[sel].size)
        else:
            qs, vs = q, views[sel]
        if cone:
            _cone_points(qs, vs, params[sel], coef[sel], points, acc, int(block))
        else:
            _parallel_points(qs, vs, params[sel], coef[sel], points, acc, float(row_scale), float(row_offset),
                             int(block))
    out += acc.astype(out.dtype)
    return out


@functools.lru_cache(maxsize=1)
def _module():
    import cupy
    from ..cuda._module import NVRTC_OPTIONS
    return cupy.RawModule(code=(Path(__file__).parent / "planes.cu").read_text(), options=NVRTC_OPTIONS)


def _gpu_points(q, views, coef, points, out, params, row_scale, row_offset, cone):
    import cupy

    fp16 = q.dtype == np.float16
    name = ("cone" if cone else "parallel") + ("_points_f16" if fp16 else "_points_f32")
    kernel = _module().get_function(name)
    data = q.view(cupy.uint16) if fp16 else q
    d_views = cupy.asarray(views, cupy.int32)
    d_params = cupy.asarray(params.reshape(views.size, -1), cupy.float32)
    d_coef = cupy.asarray(coef, cupy.float32)
    n_points = points.shape[0]
    grid = (-(-n_points // BLOCK),)
    args = [data, cupy.ascontiguousarray(points, cupy.float32), d_views, d_params, d_coef, out,
            np.int32(n_points), np.int32(views.size), np.int32(q.shape[1]), np.int32(q.shape[2])]
    if not cone:
        args += [np.float32(row_scale), np.float32(row_offset)]
    kernel(grid, (BLOCK,), tuple(args))
