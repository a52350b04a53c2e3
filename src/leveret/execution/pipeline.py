"""The disk-to-disk pipeline: read -> preprocess -> upload -> reconstruct -> download -> compress -> write.

One out-of-core run in this process is a line of stages, each knowing only
the slab it takes and the slab it hands on, with bounded queues between them
so that every stage works at once on a different slab:

``read`` (one thread; its reads on ``read_threads`` threads)
    takes a buffer from the raw pool (pinned memory when the backend is CUDA),
    reads the slab's detector rows into it (:func:`leveret.io.bands.read_band`:
    ``preadv`` where the bytes' places are known) and, when the run can be
    resumed, checksums them (:func:`leveret.io.slabs.rows_checksum`).
compute (CPU: one worker, every core through Numba; CUDA: ``WORKERS_PER_GPU``
workers per GPU, each on a stream of its own)
    CPU: ``preprocess`` (flat/dark, -log, stripes) and ``reconstruct``
    (:func:`leveret.execution.slab.reconstruct_slab` on NumPy), then the
    output dtype. CUDA: ``upload`` of the raw counts as stored (uint16: half the
    bytes of float32), ``preprocess`` and ``reconstruct`` on the GPU
    (``reconstruct_slab`` on CuPy), the output dtype there too, then
    ``download`` into a pinned buffer of the output pool. The raw buffer goes
    back to its pool once uploaded (CPU: once reconstructed). A slab that
    runs out of GPU memory is rebuilt here in halves from the same rows.
``write`` (:func:`writers` threads)
    :meth:`leveret.io.SlabWriter.write`, which ``compress``-es and writes the
    slab's bytes on the writer's pool of threads, flushes them and records
    the slab; then the output buffer goes back to its pool.

The pools hold a fixed number of buffers of the largest slab's size, made on
first use and reused: no stage allocates (and faults in, and pins) memory
per slab, and a stage that runs ahead waits for a free buffer (on the CPU,
a free output token), so what the run holds is bounded by design
(:func:`in_flight`). Each stage's busy time
and bytes are measured (:class:`StageTimes`); the progress line shows each
stage's rate and how busy it is, so the stage that bounds the run shows.

Failures: a failed read or write stops every stage at once; a failed
reconstruction (or an interrupt raised in it) lets the slabs already
reconstructed be written first, then the error is raised. :meth:`Pipeline.cancel`
(an interrupt in another thread) stops every stage after the slab it is on.
Nothing a stage holds is reused while another stage still reads it, so a
slow or stalled stage never corrupts a slab: it only shows in the split.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import sys
import time
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

#: The stages, in the order data flow through them.
STAGES = ("read", "preprocess", "upload", "reconstruct", "download", "compress", "write", "sync")
#: Threads that write finished slabs with the CUDA backend (each slab is compressed and
#: written on the writer's own pool; a second writer starts a slab while the first ends one).
WRITERS = 2
#: Compute workers per GPU: while one waits for its slab's transfers, the other's kernels run.
WORKERS_PER_GPU = 2
#: Slabs a run is cut into at least (when memory allows fewer): the pipeline's fill and
#: drain (the first slab's read and reconstruction, the last one's write) stay short;
#: :func:`graded` cuts those two slabs finer still.
TARGET_SLABS = 32
#: Slices a slab holds at least when the run is cut for the pipeline (fewer only where memory asks).
MIN_SLAB = 8
#: Seconds a stage waiting on a queue or a buffer sleeps before it looks at the stop flags again.
POLL = 0.05


def writers(backend: str) -> int:
    """Writer threads: ``WRITERS`` with CUDA; one on the CPU, where the
    reconstruction bounds the run."""
    return WRITERS if backend == "cuda" else 1


def in_flight(workers: int, backend: str = "cuda") -> tuple[int, int]:
    """(raw slabs, output slabs) a run with ``workers`` compute workers holds at
    most. CUDA: a raw slab being read, one queued and one per worker; an
    output slab per worker, one queued and one per writer. CPU (one worker):
    the rows of the slab being reconstructed and of the next one, the slab
    being reconstructed and the one before it being written."""
    if backend != "cuda":
        return 2, 2
    return workers + 2, workers + 1 + writers(backend)


def pipeline_slab(n_slices: int, fits: int) -> int:
    """Slices per slab for the pipeline: at most ``fits`` (the memory plan's),
    and small enough for ``TARGET_SLABS`` slabs, but not under ``MIN_SLAB``
    (or the whole volume when it is smaller); a multiple of 4 from 8 up (the
    half-precision kernels pack 2 or 4 slices per texture fetch)."""
    size = max(1, min(int(fits), max(MIN_SLAB, -(-n_slices // TARGET_SLABS)), n_slices))
    return size - size % 4 if size >= 8 else size


def graded(regions) -> list[tuple[int, int]]:
    """``regions`` (slice ranges, in order) with the first and the last cut into pieces
    growing from ``MIN_SLAB`` slices towards the slab (64: 8, 8, 16, 32; the last one
    reversed): the writer gets its first bytes after a small slab's reconstruction
    rather than a whole one's, and what is left after the GPU's last slab is a small
    slab's write. Slabs too few or too small to be cut into such pieces stay whole."""
    regions = [(int(a), int(b)) for a, b in regions]
    if len(regions) < 4:
        return regions

    def pieces(a, b):
        step = max(MIN_SLAB, (b - a) // 8 // 4 * 4)  # a multiple of 4, as pipeline_slab's
        if b - a - 4 * step < step:
            return [(a, b)]
        cuts = [a, a + step, a + 2 * step, a + 4 * step, b]
        return list(zip(cuts[:-1], cuts[1:]))

    head = pieces(*regions[0])
    a, b = regions[-1]
    tail = [(a + b - y, a + b - x) for x, y in reversed(pieces(a, b))]  # mirrored: small pieces last
    return head + regions[1:-1] + tail


# -- what the stages measure ---------------------------------------------------------------------


class StageTimes:
    """Busy seconds and bytes of each stage, summed over its workers (thread safe).

    ``lanes[stage]``: how many of the stage work side by side (threads, GPUs),
    so that ``seconds / (wall * lanes)`` is how busy the stage was.
    """

    def __init__(self, lanes: dict):
        self.lanes = dict(lanes)
        self._seconds = {s: 0.0 for s in lanes}
        self._bytes = {s: 0 for s in lanes}
        self._lock = threading.Lock()

    def add(self, stage: str, seconds: float, nbytes: int = 0) -> None:
        with self._lock:
            self._seconds[stage] = self._seconds.get(stage, 0.0) + float(seconds)
            self._bytes[stage] = self._bytes.get(stage, 0) + int(nbytes)
            self.lanes.setdefault(stage, 1)

    def set(self, stage: str, seconds: float, nbytes: int, lanes: int) -> None:
        """A stage measured elsewhere (the writer's compression and writes)."""
        with self._lock:
            self._seconds[stage], self._bytes[stage], self.lanes[stage] = float(seconds), int(nbytes), int(lanes)

    def report(self, wall: float) -> dict:
        """``{stage: {"seconds", "bytes", "lanes", "rate" (GB/s of its bytes), "busy" (share)}}``
        for the stages that ran, in pipeline order."""
        with self._lock:
            seconds, nbytes, lanes = dict(self._seconds), dict(self._bytes), dict(self.lanes)
        out = {}
        for stage in [s for s in STAGES if s in seconds] + [s for s in seconds if s not in STAGES]:
            if seconds[stage] <= 0 and not nbytes[stage]:
                continue
            s, n = seconds[stage], nbytes[stage]
            out[stage] = {
                "seconds": s,
                "bytes": n,
                "lanes": lanes[stage],
                "rate": n / s / 1e9 if s > 0 else 0.0,
                "busy": min(1.0, s / (wall * lanes[stage])) if wall > 0 else 0.0,
            }
        return out

    def line(self, wall: float) -> str:
        """The progress line: each stage's rate and busy share, and which bounds the run."""
        report = self.report(wall)
        if not report:
            return ""
        parts = [f"{stage} {r['rate']:.1f} GB/s {r['busy']:.0%}" for stage, r in report.items()]
        bound = max(report, key=lambda s: report[s]["busy"])
        return " | ".join(parts) + f" | bound: {bound}"


# -- buffers -----------------------------------------------------------------------------------


class Buffers:
    """``count`` reusable host buffers of ``nbytes`` each (page-locked when
    ``pinned``), made on first use; :meth:`take` waits for a free one."""

    def __init__(self, count: int, nbytes: int, *, pinned: bool = False):
        self.count, self.nbytes, self.pinned = int(count), max(1, int(nbytes)), pinned
        self._free: list = []
        self._made = 0
        self._room = threading.Condition()

    def take(self, shape, dtype, halted) -> "Buffer | None":
        """A buffer viewed as ``shape``/``dtype``; None once ``halted()`` is true."""
        with self._room:
            while not self._free and self._made >= self.count:
                if halted():
                    return None
                self._room.wait(POLL)
            if halted():
                return None
            if self._free:
                block = self._free.pop()
            else:
                self._made += 1
                block = None
        if block is None:
            block = self._make_counted()
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if n > self.nbytes:
            raise ValueError(f"a slab of {n} bytes does not fit the pool's buffers of {self.nbytes}")
        return Buffer(self, block, block[:n].view(dtype).reshape(shape))

    def prepare(self, n: int) -> None:
        """Make up to ``n`` of the buffers now, one after another on a thread of
        their own, for the first slabs to find made: locking a pinned block of
        half a gigabyte takes tens of milliseconds, on the first run of a process.
        Never more than ``count`` in all; a :meth:`take` meanwhile makes its own."""

        def make():
            while True:
                with self._room:
                    if self._made >= min(self.count, n):
                        return
                    self._made += 1
                try:
                    block = self._make_counted()
                except BaseException:  # take() makes it then, and raises
                    return
                self._give_back(block)

        threading.Thread(target=make, name="leveret-buffers", daemon=True).start()

    def _make_counted(self) -> np.ndarray:
        """A new block, already counted in ``_made``; uncounted again if making it fails."""
        try:
            return self._make()
        except BaseException:
            with self._room:
                self._made -= 1
                self._room.notify()
            raise

    def _make(self) -> np.ndarray:
        if self.pinned:
            from ..cuda.pipeline import empty_pinned

            return empty_pinned(self.nbytes, np.uint8)
        block = np.empty(self.nbytes, np.uint8)
        block[::4096] = 0  # its pages, faulted in once here rather than at every slab
        return block

    def _give_back(self, block) -> None:
        with self._room:
            self._free.append(block)
            self._room.notify()


class Buffer:
    """A buffer of a :class:`Buffers` pool: ``array`` until :meth:`release`."""

    def __init__(self, pool: Buffers, block, array):
        self._pool, self._block, self.array = pool, block, array

    def release(self) -> None:
        if self._block is not None:
            block, self._block, self.array = self._block, None, None
            self._pool._give_back(block)


@dataclass
class Slab:
    """One slab on its way through the stages."""

    region: tuple
    rows: tuple | None = None  # detector rows (r0, r1); None: off the detector
    views: tuple | None = None  # the projections (n0, n1) read (a helical slab's; else all)
    raw: object = None  # the rows as stored (a view of raw_buffer's array)
    raw_buffer: Buffer | None = None
    out: object = None  # the slab in the output dtype
    out_buffer: Buffer | None = None
    made_from: dict | None = None  # rows and their checksum, for a resumed run
    smallest: int = 0  # the smallest piece it was rebuilt in after running out of memory
    token: object = None  # gives back the room its output takes (CPU)

    def release(self) -> None:
        for buffer in (self.raw_buffer, self.out_buffer):
            if buffer is not None:
                buffer.release()
        if self.token is not None:
            self.token()
        self.raw = self.out = self.raw_buffer = self.out_buffer = self.token = None


_DONE = object()  # a queue's end


# -- the compute stages ------------------------------------------------------------------------


class _Recipe:
    """What every compute worker needs to build a slab: the geometry, the
    volume, the preprocessing and the reconstruction's options, the output dtype."""

    def __init__(
        self,
        geometry,
        volume,
        *,
        flats,
        darks,
        log_transform,
        stripes,
        stripe_size,
        options,
        output_dtype,
        value_range,
        stripe_options=None,
        phase=None,
        half_acquisition=None,
    ):
        from .slab import border_rows

        self.geometry, self.volume = geometry, volume
        self.flats, self.darks = flats, darks  # averaged float32 images (full detector) or None
        self.preprocess = dict(
            log_transform=log_transform,
            stripes=stripes,
            stripe_size=stripe_size,
            **preprocess_extras(stripe_options, phase, half_acquisition),
        )
        self.border = border_rows(phase)  # rows of context each side of a slab's own
        self.options = options
        self.output_dtype, self.value_range = np.dtype(output_dtype), value_range

    def pieces(self, slab_module, region, band, data, flats, darks, backend, times, stats):
        """Reconstruct ``region`` from ``data`` (``band``: its views and rows), halving it
        after a GPU out-of-memory error (a piece of one slice that still does
        not fit is a MemoryError). Yields ``((a, b), result)`` in order."""
        todo = [tuple(region)]
        while todo:
            a, b = todo.pop(0)
            sub = slab_module.slab_band(self.geometry, self.volume, (a, b), border=self.border)
            if sub is None:
                yield (a, b), None
                continue
            n0, r0 = band[0][0], band[1][0]
            if all(outer[0] <= inner[0] and inner[1] <= outer[1] for outer, inner in zip(band, sub)):
                # the piece's own views and rows: as a run of it alone
                piece = data[sub[0][0] - n0 : sub[0][1] - n0, sub[1][0] - r0 : sub[1][1] - r0]
            else:
                sub, piece = band, data
            try:
                result = slab_module.reconstruct_slab(
                    piece,
                    self.geometry,
                    self.volume,
                    (a, b),
                    rows=sub[1],
                    views=sub[0],
                    flats=flats,
                    darks=darks,
                    backend=backend,
                    stats=stats,
                    **self.preprocess,
                    **self.options,
                )
            except Exception as exc:
                if not slab_module.is_gpu_out_of_memory(exc):
                    raise
                slab_module._free_gpu_pool()
                if b - a == 1:
                    raise MemoryError(f"memory: the GPU ran out of memory even for one slice ({exc})") from None
                size = max(1, (b - a) // 2)
                times.retries += 1
                log.warning("CUDA out of memory on slices %d:%d; retrying with %d slice(s) per piece", a, b, size)
                todo[:0] = [(k, min(b, k + size)) for k in range(a, b, size)]
                continue
            yield (a, b), result


class _CpuStage:
    """Preprocess and reconstruct on the CPU (every core through Numba)."""

    lane = "cpu"

    def __init__(self, recipe: _Recipe):
        self.recipe = recipe

    def build(self, slab: Slab, times: "StageTimes", counters) -> None:
        from ..io.quantize import quantize
        from . import slab as slab_module

        recipe = self.recipe
        k0, k1 = slab.region
        vol = recipe.volume
        raw_bytes = 0 if slab.raw is None else slab.raw.nbytes
        out = None
        split: dict = {}
        smallest = k1 - k0
        for (a, b), result in recipe.pieces(
            slab_module,
            slab.region,
            (slab.views, slab.rows),
            slab.raw,
            recipe.flats,
            recipe.darks,
            "cpu",
            counters,
            split,
        ):
            smallest = min(smallest, b - a)
            if (a, b) == (k0, k1) and result is not None and recipe.output_dtype == np.float32:
                out = result  # the slab as built: no copy
                continue
            if out is None:
                out = np.zeros((k1 - k0, vol.ny, vol.nx), recipe.output_dtype)
            if result is not None:
                t = time.perf_counter()
                quantize(result, recipe.output_dtype, recipe.value_range, out=out[a - k0 : b - k0])
                split["convert"] = split.get("convert", 0.0) + time.perf_counter() - t
        slab.out, slab.smallest = out, (smallest if smallest < k1 - k0 else 0)
        times.add("preprocess", split.get("preprocess", 0.0), raw_bytes)
        times.add("reconstruct", split.get("reconstruct", 0.0) + split.get("convert", 0.0), out.nbytes)


class _GpuStage:
    """Upload, preprocess, reconstruct, convert and download on one GPU, on a
    stream of this worker's own."""

    def __init__(self, recipe: _Recipe, device: int, shared: dict, out_pool: Buffers):
        import cupy

        self.recipe, self.device, self.shared, self.out_pool = recipe, int(device), shared, out_pool
        self.lane = f"gpu{self.device}"
        with cupy.cuda.Device(self.device):
            self.stream = cupy.cuda.Stream(non_blocking=True)

    def _fields(self):
        """The averaged flat and dark on this GPU, uploaded once per GPU."""
        import cupy

        if self.recipe.flats is None:
            return None, None
        with self.shared["lock"]:
            fields = self.shared.get(self.device)
            if fields is None:
                fields = (cupy.asarray(self.recipe.flats), cupy.asarray(self.recipe.darks))
                self.shared[self.device] = fields
        return fields

    def build(self, slab: Slab, times: "StageTimes", counters, halted) -> None:
        import cupy

        from ..io.quantize import quantize
        from . import slab as slab_module

        recipe = self.recipe
        k0, k1 = slab.region
        vol = recipe.volume
        shape = (k1 - k0, vol.ny, vol.nx)
        raw_bytes = 0 if slab.raw is None else slab.raw.nbytes
        buffer = self.out_pool.take(shape, recipe.output_dtype, halted)
        if buffer is None:
            return
        slab.out_buffer, slab.out = buffer, buffer.array
        with cupy.cuda.Device(self.device), self.stream:
            flats, darks = self._fields()
            start = cupy.cuda.Event()
            start.record()
            raw = None
            if slab.raw is not None:
                raw = cupy.empty(slab.raw.shape, slab.raw.dtype)
                raw.set(slab.raw, stream=self.stream)  # from pinned memory: asynchronous
            uploaded = cupy.cuda.Event()
            uploaded.record()
            uploaded.synchronize()
            up_seconds = cupy.cuda.get_elapsed_time(start, uploaded) * 1e-3
            times.add("upload", up_seconds, raw_bytes)
            if slab.raw_buffer is not None:  # on the GPU now: the reader may refill it
                slab.raw_buffer.release()
                slab.raw_buffer, slab.raw = None, None
            device_out = cupy.zeros(shape, recipe.output_dtype)
            split: dict = {}
            smallest = k1 - k0
            for (a, b), result in recipe.pieces(
                slab_module, slab.region, (slab.views, slab.rows), raw, flats, darks, "cuda", counters, split
            ):
                smallest = min(smallest, b - a)
                if result is not None:
                    quantize(result, recipe.output_dtype, recipe.value_range, out=device_out[a - k0 : b - k0])
                del result
            del raw
            converted = cupy.cuda.Event()
            converted.record()
            device_out.get(stream=self.stream, out=slab.out)  # into pinned memory
            landed = cupy.cuda.Event()
            landed.record()
            landed.synchronize()
        slab.smallest = smallest if smallest < k1 - k0 else 0
        times.add("preprocess", split.get("preprocess", 0.0), raw_bytes)
        times.add("reconstruct", split.get("reconstruct", 0.0), slab.out.nbytes)
        times.add("download", cupy.cuda.get_elapsed_time(converted, landed) * 1e-3, slab.out.nbytes)


# -- the pipeline ------------------------------------------------------------------------------


class Pipeline:
    """The stages of one out-of-core run in this process (see the module docstring).

    Parameters
    ----------
    projections : array-like (n_angles, n_rows, n_cols)
        The input, read a band of rows per slab (:func:`leveret.io.bands.read_band`).
    geometry, volume
        The scan and the whole output volume.
    writer : leveret.io.SlabWriter
        Where the slabs go (its dtype is the output dtype).
    backend : {"cpu", "cuda"}
        Resolved.
    devices : leveret.cuda.devices.DeviceSet or None
        CUDA: the GPUs (None: the current one); ``WORKERS_PER_GPU`` workers each.
    flats, darks : ndarray or None
        Flat and dark images (or stacks, averaged here once).
    log_transform, stripes, stripe_size, stripe_options, phase, half_acquisition
        Preprocessing (:func:`leveret.execution.slab.reconstruct_slab`); with
        ``phase`` each slab's rows are read with
        :func:`leveret.execution.slab.border_rows` rows of context each side.
    options : dict
        For the reconstruction (:func:`leveret.execution.slab.reconstruct_slab`).
    value_range : (lo, hi) or None
        For integer output dtypes (:func:`leveret.io.quantize.quantize`).
    slab_slices : int
        The largest slab (sizes the buffers).
    read_threads : int
        Threads that read a slab's rows.
    checksum : bool
        Checksum each slab's rows as read (for a resumed run's check).
    progress : bool
        A progress bar with the stages' rates.
    """

    def __init__(
        self,
        projections,
        geometry,
        volume,
        writer,
        *,
        backend: str,
        devices=None,
        flats=None,
        darks=None,
        log_transform=False,
        stripes=None,
        stripe_size=5,
        stripe_options=None,
        phase=None,
        half_acquisition=None,
        options=None,
        value_range=None,
        slab_slices: int,
        read_threads: int,
        checksum: bool,
        progress: bool = False,
    ):
        from ..preprocess._common import average_fields

        self.projections, self.geometry, self.volume, self.writer = projections, geometry, volume, writer
        self.backend = backend
        image = tuple(projections.shape[1:])
        if flats is not None:
            flats = average_fields("flats", flats, image, np)
            darks = average_fields("darks", darks, image, np)
        self.recipe = _Recipe(
            geometry,
            volume,
            flats=flats,
            darks=darks,
            log_transform=log_transform,
            stripes=stripes,
            stripe_size=stripe_size,
            options=dict(options or {}),
            output_dtype=writer.dtype,
            value_range=value_range,
            stripe_options=stripe_options,
            phase=phase,
            half_acquisition=half_acquisition,
        )
        self.slab_slices = int(slab_slices)
        self.read_threads = max(1, int(read_threads))
        self.checksum = bool(checksum)
        self.progress = progress
        self.devices = devices
        self.retries = 0
        self.slabs_done = 0
        self.smallest = self.slab_slices
        self._halt = threading.Event()  # everything stops (cancel, a failed read or write)
        self._drain = threading.Event()  # no more reads or reconstructions; writes finish
        self._failure: BaseException | None = None
        self._failure_lock = threading.Lock()

    # -- sizes -------------------------------------------------------------------------------
    def _max_band(self, regions) -> int:
        """Bytes of the largest band of views and rows any of ``regions`` needs."""
        from .slab import slab_band

        bands = [slab_band(self.geometry, self.volume, r, border=self.recipe.border) for r in regions]
        most = max([(n1 - n0) * (r1 - r0) for (n0, n1), (r0, r1) in filter(None, bands)], default=1)
        return most * self.projections.shape[2] * np.dtype(self.projections.dtype).itemsize

    def _workers(self, slices: int) -> list:
        self._out_pool = None
        if self.backend != "cuda":
            self._out_tokens = threading.Semaphore(in_flight(1, "cpu")[1])
            return [_CpuStage(self.recipe)]
        import cupy

        ids = [cupy.cuda.Device().id] if self.devices is None else list(self.devices.ids)
        _, outs = in_flight(WORKERS_PER_GPU * len(ids))
        vol = self.volume
        self._out_pool = Buffers(outs, slices * vol.ny * vol.nx * self.writer.dtype.itemsize, pinned=True)
        shared = {"lock": threading.Lock()}
        return [
            _GpuStage(self.recipe, device, shared, self._out_pool) for device in ids for _ in range(WORKERS_PER_GPU)
        ]

    # -- control -----------------------------------------------------------------------------
    def cancel(self) -> None:
        """Stop every stage after the slab it is on (from any thread)."""
        self._halt.set()

    def _fail(self, exc: BaseException, *, drain: bool) -> None:
        with self._failure_lock:
            if self._failure is None:
                self._failure = exc
        self._drain.set()
        if not drain:
            self._halt.set()

    def _put(self, q: queue.Queue, item, halted) -> bool:
        while True:
            if halted():
                return False
            try:
                q.put(item, timeout=POLL)
                return True
            except queue.Full:
                continue

    def _get(self, q: queue.Queue, halted):
        while True:
            if halted():
                return _DONE
            try:
                return q.get(timeout=POLL)
            except queue.Empty:
                continue

    # -- the run -----------------------------------------------------------------------------
    def run(self, regions, built=()) -> dict:
        """Run every slab of ``regions`` (slice ranges) through the stages into
        the writer, and write the slabs ``built`` before them (each a
        :class:`RangeSample`, its time counted in its stages); returns the
        stages' split (:meth:`StageTimes.report`). Raises the first failure
        of any stage (after the slabs already reconstructed are written, if
        it was a reconstruction's)."""
        from concurrent.futures import ThreadPoolExecutor

        from tqdm.auto import tqdm

        regions, built = graded(regions), list(built)
        if not regions and not built:
            return {}
        workers = self._workers(max([b - a for a, b in regions], default=1))
        n_writers = writers(self.backend)
        lanes = len({w.lane for w in workers})  # GPUs (or the CPU) the compute stages run on
        self.times = StageTimes(
            {
                "read": 1,
                "preprocess": lanes,
                "reconstruct": lanes,
                "write": n_writers,
                **({"upload": lanes, "download": lanes} if self.backend == "cuda" else {}),
            }
        )
        for sample in built:
            for stage, (seconds, nbytes) in sample.seconds.items():
                self.times.add(stage, seconds, nbytes)
        raws, outs = in_flight(len(workers), self.backend)
        self._raw_pool = Buffers(raws, self._max_band(regions), pinned=self.backend == "cuda")
        if self.backend == "cuda":  # a new process's pinned blocks: made beside the first slabs' work
            self._raw_pool.prepare(len(regions))
            self._out_pool.prepare(len(regions))
        # the pools bound what is held; the queues only pass slabs on
        reads: queue.Queue = queue.Queue(maxsize=raws)
        finished: queue.Queue = queue.Queue(maxsize=outs)
        done: queue.Queue = queue.SimpleQueue()
        read_pool = ThreadPoolExecutor(self.read_threads, thread_name_prefix="leveret-read")
        alive = {"compute": len(workers)}
        alive_lock = threading.Lock()
        wall0 = time.perf_counter()

        def reader():
            try:
                for sample in built:  # reconstructed already: straight to the writers
                    slab = Slab(sample.region, out=sample.slices, made_from=sample.made_from)
                    if not self._put(finished, slab, self._halt.is_set):
                        break
                for region in regions:
                    if self._drain.is_set() or self._halt.is_set():
                        break
                    slab = self._read(region, read_pool)
                    if slab is None or not self._put(reads, slab, self._stopping):
                        if slab is not None:
                            slab.release()
                        break
            except BaseException as exc:
                self._fail(exc, drain=False)
            finally:
                for _ in workers:
                    self._put(reads, _DONE, self._halt.is_set)

        def computer(worker):
            try:
                while True:
                    slab = self._get(reads, self._halt.is_set)
                    if slab is _DONE:
                        break
                    if self._drain.is_set():  # read, but a reconstruction failed: not built
                        slab.release()
                        continue
                    try:
                        self._build(worker, slab)
                    except BaseException as exc:
                        slab.release()
                        self._fail(exc, drain=True)
                        continue
                    if slab.out is None or not self._put(finished, slab, self._halt.is_set):
                        slab.release()
            finally:
                with alive_lock:
                    alive["compute"] -= 1
                    last = alive["compute"] == 0
                if last:
                    for _ in range(n_writers):
                        self._put(finished, _DONE, self._halt.is_set)

        def writer():
            while True:
                slab = self._get(finished, self._halt.is_set)
                if slab is _DONE:
                    return
                try:
                    t = time.perf_counter()
                    self.writer.write(slab.region[0], slab.out, source=slab.made_from)
                    self.times.add("write", time.perf_counter() - t, slab.out.nbytes)
                    done.put(slab.region)
                except BaseException as exc:
                    self._fail(exc, drain=False)
                    return
                finally:
                    slab.release()

        threads = [threading.Thread(target=reader, name="leveret-read", daemon=True)]
        threads += [
            threading.Thread(target=computer, args=(w,), name=f"leveret-compute-{w.lane}-{i}", daemon=True)
            for i, w in enumerate(workers)
        ]
        threads += [threading.Thread(target=writer, name=f"leveret-write-{i}", daemon=True) for i in range(n_writers)]
        total = sum(b - a for a, b in regions) + sum(b.slices.shape[0] for b in built)
        bar = tqdm(
            total=total,
            unit="slice",
            desc="reconstruct",
            disable=not self.progress,
            leave=not on_terminal(),
            dynamic_ncols=True,
        )
        try:
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):
                try:
                    a, b = done.get(timeout=0.2)
                except queue.Empty:
                    continue
                self.slabs_done += 1
                bar.update(b - a)
                bar.set_postfix_str(self._line(time.perf_counter() - wall0), refresh=False)
        except BaseException:
            self.cancel()
            raise
        finally:
            for t in threads:
                t.join()
            while not done.empty():  # written while the threads ended
                a, b = done.get()
                self.slabs_done += 1
            bar.close()
            read_pool.shutdown(wait=True, cancel_futures=True)
            for pool in (self._raw_pool, self._out_pool):
                if pool is not None:
                    pool._free.clear()  # pinned blocks go back to leveret.cuda.pipeline's pool
        if self._failure is not None:
            raise self._failure
        if self._halt.is_set():
            raise KeyboardInterrupt("the pipeline was cancelled")
        self.writer.synced()  # the run ends with its slabs on disk
        return self.report(time.perf_counter() - wall0)

    def _stopping(self) -> bool:
        return self._halt.is_set() or self._drain.is_set()

    def report(self, wall: float) -> dict:
        """The stages' split (:meth:`StageTimes.report`). ``write`` is the writer
        threads' time in :meth:`leveret.io.SlabWriter.write` (compressing and
        writing each slab into the page cache; its bytes the slabs');
        ``compress`` the writer's pool threads' seconds compressing
        (:attr:`leveret.io.SlabWriter.busy`) over their number: the wall time
        it takes spread evenly over them; ``sync`` the writer's background
        flushes of the stored bytes to disk (the disk's rate)."""
        busy = self.writer.busy
        if busy["compress"] > 0:
            self.times.set("compress", busy["compress"] / max(1, self.writer.threads), busy["compress_bytes"], 1)
        if busy["sync"] > 0:
            self.times.set("sync", busy["sync"], busy["stored_bytes"], 1)
        return self.times.report(wall)

    def _line(self, wall: float) -> str:
        self.report(wall)
        return self.times.line(wall)

    # -- the stages' work --------------------------------------------------------------------
    def _read(self, region, pool) -> Slab | None:
        from ..io.bands import read_band
        from ..io.slabs import made_from
        from .slab import n_views, slab_band

        slab = Slab(region)
        band = slab_band(self.geometry, self.volume, region, border=self.recipe.border)
        if band is None:  # off the detector: its slices are zero
            return slab
        views, rows = band
        shape = (views[1] - views[0], rows[1] - rows[0], self.projections.shape[2])
        buffer = self._raw_pool.take(shape, self.projections.dtype, self._stopping)
        if buffer is None:
            return None
        slab.views, slab.rows, slab.raw_buffer, slab.raw = views, rows, buffer, buffer.array
        try:
            t = time.perf_counter()
            some = views != (0, n_views(self.geometry))  # a helical slab: its views only
            read_band(self.projections, rows, slab.raw, pool=pool, **({"views": views} if some else {}))
            if self.checksum:
                slab.made_from = made_from(slab.raw, rows, views if some else None, pool=pool)
            self.times.add("read", time.perf_counter() - t, slab.raw.nbytes)
        except BaseException:
            slab.release()
            raise
        return slab

    def _build(self, worker, slab: Slab) -> None:
        counters = _Counter()
        if isinstance(worker, _GpuStage):
            worker.build(slab, self.times, counters, self._halt.is_set)
        else:
            while not self._out_tokens.acquire(timeout=POLL):  # an output slab may be held: room for one
                if self._halt.is_set():
                    return
            slab.token = self._out_tokens.release
            worker.build(slab, self.times, counters)
            if slab.raw_buffer is not None:  # reconstructed: the reader may refill it
                slab.raw_buffer.release()
            slab.raw_buffer = slab.raw = None
        with self._failure_lock:
            self.retries += counters.retries
            if slab.smallest:
                self.smallest = min(self.smallest, slab.smallest)


class _Counter:
    retries = 0


@dataclass(frozen=True)
class RangeSample:
    """Slices reconstructed first to find an integer output's value range."""

    #: (lo, hi), stored as 0 and as the integers' largest value.
    value_range: tuple[float, float]
    #: The slices reconstructed, (k0, k1).
    region: tuple[int, int]
    #: Those slices as stored (the output dtype over ``value_range``, on the
    #: host); None where they are off the detector.
    slices: np.ndarray | None = None
    #: What they were made from (:func:`leveret.io.slabs.made_from`) with ``checksum``, else None.
    made_from: dict | None = None
    #: ``{stage: (seconds, bytes)}`` of their read, preprocessing and reconstruction.
    seconds: dict = field(default_factory=dict)


def sample_range(
    projections,
    geometry,
    volume,
    region,
    *,
    backend: str,
    output_dtype="uint16",
    device=None,
    flats=None,
    darks=None,
    log_transform=False,
    stripes=None,
    stripe_size=5,
    stripe_options=None,
    phase=None,
    half_acquisition=None,
    options=None,
    read_threads=None,
    checksum: bool = False,
) -> RangeSample:
    """The automatic value range (:func:`leveret.io.quantize.auto_range`) from
    slices ``region`` reconstructed as the run will (on its backend, their
    rows read on ``read_threads`` threads, default one per core), and those
    slices stored as ``output_dtype`` over it, as the run stores its slabs:
    :meth:`Pipeline.run` writes them rather than reconstructing them again."""
    from concurrent.futures import ThreadPoolExecutor

    from ..io.bands import read_band
    from ..io.quantize import auto_range, quantize
    from ..io.slabs import made_from
    from . import slab as slab_module

    region = (int(region[0]), int(region[1]))
    band = slab_module.slab_band(geometry, volume, region, border=slab_module.border_rows(phase))
    if band is None:
        return RangeSample(auto_range(np.zeros(1, np.float32)), region)
    (n0, n1), rows = band
    t = time.perf_counter()
    # a band of a few rows from every view: many small reads, on threads
    raw = np.empty((n1 - n0, rows[1] - rows[0], projections.shape[2]), np.dtype(projections.dtype))
    with ThreadPoolExecutor(read_threads or os.cpu_count() or 1) as pool:
        read_band(projections, rows, raw, pool=pool, views=(n0, n1))
        some = (n0, n1) != (0, slab_module.n_views(geometry))
        source = made_from(raw, rows, (n0, n1) if some else None, pool=pool) if checksum else None
    t_read, t = time.perf_counter() - t, time.perf_counter()
    split: dict = {}
    kwargs = dict(
        rows=rows,
        views=(n0, n1),
        log_transform=log_transform,
        stripes=stripes,
        stripe_size=stripe_size,
        stats=split,
        **preprocess_extras(stripe_options, phase, half_acquisition),
        **(options or {}),
    )
    if backend != "cuda":
        result = slab_module.reconstruct_slab(
            raw, geometry, volume, region, flats=flats, darks=darks, backend="cpu", **kwargs
        )
        value_range = auto_range(result)
        stored = quantize(result, output_dtype, value_range)
    else:
        import cupy

        with cupy.cuda.Device(cupy.cuda.Device().id if device is None else device):
            fields = (None, None) if flats is None else (cupy.asarray(flats), cupy.asarray(darks))
            result = slab_module.reconstruct_slab(
                cupy.asarray(raw), geometry, volume, region, flats=fields[0], darks=fields[1], backend="cuda", **kwargs
            )
            value_range = auto_range(result)
            on_gpu = cupy.empty(result.shape, output_dtype)  # converted on the GPU, as the run's slabs are
            quantize(result, output_dtype, value_range, out=on_gpu)
            stored = on_gpu.get()
    preprocessing = split.get("preprocess", 0.0)
    seconds = {
        "read": (t_read, raw.nbytes),
        "preprocess": (preprocessing, raw.nbytes),
        "reconstruct": (time.perf_counter() - t - preprocessing, stored.nbytes),
    }
    return RangeSample(value_range, region, stored, source, seconds)


def preprocess_extras(stripe_options=None, phase=None, half_acquisition=None) -> dict:
    """The preprocessing keywords of :func:`leveret.execution.slab.reconstruct_slab`
    beyond flat/dark, -log and the stripe method, only those given (so that a
    slab is built as by an earlier version when none is)."""
    given = dict(stripe_options=stripe_options, phase=phase, half_acquisition=half_acquisition)
    return {k: v for k, v in given.items() if v is not None}


def on_terminal() -> bool:
    """Whether stderr is a terminal: there the progress bar is cleared when it
    ends; in a log file it stays, so that the next message starts its own line."""
    return bool(getattr(sys.stderr, "isatty", lambda: False)())
