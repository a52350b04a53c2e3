"""RabbitCT on a full-size synthetic dataset: time, GUPS and RMSE in HU against the
float64 reference, for the texture kernel and the software-interpolating one.

    cd bench && PYTHONPATH=../src python3 bench_rabbitct.py [--size 256] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    from leveret.rabbitct import make_dataset, run_benchmark

    t0 = time.perf_counter()
    cache: dict = {}
    data = make_dataset(reference_sizes=(args.size,), cache=cache)
    print(f"dataset and float64 reference at L = {args.size}: {time.perf_counter() - t0:.0f} s", flush=True)
    rows = []
    for interpolation in ("linear", "linear32"):
        result = run_benchmark(data, args.size, backend="cuda", repeats=3, reference=cache[args.size],
                               interpolation=interpolation)
        print(f"--- interpolation={interpolation} ---\n{result.table()}", flush=True)
        rows.append(dict(result.to_dict(), interpolation=interpolation))
    if args.out:
        from leveret.io import atomic_output
        with atomic_output(args.out, overwrite=True) as tmp:
            tmp.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
