"""Isotropic total variation on a voxel grid: its value, gradient, the
gradient's transpose, the proximal step, and the fused primal and dual
updates that ``leveret.fista`` and ``leveret.pdhg`` are built on.

Definition (2D images and 3D volumes, NumPy or CuPy, float32 or float64)::

    TV(x) = sum over voxels v of |D x|_v,   |D x|_v = sqrt(sum_a (D x)_a[v]^2)
    (D x)_a[v] = x[v + e_a] - x[v]  where v_a < n_a - 1, else 0

forward differences along each array axis ``a`` **in voxel units** (the voxel
size does not enter: TV is the same number for a volume however large its
voxels; its weight ``tv`` in the methods carries the units), with a Neumann
boundary (no difference across the last plane of an axis). ``D`` has
``||D||^2 <= 4 ndim`` (8 in 2D, 12 in 3D).

A dual field ``q`` has shape ``(ndim,) + x.shape``: one component per axis in
array order (3D: z, y, x; 2D: y, x); the component of an axis on its last
plane is not an edge and is kept at 0. ``D^T q = -div q``.

Kernels: ``leveret/cuda/tv.cu`` for CuPy arrays, its Numba mirror
``leveret.cpu.tv`` for NumPy arrays; each fused step reads and writes every
array once per call (neighbours come from the caches).
"""

from __future__ import annotations

import math

import numpy as np

from .. import _validate as v

#: Default inner iterations of :func:`prox` (FGP, warm-started by the caller).
PROX_ITERATIONS = 10


def _kernels(xp):
    if xp is np:
        from ..cpu import tv
    else:
        from ..cuda import tv
    return tv


def _volume(name: str, x):
    """``x`` checked: a 2D or 3D C-contiguous float32/float64 NumPy or CuPy array."""
    xp = v.array_module(x)
    v.numeric_dtype(name, x)
    if x.ndim not in (2, 3):
        raise ValueError(f"{name}: expected a 2D image or a 3D volume, got {x.ndim} dimensions {x.shape}")
    if np.dtype(x.dtype) not in (np.float32, np.float64):
        raise TypeError(f"{name}: expected float32 or float64, got {x.dtype}")
    if not x.flags.c_contiguous:
        raise ValueError(f"{name}: expected a C-contiguous array")
    return xp


def _shape3(shape) -> tuple[int, int, int]:
    return tuple(shape) if len(shape) == 3 else (1,) + tuple(shape)


def _field(name: str, q, x):
    """``q`` checked against the volume ``x``: ``(ndim,) + x.shape``, same kind and dtype."""
    want = (x.ndim,) + tuple(x.shape)
    if (
        v.array_module(q) is not v.array_module(x)
        or tuple(q.shape) != want
        or q.dtype != x.dtype
        or not q.flags.c_contiguous
    ):
        raise ValueError(
            f"{name}: expected a C-contiguous {x.dtype} {v.array_module(x).__name__} array of "
            f"shape {want}, got {getattr(q, 'shape', type(q).__name__)} "
            f"{getattr(q, 'dtype', '')}".rstrip()
        )
    return q


def _bounds(bounds) -> tuple[float, float]:
    if bounds is None:
        return -math.inf, math.inf
    lo, hi = bounds
    return (-math.inf if lo is None else float(lo)), (math.inf if hi is None else float(hi))


def gradient_norm_bound(ndim: int) -> float:
    """An upper bound of ``||D||^2`` (``4 ndim``: each voxel is in at most
    ``2 ndim`` differences, each of two voxels)."""
    return 4.0 * ndim


def gradient(x, out=None):
    """``D x``: forward differences along every axis, Neumann boundary.

    Parameters
    ----------
    x : ndarray (ny, nx) or (nz, ny, nx), float32 or float64, NumPy or CuPy
    out : ndarray ``(x.ndim,) + x.shape``, optional

    Returns
    -------
    ndarray ``(x.ndim,) + x.shape``: component ``a`` is the difference along
    axis ``a`` (0 on the axis' last plane).
    """
    xp = _volume("x", x)
    out = xp.zeros((x.ndim,) + x.shape, x.dtype) if out is None else _field("out", out, x)
    out[...] = 0
    _kernels(xp).dual(x, None, 1.0, 0.0, out, out, None, 1.0, 0.0, math.inf, _shape3(x.shape), x.ndim)
    return out


def gradient_transpose(q, out=None):
    """``D^T q`` (= ``-div q``), the transpose of :func:`gradient`.

    Parameters
    ----------
    q : ndarray ``(ndim,) + shape``, ndim 2 or 3
    out : ndarray ``shape``, optional

    Returns
    -------
    ndarray ``shape``
    """
    if q.ndim not in (3, 4) or q.shape[0] != q.ndim - 1:
        raise ValueError(f"q: expected shape (ndim,) + volume shape with ndim 2 or 3, got {q.shape}")
    xp = _volume("q[0]", q[0])
    _field("q", q, q[0])
    if out is None:
        out = xp.empty(q.shape[1:], q.dtype)
    zeros = xp.zeros(q.shape[1:], q.dtype)
    _kernels(xp).primal(zeros, None, 0.0, -1.0, q, out, -math.inf, math.inf, _shape3(q.shape[1:]), q.shape[0])
    return out


