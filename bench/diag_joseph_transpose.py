"""Structured Joseph on paper 003's problem (P1 of bench_projector.py): each
transpose timed side by side, the voxel one checked against the atomic one at
full size (poisoned output, largest difference relative to the largest value),
and the iterations that use it. Usage (from bench/, PYTHONPATH=../src):
  python3 diag_joseph_transpose.py [--size 512] [--views 720] [--out FILE]
"""
from __future__ import annotations

import argparse
import sys

from bench_projector import _iteration_time, paper_geometry
from common import median_time, metadata, print_header, record, write_results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--views", type=int, default=720)
    parser.add_argument("--variants", nargs="*", default=[],
                        help="extra builds of the voxel kernel, e.g. 'LEVERET_JV_KZ=4' 'LEVERET_JV_MIN_BLOCKS=3'"
                             " (comma-separated macros per build)")
    parser.add_argument("--batches", nargs="*", type=int, default=[],
                        help="views per launch of the voxel transpose to time (raytrace.VOXEL_VIEW_BATCH)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    import cupy as cp
    import leveret

    meta = metadata(with_devices=True)
    print_header()
    g, vol = paper_geometry(args.size, args.views)
    label = f"cone {args.size}^3, {args.views} x {args.size}^2"
    sync = cp.cuda.Device().synchronize
    rng = cp.random.default_rng(0)
    A = leveret.Projector(g, vol, model="joseph", backend="cuda", precision="float32")
    assert A.structured, "paper 003's path must apply"
    rays = g.projection_shape[0] * vol.size
    x = rng.random(vol.shape, dtype=cp.float32)
    y = rng.random(g.projection_shape, dtype=cp.float32)
    record(f"{label} forward joseph structured", median_time(lambda: A(x), reps=3, sync=sync), rays)
    backs = {}
    for mode in ("voxel", "atomic"):
        A._gpu.transpose = mode
        backs[mode] = cp.full(vol.shape, cp.nan, cp.float32)
        A.T(y, out=backs[mode])
        t = median_time(lambda: A.T(y, out=backs[mode]), reps=3, sync=sync)
        record(f"{label} back joseph structured {mode}", t, rays)
    import leveret.cuda.raytrace as rt

    def voxel(name):   # the voxel transpose as rt is set now, poisoned output, against the atomic one
        A._gpu.transpose = "voxel"
        out = cp.full(vol.shape, cp.nan, cp.float32)
        A.T(y, out=out)
        t = median_time(lambda: A.T(y, out=out), reps=3, sync=sync)
        err = float(cp.abs(out - backs["atomic"]).max() / cp.abs(backs["atomic"]).max())
        record(f"{label} back joseph structured voxel{name}", t, rays, note=f"vs atomic {err:.2g}")

    for variant in args.variants:
        rt.VOXEL_DEFINES = tuple(variant.split(","))
        voxel(f" {variant}")
    rt.VOXEL_DEFINES = ()
    for batch in args.batches:
        rt.VOXEL_VIEW_BATCH = batch
        voxel(f", {batch} views per launch")
    rt.VOXEL_VIEW_BATCH = 0
    diff = float(cp.abs(backs["voxel"] - backs["atomic"]).max() / cp.abs(backs["atomic"]).max())
    unwritten = int(cp.isnan(backs["voxel"]).sum())
    print(f"voxel vs atomic at full size: max |difference| / max = {diff:.3g}, unwritten voxels {unwritten}")
    meta["voxel_vs_atomic"] = {"max_rel_difference": diff, "unwritten": unwritten}
    A._gpu.transpose = "voxel"
    b = A(x)
    record(f"{label} SIRT iteration joseph structured",
           _iteration_time(lambda n: leveret.sirt(b, A, n), 2, sync), rays, note="voxel transpose")
    record(f"{label} CGLS iteration joseph structured",
           _iteration_time(lambda n: leveret.cgls(b, A, n), 2, sync), rays, note="voxel transpose")
    if args.out:
        write_results(args.out, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
