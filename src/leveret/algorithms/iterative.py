"""Iterative reconstruction on any ``Projector``: ``sirt``, ``os_sart``, ``cgls``.

They use only ``A(x)``, ``A.T(y)``, ``A.subset(views)`` and the metadata of
:class:`leveret.operators.Projector`, never a kernel.

Every method takes

- ``iterations`` (a positive int; one iteration of ``os_sart`` is one pass
  over all subsets),
- ``x0`` (initial volume, default zeros),
- ``tol``: stop when the relative residual ``||b - A x|| / ||b||`` is at or
  below it,
- ``callback(x, info)`` after each iteration, with ``info`` a dict of
  ``iteration`` (1-based), ``residual`` (the relative residual above, of the
  iterate passed) and ``time`` (seconds since the start); a callback that
  returns True stops the iterations,
- ``progress``: a tqdm progress bar on stderr.

NumPy in, NumPy out; CuPy projections (with a ``backend="cuda"`` projector)
keep every array on the GPU.

Memory, besides the projections ``b`` and the volume ``x`` returned: ``sirt``
2 projection-sized and 2 volume-sized arrays; ``os_sart`` 2 projection-sized
(the ray weights and a residual of one subset) and 2 volume-sized arrays, plus
one volume per subset with ``store_weights=True``; ``cgls`` 2 projection-sized
and 2 volume-sized arrays. ``A.T`` itself takes one private volume per thread
on the CPU; on CUDA the structured paths take one z-fastest volume in ``A`` and
in ``A.T``, and structured Joseph's voxel-driven ``A.T`` also a value table of
about one projection set (at most 2 GiB per batch of views; see ``Projector``).
"""

from __future__ import annotations

import math
import time

import numpy as np

from .. import _validate as v
from ._coverage import check_views


def _setup(projections, projector, iterations, x0, bounds):
    if not (
        callable(projector)
        and hasattr(projector, "T")
        and hasattr(projector, "volume")
        and hasattr(projector, "projection_shape")
    ):
        raise TypeError(f"projector: expected a leveret.Projector, got {type(projector).__name__}")
    iterations = v.positive_int("iterations", iterations)
    if hasattr(projector, "geometry"):
        check_views(projector.geometry)
    xp = v.array_module(projections)
    if xp is not np and getattr(projector, "backend", "cpu") != "cuda":
        raise ValueError("projections: a CuPy array needs a projector with backend='cuda', got a CPU projector")
    b = xp.asarray(projections)
    if b.shape != tuple(projector.projection_shape):
        raise ValueError(
            f"projections: expected shape {tuple(projector.projection_shape)} (the projector's geometry), got {b.shape}"
        )
    if xp is np:  # the iterate, its update and their weights; the data, residual and theirs
        itemsize = np.dtype(projector.dtype).itemsize
        v.check_allocation(
            "projector",
            3 * itemsize * (math.prod(projector.volume.shape) + b.size),
            "the iterations' volumes and projections",
        )
    v.check_finite_array("projections", b)
    b = xp.ascontiguousarray(b, dtype=projector.dtype)
    if x0 is None:
        x = xp.zeros(projector.volume.shape, projector.dtype)
    else:
        if v.array_module(x0) is not xp:
            raise ValueError(
                f"x0: expected a {xp.__name__} array like the projections, "
                f"got {type(x0).__module__}.{type(x0).__name__}"
            )
        x0 = xp.asarray(x0)
        if x0.shape != tuple(projector.volume.shape):
            raise ValueError(
                f"x0: expected the projector's volume shape {tuple(projector.volume.shape)}, got {x0.shape}"
            )
        v.check_finite_array("x0", x0)
        x = xp.array(x0, dtype=projector.dtype, order="C")
    lo, hi = -np.inf, np.inf
    if bounds is not None:
        if np.ndim(bounds) != 1 or len(bounds) != 2:
            raise ValueError(f"bounds: expected (low, high), either may be None, got {bounds!r}")
        lo = -np.inf if bounds[0] is None else v.finite_float("bounds[0]", bounds[0])
        hi = np.inf if bounds[1] is None else v.finite_float("bounds[1]", bounds[1])
        if lo > hi:
            raise ValueError(f"bounds: expected low <= high, got ({lo:g}, {hi:g})")
    return b, x, iterations, (lo, hi)


