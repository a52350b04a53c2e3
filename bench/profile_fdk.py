"""Where FDK's time goes on the GPU (RabbitCT-like geometry, device arrays):
host-side set-up, cosine/column weighting, the ramp filter, the texture
upload and the back-projection kernel, each timed alone with CUDA events over
the same 32-view chunks that ``leveret.fdk`` uses. Usage:
  PYTHONPATH=src python3 bench/profile_fdk.py [--size 512] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from bench_cone import N_VIEWS, geometry


def gpu_ms(fn, reps=3):
    import cupy as cp
    fn()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def main(argv=None):
    import cupy as cp

    import leveret
    from leveret.algorithms.fdk import FDKWeighting, _cosine_weights, _plan_slabs
    from leveret.filters import apply_filter
    from leveret.operators import ConeBackprojection

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    g = geometry()
    vol = leveret.VolumeGeometry((args.size,) * 3, voxel_size=256.0 / args.size)
    rows = {}

    t = time.perf_counter()
    weighting = FDKWeighting(g)
    rows["host: FDKWeighting (frames, Parker)"] = (time.perf_counter() - t) * 1e3
    t = time.perf_counter()
    op = ConeBackprojection(g, vol, backend="cuda", matrices=weighting.frames["normalised"])
    rows["host: ConeBackprojection set-up"] = (time.perf_counter() - t) * 1e3
    _, chunk = _plan_slabs(g, vol, "cuda", None, None)
    chunks = [slice(n, min(N_VIEWS, n + chunk)) for n in range(0, N_VIEWS, chunk)]
    proj = cp.random.random(g.projection_shape, dtype=cp.float32)
    out = cp.zeros(vol.shape, cp.float32)

    def stage(fn):
        return sum(gpu_ms(lambda c=c: fn(c)) for c in chunks)

    rows[f"copy of the input chunk ({len(chunks)} chunks of {chunk} views)"] = stage(lambda c: proj[c].copy())
    rows["cosine weights (broadcast, float32)"] = stage(
        lambda c: _cosine_weights(weighting.frames, c, g.n_rows, g.n_cols, cp, np.float32))
    raw = proj[chunks[0]].copy()

    def weigh(c):
        part = raw[: c.stop - c.start]
        part *= _cosine_weights(weighting.frames, c, g.n_rows, g.n_cols, cp, np.float32)
        part *= cp.asarray(weighting.per_column[c], np.float32)[:, None, :]

    rows["weighting in place (cosine x column)"] = stage(weigh)
    rows["ramp filter (apply_filter: pad, rfft, x, irfft, crop)"] = stage(
        lambda c: apply_filter(raw[: c.stop - c.start], weighting.response, padding="zero"))
    rows["weighting + filter (FDKWeighting.__call__)"] = stage(lambda c: weighting(raw[: c.stop - c.start].copy(), c))
    rows["back-projection of the chunks (texture upload + kernel B)"] = stage(
        lambda c: op(proj[c], out, views=c, accumulate=True))
    rows["back-projection, all views in one pass"] = gpu_ms(lambda: op(proj, out))
    rows["fdk() total, device arrays"] = gpu_ms(lambda: leveret.fdk(proj, g, vol, backend="cuda"), reps=2)
    width = max(map(len, rows))
    print(f"FDK profile, {args.size}^3 from {N_VIEWS} x {g.n_rows}x{g.n_cols} ({cp.cuda.runtime.getDeviceProperties(0)['name'].decode()})")
    for name, ms in rows.items():
        print(f"  {name:<{width}}  {ms:8.1f} ms")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"size": args.size, "ms": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
