"""3D Radon FBP (pulse EPR imaging): leveret on CUDA and on the CPU.

Problems (the sizes of Qiao et al. 2015's 3D FBP for EPR imaging, docs/references.md):
  128^3 from 208 directions    (the paper: 0.400 s on a GTX 760, float64, with transfers)
  200^3 from 208 directions    (the paper: 1.507 s)
  256^3 from 2000 directions
Directions: uniform solid angle (RadonGeometry.uniform, a Fibonacci spiral)
and, for the two-stage method, an equal linear-angle grid of about the same
count (13 x 16 = 208, 40 x 50 = 2000). Unit voxels and sample spacing;
n_samples = ceil(sqrt(3) n) + 1, so every voxel sees every projection.
Projections are a ball's exact plane integrals.

Each GPU row is the median wall time of radon3d_fbp from NumPy arrays in and
out (pinned upload, filter, back-projection streamed out in slabs) or from
and to device (CuPy) arrays; the note gives the time split of one further
call (CUDA events: transfer in, filter, back-projection, transfer out not
hidden). GU/s = voxels x directions / time / 1e9. ASTRA has no 3D Radon
transform, so there is no peer row. No switch: --gpu.

    PYTHONPATH=src python3 bench/bench_radon3d.py --gpu --out bench_radon3d.json
    PYTHONPATH=src python3 bench/bench_radon3d.py --cpu --sizes 128,200
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from common import median_time, metadata, print_header, record, write_results

PROBLEMS = [(128, 208, (13, 16)), (200, 208, (13, 16)), (256, 2000, (40, 50))]


def problem(n, n_dirs, grid=None):
    import leveret
    from leveret.phantom import ball

    n_samples = int(math.ceil(math.sqrt(3.0) * n)) + 1
    if grid is None:
        g = leveret.RadonGeometry.uniform(n_dirs, n_samples)
    else:
        g = leveret.RadonGeometry.grid(grid[0], grid[1], n_samples)
    vol = leveret.VolumeGeometry((n, n, n), 1.0)
    return g, vol, ball(0.4 * n).project_radon(g)


def _split_note(t: dict) -> str:
    names = {"transfer_in": "in", "filter": "filter", "backprojection": "BP", "transfer_out": "out"}
    return "split ms: " + " / ".join(f"{short} {t[k] * 1e3:.2f}" for k, short in names.items())


def bench_gpu(problems=PROBLEMS, reps=5):
    import cupy as cp
    import leveret

    sync = cp.cuda.Device().synchronize
    for n, n_dirs, grid in problems:
        updates = n**3 * n_dirs
        for method, gshape in (("single-stage", None), ("two-stage", grid)):
            g, vol, p = problem(n, n_dirs, gshape)
            updates = n**3 * g.n_dirs
            label = f"{n}^3 from {g.n_dirs} {'uniform' if gshape is None else 'grid'} dirs, {method}"
            for precision in ("float32", "float64"):
                dt = "f32" if precision == "float32" else "f64"
                p_dev = cp.asarray(p)

                def host_call(t=None):
                    return leveret.radon3d_fbp(p, g, vol, backend="cuda", precision=precision, method=method, stats=t)

                def dev_call(t=None):
                    return leveret.radon3d_fbp(p_dev, g, vol, precision=precision, method=method, stats=t)

                for where, call in (("NumPy in/out", host_call), ("device arrays", dev_call)):
                    seconds = median_time(call, reps=reps, warmup=2, sync=sync)
                    split: dict = {}
                    call(split)
                    sync()
                    record(f"FBP {label}, {dt}, {where}", seconds, updates, note=_split_note(split))
                del p_dev
                cp.get_default_memory_pool().free_all_blocks()
        bench_kernel_only(n, n_dirs, reps)
    bench_fallbacks(reps)


def bench_kernel_only(n, n_dirs, reps=5):
    """The back-projection kernel alone on device arrays, float32 and float64: the
    shared-memory kernel the problem runs ("auto") and the global-memory fallback
    (what geometries with voxels much coarser than the sample pitch get)."""
    import cupy as cp

    from leveret.cpu.radon3d import sample_table
    from leveret.cuda import radon3d as gpu

    g, vol, _ = problem(n, n_dirs)
    table = sample_table(g.directions, g.n_samples, g.spacing, vol)
    table_dev = cp.asarray(table)
    for path in ("auto", "global"):
        for dtype in (np.float32, np.float64):
            filt = cp.random.standard_normal(g.projection_shape).astype(dtype)
            out = cp.empty(vol.shape, dtype)
            seconds = median_time(
                lambda: gpu.backproject(filt, table, out, table_dev=table_dev, path=path),
                reps=reps,
                sync=cp.cuda.Device().synchronize,
            )
            plan = gpu.plan_backprojection(table, 4, dtype, n_dirs, path)
            note = (
                f"shared memory: window {plan.W} samples, batch {plan.DB}"
                if plan.path == "shared"
                else "global-memory fallback"
            )
            record(
                f"BP kernel only {n}^3 from {n_dirs} dirs, {np.dtype(dtype).name}, {plan.path}",
                seconds,
                n**3 * n_dirs,
                note=note,
            )


def bench_fallbacks(reps=5):
    """The kernels of unusual geometries (device arrays, kernels only), to place
    the launcher's thresholds: 128^3 voxels 8 x the sample pitch from 208
    directions (windows of ~260 samples: float32 "auto" takes the global kernel
    for precision, float64 still stages 11 directions per batch), both kernels
    in both precisions; and the forward transform with 12288 samples (the
    shared histogram's float32 limit) through shared and global atomics."""
    import cupy as cp
    import leveret

    from leveret.cpu.radon3d import sample_table
    from leveret.cuda import radon3d as gpu

    sync = cp.cuda.Device().synchronize
    n, n_dirs = 128, 208
    vol = leveret.VolumeGeometry((n, n, n), 8.0)
    g = leveret.RadonGeometry.uniform(n_dirs, int(math.ceil(math.sqrt(3.0) * n * 8)) + 1)
    table = sample_table(g.directions, g.n_samples, g.spacing, vol)
    table_dev = cp.asarray(table)
    for dtype in (np.float32, np.float64):
        filt = cp.random.standard_normal(g.projection_shape).astype(dtype)
        out = cp.empty(vol.shape, dtype)
        for path in ("shared", "global"):
            plan = gpu.plan_backprojection(table, 4, dtype, n_dirs, path)
            auto = gpu.plan_backprojection(table, 4, dtype, n_dirs).path == path
            seconds = median_time(
                lambda: gpu.backproject(filt, table, out, table_dev=table_dev, path=path), reps=reps, sync=sync
            )
            note = f"window {plan.W} samples, batch {plan.DB}" if path == "shared" else "global memory"
            record(
                f"BP kernel only {n}^3 voxels 8x pitch, {n_dirs} dirs, {np.dtype(dtype).name}, {path}",
                seconds,
                n**3 * n_dirs,
                note=note + ("; auto's choice" if auto else ""),
            )
    g = leveret.RadonGeometry.uniform(n_dirs, 12288, spacing=math.sqrt(3.0) * n / 12288)
    vol = leveret.VolumeGeometry((n, n, n), 1.0)
    table = sample_table(g.directions, g.n_samples, g.spacing, vol)
    x = cp.random.standard_normal(vol.shape).astype(np.float32)
    out = cp.empty(g.projection_shape, np.float32)
    for path in ("shared", "global"):
        seconds = median_time(lambda: gpu.forward(x, table, out, path=path), reps=reps, sync=sync)
        record(
            f"forward kernel {n}^3 to {n_dirs} x 12288 samples, float32, {path}",
            seconds,
            n**3 * n_dirs,
            note="shared histogram (auto's choice)" if path == "shared" else "global atomics",
        )


def bench_cpu(problems=PROBLEMS, reps=1):
    """The same problems on the CPU (all cores).

    One warm-up call per kernel variant on a small problem (Numba's compilation
    or cache load) instead of one per row: the 256^3 / 2000 single-stage row
    takes minutes on 2 cores, and a warm-up of it would double that.
    """
    import leveret

    g, vol, p = problem(16, 50)
    g2, _, p2 = problem(16, 50, (5, 10))
    for precision in ("float32", "float64"):
        leveret.radon3d_fbp(p, g, vol, backend="cpu", precision=precision)
        leveret.radon3d_fbp(p2, g2, vol, backend="cpu", precision=precision, method="two-stage")
    for n, n_dirs, grid in problems:
        for method, gshape in (("single-stage", None), ("two-stage", grid)):
            g, vol, p = problem(n, n_dirs, gshape)
            label = f"{n}^3 from {g.n_dirs} {'uniform' if gshape is None else 'grid'} dirs, {method}"
            for precision in ("float32", "float64"):
                split: dict = {}
                seconds = median_time(
                    lambda: leveret.radon3d_fbp(
                        p, g, vol, backend="cpu", precision=precision, method=method, stats=split
                    ),
                    reps=reps,
                    warmup=0,
                )
                record(
                    f"FBP {label}, {'f32' if precision == 'float32' else 'f64'}, CPU",
                    seconds,
                    n**3 * g.n_dirs,
                    note=_split_note(split),
                )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="run the problems on the CPU (all cores)")
    parser.add_argument("--gpu", action="store_true", help="run the problems on CUDA")
    parser.add_argument("--quick", action="store_true", help="only the first problem (128^3, 208)")
    parser.add_argument(
        "--sizes", default=None, help="comma-separated volume sizes to run, e.g. 128,200 (default: all)"
    )
    parser.add_argument(
        "--kernels",
        action="store_true",
        help="only the kernel rows on CUDA: each problem's kernel and the global-memory "
        "fallback, and the unusual geometries (bench_fallbacks)",
    )
    parser.add_argument("--out", default=None, help="JSON file for the results")
    args = parser.parse_args(argv)
    if not (args.cpu or args.gpu or args.kernels):
        args.gpu = True
    problems = PROBLEMS[:1] if args.quick else PROBLEMS
    if args.sizes:
        sizes = {int(x) for x in args.sizes.split(",")}
        problems = [pr for pr in problems if pr[0] in sizes]
    meta = metadata(with_devices=args.gpu or args.kernels)
    print_header()
    if args.gpu:
        bench_gpu(problems)
    elif args.kernels:
        for n, n_dirs, _ in problems:
            bench_kernel_only(n, n_dirs)
        bench_fallbacks()
    if args.cpu:
        bench_cpu(problems)
    if args.out:
        write_results(args.out, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