def _relaxation(relaxation) -> float:
    """SIRT/SART's relaxation factor, which converges for values in (0, 2)."""
    relaxation = v.positive_float("relaxation", relaxation)
    if relaxation >= 2:
        raise ValueError(f"relaxation: expected a value in (0, 2), got {relaxation:g}")
    return relaxation


def _bounds(nonnegative, bounds):
    if nonnegative:
        if bounds is not None and bounds[0] is not None and bounds[0] < 0:
            raise ValueError("bounds: nonnegative=True conflicts with a negative lower bound")
        return (0.0 if bounds is None or bounds[0] is None else bounds[0], None if bounds is None else bounds[1])
    return bounds


def _clip(x, bounds):
    lo, hi = bounds
    if lo > -np.inf or hi < np.inf:
        v.array_module(x).clip(x, lo, hi, out=x)


def _inverse(a):
    """1/a where a > 0, else 0 (rays that miss the volume, voxels no ray sees)."""
    xp = v.array_module(a)
    positive = a > 0
    return xp.where(positive, 1.0 / xp.where(positive, a, 1), 0).astype(a.dtype, copy=False)


class _Loop:
    """Iteration bookkeeping shared by the methods: progress, callback, stopping."""

    def __init__(self, name, iterations, b, tol, callback, progress):
        from tqdm.auto import tqdm

        self.norm_b = _norm(b) or 1.0
        self.tol = None if tol is None else v.positive_float("tol", tol)
        if callback is not None and not callable(callback):
            raise TypeError(f"callback: expected a callable (x, info), got {type(callback).__name__}")
        self.callback = callback
        self.bar = tqdm(total=iterations, desc=name, disable=not progress, leave=False)
        # Whether anyone reads the residual (tol, callback, progress bar): if
        # not, the methods skip its norm (a device-to-host read and a sync per
        # iteration; for os_sart a whole forward projection per pass).
        self.wants_residual = self.tol is not None or callback is not None or bool(progress)
        self.t0 = time.perf_counter()

    def step(self, k, x, residual_norm) -> bool:
        """Report iteration k; True means stop. ``residual_norm`` may be a
        callable (evaluated only when ``wants_residual``)."""
        self.bar.update(1)
        if not self.wants_residual:
            return False
        if callable(residual_norm):
            residual_norm = residual_norm()
        rel = residual_norm / self.norm_b
        self.bar.set_postfix(residual=f"{rel:.3e}", refresh=False)
        stop = False
        if self.callback is not None:
            info = {"iteration": k, "residual": rel, "time": time.perf_counter() - self.t0}
            stop = bool(self.callback(x, info))
        return stop or (self.tol is not None and rel <= self.tol)

    def close(self):
        self.bar.close()


def _norm(a) -> float:
    """Euclidean norm, summed in float64. On CuPy one fused pass (a float64
    sum of squares): no float64 copy of a float32 array (1.5 GB for 720
    projections of 512^2), so per iteration the methods add only their
    elementwise updates and one scalar read-back to ``A`` and ``A.T``."""
    xp = v.array_module(a)
    if xp is np:
        return float(np.linalg.norm(a.ravel().astype(np.float64, copy=False)))
    return float(np.sqrt(float(v.reduce_on_device(_sum_squares(), (a,)))))


_SUM_SQUARES = None


def _sum_squares():
    """cupy.ReductionKernel: sum of x * x in float64 (built once)."""
    global _SUM_SQUARES
    if _SUM_SQUARES is None:
        import cupy

        _SUM_SQUARES = cupy.ReductionKernel(
            "T x",
            "float64 y",
            "(double)x * (double)x",
            "a + b",
            "y = a",
            "0",
            "leveret_sum_squares",
            reduce_type="double",
        )
    return _SUM_SQUARES


