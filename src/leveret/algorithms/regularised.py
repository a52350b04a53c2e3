"""Total-variation regularised reconstruction on any ``Projector``: ``fista``
and ``pdhg``.

Both minimise the same objective over volumes ``x`` (2D or 3D)::

    F(x) = 0.5 sum_i w_i ((A x)_i - b_i)^2 + tv * TV(x)     subject to lo <= x <= hi

with ``w = 1`` unless ``weights`` are given, and ``TV`` the isotropic total
variation of :mod:`leveret.operators.tv`: the sum over voxels of the norm of
the forward differences, in voxel units, Neumann boundary. The voxel size
does not enter TV, so ``tv`` has the units of the data term (squared line
integrals) per unit of ``x``: another voxel size, or other units, needs
another ``tv``.

They use only ``A(x)``, ``A.T(y)`` and the projector's metadata, and the TV
steps of :mod:`leveret.operators.tv` (CUDA for CuPy arrays, Numba for NumPy
arrays), never a kernel. Every iteration costs one ``A`` and one ``A.T``.

Arguments shared with :func:`leveret.sirt`: ``iterations`` (> 0), ``x0``,
``nonnegative``/``bounds``, ``callback(x, info)`` after each iteration (True
stops; ``x`` is the live iterate, which later iterations overwrite: copy it
to keep it), ``progress`` (a tqdm bar on stderr). Besides:

- ``tv``: the weight of TV (>= 0; 0 is least squares);
- ``weights``: per projection value, finite and >= 0 (e.g. the counts,
  inverse variances of ``-log(counts / I0)``); a weight 0 leaves the value out;
- ``norm``: ``||A||_2`` if known; otherwise an upper bound found once per
  projector by :func:`operator_norm` (a few ``A``/``A.T`` pairs) and cached;
- ``tol``: stop when the relative change of the iterate is at or below it
  (``info["change"]``);
- ``stats``: a dict filled with per-iteration lists ``objective``,
  ``residual``, ``change``, and ``iterations``, ``norm``, ``seconds``,
  ``setup_seconds`` (plus each method's own entries).

``info`` holds ``iteration`` (1-based), ``objective`` (F of the iterate
passed), ``data`` (its data term), ``tv`` (its TV, unweighted),
``residual`` (``||b - A x|| / ||b||``, unweighted), ``change`` and ``time``.
The objective is exact at every iteration at no extra projection: both
methods keep ``A x`` of their iterates (one more projection-sized array).

Arrays: NumPy in, NumPy out; CuPy in, CuPy out. With a ``backend="cuda"``
projector NumPy data are uploaded once and every iteration runs on the GPU
(not only ``A`` and ``A.T``): the memory counts below are then GPU memory.

Divergence: a non-finite or overflowing value in any step raises a
``FloatingPointError`` that names the step (data gradient, TV proximal step,
forward projection, primal or dual update) and the iteration; nothing is
returned and the inputs are not changed.
"""

from __future__ import annotations

import math
import threading
import time
import weakref

import numpy as np

from .. import _validate as v
from ..operators import tv as tvop
from .iterative import _bounds, _norm, _setup, _takes_out

#: Power-iteration steps (``A``/``A.T`` pairs) at most for ``||A||``.
NORM_ITERATIONS = 10
#: The power iteration stops when its upper bound of ``||A||`` is within this
#: factor of its lower bound.
NORM_GAP = 1.02
#: For an operator with negative weights (no upper bound), the estimate from
#: below is multiplied by this.
NORM_MARGIN = 1.05


#: Values per chunk of the float64 sums on the CPU (their temporaries: two
#: float64 chunks at a time, 16 MiB).
CHUNK = 1 << 20


# -- ||A||, once per projector -----------------------------------------------------------------

_NORMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_NORMS_LOCK = threading.Lock()


