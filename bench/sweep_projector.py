"""The structured float32 projectors on paper 003's problem (and RabbitCT's
geometry): forward and transpose times against the number of views that run
side by side per detector column (``raytrace.VIEW_GROUP``), device arrays,
both transposes (atomic, gather) for Joseph. A tuning aid next to
bench_projector.py, which has the full table with ASTRA.

Usage (from bench/, PYTHONPATH=../src):
  python3 sweep_projector.py [--groups 1 4 8 16] [--models joseph siddon] [--rabbitct] [--out FILE]
"""
from __future__ import annotations

import argparse
import sys

from bench_projector import paper_geometry, rabbitct_geometry
from common import median_time, metadata, print_header, record, write_results


def main(argv=None):
    import cupy as cp

    import leveret
    import leveret.cuda.raytrace as rt

    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--models", nargs="+", default=["joseph", "siddon"])
    parser.add_argument("--rabbitct", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    meta = metadata(True)
    print_header()
    sync = cp.cuda.Device().synchronize
    problems = [("P1 720x512^2 <-> 512^3", *paper_geometry(512, 720))]
    if args.rabbitct:
        problems.append(("RabbitCT 512^3", *rabbitct_geometry(512)))
    for label, g, vol in problems:
        rng = cp.random.default_rng(0)
        x = rng.random(vol.shape, dtype=cp.float32)
        y = cp.empty(g.projection_shape, cp.float32)
        yr = rng.random(g.projection_shape, dtype=cp.float32)
        back = cp.empty(vol.shape, cp.float32)
        updates = g.projection_shape[0] * vol.size
        for model in args.models:
            A = leveret.Projector(g, vol, model=model, backend="cuda", structured=True)
            transposes = ["atomic", "gather"] if model == "joseph" else ["atomic"]
            for group in args.groups:
                rt.VIEW_GROUP = group
                t = median_time(lambda: A(x, out=y), reps=3, sync=sync)
                record(f"{label} {model} forward, view group {group}", t, updates)
                for transpose in transposes:
                    A._gpu.transpose = transpose
                    t = median_time(lambda: A.T(yr, out=back), reps=3, sync=sync)
                    record(f"{label} {model} back ({transpose}), view group {group}", t, updates)
                A._gpu.transpose = "atomic"
        del x, y, yr, back
        cp.get_default_memory_pool().free_all_blocks()
    if args.out:
        write_results(args.out, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
