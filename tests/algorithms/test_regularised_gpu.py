"""fista and pdhg on the GPU: CuPy in, CuPy out, every step on the device,
the same reconstruction as the CPU path; NumPy data with a CUDA projector
(uploaded once, NumPy out); several devices; divergence."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret.geometry import ConeGeometry, VolumeGeometry
from leveret.operators import Projector

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def scan():
    """A 40^3 cone-beam problem, 24 views: a ball with a smaller one inside, 1 % noise."""
    volume = VolumeGeometry((40, 40, 40), 1.0)
    geometry = ConeGeometry.circular(np.linspace(0, 2 * np.pi, 24, endpoint=False), 120.0, 240.0, 48, 56, 2.0)
    zz, yy, xx = np.mgrid[:40, :40, :40] - 19.5
    truth = 1.0 * (xx**2 + yy**2 + zz**2 < 15**2) + 0.5 * ((xx - 4) ** 2 + yy**2 + zz**2 < 5**2)
    cpu = Projector(geometry, volume, model="joseph", backend="cpu")
    b = cpu(truth.astype(np.float32))
    b += np.random.default_rng(0).normal(0, 0.01 * b.max(), b.shape).astype(np.float32)
    return geometry, volume, cpu, b


@pytest.mark.parametrize("method, kw", [("fista", {}), ("pdhg", {}), ("pdhg", {"preconditioned": True})])
def test_cupy_in_cupy_out_equals_the_cpu(scan, method, kw):
    """The same iterations on the GPU (CUDA projector and TV kernels) and on
    the CPU (Numba): the objective curves agree to 1e-3 and the volumes to
    5e-3 of the largest value (float32; two projector implementations)."""
    import cupy

    geometry, volume, cpu, b = scan
    gpu = Projector(geometry, volume, model="joseph", backend="cuda")
    stats_gpu, stats_cpu = {}, {}
    x_gpu = getattr(leveret, method)(cupy.asarray(b), gpu, 30, tv=2.0, nonnegative=True, stats=stats_gpu, **kw)
    x_cpu = getattr(leveret, method)(b, cpu, 30, tv=2.0, nonnegative=True, stats=stats_cpu, **kw)
    assert isinstance(x_gpu, cupy.ndarray) and x_gpu.dtype == cupy.float32
    np.testing.assert_allclose(stats_gpu["objective"], stats_cpu["objective"], rtol=1e-3)
    np.testing.assert_allclose(x_gpu.get(), x_cpu, atol=5e-3 * np.abs(x_cpu).max())
    assert stats_gpu["objective"][-1] < 0.2 * stats_gpu["objective"][0]


def test_numpy_data_with_a_cuda_projector(scan):
    """NumPy in: every iteration runs on the GPU (one upload), NumPy out, and
    the callback sees NumPy; the same result as CuPy in."""
    import cupy

    geometry, volume, _, b = scan
    gpu = Projector(geometry, volume, model="joseph", backend="cuda")
    kinds = set()
    x = leveret.fista(b, gpu, 10, tv=2.0, callback=lambda x, info: kinds.add(type(x)))
    assert isinstance(x, np.ndarray) and kinds == {np.ndarray}
    # atomicAdd in A.T may order its sums differently from run to run
    np.testing.assert_allclose(x, leveret.fista(cupy.asarray(b), gpu, 10, tv=2.0).get(), atol=1e-5 * np.abs(x).max())


def test_several_devices_equal_one(scan):
    """devices= on the projector: the iterations only call A and A.T, so two
    workers (one GPU shared, or two GPUs) give one GPU's result to float32
    rounding of A.T's partial sums."""
    import cupy

    from leveret.cuda.devices import DeviceSet

    geometry, volume, _, b = scan
    n = cupy.cuda.runtime.getDeviceCount()
    devices = DeviceSet([0, 1]) if n > 1 else DeviceSet([0, 0], shared=True)
    one = Projector(geometry, volume, model="joseph", backend="cuda")
    two = Projector(geometry, volume, model="joseph", backend="cuda", devices=devices)
    for method in ("fista", "pdhg"):
        a = getattr(leveret, method)(cupy.asarray(b), one, 15, tv=2.0, nonnegative=True)
        c = getattr(leveret, method)(cupy.asarray(b), two, 15, tv=2.0, nonnegative=True)
        np.testing.assert_allclose(c.get(), a.get(), atol=1e-4 * float(abs(a).max()))


def test_operator_norm_on_the_gpu(scan):
    from leveret.algorithms import operator_norm

    geometry, volume, cpu, _ = scan
    gpu = Projector(geometry, volume, model="joseph", backend="cuda")
    assert operator_norm(gpu) == pytest.approx(operator_norm(cpu), rel=1e-3)


@pytest.mark.parametrize("method", ["fista", "pdhg"])
def test_divergence_on_the_gpu_raises(scan, method):
    import cupy

    geometry, volume, _, b = scan
    gpu = Projector(geometry, volume, model="joseph", backend="cuda")
    with pytest.raises(FloatingPointError, match=rf"{method}: diverged at iteration \d+"):
        getattr(leveret, method)(cupy.asarray(b), gpu, 500, tv=0.1, norm=1e-4)