def operator_norm(projector, *, iterations: int = NORM_ITERATIONS) -> float:
    """An upper bound of ``||A||_2`` for ``projector``, by power iteration on
    ``A^T A`` from a volume of ones, cached per projector object (a subset
    or another projector has its own).

    Each step ``y = A^T A x`` gives a lower bound, ``||A x||^2 / ||x||^2``,
    and, for ``A`` with nonnegative weights (every :class:`Projector`: ray
    lengths and interpolation weights), the upper bound of Collatz and
    Wielandt, ``max_j y_j / x_j`` over ``x_j > 0`` (``x`` stays positive).
    The iteration stops when the two are within ``NORM_GAP`` (within 2.3 %
    after 4 steps on a 30-view cone scan, where the lower bound alone still
    moves after 30) or after ``iterations`` ``A``/``A.T`` pairs, and returns
    the upper bound: step sizes from it are safe. An operator with negative
    weights gets the lower bound times ``NORM_MARGIN``. Thread-safe: a second
    caller waits for the first one's estimate.
    """
    iterations = v.positive_int("iterations", iterations)
    with _NORMS_LOCK:
        entry = _NORMS.get(projector)
        if entry is None:
            entry = _NORMS[projector] = {"lock": threading.Lock(), "norm": None}
    with entry["lock"]:
        if entry["norm"] is None:
            entry["norm"] = _power_iteration(projector, iterations)
        return entry["norm"]


def _power_iteration(projector, iterations: int) -> float:
    if getattr(projector, "backend", "cpu") == "cuda":
        import cupy as xp
    else:
        xp = np
    x = xp.ones(projector.volume.shape, projector.dtype)
    x /= _norm(x)
    lower = upper = 0.0
    for _ in range(iterations):
        ax = projector(x)
        lower = _norm(ax) ** 2  # ||A x||^2 with ||x|| = 1
        if lower == 0.0:
            raise ValueError("projector: A x = 0 for a volume of ones; no ray meets the volume")
        y = projector.T(ax)
        upper = _largest_ratio(y, x)  # inf where a weight is negative: no bound
        if math.sqrt(upper / lower) <= NORM_GAP:
            break
        x = y
        x /= _norm(y)
    if not math.isfinite(upper):
        return math.sqrt(lower) * NORM_MARGIN
    return math.sqrt(upper)


def _largest_ratio(y, x) -> float:
    """``max y_j / x_j`` over ``x_j > 0``; inf if any ``x_j`` or ``y_j`` is
    negative (the bound needs nonnegative weights)."""
    xp = v.array_module(x)
    if float(xp.min(x)) < 0 or float(xp.min(y)) < 0:
        return math.inf
    if xp is not np:
        return float(v.reduce_on_device(_ratio_kernel(), (y, x), combine="max"))
    largest = 0.0
    fy, fx = y.reshape(-1), x.reshape(-1)
    step = CHUNK
    for i in range(0, fx.size, step):
        xs, ys = fx[i : i + step], fy[i : i + step]
        seen = xs > 0
        if seen.any():
            largest = max(largest, float((ys[seen].astype(np.float64) / xs[seen]).max()))
    return largest


_RATIO = None


def _ratio_kernel():
    """cupy.ReductionKernel: max of y / x over x > 0, in float64 (built once)."""
    global _RATIO
    if _RATIO is None:
        import cupy

        _RATIO = cupy.ReductionKernel(
            "T y, T x",
            "float64 r",
            "x > 0 ? (double)y / (double)x : 0.0",
            "max(a, b)",
            "r = a",
            "0",
            "leveret_largest_ratio",
            reduce_type="double",
        )
    return _RATIO


# -- what both methods share -------------------------------------------------------------------


