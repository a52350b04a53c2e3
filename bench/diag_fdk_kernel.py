"""FDK on the RabbitCT-like problem with each texture back-projector, same
process: kernel B ("texture") against the ray-aligned passes ("ray", what
"auto" picks where a voxel spans >= 2 detector pixels), from device arrays and
from NumPy arrays, alternating, with the BP of one FDK chunk (32 views) and of
the whole scan. Usage: cd bench && PYTHONPATH=../src python3 diag_fdk_kernel.py [--size 512]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from bench_cone import N_VIEWS, geometry
from common import median_time, metadata, print_header, record, write_results


def main(argv=None):
    import cupy as cp

    import leveret
    import leveret.operators.cone as cone

    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--chunks", type=int, nargs="*", default=[],
                        help="also FDK with these views per chunk (auto kernel), e.g. 62 124")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    meta = metadata(with_devices=True)
    print_header()
    g = geometry()
    vol = leveret.VolumeGeometry((args.size,) * 3, voxel_size=256.0 / args.size)
    updates = args.size**3 * N_VIEWS
    sync = cp.cuda.Device().synchronize
    host = np.random.default_rng(0).random(g.projection_shape, dtype=np.float32)
    dev = cp.asarray(host)
    out = cp.empty(vol.shape, cp.float32)
    threshold = cone.RAY_MIN_PIXELS
    for kernel, pixels in (("texture", 1e9), ("ray", 0.0), ("texture", 1e9), ("ray", 0.0)):
        cone.RAY_MIN_PIXELS = pixels   # what fdk's "auto" operator picks
        op = leveret.ConeBackprojection(g, vol, backend="cuda", kernel=kernel)
        record(f"BP {args.size}^3, all views, {kernel}", median_time(lambda: op(dev, out), reps=3, sync=sync),
               updates)
        record(f"BP {args.size}^3, views 0-31, {kernel}",
               median_time(lambda: op(dev[:32], out, views=slice(0, 32)), reps=5, sync=sync), args.size**3 * 32)
        record(f"FDK {args.size}^3 device arrays, {kernel}",
               median_time(lambda: leveret.fdk(dev, g, vol, backend="cuda"), reps=3, sync=sync), updates)
        record(f"FDK {args.size}^3 NumPy arrays, {kernel}",
               median_time(lambda: leveret.fdk(host, g, vol, backend="cuda"), reps=3, sync=sync), updates)
    cone.RAY_MIN_PIXELS = threshold
    fdk_module = sys.modules["leveret.algorithms.fdk"]   # the package re-exports the function under this name
    plan = fdk_module._plan_slabs
    for chunk in args.chunks:
        fdk_module._plan_slabs = lambda *a, c=chunk, **k: (plan(*a, **k)[0], c)
        kernel = leveret.ConeBackprojection(g, vol, backend="cuda").kernel_for(chunk)
        record(f"FDK {args.size}^3 device arrays, chunks of {chunk} views ({kernel})",
               median_time(lambda: leveret.fdk(dev, g, vol, backend="cuda"), reps=3, sync=sync), updates)
        record(f"FDK {args.size}^3 NumPy arrays, chunks of {chunk} views ({kernel})",
               median_time(lambda: leveret.fdk(host, g, vol, backend="cuda"), reps=3, sync=sync), updates)
    fdk_module._plan_slabs = plan
    if args.out:
        write_results(args.out, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
