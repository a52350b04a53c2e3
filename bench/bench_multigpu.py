"""One GPU against a device set (``devices=``) on the same problems.

Problems (each timed on the current GPU, then with ``--devices``):
  fbp    parallel-beam FBP, 2048 slices of 2048^2 from 2048 angles, NumPy in
         and out (``--quick``: 256 slices)
  fdk    FDK of 1024^3 and 2048^3 from 496 views of 1248 x 960, NumPy in and
         out (``--quick``: 512^3 only)
  sirt   one SIRT iteration's A and A.T: 720 views of 512^2 from 512^3
         (structured Joseph), CuPy in and out (``--quick``: 360 views of 256^2,
         256^3)

``--devices 0,0`` runs two workers on GPU 0 (``DeviceSet([0, 0], shared=True)``):
the same GPU does the same work, so the ideal time is the one-GPU time and
the difference is the multi-device path's overhead (threads, queue, per-worker
buffers, peer copies, the partial-volume sum). With N distinct GPUs the ideal
is the one-GPU time / N; the table prints the speed-up and the overhead
against that ideal: ``t_set / (t_one / N) - 1``.

    PYTHONPATH=src python3 bench/bench_multigpu.py --devices all --out multigpu.json
    PYTHONPATH=src python3 bench/bench_multigpu.py --devices 0,0 --quick
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from common import RESULTS, median_time, metadata, print_header, record, write_results


def parse_devices(text: str):
    from leveret.devices import DeviceSet
    if text.strip().lower() == "all":
        return "all"
    ids = [int(p) for p in text.split(",")]
    return DeviceSet(ids, shared=len(set(ids)) < len(ids))


def n_distinct(devices) -> int:
    from leveret.devices import parse
    return len(set(parse(devices).ids))


def compare(name, run_one, run_set, devices, updates, reps):
    """Time both, record both rows, return (t_one, t_set)."""
    import cupy as cp
    sync = cp.cuda.Device().synchronize

    def release():
        # cached pinned blocks are not split for other sizes: 2048^3 FDK's would pile up
        cp.get_default_pinned_memory_pool().free_all_blocks()
        cp.get_default_memory_pool().free_all_blocks()

    t_one = median_time(run_one, reps=reps, sync=sync)
    record(name, t_one, updates, peer="1 GPU")
    release()
    t_set = median_time(run_set, reps=reps, sync=sync)
    release()
    n = n_distinct(devices)
    overhead = t_set / (t_one / n) - 1
    record(name, t_set, updates, peer=f"{n} GPU" + ("" if n == 1 else "s"),
           note=f"devices={devices!r}: speed-up {t_one / t_set:.2f}x, overhead {overhead * 100:+.1f} % "
                f"against t_one/{n}")
    RESULTS[-1].update(speedup=t_one / t_set, overhead=overhead, gpus=n)
    return t_one, t_set


def bench_fbp(devices, quick):
    import leveret
    n, n_angles = 2048, 2048
    n_slices = 256 if quick else 2048
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, n_angles, endpoint=False), n, n_rows=n_slices)
    proj = np.empty(g.projection_shape, np.float32)      # (angles, rows, cols)
    proj[...] = np.random.default_rng(0).random((1, 1, n), dtype=np.float32)   # values do not matter; pages do
    out = np.empty((n_slices, n, n), np.float32)
    out[...] = 0   # touched once, as a reused output is
    stats: dict = {}
    compare(f"FBP {n_slices} x {n}^2 from {n_angles} angles, NumPy in/out",
            lambda: leveret.fbp(proj, g, out=out),
            lambda: leveret.fbp(proj, g, out=out, devices=devices, stats=stats),
            devices, n * n * n_slices * n_angles, reps=2)
    RESULTS[-1]["stats"] = dict(stats)


def bench_fdk(devices, quick):
    import leveret
    from leveret.geometry import ConeGeometry, VolumeGeometry
    n_views, rows, cols = 496, 960, 1248
    g = ConeGeometry.circular(np.linspace(0, 2 * np.pi, n_views, endpoint=False), sid=750.0, sdd=1200.0,
                              n_rows=rows, n_cols=cols, pixel_size=0.308)
    proj = np.empty(g.projection_shape, np.float32)
    proj[...] = np.random.default_rng(1).random((1, 1, cols), dtype=np.float32)
    for n in ((512,) if quick else (1024, 2048)):
        volume = VolumeGeometry((n, n, n), voxel_size=256.0 / n)
        stats: dict = {}
        compare(f"FDK {n}^3 from {n_views} x {cols}x{rows}, NumPy in/out",
                lambda: leveret.fdk(proj, g, volume),
                lambda: leveret.fdk(proj, g, volume, devices=devices, stats=stats),
                devices, n ** 3 * n_views, reps=2)
        RESULTS[-1]["stats"] = dict(stats)


def bench_sirt(devices, quick):
    import cupy as cp
    from leveret.geometry import ConeGeometry, VolumeGeometry
    from leveret.operators import Projector
    n, n_views = (256, 360) if quick else (512, 720)
    g = ConeGeometry.circular(np.linspace(0, 2 * np.pi, n_views, endpoint=False), sid=1000.0 * n / 512,
                              sdd=1500.0 * n / 512, n_rows=n, n_cols=n, pixel_size=2.0)
    volume = VolumeGeometry((n, n, n), voxel_size=1.0)
    one = Projector(g, volume, model="joseph", backend="cuda")
    several = Projector(g, volume, model="joseph", backend="cuda", devices=devices)
    x = cp.random.random(volume.shape, dtype=cp.float32)
    y = cp.random.random(g.projection_shape, dtype=cp.float32)
    compare(f"SIRT iteration (A + A.T), {n_views} x {n}^2 <-> {n}^3, Joseph, CuPy",
            lambda: (one(x), one.T(y)), lambda: (several(x), several.T(y)),
            devices, 2 * n ** 3 * n_views, reps=3)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", default="all", help="'all' or GPU ids, e.g. 0,1 or 0,0 (default: all)")
    parser.add_argument("--only", default="fbp,fdk,sirt", help="problems to run, comma-separated")
    parser.add_argument("--quick", action="store_true", help="smaller problems")
    parser.add_argument("--out", default=None, help="JSON file for the results")
    args = parser.parse_args(argv)
    devices = parse_devices(args.devices)
    meta = metadata(with_devices=True)
    meta["devices_argument"] = args.devices
    print_header()
    problems = {"fbp": bench_fbp, "fdk": bench_fdk, "sirt": bench_sirt}
    for name in args.only.split(","):
        if name not in problems:
            parser.error(f"--only: unknown problem {name!r}; expected {', '.join(problems)}")
        problems[name](devices, args.quick)
    if args.out:
        write_results(args.out, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
