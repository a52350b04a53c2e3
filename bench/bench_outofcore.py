"""Out-of-core reconstruction against in-memory FBP: what writing slab by slab costs.

For each size N (N angles x N/4 rows x N columns, float32 line integrals in a
.npy file read lazily), times

- ``leveret.fbp`` in memory (projections already in RAM, volume returned),
- ``leveret.execution.outofcore.reconstruct_to_file`` into .npy, HDF5 (gzip), zarr
  (zstd) and a TIFF folder, under a host-memory cap of a quarter of the
  volume (so the job runs in several slabs), reading the projections from
  the .npy file,

and prints a table (median of --reps runs; GU/s = voxel updates per second /
1e9; the planned host peak and the number of slabs) and writes JSON. The
output file is deleted between runs; the page cache is not dropped, so the
input is read from memory after the first run (a warm-cache measurement).

    PYTHONPATH=src python3 bench/bench_outofcore.py --backend cuda --sizes 512 1024 --out bench_outofcore.json

``--zarr`` measures what running the slabs on a Dask cluster costs instead:
a cube (N angles x N rows x N columns, uncompressed zarr, random values)
reconstructed into an N^3 zarr volume in this process, then on the cluster
``--scheduler`` names (``local``: one worker per GPU with dask-cuda, else CPU
worker processes; or a scheduler's address), with the same slab size; the
note gives the Dask time over the in-process time. The real problem is
N = 2048 (32 GiB in, 32 GiB out); ``--quick`` runs N = 128.

    PYTHONPATH=src python3 bench/bench_outofcore.py --zarr --scheduler local --sizes 2048 --reps 1 --out dask.json

No ASTRA rows: ASTRA has no out-of-core reconstruction.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np

from common import RESULTS, median_time, metadata, print_header, record, write_results

import leveret
from leveret.execution.outofcore import host_bytes, reconstruct_to_file

FORMATS = ("rec.npy", "rec.h5", "rec.zarr", "rec/")


def run(size: int, backend: str, reps: int, folder: Path) -> None:
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, size, endpoint=False), size, n_rows=max(4, size // 4))
    rng = np.random.default_rng(0)
    proj = rng.standard_normal(g.projection_shape).astype(np.float32)  # values do not change the timing
    np.save(folder / "proj.npy", proj)
    vol = g.default_volume()
    updates = vol.size * g.n_angles
    # A quarter of the volume (several slabs), but room for two slices on small sizes.
    cap = max(vol.size * 4 // 4, 2 * host_bytes(g, vol, 1))
    sync = None
    if backend == "cuda":
        import cupy

        sync = cupy.cuda.Device().synchronize

    def median(fn):
        return median_time(fn, reps=reps, warmup=1, sync=sync)

    t = median(lambda: leveret.fbp(proj, g, backend=backend))
    record(f"fbp in memory {g.projection_shape} -> {vol.shape}", t, updates, note=backend)
    del proj
    for name in FORMATS:
        out = folder / name
        info = {}

        def once():
            if out.exists():
                shutil.rmtree(out) if out.is_dir() else out.unlink()
            res = reconstruct_to_file(folder / "proj.npy", g, out, backend=backend, host_memory=cap)
            info.update(slabs=res.plan.n_slabs, host=res.plan.host_bytes)

        t = median(once)
        record(
            f"out-of-core -> {name:9s} {vol.shape}",
            t,
            updates,
            note=f"{backend}, {info['slabs']} slabs, planned host {info['host'] / 2**20:.0f} MiB, "
            f"cap {cap / 2**20:.0f} MiB",
        )
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()


def _zarr_input(path: Path, size: int) -> None:
    """N angles x N rows x N columns of float32 in an uncompressed zarr store,
    chunked so that a slab reads only its rows; written block by block."""
    import zarr

    rows = max(1, min(size, 16))
    z = zarr.create_array(
        store=str(path),
        shape=(size, size, size),
        dtype=np.float32,
        chunks=(min(size, 256), rows, size),
        compressors=None,
    )
    rng = np.random.default_rng(0)
    block = max(rows, (256 * 2**20 // (4 * size * size)) // rows * rows)  # about 256 MiB at a time
    for r in range(0, size, block):
        z[:, r : r + block, :] = rng.standard_normal((size, min(block, size - r), size), dtype=np.float32)


def run_zarr(size: int, backend: str, reps: int, folder: Path, client, slab_slices: int | None) -> None:
    """In-process and Dask runs of the same zarr-to-zarr job."""
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, size, endpoint=False), size, n_rows=size)
    vol = g.default_volume()
    updates = vol.size * g.n_angles
    source = folder / "proj.zarr"
    _zarr_input(source, size)
    out = folder / "rec.zarr"
    times = {}
    for name, c in (("in-process", None), ("dask", client)):
        info = {}

        def once():
            if out.exists():
                shutil.rmtree(out)
            res = reconstruct_to_file(source, g, out, backend=backend, slab_slices=slab_slices, client=c)
            info.update(slabs=res.plan.n_slabs, slices=res.plan.slab_slices)

        times[name] = t = median_time(once, reps=reps, warmup=1 if size <= 512 else 0)
        if name == "in-process" and slab_slices is None:
            slab_slices = info["slices"]  # the same slabs on the cluster
        workers = "" if c is None else f", {len(c.nthreads())} worker(s)"
        ratio = "" if c is None else f", {t / times['in-process']:.2f} x in-process"
        record(
            f"zarr -> zarr {name:10s} {g.projection_shape} -> {vol.shape}",
            t,
            updates,
            note=f"{backend}, {info['slabs']} slabs of {info['slices']}{workers}{ratio}",
        )
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(source, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--backend", default="auto", choices=("auto", "cuda", "cpu"))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--out", default=None, help="JSON results")
    parser.add_argument(
        "--zarr", action="store_true", help="zarr to zarr, in this process and on the --scheduler cluster"
    )
    parser.add_argument(
        "--scheduler", default="local", help="with --zarr: 'local' or a Dask scheduler's address (tcp://HOST:8786)"
    )
    parser.add_argument(
        "--slab-slices", type=int, default=None, help="with --zarr: slices per slab (default: the in-process plan's)"
    )
    parser.add_argument("--quick", action="store_true", help="a small size only (128)")
    args = parser.parse_args()
    from leveret.backends import resolve

    backend = resolve(args.backend)
    sizes = [128] if args.quick else args.sizes
    meta = metadata(with_devices=True)
    print_header()
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        if args.zarr:
            from leveret.execution.executors import connect

            with connect(args.scheduler, backend=backend) as client:
                print(f"dask: {len(client.nthreads())} worker(s), dashboard {client.dashboard_link}")
                for n in sizes:
                    run_zarr(n, backend, args.reps, Path(d), client, args.slab_slices)
        else:
            for n in sizes:
                run(n, backend, args.reps, Path(d))
    if args.out:
        write_results(
            args.out,
            {
                **meta,
                "benchmark": "outofcore-dask" if args.zarr else "outofcore",
                "backend": backend,
                "scheduler": args.scheduler if args.zarr else None,
            },
        )
    print(f"{len(RESULTS)} rows")


if __name__ == "__main__":
    main()
