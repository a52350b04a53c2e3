"""fista and pdhg on small problems (CPU): the same minimiser as each other
and as an independent solver, the objective they report, monotone MFISTA,
weights, ||A|| and its cache, divergence and bad input."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import leveret
from leveret.algorithms import operator_norm
from leveret.algorithms.regularised import memory_bytes
from leveret.geometry import ConeGeometry, ParallelGeometry, VolumeGeometry
from leveret.operators import Projector


def reference_tv(x):
    """Isotropic TV from np.diff (forward differences, none across the last plane)."""
    total = np.zeros(x.shape)
    for a in range(x.ndim):
        d = np.zeros(x.shape)
        index = [slice(None)] * x.ndim
        index[a] = slice(0, -1)
        d[tuple(index)] = np.diff(x.astype(np.float64), axis=a)
        total += d**2
    return float(np.sqrt(total).sum())


def reference_objective(A, b, x, lam, w=None):
    r = A(x).astype(np.float64) - b
    return 0.5 * float(((1.0 if w is None else w) * r * r).sum()) + lam * reference_tv(x)


class MatrixOperator:
    """A Projector's explicit matrix behind the Projector's interface (``A(x,
    out)``, ``A.T(y, out)``, ``volume``, ``projection_shape``, ``dtype``,
    ``subset``): the same maths at microseconds per call, for the runs to
    convergence."""

    backend = "cpu"

    def __init__(self, A, matrix=None):
        self.volume, self.projection_shape, self.dtype = A.volume, tuple(A.projection_shape), A.dtype
        self.source = A
        self.M = (
            matrix
            if matrix is not None
            else np.stack([A(e.reshape(A.volume.shape)).ravel() for e in np.eye(A.volume.size, dtype=A.dtype)], axis=1)
        )
        self.T = _MatrixTranspose(self)

    def __call__(self, x, out=None):
        if out is None:
            return (self.M @ np.asarray(x).ravel()).reshape(self.projection_shape)
        np.matmul(self.M, x.reshape(-1), out=out.reshape(-1))  # no temporary
        return out

    def subset(self, views):
        per_view = int(np.prod(self.projection_shape[1:]))
        rows = (np.asarray(views)[:, None] * per_view + np.arange(per_view)).ravel()
        sub = MatrixOperator(self.source, self.M[rows])
        sub.projection_shape = (len(views),) + self.projection_shape[1:]
        return sub


class _MatrixTranspose:
    def __init__(self, op):
        self.op = op

    def __call__(self, y, out=None):
        if out is None:
            return (self.op.M.T @ np.asarray(y).ravel()).reshape(self.op.volume.shape)
        np.matmul(self.op.M.T, y.reshape(-1), out=out.reshape(-1))
        return out


@pytest.fixture(scope="module")
def problem():
    """10 x 10 disks, 9 angles (underdetermined), noisy: TV decides the minimiser."""
    volume = VolumeGeometry((10, 10), 1.0)
    geometry = ParallelGeometry(np.linspace(0, np.pi, 9, endpoint=False), 15)
    A = Projector(geometry, volume, model="siddon", precision="float64", backend="cpu")
    yy, xx = np.mgrid[:10, :10] - 4.5
    truth = 1.0 * (xx**2 + yy**2 < 16) + 0.5 * ((xx - 1) ** 2 + (yy + 1) ** 2 < 4)
    b = A(truth) + np.random.default_rng(3).normal(0, 0.3, A.projection_shape)
    return A, b, 1.5


@pytest.fixture(scope="module")
def matrix_problem(problem):
    A, b, lam = problem
    return MatrixOperator(A), b, lam


def smoothed_minimiser(A, b, lam, eps=1e-10):
    """An independent solver: L-BFGS-B on the TV smoothed as sqrt(|D x|^2 + eps),
    x >= 0, with the explicit matrix of A and the gradient from np.diff."""
    from scipy.optimize import minimize

    shape = A.volume.shape
    M = A.M

    def f(flat):
        x = flat.reshape(shape)
        dy = np.zeros(shape)
        dx = np.zeros(shape)
        dy[:-1] = np.diff(x, axis=0)
        dx[:, :-1] = np.diff(x, axis=1)
        n = np.sqrt(dy**2 + dx**2 + eps)
        r = M @ flat - b.ravel()
        gy, gx = dy / n, dx / n
        grad_tv = np.zeros(shape)  # D^T (D x / n)
        grad_tv[:-1] -= gy[:-1]
        grad_tv[1:] += gy[:-1]
        grad_tv[:, :-1] -= gx[:, :-1]
        grad_tv[:, 1:] += gx[:, :-1]
        return 0.5 * r @ r + lam * n.sum(), M.T @ r + lam * grad_tv.ravel()

    res = minimize(
        f,
        np.zeros(A.volume.size),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0, None)] * A.volume.size,
        options={"maxiter": 20000, "maxfun": 40000, "ftol": 1e-15, "gtol": 1e-11},
    )
    return res.x.reshape(shape)


def test_fista_and_pdhg_reach_the_same_minimiser(matrix_problem):
    """Run to convergence, FISTA, PDHG and preconditioned PDHG agree on the
    objective to 1e-6 and on the minimiser to 1e-3 of its largest value, and
    an independent solver (L-BFGS-B on a smoothed TV) finds no lower
    objective and the same volume to 1e-2 (the smoothing's own error)."""
    A, b, lam = matrix_problem
    runs = {
        "fista": leveret.fista(b, A, 400, tv=lam, nonnegative=True, tv_iterations=100),
        "pdhg": leveret.pdhg(b, A, 1500, tv=lam, nonnegative=True),
        "pdhg preconditioned": leveret.pdhg(b, A, 3000, tv=lam, nonnegative=True, preconditioned=True),
    }
    values = {k: reference_objective(A, b, x, lam) for k, x in runs.items()}
    best = min(values.values())
    scale = np.abs(runs["fista"]).max()
    for name, x in runs.items():
        assert values[name] <= best * (1 + 1e-6), name
        np.testing.assert_allclose(x, runs["fista"], atol=1e-3 * scale, err_msg=name)
        assert x.min() >= 0
    independent = smoothed_minimiser(A, b, lam)
    assert best <= reference_objective(A, b, independent, lam) * (1 + 1e-9)
    np.testing.assert_allclose(runs["fista"], independent, atol=1e-2 * scale)


@pytest.mark.parametrize("monotone", [True, False])
def test_fista_iterates_are_mfista_written_out(matrix_problem, monotone):
    """Beck and Teboulle's (M)FISTA written plainly, A y computed from y
    itself (leveret forms it from A x and A z), the same prox and step: the
    same iterates to rounding, the same rejections."""
    from leveret.operators import tv as tvop

    A, b, lam = matrix_problem
    shape, n_it = A.volume.shape, 60  # MFISTA rejects some of these (9 measured)
    stats, seen = {}, []
    leveret.fista(
        b,
        A,
        n_it,
        tv=lam,
        nonnegative=True,
        monotone=monotone,
        stats=stats,
        callback=lambda x, info: seen.append(x.copy()),
    )
    L = stats["norm"] ** 2

    def F(v):
        return reference_objective(A, b, v.reshape(shape), lam)

    x = np.zeros(A.volume.size)
    y, t, q, fx, rejected = x.copy(), 1.0, np.zeros((2,) + shape), F(x), 0
    for k in range(n_it):
        grad = A.M.T @ (A.M @ y - b.ravel())
        z = tvop.prox((y - grad / L).reshape(shape), lam / L, bounds=(0, None), dual=q).ravel()
        t_next = (1 + np.sqrt(1 + 4 * t * t)) / 2
        fz = F(z)
        x_new = z if (not monotone or fz <= fx) else x
        rejected += x_new is x
        fx = min(fz, fx) if monotone else fz
        y = x_new + t / t_next * (z - x_new) + (t - 1) / t_next * (x_new - x)
        x, t = x_new, t_next
        np.testing.assert_allclose(seen[k].ravel(), x, atol=1e-9, err_msg=f"iteration {k + 1}")
    assert stats["rejected"] == rejected and (rejected > 0) == monotone


def reference_gradient(x):
    g = np.zeros((x.ndim,) + x.shape)
    for a in range(x.ndim):
        index = [slice(None)] * x.ndim
        index[a] = slice(0, -1)
        g[a][tuple(index)] = np.diff(x, axis=a)
    return g


def reference_gradient_transpose(q):
    out = np.zeros(q.shape[1:])
    for a in range(q.shape[0]):
        n = q.shape[1 + a]
        qa, d = np.moveaxis(q[a], a, 0), np.moveaxis(out, a, 0)
        d[: n - 1] -= qa[: n - 1]
        d[1:] += qa[: n - 1]
    return out


@pytest.mark.parametrize("preconditioned", [False, True])
def test_pdhg_iterates_are_chambolle_pock_written_out(matrix_problem, preconditioned):
    """Chambolle and Pock's algorithm 1 (theta = 1) written plainly with the
    explicit matrix and np.diff, the steps leveret reports (preconditioned:
    Pock and Chambolle's alpha = 1 from the matrix's row and column sums):
    the same iterates to rounding, and steps within the convergence rule."""
    A, b, lam = matrix_problem
    shape, n_it = A.volume.shape, 30
    stats, seen = {}, []
    leveret.pdhg(
        b,
        A,
        n_it,
        tv=lam,
        nonnegative=True,
        preconditioned=preconditioned,
        stats=stats,
        callback=lambda x, info: seen.append(x.copy()),
    )
    M = A.M
    if preconditioned:
        degree = np.zeros(shape)  # |D|'s column sums: the differences a voxel enters
        for a in range(2):
            index = [slice(None)] * 2
            index[a] = slice(0, -1)
            degree[tuple(index)] += 1
            index[a] = slice(1, None)
            degree[tuple(index)] += 1
        tau = 1 / (M.sum(axis=0).reshape(shape) + degree)
        sigma = np.where(M.sum(axis=1) > 0, 1 / np.maximum(M.sum(axis=1), 1e-300), 0)
        sigma_tv = 0.5
    else:
        tau, sigma, sigma_tv = stats["tau"], stats["sigma"], stats["sigma_tv"]
        assert tau * sigma * np.linalg.norm(M, 2) ** 2 <= 0.5 * (1 + 1e-12)
        assert tau * sigma_tv * 8 <= 0.5 * (1 + 1e-12)  # ||D||^2 <= 8 in 2D
    x = np.zeros(shape)
    x_bar, y, p = x.copy(), np.zeros(M.shape[0]), np.zeros((2,) + shape)
    for k in range(n_it):
        y = (y + sigma * (M @ x_bar.ravel() - b.ravel())) / (1 + sigma)
        p = p + sigma_tv * reference_gradient(x_bar)
        p /= np.maximum(1.0, np.sqrt((p**2).sum(axis=0)) / lam)
        x_new = np.maximum(x - tau * ((M.T @ y).reshape(shape) + reference_gradient_transpose(p)), 0)
        x_bar, x = 2 * x_new - x, x_new
        np.testing.assert_allclose(seen[k], x, atol=1e-9, err_msg=f"iteration {k + 1}")


def test_fista_is_accelerated(matrix_problem):
    """With the default 10 FGP iterations FISTA is within 1e-4 of the lowest
    objective after 40 iterations (measured 4e-6); without its momentum
    (the proximal gradient method alone) it is not (measured 1e-3)."""
    A, b, lam = matrix_problem
    best, fast = {}, {}
    leveret.fista(b, A, 400, tv=lam, nonnegative=True, tv_iterations=100, stats=best)
    leveret.fista(b, A, 40, tv=lam, nonnegative=True, stats=fast)
    f_star = min(best["objective"])
    assert (fast["objective"][-1] - f_star) / f_star < 1e-4


@pytest.mark.parametrize("method", ["fista", "pdhg"])
def test_reported_objective_is_exact(problem, method):
    """info["objective"] is F of the iterate passed, computed from scratch
    here (A x and np.diff); MFISTA's never increases."""
    A, b, lam = problem
    seen = []

    def record(x, info):
        seen.append(
            (
                info["objective"],
                reference_objective(A, b, x, lam),
                info["residual"],
                np.linalg.norm(A(x) - b) / np.linalg.norm(b),
            )
        )

    stats = {}
    getattr(leveret, method)(b, A, 40, tv=lam, callback=record, stats=stats)
    reported, recomputed, residual, residual_ref = np.array(seen).T
    np.testing.assert_allclose(reported, recomputed, rtol=1e-10)
    np.testing.assert_allclose(residual, residual_ref, rtol=1e-10)
    np.testing.assert_array_equal(stats["objective"], reported)
    assert stats["iterations"] == 40 and len(stats["change"]) == 40
    if method == "fista":
        assert np.all(np.diff(reported) <= 0)
        assert reported[-1] < 0.5 * reported[0]


def test_plain_fista_is_not_held_monotone(matrix_problem):
    """monotone=False takes every z_k (no rejections), monotone=True rejects
    the steps that would raise F."""
    A, b, lam = matrix_problem
    plain, mono = {}, {}
    leveret.fista(b, A, 200, tv=lam, monotone=False, stats=plain)
    leveret.fista(b, A, 200, tv=lam, stats=mono)
    assert plain["rejected"] == 0 and mono["rejected"] > 0
    assert np.any(np.diff(plain["objective"]) > 0)  # FISTA's ripples
    assert np.all(np.diff(mono["objective"]) <= 0)


def test_without_tv_fista_is_least_squares():
    """tv=0: FISTA's objective reaches the least-squares residual (its
    guarantee is on the objective, at O(1/k^2))."""
    volume = VolumeGeometry((6, 6), 1.0)
    A = MatrixOperator(
        Projector(
            ParallelGeometry(np.linspace(0, np.pi, 8, endpoint=False), 9), volume, precision="float64", backend="cpu"
        )
    )
    b = np.random.default_rng(1).standard_normal(A.projection_shape)  # fixed: the rate depends on b
    x_ls = np.linalg.lstsq(A.M, b.ravel(), rcond=None)[0]
    best = 0.5 * np.sum((A.M @ x_ls - b.ravel()) ** 2)
    stats = {}
    x = leveret.fista(b, A, 3000, tv=0.0, stats=stats)
    assert stats["objective"][-1] == pytest.approx(0.5 * np.sum((A.M @ x.ravel() - b.ravel()) ** 2), rel=1e-12)
    assert best <= stats["objective"][-1] <= best * (1 + 1e-6)
    assert stats["objective"][99] > best * (1 + 1e-5)  # not there at once: the check can tell


def test_weights_enter_the_data_term(matrix_problem):
    """Weights 2 with twice the tv is the unweighted problem; weight 0 on
    some views is the problem without them."""
    A, b, lam = matrix_problem
    plain = leveret.fista(b, A, 800, tv=lam, tv_iterations=50)
    doubled = leveret.fista(b, A, 800, tv=2 * lam, weights=np.full(b.shape, 2.0), tv_iterations=50)
    np.testing.assert_allclose(doubled, plain, atol=1e-4 * np.abs(plain).max())
    keep = np.array([0, 2, 3, 5, 6, 8])
    w = np.zeros(b.shape)
    w[keep] = 1.0
    weighted = leveret.pdhg(b, A, 4000, tv=lam, weights=w)
    subset = leveret.pdhg(np.ascontiguousarray(b[keep]), A.subset(keep), 4000, tv=lam)
    np.testing.assert_allclose(weighted, subset, atol=1e-3 * np.abs(subset).max())
    assert np.abs(weighted - plain).max() > 0.05 * np.abs(plain).max()  # the views left out matter


def test_3d_cone_beam():
    """A small cone-beam volume: both methods lower the objective, keep the
    box, and start from x0 when given."""
    volume = VolumeGeometry((8, 8, 8), 1.0)
    geometry = ConeGeometry.circular(np.linspace(0, 2 * np.pi, 10, endpoint=False), 30.0, 60.0, 10, 12, 2.0)
    A = Projector(geometry, volume, model="joseph", backend="cpu")
    truth = np.zeros(volume.shape, np.float32)
    truth[2:6, 2:6, 3:7] = 1.0
    b = A(truth)
    at_truth = 0.5 * reference_tv(truth)
    for method in ("fista", "pdhg"):
        stats = {}
        x = getattr(leveret, method)(b, A, 30, tv=0.5, bounds=(0, 1), stats=stats)
        assert x.dtype == np.float32 and x.shape == volume.shape and 0 <= x.min() and x.max() <= 1
        # F(truth) is 0.5 TV(truth) (exact data): the minimiser's F is lower, and 30 iterations get near
        assert stats["objective"][-1] <= 1.05 * at_truth < 0.3 * stats["objective"][0]
        again = getattr(leveret, method)(b, A, 1, tv=0.5, bounds=(0, 1), x0=x)
        assert np.abs(again - x).max() < 0.1


def test_inputs_are_not_changed(problem):
    A, b, lam = problem
    b0, x0 = b.copy(), np.full(A.volume.shape, 0.3)
    x0_copy = x0.copy()
    leveret.fista(b, A, 3, tv=lam, x0=x0)
    leveret.pdhg(b, A, 3, tv=lam, x0=x0)
    np.testing.assert_array_equal(b, b0)
    np.testing.assert_array_equal(x0, x0_copy)


class _Counting(Projector):
    calls = 0

    def __call__(self, x, out=None):
        type(self).calls += 1
        return super().__call__(x, out=out)


def test_operator_norm_estimate_and_cache():
    volume = VolumeGeometry((9, 9), 1.0)
    geometry = ParallelGeometry(np.linspace(0, np.pi, 7, endpoint=False), 13)
    A = _Counting(geometry, volume, precision="float64", backend="cpu")
    M = np.stack([A(e.reshape(volume.shape)).ravel() for e in np.eye(volume.size)], axis=1)
    true = np.linalg.norm(M, 2)
    _Counting.calls = 0
    estimate = operator_norm(A)
    assert true <= estimate <= 1.02 * true
    first = _Counting.calls
    assert 0 < first <= 12
    assert operator_norm(A) == estimate and _Counting.calls == first  # cached
    sub = A.subset([0, 1, 2])  # its own entry
    M_sub = M.reshape(7, 13, -1)[:3].reshape(39, -1)
    assert np.linalg.norm(M_sub, 2) <= operator_norm(sub) <= 1.02 * np.linalg.norm(M_sub, 2) < true
    # two threads asking at once for a new projector: one estimate
    B = _Counting(geometry, volume, precision="float64", backend="cpu")
    _Counting.calls = 0
    results = []
    threads = [threading.Thread(target=lambda: results.append(operator_norm(B))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results[0] == results[1] and _Counting.calls == first


def test_operator_norm_with_negative_weights():
    """No upper bound without nonnegative weights: the estimate from below
    times NORM_MARGIN (a matrix with one dominant direction, some entries < 0)."""
    A = MatrixOperator(
        Projector(
            ParallelGeometry(np.linspace(0, np.pi, 5, endpoint=False), 7),
            VolumeGeometry((4, 4)),
            precision="float64",
            backend="cpu",
        )
    )
    A.M = A.M - 0.05 * np.abs(np.random.default_rng(2).standard_normal(A.M.shape))
    assert (A.M < 0).any()
    true = np.linalg.norm(A.M, 2)
    assert true <= operator_norm(A) <= 1.05 * true


@pytest.mark.parametrize("method", ["fista", "pdhg"])
def test_a_diverging_run_raises_naming_the_step(method):
    """A norm far below ||A|| makes the steps too long: the run stops with a
    FloatingPointError that names the iteration and the step."""
    volume = VolumeGeometry((8, 8), 1.0)
    A = Projector(ParallelGeometry(np.linspace(0, np.pi, 6, endpoint=False), 11), volume, backend="cpu")
    b = A(np.ones(volume.shape, np.float32))
    with pytest.raises(
        FloatingPointError,
        match=rf"{method}: diverged at iteration \d+ in the "
        r"(data gradient|TV proximal step|forward projection|"
        r"primal update|data dual)",
    ):
        getattr(leveret, method)(b, A, 500, tv=0.1, norm=1e-4)


def test_stopping_and_reporting(matrix_problem):
    A, b, lam = matrix_problem
    stats = {}
    leveret.fista(b, A, 1000, tv=lam, tol=1e-3, stats=stats)
    assert stats["iterations"] < 1000 and stats["change"][-1] <= 1e-3 < min(stats["change"][:-1])
    assert stats["norm"] == pytest.approx(operator_norm(A)) and stats["step"] == pytest.approx(1 / stats["norm"] ** 2)
    stats = {}
    leveret.pdhg(b, A, 50, tv=lam, callback=lambda x, info: info["iteration"] == 7, stats=stats, progress=True)
    assert stats["iterations"] == 7 and set(stats) >= {"objective", "residual", "change", "tau", "sigma", "seconds"}


@pytest.mark.parametrize("method", ["fista", "pdhg"])
def test_memory_count_is_what_a_run_holds(method, monkeypatch):
    """The peak of NumPy's allocations during a run (tracemalloc) is
    memory_bytes less the data's copy (float64 data are used as given), plus
    less than half the smaller array and 8 KiB (Python's own objects, small
    float64 chunks for the sums, an operator that writes into ``out``): every
    volume and projection set counted, none forgotten."""
    import tracemalloc

    import leveret.algorithms.regularised as regularised

    monkeypatch.setattr(regularised, "CHUNK", 64)
    volume = VolumeGeometry((16, 16, 16), 1.0)
    geometry = ConeGeometry.circular(np.linspace(0, 2 * np.pi, 12, endpoint=False), 40.0, 80.0, 16, 20, 1.5)
    shapes = Projector(geometry, volume, precision="float64", backend="cpu")  # the shapes; a random matrix
    rng = np.random.default_rng(0)
    A = MatrixOperator(shapes, rng.random((int(np.prod(shapes.projection_shape)), volume.size)) / volume.size)
    b = A(rng.random(volume.shape))
    run = getattr(leveret, method)
    run(b, A, 2, tv=0.1)  # the norm cached, the kernels compiled
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        run(b, A, 3, tv=0.1)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    held = memory_bytes(method, A) - b.nbytes
    assert 0 <= peak - held < 0.5 * min(b.nbytes, volume.size * 8) + 8192, (peak, held)


def test_memory_count():
    A = Projector(
        ConeGeometry.circular(np.linspace(0, 6, 5), 30.0, 60.0, 4, 6, 2.0), VolumeGeometry((3, 4, 5)), backend="cpu"
    )
    vol, proj = 4 * 60, 4 * 120
    assert memory_bytes("fista", A) == 9 * vol + 3 * proj
    assert memory_bytes("pdhg", A, weights=True, preconditioned=True) == 6 * vol + 6 * proj
    with pytest.raises(ValueError, match="method: expected one of 'fista', 'pdhg'"):
        memory_bytes("sirt", A)


def test_bad_input(problem):
    A, b, lam = problem
    for method in (leveret.fista, leveret.pdhg):
        with pytest.raises(ValueError, match="tv: expected a weight >= 0, got -1"):
            method(b, A, 3, tv=-1.0)
        with pytest.raises(ValueError, match="tv: expected a finite number"):
            method(b, A, 3, tv=np.inf)
        with pytest.raises(ValueError, match="iterations: expected a positive integer, got 0"):
            method(b, A, 0, tv=lam)
        with pytest.raises(ValueError, match=r"projections: expected shape \(9, 15\)"):
            method(b[:, :-1], A, 3, tv=lam)
        with pytest.raises(TypeError, match="projector: expected a leveret.Projector"):
            method(b, "A", 3, tv=lam)
        with pytest.raises(ValueError, match=r"weights: expected the projections' shape \(9, 15\)"):
            method(b, A, 3, tv=lam, weights=np.ones((9, 14)))
        with pytest.raises(ValueError, match="weights: expected values >= 0"):
            method(b, A, 3, tv=lam, weights=-np.ones(b.shape))
        with pytest.raises(ValueError, match="norm: expected a positive number"):
            method(b, A, 3, tv=lam, norm=0.0)
        with pytest.raises(ValueError, match="tol: expected a positive number"):
            method(b, A, 3, tv=lam, tol=-1.0)
        with pytest.raises(TypeError, match="stats: expected a dict"):
            method(b, A, 3, tv=lam, stats=[])
        with pytest.raises(ValueError, match="bounds"):
            method(b, A, 3, tv=lam, bounds=(1, 0))
    with pytest.raises(ValueError, match="tv_iterations: expected a positive integer"):
        leveret.fista(b, A, 3, tv=lam, tv_iterations=0)
    with pytest.raises(ValueError, match="preconditioned: expected True or False"):
        leveret.pdhg(b, A, 3, tv=lam, preconditioned="yes")
    with pytest.raises(TypeError):
        leveret.fista(b, A, 3)  # tv has no default: its scale is the data's