def sirt(
    projections,
    projector,
    iterations,
    *,
    x0=None,
    relaxation=1.0,
    nonnegative=False,
    bounds=None,
    tol=None,
    callback=None,
    progress=False,
):
    """Simultaneous Iterative Reconstruction Technique.

    ``x <- clip(x + relaxation * C A^T R (b - A x))`` with ``R = 1 / (A 1)``
    (per ray) and ``C = 1 / (A^T 1)`` (per voxel), zero where the sums are
    zero. For ``0 < relaxation < 2`` the weighted residual ``||b - A x||_R``
    never increases (with or without the box constraint, a projection in the
    C metric).

    Parameters
    ----------
    projections : ndarray, ``projector.projection_shape``
        Line integrals (value x length), finite.
    projector : Projector
    iterations : int
        Maximum number of iterations (> 0).
    x0 : ndarray, ``projector.volume.shape``, optional
        Initial volume (attenuation per length unit); default zeros.
    relaxation : float in (0, 2)
    nonnegative : bool
        Clip to x >= 0 after every update (same as ``bounds=(0, None)``).
    bounds : (low, high), optional
        Box constraint; either end may be None.
    tol, callback, progress
        See the module notes.

    Returns
    -------
    ndarray, ``projector.volume.shape``, ``projector.dtype``
    """
    b, x, iterations, box = _setup(projections, projector, iterations, x0, _bounds(nonnegative, bounds))
    relaxation = _relaxation(relaxation)
    xp = v.array_module(b)
    R = _inverse(projector(xp.ones(projector.volume.shape, projector.dtype)))
    C = _inverse(projector.T(xp.ones(projector.projection_shape, projector.dtype)))
    C *= relaxation
    _clip(x, box)
    loop = _Loop("sirt", iterations, b, tol, callback, progress)
    try:
        r = b - projector(x)
        for k in range(1, iterations + 1):
            r *= R
            update = projector.T(r)
            update *= C
            x += update
            _clip(x, box)
            r = projector(x, out=r)
            xp.subtract(b, r, out=r)
            if loop.step(k, x, lambda: _norm(r)):
                break
    finally:
        loop.close()
    return x


def subset_order(angles, n_subsets: int) -> list[np.ndarray]:
    """Views in ``n_subsets`` subsets, in the order OS-SART visits them.

    Views are sorted by angle folded into the half circle (parallel lines at t
    and t + pi coincide; for cone beams the fold still spreads the subsets
    over the whole orbit); subset j takes every ``n_subsets``-th view from
    position j, so each one covers the whole angular range. Subsets are
    visited so that each next one is as far as possible (in angle offset)
    from those already used: 0, n/2, n/4, 3n/4, ... for powers of two.
    """
    angles = np.asarray(angles, np.float64)
    order = np.argsort(np.mod(angles, np.pi), kind="stable")
    subsets = [order[j::n_subsets] for j in range(n_subsets)]
    visit = [0]
    left = list(range(1, n_subsets))
    while left:
        # circular distance between offsets j and i among n_subsets positions
        dist = [min(min(abs(i - j), n_subsets - abs(i - j)) for j in visit) for i in left]
        visit.append(left.pop(int(np.argmax(dist))))
    return [subsets[j] for j in visit]


