"""``leveret bench``: a small built-in benchmark table."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from .scan import _check_output, _say


def bench(args) -> int:
    import leveret
    from leveret import phantom
    from ..backends import resolve
    from ..io import atomic_output

    json_path = None if args.json is None else Path(args.output_dir).absolute() / args.json
    if json_path is not None:
        if json_path.parent.exists() and not json_path.parent.is_dir():
            raise ValueError(f"--output-dir: {str(json_path.parent)!r} is a file, not a folder")
        if json_path.parent.is_dir():
            _check_output(json_path, overwrite=True, flag="--json", args=args, asked_by=None)
    backend = resolve(args.backend)
    sizes = sorted({max(16, args.size // 4), max(16, args.size // 2), max(16, args.size)})
    rows = []

    def timed(fn):
        fn()  # compile and plan first
        best = math.inf
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            r = fn()
            if backend == "cuda":
                import cupy

                cupy.cuda.Device().synchronize()
            best = min(best, time.perf_counter() - t0)
            del r
        return best

    for n in sizes:
        g = leveret.ParallelGeometry(np.linspace(0, np.pi, n, endpoint=False), n, n_rows=args.slices)
        proj = phantom.ball(0.4 * n).project(g).astype(np.float32)
        t = timed(lambda: leveret.fbp(proj, g, backend=backend))
        updates = g.default_volume().size * g.n_angles
        rows.append(
            dict(
                case="fbp parallel",
                backend=backend,
                projections=list(proj.shape),
                volume=list(g.default_volume().shape),
                seconds=t,
                gups=updates / t / 1e9,
            )
        )
    n = sizes[-1] // 2 if sizes[-1] >= 32 else sizes[-1]
    cg = leveret.ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, n, endpoint=False), sid=4.0 * n, sdd=8.0 * n, n_rows=n, n_cols=n, pixel_size=1.0
    )
    cv = leveret.VolumeGeometry((args.slices, n // 2, n // 2), 1.0)
    cproj = phantom.ball(0.2 * n).project(cg).astype(np.float32)
    t = timed(lambda: leveret.fdk(cproj, cg, cv, backend=backend))
    rows.append(
        dict(
            case="fdk cone",
            backend=backend,
            projections=list(cproj.shape),
            volume=list(cv.shape),
            seconds=t,
            gups=cv.size * cg.n_views / t / 1e9,
        )
    )

    print(f"{'case':<14} {'backend':<7} {'projections':<18} {'volume':<16} {'best (ms)':>10} {'GU/s':>8}")
    for r in rows:
        print(
            f"{r['case']:<14} {r['backend']:<7} {'x'.join(map(str, r['projections'])):<18} "
            f"{'x'.join(map(str, r['volume'])):<16} {r['seconds'] * 1e3:>10.2f} {r['gups']:>8.3f}"
        )
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(json_path, overwrite=True) as tmp:
            tmp.write_text(json.dumps({"repeats": args.repeats, "results": rows}, indent=1))
        _say(args, f"wrote {json_path}")
    return 0
