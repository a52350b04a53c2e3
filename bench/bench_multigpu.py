"""One GPU against a device set (``devices=``) on the same problems.

Problems (each timed on the current GPU, then with ``--devices``):
  fbp    parallel-beam FBP, 2048 slices of 2048^2 from 2048 angles, NumPy in
         and out (``--quick``: 256 slices)
  fdk    FDK of 1024^3 and 2048^3 from 496 views of 1248 x 960, NumPy in and
         out (``--quick``: 512^3 only)
  sirt   one SIRT iteration's A and A.T: 720 views of 512^2 from 512^3
         (structured Joseph), CuPy in and out (``--quick``: 360 views of 256^2,
         256^3)
  sirt-large  the same on 1024^3 from 1440 views of 1024^2 (one timed
         iteration after a warm one: each takes seconds)
  rates  the transfer rates the expected speed-ups are reckoned from: a host
         memory copy (one thread, and the host's cores), pinned host <-> GPU
         copies on each GPU alone and on all of ``--devices`` at once, and
         peer copies between each pair of its GPUs (direct or through host)
  dask   the same FBP job zarr -> zarr (``leveret.execution.outofcore.reconstruct_to_file``)
         in this process on ``--devices`` against a Dask cluster
         (``--scheduler local``: dask-cuda's LocalCUDACluster, one worker per
         GPU), same slabs, alternating ``--dask-reps`` times (default 3),
         medians: ``--dask-slices``
         slices (default 512) of 2048^2 from 2048 angles, uncompressed: 8 GiB
         in, 8 GiB out in ``--dir`` (a disk, or /dev/shm to leave the disk's
         write rate out) (``--quick``: 64 slices of 512^2 from 512 angles)

``--devices 0,0`` runs two workers on GPU 0 (``DeviceSet([0, 0], shared=True)``):
the same GPU does the same work, so the ideal time is the one-GPU time and
the difference is the multi-device path's overhead (threads, queue, per-worker
buffers, peer copies, the partial-volume sum). With N distinct GPUs the ideal
is the one-GPU time / N; the table prints the speed-up and the overhead
against that ideal: ``t_set / (t_one / N) - 1``. Below each device-set row
a "split" line says where the time went (the ``stats`` of fbp and fdk,
``leveret.cuda.pipeline.merge_stats``): the call's wall, the workers' busy time
out of workers x wall (the rest: waiting for the queue's last ranges and
start-up), the GPU stream times summed over workers (h2d, compute, d2h), the
host gathers and scatters (load, store) and, for FDK, back-projection,
waits for another worker's filtered chunks and slab downloads.

    PYTHONPATH=src python3 bench/bench_multigpu.py --devices all --out multigpu.json
    PYTHONPATH=src python3 bench/bench_multigpu.py --devices 0,0 --quick
    PYTHONPATH=src python3 bench/bench_multigpu.py --devices all --only dask --scheduler local
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import RESULTS, median_time, metadata, print_header, record, write_results


def parse_devices(text: str):
    from leveret.cuda.devices import DeviceSet

    if text.strip().lower() == "all":
        return "all"
    ids = [int(p) for p in text.split(",")]
    return DeviceSet(ids, shared=len(set(ids)) < len(ids))


def n_distinct(devices) -> int:
    from leveret.cuda.devices import parse

    return len(set(parse(devices).ids))


def compare(name, run_one, run_set, devices, updates, reps):
    """Time both, record both rows, return (t_one, t_set)."""
    import cupy as cp

    from leveret.cuda.pipeline import free_pinned_blocks

    sync = cp.cuda.Device().synchronize

    def release():
        # cached pinned blocks are not split for other sizes: 2048^3 FDK's would pile up
        cp.get_default_pinned_memory_pool().free_all_blocks()
        free_pinned_blocks()
        cp.get_default_memory_pool().free_all_blocks()

    t_one = median_time(run_one, reps=reps, sync=sync)
    record(name, t_one, updates, peer="1 GPU")
    release()
    t_set = median_time(run_set, reps=reps, sync=sync)
    release()
    n = n_distinct(devices)
    overhead = t_set / (t_one / n) - 1
    record(
        name,
        t_set,
        updates,
        peer=f"{n} GPU" + ("" if n == 1 else "s"),
        note=f"devices={devices!r}: speed-up {t_one / t_set:.2f}x, overhead {overhead * 100:+.1f} % against t_one/{n}",
    )
    RESULTS[-1].update(speedup=t_one / t_set, overhead=overhead, gpus=n)
    return t_one, t_set


def split_line(stats: dict, workers: int) -> str:
    """Where a device-set call's time went, from its ``stats``."""
    if not stats:
        return "split: (no stats: CuPy in and out)"
    wall = stats.get("wall", 0.0)
    busy = stats.get("busy", 0.0)
    parts = [
        f"wall {wall:.3f} s",
        f"workers busy {busy:.3f} s of {workers} x wall (waiting {max(0.0, workers * wall - busy):.3f} s)",
    ]
    gpu = [f"{k} {stats[k]:.3f}" for k in ("h2d", "compute", "d2h") if k in stats]
    host = [f"{k} {stats[k]:.3f}" for k in ("setup", "load", "store") if k in stats]
    fdk = [f"{k} {stats[k]:.3f}" for k in ("backproject", "wait", "download") if k in stats]
    if gpu:
        parts.append("GPU streams (summed) " + ", ".join(gpu))
    if host:
        parts.append("host " + ", ".join(host))
    if fdk:
        parts.append("slabs " + ", ".join(fdk))
    if "chunks" in stats:
        parts.append(f"{stats['chunks']} chunks")
    return "  split: " + "; ".join(parts)


