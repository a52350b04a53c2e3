"""Several GPUs of one host in one process: the ``devices=`` argument.

An operator or algorithm that takes ``devices=`` reads it with :func:`parse`:

- ``None``: the current CuPy device, exactly as without the argument;
- ``"all"``: every GPU CuPy sees (``CUDA_VISIBLE_DEVICES`` selects them);
- a list of GPU ids, e.g. ``[0, 2]``;
- a :class:`DeviceSet`, e.g. ``DeviceSet([0, 0], shared=True)``: two workers
  on one GPU. A repeated id in a plain list is refused (it is nearly always a
  typo, and it halves what each worker gets); ``shared=True`` says it is meant.
  Tests run the whole multi-device path (dealing, per-device work, merging)
  on a one-GPU machine this way.

A :class:`DeviceSet` runs one worker thread per entry. Each thread makes its
GPU current (``cupy.cuda.Device``) and works on a non-blocking stream of its
own, so the GPUs (and, in shared mode, the workers of one GPU) overlap. The
threads and streams are kept for the next call (CuPy caches cuFFT plans per
thread and device memory per stream): a repeated call finds both warm. Work
comes as half-open ranges ``(start, stop)`` (of views, slices, ...) dealt
from a shared queue: a faster GPU simply takes more ranges, and since every
range computes the same way wherever it runs, the result does not depend on
who took what. :meth:`DeviceSet.run` can also deal range ``i`` to worker
``i mod n`` (fixed dealing) for work whose per-worker partial results are
summed, so that the order of that sum is fixed too.

A range that runs out of GPU memory (``cupy.cuda.memory.OutOfMemoryError``,
or a driver or cuFFT allocation failure: :func:`out_of_memory`) is halved
and retried, and that worker keeps the smaller size for the rest of the
run: one small or busy GPU shrinks its own ranges
instead of failing the run. A range of one element that still does not fit
re-raises. The first other exception stops the workers (each finishes the
range it is on) and is re-raised in the caller; so is Ctrl-C.

:func:`to_device` and :func:`reduce_sum` move arrays between GPUs: a peer
copy (``cudaMemcpyPeerAsync``), direct where the GPUs have peer access (it is
enabled on first use) and staged through host memory by the CUDA driver where
they have not.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import queue
import threading
from typing import Callable, Sequence

import numpy as np

from ..backends import cuda_status

ALL = "all"


def visible_device_count() -> int:
    """How many GPUs CuPy sees (0 without CuPy or a GPU)."""
    ok, _ = cuda_status()
    if not ok:
        return 0
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


def _no_gpu_reason() -> str:
    return cuda_status()[1]


class DeviceSet:
    """The GPUs a call runs on, one worker thread per entry.

    Parameters
    ----------
    ids : sequence of int
        GPU ids as CuPy numbers them (``0 .. count-1``), at least one.
    shared : bool
        Allow an id to appear more than once: several workers on one GPU,
        each with its own stream (tests of the multi-device path on one GPU;
        overlapping transfers and compute of a single GPU). Without it a
        repeated id is a ValueError.

    Attributes
    ----------
    ids : tuple of int
        One entry per worker, in worker order.
    """

    def __init__(self, ids: Sequence[int], *, shared: bool = False):
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
            raise ValueError(f"devices: expected None, 'all', a list of GPU ids or a DeviceSet, got {ids!r}")
        ids = list(ids)
        if not ids:
            raise ValueError("devices: expected at least one GPU id, got an empty list")
        for d in ids:
            if isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 0:
                raise ValueError(f"devices: expected GPU ids (integers >= 0), got {d!r} in {ids!r}")
        ids = [int(d) for d in ids]
        if not isinstance(shared, bool):
            raise ValueError(f"shared: expected True or False, got {shared!r}")
        repeated = sorted({d for d in ids if ids.count(d) > 1})
        if repeated and not shared:
            raise ValueError(
                f"devices: GPU {repeated[0]} is listed more than once in {ids!r}; each GPU "
                f"takes one worker. For several workers on one GPU pass "
                f"leveret.cuda.devices.DeviceSet({ids!r}, shared=True)"
            )
        count = visible_device_count()
        if count == 0:
            raise ValueError(f"devices: {ids!r} needs a CUDA GPU: {_no_gpu_reason()}")
        bad = [d for d in ids if d >= count]
        if bad:
            raise ValueError(
                f"devices: GPU {bad[0]} does not exist; this host has {count} visible GPU(s), ids 0..{count - 1}"
            )
        self.ids = tuple(ids)
        self.shared = shared

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self):
        return iter(self.ids)

    def __eq__(self, other) -> bool:
        return isinstance(other, DeviceSet) and (self.ids, self.shared) == (other.ids, other.shared)

    def __hash__(self) -> int:
        return hash((self.ids, self.shared))

    def __repr__(self) -> str:
        return f"DeviceSet({list(self.ids)!r}{', shared=True' if self.shared else ''})"

    def free_bytes(self) -> int:
        """The GPU memory each worker may plan with: the smallest free memory
        (``leveret.cuda.gpu_free_bytes``) of the set's GPUs, divided by the
        number of workers sharing that GPU."""
        import cupy

        from . import gpu_free_bytes

        per = []
        for d in set(self.ids):
            with cupy.cuda.Device(d):
                per.append(gpu_free_bytes() // self.ids.count(d))
        return int(min(per))

    def run(
        self,
        chunks: Sequence[tuple[int, int]],
        work: Callable,
        *,
        fixed: bool = False,
        align: int = 1,
        budgets: dict | None = None,
    ) -> list:
        """Run ``work(worker, start, stop)`` for every range of ``chunks`` on the workers.

        Parameters
        ----------
        chunks : sequence of (start, stop)
            Half-open integer ranges, ``start < stop``.
        work : callable
            ``work(worker, start, stop)`` runs in the worker's thread with its
            GPU current and its stream the current stream; ``worker`` is a
            :class:`Worker`. It must leave its results complete on return
            (synchronise the stream before handing device data on). It may be
            called with a sub-range of a chunk (after an out-of-memory error).
        fixed : bool
            False: a shared queue; each worker takes the next range when it is
            free. True: range ``i`` goes to worker ``i mod len(self)``, in order.
        align : int
            A range split after an out-of-memory error is cut only at
            multiples of ``align`` (work done in tiles of that many elements,
            e.g. the 3D Radon kernel's 4-slice tiles, keeps its tiles whole);
            a range of ``align`` elements or fewer that does not fit re-raises.
        budgets : dict, optional
            GPU id -> :class:`leveret.cuda.device_state.MemoryBudget` its
            workers allocate under (a call's ``gpu_memory``).

        Returns
        -------
        list of (start, stop, result)
            One entry per range run (sub-ranges after a split), sorted by start.
        """
        chunks = _check_chunks(chunks)
        align = _positive("align", align)
        n = len(self.ids)
        if fixed:
            queues = [list(chunks[i::n]) for i in range(n)]
        else:
            shared_queue = work_queue(chunks)
        results: list = []
        lock = threading.Lock()

        def body(worker, stop):
            while not stop.is_set():
                if fixed:
                    mine = queues[worker.index]
                    chunk = mine.pop(0) if mine else None
                else:
                    chunk = take(shared_queue)
                if chunk is None:
                    return
                for item in run_shrinking(worker, chunk, work, stop, align):
                    with lock:
                        results.append(item)

        self._start(body, budgets)
        return sorted(results, key=lambda r: r[0])

    def run_pipelines(self, chunks: Sequence[tuple[int, int]], work: Callable, *, budgets: dict | None = None) -> list:
        """Run ``work(worker, ranges)`` once per worker, ``ranges`` an iterator
        over the ranges of ``chunks`` this worker takes from the shared queue
        (lazily: a worker takes the next range when it asks for it).

        For pipelines (``leveret.cuda.pipeline.stream_chunks``) that keep one set of
        streams and pinned buffers per GPU across many ranges. No
        out-of-memory shrink here: such callers plan their ranges from the
        smallest GPU's free memory. Returns ``work``'s results in worker order.
        ``budgets`` as for :meth:`run`.
        """
        shared_queue = work_queue(_check_chunks(chunks))

        def each(worker, stop):
            def ranges():
                while not stop.is_set() and (chunk := take(shared_queue)) is not None:
                    yield chunk

            return work(worker, ranges())

        return self.run_each(each, budgets=budgets)

    def run_each(self, work: Callable, *, budgets: dict | None = None) -> list:
        """Run ``work(worker, stop)`` once in each worker's thread (its GPU
        current, its stream the current stream); ``stop`` is a
        ``threading.Event`` set when another worker failed. For work that
        deals itself (e.g. a queue per GPU). Returns the results in worker
        order; the first exception is re-raised. ``budgets`` as for :meth:`run`."""
        results = [None] * len(self.ids)

        def body(worker, stop):
            results[worker.index] = work(worker, stop)

        self._start(body, budgets)
        return results

    def _start(self, body, budgets: dict | None = None) -> None:
        """Run ``body(worker, stop)`` once per entry, each in a worker thread
        (:func:`_lend_threads`) with its GPU current; the first exception
        sets ``stop`` and is re-raised here, as is Ctrl-C (after every
        worker has stopped)."""
        stop = threading.Event()
        errors: list = []
        lock = threading.Lock()
        finished = [threading.Event() for _ in self.ids]

        def guarded(worker):
            try:
                with _worker_context(worker.device, (budgets or {}).get(worker.device)):
                    body(worker, stop)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                with lock:
                    errors.append(exc)
                stop.set()
            finally:
                finished[worker.index].set()

        threads = _lend_threads(self.ids)
        try:
            for i, (d, thread) in enumerate(zip(self.ids, threads)):
                thread.submit(functools.partial(guarded, Worker(i, d)))
            try:
                for event in finished:
                    while not event.wait(0.1):  # short waits: Ctrl-C reaches this thread
                        pass
            except KeyboardInterrupt:
                stop.set()
                for event in finished:
                    event.wait()
                raise
        finally:
            _return_threads(self.ids, threads)
        if errors:
            raise errors[0]


class _WorkerThread:
    """A long-lived thread that runs the callables handed to it, in order.

    CuPy keeps a cache of cuFFT plans per thread: a worker thread made for
    one call would build its plans again and tear them down at its end
    (tens of milliseconds for FDK's filter); one kept between calls finds
    them ready, as the single-GPU path does in the caller's thread."""

    def __init__(self, device: int, number: int):
        self.number = number
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._loop, daemon=True, name=f"leveret-gpu{device}-{number}").start()

    def submit(self, task: Callable) -> None:
        self._tasks.put(task)

    def _loop(self) -> None:
        while True:
            self._tasks.get()()


_threads_lock = threading.Lock()
_idle_threads: dict[int, list] = {}  # GPU id -> idle worker threads as (number, thread), lowest first
_threads_made: dict[int, int] = {}  # GPU id -> worker threads made for it


def _lend_threads(ids) -> list:
    """One idle worker thread per entry of ``ids`` (a GPU's threads lent
    lowest-numbered first, so a repeated call runs each worker in the thread
    that ran it before); new threads where a GPU has too few idle ones."""
    lent = []
    with _threads_lock:
        for d in ids:
            idle = _idle_threads.setdefault(d, [])
            if not idle:
                _threads_made[d] = _threads_made.get(d, 0) + 1
                idle.append((_threads_made[d], _WorkerThread(d, _threads_made[d])))
            lent.append(idle.pop(0))
    return [thread for _, thread in lent]


def _return_threads(ids, threads) -> None:
    with _threads_lock:
        for d, thread in zip(ids, threads):
            _idle_threads[d].append((thread.number, thread))
            _idle_threads[d].sort(key=lambda entry: entry[0])


def _check_chunks(chunks) -> list:
    chunks = [(int(a), int(b)) for a, b in chunks]
    for a, b in chunks:
        if not a < b:
            raise ValueError(f"chunks: expected ranges with start < stop, got ({a}, {b})")
    return chunks


def work_queue(items) -> queue.SimpleQueue:
    """A queue of ``items`` that several workers take from (:func:`take`)."""
    q: queue.SimpleQueue = queue.SimpleQueue()
    for c in items:
        q.put(c)
    return q


def take(q: queue.SimpleQueue):
    """The next item of ``q``, or None when it is empty."""
    try:
        return q.get_nowait()
    except queue.Empty:
        return None


class Worker:
    """What ``work`` learns about the worker calling it.

    Attributes
    ----------
    index : int
        Position in the device set (0 .. len - 1).
    device : int
        The GPU id (current while ``work`` runs).
    limit : int or None
        The largest range this worker runs after an out-of-memory error
        (None: no limit yet).
    """

    def __init__(self, index: int, device: int):
        self.index, self.device, self.limit = index, device, None

    def __repr__(self) -> str:
        return f"Worker(index={self.index}, device={self.device}, limit={self.limit})"


def run_shrinking(worker: Worker, chunk, work, stop, align: int = 1) -> list:
    """Run ``work(worker, start, stop)`` over ``chunk`` in pieces of at most
    ``worker.limit``; on an out-of-memory error halve the piece (cutting at
    multiples of ``align``), lower the limit and retry (what
    :meth:`DeviceSet.run` does with each range). Returns [(start, stop,
    result)]; stops early once the event ``stop`` is set."""
    done = []
    pending = _pieces(chunk, worker.limit, align)
    while pending:
        if stop.is_set():
            break
        a, b = pending.pop(0)
        if worker.limit is not None and b - a > worker.limit and len(_pieces((a, b), worker.limit, align)) > 1:
            pending[:0] = _pieces((a, b), worker.limit, align)  # cut at an earlier, larger limit
            continue
        try:
            done.append((a, b, work(worker, a, b)))
        except Exception as exc:
            pieces = _pieces((a, b), (b - a + 1) // 2, align)
            if not out_of_memory(exc) or len(pieces) < 2:
                raise
            _release_memory(worker.device)
            worker.limit = max(hi - lo for lo, hi in pieces)
            pending[:0] = pieces
    return done


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says the GPU ran out of memory: CuPy's pool
    (``cupy.cuda.memory.OutOfMemoryError``, a MemoryError), the driver
    (``CUDA_ERROR_OUT_OF_MEMORY``, ``cudaErrorMemoryAllocation``) or a cuFFT
    plan (``CUFFT_ALLOC_FAILED``)."""
    if isinstance(exc, MemoryError):
        return True
    text = str(exc)
    return any(code in text for code in ("CUDA_ERROR_OUT_OF_MEMORY", "cudaErrorMemoryAllocation", "CUFFT_ALLOC_FAILED"))


def _pieces(chunk, limit: int | None, align: int = 1) -> list:
    """``chunk`` in consecutive ranges of at most ``limit`` elements (rounded
    up to a multiple of ``align``), as equal as possible, cut only at
    multiples of ``align``."""
    a, b = chunk
    if limit is None or b - a <= limit:
        return [(a, b)]
    limit = -(-limit // align) * align
    k = -(-(b - a) // limit)
    inner = (np.linspace(a, b, k + 1)[1:-1] / align).round().astype(int) * align
    edges = sorted({a, b, *(int(e) for e in inner if a < e < b)})
    return [(lo, hi) for lo, hi in zip(edges[:-1], edges[1:])]


def blocks(n: int, parts: int) -> list[tuple[int, int]]:
    """``range(n)`` in ``min(n, parts)`` contiguous ranges of near-equal size, in order."""
    parts = max(1, min(int(n), int(parts)))
    edges = np.linspace(0, n, parts + 1).round().astype(int)
    return [(int(lo), int(hi)) for lo, hi in zip(edges[:-1], edges[1:])]


def aligned_blocks(n: int, parts: int, align: int) -> list[tuple[int, int]]:
    """``range(n)`` in at most ``parts`` contiguous ranges of near-equal size
    whose boundaries are multiples of ``align`` (except the end, ``n``)."""
    tiles = -(-int(n) // int(align))
    return [(lo * align, min(int(n), hi * align)) for lo, hi in blocks(tiles, parts)]


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return int(value)


def _worker_context(device: int, budget=None):
    """The GPU ``device`` current and a lent non-blocking stream
    (:meth:`leveret.cuda.device_state.DeviceState.lend_streams`: the next
    call's worker gets it back, and with it the memory its allocations left
    cached) the current stream; allocations under ``budget`` (a
    ``MemoryBudget``) where one is given."""
    import cupy

    from . import device_state

    stack = contextlib.ExitStack()
    stack.enter_context(cupy.cuda.Device(device))
    (stream,) = stack.enter_context(device_state.lend_streams(1))
    stack.enter_context(stream)
    if budget is not None:
        stack.enter_context(budget.active())
    return stack


def _release_memory(device: int) -> None:
    """Give the memory pool's unused blocks on ``device`` back before a retry."""
    import cupy

    with cupy.cuda.Device(device):
        cupy.cuda.get_current_stream().synchronize()
        cupy.get_default_memory_pool().free_all_blocks()


def for_backend(devices, backend: str) -> DeviceSet | None:
    """:func:`parse`, then refuse a device set for a call whose backend is not
    CUDA (``backend`` resolved): the one check of ``devices=`` that every
    operator and algorithm taking it makes."""
    devices = parse(devices)
    if devices is not None and backend != "cuda":
        raise ValueError(
            f"devices: runs on CUDA GPUs, but the backend is {backend!r}; use backend='cuda' or devices=None"
        )
    return devices


def parse(devices) -> DeviceSet | None:
    """The ``devices=`` argument as a :class:`DeviceSet`, or None for the current device.

    ``None`` -> None; ``"all"`` -> every visible GPU; a list of ids -> a
    DeviceSet (ValueError naming ``devices`` for an id this host does not
    have, a repeated id, or no GPU at all); a DeviceSet -> itself.
    """
    if devices is None or isinstance(devices, DeviceSet):
        return devices
    if isinstance(devices, str):
        if devices.lower() != ALL:
            raise ValueError(f"devices: expected None, 'all', a list of GPU ids or a DeviceSet, got {devices!r}")
        count = visible_device_count()
        if count == 0:
            raise ValueError(f"devices: 'all' needs a CUDA GPU: {_no_gpu_reason()}")
        return DeviceSet(range(count))
    if isinstance(devices, numbers.Integral) and not isinstance(devices, bool):
        return DeviceSet([devices])
    return DeviceSet(devices)


# -- moving arrays between GPUs ------------------------------------------------------------------

_peer_lock = threading.Lock()
_peer_checked: dict = {}


def _peer_access(dst: int, src: int) -> bool:
    """Whether ``dst`` can read ``src``'s memory directly; enables it (once) where it can."""
    import cupy

    key = (dst, src)
    with _peer_lock:
        if key not in _peer_checked:
            ok = dst != src and bool(cupy.cuda.runtime.deviceCanAccessPeer(dst, src))
            if ok:
                with cupy.cuda.Device(dst):
                    try:
                        cupy.cuda.runtime.deviceEnablePeerAccess(src)
                    except cupy.cuda.runtime.CUDARuntimeError as exc:
                        # already enabled (by this process's other code): fine
                        if "AlreadyEnabled" not in str(exc) and "already" not in str(exc).lower():
                            ok = False
            _peer_checked[key] = ok
        return _peer_checked[key]


def copy_to(dst, src) -> None:
    """``dst[...] = src`` for C-contiguous CuPy arrays of one shape and dtype on
    any two GPUs; returns when the copy is done. ``src`` must be complete (the
    stream that wrote it synchronised)."""
    import cupy

    if dst.shape != src.shape or dst.dtype != src.dtype:
        raise ValueError(f"src: expected shape {dst.shape} and dtype {dst.dtype}, got {src.shape} {src.dtype}")
    if not (dst.flags.c_contiguous and src.flags.c_contiguous):
        raise ValueError("src: expected C-contiguous arrays")
    if dst.size == 0:
        return
    d, s = dst.device.id, src.device.id
    with cupy.cuda.Device(d):
        stream = cupy.cuda.get_current_stream()
        if d == s:
            cupy.cuda.runtime.memcpyAsync(
                dst.data.ptr, src.data.ptr, dst.nbytes, cupy.cuda.runtime.memcpyDeviceToDevice, stream.ptr
            )
        else:
            _peer_access(d, s)  # direct where possible; the driver stages through the host otherwise
            cupy.cuda.runtime.memcpyPeerAsync(dst.data.ptr, d, src.data.ptr, s, dst.nbytes, stream.ptr)
        stream.synchronize()


def contiguous(arr):
    """The CuPy array ``arr`` C-contiguous (itself if it is), made so on its own GPU."""
    import cupy

    if arr.flags.c_contiguous:
        return arr
    with cupy.cuda.Device(arr.device.id):
        out = cupy.ascontiguousarray(arr)
        cupy.cuda.get_current_stream().synchronize()
    return out


def to_device(arr, device: int):
    """A copy of the CuPy array ``arr`` on GPU ``device`` (``arr`` itself when it is already there)."""
    import cupy

    if arr.device.id == device:
        return arr
    arr = contiguous(arr)
    with cupy.cuda.Device(device):
        out = cupy.empty(arr.shape, arr.dtype)
    copy_to(out, arr)
    return out


def reduce_sum(parts: Sequence, device: int):
    """The sum of CuPy arrays living on any GPUs, on ``device``, added in the
    order of ``parts`` (``((p0 + p1) + p2) + ...``): a fixed order, so the
    result does not depend on timing. The parts must be complete; the sum is
    queued on ``device``'s current stream."""
    import cupy

    if not parts:
        raise ValueError("parts: expected at least one array")
    with cupy.cuda.Device(device):
        first = to_device(parts[0], device)
        total = cupy.array(first, copy=True) if first is parts[0] else first
        scratch = None
        for p in parts[1:]:
            if p.device.id == device:
                total += p
                continue
            if scratch is None:
                scratch = cupy.empty(total.shape, total.dtype)
            copy_to(scratch, contiguous(p))
            total += scratch
    return total


# -- one dispatch for the operators on several GPUs ------------------------------------------------


def _is_cupy(arr) -> bool:
    return type(arr).__module__.startswith("cupy")


def settled(arr):
    """``arr`` ready for other streams and GPUs to read: a CuPy array's GPU
    synchronised (the work that wrote it is done); NumPy as it is."""
    if _is_cupy(arr):
        import cupy

        with cupy.cuda.Device(arr.device.id):
            cupy.cuda.get_current_stream().synchronize()
    return arr


def on_worker(part, worker: "Worker"):
    """``part`` (NumPy, or CuPy on any GPU, complete) as a CuPy array on the worker's GPU."""
    if _is_cupy(part):
        return to_device(contiguous(part), worker.device)
    import cupy

    return cupy.asarray(part)


def store(dst, res) -> None:
    """``dst[...] = res``, ``res`` a complete CuPy array on any GPU: into NumPy
    by a download, into a contiguous CuPy array by a copy between the GPUs,
    into a strided one on ``dst``'s own GPU."""
    import cupy

    if not _is_cupy(dst):
        if dst.flags.c_contiguous:
            res.get(out=dst)
        else:
            dst[...] = res.get()
    elif dst.flags.c_contiguous:
        copy_to(dst, res)
    else:
        res = to_device(res, dst.device.id)
        with cupy.cuda.Device(dst.device.id):
            dst[...] = res
            cupy.cuda.get_current_stream().synchronize()


def map_ranges(devices: DeviceSet, ranges, compute: Callable, out, *, align: int = 1):
    """``out[a:b] = compute(worker, a, b)`` for every range ``(a, b)`` of
    ``ranges``, dealt to ``devices`` from one queue (:meth:`DeviceSet.run`;
    a range that runs out of memory is halved at multiples of ``align``).
    ``compute`` returns a CuPy array on the worker's GPU; ``out`` is NumPy or
    CuPy, its earlier writers done. Returns ``out``."""
    import cupy

    def work(worker, a, b):
        res = compute(worker, a, b)
        cupy.cuda.get_current_stream().synchronize()
        store(out[a:b], res)

    devices.run(ranges, work, align=align)
    return out


def sum_blocks(devices: DeviceSet, n: int, compute: Callable, out):
    """``out = sum_i compute(worker_i, a_i, b_i)``: worker ``i`` takes the
    ``i``-th contiguous block of ``range(n)`` (a block split after running out
    of memory adds its pieces), and the workers' partial results are added in
    worker order on one GPU (:func:`reduce_sum`): a fixed order. ``out`` is
    NumPy or CuPy, of the partials' size. Returns ``out``."""
    import cupy

    partials: dict = {}

    def work(worker, a, b):
        part = compute(worker, a, b)
        if worker.index in partials:
            partials[worker.index] += part
        else:
            partials[worker.index] = part
        cupy.cuda.get_current_stream().synchronize()

    devices.run(blocks(n, len(devices)), work, fixed=True)
    parts = [partials[i] for i in sorted(partials)]
    home = out.device.id if _is_cupy(out) else devices.ids[0]
    with cupy.cuda.Device(home):
        total = reduce_sum(parts, home).reshape(out.shape)
        if _is_cupy(out):
            out[...] = total
        else:
            total.get(out=out)
    return out
