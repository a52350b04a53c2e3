"""Frames read by child processes go to the GPU straight from the shared ring
they arrived in: its pages locked once, each slot lent to the reconstructor's
pool and given back after its upload; the slices equal the CPU ``fbp``."""

import os

import numpy as np
import pytest

from cases import in_shared_ring, raw_counts_scan, zmq_addresses, zmq_sender

from leveret.live import Frame, LiveReconstructor
from leveret.live.sources import ZmqSource

zmq = pytest.importorskip("zmq")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(os.name != "posix", reason="child receivers need POSIX")]


def test_frames_upload_from_the_locked_ring_and_reconstruct_as_on_the_cpu(ipc_dir):
    import cupy

    g, vol, counts, flat, dark, ref = raw_counts_scan(96, 48, 8)
    angles = g.angles

    rec = LiveReconstructor(vol, g, backend="cuda", storage="float32", flat=flat, dark=dark, max_batch=16)
    endpoints = zmq_addresses("ipc", 2, ipc_dir)
    src = ZmqSource(endpoints, timeout=0.1, stop_at_end=True, buffers=rec.frame_pool, processes=True)
    sender = zmq_sender(endpoints, [Frame(counts[i], i, angle=angles[i]) for i in range(96)])
    batch, kinds = [], []
    for f in src:
        if f is not None:
            kinds.append((in_shared_ring(f.data), cupy.cuda.runtime.pointerGetAttributes(f.data.ctypes.data).type))
            batch.append(f)
        if len(batch) == 4 or (f is None and batch):
            rec.add_frames(batch)  # the slots go back once these uploads are done
            batch = []
    rec.add_frames(batch)
    sender.join()
    src.close()
    assert rec.stats.received == 96
    assert kinds == [(True, 1)] * 96  # every frame in its ring slot, page-locked (1: cudaMemoryTypeHost)
    assert rec.frame_pool.lent == 0
    rec.watch_orthogonal((vol.coordinates("x")[20], vol.coordinates("y")[30], vol.coordinates("z")[5]))
    s = rec.slices()
    assert np.abs(s["xy"] - ref[5]).max() < 1e-5 * np.abs(ref[5]).max()
    assert np.abs(s["xz"] - ref[:, 30, :]).max() < 1e-5 * np.abs(ref).max()
