"""leveret.operators.tv on the CPU (Numba mirror): gradient, transpose and TV
against NumPy written from the definition; the proximal step against an
exact solution and against a slow float64 solver of the same problem."""

from __future__ import annotations

import numpy as np
import pytest

from leveret.operators import tv


def reference_gradient(x):
    """Forward differences along each axis, 0 on the axis' last plane (np.diff)."""
    g = np.zeros((x.ndim,) + x.shape)
    for a in range(x.ndim):
        index = [slice(None)] * x.ndim
        index[a] = slice(0, -1)
        g[a][tuple(index)] = np.diff(x.astype(np.float64), axis=a)
    return g


def reference_gradient_transpose(q):
    """-div q with the boundary terms written out: sum_a q_a[v - e_a] - q_a[v],
    where the edges exist."""
    out = np.zeros(q.shape[1:])
    for a in range(q.shape[0]):
        n = q.shape[1 + a]
        qa = np.moveaxis(q[a].astype(np.float64), a, 0)
        d = np.moveaxis(out, a, 0)
        d[: n - 1] -= qa[: n - 1]
        d[1:] += qa[: n - 1]
    return out


def reference_tv(x):
    return float(np.sqrt((reference_gradient(x) ** 2).sum(axis=0)).sum())


def reference_prox(v, gamma, bounds=(-np.inf, np.inf), iterations=20000):
    """Projected gradient (no momentum) on the dual of the prox problem, in
    float64 with the reference operators: q <- P_gamma(q + D x(q) / (4 ndim)),
    x(q) = clip(v - D^T q)."""
    v = v.astype(np.float64)
    q = np.zeros((v.ndim,) + v.shape)
    for _ in range(iterations):
        x = np.clip(v - reference_gradient_transpose(q), *bounds)
        q += reference_gradient(x) / (4 * v.ndim)
        norm = np.sqrt((q**2).sum(axis=0))
        q /= np.maximum(1.0, norm / gamma)
    return np.clip(v - reference_gradient_transpose(q), *bounds), q