class _Problem:
    """The checked inputs of one run: data, first iterate, box, weights, tv."""

    def __init__(
        self,
        name,
        projections,
        projector,
        iterations,
        *,
        tv,
        x0,
        nonnegative,
        bounds,
        weights,
        norm,
        preconditioned=False,
    ):
        self.name = name
        self.lam = v.finite_float("tv", tv)
        if self.lam < 0:
            raise ValueError(f"tv: expected a weight >= 0, got {self.lam:g}")
        self.norm = None if norm is None else v.positive_float("norm", norm)
        host_in = v.array_module(projections) is np
        if (
            host_in
            and getattr(projector, "backend", "cpu") == "cpu"
            and hasattr(projector, "volume")
            and hasattr(projector, "projection_shape")
            and hasattr(projector, "dtype")
        ):
            weighted = weights is not None
            n_volumes, n_projections = _counts(name, len(projector.volume.shape), weighted, preconditioned)
            v.check_allocation(
                "projector",
                memory_bytes(name, projector, weights=weighted, preconditioned=preconditioned),
                f"{name}'s {n_volumes} volumes and {n_projections} projection sets",
            )
        self.b, x, self.iterations, self.box = _setup(
            projections, projector, iterations, x0, _bounds(nonnegative, bounds)
        )
        self.projector = projector
        self.to_host = host_in and getattr(projector, "backend", "cpu") == "cuda"
        if self.to_host:  # every iteration on the GPU, not only A and A.T; the result comes back
            import cupy

            self.b, x = cupy.asarray(self.b), cupy.asarray(x)
        self.xp = v.array_module(self.b)
        lo, hi = self.box
        if lo > -np.inf or hi < np.inf:
            self.xp.clip(x, lo, hi, out=x)
        self.x0 = x
        self.given_x0 = x0 is not None
        self.weights = None
        if weights is not None:
            self.weights = self._weights(weights)
        self.norm_b = _norm(self.b) or 1.0
        self.ndim = len(projector.volume.shape)

    def _weights(self, weights):
        xp = self.xp
        if v.array_module(weights) is not np and xp is np:
            raise ValueError("weights: expected a NumPy array like the projections, got a CuPy array")
        v.check_finite_array("weights", weights)
        if tuple(weights.shape) != tuple(self.b.shape):
            raise ValueError(
                f"weights: expected the projections' shape {tuple(self.b.shape)}, got {tuple(weights.shape)}"
            )
        w = xp.ascontiguousarray(xp.asarray(weights), dtype=self.b.dtype)
        if float(w.min()) < 0:
            raise ValueError(f"weights: expected values >= 0, got a minimum of {float(w.min()):g}")
        if float(w.max()) == 0:
            raise ValueError("weights: all zero; no data term is left")
        return w

    def apply(self, what: str, k: int, op, arr, out):
        """``op(arr, out=out)``; a ValueError (the operators' overflow check)
        becomes the divergence error for step ``what``."""
        try:
            return op(arr, out=out) if out is not None and _takes_out(op) else op(arr)
        except ValueError as exc:
            raise self.diverged(what, k, str(exc)) from exc

    def diverged(self, what: str, k: int, detail: str = "") -> FloatingPointError:
        return FloatingPointError(
            f"{self.name}: diverged at iteration {k} in the {what}"
            + (f" ({detail})" if detail else "")
            + "; no volume is returned. Check the data's scale, tv and norm (a norm below ||A|| makes the "
            "steps too long)"
        )

    def data_terms(self, ax) -> tuple[float, float]:
        """(0.5 sum w (A x - b)^2, ||A x - b||) in float64."""
        unweighted = _distance_squared(ax, self.b, None)
        weighted = unweighted if self.weights is None else _distance_squared(ax, self.b, self.weights)
        return 0.5 * weighted, math.sqrt(unweighted)

    def objective(self, what: str, k: int, ax, x) -> dict:
        data, residual = self.data_terms(ax)
        tv_value = tvop.total_variation(x)
        value = data + self.lam * tv_value
        if not math.isfinite(value):  # a finite TV: the iterate is finite, its projection is not
            step = what if not math.isfinite(tv_value) else "forward projection"
            raise self.diverged(step, k, "the objective is not finite")
        return {"objective": value, "data": data, "tv": tv_value, "residual": residual / self.norm_b}

    def result(self, x):
        return x.get() if self.to_host else x


