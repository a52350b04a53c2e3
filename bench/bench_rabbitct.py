"""RabbitCT on a full-size synthetic dataset: time, GUPS and the RMSE in HU
against a float64 reference, for interpolation="linear" (the texture unit's
8-bit weights) and "linear32" (exact float32 weights).

The dataset (leveret.rabbitct.make_dataset: 496 views of 1248 x 960 from the
RabbitCT geometry, a Shepp-Logan head in HU) and its float64 reference are
computed first (minutes at L = 256). ASTRA has no RabbitCT runner; its cone
back-projection on the same geometry is in bench_cone.py.

    PYTHONPATH=src python3 bench/bench_rabbitct.py --size 256 --out bench_rabbitct.json
"""

from __future__ import annotations

import argparse
import sys
import time

from common import RESULTS, metadata, write_results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=256, help="volume edge L (voxels)")
    parser.add_argument("--backend", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    from leveret.rabbitct import make_dataset, run_benchmark

    meta = metadata(with_devices=args.backend == "cuda")
    t0 = time.perf_counter()
    cache: dict = {}
    data = make_dataset(reference_sizes=(args.size,), cache=cache)
    print(f"dataset and float64 reference at L = {args.size}: {time.perf_counter() - t0:.0f} s", flush=True)
    for interpolation in ("linear", "linear32"):
        result = run_benchmark(
            data, args.size, backend=args.backend, repeats=3, reference=cache[args.size], interpolation=interpolation
        )
        print(f"--- interpolation={interpolation} ---\n{result.table()}", flush=True)
        RESULTS.append(dict(result.to_dict(), interpolation=interpolation))
    if args.out:
        write_results(args.out, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
