"""Launcher for ``live_planes.cu``: the live reconstructor's back-projections
onto slices at any orientation, and the copy of filtered views into its store.

Every table (view numbers, per-view parameters, the plane's frame, texture
handles) is a kernel argument in global memory: the module has no constant
memory, so any number of threads and reconstructors may launch it at once.
The CPU mirror is :mod:`leveret.cpu.live_planes`.
"""

from __future__ import annotations

import numpy as np

from ._module import load_module

BLOCK = 256  # threads per block (the kernels' launch bounds)
DEFINES = (f"LEVERET_LIVE_BLOCK={BLOCK}",)


def _module():
    return load_module("live_planes")


def plane_params(angles, coef, det_spacing: float) -> np.ndarray:
    """(k, 3) float32 per view: ``cos / det_spacing``, ``sin / det_spacing`` and its weight."""
    angles = np.asarray(angles, np.float64)
    return np.stack(
        [np.cos(angles) / det_spacing, np.sin(angles) / det_spacing, np.asarray(coef, np.float64)], axis=1
    ).astype(np.float32)


def plane_table(frame, center: float, row_spacing: float, n_rows: int) -> np.ndarray:
    """(12,) float32 of a plane for the plane kernels: its (3, 3) ``frame``
    (world x, y, z of pixel (0, 0), the step along a row, the step along a
    column; :meth:`leveret.live.Slice.frame`), the rotation axis column, the
    rows per length unit and the detector's middle row."""
    f = np.asarray(frame, np.float64).reshape(3, 3)
    return np.concatenate([f[0], f[1], f[2], [center, 1.0 / row_spacing, (n_rows - 1) / 2]]).astype(np.float32)


def backproject_plane(q, views, params, table, out) -> None:
    """``out[j, i] += sum_k params[k, 2] q[views[k]]`` sampled at pixel (j, i)
    of the plane ``table`` (:func:`plane_table`), exact float32 bilinear weights;
    one launch on the current stream.

    ``q``: (n, n_rows, n_cols) float32 or float16 CuPy views, any view and row
    strides (the padded FFT output, a pitched store block); ``views`` (k,)
    int32 and ``params`` (k, 3) float32 (:func:`plane_params`) and ``table``
    on the device; ``out`` (h, w) float32, C-contiguous.
    """
    import cupy

    h, w = out.shape
    item = q.dtype.itemsize
    fp16 = q.dtype == np.float16
    base = q.view(cupy.uint16) if fp16 else q
    _module().get_function("plane_f16" if fp16 else "plane_f32")(
        (-(-w // BLOCK), h),
        (BLOCK,),
        (
            base,
            np.int64(q.strides[0] // item),
            np.int32(q.strides[1] // item),
            np.int32(q.shape[1]),
            np.int32(q.shape[2]),
            views,
            params,
            np.int32(views.size),
            table,
            out,
            np.int32(h),
            np.int32(w),
        ),
    )


def backproject_plane_texture(handles, params, table, out) -> None:
    """As :func:`backproject_plane`, each view sampled through its texture
    object (``handles``: (k,) uint64 on the device, linear filtering, border
    zero; the texture unit's 8-bit interpolation weights); one launch."""
    h, w = out.shape
    _module().get_function("plane_tex")(
        (-(-w // BLOCK), h), (BLOCK,), (handles, params, np.int32(handles.size), table, out, np.int32(h), np.int32(w))
    )


def backproject_points(q, views, coef, points, out, *, params, row_scale=None, row_offset=None) -> None:
    """``out[p] += sum_k coef[k] sample(q[views[k]], points[p])`` on the GPU
    (float32 arithmetic; :func:`leveret.cpu.live_planes.backproject_points` is
    the float64 mirror, and documents the arguments). ``q``: C-contiguous
    float32 or float16 CuPy views; ``points`` (n, 3) and ``out`` (n,) float32
    on the device; the small tables as NumPy."""
    import cupy

    views = np.asarray(views, np.int64)
    if views.size == 0:
        return
    params = np.asarray(params, np.float64)
    cone = params.ndim == 3
    fp16 = q.dtype == np.float16
    name = ("cone" if cone else "parallel") + ("_points_f16" if fp16 else "_points_f32")
    data = q.view(cupy.uint16) if fp16 else q
    n_points = points.shape[0]
    args = [
        data,
        cupy.ascontiguousarray(points, cupy.float32),
        cupy.asarray(views, cupy.int32),
        cupy.asarray(params.reshape(views.size, -1), cupy.float32),
        cupy.asarray(np.asarray(coef, np.float64), cupy.float32),
        out,
        np.int32(n_points),
        np.int32(views.size),
        np.int32(q.shape[1]),
        np.int32(q.shape[2]),
    ]
    if not cone:
        args += [np.float32(row_scale), np.float32(row_offset)]
    _module().get_function(name)((-(-n_points // BLOCK),), (BLOCK,), tuple(args))


def store_views(dst, src) -> None:
    """``dst[...] = src`` for (k, n_rows, n_cols) views: float32 ``src`` (any
    view and row pitch) into a float32 or float16 store block slice ``dst``
    (its own pitch); one launch on the current stream."""
    import cupy

    k, rows, cols = src.shape
    fp16 = dst.dtype == np.float16
    out = dst.view(cupy.uint16) if fp16 else dst
    _module().get_function("store_f16" if fp16 else "store_f32")(
        (-(-cols // BLOCK), rows, k),
        (BLOCK,),
        (
            src,
            np.int64(src.strides[0] // 4),
            np.int32(src.strides[1] // 4),
            out,
            np.int64(dst.strides[0] // dst.itemsize),
            np.int32(dst.strides[1] // dst.itemsize),
            np.int32(cols),
        ),
    )
