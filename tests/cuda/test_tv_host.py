"""tv.cu built for the CPU from its own source (one thread at a time over the
launch grid) against its Numba mirror ``leveret.cpu.tv``: the primal and dual
steps bit for bit (the same float operations in the same order, no
contraction on either side), the TV sum to float64 rounding; every array sits
between NaN guards, so a read outside it shows as NaN in the result and a
write outside it as a guard changed."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from leveret.cpu import tv as mirror
from leveret.cuda.tv import BLOCK, DEFINES

from host_build import build_host_harness  # this folder is on sys.path (pytest's rootdir-relative import)

GUARD = 64
SHAPES = [(1, 7, 5), (1, 1, 9), (4, 3, 6), (5, 1, 4), (3, 8, 1)]  # (nz, ny, nx); 2D when nz = 1


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build_host_harness(tmp_path_factory, "tv", DEFINES)


class Guarded:
    """Arrays inside NaN guards; ``check()`` asserts the guards are intact."""

    def __init__(self):
        self.buffers = []

    def array(self, shape, dtype, values=None):
        n = int(np.prod(shape))
        buf = np.full(n + 2 * GUARD, np.nan, dtype)
        arr = buf[GUARD : GUARD + n].reshape(shape)
        if values is not None:
            arr[...] = values
        self.buffers.append(buf)
        return arr

    def check(self):
        for buf in self.buffers:
            assert np.isnan(buf[:GUARD]).all() and np.isnan(buf[-GUARD:]).all(), "a write outside an array"


def _ptr(a):
    return ctypes.c_void_p(a.ctypes.data)


def _case(rng, shape3, dtype):
    ndim = 2 if shape3[0] == 1 else 3
    fields = (ndim,) + shape3
    return ndim, fields, lambda shape: rng.standard_normal(shape).astype(dtype)


def _grids(n):
    return [(1, 32), (3, 32), (-(-n // BLOCK), BLOCK)]


@pytest.mark.parametrize(
    "dtype, suffix, scalar", [(np.float32, "f32", ctypes.c_float), (np.float64, "f64", ctypes.c_double)]
)
@pytest.mark.parametrize("shape3", SHAPES)
@pytest.mark.parametrize("with_b, per_voxel_step", [(False, False), (True, False), (True, True)])
def test_primal_equals_the_mirror(lib, rng, dtype, suffix, scalar, shape3, with_b, per_voxel_step):
    ndim, fields, draw = _case(rng, shape3, dtype)
    n = int(np.prod(shape3))
    for grid, block in _grids(n):
        g = Guarded()
        a, b, s = (
            g.array(shape3, dtype, draw(shape3)),
            g.array(shape3, dtype, draw(shape3)),
            g.array(shape3, dtype, np.abs(draw(shape3))),
        )
        q = g.array(fields, dtype, draw(fields))
        out = g.array(shape3, dtype)
        c, step, lo, hi = -1.0, 0.37, -0.8, 1.1
        getattr(lib, f"run_primal_{suffix}")(
            _ptr(a),
            _ptr(b),
            int(with_b),
            scalar(c),
            scalar(step),
            _ptr(s),
            int(per_voxel_step),
            _ptr(q),
            _ptr(out),
            scalar(lo),
            scalar(hi),
            *shape3,
            ndim,
            grid,
            block,
        )
        g.check()
        want = np.empty(shape3, dtype)
        mirror.primal(a, b if with_b else None, c, s if per_voxel_step else step, q, want, lo, hi, shape3, ndim)
        assert not np.isnan(out).any()
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize(
    "dtype, suffix, scalar", [(np.float32, "f32", ctypes.c_float), (np.float64, "f64", ctypes.c_double)]
)
@pytest.mark.parametrize("shape3", SHAPES)
@pytest.mark.parametrize("mode", ["fgp", "pdhg"])
def test_dual_equals_the_mirror(lib, rng, dtype, suffix, scalar, shape3, mode):
    """FGP's step (r read and written, momentum) and PDHG's (q in place, an
    extrapolated point 2 z0 - z1)."""
    ndim, fields, draw = _case(rng, shape3, dtype)
    n = int(np.prod(shape3))
    for grid, block in _grids(n):
        g = Guarded()
        z0, z1 = g.array(shape3, dtype, draw(shape3)), g.array(shape3, dtype, draw(shape3))
        q0, r0 = draw(fields), draw(fields)
        q, r = g.array(fields, dtype, q0), g.array(fields, dtype, r0)
        sigma, beta, bound = 0.7, 0.3, 0.9
        if mode == "fgp":
            args = (_ptr(z0), _ptr(z0), 0, scalar(1.0), scalar(0.0), _ptr(r), _ptr(q), _ptr(r), 1)
        else:
            args = (_ptr(z0), _ptr(z1), 1, scalar(2.0), scalar(-1.0), _ptr(q), _ptr(q), _ptr(q), 0)
        getattr(lib, f"run_dual_{suffix}")(
            *args, scalar(sigma), scalar(beta), scalar(bound), *shape3, ndim, grid, block
        )
        g.check()
        want_q, want_r = q0.copy(), r0.copy()
        if mode == "fgp":
            mirror.dual(z0, None, 1.0, 0.0, want_r, want_q, want_r, sigma, beta, bound, shape3, ndim)
        else:
            mirror.dual(z0, z1, 2.0, -1.0, want_q, want_q, None, sigma, beta, bound, shape3, ndim)
        assert not np.isnan(q).any() and not np.isnan(r).any()
        np.testing.assert_array_equal(q, want_q)
        np.testing.assert_array_equal(r, want_r)


@pytest.mark.parametrize("dtype, suffix", [(np.float32, "f32"), (np.float64, "f64")])
@pytest.mark.parametrize("shape3", SHAPES)
def test_norm_sum_equals_the_mirror(lib, rng, dtype, suffix, shape3):
    ndim, _, draw = _case(rng, shape3, dtype)
    n = int(np.prod(shape3))
    for grid, block in _grids(n):
        g = Guarded()
        x = g.array(shape3, dtype, draw(shape3))
        partials = np.full(grid * block, np.nan)
        getattr(lib, f"run_norm_sum_{suffix}")(_ptr(x), _ptr(partials), *shape3, ndim, grid, block)
        g.check()
        assert not np.isnan(partials).any()  # every thread writes its partial sum
        np.testing.assert_allclose(partials.sum(), mirror.norm_sum(x, shape3, ndim), rtol=1e-13)
