"""Scan file to volume file: ``leveret recon``'s disk-to-disk path, stage by stage, against its floors.

Writes a DXchange HDF5 scan once (uint16 counts of a phantom with noise,
flats, darks and angles; or also a folder of TIFFs), then reconstructs it
disk to disk (what ``leveret recon scan.h5 OUT`` runs) into each output
format and compression, and prints one row per run: the wall time, each
stage's busy seconds and rate (read, preprocess, upload, reconstruct,
download, compress, write into the page cache, sync: the flush to disk), the
end-to-end rate in GU/s, and the floor: the slowest stage's time at this
host's ceilings for its bytes (measured here unless ``--no-probe``: page-cache
reads and writes, the disk's flush, Blosc, on this host's cores; the
reconstruction at the kernel's measured rate), with the run's ratio to it.
A virtual disk's flush rate drifts within one call, and a few GB fit in
caches that 30 GB do not: ``--probe-each`` writes and flushes each case's
stored bytes, in as many files, alone right after it (as the writer does:
threads, each piece's writeback started at once), and holds the case to
that time; with ``--repeats`` each run to its own, the run of median ratio
kept. Each run and probe is also watched from below, every 20 ms: the
kernel's counters of the disk under ``--dir`` (bytes written, requests in
flight), the page cache's dirty and writeback bytes, and the CPU time a
hypervisor took (steal): the disk's rate and depth during the run beside
the probe's (the rate follows the depth: a run that keeps the disk's queue
shallow gets less from it) and whether the host slowed; ``--plot`` draws
the bytes the disk wrote over each run's seconds beside its probe's rate.
Beside them: ``leveret.fbp`` of the same problem in memory (float32 line
integrals in, NumPy volume out) and the kernel alone on the GPU.

    # the target (2048 projections of 2048^2 -> 2048^3; 17 GB in, 34 GB out, the page cache of --dir)
    PYTHONPATH=src python3 bench/bench_e2e.py --size 2048 --dir /tmp --probe-each
    # a format five times, each run held to the disk's rate beside it and during it, drawn
    PYTHONPATH=src python3 bench/bench_e2e.py --size 2048 --formats h5-uint16 --probe-each --repeats 5 --plot disk.png
    # a smaller scan: 1500 projections of 512 x 2048 -> 512 x 2048^2
    PYTHONPATH=src python3 bench/bench_e2e.py --views 1500 --rows 512 --cols 2048
    # a subset, two GPUs, a TIFF folder as the input
    PYTHONPATH=src python3 bench/bench_e2e.py --size 2048 --formats h5-none,h5 --gpus all
    PYTHONPATH=src python3 bench/bench_e2e.py --size 512 --input tiff --formats npy
    # the CPU (small): the disk-to-disk time over the in-memory reconstruction
    PYTHONPATH=src python3 bench/bench_e2e.py --size 256 --backend cpu --formats npy,h5

The input is kept in ``--dir`` and reused by later runs of the same size
(``--fresh`` writes it again); each output is deleted after its run (disk
room: 64 GiB holds the 2048^3 input and one output). Before the runs a
volume's bytes are written and deleted once (``--no-warm`` skips it: a virtual
machine's memory grows on first use, which the first run would pay alone), and
each run starts with nothing dirty in the page cache. Runs with an older
leveret work too (for a "before" row): options its ``reconstruct_to_file``
does not take are left out, and its busy times stand in for the split.

No ASTRA rows: ASTRA has no disk-to-disk path.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import metadata  # noqa: E402

#: The formats a run may ask for: (output name, reconstruct_to_file keywords).
FORMATS = {
    "npy": ("rec.npy", {}),
    "bigtiff": ("rec.tif", {}),
    "h5-none": ("rec.h5", {"compression": None}),
    "h5": ("rec.h5", {}),  # the default: Blosc lz4
    "h5-zstd": ("rec.h5", {"compression": "zstd"}),
    "h5-gzip": ("rec.h5", {"compression": "gzip"}),
    "zarr": ("rec.zarr", {}),  # Blosc lz4
    "zarr-zstd": ("rec.zarr", {"compression": "zstd"}),
    "tiff": ("rec/", {}),
    "h5-float16": ("rec.h5", {"output_dtype": "float16"}),
    "h5-uint16": ("rec.h5", {"output_dtype": "uint16"}),
    "h5-none-uint16": ("rec.h5", {"compression": None, "output_dtype": "uint16"}),
    "h5-uint8": ("rec.h5", {"output_dtype": "uint8"}),
    "npy-uint16": ("rec.npy", {"output_dtype": "uint16"}),
}
DEFAULT_FORMATS = "npy,h5-none,h5,zarr,tiff,h5-zstd,h5-gzip,h5-uint16,h5-float16"

#: The pipeline's stages, the table's columns (leveret.execution.pipeline.STAGES).
STAGES = ("read", "preprocess", "upload", "reconstruct", "download", "compress", "write", "sync")
#: The host's ceilings (CEILINGS.md, "The host around the GPU": the one-H200 machine, 16 threads),
#: used as floors with --no-probe (otherwise this host's are measured): bytes per second.
CEILINGS = {"read": 25e9, "write": 4.3e9, "upload": 54e9, "download": 55e9, "lz4": 9.7e9, "zstd": 4.0e9, "gzip": 0.6e9}
#: The exact parallel-beam kernel on an H200 (CEILINGS.md): voxel updates per second.
KERNEL_GUPS = 3200e9
#: Blosc's ratio on reconstruction-like float32 (CEILINGS.md), for the write floor before a run has
#: measured its own.
BLOSC_RATIO = 1.33
#: Quantities of the synthetic scan.
WHITE, DARK = 20000.0, 100.0


# -- the input -------------------------------------------------------------------------------


def phantom_rows(angles: np.ndarray, cols: int, rows: int):
    """A fast phantom: per angle, chord lengths through a few disks (pixels of
    the detector), times a smooth profile along the rows (a stack of
    cylinders of varying attenuation): line integrals ``p(angle, row, col)``
    as ``chords[angle][None, :] * profile[:, None]``, in [0, 3]."""
    s = np.arange(cols) - (cols - 1) / 2
    disks = [
        (0.0, 0.0, 0.42 * cols, 1.0),
        (0.12 * cols, 0.05 * cols, 0.12 * cols, 1.5),
        (-0.15 * cols, -0.1 * cols, 0.08 * cols, -0.6),
        (0.05 * cols, -0.2 * cols, 0.05 * cols, 2.0),
    ]
    chords = np.zeros((angles.size, cols), np.float32)
    for cx, cy, r, mu in disks:
        centre = cx * np.cos(angles) + cy * np.sin(angles)  # the disk's centre's projection
        d = s[None, :] - centre[:, None]
        chords += (mu * 2 * np.sqrt(np.clip(r * r - d * d, 0, None)) / cols * 1.5).astype(np.float32)
    z = np.linspace(-1, 1, rows, dtype=np.float32)
    profile = (0.8 + 0.2 * np.cos(3 * z)) * (np.abs(z) < 0.9)
    return chords, profile.astype(np.float32)


def write_scan(
    path: Path, views: int, rows: int, cols: int, n_flats: int, n_darks: int, layout: str, threads: int
) -> None:
    """The DXchange scan: /exchange/data (uint16 counts), data_white, data_dark, theta (degrees)."""
    import h5py

    from leveret.io import atomic
    from leveret.io.hdf5 import contiguous_offset, create_volume

    angles_deg = np.linspace(0.0, 180.0, views, endpoint=False)
    chords, profile = phantom_rows(np.radians(angles_deg), cols, rows)
    rng = np.random.default_rng(0)
    noise = [(1 + 0.01 * rng.standard_normal((rows, cols))).astype(np.float32) for _ in range(7)]
    flat = np.full((rows, cols), WHITE, np.float32)
    tmp = path.with_name(path.name + ".tmp")
    with h5py.File(tmp, "w") as f:
        f["exchange/theta"] = angles_deg
        f["exchange/theta"].attrs["units"] = "degree"
        f["exchange/data_white"] = np.stack([np.round(flat * noise[i % 7]).astype(np.uint16) for i in range(n_flats)])
        f["exchange/data_dark"] = np.full((n_darks, rows, cols), DARK, np.uint16)
        f.require_group("exchange")
        if layout == "contiguous":
            create_volume(f["exchange"], "data", (views, rows, cols), np.uint16)
        else:  # one chunk per projection, as area detectors write them
            f["exchange"].create_dataset("data", shape=(views, rows, cols), dtype=np.uint16, chunks=(1, rows, cols))

    def counts(i):
        p = chords[i][None, :] * profile[:, None]
        return np.round(DARK + (WHITE - DARK) * noise[i % 7] * np.exp(-p)).astype(np.uint16)

    pool = ThreadPoolExecutor(threads)
    frame = rows * cols * 2
    if layout == "contiguous":
        offset = contiguous_offset(tmp, "/exchange/data")
        fd = os.open(tmp, os.O_WRONLY)
        try:
            list(pool.map(lambda i: atomic.write_at(fd, counts(i), offset + i * frame), range(views)))
            os.fsync(fd)
        finally:
            os.close(fd)
    else:
        with h5py.File(tmp, "r+") as f:
            ds = f["/exchange/data"]
            for i, image in enumerate(pool.map(counts, range(views))):  # made ahead on the pool, in order
                ds.id.write_direct_chunk((i, 0, 0), image)
    pool.shutdown()
    with h5py.File(tmp, "r+") as f:
        f.attrs["bench_e2e"] = json.dumps(
            {"views": views, "rows": rows, "cols": cols, "flats": n_flats, "darks": n_darks, "layout": layout}
        )
    os.replace(tmp, path)


def write_tiffs(folder: Path, scan: Path, threads: int) -> None:
    """The scan's projections as one uncompressed TIFF each, flats and darks as stacks beside."""
    import tifffile

    from leveret.io import read_scan

    s = read_scan(scan)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "proj").mkdir(parents=True)
    tifffile.imwrite(tmp / "flats.tif", s.flats)
    tifffile.imwrite(tmp / "darks.tif", s.darks)
    width = len(str(s.projections.shape[0]))

    def one(i):
        tifffile.imwrite(tmp / "proj" / f"p_{i:0{width}d}.tif", s.projections[i])

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(s.projections.shape[0])))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def line_integrals(views: int, rows: int, cols: int, threads: int) -> np.ndarray:
    """The same problem as float32 line integrals in memory (for the in-memory reference)."""
    chords, profile = phantom_rows(np.radians(np.linspace(0.0, 180.0, views, endpoint=False)), cols, rows)
    out = np.empty((views, rows, cols), np.float32)

    def one(i):
        np.multiply(chords[i][None, :], profile[:, None], out=out[i])

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(views)))
    return out


