"""Frames read by child processes go to the GPU straight from the shared ring
they arrived in: its pages locked once, each slot lent to the reconstructor's
pool and given back after its upload; the slices equal the CPU ``fbp``."""

import os

import numpy as np
import pytest

from cases import in_shared_ring, zmq_addresses, zmq_sender

import leveret
from leveret.live import Frame, LiveReconstructor
from leveret.live.sources import ZmqSource
from leveret.phantom import shepp_logan_3d

zmq = pytest.importorskip("zmq")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(os.name != "posix", reason="child receivers need POSIX")]


def test_frames_upload_from_the_locked_ring_and_reconstruct_as_on_the_cpu(ipc_dir):
    import cupy

    from leveret.preprocess import minus_log, normalize

    angles = np.linspace(0, np.pi, 96, endpoint=False)
    n, rows = 48, 8
    g = leveret.ParallelGeometry(angles, n, rows)
    vol = g.default_volume()
    proj = shepp_logan_3d(radius=n / 2.2).project(g).astype(np.float32)
    rng = np.random.default_rng(0)
    dark = rng.uniform(90, 110, (rows, n))
    flat = dark + rng.uniform(3e4, 4e4, (rows, n))
    counts = np.round(dark + (flat - dark) * np.exp(-proj)).astype(np.uint16)
    ref = leveret.fbp(minus_log(normalize(counts, flat, dark)), g, vol, backend="cpu")

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
