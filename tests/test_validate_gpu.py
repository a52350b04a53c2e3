"""``_validate.count_outside`` on the GPU (a CuPy reduction kernel): the count
of NaN, Inf and too-large values equals NumPy's count, for every dtype, size
and layout the input checks see."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def numpy_count(a, limit):
    return int(a.size - np.count_nonzero(np.abs(a.astype(np.float64)) <= limit))


@pytest.mark.parametrize(
    "dtype, limit",
    [(np.float16, 1e4), (np.float32, 1e30), (np.float64, 1e290), (np.float32, float(np.finfo(np.float32).max))],
)
@pytest.mark.parametrize("n", [1, 31, 1000, 3_000_017])
def test_count_outside_equals_numpy(dtype, limit, n):
    import cupy

    from leveret._validate import count_outside

    rng = np.random.default_rng(n)
    a = rng.standard_normal(n).astype(dtype)
    bad = rng.choice(n, size=min(n, 1 + n // 1000), replace=False)
    kinds = np.array([np.nan, np.inf, -np.inf, 2.0 * limit if np.isfinite(dtype(2.0 * limit)) else np.inf])
    a[bad] = kinds[np.arange(bad.size) % kinds.size].astype(dtype)
    assert count_outside(cupy.asarray(a), limit) == numpy_count(a, limit) == bad.size


def test_count_outside_strided_and_clean():
    import cupy

    from leveret._validate import count_outside

    a = cupy.asarray(np.random.default_rng(0).random((64, 96, 40), np.float32))
    assert count_outside(a, 1e30) == 0
    a[5, 6, 3] = cupy.nan  # inside the strided view below
    a[63, 1, 39] = -cupy.inf  # outside it (odd row)
    assert count_outside(a[:, ::2, 1:], 1e30) == numpy_count(a[:, ::2, 1:].get(), 1e30) == 1
    assert count_outside(a.transpose(2, 0, 1), 1e30) == 2
    assert count_outside(cupy.empty(0, cupy.float32), 1e30) == 0


@pytest.mark.parametrize("n", [1, 4095, 4096, 4097, 3 * 4096 + 5])
def test_add_nonfinite_count_accumulates_on_the_device(n):
    """The counter adds each array's NaN/Inf/too-large count, across the rows of the
    2D view and its tail, without a wait in between."""
    import cupy

    from leveret._validate import MAX_MAGNITUDE, add_nonfinite_count

    a = cupy.ones(n, cupy.float32)
    a[-1] = cupy.nan
    a[0] = 2 * MAX_MAGNITUDE[4]
    counter = cupy.zeros((), cupy.int64)
    add_nonfinite_count(counter, a)
    add_nonfinite_count(counter, a[::-1].copy())
    assert int(counter) == (2 if n > 1 else 1) * 2


@pytest.mark.parametrize("n", [1, 4095, 4096, 4097, 3 * 4096 + 5, 2_000_003])
def test_reduce_on_device_sums_and_maxima_every_element(n):
    """The rows of the 2D view and the tail all count: float64 sums of squared
    differences (the iterative methods' norms) and a maximum, each placed at
    the first and the last element in turn, equal NumPy's in float64."""
    import cupy

    from leveret._validate import reduce_on_device
    from leveret.algorithms.iterative import _sum_squares
    from leveret.algorithms.regularised import _distance_kernel, _ratio_kernel

    rng = np.random.default_rng(n)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32) + np.float32(0.5)
    w = rng.random(n, dtype=np.float32)
    ga, gb, gw = (cupy.asarray(x) for x in (a, b, w))
    d = a.astype(np.float64) - b
    assert float(reduce_on_device(_sum_squares(), (ga,))) == pytest.approx(np.dot(a.astype(np.float64), a), rel=1e-12)
    assert float(reduce_on_device(_distance_kernel(True), (ga, gb, gw))) == pytest.approx(np.dot(d * d, w), rel=1e-12)
    for where in (0, n - 1):
        y = a.copy()
        y[where] = 50.0
        ratio = reduce_on_device(_ratio_kernel(), (cupy.asarray(y), gb), combine="max")
        assert float(ratio) == np.max(y.astype(np.float64) / b)