# -- this host's ceilings ------------------------------------------------------------------------


def write(path: Path, view: memoryview, threads: int) -> tuple[float, float]:
    """``view`` written into a new file (never one whose old pages are still being written back) on
    ``threads`` threads (pwrite), then flushed (fsync): seconds to write, to flush."""
    path.unlink(missing_ok=True)
    os.sync()
    step = -(-view.nbytes // threads)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        t = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda i: os.pwrite(fd, view[i : i + step], i), range(0, view.nbytes, step)))
        t1 = time.perf_counter()
        os.fsync(fd)
        return t1 - t, time.perf_counter() - t1
    finally:
        os.close(fd)


@functools.cache
def _noise(nbytes: int) -> np.ndarray:
    """``nbytes`` random bytes, made once: nothing below the file system can shrink them."""
    return np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)


def durable_rate(folder: Path, threads: int, nbytes: int, files: int = 1, piece: int = 64 << 20) -> float:
    """Bytes per second at which this disk takes ``nbytes`` from memory to stable storage now, in
    ``files`` files of equal size (a folder output's layout), as leveret's writer moves them: pieces
    of at most ``piece`` bytes written on ``threads`` threads, each one's writeback started once
    written, then every file flushed (on the threads) and the folder. Run beside a case with its
    stored bytes and files, this is that case's I/O floor (a virtual disk's rate drifts within a
    call, and a few GB fit in caches below the page cache that 30 GB do not)."""
    from leveret.io.atomic import start_writeback

    root = folder / ".bench_e2e_probe"
    if root.exists():
        _remove(root)
    root.mkdir()
    data = memoryview(_noise(piece))
    bounds = np.linspace(0, nbytes, max(1, files) + 1).astype(np.int64)
    sizes = np.diff(bounds)
    os.sync()
    fds = []
    try:
        t = time.perf_counter()
        fds = [os.open(root / str(k), os.O_WRONLY | os.O_CREAT) for k in range(len(sizes))]
        tasks = [
            (fd, at, min(piece, int(size) - at)) for fd, size in zip(fds, sizes) for at in range(0, int(size), piece)
        ]

        def one(task):
            fd, at, n = task
            os.pwrite(fd, data[:n], at)
            start_writeback(fd, at, n)

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, tasks))
            list(pool.map(os.fsync, fds))
        dir_fd = os.open(root, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return nbytes / (time.perf_counter() - t)
    finally:
        for fd in fds:
            os.close(fd)
        _remove(root)


# -- the host during a run ----------------------------------------------------------------------


def block_stat(folder: Path) -> Path | None:
    """The kernel's I/O counters of the block device holding ``folder`` (``/sys/dev/block/M:m/stat``),
    or None where there are none (not Linux; tmpfs, overlay and other file systems without one)."""
    dev = os.stat(folder).st_dev
    path = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat")
    return path if path.exists() and Path("/proc/meminfo").exists() and Path("/proc/stat").exists() else None


def _queued() -> int:
    """Bytes the page cache holds for the disks: dirty, or under writeback."""
    total = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(("Dirty:", "Writeback:")):
                total += int(line.split()[1]) * 1024
    return total


def _cpu_ticks() -> tuple[int, int]:
    """(stolen, all) clock ticks of every CPU since boot: stolen, the time a hypervisor ran
    something else while this machine's CPUs had work (``/proc/stat``)."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    return ticks[7], sum(ticks)


class HostWatch:
    """What a run's host does, sampled on a thread every ``every`` seconds while in the ``with``
    block: (seconds, bytes the disk under ``folder`` has written, milliseconds of its requests in
    flight summed over requests, bytes the page cache holds for the disks, CPU ticks stolen, all
    CPU ticks). :meth:`summary` turns them into the disk's rate and depth during the run and the
    share of CPU time the hypervisor took. Samples nothing where :func:`block_stat` finds no counters."""

    def __init__(self, folder: Path, every: float = 0.02):
        self.stat, self.every, self.samples = block_stat(folder), every, []
        self._stop = threading.Event()

    def _sample(self) -> None:
        fields = self.stat.read_text().split()
        # fields 7 and 11 of the stat file: sectors written (512 bytes), weighted milliseconds in flight
        written, weighted = int(fields[6]) * 512, int(fields[10])
        self.samples.append((time.perf_counter() - self._t0, written, weighted, _queued(), *_cpu_ticks()))

    def __enter__(self):
        if self.stat is not None:
            self._t0 = time.perf_counter()
            self._sample()

            def loop():
                while not self._stop.wait(self.every):
                    self._sample()

            self._thread = threading.Thread(target=loop, name="bench-host-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.stat is not None:
            self._stop.set()
            self._thread.join()
            self._sample()
        return False

    def summary(self) -> dict:
        return host_during(self.samples)


#: the page cache holds at least this for the disks: the disk has work waiting, it is not waiting on the run
FED = 8 << 20
#: the disk has written this much since the run began: the run's output has reached it (not the journal alone)
STARTED = 8 << 20


def host_during(samples, fed_bytes: int = FED) -> dict:
    """What the host did during a run, from :class:`HostWatch`'s samples: ``first``, the seconds
    before the disk had written ``STARTED`` bytes; ``written``, its bytes; ``fed``, the share of
    the time from ``first`` to the end in which at least ``fed_bytes`` waited for it in the page
    cache; ``rate`` and ``depth``, the bytes it wrote per second and its mean requests in flight
    in those intervals; ``steal``, the share of CPU time the hypervisor took over the whole run.
    The disk's rate follows its depth: a run that keeps fewer requests in flight than the probe
    (:func:`durable_rate`, watched alike) gets less from the disk, so ``rate`` is the disk's pace
    as the run fed it, not a floor. Empty without samples. ``timeline`` keeps one sample per
    tenth of a second for a chart: seconds, bytes written, weighted milliseconds in flight, bytes
    queued."""
    if len(samples) < 3:
        return {}
    t, written, weighted, queued, stolen, ticks = (np.array(c, dtype=np.float64) for c in zip(*samples))
    written -= written[0]
    started = np.flatnonzero(written >= STARTED)
    if not started.size:
        return {}
    i0 = started[0]
    span = t[-1] - t[i0]
    dt, dw, dq = np.diff(t[i0:]), np.diff(written[i0:]), np.diff(weighted[i0:])
    fed = queued[i0:-1] >= fed_bytes
    fed_seconds = float(dt[fed].sum())
    out = {
        "first": float(t[i0]),
        "written": float(written[-1]),
        "fed": float(fed_seconds / span) if span > 0 else 0.0,
        "steal": float((stolen[-1] - stolen[0]) / (ticks[-1] - ticks[0])) if ticks[-1] > ticks[0] else 0.0,
    }
    if fed_seconds > 0 and dw[fed].sum() > 0:
        out["rate"] = float(dw[fed].sum() / fed_seconds)
        out["depth"] = float(dq[fed].sum() / 1e3 / fed_seconds)
    keep = np.unique(np.searchsorted(t, np.arange(int(t[-1] * 10) + 1) / 10))  # the first sample of each tenth
    out["timeline"] = [
        [round(float(t[k]), 3), int(written[k]), int(weighted[k] - weighted[0]), int(queued[k])] for k in keep
    ]
    return out


def held_to_own_bytes(run, measure, repeats: int) -> dict:
    """``repeats`` runs of a case, each followed by ``measure``: its stored bytes' rate to disk
    right after it (``durable_rate``). The disk drifts between runs, so each run is held to its own
    floor and the run of median ratio is kept (of two, the lower; the fastest would pair a lucky
    run with another run's floor); every run's wall, its probe's rate, its ratio and what the host
    watch saw during both go in its ``repeats``."""
    rows = []
    for _ in range(max(1, repeats)):
        row = run()
        row["durable_rate"] = measure(row)
        row["sync_ratio"] = row["wall"] / (row["stored_bytes"] / row["durable_rate"])
        rows.append(row)
    kept = sorted(rows, key=lambda r: r["sync_ratio"])[(len(rows) - 1) // 2]
    kept["repeats"] = [
        {
            **{k: r[k] for k in ("wall", "durable_rate", "sync_ratio")},
            **{k: r[k] for k in ("disk", "probe_disk") if k in r},
        }
        for r in rows
    ]
    return kept


def probe(folder: Path, threads: int, gb: float) -> dict:
    """Bytes per second, as leveret's writer and reader use them: ``gb`` GB written into a new file's
    page cache with ``threads`` threads (pwrite), then flushed to disk (fsync: ``sync``) and read back
    (preadv); Blosc lz4/zstd and gzip on the threads."""
    from leveret.io.codecs import ChunkCodec

    n = int(gb * 1e9) // 4
    a = np.sin(np.linspace(0, 60, n, dtype=np.float32))
    a += np.random.default_rng(0).normal(0, 0.05, n).astype(np.float32)
    path = folder / ".bench_e2e_probe"
    step = -(-a.nbytes // threads)
    view = memoryview(a).cast("B")
    out = {}

    def timed(fn):
        fn()
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    write(path, view, threads)
    written, flushed = write(path, view, threads)
    out["write"], out["sync"] = a.nbytes / written, a.nbytes / flushed
    b = np.empty_like(a)
    bview = memoryview(b).cast("B")

    def read():
        fd = os.open(path, os.O_RDONLY)
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda i: os.preadv(fd, [bview[i : i + step]], i), range(0, a.nbytes, step)))
        os.close(fd)

    out["read"] = a.nbytes / timed(read)
    os.remove(path)
    chunks = [a[i : i + (4 << 20) // 4] for i in range(0, n, (4 << 20) // 4)]
    for name in ("lz4", "zstd", "gzip"):
        try:
            codec = ChunkCodec(name)
        except ValueError:
            continue
        sample = chunks if name != "gzip" else chunks[: max(threads, len(chunks) // 8)]
        with ThreadPoolExecutor(threads) as pool:
            seconds = timed(lambda: list(pool.map(codec.encode, sample)))
        out[name] = sum(c.nbytes for c in sample) / seconds
    return out


def warm_memory(folder: Path, nbytes: int, threads: int) -> float:
    """Write ``nbytes`` of zeros into a file in ``folder`` on ``threads`` threads, delete it, and
    return the seconds taken: a virtual machine's memory grows on first use (seconds per 8 GiB),
    which would slow the first run alone; afterwards the page cache has its pages."""
    path = folder / ".bench_e2e_warm"
    piece = np.zeros(64 << 20, np.uint8)
    t = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda at: os.pwrite(fd, piece[: nbytes - at], at), range(0, nbytes, piece.nbytes)))
    finally:
        os.close(fd)
        os.remove(path)
    return time.perf_counter() - t


def warm_pipeline(scan_input, geometry, out_dir: Path, backend: str, options=({},)) -> float:
    """Disk-to-disk runs of a few slices before the timed ones, one for each of
    ``options`` (keyword arguments of ``reconstruct_to_file``: each output dtype
    and precision has kernels of its own): the first run on a machine compiles
    the pipeline's kernels (CuPy keeps them on disk for later processes), which
    is not what the table measures. Their seconds."""
    import leveret
    from leveret.execution.outofcore import reconstruct_to_file

    rows = min(8, geometry.projection_shape[1])
    few = leveret.ParallelGeometry(geometry.angles, geometry.projection_shape[2], n_rows=rows)
    preprocess = {k: None if v is None else np.asarray(v)[..., :rows, :] for k, v in scan_input["preprocess"].items()}
    projections = np.asarray(scan_input["projections"][:, :rows])
    t = time.perf_counter()
    for kwargs in options:
        res = reconstruct_to_file(projections, few, out_dir / "warm.npy", backend=backend, **preprocess, **kwargs)
        _remove(res.path)
    return time.perf_counter() - t


def warm_options(formats, extra) -> list[dict]:
    """The distinct kernel options of ``formats`` (their output dtypes) with ``extra``."""
    dtypes = dict.fromkeys(FORMATS[f][1].get("output_dtype") for f in formats)
    return [{**extra, **({"output_dtype": d} if d else {})} for d in dtypes]


def kernel_seconds(views: int, rows: int, cols: int, backend: str, precision: str) -> float | None:
    """The reconstruction alone on the GPU (CuPy in and out, 64 slices, warm), scaled to ``rows`` slices."""
    if backend != "cuda":
        return None
    import cupy

    import leveret

    n = min(64, rows)
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, views, endpoint=False), cols, n_rows=n)

    def seconds():
        data = cupy.random.random(g.projection_shape, dtype=cupy.float32)
        leveret.fbp(data, g, backend="cuda", precision=precision)
        cupy.cuda.Device().synchronize()
        t = time.perf_counter()
        for _ in range(3):
            leveret.fbp(data, g, backend="cuda", precision=precision)
        cupy.cuda.Device().synchronize()
        return (time.perf_counter() - t) / 3

    per_slab = seconds()
    cupy.get_default_memory_pool().free_all_blocks()
    return per_slab * rows / n


# -- one disk-to-disk run ------------------------------------------------------------------------


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size if path.exists() else 0


def _remove(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


def run_one(fmt: str, scan_input, geometry, out_dir: Path, args, extra: dict) -> dict:
    """One ``leveret recon``-equivalent run into format ``fmt``: its row."""
    from leveret.execution.outofcore import reconstruct_to_file

    name, options = FORMATS[fmt]
    out = out_dir / name
    if out.exists():
        _remove(out)
    kwargs = dict(backend=args.backend, progress=args.progress, **options, **extra, **scan_input["preprocess"])
    if args.io_threads:
        kwargs["io_threads"] = args.io_threads
    if args.no_sync:
        kwargs["sync"] = False
    if args.gpus:
        kwargs["devices"] = args.gpus if args.gpus == "all" else [int(g) for g in args.gpus.split(",")]
    accepted = inspect.signature(reconstruct_to_file).parameters
    dropped = [k for k in ("output_dtype", "io_threads", "sync") if k in kwargs and k not in accepted]
    for k in dropped:  # an older leveret: its own defaults
        kwargs.pop(k)
    if args.slab_slices:
        kwargs["slab_slices"] = args.slab_slices
    os.sync()  # nothing dirty left by the input or an earlier run: each run writes back only its own
    with HostWatch(out_dir) as watch:
        t = time.perf_counter()
        res = reconstruct_to_file(scan_input["projections"], geometry, out, **kwargs)
        wall = time.perf_counter() - t
    row = {
        "format": fmt,
        "wall": wall,
        "slabs": res.plan.n_slabs,
        "slab_slices": res.plan.slab_slices,
        "stored_bytes": _size(res.path),
        "stored_files": sum(f.is_file() for f in res.path.rglob("*")) if res.path.is_dir() else 1,
        "dropped": dropped,
        "synced": "sync" not in kwargs or "sync" in dropped,
        "peak_rss": res.peak_rss,
    }
    row["disk"] = watch.summary()
    stages = getattr(res, "stages", None) or {k: {"seconds": v} for k, v in res.busy.items()}
    row["stages"] = stages
    _remove(res.path)
    return row


# -- floors and the table ----------------------------------------------------------------------


def floors(row: dict, problem: dict, rates: dict, reconstruct: float | None, backend: str) -> dict:
    """Seconds each stage needs at the host's rates for this run's bytes; the largest is the run's floor."""
    name, options = FORMATS[row["format"]]
    compression = options.get("compression", "lz4" if name.endswith((".h5", ".zarr")) else None)
    dtype = np.dtype(options.get("output_dtype", "float32"))
    volume = problem["voxels"] * dtype.itemsize
    stored = row.get("stored_bytes") or volume / (BLOSC_RATIO if compression else 1)
    out = {"read": problem["input_bytes"] / rates["read"], "write": stored / rates["write"]}
    if "sync" in rates and row.get("synced", True):  # the output is on disk when the run ends
        out["sync"] = stored / rates["sync"]
    if compression in ("lz4", "zstd", "gzip") and compression in rates:
        out["compress"] = volume / rates[compression]
    if backend == "cuda":
        out["upload"] = problem["input_bytes"] / rates["upload"]
        out["download"] = volume / rates["download"]
    if reconstruct:
        out["reconstruct"] = reconstruct
    return out


def print_row(row: dict, problem: dict) -> None:
    st = row["stages"]
    cells = []
    for stage in STAGES:
        part = st.get(stage)
        if part is None:
            cells.append(f"{'-':>13s}")
            continue
        rate = part.get("rate")
        cells.append(f"{part['seconds']:6.2f}" + (f" {rate:5.1f}G" if rate is not None else "       "))
    floor = row.get("floor")
    ratio = f"{row['wall'] / floor:5.2f}x of {floor:6.2f} s ({row['floor_stage']})" if floor else ""
    if "durable_rate" in row:
        ratio += f" (disk {row['durable_rate'] / 1e9:.2f} GB/s beside it)"
    if len(row.get("repeats", ())) > 1:
        ratio += " runs: " + " ".join(f"{r['sync_ratio']:.2f}x" for r in row["repeats"])
    disk, probed = row.get("disk") or {}, row.get("probe_disk") or {}
    if "rate" in disk:
        ratio += (
            f"; during it the disk wrote {disk['rate'] / 1e9:.2f} GB/s with {disk['depth']:.0f} requests in flight"
            + (f" (its probe {probed['rate'] / 1e9:.2f} with {probed['depth']:.0f})" if "rate" in probed else "")
            + f", work waiting {disk['fed']:.0%} of the time, CPU time stolen {disk['steal']:.1%}"
        )
    print(
        f"{row['format']:14s} {row['wall']:7.2f} s {problem['updates'] / row['wall'] / 1e9:8.1f} GU/s "
        f"{' '.join(cells)}  {row['stored_bytes'] / 1e9:6.2f} GB  {ratio}",
        flush=True,
    )


def plot(runs: list[dict], path: Path) -> None:
    """One panel per format: the bytes the disk had written over each run's seconds (every repeat;
    the kept run bold), and beside each the stored bytes at the rate its probe measured right after
    it, from when the run's output first reached the disk (dashed): a run along its dashed line kept
    pace with the disk, and its start is the time before the first slab was on its way to disk."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in runs if (r.get("disk") or {}).get("timeline")]
    if not shown:
        print(f"no disk timelines (no block device's counters under --dir); {path} not written")
        return
    fig, axes = plt.subplots(1, len(shown), figsize=(4.6 * len(shown), 3.4), squeeze=False)
    for ax, row in zip(axes.flat, shown):
        for k, rep in enumerate([r for r in row.get("repeats") or () if r.get("disk")] or [row]):
            disk = rep["disk"]
            t, written = np.array([x[0] for x in disk["timeline"]]), np.array([x[1] for x in disk["timeline"]]) / 1e9
            bold = rep["wall"] == row["wall"]
            (line,) = ax.plot(t, written, lw=2.2 if bold else 1.0, label=f"run {k + 1}: {rep['wall']:.2f} s")
            if rep.get("durable_rate"):
                end = disk["first"] + row["stored_bytes"] / rep["durable_rate"]
                ax.plot([disk["first"], end], [0, row["stored_bytes"] / 1e9], "--", color=line.get_color(), lw=0.8)
        ax.set_title(f"{row['format']}: {row['stored_bytes'] / 1e9:.1f} GB stored", fontsize=9)
        ax.set_xlabel("seconds from the run's start", fontsize=8)
        ax.set_ylabel("GB the disk has written", fontsize=8)
        ax.legend(fontsize=7, title="dashed: its bytes at the probe's rate", title_fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    p.add_argument("--size", type=int, default=None, help="views = rows = columns = SIZE (2048: the target)")
    p.add_argument("--views", type=int, default=1500, help="projections (without --size)")
    p.add_argument("--rows", type=int, default=512, help="detector rows = slices (without --size)")
    p.add_argument("--cols", type=int, default=2048, help="detector columns = slice width (without --size)")
    p.add_argument("--flats", type=int, default=10)
    p.add_argument("--darks", type=int, default=5)
    p.add_argument(
        "--dir",
        default=tempfile.gettempdir(),
        help="folder of the input and the outputs (its page cache is what is measured; default: the temporary folder)",
    )
    p.add_argument(
        "--formats",
        default=DEFAULT_FORMATS,
        help=f"comma-separated, of: {', '.join(FORMATS)} (default: {DEFAULT_FORMATS})",
    )
    p.add_argument(
        "--input",
        choices=("h5", "tiff"),
        default="h5",
        help="read the DXchange file, or a folder of TIFFs made from it",
    )
    p.add_argument(
        "--input-layout",
        choices=("frames", "contiguous"),
        default="frames",
        help="the DXchange data: one chunk per projection (as area detectors write), or contiguous",
    )
    p.add_argument("--fresh", action="store_true", help="write the input again even if it is there")
    p.add_argument("--backend", default="auto", choices=("auto", "cuda", "cpu"))
    p.add_argument("--gpus", default=None, help="devices= for the runs: 'all' or ids such as 0,1")
    p.add_argument(
        "--precision",
        default="float32",
        choices=("float32", "float16"),
        help="the kernel's precision (float16: fp16 filtered sinograms)",
    )
    p.add_argument("--no-sync", action="store_true", help="sync=False: outputs left in the page cache, not flushed")
    p.add_argument("--io-threads", type=int, default=None, help="reading/writing threads (default: one per core)")
    p.add_argument("--slab-slices", type=int, default=None, help="slices per slab (default: planned)")
    p.add_argument(
        "--no-memory",
        action="store_true",
        help="skip the in-memory fbp reference (it holds the "
        "line integrals and the volume in RAM: 4 x (input + volume voxels) bytes)",
    )
    p.add_argument(
        "--no-warm",
        action="store_true",
        help="skip writing and deleting a volume's bytes before the runs (on a virtual machine whose "
        "memory grows on first use, the first run would pay for it)",
    )
    p.add_argument("--no-probe", action="store_true", help="floors from CEILINGS.md's H200 host, not measured here")
    p.add_argument("--probe-gb", type=float, default=2.0, help="GB each host probe moves")
    p.add_argument(
        "--probe-each",
        action="store_true",
        help="after each case, its stored bytes (in as many files) written and flushed alone: its I/O floor",
    )
    p.add_argument("--progress", action="store_true", help="each run's progress line (stage rates)")
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of each case; the fastest is kept, or with --probe-each the one of median ratio to its own "
        "floor (default: 1)",
    )
    p.add_argument("--out", default=None, help="JSON file (default: bench/results/e2e/<problem>-<backend>.json)")
    p.add_argument(
        "--plot",
        default=None,
        help="PNG of the bytes the disk wrote over each run's seconds (dashed: at its probe's rate, with --probe-each)",
    )
    args = p.parse_args(argv)

    import leveret
    from leveret.backends import resolve
    from leveret.io import read_scan

    if args.size:
        args.views = args.rows = args.cols = args.size
    backend = resolve(args.backend)
    args.backend = backend
    extra = {"precision": args.precision} if args.precision != "float32" else {}
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        p.error(f"--formats: unknown {unknown}; known: {', '.join(FORMATS)}")
    threads = args.io_threads or os.cpu_count() or 1
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    tag = f"{args.views}x{args.rows}x{args.cols}"
    scan_path = folder / f"bench_e2e_{tag}_{args.input_layout}.h5"
    meta = metadata(with_devices=backend == "cuda")
    problem = {
        "views": args.views,
        "rows": args.rows,
        "cols": args.cols,
        "voxels": args.rows * args.cols * args.cols,
        "input_bytes": args.views * args.rows * args.cols * 2,
    }
    problem["updates"] = problem["voxels"] * args.views
    print(
        f"problem: {args.views} projections of {args.rows} x {args.cols} uint16 ({problem['input_bytes'] / 1e9:.1f} GB, "
        f"{args.flats} flats, {args.darks} darks) -> {args.rows} x {args.cols}^2 float32 "
        f"({problem['voxels'] * 4 / 1e9:.1f} GB); {backend}; {threads} threads; {folder}",
        flush=True,
    )

    if args.fresh or not scan_path.exists():
        t = time.perf_counter()
        write_scan(scan_path, args.views, args.rows, args.cols, args.flats, args.darks, args.input_layout, threads)
        print(f"input written: {scan_path} in {time.perf_counter() - t:.1f} s", flush=True)
    scan = read_scan(scan_path)
    projections = scan.projections
    if args.input == "tiff":
        tiffs = folder / f"bench_e2e_{tag}_tiff"
        if args.fresh or not tiffs.exists():
            t = time.perf_counter()
            write_tiffs(tiffs, scan_path, threads)
            print(f"TIFF input written: {tiffs} in {time.perf_counter() - t:.1f} s", flush=True)
        projections = leveret.io.open_array(tiffs / "proj")
    geometry = leveret.ParallelGeometry(scan.angles, args.cols, n_rows=args.rows)
    scan_input = {"projections": projections, "preprocess": dict(flats=scan.flats, darks=scan.darks)}

    rates = dict(CEILINGS)
    if not args.no_probe:
        t = time.perf_counter()
        measured = probe(folder, threads, args.probe_gb)
        rates.update(measured)
        print(
            f"host ({threads} threads, {time.perf_counter() - t:.1f} s): "
            + ", ".join(f"{k} {v / 1e9:.2f} GB/s" for k, v in measured.items()),
            flush=True,
        )
    if not args.no_warm:
        nbytes = problem["voxels"] * 4
        print(f"host memory warmed: {nbytes / 1e9:.1f} GB in {warm_memory(folder, nbytes, threads):.1f} s", flush=True)
    results = {"meta": meta, "problem": problem, "rates": rates, "runs": []}
    out = Path(args.out) if args.out else Path(__file__).parent / "results" / "e2e" / f"{tag}-{backend}.json"
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every run: a suite stopped part way keeps the rows it has
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(results, indent=1, default=float))
        os.replace(tmp, out)

    kernel = kernel_seconds(args.views, args.rows, args.cols, backend, args.precision)
    if kernel is not None:
        results["kernel_seconds"] = kernel
        print(
            f"kernel (fbp, CuPy in and out, {args.precision}): {kernel:.2f} s for the volume = "
            f"{problem['updates'] / kernel / 1e9:.0f} GU/s; the exact kernel at {KERNEL_GUPS / 1e9:.0f} GU/s "
            f"(CEILINGS.md): {problem['updates'] / KERNEL_GUPS:.2f} s",
            flush=True,
        )
    if not args.no_memory:
        lines = line_integrals(args.views, args.rows, args.cols, threads)
        leveret.fbp(
            lines[:, : min(8, args.rows)],
            leveret.ParallelGeometry(geometry.angles, args.cols, n_rows=min(8, args.rows)),
            backend=backend,
            precision=args.precision,
        )
        memory = float("inf")
        for _ in range(max(1, args.repeats)):
            t = time.perf_counter()
            volume = leveret.fbp(lines, geometry, backend=backend, precision=args.precision)
            memory = min(memory, time.perf_counter() - t)
            del volume
        del lines
        results["fbp_in_memory"] = memory
        print(
            f"fbp in memory (NumPy in and out): {memory:.2f} s = {problem['updates'] / memory / 1e9:.1f} GU/s",
            flush=True,
        )
    reconstruct = kernel if kernel is not None else results.get("fbp_in_memory")
    warm = warm_pipeline(scan_input, geometry, folder, backend, warm_options(formats, extra))
    print(f"pipeline warmed: {warm:.1f} s", flush=True)

    print(
        f"\n{'format':14s} {'wall':>9s} {'rate':>13s} " + " ".join(f"{s:>13s}" for s in STAGES) + "  stored    floor",
        flush=True,
    )

    def measure(r):  # the probe watched as the run was: the disk's pace and depth beside the run's
        with HostWatch(folder) as watch:
            rate = durable_rate(folder, threads, r["stored_bytes"], r["stored_files"])
        r["probe_disk"] = watch.summary()
        return rate

    for fmt in formats:
        try:
            if args.probe_each and not args.no_sync:
                row = held_to_own_bytes(
                    lambda: run_one(fmt, scan_input, geometry, folder, args, extra), measure, args.repeats
                )
            else:
                row = min(
                    (run_one(fmt, scan_input, geometry, folder, args, extra) for _ in range(max(1, args.repeats))),
                    key=lambda r: r["wall"],
                )
        except Exception as exc:  # one format's failure (a missing package) does not end the suite
            print(f"{fmt:14s} failed: {type(exc).__name__}: {exc}", flush=True)
            results["runs"].append({"format": fmt, "error": f"{type(exc).__name__}: {exc}"})
            save()
            continue
        need = floors(row, problem, rates, reconstruct, backend)
        if "durable_rate" in row:  # its bytes taken to disk beside it: the I/O floor of this case
            need["sync"] = row["stored_bytes"] / row["durable_rate"]
        row["floors"] = need
        row["floor_stage"] = max(need, key=need.get)
        row["floor"] = need[row["floor_stage"]]
        row["GU_per_s"] = problem["updates"] / row["wall"] / 1e9
        results["runs"].append(row)
        save()
        print_row(row, problem)
    if "fbp_in_memory" in results and backend == "cpu":
        for row in results["runs"]:
            if "wall" in row:
                print(f"{row['format']}: disk to disk / in memory = {row['wall'] / results['fbp_in_memory']:.2f}")
    save()
    print(f"\nwrote {out}")
    if args.plot:
        plot(results["runs"], Path(args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