def plan_line(geometry, volume, devices) -> str:
    """Which rows each GPU of an FDK call filters (``leveret.algorithms.fdk.plan_devices``)."""
    from leveret.algorithms.fdk import plan_devices
    from leveret.algorithms.fdk_weights import rows_seen
    from leveret.cuda.devices import parse

    plan = plan_devices(geometry, volume, parse(devices), chunk_views=geometry.n_views // 16)
    if plan is None:
        return "  plan: the filtered views do not fit a GPU: each slab filters its own rows"
    whole = rows_seen(geometry, volume)
    parts = [f"GPU {p.device}: z {p.z}, rows {p.rows}, {len(p.slabs)} slab(s) for {p.workers} worker(s)" for p in plan]
    total = sum(p.filtered_rows for p in plan) / (whole[1] - whole[0])
    return "  plan: " + "; ".join(parts) + f"; rows filtered per view {total:.2f} x the volume's"


def workers_of(devices) -> int:
    from leveret.cuda.devices import parse

    return len(parse(devices).ids)


def bench_fbp(devices, quick):
    import leveret

    n, n_angles = 2048, 2048
    n_slices = 256 if quick else 2048
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, n_angles, endpoint=False), n, n_rows=n_slices)
    proj = np.empty(g.projection_shape, np.float32)  # (angles, rows, cols)
    proj[...] = np.random.default_rng(0).random((1, 1, n), dtype=np.float32)  # values do not matter; pages do
    out = np.empty((n_slices, n, n), np.float32)
    out[...] = 0  # touched once, as a reused output is
    stats: dict = {}
    compare(
        f"FBP {n_slices} x {n}^2 from {n_angles} angles, NumPy in/out",
        lambda: leveret.fbp(proj, g, out=out),
        lambda: leveret.fbp(proj, g, out=out, devices=devices, stats=stats),
        devices,
        n * n * n_slices * n_angles,
        reps=2,
    )
    RESULTS[-1]["stats"] = dict(stats)
    print(split_line(stats, workers_of(devices)))