class _Monitor:
    """Progress bar, callback, ``tol`` on the relative change, ``stats``."""

    def __init__(self, name, iterations, tol, callback, progress, stats, to_host=False):
        from tqdm.auto import tqdm

        self.to_host = to_host
        self.tol = None if tol is None else v.positive_float("tol", tol)
        if callback is not None and not callable(callback):
            raise TypeError(f"callback: expected a callable (x, info), got {type(callback).__name__}")
        if stats is not None and not isinstance(stats, dict):
            raise TypeError(f"stats: expected a dict to fill, got {type(stats).__name__}")
        self.callback = callback
        self.stats = stats
        self.history = {"objective": [], "data": [], "tv": [], "residual": [], "change": []}
        self.bar = tqdm(total=iterations, desc=name, disable=not progress, leave=False)
        self.t0 = time.perf_counter()
        self.iterations = 0

    def step(self, k, x, terms: dict, change: float) -> bool:
        self.iterations = k
        info = {"iteration": k, **terms, "change": change, "time": time.perf_counter() - self.t0}
        for key in self.history:
            self.history[key].append(info[key])
        self.bar.update(1)
        self.bar.set_postfix(objective=f"{info['objective']:.6e}", change=f"{change:.2e}", refresh=False)
        if self.callback is not None and self.to_host:
            x = x.get()  # NumPy in: the callback sees NumPy, as the result
        stop = bool(self.callback(x, info)) if self.callback is not None else False
        return stop or (self.tol is not None and change <= self.tol)

    def close(self, **extra):
        self.bar.close()
        if self.stats is not None:
            self.stats.update(self.history)
            self.stats.update({"iterations": self.iterations, "seconds": time.perf_counter() - self.t0, **extra})


def _distance_squared(a, b, w) -> float:
    """``sum w (a - b)^2`` (``w`` None: 1) in float64, without a temporary of
    ``a``'s size on the GPU."""
    xp = v.array_module(a)
    if xp is not np:
        return float(v.reduce_on_device(_distance_kernel(w is not None), (a, b, a if w is None else w)))
    total = 0.0
    fa, fb = a.reshape(-1), b.reshape(-1)
    fw = None if w is None else w.reshape(-1)
    step = CHUNK
    for i in range(0, fa.size, step):
        d = fa[i : i + step].astype(np.float64) - fb[i : i + step]
        total += float(np.dot(d, d) if fw is None else np.dot(d * d, fw[i : i + step]))
    return total


_DISTANCE = {}


def _distance_kernel(weighted: bool):
    """cupy.ReductionKernel: sum of w (a - b)^2 in float64 (built once)."""
    if weighted not in _DISTANCE:
        import cupy

        expr = (
            "(double)w * ((double)a - (double)b) * ((double)a - (double)b)"
            if weighted
            else "((double)a - (double)b) * ((double)a - (double)b)"
        )
        _DISTANCE[weighted] = cupy.ReductionKernel(
            "T a, T b, T w",
            "float64 y",
            expr,
            "a + b",
            "y = a",
            "0",
            f"leveret_distance_{int(weighted)}",
            reduce_type="double",
        )
    return _DISTANCE[weighted]


def _relative_change(new, old) -> float:
    """``||new - old|| / ||new||`` (0 when both are 0)."""
    size = _norm(new)
    diff = math.sqrt(_distance_squared(new, old, None))
    return diff / size if size > 0 else (0.0 if diff == 0 else math.inf)


def _combine(target, other, c):
    """``target = other + c (target - other)`` in place, without temporaries."""
    target -= other
    target *= c
    target += other
    return target


