"""Times of structured float32 Siddon's transpose by z slab depth and views per
group on the sweep's circular scans (0.75 px/voxel): the data of
``siddon_z_slab`` and ``siddon_view_group`` (tests/cuda/test_transpose_rule.py,
SIDDON_LAUNCHES). Prints one JSON line per scan and writes them all.

    PYTHONPATH=src python3 tools/diagnostics/siddon_launches.py --out siddon_launches.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

# (n, nz, views, half-angle in degrees or None, z slab depths, views per group):
# the scans of SIDDON_LAUNCHES.
SCANS = [(256, 256, 720, None, (256, 128), (8, 16)), (1024, 256, 720, None, (256, 128), (8, 16)),
         (512, 512, 180, None, (256, 171), (4, 8, 16)), (512, 512, 360, None, (256,), (8, 16)),
         (512, 512, 720, None, (512, 256, 171, 128), (8, 16)), (512, 512, 1440, None, (256,), (8, 16)),
         (512, 512, 720, 15.0, (512, 256), (8, 16)), (640, 640, 720, None, (640, 320, 214, 160), (8, 16)),
         (768, 768, 180, None, (768, 384, 256, 192), (4, 8, 16)),
         (768, 768, 720, None, (768, 512, 384, 256, 192, 154), (8, 16)),
         (896, 896, 720, None, (448, 299, 224), (8, 16)),
         (1024, 1024, 180, None, (1024, 512, 342, 256, 205), (4, 8, 16)),
         (1024, 1024, 360, None, (512, 342, 256), (4, 8, 16)),
         (1024, 1024, 720, None, (1024, 512, 384, 342, 256, 205), (8, 16)),
         (1024, 1024, 1440, None, (342, 256), (8, 16))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=None, help="only the scans of these grid sizes")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import cupy as cp
    import leveret
    path = Path(__file__).resolve().parents[2] / "bench" / "bench_sweep.py"
    spec = importlib.util.spec_from_file_location("bench_sweep", path)
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)

    def sync():
        cp.cuda.Device().synchronize()

    def scan(n, nz, views, half_angle, slabs, groups):
        point = dict(n=n, nz=nz, views=views, sampling=0.75, half_angle=half_angle, scan="full", offset=0.0,
                     trajectory="circular")
        g, vol, _ = sweep.cone_problem(point)
        A = leveret.Projector(g, vol, model="siddon", backend="cuda")
        y = A(cp.random.default_rng(0).random(vol.shape, dtype=cp.float32))
        back = cp.empty(vol.shape, cp.float32)
        reps = 1 if n >= 896 else 3   # calls of a second or more
        row = {"n": n, "nz": nz, "views": views, "half_angle": half_angle,
               "rule": [A._gpu.z_slab, A._gpu.view_group], "ms": {}}
        for slab in slabs:
            for group in groups:
                A._gpu.z_slab, A._gpu.view_group = slab, group
                seconds = sweep.common.median_time(lambda: A.T(y, out=back), reps=reps, sync=sync)
                row["ms"][f"{slab}/{group}"] = round(1e3 * seconds, 2)
        return row

    out = []
    for n, nz, views, half_angle, slabs, groups in SCANS:
        if args.n and n not in args.n:
            continue
        out.append(scan(n, nz, views, half_angle, slabs, groups))
        print(json.dumps(out[-1]), flush=True)
        cp.get_default_memory_pool().free_all_blocks()
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