SHAPES = [(6, 9), (1, 7), (4, 5, 6), (3, 1, 5)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradient_and_transpose_equal_the_definition(shape, dtype, rng):
    x = rng.standard_normal(shape).astype(dtype)
    q = rng.standard_normal((len(shape),) + shape).astype(dtype)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(tv.gradient(x), reference_gradient(x), atol=tol)
    # the components on each axis' last plane are no edges: ignored by D^T
    np.testing.assert_allclose(tv.gradient_transpose(q), reference_gradient_transpose(q), atol=4 * tol)
    lhs = float((reference_gradient(x) * q).sum())
    rhs = float((x.astype(np.float64) * tv.gradient_transpose(q)).sum())
    assert abs(lhs - rhs) <= 1e2 * tol * (1 + abs(lhs))


@pytest.mark.parametrize("shape", SHAPES)
def test_total_variation_equals_the_definition(shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    assert tv.total_variation(x) == pytest.approx(reference_tv(x), rel=1e-12)
    # isotropic, not anisotropic: one voxel one higher than its 2D neighbours
    # to the right and below has a gradient norm of sqrt(2) there
    image = np.zeros((3, 3))
    image[1, 1] = 1.0
    assert tv.total_variation(image) == pytest.approx(np.sqrt(2) + 2.0, rel=1e-14)
    image[1, 1] = np.nan
    assert not np.isfinite(tv.total_variation(image))


def test_gradient_norm_bound_holds():
    """||D||^2 <= 4 ndim: the largest singular value of the explicit matrix."""
    for shape in [(8, 8), (4, 5, 6)]:
        n = int(np.prod(shape))
        D = np.stack([tv.gradient(e.reshape(shape)).ravel() for e in np.eye(n)], axis=1)
        largest = np.linalg.norm(D, 2) ** 2
        assert largest <= tv.gradient_norm_bound(len(shape))
        assert largest > 0.8 * tv.gradient_norm_bound(len(shape))  # and the bound is not loose


@pytest.mark.parametrize("shape, pattern_axis", [((4, 6), 1), ((2, 4, 6), 2), ((6, 3, 2), 0)])
def test_prox_of_two_flat_regions_is_exact(shape, pattern_axis):
    """v = 0 on one half, 1 on the other: the minimiser moves each half
    toward the other by gamma x (interface area) / (half's volume) and stays
    flat (a dual field with |q| <= gamma certifies it)."""
    v = np.zeros(shape)
    half = shape[pattern_axis] // 2
    index = [slice(None)] * len(shape)
    index[pattern_axis] = slice(half, None)
    v[tuple(index)] = 1.0
    interface = np.prod(shape) / shape[pattern_axis]
    volume = np.prod(shape) / 2
    gamma = 0.5
    shift = gamma * interface / volume
    x = tv.prox(v, gamma, iterations=3000)
    want = np.where(v > 0.5, 1.0 - shift, shift)
    np.testing.assert_allclose(x, want, atol=1e-9)


def duality_gap(x, q, v, gamma, bounds):
    """P(x) - D(q) >= P(x) - P(x*) >= 0.5 ||x - x*||^2 (P is 1-strongly convex):
    P(x) = 0.5 ||x - v||^2 + gamma TV(x), D(q) = min over the box of
    0.5 ||x - v||^2 + <D^T q, x>, attained at clip(v - D^T q), for |q_v| <= gamma."""
    assert np.sqrt((q**2).sum(axis=0)).max() <= gamma * (1 + 1e-6)
    xq = np.clip(v - reference_gradient_transpose(q), *bounds)
    primal = 0.5 * ((x - v) ** 2).sum() + gamma * reference_tv(x)
    dual = 0.5 * ((xq - v) ** 2).sum() + (reference_gradient_transpose(q) * xq).sum()
    return primal - dual


@pytest.mark.parametrize("shape", [(5, 6), (3, 3, 4)])
@pytest.mark.parametrize("bounds", [None, (0.0, 0.6)])
def test_prox_equals_a_slow_reference(shape, bounds):
    """FGP (float64, many iterations) against plain projected gradient on the
    dual with the reference operators: each within the distance its duality
    gap certifies, and so within their sum of each other. (A fixed input:
    how far each gets in its iterations depends on it.)"""
    v = np.random.default_rng(len(shape)).uniform(-0.5, 1.0, shape)
    gamma = 0.3
    lo_hi = (-np.inf, np.inf) if bounds is None else bounds
    ref, q_ref = reference_prox(v, gamma, lo_hi, iterations=20000)
    gap_ref = duality_gap(ref, q_ref, v, gamma, lo_hi)
    dual = np.zeros((len(shape),) + shape)
    x64 = tv.prox(v, gamma, iterations=4000, bounds=bounds, dual=dual)
    gap = duality_gap(x64, dual, v, gamma, lo_hi)
    assert -1e-12 <= gap <= 1e-6 and -1e-12 <= gap_ref <= 1e-4
    assert np.linalg.norm(x64 - ref) <= np.sqrt(2 * max(gap, 0)) + np.sqrt(2 * max(gap_ref, 0)) + 1e-12
    # float32 (the kernels' float32 arithmetic): the same minimiser to float32 rounding
    x32 = tv.prox(v.astype(np.float32), gamma, iterations=4000, bounds=bounds)
    assert np.abs(x32 - x64).max() < 1e-4
    if bounds is not None:
        assert x32.min() >= bounds[0] and x32.max() <= bounds[1]


def test_fgp_converges_at_its_rate():
    """FGP with the step 1 / ||D||^2 and Beck and Teboulle's momentum, from a
    cold start on a noisy box: the duality gap after 20 iterations is below
    1 % of the objective (measured 0.6 %; half the step gives 1.6 %, no
    momentum more)."""
    rng = np.random.default_rng(7)
    v = np.zeros((8, 9, 10))
    v[2:6, 3:7, 2:8] = 1.0
    v += rng.normal(0, 0.2, v.shape)
    gamma = 0.15
    dual = np.zeros((3,) + v.shape)
    x = tv.prox(v, gamma, iterations=20, dual=dual)
    primal = 0.5 * ((x - v) ** 2).sum() + gamma * reference_tv(x)
    assert 0 <= duality_gap(x, dual, v, gamma, (-np.inf, np.inf)) < 0.01 * primal


def test_prox_warm_start_continues():
    """A second call of 5 iterations from the dual field the first one left
    lowers the duality gap to under half (measured 0.37 to 0.41 of it on
    five noises); the field stays within |q_v| <= gamma. A cold start of 5
    gives the first call's gap again: the field is the only state."""
    rng = np.random.default_rng(0)
    v = np.zeros((12, 14))
    v[3:9, 4:10] = 1.0
    v += rng.normal(0, 0.2, v.shape)
    no_box = (-np.inf, np.inf)
    dual = np.zeros((2,) + v.shape)
    first = duality_gap(tv.prox(v, 0.2, iterations=5, dual=dual), dual, v, 0.2, no_box)
    second = duality_gap(tv.prox(v, 0.2, iterations=5, dual=dual), dual, v, 0.2, no_box)
    assert 0 < second < 0.5 * first
    assert np.sqrt((dual**2).sum(axis=0)).max() <= 0.2 * (1 + 1e-12)
    cold = np.zeros((2,) + v.shape)
    assert duality_gap(tv.prox(v, 0.2, iterations=5, dual=cold), cold, v, 0.2, no_box) == pytest.approx(first)


def test_prox_without_weight_is_the_clip(rng):
    v = rng.standard_normal((5, 6, 7)).astype(np.float32)
    np.testing.assert_array_equal(tv.prox(v, 0.0, bounds=(0, None)), np.clip(v, 0, None))


def test_primal_and_dual_updates(rng):
    """PDHG's fused steps against NumPy written out."""
    shape = (3, 4, 5)
    x, x_old, g = (rng.standard_normal(shape) for _ in range(3))
    q = rng.uniform(-0.1, 0.1, (3,) + shape)
    tau = rng.uniform(0.1, 0.2, shape)
    want = np.clip(x - tau * (g + reference_gradient_transpose(q)), 0, None)
    out = tv.primal_update(x, q, np.empty(shape), b=g, c=-1.0, step=tau, bounds=(0, None))
    np.testing.assert_allclose(out, want, atol=1e-13)
    p = q + 0.4 * reference_gradient(2 * x - x_old)
    for a in range(3):  # no edge on an axis' last plane
        index = [slice(None)] * 3
        index[a] = -1
        p[a][tuple(index)] = 0
    p /= np.maximum(1.0, np.sqrt((p**2).sum(axis=0)) / 0.15)
    tv.dual_update(x, q, sigma=0.4, bound=0.15, z1=x_old, c0=2.0, c1=-1.0)
    np.testing.assert_allclose(q, p, atol=1e-13)


def test_bad_input(rng):
    v = rng.standard_normal((4, 5)).astype(np.float32)
    with pytest.raises(ValueError, match="gamma: expected a value >= 0"):
        tv.prox(v, -1.0)
    with pytest.raises(ValueError, match="gamma: expected a finite number"):
        tv.prox(v, np.nan)
    with pytest.raises(ValueError, match="iterations"):
        tv.prox(v, 1.0, iterations=0)
    with pytest.raises(ValueError, match=r"dual: expected a C-contiguous float32 numpy array of shape \(2, 4, 5\)"):
        tv.prox(v, 1.0, dual=np.zeros((2, 4, 5)))
    with pytest.raises(ValueError, match="out: the prox reads v"):
        tv.prox(v, 1.0, out=v)
    with pytest.raises(ValueError, match="v: expected a 2D image or a 3D volume"):
        tv.prox(v.ravel(), 1.0)
    with pytest.raises(TypeError, match="x: expected float32 or float64, got int64"):
        tv.gradient(np.zeros((3, 3), np.int64))
    with pytest.raises(ValueError, match="q: expected shape"):
        tv.gradient_transpose(np.zeros((3, 4, 5)))
