"""``fdk(gpu_memory=...)`` bounds the call's peak device memory, all of
it (CuPy's pool, texture arrays, cuFFT work areas), as the driver counts it:
a thread samples the device's used memory while the call runs."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import leveret
from leveret.geometry import ConeGeometry, VolumeGeometry

pytestmark = pytest.mark.gpu

GiB = 1 << 30


def _rabbitct_like(n_views: int = 496):
    g = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, n_views, endpoint=False),
        sid=750.0,
        sdd=1200.0,
        n_rows=960,
        n_cols=1248,
        pixel_size=0.3,
    )
    return g, np.random.default_rng(0).random(g.projection_shape, dtype=np.float32)


def _used() -> int:
    import cupy

    free, total = cupy.cuda.runtime.memGetInfo()
    return total - free


def _empty_caches() -> None:
    import cupy

    from leveret.cuda.texture import clear_cache

    cupy.cuda.Device().synchronize()
    clear_cache()
    cupy.fft.config.get_plan_cache().clear()
    cupy.get_default_memory_pool().free_all_blocks()


def peak_during(call) -> tuple[object, int]:
    """``call()``'s result and the most device memory in use while it ran,
    above what was in use before it (caches emptied first), sampled every
    millisecond by the driver's free-memory figure."""
    import cupy

    _empty_caches()
    base = _used()
    peak, done = [base], threading.Event()

    def sample():
        with cupy.cuda.Device(0):
            while not done.is_set():
                peak[0] = max(peak[0], _used())
                done.wait(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = call()
    finally:
        done.set()
        sampler.join()
    peak[0] = max(peak[0], _used())
    return result, peak[0] - base


@pytest.mark.parametrize("cap_gib", [2, 1])
def test_fdk_1024_cubed_stays_within_its_gpu_budget(cap_gib):
    """The RabbitCT-sized problem that took 2.52 GiB under a 2 GiB cap."""
    g, proj = _rabbitct_like()
    leveret.fdk(
        proj, g, VolumeGeometry((16, 1024, 1024), voxel_size=0.25), backend="cuda", gpu_memory=cap_gib * GiB
    )  # loads the kernels and cuFFT's code before measuring
    volume = VolumeGeometry((1024, 1024, 1024), voxel_size=0.25)
    out, peak = peak_during(lambda: leveret.fdk(proj, g, volume, backend="cuda", gpu_memory=cap_gib * GiB))
    print(f"cap {cap_gib} GiB: peak {peak / GiB:.3f} GiB")
    assert out.shape == volume.shape and np.isfinite(out).all()
    assert peak <= cap_gib * GiB, f"peak {peak / GiB:.3f} GiB over the {cap_gib} GiB budget"


def test_fdk_from_cupy_stays_within_its_gpu_budget():
    """CuPy in and out: the input and the output are the caller's; the
    working memory beside them stays within the budget."""
    import cupy

    g, proj = _rabbitct_like(124)
    d_proj = cupy.asarray(proj)
    volume = VolumeGeometry((512, 512, 512), voxel_size=0.5)
    cap = GiB // 4
    leveret.fdk(d_proj, g, VolumeGeometry((16, 512, 512), voxel_size=0.5), backend="cuda", gpu_memory=cap)
    out, peak = peak_during(lambda: leveret.fdk(d_proj, g, volume, backend="cuda", gpu_memory=cap))
    print(f"CuPy in: peak {peak / GiB:.3f} GiB beside the {volume.size * 4 / GiB:.3f} GiB output")
    assert isinstance(out, cupy.ndarray)
    assert peak - volume.size * 4 <= cap


def test_a_budget_too_small_is_an_error_before_any_work():
    import cupy

    g, proj = _rabbitct_like(8)
    _empty_caches()
    with pytest.raises(ValueError, match="^gpu_memory: "):
        leveret.fdk(proj, g, VolumeGeometry((1024, 1024, 1024), voxel_size=0.25), backend="cuda", gpu_memory=20 << 20)
    assert cupy.get_default_memory_pool().total_bytes() == 0
