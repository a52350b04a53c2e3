"""Times of A and of both CUDA transposes of structured Joseph where the
detector has few rows (8 to 128) against a 256^3 volume, 360 views: where the
band transpose beats the voxel gather (which visits every voxel), and what
``transpose="auto"``'s cost model predicted. Prints one JSON line per point.

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
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import cupy as cp
    import leveret

    def sync():
        cp.cuda.get_current_stream().synchronize()

    out = []
    n, voxel = 256, 2.0
    for n_rows in args.rows:
        # 1 px/voxel at the axis across a 4/3-wide detector; magnification 1.5
        g = leveret.ConeGeometry.circular(np.linspace(0, 2 * np.pi, 360, endpoint=False), 1000.0, 1500.0, n_rows,
                                          341, 1.5 * voxel)
        vol = leveret.VolumeGeometry((n, n, n), voxel)
        x = cp.random.default_rng(0).random(vol.shape, dtype=cp.float32)
        y = cp.empty(g.projection_shape, cp.float32)
        back = cp.empty(vol.shape, cp.float32)
        A = leveret.Projector(g, vol, model="joseph", backend="cuda")
        row = {"n_rows": n_rows, "A": _median_time(lambda: A(x, out=y), sync), "auto": A.transpose,
               "predicted": A._gpu.predicted}
        for tr in ("voxel", "atomic"):
            B = leveret.Projector(g, vol, model="joseph", backend="cuda", transpose=tr)
            row[tr] = _median_time(lambda: B.T(y, out=back), sync)
        print(json.dumps(row), flush=True)
        out.append(row)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
