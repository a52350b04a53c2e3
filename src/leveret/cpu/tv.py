"""Isotropic total variation's fused steps on the CPU (Numba, all cores):
the mirror of ``leveret/cuda/tv.cu``, operation for operation.

Volumes are (nz, ny, nx), C order, x fastest (a 2D image: nz = 1 with
``ndim`` = 2); a dual field is (ndim, nz, ny, nx), one component per axis in
array order (3D: z, y, x; 2D: y, x). Gradient: forward differences in voxel
units with a Neumann boundary, ``(D x)_a[v] = x[v + e_a] - x[v]`` where
``v_a < n_a - 1``, else 0; ``D^T q [v] = sum_a (q_a[v - e_a] [v_a > 0] -
q_a[v] [v_a < n_a - 1])``. A component on an axis' last plane is no edge:
``D^T`` ignores it and :func:`dual` writes 0 there. NaN propagates through
every step (clips and projections are comparisons).

The rows (z, y) run in parallel from ``PARALLEL_VOXELS`` voxels on (below,
starting the threads costs more than the work); each voxel reads its
neighbours and writes only itself, so ``out`` may be an input (see each
function).
"""

from __future__ import annotations

import math
import types

import numba
import numpy as np

from . import serialized

#: Volumes of at least this many voxels run on all cores, smaller ones on one.
PARALLEL_VOXELS = 1 << 15


def _compiled(function):
    """(parallel, serial) compilations of one kernel: prange is range in the
    serial one. The serial one is a copy of the function under another name:
    Numba's on-disk cache keys on the name and the bytecode, not on
    ``parallel``, and would hand one compilation to both."""
    serial = types.FunctionType(
        function.__code__,
        function.__globals__,
        function.__name__ + "_serial",
        function.__defaults__,
        function.__closure__,
    )
    serial.__qualname__ = function.__qualname__ + "_serial"
    return numba.njit(parallel=True, cache=True)(function), numba.njit(cache=True)(serial)


@serialized
def _parallel(kernel, *args):
    return kernel(*args)


def _run(kernels, n_voxels, *args):
    """The parallel kernel (taking turns where the threading layer needs it)
    or, below ``PARALLEL_VOXELS``, the serial one (no threads, no lock)."""
    if n_voxels >= PARALLEL_VOXELS:
        return _parallel(kernels[0], *args)
    return kernels[1](*args)


@numba.njit(inline="always")
def _transpose_gradient(q, z, y, x, nz, ny, nx, ndim):
    ax, ay = ndim - 1, ndim - 2
    d = q.dtype.type(0)
    if x > 0:
        d += q[ax, z, y, x - 1]
    if x < nx - 1:
        d -= q[ax, z, y, x]
    if y > 0:
        d += q[ay, z, y - 1, x]
    if y < ny - 1:
        d -= q[ay, z, y, x]
    if ndim == 3:
        if z > 0:
            d += q[0, z - 1, y, x]
        if z < nz - 1:
            d -= q[0, z, y, x]
    return d


def _primal(a, b, has_b, c, s, s_arr, has_s_arr, q, out, lo, hi, ndim):
    nz, ny, nx = a.shape
    for row in numba.prange(nz * ny):
        z, y = row // ny, row % ny
        for x in range(nx):
            value = c * b[z, y, x] if has_b else a.dtype.type(0)
            value -= _transpose_gradient(q, z, y, x, nz, ny, nx, ndim)
            step = s_arr[z, y, x] if has_s_arr else s
            r = a[z, y, x] + step * value
            out[z, y, x] = lo if r < lo else (hi if r > hi else r)


@numba.njit(inline="always")
def _field(z0, z1, has_z1, c0, c1, z, y, x):
    return c0 * z0[z, y, x] + c1 * z1[z, y, x] if has_z1 else c0 * z0[z, y, x]