def os_sart(
    projections,
    projector,
    iterations,
    *,
    n_subsets=None,
    x0=None,
    relaxation=1.0,
    nonnegative=False,
    bounds=None,
    tol=None,
    callback=None,
    progress=False,
    store_weights=True,
):
    """Ordered-subsets SART: a SIRT update per subset of views.

    For each subset S (views spread over the angular range, visited in the
    order of :func:`subset_order`):
    ``x <- clip(x + relaxation * C_S A_S^T R_S (b_S - A_S x))`` with
    ``R_S = 1 / (A_S 1)`` and ``C_S = 1 / (A_S^T 1)``.

    Parameters
    ----------
    n_subsets : int, optional
        Default: about sqrt(number of views), at most the number of views.
        With 1 subset this is SIRT.
    store_weights : bool
        Keep the per-subset ``C_S`` (one volume per subset) rather than
        recomputing each with one extra ``A_S^T`` per subset and pass.
    Others as :func:`sirt`; the residual reported to ``callback`` and used
    by ``tol`` is that of the full data, computed once per pass (one extra
    forward projection per pass).

    Returns
    -------
    ndarray, ``projector.volume.shape``, ``projector.dtype``
    """
    b, x, iterations, box = _setup(projections, projector, iterations, x0, _bounds(nonnegative, bounds))
    relaxation = _relaxation(relaxation)
    n_views = projector.projection_shape[0]
    if n_subsets is None:
        n_subsets = max(1, int(round(np.sqrt(n_views))))
    n_subsets = v.positive_int("n_subsets", n_subsets)
    if n_subsets > n_views:
        raise ValueError(f"n_subsets: expected at most the number of views ({n_views}), got {n_subsets}")
    xp = v.array_module(b)
    subsets = subset_order(projector.view_angles(), n_subsets)
    ops = [projector.subset(s) for s in subsets]
    index = [xp.asarray(s) for s in subsets]  # view indices on the data's device
    R = _inverse(projector(xp.ones(projector.volume.shape, projector.dtype)))

    def column_weights(op):
        c = _inverse(op.T(xp.ones(op.projection_shape, projector.dtype)))
        c *= relaxation
        return c

    C = [column_weights(op) for op in ops] if store_weights else None
    _clip(x, box)
    loop = _Loop("os_sart", iterations, b, tol, callback, progress)
    try:
        for k in range(1, iterations + 1):
            for j, (s, op) in enumerate(zip(index, ops)):
                r = op(x)
                xp.subtract(b[s], r, out=r)
                r *= R[s]
                update = op.T(r)
                update *= C[j] if C is not None else column_weights(op)
                x += update
                _clip(x, box)
            if loop.step(k, x, lambda: _norm(b - projector(x))):
                break
    finally:
        loop.close()
    return x


def cgls(projections, projector, iterations, *, x0=None, tol=None, callback=None, progress=False):
    """Conjugate gradients on the normal equations (CGLS): least squares
    ``min ||b - A x||_2``.

    Unconstrained (a clip would break the conjugacy), so no ``bounds``. In
    exact arithmetic ``||b - A x_k||`` never increases and the iterates reach
    the least-squares solution nearest ``x0`` after at most ``rank(A)``
    iterations.

    Parameters as :func:`sirt`.

    Returns
    -------
    ndarray, ``projector.volume.shape``, ``projector.dtype``
    """
    b, x, iterations, _ = _setup(projections, projector, iterations, x0, None)
    loop = _Loop("cgls", iterations, b, tol, callback, progress)
    try:
        r = b - projector(x)
        s = projector.T(r)
        p = s.copy()
        gamma = _norm(s) ** 2
        for k in range(1, iterations + 1):
            if gamma == 0.0:  # A^T r = 0: x already solves the least-squares problem
                loop.step(k, x, lambda: _norm(r))
                break
            q = projector(p)
            qq = _norm(q) ** 2
            if qq == 0.0:
                break
            alpha = gamma / qq
            x += alpha * p
            r -= alpha * q
            del q
            s = projector.T(r, out=s) if _takes_out(projector.T) else projector.T(r)
            gamma_new = _norm(s) ** 2
            p *= gamma_new / gamma
            p += s
            gamma = gamma_new
            if loop.step(k, x, lambda: _norm(r)):
                break
    finally:
        loop.close()
    return x


def _takes_out(op) -> bool:
    import inspect

    try:
        return "out" in inspect.signature(op).parameters
    except (TypeError, ValueError):
        return False
