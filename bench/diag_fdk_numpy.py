"""Why FDK from NumPy arrays costs more than FDK on device arrays plus nothing:
times leveret.fdk on the RabbitCT-like 512^3 problem from device arrays, from
pageable NumPy arrays and from pinned NumPy arrays, and prints the pipeline's
time split (leveret.pipeline.last_stats: wall, host loads, copies, GPU compute)
after each NumPy call. Usage: PYTHONPATH=src python3 bench/diag_fdk_numpy.py [--size 512]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from bench_cone import geometry


def main(argv=None):
    import cupy as cp
    import cupyx

    import leveret
    from leveret import pipeline

    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=512)
    args = parser.parse_args(argv)
    g = geometry()
    vol = leveret.VolumeGeometry((args.size,) * 3, voxel_size=256.0 / args.size)
    rng = np.random.default_rng(0)
    host = rng.random(g.projection_shape, dtype=np.float32)
    pinned = cupyx.empty_pinned(host.shape, host.dtype)
    pinned[...] = host
    dev = cp.asarray(host)
    sync = cp.cuda.Device().synchronize
    fdk_module = sys.modules["leveret.algorithms.fdk"]   # the package re-exports the function under this name
    plan = fdk_module._plan_slabs

    def plan_31(*a, **k):   # the NumPy path's chunks (n_views / 16) on device arrays too
        slabs, chunk = plan(*a, **k)
        return slabs, min(chunk, -(-g.n_views // 16))

    fdk_module._plan_slabs = plan_31
    for rep in range(3):
        sync()
        t0 = time.perf_counter()
        leveret.fdk(dev, g, vol, backend="cuda")
        sync()
        print(f"device arrays, NumPy-path chunks rep {rep}: {(time.perf_counter() - t0) * 1e3:7.1f} ms", flush=True)
    fdk_module._plan_slabs = plan
    for label, data in (("device arrays", dev), ("NumPy pageable", host), ("NumPy pinned", pinned)):
        for rep in range(3):
            sync()
            t0 = time.perf_counter()
            out = leveret.fdk(data, g, vol, backend="cuda")
            sync()
            t = time.perf_counter() - t0
            stats = {k: (round(v * 1e3, 1) if isinstance(v, float) else v) for k, v in pipeline.last_stats.items()}
            print(f"{label:16s} rep {rep}: {t * 1e3:7.1f} ms  pipeline(ms): {stats}", flush=True)
            del out
    return 0


if __name__ == "__main__":
    sys.exit(main())