def memory_bytes(method: str, projector, *, weights: bool = False, preconditioned: bool = False) -> int:
    """Bytes of the arrays ``method`` ("fista" or "pdhg") holds during its
    iterations on ``projector``: the volume it returns and the data's working
    copy included, the operator's own work space (see ``Projector``) not.
    On the GPU for a CUDA projector, else in host memory.

    fista: ``3 + 2 ndim`` volumes (the iterate, the extrapolated point, the
    gradient; the TV dual field and its momentum) and 3 projection sets (the
    data, ``A x``, ``A z``), plus one with ``weights``.
    pdhg: ``2 + ndim`` volumes (two iterates, the TV dual field) and 4
    projection sets (the data, the data term's dual, ``A x`` of two iterates),
    plus one with ``weights`` and, ``preconditioned``, one volume and one
    projection set (the diagonal steps).

    Not counted, as they last a moment: the sums' float64 chunks on the CPU
    (``CHUNK``, 16 MiB), the power iteration's two arrays before the first
    iteration, and the preconditioned set-up's (up to three projection sets).
    tests/algorithms/test_regularised.py checks the count against what a
    run holds.
    """
    method = v.choice("method", method, ("fista", "pdhg"))
    n_vol, n_proj = _counts(method, len(projector.volume.shape), weights, preconditioned)
    itemsize = np.dtype(projector.dtype).itemsize
    return itemsize * (n_vol * math.prod(projector.volume.shape) + n_proj * math.prod(projector.projection_shape))


def _counts(method: str, ndim: int, weighted: bool, preconditioned: bool) -> tuple[int, int]:
    """(volumes, projection sets) :func:`memory_bytes` counts."""
    if method == "fista":
        return 3 + 2 * ndim, 3 + int(weighted)
    return 2 + ndim + int(preconditioned), 4 + int(weighted) + int(preconditioned)


# -- FISTA ---------------------------------------------------------------------------------------