def _dual(z0, z1, has_z1, c0, c1, r, q, r_out, has_r_out, sigma, beta, bound, ndim):
    nz, ny, nx = z0.shape
    ax, ay = ndim - 1, ndim - 2
    zero = z0.dtype.type(0)
    for row in numba.prange(nz * ny):
        z, y = row // ny, row % ny
        for x in range(nx):
            u = _field(z0, z1, has_z1, c0, c1, z, y, x)
            px = r[ax, z, y, x] + sigma * (_field(z0, z1, has_z1, c0, c1, z, y, x + 1) - u) if x < nx - 1 else zero
            py = r[ay, z, y, x] + sigma * (_field(z0, z1, has_z1, c0, c1, z, y + 1, x) - u) if y < ny - 1 else zero
            pz = zero
            if ndim == 3 and z < nz - 1:
                pz = r[0, z, y, x] + sigma * (_field(z0, z1, has_z1, c0, c1, z + 1, y, x) - u)
            norm = math.sqrt(px * px + py * py + pz * pz)
            f = bound / norm if norm > bound else z0.dtype.type(1)
            qx, qy, qz = px * f, py * f, pz * f
            if has_r_out:
                r_out[ax, z, y, x] = qx + beta * (qx - q[ax, z, y, x])
                r_out[ay, z, y, x] = qy + beta * (qy - q[ay, z, y, x])
                if ndim == 3:
                    r_out[0, z, y, x] = qz + beta * (qz - q[0, z, y, x])
            q[ax, z, y, x] = qx
            q[ay, z, y, x] = qy
            if ndim == 3:
                q[0, z, y, x] = qz


def _norm_sum(xv, ndim):
    nz, ny, nx = xv.shape
    total = 0.0
    for row in numba.prange(nz * ny):
        z, y = row // ny, row % ny
        acc = 0.0
        for x in range(nx):
            u = np.float64(xv[z, y, x])
            gx = np.float64(xv[z, y, x + 1]) - u if x < nx - 1 else 0.0
            gy = np.float64(xv[z, y + 1, x]) - u if y < ny - 1 else 0.0
            gz = np.float64(xv[z + 1, y, x]) - u if ndim == 3 and z < nz - 1 else 0.0
            acc += math.sqrt(gx * gx + gy * gy + gz * gz)
        total += acc
    return total


_PRIMAL, _DUAL, _NORM_SUM = _compiled(_primal), _compiled(_dual), _compiled(_norm_sum)


def primal(a, b, c, s, q, out, lo, hi, shape3, ndim):
    """``out = clip(a + s (c b - D^T q), lo, hi)`` (``b`` None: no term; ``s``
    a float or a volume). ``out`` may be ``a`` or ``b``. Volumes are viewed
    as ``shape3``, ``q`` as ``(ndim,) + shape3``."""
    t = a.dtype.type
    s_arr = s if getattr(s, "ndim", 0) > 0 else None
    a3 = a.reshape(shape3)
    b3 = a3 if b is None else b.reshape(shape3)
    s3 = a3 if s_arr is None else s_arr.reshape(shape3)
    _run(
        _PRIMAL,
        a.size,
        a3,
        b3,
        b is not None,
        t(c),
        t(0 if s_arr is not None else s),
        s3,
        s_arr is not None,
        q.reshape((ndim,) + shape3),
        out.reshape(shape3),
        t(lo),
        t(hi),
        ndim,
    )
    return out


def dual(z0, z1, c0, c1, r, q, r_out, sigma, beta, bound, shape3, ndim):
    """``q = project(r + sigma D (c0 z0 + c1 z1), bound)`` per voxel (``z1``
    None: no term); with ``r_out`` also ``r_out = q + beta (q - q_old)``.
    ``r``, ``q`` and ``r_out`` may be one array."""
    t = z0.dtype.type
    fields = (ndim,) + shape3
    z03 = z0.reshape(shape3)
    z13 = z03 if z1 is None else z1.reshape(shape3)
    q4 = q.reshape(fields)
    r4 = q4 if r_out is None else r_out.reshape(fields)
    _run(
        _DUAL,
        z0.size,
        z03,
        z13,
        z1 is not None,
        t(c0),
        t(c1),
        r.reshape(fields),
        q4,
        r4,
        r_out is not None,
        t(sigma),
        t(beta),
        t(bound),
        ndim,
    )
    return q


def norm_sum(x, shape3, ndim) -> float:
    """Sum over voxels of the gradient's norm, in float64."""
    return float(_run(_NORM_SUM, x.size, x.reshape(shape3), ndim))
