"""When each slab of a disk-to-disk run is read, built, written and flushed (and
how long each piece's writeback start waited for the disk's queue), and
what the run waits for after its last write: the timeline behind a row of
``bench/bench_e2e.py``. It wraps the pipeline's and the writer's own methods
to stamp each call's start and end, runs ``reconstruct_to_file`` on the
benchmark's synthetic scan, prints one JSON line of milestones per format and
writes every stamp to ``--out``.

    python3 tools/diagnostics/pipeline_timeline.py --size 2048 --dir /path/on/the/disk --formats h5-none,tiff
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import bench_e2e  # noqa: E402

import leveret  # noqa: E402
from leveret.execution import outofcore, pipeline  # noqa: E402
from leveret.execution.outofcore import reconstruct_to_file  # noqa: E402
from leveret.io import read_scan  # noqa: E402
from leveret.io import atomic, slabs  # noqa: E402

STAMPS: list[tuple[float, str, str]] = []  # (seconds since the run's start, thread, "name<" or "name>")
START = [0.0]


def stamp(what: str) -> None:
    STAMPS.append((time.perf_counter() - START[0], threading.current_thread().name, what))


def stamped(owner, attribute: str, name: str) -> None:
    """Replace ``owner.attribute`` by a function stamping ``name<`` and ``name>`` around it."""
    original = getattr(owner, attribute)

    def call(*args, **kwargs):
        stamp(name + "<")
        try:
            return original(*args, **kwargs)
        finally:
            stamp(name + ">")

    setattr(owner, attribute, call)


def intervals(name: str) -> list[tuple[float, float]]:
    """The (start, end) of every call of ``name``, each matched on its own thread."""
    open_, out = {}, []
    for t, thread, what in STAMPS:
        if what == name + "<":
            open_[thread] = t
        elif what == name + ">" and thread in open_:
            out.append((open_.pop(thread), t))
    return sorted(out)


def milestones() -> dict:
    """The run's milestones and each call's busy seconds, from the stamps."""
    row = {}
    for name in (
        "fingerprint",
        "open",
        "sample",
        "read",
        "build",
        "write",
        "flush",
        "writeback",
        "manifest",
        "synced",
        "pipeline",
        "finish",
    ):
        calls = intervals(name)
        if calls:
            row[name] = {
                "calls": len(calls),
                "busy": round(sum(b - a for a, b in calls), 2),
                "first": round(calls[0][0], 2),
                "last_end": round(max(b for _, b in calls), 2),
            }
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=256, help="views = rows = columns (2048: bench_e2e's target)")
    p.add_argument("--views", type=int, default=None, help="projections (default: --size)")
    p.add_argument("--rows", type=int, default=None, help="detector rows = slices (default: --size)")
    p.add_argument("--cols", type=int, default=None, help="detector columns = slice width (default: --size)")
    p.add_argument("--dir", default="e2e", help="folder of the input and the outputs (on the disk to measure)")
    p.add_argument("--formats", default="h5-none,h5,tiff", help=f"comma-separated, of: {', '.join(bench_e2e.FORMATS)}")
    p.add_argument("--backend", default="auto", choices=("auto", "cuda", "cpu"))
    p.add_argument("--no-sync", action="store_true", help="sync=False: outputs left in the page cache")
    p.add_argument("--out", default="pipeline_timeline.json", help="every stamp of every run (JSON)")
    args = p.parse_args(argv)

    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    views, rows, cols = (args.size if v is None else v for v in (args.views, args.rows, args.cols))
    scan_path = folder / f"bench_e2e_{views}x{rows}x{cols}_frames.h5"
    if not scan_path.exists():
        bench_e2e.write_scan(scan_path, views, rows, cols, 10, 5, "frames", os.cpu_count() or 1)
    scan = read_scan(scan_path)
    geometry = leveret.ParallelGeometry(scan.angles, cols, n_rows=rows)
    scan_input = {"projections": scan.projections, "preprocess": dict(flats=scan.flats, darks=scan.darks)}
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    # the kernels compiled, not in this run's time
    bench_e2e.warm_pipeline(scan_input, geometry, folder, args.backend, bench_e2e.warm_options(formats, {}))

    stamped(pipeline.Pipeline, "_read", "read")
    stamped(pipeline._GpuStage, "build", "build")
    stamped(pipeline._CpuStage, "build", "build")
    stamped(outofcore, "_fingerprint", "fingerprint")  # the set-up before the pipeline starts
    stamped(slabs.SlabWriter, "__init__", "open")
    stamped(slabs.SlabWriter, "write", "write")
    stamped(slabs.SlabWriter, "_save_manifest", "manifest")
    stamped(slabs.SlabWriter, "synced", "synced")
    stamped(slabs.SlabWriter, "finish", "finish")
    stamped(slabs, "_fsync_path", "flush")
    # each piece's writeback start (on the pool; a compressed HDF5 file's, on its follower thread):
    # long calls mean the disk's queue is full (the disk bounds)
    stamped(slabs, "start_writeback", "writeback")
    stamped(atomic, "start_writeback", "writeback")
    stamped(pipeline, "sample_range", "sample")  # an integer output's range, before the pipeline
    stamped(outofcore, "_run_pipeline", "pipeline")  # its end: the stages have stopped, the finish follows

    runs = []
    for fmt in formats:
        name, options = bench_e2e.FORMATS[fmt]
        out = folder / name
        if out.exists():
            bench_e2e._remove(out)
        os.sync()  # each run writes back only its own bytes
        STAMPS.clear()
        START[0] = time.perf_counter()
        res = reconstruct_to_file(
            scan.projections,
            geometry,
            out,
            backend=args.backend,
            sync=not args.no_sync,
            **scan_input["preprocess"],
            **options,
        )
        row = {"format": fmt, "sync": not args.no_sync, "wall": round(time.perf_counter() - START[0], 2)}
        row.update(milestones())
        print(json.dumps(row), flush=True)
        runs.append({**row, "stamps": list(STAMPS)})
        bench_e2e._remove(res.path)
    Path(args.out).write_text(json.dumps(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