def fista(
    projections,
    projector,
    iterations,
    *,
    tv,
    x0=None,
    nonnegative=False,
    bounds=None,
    weights=None,
    monotone=True,
    tv_iterations=tvop.PROX_ITERATIONS,
    norm=None,
    tol=None,
    callback=None,
    progress=False,
    stats=None,
):
    """FISTA (Beck and Teboulle, 2009) for TV-regularised least squares.

    Minimises ``F(x) = 0.5 ||A x - b||_W^2 + tv TV(x)`` within the box (the
    module notes). Each iteration is a gradient step on the data term from
    the extrapolated point ``y``, with step ``1 / L``, ``L = ||A||^2
    max(w)``, then the proximal step of ``(tv / L) TV`` with the box
    (:func:`leveret.operators.tv.prox`: ``tv_iterations`` FGP iterations on
    a dual field kept from one iteration to the next, a warm start)::

        z_k = prox(y_k - A^T W (A y_k - b) / L)
        x_k = z_k, or with ``monotone`` the one of z_k, x_{k-1} with the lower F
        y_{k+1} = x_k + t_k / t_{k+1} (z_k - x_k) + (t_k - 1) / t_{k+1} (x_k - x_{k-1})

    ``monotone=True`` is MFISTA (Beck and Teboulle, 2009, for TV
    deblurring): F(x_k) never increases, at the same O(1/k^2) rate. Both
    keep ``A x`` and ``A z`` so that F is known exactly at each iteration and
    ``A y`` is their combination: one ``A`` and one ``A.T`` per iteration.

    Parameters
    ----------
    projections : ndarray, ``projector.projection_shape``
    projector : Projector
    iterations : int
    tv : float >= 0
        Weight of the total variation.
    x0 : ndarray, ``projector.volume.shape``, optional (default zeros)
    nonnegative, bounds
        The box, as :func:`leveret.sirt`.
    weights : ndarray, ``projector.projection_shape``, optional
        Data weights ``w`` >= 0.
    monotone : bool
        MFISTA (F never increases) rather than plain FISTA.
    tv_iterations : int
        FGP iterations per proximal step.
    norm : float, optional
        ``||A||_2`` (default :func:`operator_norm`, cached).
    tol, callback, progress, stats
        See the module notes. ``info["change"]`` is ``||z_k - x_{k-1}|| /
        ||z_k||``; ``stats`` also gets ``rejected`` (the iterations whose
        ``z_k`` MFISTA did not take) and ``step`` (``1 / L``).

    Returns
    -------
    ndarray, ``projector.volume.shape``, ``projector.dtype``: ``x_k``.

    Memory, besides the operator's: ``3 + 2 ndim`` volumes (9 in 3D: the
    iterate, the extrapolated point, the gradient, the TV dual field and its
    momentum) and 3 projection sets (the data, ``A x`` and ``A z``), one more
    with ``weights`` (:func:`memory_bytes`).
    """
    run = _Problem(
        "fista",
        projections,
        projector,
        iterations,
        tv=tv,
        x0=x0,
        nonnegative=nonnegative,
        bounds=bounds,
        weights=weights,
        norm=norm,
    )
    tv_iterations = v.positive_int("tv_iterations", tv_iterations)
    xp, A, b, w = run.xp, projector, run.b, run.weights
    monitor = _Monitor("fista", run.iterations, tol, callback, progress, stats, run.to_host)
    t_setup = time.perf_counter()
    norm_a = run.norm if run.norm is not None else operator_norm(projector)
    lipschitz = norm_a**2 * (1.0 if w is None else float(w.max()))
    setup_seconds = time.perf_counter() - t_setup
    gamma = run.lam / lipschitz
    rejected = 0
    try:
        X = run.x0  # x_{k-1}: the iterate F judges
        AX = run.apply("forward projection A x0", 0, A, X, None) if run.given_x0 else xp.zeros_like(b)
        FX = run.objective("first iterate", 0, AX, X)
        Y = X.copy()  # y_k
        R = AX - b  # W (A y_k - b)
        if w is not None:
            R *= w
        G = xp.empty_like(X)
        q = xp.zeros((run.ndim,) + X.shape, X.dtype)  # the prox's dual field, warm from step to step
        t = 1.0
        for k in range(1, run.iterations + 1):
            G = run.apply("data gradient A^T W (A y - b)", k, A.T, R, G)
            G *= -1.0 / lipschitz
            G += Y  # y - grad / L
            Z = tvop.prox(G, gamma, iterations=tv_iterations, bounds=run.box, dual=q, out=Y)
            AZ = run.apply("forward projection A z", k, A, Z, R)
            FZ = run.objective("TV proximal step", k, AZ, Z)
            change = _relative_change(Z, X)
            t_next = (1.0 + math.sqrt(1.0 + 4.0 * t * t)) / 2.0
            accept = not monotone or FZ["objective"] <= FX["objective"]
            if accept:
                # y_{k+1} = x_{k-1} + c (z_k - x_{k-1}), into x_{k-1}'s arrays: z_k + (1 - c)(x_{k-1} - z_k)
                c = 1.0 + (t - 1.0) / t_next
                Y, R = _combine(X, Z, 1.0 - c), _combine(AX, AZ, 1.0 - c)
                X, AX, FX = Z, AZ, FZ
            else:
                c = t / t_next
                Y, R = _combine(Z, X, c), _combine(AZ, AX, c)
                rejected += 1
            R -= b
            if w is not None:
                R *= w
            t = t_next
            if monitor.step(k, X, FX, change):
                break
    finally:
        monitor.close(norm=norm_a, step=1.0 / lipschitz, rejected=rejected, setup_seconds=setup_seconds)
    return run.result(X)


# -- PDHG ----------------------------------------------------------------------------------------

#: PDHG's primal step (without preconditioning) is PDHG_BALANCE sqrt(x_scale /
#: y_scale) / ||A||, the primal and dual sizes estimated from the data
#: (:func:`_primal_step`): the best factor measured on a cone-beam head at
#: tv from 0.5 to 8 per mm and the same in cm (examples/regularised_demo.py
#: --steps; docs/regularised.md).
PDHG_BALANCE = 0.43
#: The data term's dual (the weighted residual) counted in y_scale as this
#: share of ||b||: it matters only where tv is 0 or tiny.
RESIDUAL_SHARE = 0.01


