"""Lent streams: a repeated call takes the streams, and so the memory pool's
cached blocks, of the call before; repeated multi-device and streamed calls
do not grow the pool."""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def test_lent_streams_come_back_in_the_same_order():
    from leveret.cuda import streams
    with streams.lent(2) as first:
        with streams.lent(1) as inner:   # open at once: never shared
            assert inner[0] not in first
    with streams.lent(3) as again:
        assert again[:2] == first and again[2] == inner[0]


def test_lent_streams_are_returned_after_an_error():
    import cupy

    from leveret.cuda import streams
    device = cupy.cuda.Device().id
    with streams.lent(2):
        pass
    made = streams.made(device)
    with pytest.raises(RuntimeError, match="inside"):
        with streams.lent(2):
            raise RuntimeError("inside")
    with streams.lent(2):
        pass
    assert streams.made(device) == made


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
    from leveret.devices import DeviceSet
    from leveret.geometry import ConeGeometry, VolumeGeometry
    g = ConeGeometry.circular(np.linspace(0, 2 * np.pi, 64, endpoint=False), sid=300.0, sdd=450.0,
                              n_rows=48, n_cols=64, pixel_size=1.0)
    vol = VolumeGeometry((48, 40, 40), voxel_size=0.6)
    proj = np.random.default_rng(0).random(g.projection_shape, dtype=np.float32)
    # Which worker takes which block varies from call to call (the queue), and with
    # it, a little, the cached blocks; the fault grew the pool by a call each time.
    totals = _pool_after_each(lambda: leveret.fdk(proj, g, vol, devices=DeviceSet([0, 0], shared=True)), calls=6)
    assert totals[-1] < 2 * totals[0], totals


@pytest.mark.parametrize("n_rows, chunk_slices", [(24, 8), (1, None)])
def test_repeated_fbp_from_numpy_reuses_the_pool(n_rows, chunk_slices):
    """A stack streamed in chunks, and one slice uploaded in angle batches."""
    import leveret
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 1800, endpoint=False), 768, n_rows=n_rows)
    proj = np.random.default_rng(1).random(g.projection_shape, dtype=np.float32)
    totals = _pool_after_each(lambda: leveret.fbp(proj, g, backend="cuda", chunk_slices=chunk_slices))
    assert totals[2] == totals[1], totals