def bench_fdk(devices, quick):
    import leveret
    from leveret.geometry import ConeGeometry, VolumeGeometry

    n_views, rows, cols = 496, 960, 1248
    g = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, n_views, endpoint=False),
        sid=750.0,
        sdd=1200.0,
        n_rows=rows,
        n_cols=cols,
        pixel_size=0.308,
    )
    proj = np.empty(g.projection_shape, np.float32)
    proj[...] = np.random.default_rng(1).random((1, 1, cols), dtype=np.float32)
    for n in (512,) if quick else (1024, 2048):
        volume = VolumeGeometry((n, n, n), voxel_size=256.0 / n)
        stats: dict = {}
        compare(
            f"FDK {n}^3 from {n_views} x {cols}x{rows}, NumPy in/out",
            lambda: leveret.fdk(proj, g, volume),
            lambda: leveret.fdk(proj, g, volume, devices=devices, stats=stats),
            devices,
            n**3 * n_views,
            reps=2,
        )
        RESULTS[-1]["stats"] = dict(stats)
        print(split_line(stats, workers_of(devices)))
        print(plan_line(g, volume, devices))


def bench_sirt(devices, quick, n=None, n_views=None, reps=3):
    import cupy as cp
    from leveret.geometry import ConeGeometry, VolumeGeometry
    from leveret.operators import Projector

    if n is None:
        n, n_views = (256, 360) if quick else (512, 720)
    g = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, n_views, endpoint=False),
        sid=1000.0 * n / 512,
        sdd=1500.0 * n / 512,
        n_rows=n,
        n_cols=n,
        pixel_size=2.0,
    )
    volume = VolumeGeometry((n, n, n), voxel_size=1.0)
    one = Projector(g, volume, model="joseph", backend="cuda")
    several = Projector(g, volume, model="joseph", backend="cuda", devices=devices)
    x = cp.random.random(volume.shape, dtype=cp.float32)
    y = cp.random.random(g.projection_shape, dtype=cp.float32)
    compare(
        f"SIRT iteration (A + A.T), {n_views} x {n}^2 <-> {n}^3, Joseph, CuPy",
        lambda: (one(x), one.T(y)),
        lambda: (several(x), several.T(y)),
        devices,
        2 * n**3 * n_views,
        reps=reps,
    )


def bench_sirt_large(devices, quick):
    if quick:
        return bench_sirt(devices, quick)
    bench_sirt(devices, quick, n=1024, n_views=1440, reps=1)


def _seconds(fn, sync, reps=3):
    """Best of ``reps`` after one warm call: transfer rates vary little, and
    the best is the rate the hardware gives."""
    fn()
    sync()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t)
    return best