def _primal_step(run, norm_a: float) -> float:
    """tau from the sizes of the primal and dual solutions: Chambolle and Pock's
    bound is (||x* - x0||^2 / tau + ||y* - y0||^2 / sigma) / k, smallest for
    tau / sigma = ||x*|| / ||y*||. ``x_scale = ||b|| / ||A||`` (||x*|| at
    least); ``y_scale = tv sqrt(n_voxels)`` (the TV dual is at most tv per
    voxel) plus the residual's share. Both change with the units of lengths
    and values as the solutions do, so the step does not depend on them."""
    x_scale = run.norm_b / norm_a
    y_scale = run.lam * math.sqrt(math.prod(run.x0.shape)) + RESIDUAL_SHARE * run.norm_b
    return PDHG_BALANCE * math.sqrt(x_scale / y_scale) / norm_a


def pdhg(
    projections,
    projector,
    iterations,
    *,
    tv,
    x0=None,
    nonnegative=False,
    bounds=None,
    weights=None,
    preconditioned=False,
    tau=None,
    norm=None,
    tol=None,
    callback=None,
    progress=False,
    stats=None,
):
    """Primal-dual hybrid gradient (Chambolle and Pock, 2011) for
    TV-regularised least squares: the same objective as :func:`fista`.

    With ``K = [A; D]`` (``D`` the gradient of :mod:`leveret.operators.tv`)
    the problem is ``min_x G(x) + F1(A x) + F2(D x)``, ``G`` the box,
    ``F1(u) = 0.5 ||u - b||_W^2`` and ``F2 = tv ||.||_{2,1}``. Each iteration
    (theta = 1)::

        y = prox_{S F1*}(y + S A xbar) = W (y + S (A xbar - b)) / (W + S)
        p = project(p + s_D D xbar, tv)                (per voxel, norm <= tv)
        x_new = clip(x - T (A^T y + D^T p));   xbar = 2 x_new - x

    Steps: without preconditioning, scalars with ``T S ||A||^2 = T s_D
    ||D||^2 = 1/2`` (so ``||S^1/2 K T^1/2|| < 1``; ``||D||^2 <= 4 ndim``,
    ``||A||`` from :func:`operator_norm`, cached, or ``norm``) and ``T`` from
    the sizes of the solutions estimated from the data (:func:`_primal_step`:
    the same steps whatever the units of lengths and values), or ``tau``.
    With ``preconditioned=True`` the diagonal steps of
    Pock and Chambolle (2011, alpha = 1): ``S = 1 / (A 1)`` per ray, ``T = 1
    / (A^T 1 + c_D)`` per voxel (``c_D`` the voxel's number of differences,
    up to ``2 ndim``), ``s_D = 1/2``; no norm is needed, and one ``A`` and
    one ``A.T`` of ones are computed instead.

    Parameters
    ----------
    As :func:`fista`, and
    preconditioned : bool
        Diagonal preconditioning (above).
    tau : float, optional
        The primal step ``T`` (without preconditioning); the dual steps
        follow from it.

    ``info["change"]`` is ``||x_k - x_{k-1}|| / ||x_k||``; ``stats`` also gets
    ``tau`` and ``sigma`` (scalars, or None when preconditioned) and
    ``sigma_tv`` (the TV dual's step ``s_D``).

    Returns
    -------
    ndarray, ``projector.volume.shape``, ``projector.dtype``: ``x_k``.

    Memory, besides the operator's: ``2 + ndim`` volumes (5 in 3D: two
    iterates and the TV dual field) and 4 projection sets (the data, the
    data term's dual and ``A x`` of two iterates), one more with ``weights``,
    and one volume and one projection set more when ``preconditioned``
    (:func:`memory_bytes`).
    """
    if not isinstance(preconditioned, (bool, np.bool_)):
        raise ValueError(f"preconditioned: expected True or False, got {preconditioned!r}")
    if tau is not None:
        tau = v.positive_float("tau", tau)
        if preconditioned:
            raise ValueError("tau: preconditioned=True takes its steps per voxel from A; leave tau out")
    run = _Problem(
        "pdhg",
        projections,
        projector,
        iterations,
        tv=tv,
        x0=x0,
        nonnegative=nonnegative,
        bounds=bounds,
        weights=weights,
        norm=norm,
        preconditioned=preconditioned,
    )
    xp, A, b, w = run.xp, projector, run.b, run.weights
    monitor = _Monitor("pdhg", run.iterations, tol, callback, progress, stats, run.to_host)
    d_norm2 = tvop.gradient_norm_bound(run.ndim)
    t_setup = time.perf_counter()
    norm_a = None
    if preconditioned:
        from .iterative import _inverse

        sigma = _inverse(run.apply("forward projection A 1", 0, A, xp.ones(A.volume.shape, A.dtype), None))
        tau = run.apply("transpose A^T 1", 0, A.T, xp.ones(A.projection_shape, A.dtype), None)
        tau += _difference_counts(xp, A.volume.shape, A.dtype)
        tau = _inverse(tau)
        sigma_d = 0.5
    else:
        norm_a = run.norm if run.norm is not None else operator_norm(projector)
        tau = _primal_step(run, norm_a) if tau is None else tau
        sigma = 0.5 / (tau * norm_a**2)
        sigma_d = 0.5 / (tau * d_norm2)
    setup_seconds = time.perf_counter() - t_setup
    # prox of S F1*: y = W (y + S (A xbar - b)) / (W + S) = factor (y + S (A xbar - b))
    if w is None:
        factor = 1.0 / (1.0 + sigma)
    else:
        factor = w / (w + sigma)
        factor[w == 0] = 0
    try:
        X = run.x0
        AX = run.apply("forward projection A x0", 0, A, X, None) if run.given_x0 else xp.zeros_like(b)
        XP, AXP = X.copy(), AX.copy()  # x_{k-1} and A x_{k-1}: xbar = x_0 at first
        y = xp.zeros_like(b)
        p = xp.zeros((run.ndim,) + X.shape, X.dtype)
        for k in range(1, run.iterations + 1):
            # A xbar - b = 2 A x - A x_prev - b, into A x_prev's array
            xp.subtract(AX, AXP, out=AXP)
            AXP += AX
            AXP -= b
            AXP *= sigma
            y += AXP
            y *= factor
            tvop.dual_update(X, p, sigma=sigma_d, bound=run.lam, z1=XP, c0=2.0, c1=-1.0)
            G = run.apply("data dual update and its transpose A^T y", k, A.T, y, XP)
            X_new = tvop.primal_update(X, p, G, b=G, c=-1.0, step=tau, bounds=run.box)
            AX_new = run.apply("forward projection A x", k, A, X_new, AXP)
            terms = run.objective("primal update", k, AX_new, X_new)
            change = _relative_change(X_new, X)
            XP, X = X, X_new
            AXP, AX = AX, AX_new
            if monitor.step(k, X, terms, change):
                break
    finally:
        monitor.close(
            norm=norm_a,
            tau=None if preconditioned else tau,
            sigma=None if preconditioned else sigma,
            sigma_tv=sigma_d,
            setup_seconds=setup_seconds,
        )
    return run.result(X)


def _difference_counts(xp, shape, dtype):
    """Per voxel, the number of forward differences it enters (``2 ndim``
    inside, fewer on the faces): the column sums of ``|D|``."""
    counts = xp.zeros(shape, dtype)
    for axis, n in enumerate(shape):
        if n < 2:
            continue
        index = [slice(None)] * len(shape)
        index[axis] = slice(0, n - 1)
        counts[tuple(index)] += 1
        index[axis] = slice(1, n)
        counts[tuple(index)] += 1
    return counts
