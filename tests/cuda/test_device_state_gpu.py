"""Per-device state: lent streams (a repeated call takes the streams, and so
the memory pool's cached blocks, of the call before; repeated multi-device
and streamed calls do not grow the pool) and constant memory lent to one
caller at a time."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def test_lent_streams_come_back_in_the_same_order():
    from leveret.cuda.device_state import lend_streams

    with lend_streams(2) as first:
        with lend_streams(1) as inner:  # open at once: never shared
            assert inner[0] not in first
    with lend_streams(3) as again:
        assert again[:2] == first and again[2] == inner[0]


def test_lent_streams_are_returned_after_an_error():
    from leveret.cuda.device_state import device_state, lend_streams

    with lend_streams(2):
        pass
    made = device_state().streams_made
    with pytest.raises(RuntimeError, match="inside"):
        with lend_streams(2):
            raise RuntimeError("inside")
    with lend_streams(2):
        pass
    assert device_state().streams_made == made


def test_constant_memory_is_lent_in_stream_order():
    """A second borrower's stream waits for the kernels the first queued: its
    write of the module's constant memory lands after they have read it. The
    first borrower's kernel is made slow (a spin on the GPU clock) and reads
    the constant once it has spun; without the wait the second write lands
    first and the first kernel reads the second borrower's value."""
    import cupy

    from leveret.cuda.device_state import device_state

    state = device_state()
    first, second = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    seen = cupy.zeros(1, cupy.float32)
    with state.constants("backproject_parallel", None, first) as module:
        table = module.get_global("c_par_table")
        mine = cupy.full(4, 1.0, cupy.float32)
        table.copy_from_device_async(mine.data, 16, first)
        _spin_then_read(module, table, seen, first)
    with state.constants("backproject_parallel", None, second) as module:
        theirs = cupy.full(4, 2.0, cupy.float32)
        module.get_global("c_par_table").copy_from_device_async(theirs.data, 16, second)
    second.synchronize()
    first.synchronize()
    assert float(seen[0]) == 1.0


def _spin_then_read(module, table, seen, stream) -> None:
    """Copy the constant's first float into ``seen`` after about 50 ms of GPU time."""
    import cupy

    spin = cupy.RawKernel(
        r"""
    extern "C" __global__ void spin(long long cycles) {
        long long t0 = clock64();
        while (clock64() - t0 < cycles) { }
    }""",
        "spin",
    )
    spin((1,), (1,), (np.int64(100_000_000),), stream=stream)
    cupy.cuda.runtime.memcpyAsync(seen.data.ptr, table.ptr, 4, cupy.cuda.runtime.memcpyDeviceToDevice, stream.ptr)


def _pool_after_each(run, calls=3) -> list[int]:
    import cupy

    pool = cupy.get_default_memory_pool()
    cupy.cuda.Device().synchronize()
    pool.free_all_blocks()
    totals = []
    for _ in range(calls):
        run()
        cupy.cuda.Device().synchronize()
        totals.append(pool.total_bytes())
    return totals


def test_repeated_multi_device_fdk_reuses_the_pool():
    """Fresh streams per call left every buffer in an arena no later call
    allocates from: the pool grew by a whole call's memory each time."""
    import leveret
    from leveret.cuda.devices import DeviceSet
    from leveret.geometry import ConeGeometry, VolumeGeometry

    g = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 64, endpoint=False), sid=300.0, sdd=450.0, n_rows=48, n_cols=64, pixel_size=1.0
    )
    vol = VolumeGeometry((48, 40, 40), voxel_size=0.6)
    proj = np.random.default_rng(0).random(g.projection_shape, dtype=np.float32)
    # Which worker takes which block varies from call to call (the queue), and with
    # it, a little, the cached blocks; the fault grew the pool by a call each time.
    totals = _pool_after_each(lambda: leveret.fdk(proj, g, vol, devices=DeviceSet([0, 0], shared=True)), calls=6)
    assert totals[-1] < 2 * totals[0], totals


@pytest.mark.parametrize("n_rows, slab_slices", [(24, 8), (1, None)])
def test_repeated_fbp_from_numpy_reuses_the_pool(n_rows, slab_slices):
    """A stack streamed in chunks, and one slice uploaded in angle batches."""
    import leveret

    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 1800, endpoint=False), 768, n_rows=n_rows)
    proj = np.random.default_rng(1).random(g.projection_shape, dtype=np.float32)
    totals = _pool_after_each(lambda: leveret.fbp(proj, g, backend="cuda", slab_slices=slab_slices))
    assert totals[2] == totals[1], totals