def total_variation(x) -> float:
    """``TV(x) = sum_v |D x|_v`` (module notes), accumulated in float64.

    NaN or Inf in ``x`` give a non-finite value (the algorithms' divergence
    check relies on it).
    """
    xp = _volume("x", x)
    return _kernels(xp).norm_sum(x, _shape3(x.shape), x.ndim)


def prox(v_in, gamma: float, *, iterations: int = PROX_ITERATIONS, bounds=None, dual=None, out=None):
    """Proximal step of ``gamma TV`` (with an optional box constraint):

        argmin_x 0.5 ||x - v||^2 + gamma TV(x)   subject to lo <= x <= hi

    by FGP, the fast gradient projection of Beck and Teboulle (2009) on the
    dual, for a fixed number of iterations. With ``q = gamma p`` (``|q_v| <=
    gamma``), ``x(q) = clip(v - D^T q)`` and each iteration is one primal and
    one dual pass::

        z = clip(v - D^T r, lo, hi)
        q_new = project(r + D z / (4 ndim), gamma)
        r = q_new + (t_k - 1) / t_{k+1} (q_new - q)

    and the result is ``clip(v - D^T q, lo, hi)``. The step ``1 / (4 ndim)``
    is ``1 / ||D||^2`` (:func:`gradient_norm_bound`).

    Parameters
    ----------
    v_in : ndarray (ny, nx) or (nz, ny, nx), float32 or float64, NumPy or CuPy
    gamma : float >= 0
    iterations : int > 0
        FGP iterations (each reads and writes about ``5 ndim + 3`` volumes).
    bounds : (low, high), optional
        Box constraint; either may be None.
    dual : ndarray ``(ndim,) + v.shape``, optional
        The dual field ``q`` to start from, updated in place (pass the same
        array on the next call: a warm start). Default zeros.
    out : ndarray like ``v``, optional (not ``v`` itself)

    Returns
    -------
    ndarray like ``v``

    Memory: ``out``, and ``ndim`` volumes for ``r`` (plus ``ndim`` for
    ``dual`` when not given).
    """
    xp = _volume("v", v_in)
    gamma = v.finite_float("gamma", gamma)
    if gamma < 0:
        raise ValueError(f"gamma: expected a value >= 0, got {gamma:g}")
    iterations = v.positive_int("iterations", iterations)
    lo, hi = _bounds(bounds)
    ndim, shape3 = v_in.ndim, _shape3(v_in.shape)
    q = xp.zeros((ndim,) + v_in.shape, v_in.dtype) if dual is None else _field("dual", dual, v_in)
    if out is None:
        out = xp.empty_like(v_in)
    elif out is v_in:
        raise ValueError("out: the prox reads v at every iteration; pass another array")
    k = _kernels(xp)
    step = 1.0 / gradient_norm_bound(ndim)
    r = q.copy()
    t = 1.0
    for _ in range(iterations):
        k.primal(v_in, None, 0.0, 1.0, r, out, lo, hi, shape3, ndim)
        t_next = (1.0 + math.sqrt(1.0 + 4.0 * t * t)) / 2.0
        k.dual(out, None, 1.0, 0.0, r, q, r, step, (t - 1.0) / t_next, gamma, shape3, ndim)
        t = t_next
    k.primal(v_in, None, 0.0, 1.0, q, out, lo, hi, shape3, ndim)
    return out


def primal_update(a, q, out, *, b=None, c: float = 0.0, step=1.0, bounds=None):
    """``out = clip(a + step (c b - D^T q), lo, hi)`` in one pass: PDHG's
    primal step (``a`` = x, ``b`` = ``A^T y``, ``c`` = -1, ``step`` = tau, a
    float or a volume of per-voxel steps). ``out`` may be ``a`` or ``b``.
    Arrays as the kernels take them (C-contiguous, one dtype, one device);
    not checked here."""
    lo, hi = _bounds(bounds)
    _kernels(v.array_module(a)).primal(a, b, c, step, q, out, lo, hi, _shape3(a.shape), a.ndim)
    return out


def dual_update(z0, q, *, sigma: float, bound: float, z1=None, c0: float = 1.0, c1: float = 0.0):
    """``q = project(q + sigma D (c0 z0 + c1 z1), bound)`` per voxel, in
    place, in one pass: PDHG's dual step for the TV term (``z0`` = x_new,
    ``z1`` = x_old, ``c0`` = 2, ``c1`` = -1 for the extrapolated point).
    Arrays as the kernels take them; not checked here."""
    _kernels(v.array_module(z0)).dual(z0, z1, c0, c1, q, q, None, sigma, 0.0, bound, _shape3(z0.shape), z0.ndim)
    return q
