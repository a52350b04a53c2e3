"""Times of A and of both CUDA transposes (voxel gather, atomic: the band transpose) of the
matched cone-beam Projector, the voxel-driven ConeBackprojection, the
unmatched adjoint built on it (``Projector(adjoint="unmatched")``) and ASTRA's
FP/BP on a grid of detector sampling x cone half-angle x views: the data the
transpose rule is chosen from. Prints one line per point and writes JSON.

    PYTHONPATH=src python3 tools/diagnostics/transpose_grid.py --out transpose_grid.json
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import time
from pathlib import Path

import numpy as np


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[256])
    parser.add_argument("--views", type=int, nargs="+", default=[360])
    parser.add_argument("--sampling", type=float, nargs="+", default=[0.5, 0.75, 1.0, 1.5, 2.0, 2.5])
    parser.add_argument("--half-angle", type=float, nargs="+", default=[-1, 2, 5, 10, 15],
                        help="degrees; -1: the base geometry's (source at 1000 mm)")
    parser.add_argument("--budget", type=float, default=150.0, help="seconds; stop starting points after")
    parser.add_argument("--models", nargs="+", default=["joseph", "siddon"], choices=["joseph", "siddon"])
    parser.add_argument("--scan", nargs="+", default=["full"], choices=["full", "short"])
    parser.add_argument("--offset", type=float, nargs="+", default=[0.0], help="detector offset, detector widths")
    parser.add_argument("--trajectory", nargs="+", default=["circular"], choices=["circular", "wobble"])
    parser.add_argument("--no-cone-bp", action="store_true", help="skip the voxel-driven ConeBackprojection")
    parser.add_argument("--no-astra", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[2]
    sweep = _load("bench_sweep", root / "bench" / "bench_sweep.py")
    common = sweep.common
    import cupy as cp
    import leveret
    astra = sweep.Astra(not args.no_astra)

    def sync():
        cp.cuda.get_current_stream().synchronize()

    rows, t_start = [], time.perf_counter()
    points = itertools.product(args.n, args.views, args.sampling, args.half_angle, args.scan, args.offset,
                               args.trajectory)
    for n, views, s, h, scan, offset, trajectory in points:
        if time.perf_counter() - t_start > args.budget:
            break
        p = dict(n=n, nz=n, views=views, sampling=s, half_angle=None if h < 0 else h,
                 scan=scan, offset=offset, trajectory=trajectory)
        g, vol, derived = sweep.cone_problem(p)
        row = dict(params=p, derived=derived)
        try:
            x = cp.random.default_rng(0).random(vol.shape, dtype=cp.float32)
            y = cp.empty(g.projection_shape, cp.float32)
            back = cp.empty(vol.shape, cp.float32)
            for model in args.models:
                A = leveret.Projector(g, vol, model=model, backend="cuda")
                row[f"A_{model}"] = common.median_time(lambda: A(x, out=y), reps=2, sync=sync)
                row[f"transpose_auto_{model}"] = A.transpose
                for tr in ("gather", "scatter"):
                    try:
                        B = leveret.Projector(g, vol, model=model, backend="cuda", transpose=tr)
                    except ValueError:
                        continue
                    row[f"AT_{tr}_{model}"] = common.median_time(lambda: B.T(y, out=back), reps=2,
                                                                 sync=sync)
                    del B
                del A
            if not args.no_cone_bp:
                bp = leveret.ConeBackprojection(g, vol, backend="cuda")
                row["cone_bp"] = common.median_time(lambda: bp(y, back), reps=2, sync=sync)
                row["cone_bp_kernel"] = bp.last_kernel
                del bp
                U = leveret.Projector(g, vol, model="joseph", backend="cuda", adjoint="unmatched")
                row["AT_unmatched"] = common.median_time(lambda: U.T(y, out=back), reps=2, sync=sync)
                del U
            del x, y, back
            sweep._free()
            if astra.astra is not None:
                pg, vg = common.astra_cone_geometry(g, vol)
                n_views, n_rows, n_cols = g.projection_shape
                row["astra_fp"], row["astra_bp"] = astra.fp_bp(pg, vg, vol.shape, (n_rows, n_views, n_cols))
        except Exception as exc:   # noqa: BLE001  (a diagnostic: report and go on)
            row["error"] = f"{type(exc).__name__}: {exc}"[:200]
            sweep._free()
        rows.append(row)
        print(json.dumps({k: (round(v * 1e3, 2) if isinstance(v, float) else v)
                          for k, v in row.items() if k not in ("params", "derived")}
                         | {"p": [n, views, s, h, scan, offset, trajectory]}), flush=True)
        if args.out:   # after every point: a run cut short keeps what it measured
            Path(args.out).write_text(json.dumps(rows, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
