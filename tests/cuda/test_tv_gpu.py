"""tv.cu on the GPU through its launcher: each fused step against the Numba
mirror (float32: to a few float32 roundings, NVRTC contracts a + s * v into
an FMA where the mirror rounds twice) and against float64 NumPy written from
the definition; the operators (gradient, transpose, TV, prox) on CuPy arrays
against the same calls on NumPy arrays. Shapes larger than one grid of
blocks, odd, 2D and 3D."""

from __future__ import annotations

import numpy as np
import pytest

from leveret.cpu import tv as mirror

pytestmark = pytest.mark.gpu

SHAPES = [(1, 257, 513), (37, 65, 129), (3, 1, 700), (130, 3, 2)]  # (nz, ny, nx); 2D when nz = 1


def _ndim(shape3):
    return 2 if shape3[0] == 1 else 3


def reference_primal(a, b, c, s, q, lo, hi, ndim):
    """float64: clip(a + s (c b - D^T q)) with D^T q = sum_a q_a[v - e_a] - q_a[v] over edges."""
    a3 = a.astype(np.float64)
    dt = np.zeros(a.shape)
    axes = [2, 1] if ndim == 2 else [2, 1, 0]  # x, y (, z) of the (nz, ny, nx) view
    comps = [ndim - 1, ndim - 2] + ([0] if ndim == 3 else [])
    for axis, comp in zip(axes, comps):
        qa = np.moveaxis(q[comp].astype(np.float64), axis, 0)
        d = np.moveaxis(dt, axis, 0)
        n = qa.shape[0]
        d[: n - 1] -= qa[: n - 1]
        d[1:] += qa[: n - 1]
    value = (0 if b is None else c * b.astype(np.float64)) - dt
    return np.clip(a3 + s * value, lo, hi)


def reference_dual(z0, z1, c0, c1, r, sigma, bound, ndim):
    u = c0 * z0.astype(np.float64) + (0 if z1 is None else c1 * z1.astype(np.float64))
    p = r.astype(np.float64).copy()
    axes = [2, 1] if ndim == 2 else [2, 1, 0]
    comps = [ndim - 1, ndim - 2] + ([0] if ndim == 3 else [])
    for axis, comp in zip(axes, comps):
        g = np.zeros(u.shape)
        gm, um = np.moveaxis(g, axis, 0), np.moveaxis(u, axis, 0)
        gm[:-1] = um[1:] - um[:-1]
        pm = np.moveaxis(p[comp], axis, 0)
        pm += sigma * gm
        pm[-1] = 0
    norm = np.sqrt((p**2).sum(axis=0))
    return p / np.maximum(1.0, norm / bound)


@pytest.mark.parametrize("shape3", SHAPES)
@pytest.mark.parametrize("per_voxel_step", [False, True])
def test_primal_on_the_gpu(shape3, per_voxel_step, rng):
    import cupy

    from leveret.cuda import tv as gpu

    ndim = _ndim(shape3)
    a, b = (rng.standard_normal(shape3).astype(np.float32) for _ in range(2))
    s = rng.uniform(0.1, 0.5, shape3).astype(np.float32) if per_voxel_step else 0.37
    q = rng.standard_normal((ndim,) + shape3).astype(np.float32)
    out = cupy.full(shape3, cupy.nan, cupy.float32)
    gpu.primal(
        cupy.asarray(a),
        cupy.asarray(b),
        -1.0,
        cupy.asarray(s) if per_voxel_step else s,
        cupy.asarray(q),
        out,
        -0.8,
        1.1,
        shape3,
        ndim,
    )
    cpu = mirror.primal(a, b, -1.0, s, q, np.empty(shape3, np.float32), -0.8, 1.1, shape3, ndim)
    np.testing.assert_allclose(out.get(), cpu, rtol=0, atol=4e-6 * (1 + np.abs(cpu).max()))
    np.testing.assert_allclose(out.get(), reference_primal(a, b, -1.0, s, q, -0.8, 1.1, ndim), atol=1e-5)