def bench_rates(devices, quick):
    """Host memory, pinned host <-> GPU and peer copy rates, in GB/s (1e9)."""
    import concurrent.futures
    import os
    import cupy as cp
    from leveret.cuda.devices import parse

    ids = sorted(set(parse(devices).ids))
    nbytes = (256 if quick else 2048) * 2**20
    src = np.ones(nbytes // 4, np.float32)
    dst = np.zeros_like(src)
    cores = os.cpu_count() or 1
    cuts = np.linspace(0, src.size, cores + 1).astype(int)
    parts = [slice(a, b) for a, b in zip(cuts[:-1], cuts[1:])]
    with concurrent.futures.ThreadPoolExecutor(cores) as pool:

        def copy_all():
            list(pool.map(lambda part: np.copyto(dst[part], src[part]), parts))

        rows = [
            ("host memory copy, one thread", _seconds(lambda: np.copyto(dst, src), lambda: None)),
            (f"host memory copy, {cores} threads", _seconds(copy_all, lambda: None)),
        ]
    for label, t in rows:
        record(
            f"rates: {label} ({nbytes / 2**30:.0f} GiB)",
            t,
            0,
            peer="host",
            note=f"{nbytes / t / 1e9:.1f} GB/s copied (read + write {2 * nbytes / t / 1e9:.1f} GB/s)",
        )
        RESULTS[-1]["GB_per_s"] = nbytes / t / 1e9

    host, dev, streams = {}, {}, {}
    for i in ids:
        with cp.cuda.Device(i):
            host[i] = cp.cuda.alloc_pinned_memory(nbytes)
            dev[i] = cp.cuda.alloc(nbytes)
            streams[i] = cp.cuda.Stream(non_blocking=True)

    def sync_all():
        for i in ids:
            streams[i].synchronize()

    def copies(which, direction):
        def run():
            for i in which:
                with cp.cuda.Device(i):
                    if direction == "h2d":
                        dev[i].copy_from_host_async(host[i].ptr, nbytes, streams[i])
                    else:
                        dev[i].copy_to_host_async(host[i].ptr, nbytes, streams[i])

        return run

    for direction in ("h2d", "d2h"):
        for i in ids:
            t = _seconds(copies([i], direction), sync_all)
            record(
                f"rates: pinned {direction}, GPU {i} alone", t, 0, peer=f"GPU {i}", note=f"{nbytes / t / 1e9:.1f} GB/s"
            )
            RESULTS[-1]["GB_per_s"] = nbytes / t / 1e9
        if len(ids) > 1:
            t = _seconds(copies(ids, direction), sync_all)
            record(
                f"rates: pinned {direction}, GPUs {ids} at once",
                t,
                0,
                peer=f"{len(ids)} GPUs",
                note=f"{len(ids) * nbytes / t / 1e9:.1f} GB/s in all, {nbytes / t / 1e9:.1f} per GPU",
            )
            RESULTS[-1]["GB_per_s"] = len(ids) * nbytes / t / 1e9
    for i in ids:
        for j in ids:
            if i == j:
                continue
            direct = bool(cp.cuda.runtime.deviceCanAccessPeer(j, i))
            if direct:
                with cp.cuda.Device(j):
                    try:
                        cp.cuda.runtime.deviceEnablePeerAccess(i)
                    except cp.cuda.runtime.CUDARuntimeError:
                        pass  # already enabled by this process
            with cp.cuda.Device(j):
                t = _seconds(
                    lambda: cp.cuda.runtime.memcpyPeerAsync(dev[j].ptr, j, dev[i].ptr, i, nbytes, streams[j].ptr),
                    sync_all,
                )
            record(
                f"rates: peer copy GPU {i} -> GPU {j}",
                t,
                0,
                peer="peer",
                note=f"{nbytes / t / 1e9:.1f} GB/s ({'peer access' if direct else 'no peer access: staged'})",
            )
            RESULTS[-1].update(GB_per_s=nbytes / t / 1e9, peer_access=direct)


def _zarr_stack(path: Path, n_angles: int, n_slices: int, n: int) -> None:
    """(angles, rows, columns) float32 in an uncompressed zarr store, chunked so
    that a slab reads only its rows; one random block tiled (the values do
    not change the timing, and a full random fill would take minutes)."""
    import zarr

    z = zarr.create_array(
        store=str(path),
        shape=(n_angles, n_slices, n),
        dtype=np.float32,
        chunks=(min(n_angles, 256), min(n_slices, 16), n),
        compressors=None,
    )
    block = np.random.default_rng(2).standard_normal((min(n_angles, 256), min(n_slices, 16), n), dtype=np.float32)
    for a in range(0, n_angles, block.shape[0]):
        for r in range(0, n_slices, block.shape[1]):
            z[a : a + block.shape[0], r : r + block.shape[1]] = block[: n_angles - a, : n_slices - r]


def bench_dask(devices, quick, scheduler, folder: Path, n_slices: int, reps: int = 3, backend: str = "cuda"):
    """One zarr -> zarr FBP job in this process (``devices``) and on a Dask
    cluster, the same slabs on both: each side first runs the whole job once
    (kernels compiled and tuned for its slab shapes, workers started, files
    in the page cache), then the two alternate ``reps`` times; the medians
    are compared. The I/O is the same on both sides: on a disk the job's
    time follows the disk's flushed write rate, which varies from run to run,
    so a folder in memory (``--dir /dev/shm/...``) isolates Dask's own cost."""
    import leveret
    from leveret.execution.executors import connect
    from leveret.execution.outofcore import reconstruct_to_file

    n = 512 if quick else 2048
    n_slices = 64 if quick else n_slices
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, n, endpoint=False), n, n_rows=n_slices)
    t0 = time.perf_counter()
    _zarr_stack(folder / "proj.zarr", *g.projection_shape)
    gib = n * n_slices * n * 4 / 2**30
    print(
        f"dask: input {g.projection_shape} written in {time.perf_counter() - t0:.1f} s "
        f"({gib:.1f} GiB in, {gib:.1f} GiB out, uncompressed zarr in {folder})",
        flush=True,
    )
    out = folder / "rec.zarr"
    plan: dict = {}

    def once(client, slabs):
        if out.exists():
            shutil.rmtree(out)
        where = {"client": client} if client is not None else ({"devices": devices} if backend == "cuda" else {})
        t = time.perf_counter()
        res = reconstruct_to_file(folder / "proj.zarr", g, out, backend=backend, slab_slices=slabs, **where)
        plan.update(slabs=res.plan.n_slabs, slices=res.slab_slices)
        if client is None:
            plan["busy"] = res.busy
        return time.perf_counter() - t

    updates = g.n_angles * n_slices * n * n
    label = f"zarr -> zarr {g.projection_shape} -> ({n_slices}, {n}, {n})"
    with connect(scheduler, backend=backend) as client:
        n_workers = len(client.nthreads())
        once(client, None)  # the cluster's own plan: the smaller slabs of the two
        slices = plan["slices"]
        once(None, slices)
        times: dict = {"process": [], "dask": []}
        for _ in range(reps):
            times["process"].append(once(None, slices))
            times["dask"].append(once(client, slices))
    t_in, t_dask = (statistics.median(times[k]) for k in ("process", "dask"))
    spread = {k: f"{min(v):.2f}-{max(v):.2f} s" for k, v in times.items()}
    record(
        label,
        t_in,
        updates,
        peer="process",
        note=f"devices={devices!r}: {plan['slabs']} slabs of {slices}; runs {spread['process']}; busy "
        + ", ".join(f"{k} {v:.1f} s" for k, v in plan["busy"].items()),
    )
    RESULTS[-1].update(runs=times["process"], busy=plan["busy"])
    record(
        label,
        t_dask,
        updates,
        peer="dask",
        note=f"--scheduler {scheduler}: {n_workers} worker(s), same slabs; runs {spread['dask']}; "
        f"{t_dask / t_in:.2f} x in-process ({(t_dask / t_in - 1) * 100:+.1f} %)",
    )
    RESULTS[-1].update(overhead=t_dask / t_in - 1, workers=n_workers, runs=times["dask"])
    shutil.rmtree(out, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", default="all", help="'all' or GPU ids, e.g. 0,1 or 0,0 (default: all)")
    parser.add_argument("--only", default="fbp,fdk,sirt", help="problems to run, comma-separated")
    parser.add_argument("--quick", action="store_true", help="smaller problems")
    parser.add_argument("--out", default=None, help="JSON file for the results")
    parser.add_argument(
        "--scheduler",
        default="local",
        help="dask: 'local' (one worker per GPU) or a scheduler's address (default: local)",
    )
    parser.add_argument(
        "--dask-slices",
        type=int,
        default=512,
        help="dask: slices of 2048^2 from 2048 angles (default 512: 8 GiB in, 8 GiB out)",
    )
    parser.add_argument(
        "--dask-reps",
        type=int,
        default=3,
        help="dask: how many times the two sides alternate (default 3: medians of three)",
    )
    parser.add_argument(
        "--dir", default=None, help="dask: scratch folder for the zarr stores (default: a temporary one)"
    )
    args = parser.parse_args(argv)
    devices = parse_devices(args.devices)
    meta = metadata(with_devices=True)
    meta["devices_argument"] = args.devices
    print_header()
    problems = {
        "fbp": bench_fbp,
        "fdk": bench_fdk,
        "sirt": bench_sirt,
        "sirt-large": bench_sirt_large,
        "rates": bench_rates,
        "dask": None,
    }
    names = args.only.split(",")
    for name in names:
        if name not in problems:
            parser.error(f"--only: unknown problem {name!r}; expected {', '.join(problems)}")
    for name in names:
        if name == "dask":
            if args.dir is not None:
                Path(args.dir).mkdir(parents=True, exist_ok=True)  # a scratch folder named but not there yet
            with tempfile.TemporaryDirectory(dir=args.dir) as folder:
                bench_dask(devices, args.quick, args.scheduler, Path(folder), args.dask_slices, args.dask_reps)
        else:
            problems[name](devices, args.quick)
    if args.out:
        write_results(args.out, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
