"""Times of A and of both CUDA transposes of structured Joseph where the
detector covers part of the grid's height (8 to 128 rows against a 256^3
volume, 360 views, by default): where the band transpose beats the voxel
gather, and what ``transpose="auto"``'s cost model predicted. The scan is
the sweep's (a 512 mm grid of n^3 voxels, source 1000 mm and detector 1500
mm from the axis, ``sampling`` pixels per voxel at the axis, 4/3 of the grid
wide). Prints one JSON line per point.

    PYTHONPATH=src python3 tools/diagnostics/transpose_rows.py --out transpose_rows.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np


def _median_time(fn, sync, reps=3):
    fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[8, 16, 24, 32, 64, 128])
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--views", type=int, default=360)
    parser.add_argument("--sampling", type=float, default=1.0, help="detector pixels per voxel at the axis")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import cupy as cp
    import leveret

    def sync():
        cp.cuda.get_current_stream().synchronize()

    out = []
    n, voxel = args.n, 512.0 / args.n
    for n_rows in args.rows:
        # magnification 1.5
        g = leveret.ConeGeometry.circular(np.linspace(0, 2 * np.pi, args.views, endpoint=False), 1000.0, 1500.0,
                                          n_rows, round(4 * n * args.sampling / 3), 1.5 * voxel / args.sampling)
        vol = leveret.VolumeGeometry((n, n, n), voxel)
        x = cp.random.default_rng(0).random(vol.shape, dtype=cp.float32)
        y = cp.empty(g.projection_shape, cp.float32)
        back = cp.empty(vol.shape, cp.float32)
        A = leveret.Projector(g, vol, model="joseph", backend="cuda")
        row = {"n_rows": n_rows, "A": _median_time(lambda: A(x, out=y), sync), "auto": A.transpose,
               "predicted": A._gpu.predicted}
        for tr in ("gather", "scatter"):
            B = leveret.Projector(g, vol, model="joseph", backend="cuda", transpose=tr)
            row[tr] = _median_time(lambda: B.T(y, out=back), sync)
        print(json.dumps(row), flush=True)
        out.append(row)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