@pytest.mark.parametrize("shape3", SHAPES)
@pytest.mark.parametrize("mode", ["fgp", "pdhg"])
def test_dual_on_the_gpu(shape3, mode, rng):
    import cupy

    from leveret.cuda import tv as gpu

    ndim = _ndim(shape3)
    z0, z1 = (rng.standard_normal(shape3).astype(np.float32) for _ in range(2))
    q0 = rng.standard_normal((ndim,) + shape3).astype(np.float32) * 0.3
    r0 = rng.standard_normal((ndim,) + shape3).astype(np.float32) * 0.3
    sigma, beta, bound = 0.2, 0.4, 0.5
    q, r = cupy.asarray(q0), cupy.asarray(r0)
    if mode == "fgp":
        gpu.dual(cupy.asarray(z0), None, 1.0, 0.0, r, q, r, sigma, beta, bound, shape3, ndim)
        want_q, want_r = q0.copy(), r0.copy()
        mirror.dual(z0, None, 1.0, 0.0, want_r, want_q, want_r, sigma, beta, bound, shape3, ndim)
        ref = reference_dual(z0, None, 1.0, 0.0, r0, sigma, bound, ndim)
        np.testing.assert_allclose(r.get(), want_r, atol=2e-6)
        # momentum from the old field as stored (its non-edge entries too: D^T ignores them)
        np.testing.assert_allclose(r.get(), ref + beta * (ref - q0), atol=1e-5)
    else:
        gpu.dual(cupy.asarray(z0), cupy.asarray(z1), 2.0, -1.0, q, q, None, sigma, 0.0, bound, shape3, ndim)
        want_q = q0.copy()
        mirror.dual(z0, z1, 2.0, -1.0, want_q, want_q, None, sigma, 0.0, bound, shape3, ndim)
        ref = reference_dual(z0, z1, 2.0, -1.0, q0, sigma, bound, ndim)
    np.testing.assert_allclose(q.get(), want_q, atol=2e-6)
    np.testing.assert_allclose(q.get(), ref, atol=1e-5)


@pytest.mark.parametrize("shape3", SHAPES)
def test_norm_sum_on_the_gpu(shape3, rng):
    import cupy

    from leveret.cuda import tv as gpu

    ndim = _ndim(shape3)
    x = rng.standard_normal(shape3).astype(np.float32)
    got = gpu.norm_sum(cupy.asarray(x), shape3, ndim)
    assert got == pytest.approx(mirror.norm_sum(x, shape3, ndim), rel=1e-12)
    assert got == gpu.norm_sum(cupy.asarray(x), shape3, ndim)  # a fixed grid: the same sum each run
    x[5 % shape3[0], 0, 0] = np.nan
    assert not np.isfinite(gpu.norm_sum(cupy.asarray(x), shape3, ndim))


@pytest.mark.parametrize("shape", [(257, 513), (37, 65, 129)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_operators_on_cupy_equal_numpy(shape, dtype, rng):
    import cupy

    from leveret.operators import tv

    x = rng.uniform(0, 1, shape).astype(dtype)
    q = rng.standard_normal((len(shape),) + shape).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    g = tv.gradient(cupy.asarray(x))
    assert isinstance(g, cupy.ndarray)
    np.testing.assert_allclose(g.get(), tv.gradient(x), atol=tol)
    np.testing.assert_allclose(tv.gradient_transpose(cupy.asarray(q)).get(), tv.gradient_transpose(q), atol=4 * tol)
    assert tv.total_variation(cupy.asarray(x)) == pytest.approx(tv.total_variation(x), rel=1e-10)
    dual_gpu, dual_cpu = cupy.zeros((len(shape),) + shape, dtype), np.zeros((len(shape),) + shape, dtype)
    for _ in range(2):  # the warm start too
        on_gpu = tv.prox(cupy.asarray(x), 0.05, bounds=(0.1, 0.9), dual=dual_gpu)
        on_cpu = tv.prox(x, 0.05, bounds=(0.1, 0.9), dual=dual_cpu)
    np.testing.assert_allclose(on_gpu.get(), on_cpu, atol=1e-5 if dtype == np.float32 else 1e-12)
    np.testing.assert_allclose(dual_gpu.get(), dual_cpu, atol=1e-5 if dtype == np.float32 else 1e-12)
