"""leveret.cuda.pipeline's pinned memory on a GPU: the driver sees it as
page-locked host memory, and transfers into it are asynchronous DMA."""

from __future__ import annotations

import numpy as np
import pytest

from leveret.cuda import pipeline

pytestmark = pytest.mark.gpu
LOCKED = 1  # cudaMemoryTypeHost in cudaPointerAttributes.type (0: pageable)


def test_pinned_arrays_are_page_locked_and_take_asynchronous_copies(rng):
    import cupy as cp

    a = pipeline.empty_pinned((3, 1000, 257), np.float32)
    assert cp.cuda.runtime.pointerGetAttributes(a.ctypes.data).type == LOCKED
    part = a[1:]  # any address inside the block is locked
    assert cp.cuda.runtime.pointerGetAttributes(part.ctypes.data + 4).type == LOCKED
    source = rng.random(a.shape, dtype=np.float32)
    device = cp.asarray(source)
    a.fill(np.nan)
    stream = cp.cuda.Stream(non_blocking=True)
    pipeline._copy_async(a.ctypes.data, device.data.ptr, device.nbytes, cp.cuda.runtime.memcpyDeviceToHost, stream)
    stream.synchronize()
    np.testing.assert_array_equal(a, source)
    unlocked = np.empty(1 << 20, np.uint8)  # the check above can fail: pageable memory reads otherwise
    assert cp.cuda.runtime.pointerGetAttributes(unlocked.ctypes.data).type != LOCKED


@pytest.mark.parametrize("direction", ["up", "down"])
def test_strided_chunks_move_between_pinned_memory_and_the_gpu(rng, direction):
    """Some rows of each of a chunk of views, first axis strided, go up to a
    contiguous device buffer and come back into their place, exactly; the
    rows around them are left as they were."""
    import cupy as cp

    host = pipeline.pinned_array((6, 50, 257), np.float32)
    host[...] = rng.random(host.shape, dtype=np.float32)
    part = host[1:5, 10:37]
    stream = cp.cuda.Stream(non_blocking=True)
    if direction == "up":
        device = cp.full(part.shape, np.nan, np.float32)
        pipeline._copy_rows_async(device.data.ptr, part, cp.cuda.runtime.memcpyHostToDevice, stream)
        stream.synchronize()
        np.testing.assert_array_equal(device.get(), part)
    else:
        before = host.copy()
        device = cp.asarray(rng.random(part.shape, dtype=np.float32))
        pipeline._copy_rows_async(device.data.ptr, part, cp.cuda.runtime.memcpyDeviceToHost, stream)
        stream.synchronize()
        np.testing.assert_array_equal(part, device.get())
        before[1:5, 10:37] = device.get()
        np.testing.assert_array_equal(host, before)
