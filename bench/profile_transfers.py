"""Host-side transfer floors for FDK from NumPy (RabbitCT-sized input, 2.4 GB):
threaded copy into pinned memory, pinned DMA to the GPU, the streaming pipeline
with no compute, and the same with FDK's compute. Usage:
  PYTHONPATH=src python3 bench/profile_transfers.py
"""
from __future__ import annotations

import sys
import time

import numpy as np

from bench_cone import geometry


def wall(fn, reps=3):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def main():
    import cupy as cp
    import cupyx

    import leveret
    from leveret.pipeline import _COPY_THREADS, parallel_copy, stream_chunks

    g = geometry()
    host = np.ones(g.projection_shape, np.float32)
    host[::7] = 2.0
    gb = host.nbytes / 1e9
    chunk = 31
    chunks = [slice(n, min(g.n_views, n + chunk)) for n in range(0, g.n_views, chunk)]
    pinned = cupyx.empty_pinned((chunk,) + host.shape[1:], np.float32)
    dev = cp.empty((chunk,) + host.shape[1:], np.float32)
    sync = cp.cuda.Device().synchronize
    rows = {}
    rows[f"numpy -> pinned, parallel_copy ({_COPY_THREADS} threads), all chunks"] = wall(
        lambda: [parallel_copy(pinned[: c.stop - c.start], host[c]) for c in chunks])
    rows["numpy -> pinned, one thread, all chunks"] = wall(
        lambda: [pinned[: c.stop - c.start].__setitem__(Ellipsis, host[c]) for c in chunks])
    rows["pinned -> device DMA, all chunks"] = wall(
        lambda: ([dev[: c.stop - c.start].set(pinned[: c.stop - c.start]) for c in chunks], sync()))
    rows["pageable numpy -> device (cupy.asarray), all"] = wall(lambda: (cp.asarray(host), sync()), reps=2)

    def pipeline():
        stream_chunks(chunks, in_shape=lambda c: (c.stop - c.start,) + host.shape[1:], out_shape=None,
                      load=lambda c, buf: parallel_copy(buf, host[c]), compute=lambda c, d, _: None)
        sync()
    rows["stream_chunks, no compute"] = wall(pipeline)
    vol = leveret.VolumeGeometry((512,) * 3, voxel_size=0.5)
    rows["fdk 512^3 from NumPy"] = wall(lambda: leveret.fdk(host, g, vol, backend="cuda"), reps=2)
    out = cp.zeros(vol.shape, cp.float32)
    pin_vol = cupyx.empty_pinned(vol.shape, np.float32)
    rows["volume 512^3 device -> pinned"] = wall(lambda: (out.get(out=pin_vol), sync()))
    np_vol = np.empty(vol.shape, np.float32)
    rows["volume 512^3 pinned -> numpy, parallel_copy"] = wall(lambda: parallel_copy(np_vol, pin_vol))
    width = max(map(len, rows))
    print(f"transfers for {gb:.2f} GB of projections ({len(chunks)} chunks)")
    for name, ms in rows.items():
        print(f"  {name:<{width}}  {ms:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
