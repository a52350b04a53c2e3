"""Out-of-core reconstruction against in-memory FBP: what writing slab by slab costs.

For each size N (N angles x N/4 rows x N columns, float32 line integrals in a
.npy file read lazily), times

- ``leveret.fbp`` in memory (projections already in RAM, volume returned),
- ``leveret.outofcore.reconstruct_to_file`` into .npy, HDF5 (gzip), zarr
  (zstd) and a TIFF folder, under a host-memory cap of a quarter of the
  volume (so the job runs in several slabs), reading the projections from
  the .npy file,

and prints a table (median of --reps runs; GU/s = voxel updates per second /
1e9; the planned host peak and the number of slabs) and writes JSON. The
output file is deleted between runs; the page cache is not dropped, so the
input is read from memory after the first run (a warm-cache measurement).

    PYTHONPATH=src python3 bench/bench_outofcore.py --backend cuda --sizes 512 1024 --out bench_outofcore.json

No ASTRA rows: ASTRA has no out-of-core reconstruction.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from common import RESULTS, median_time, metadata, print_header, record, write_results

import leveret
from leveret.outofcore import host_bytes, reconstruct_to_file

FORMATS = ("rec.npy", "rec.h5", "rec.zarr", "rec/")


def run(size: int, backend: str, reps: int, folder: Path) -> None:
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, size, endpoint=False), size, n_rows=max(4, size // 4))
    rng = np.random.default_rng(0)
    proj = rng.standard_normal(g.projection_shape).astype(np.float32)   # values do not change the timing
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
        record(f"out-of-core -> {name:9s} {vol.shape}", t, updates,
               note=f"{backend}, {info['slabs']} slabs, planned host {info['host'] / 2**20:.0f} MiB, "
                    f"cap {cap / 2**20:.0f} MiB")
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--backend", default="auto", choices=("auto", "cuda", "cpu"))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--out", default=None, help="JSON results")
    args = parser.parse_args()
    from leveret.backends import resolve
    backend = resolve(args.backend)
    meta = metadata(with_devices=True)
    print_header()
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        for n in args.sizes:
            run(n, backend, args.reps, Path(d))
    if args.out:
        write_results(args.out, {**meta, "benchmark": "outofcore", "backend": backend})
    print(f"{len(RESULTS)} rows")


if __name__ == "__main__":
    main()
