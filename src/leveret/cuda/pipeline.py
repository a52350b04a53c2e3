"""Streaming chunks through the GPU with transfers hidden behind compute.

A job is a list of chunks and three plain functions:

    load(chunk, host_buffer)          fill a pinned host buffer (worker thread)
    compute(chunk, dev_in, dev_out)   device work on the compute stream
    store(chunk, host_buffer)         take a finished pinned output (worker thread)

A job whose results stay on the device (FDK accumulating one volume) passes
``out_shape=None``: no output buffers, ``dev_out`` is None, nothing is stored.
A job whose host data already lies in pinned memory passes ``source`` (and
``target``) instead of ``load`` (and ``store``): each chunk is then copied
between its place there and the device directly, by one strided copy, with
no host gather or scatter and no pinned buffers of the pipeline's own.

While chunk c is computed, chunk c+1 is gathered on the host and copied in,
and chunk c-1 is copied out and stored. Host-to-device and device-to-host
copies run on two streams of their own (the GPU's two copy engines work at the
same time), the kernels on a third. Two pinned and two device buffers per
direction are reused throughout; CUDA events order every reuse, so no buffer
is overwritten while a copy or kernel still reads it.

``stream_chunks(..., stats=d)`` fills the dict ``d`` with the call's time
split (``STATS_KEYS``, seconds unless noted): ``wall``; ``setup`` (buffer
allocation, part of wall); ``load`` and ``store`` (host gathers/scatters,
summed over the worker threads' calls); ``h2d``, ``compute`` and ``d2h`` (GPU
time of each stream, summed from CUDA events); ``chunks`` (a count). When
transfers hide behind compute, ``wall`` is close to ``compute`` plus one
chunk's load, copy in, copy out and store (the pipeline's fill and drain).
``leveret.fbp`` and ``leveret.fdk`` pass their ``stats`` argument through;
on several GPUs they report :func:`merge_stats` of their pipelines.

Results that stay on the device while they are built (FDK's volume) come
back by :class:`SlabDownload`: slab by slab, as the kernels finishing each
are queued, through the pinned buffers of a :class:`Staging` (which several
downloads may share); pinned host memory comes from :func:`empty_pinned`.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Sequence

import numpy as np

_COPY_THREADS = max(1, min(8, (os.cpu_count() or 2) // 2))
_copy_pool: ThreadPoolExecutor | None = None
_copy_pool_size = 0
_copy_pool_lock = threading.Lock()
STATS_KEYS = ("wall", "setup", "chunks", "load", "store", "h2d", "compute", "d2h")


def add_stats(total: dict, part: dict) -> None:
    """``total[key] += part[key]`` for every key of ``part`` (a call's split
    over several ``stream_chunks`` runs, e.g. FDK's slabs)."""
    for key, value in part.items():
        total[key] = total.get(key, 0) + value


def merge_stats(splits: Iterable[dict], wall: float) -> dict:
    """One call's time split from the splits of its pipelines run on several
    GPUs (``leveret.cuda.devices``; a pipeline per slab or per GPU): every key
    summed over them, except ``wall``, the whole call's (``wall``), and
    ``busy``, the sum of the pipelines' own walls. ``busy`` over ``wall``
    times the number of GPUs is how busy they were; the rest is the time
    they waited (for the queue's last ranges, set-up outside the pipelines)."""
    total: dict = {}
    for split in splits:
        add_stats(total, split)
    total["busy"] = total.pop("wall", 0.0)
    total["wall"] = wall
    return total


def copy_threads_for(pipelines: int) -> None:
    """Size the pool behind :func:`parallel_copy` so that ``pipelines``
    concurrent pipelines (one per GPU, ``leveret.cuda.devices``) each get the
    threads one pipeline has, up to the host's cores: the host copies of one
    GPU would otherwise take threads from the others'. Never shrinks."""
    global _copy_pool, _copy_pool_size
    want = max(_COPY_THREADS, min(_COPY_THREADS * max(1, int(pipelines)), os.cpu_count() or 1))
    with _copy_pool_lock:
        if _copy_pool is not None and _copy_pool_size >= want:
            return
        # The old pool is dropped, not shut down: a thread that took it before the swap may still
        # submit to it; its idle threads end when it is collected.
        _copy_pool = ThreadPoolExecutor(want, thread_name_prefix="leveret-copy")
        _copy_pool_size = want


def parallel_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` split along axis 0 over a few threads.

    One thread copies host memory at a fraction of what the memory system
    gives; NumPy releases the GIL while copying, so threads add up. This is
    what lets host-side gathers and scatters hide behind the GPU.
    """
    n = dst.shape[0]
    parts = min(_COPY_THREADS, n)
    if parts <= 1 or dst.nbytes < (16 << 20):
        dst[...] = src
        return
    if _copy_pool is None:
        copy_threads_for(1)
    pool = _copy_pool  # read once: another thread may swap in a larger pool
    bounds = np.linspace(0, n, parts + 1).astype(int)
    futures = [pool.submit(dst[a:b].__setitem__, Ellipsis, src[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    for f in futures:
        f.result()


def touch_pages(array: np.ndarray, pool: ThreadPoolExecutor | None = None, parts: int | None = None) -> list:
    """Futures writing one element of each page of the contiguous ``array``,
    in ``parts`` pieces on ``pool`` (default: the copy threads, a piece each):
    a fresh allocation's first writes are page faults, which one thread takes
    several times longer to serve than the memory system needs."""
    flat = array.reshape(-1)
    step = max(1, 4096 // flat.itemsize)
    if pool is None:
        if _copy_pool is None:
            copy_threads_for(1)
        pool, parts = _copy_pool, _COPY_THREADS
    # pieces start on a page boundary; what lies past the last boundary faults at its first write
    bounds = np.linspace(0, flat.size, parts + 1).astype(np.int64) // step * step
    return [pool.submit(flat[a:b:step].fill, 0) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


# Page-locked host memory for asynchronous transfers. cudaHostAlloc (CuPy's
# pinned memory) locks pages one by one in the driver; a NumPy allocation
# whose pages the copy threads fault in, then cudaHostRegister locks, is
# ready an order of magnitude sooner (docs/performance.md, "Streamed FDK").
# Blocks (sizes rounded up to PINNED_ROUND bytes) are kept for reuse, as
# CuPy's pinned memory pool keeps its own.
PINNED_ROUND = 1 << 20
_pinned_free: dict[int, list] = {}
_pinned_lock = threading.Lock()
_register_failed = False


class _PinnedBlock:
    """``nbytes`` of NumPy memory locked with cudaHostRegister, portable (any
    GPU's copy engines may read and write it)."""

    def __init__(self, nbytes: int):
        import cupy

        self.raw = np.empty(nbytes, np.uint8)
        for touched in touch_pages(self.raw):
            touched.result()
        self.ptr, self.nbytes = self.raw.ctypes.data, nbytes
        cupy.cuda.runtime.hostRegister(self.ptr, nbytes, 1)  # 1: cudaHostRegisterPortable

    def unregister(self) -> None:
        import cupy

        cupy.cuda.runtime.hostUnregister(self.ptr)


class _PinnedOwner:
    """The owner of an :func:`empty_pinned` (or :func:`pinned_array`) array's
    memory (its ``base``, and every view's): when the last of them is gone the
    block goes back to the pool (or is unlocked and freed, ``pooled=False``),
    never while a slice of the array is still in use."""

    def __init__(self, block: _PinnedBlock, shape: tuple, dtype: np.dtype, pooled: bool = True):
        self.block, self.pooled = block, pooled
        self.__array_interface__ = {"shape": shape, "typestr": dtype.str, "data": (block.ptr, False), "version": 3}

    def __del__(self):
        try:
            if not self.pooled:
                self.block.unregister()
                return
            with _pinned_lock:
                _pinned_free.setdefault(self.block.nbytes, []).append(self.block)
        except Exception:  # at interpreter exit the modules, or the CUDA context, may be gone
            pass


def _array_size(shape, dtype) -> tuple[tuple, np.dtype, int]:
    """``shape`` as a tuple of ints, ``dtype`` as a NumPy dtype, and the bytes (at least one) they take."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(n) for n in shape)
    return shape, dtype, max(1, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)


def empty_pinned(shape, dtype=np.float32) -> np.ndarray:
    """An uninitialised NumPy array in page-locked (pinned) host memory, which
    GPUs copy to and from asynchronously, from a pool of blocks kept for reuse
    (:func:`free_pinned_blocks` hands them back). Where the driver refuses to
    register host memory, CuPy's pinned memory (``cupyx.empty_pinned``)."""
    global _register_failed
    shape, dtype, nbytes = _array_size(shape, dtype)
    size = -(-nbytes // PINNED_ROUND) * PINNED_ROUND
    with _pinned_lock:
        free = _pinned_free.get(size)
        block = free.pop() if free else None
    if block is None and not _register_failed:
        import cupy

        try:
            block = _PinnedBlock(size)
        except cupy.cuda.runtime.CUDARuntimeError:
            _register_failed = True
    if block is None:
        import cupyx

        return cupyx.empty_pinned(shape, dtype)
    return np.asarray(_PinnedOwner(block, shape, dtype))


def pinned_array(shape, dtype=np.float32) -> np.ndarray | None:
    """An uninitialised NumPy array in page-locked host memory of its own,
    unlocked and freed with its last view (never pooled: for large arrays
    that live through one call, such as FDK's filtered views), or None where
    the driver refuses to register host memory."""
    shape, dtype, nbytes = _array_size(shape, dtype)
    if _register_failed:
        return None
    import cupy

    try:
        block = _PinnedBlock(nbytes)
    except cupy.cuda.runtime.CUDARuntimeError:
        return None
    return np.asarray(_PinnedOwner(block, shape, dtype, pooled=False))


def register_host(array: np.ndarray):
    """Lock the pages of the contiguous host ``array`` (memory allocated elsewhere,
    such as a shared-memory map) so that GPUs copy from and to it asynchronously;
    returns the call that unlocks them (the array must live until then), or None
    where the driver refuses to register host memory."""
    import cupy

    if _register_failed or not array.flags.c_contiguous or array.nbytes == 0:
        return None
    ptr = array.ctypes.data
    try:
        cupy.cuda.runtime.hostRegister(ptr, array.nbytes, 1)  # 1: cudaHostRegisterPortable
    except cupy.cuda.runtime.CUDARuntimeError:
        return None
    return lambda: cupy.cuda.runtime.hostUnregister(ptr)


def upload_pinned(host, stream):
    """``host`` (NumPy) on the device through pinned memory, queued on
    ``stream``: a pageable upload would make the host wait for the stream's
    earlier work. Returns the device array and the pinned copy, which must
    live until the copy is done."""
    import cupy

    pinned = empty_pinned(host.shape, host.dtype)
    pinned[...] = host
    device = cupy.empty(host.shape, host.dtype)
    device.set(pinned, stream=stream)
    return device, pinned


def is_pinned(array) -> bool:
    """Whether ``array`` is (a view of) an array from :func:`empty_pinned` or
    :func:`pinned_array` in page-locked memory."""
    base = array
    while base is not None and not isinstance(base, _PinnedOwner):
        base = getattr(base, "base", None)
    return base is not None


def free_pinned_blocks() -> None:
    """Unlock and free the pooled blocks of :func:`empty_pinned` that no array uses."""
    with _pinned_lock:
        blocks = [b for free in _pinned_free.values() for b in free]
        _pinned_free.clear()
    for block in blocks:
        block.unregister()


def _copy_async(dst_ptr: int, src_ptr: int, nbytes: int, kind, stream) -> None:
    """cudaMemcpyAsync between a pinned host buffer and device memory on ``stream``.
    Asynchronous whatever the CuPy version: ndarray.get (blocking by default in
    recent CuPy) would hold the loop until the copy and the kernels before it
    are done, so the next chunk's work would be queued late."""
    import cupy

    cupy.cuda.runtime.memcpyAsync(dst_ptr, src_ptr, nbytes, kind, stream.ptr)


# The largest pitch cudaMemcpy2DAsync takes on current GPUs (cudaDevAttrMaxPitch).
_MAX_PITCH = (1 << 31) - 1


def _copy_rows_async(device_ptr: int, host: np.ndarray, kind, stream) -> None:
    """Copy between contiguous device memory at ``device_ptr`` and the pinned
    ``host`` array on ``stream``. ``host``'s first axis may be strided (a
    chunk of views of a larger array, some rows of each) where each item along
    it is C-contiguous (:func:`_pinned_part` checks): one strided copy then
    moves them all, which the copy engine runs at the speed of a contiguous
    one for items of more than a few KB."""
    import cupy

    runtime = cupy.cuda.runtime
    to_device = kind == runtime.memcpyHostToDevice

    def copy(host_ptr, dev_ptr, nbytes):
        dst, src = (dev_ptr, host_ptr) if to_device else (host_ptr, dev_ptr)
        _copy_async(dst, src, nbytes, kind, stream)

    if host.size == 0:
        return
    if host.flags.c_contiguous:
        copy(host.ctypes.data, device_ptr, host.nbytes)
        return
    width, pitch, height = host[0].nbytes, host.strides[0], host.shape[0]
    if pitch > _MAX_PITCH:  # beyond what a strided copy takes: the items one by one
        for i in range(height):
            copy(host.ctypes.data + i * pitch, device_ptr + i * width, width)
    elif to_device:
        runtime.memcpy2DAsync(device_ptr, width, host.ctypes.data, pitch, width, height, kind, stream.ptr)
    else:
        runtime.memcpy2DAsync(host.ctypes.data, pitch, device_ptr, width, width, height, kind, stream.ptr)


def _pinned_part(name: str, part: np.ndarray, shape: tuple, dtype) -> np.ndarray:
    """``part``, checked to be a chunk's host data that the GPU can copy directly."""
    if not is_pinned(part):
        raise ValueError(f"{name}: a chunk's array must lie in pinned memory (pipeline.pinned_array)")
    if part.shape != tuple(shape) or part.dtype != np.dtype(dtype):
        raise ValueError(
            f"{name}: a chunk's array is {part.dtype} of shape {part.shape}, "
            f"the chunk {np.dtype(dtype)} of shape {tuple(shape)}"
        )
    if (
        not part.flags.c_contiguous
        and part.size
        and (not part[0].flags.c_contiguous or part.strides[0] < part[0].nbytes)
    ):
        raise ValueError(
            f"{name}: a chunk's array must have each item along its first axis C-contiguous, "
            f"one after another (strides {part.strides})"
        )
    return part


def stream_chunks(
    chunks: Sequence | Iterable,
    *,
    in_shape: Callable,
    out_shape: Callable | None,
    compute: Callable,
    load: Callable | None = None,
    store: Callable | None = None,
    source: Callable | None = None,
    target: Callable | None = None,
    in_dtype=np.float32,
    out_dtype=np.float32,
    on_done: Callable | None = None,
    stats: dict | None = None,
    largest=None,
    in_elements: int = 0,
) -> None:
    """Run ``compute`` over ``chunks`` with loads, uploads, downloads and
    stores overlapped (see the module docstring) on the current device.

    ``chunks`` is a sequence, or an iterator whose items are taken one ahead
    of the chunk being computed (several GPUs' pipelines pulling from one
    queue, ``leveret.cuda.devices``); then ``largest`` names the chunk whose
    shapes size the buffers (no chunk may be larger). ``stats``: a dict to
    fill with the time split (``STATS_KEYS``), or None. ``in_elements``: the
    least size of the input buffers, in elements: calls whose chunks differ
    in size pass their largest, so that the pinned memory pool (which
    reuses a block of the same size only) hands the same buffers to each.

    ``source`` (instead of ``load``): ``source(chunk)`` is the chunk's input
    in pinned memory (:func:`is_pinned`), of ``in_shape(chunk)``, whose first
    axis may be strided if each item along it is C-contiguous; it is
    uploaded from there. ``target`` (instead of ``store``): the same for
    the chunk's output, downloaded into its place."""
    import cupy

    from . import device_state

    if (load is None) == (source is None):
        raise TypeError("stream_chunks takes one of load and source")
    if out_shape is not None and (store is None) == (target is None):
        raise TypeError("stream_chunks with outputs takes one of store and target")
    if largest is None:
        chunks = list(chunks)
        if not chunks:
            return
        sizing = chunks
    else:
        sizing = [largest]
    chunks = iter(chunks)
    first = next(chunks, None)
    if first is None:
        return
    wall0 = time.perf_counter()
    n_in = max([int(in_elements)] + [int(np.prod(in_shape(c))) for c in sizing])
    pin_in = [empty_pinned(n_in, in_dtype) for _ in range(2)] if source is None else None
    dev_in = [cupy.empty(n_in, in_dtype) for _ in range(2)]
    has_out = out_shape is not None
    n_out = max(int(np.prod(out_shape(c))) for c in sizing) if has_out else 0
    pin_out = [empty_pinned(n_out, out_dtype) for _ in range(2)] if has_out and target is None else None
    dev_out = [cupy.empty(n_out, out_dtype) for _ in range(2)] if has_out else None
    # host -> device, device -> host, kernels: lent, so that a repeated call finds its cached blocks
    with device_state.lend_streams(3) as (copy_stream, d2h_stream, compute_stream):
        setup = time.perf_counter() - wall0  # pinned and device buffers (pools make repeats cheap)
        host_seconds = {"load": 0.0, "store": 0.0}
        spans: dict = {"h2d": [], "compute": [], "d2h": []}  # (start, stop) CUDA events

        def span(kind, stream):
            start = cupy.cuda.Event()
            start.record(stream)
            spans[kind].append(start)

        h2d_done: list = [None, None]  # pinned input b may be refilled after this
        compute_done: list = [None, None]  # device input b may be overwritten after this
        d2h_done: list = [None, None]  # device output b may be overwritten after this

        def view(buf, shape):
            return buf[: int(np.prod(shape))].reshape(shape)

        def load_after(event, chunk, buf):
            if event is not None:
                event.synchronize()
            t0 = time.perf_counter()
            load(chunk, view(buf, in_shape(chunk)))
            host_seconds["load"] += time.perf_counter() - t0  # one loader thread: no race

        def store_after(event, chunk, buf):
            event.synchronize()
            t0 = time.perf_counter()
            store(chunk, view(buf, out_shape(chunk)))
            host_seconds["store"] += time.perf_counter() - t0

        def host_in(chunk, buf):
            """The chunk's input in pinned memory: the pipeline's buffer, or its place in ``source``."""
            if source is None:
                return view(buf, in_shape(chunk))
            return _pinned_part("source", source(chunk), in_shape(chunk), in_dtype)

        def host_out(chunk, buf):
            if target is None:
                return view(buf, out_shape(chunk))
            return _pinned_part("target", target(chunk), out_shape(chunk), out_dtype)

        with ThreadPoolExecutor(1) as loader, ThreadPoolExecutor(1) as storer:
            loading = [loader.submit(load_after, None, first, pin_in[0]) if source is None else None, None]
            storing: list = [None, None]
            chunk, c = first, 0
            while chunk is not None:
                b = c % 2
                following = next(chunks, None)
                if loading[b] is not None:
                    loading[b].result()
                d_in = view(dev_in[b], in_shape(chunk))
                if compute_done[b] is not None:
                    copy_stream.wait_event(compute_done[b])
                span("h2d", copy_stream)
                _copy_rows_async(
                    d_in.data.ptr,
                    host_in(chunk, None if pin_in is None else pin_in[b]),
                    cupy.cuda.runtime.memcpyHostToDevice,
                    copy_stream,
                )
                h2d_done[b] = copy_stream.record()
                spans["h2d"].append(h2d_done[b])
                if following is not None and source is None:
                    loading[1 - b] = loader.submit(load_after, h2d_done[1 - b], following, pin_in[1 - b])

                d_out = view(dev_out[b], out_shape(chunk)) if has_out else None
                compute_stream.wait_event(h2d_done[b])
                if d2h_done[b] is not None:
                    compute_stream.wait_event(d2h_done[b])
                span("compute", compute_stream)
                with compute_stream:
                    compute(chunk, d_in, d_out)
                compute_done[b] = compute_stream.record()
                spans["compute"].append(compute_done[b])
                if not has_out:
                    if on_done is not None:
                        on_done(chunk)
                    chunk, c = following, c + 1
                    continue

                if storing[b] is not None:
                    storing[b].result()  # pinned output b is free again
                d2h_stream.wait_event(compute_done[b])
                span("d2h", d2h_stream)
                _copy_rows_async(
                    d_out.data.ptr,
                    host_out(chunk, None if pin_out is None else pin_out[b]),
                    cupy.cuda.runtime.memcpyDeviceToHost,
                    d2h_stream,
                )
                d2h_done[b] = d2h_stream.record()
                spans["d2h"].append(d2h_done[b])
                if target is None:
                    storing[b] = storer.submit(store_after, d2h_done[b], chunk, pin_out[b])
                if on_done is not None:
                    on_done(chunk)
                chunk, c = following, c + 1
            for f in storing:
                if f is not None:
                    f.result()
            compute_stream.synchronize()
        d2h_stream.synchronize()
        if stats is None:
            return
        stats.update({"wall": time.perf_counter() - wall0, "setup": setup, "chunks": c, **host_seconds})
        for kind, events in spans.items():
            stats[kind] = sum(cupy.cuda.get_elapsed_time(a, b) for a, b in zip(events[::2], events[1::2])) * 1e-3


def ranges(n: int, step: int) -> list[tuple[int, int]]:
    """``range(n)`` in consecutive (start, stop) ranges of ``step`` (the last shorter)."""
    return [(k, min(n, k + step)) for k in range(0, n, step)]


# Downloads of a device volume into NumPy (fdk's slabs and boxes): a
# download's own staging holds STAGING_BUFFERS blocks of STAGING_BYTES
STAGING_BUFFERS = 4
STAGING_BYTES = 64 << 20


class Staging:
    """Pinned buffers that device->host transfers land in, and the threads
    that copy each landed buffer into its NumPy destination and give it back.

    At most ``capacity`` bytes of buffers are in use at a time (one buffer
    larger than that when none is). One staging may serve the downloads of
    many slabs (``fdk``'s workers share one): a slab's download then
    returns as soon as its transfers have landed, its device memory free for
    the next slab, while its copies into NumPy run beside the next slab's
    work; :meth:`drain` waits for them all. The destinations' pages are
    faulted in ahead of the copies (:meth:`touch`) by background threads."""

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self._used = 0
        self._room = threading.Condition()
        self._closed = threading.Event()
        self._copies: list = []
        self._copier = ThreadPoolExecutor(2, thread_name_prefix="leveret-download")
        self._n_touch = max(1, _COPY_THREADS // 2)  # beside the copy threads that gather the input
        self._toucher = ThreadPoolExecutor(self._n_touch, thread_name_prefix="leveret-touch")

    def take(self, n: int, dtype, stop: threading.Event):
        """A pinned buffer of ``n`` elements once there is room; None if ``stop``
        or the staging is closed first."""
        nbytes = n * np.dtype(dtype).itemsize
        with self._room:
            while self._used and self._used + nbytes > self.capacity:
                if stop.is_set() or self._closed.is_set():
                    return None
                self._room.wait(0.05)
            if stop.is_set() or self._closed.is_set():
                return None
            self._used += nbytes
        return empty_pinned(n, dtype)

    def _give_back(self, buffer) -> None:
        with self._room:
            self._used -= buffer.nbytes
            self._room.notify_all()

    def touch(self, dst: np.ndarray) -> list:
        """Futures faulting in the pages of the flat array ``dst``, split over the touch threads."""
        return touch_pages(dst, self._toucher, self._n_touch)

    def copy_out(self, dst, buffer, landed, touched) -> None:
        """Copy ``buffer`` into ``dst`` once ``landed`` (a CUDA event) has
        happened and the futures ``touched`` are done; then give it back."""
        future = self._copier.submit(self._copy_out, dst, buffer, landed, touched)
        with self._room:
            self._copies.append(future)

    def _copy_out(self, dst, buffer, landed, touched) -> None:
        try:
            for pages in touched:  # the destination's pages are in before its copy
                pages.result()
            landed.synchronize()
            parallel_copy(dst, buffer[: dst.size].reshape(dst.shape))
        finally:
            self._give_back(buffer)

    def drain(self) -> None:
        """Wait for every copy handed over so far; raise the first failure."""
        while True:
            with self._room:
                if not self._copies:
                    return
                future = self._copies.pop(0)
            future.result()

    def close(self) -> None:
        """Stop the threads (at once for work not yet started)."""
        self._closed.set()
        self._copier.shutdown(wait=True, cancel_futures=True)
        self._toucher.shutdown(wait=True, cancel_futures=True)
        self._copies = []


class SlabDownload:
    """Copies a device volume to NumPy slab by slab, each slab as soon as the
    kernels finishing it are queued: the transfers (on their own stream) and
    the host copies overlap the last slabs' back-projection.

    The transfers go through pinned buffers of a :class:`Staging`, in
    blocks of the slab of at most ``block_bytes`` (default
    ``STAGING_BYTES``): one thread queues them slab after slab, each into a
    buffer as one is free, and the staging's threads copy the landed blocks
    into the NumPy result, while the next blocks land in other buffers.
    Pinning memory takes time in proportion to its size, and locks as much
    host memory, so a download's own staging holds at most
    ``STAGING_BUFFERS`` x ``STAGING_BYTES``; the buffers come back from the
    pinned memory pool (:func:`empty_pinned`) for every later slab and
    call.

    ``staging``: a staging shared with other downloads. :meth:`finish` then
    returns once the transfers have landed (the device volume may be freed),
    and the result is complete after the staging's ``drain``. Without it,
    the download has its own and :meth:`finish` returns the complete result.

    The NumPy result is allocated at once and its pages are touched by
    background threads while the GPU works, slab by slab in download order:
    a fresh array's first writes are page faults, which would otherwise make
    the final copies wait after the GPU has finished; one thread can take
    longer than the GPU's whole run to fault in a large volume, so the pages
    of each slab are split over the touch threads. ``host_out`` may be a box
    of a larger array (``fdk``'s boxes along y), contiguous slice by slice.

    ``alignment``: slabs start on multiples of it (the kernels' z blocks);
    ``n_slabs``: about how many slabs the volume is cut into.
    """

    def __init__(
        self,
        volume,
        alignment: int,
        n_slabs: int = 8,
        host_out=None,
        staging: Staging | None = None,
        block_bytes: int = STAGING_BYTES,
    ):
        import cupy

        nz = volume.shape[0]
        step = max(alignment, -(-nz // n_slabs // alignment) * alignment)
        self.slabs = ranges(nz, step)
        self.volume = volume
        self.device = cupy.cuda.Device().id
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.out = np.empty(volume.shape, volume.dtype) if host_out is None else host_out
        self.block_bytes = int(block_bytes)
        self._own = staging is None
        self.staging = Staging(STAGING_BUFFERS * STAGING_BYTES) if staging is None else staging
        self._blocks = {k0: self._blocks_of(k0, k1) for k0, k1 in self.slabs}
        self._closed = threading.Event()
        self.blocks_sent = 0
        self._landed = None  # the last block's transfer
        # one thread queues the transfers, slab after slab
        self._sender = ThreadPoolExecutor(1, thread_name_prefix="leveret-download")
        self._touched = {
            k0: [f for dst, _ in blocks if dst.ndim == 1 for f in self.staging.touch(dst)]
            for k0, blocks in self._blocks.items()
        }  # a slice that is not contiguous: its copy faults
        self._sent: list = []

    def _blocks_of(self, k0: int, k1: int) -> list:
        """The transfer blocks of slices ``k0:k1``: (host destination, element
        offset in the device volume), each destination contiguous and flat
        (at most ``block_bytes``), or one whole slice where it is not
        contiguous."""
        plane = int(np.prod(self.out.shape[1:]))
        limit = max(1, self.block_bytes // self.out.itemsize)
        runs = self.out[k0:k1]
        if runs.flags.c_contiguous:
            runs = [(runs.reshape(-1), k0 * plane)]
        else:
            runs = [
                (self.out[k].reshape(-1) if self.out[k].flags.c_contiguous else self.out[k], k * plane)
                for k in range(k0, k1)
            ]
        blocks = []
        for dst, start in runs:
            if dst.ndim == 1:
                blocks += [(dst[a:b], start + a) for a, b in ranges(dst.size, limit)]
            else:
                blocks.append((dst, start))
        return blocks

    def queue(self, slab) -> None:
        """Download slices ``slab`` (k0, k1) once the kernels queued so far on
        the current stream have run; returns at once."""
        import cupy

        self._sent.append(self._sender.submit(self._send, slab, cupy.cuda.get_current_stream().record()))

    def _send(self, slab, ready) -> None:
        """Queue the slab's blocks' transfers, each into a staging buffer as
        one is free, and hand each to the staging's copy threads."""
        import cupy

        touched = self._touched.pop(slab[0], [])
        with cupy.cuda.Device(self.device):  # this thread's events on the volume's GPU
            self.stream.wait_event(ready)
            flat = self.volume.reshape(-1)
            for dst, start in self._blocks[slab[0]]:
                buffer = self.staging.take(dst.size, self.out.dtype, self._closed)
                if buffer is None:
                    return
                part = flat[start : start + dst.size]
                _copy_async(
                    buffer.ctypes.data, part.data.ptr, part.nbytes, cupy.cuda.runtime.memcpyDeviceToHost, self.stream
                )
                self.blocks_sent += 1
                self._landed = self.stream.record()
                self.staging.copy_out(dst, buffer, self._landed, touched)

    def finish(self) -> np.ndarray:
        """Wait for the transfers (and, with the download's own staging, the
        copies into the result); returns the result."""
        for f in self._sent:  # every transfer queued, so every copy handed over
            f.result()
        if self._own:
            self.staging.drain()
        elif self._landed is not None:
            self._landed.synchronize()
        return self.out

    def close(self) -> None:
        """Stop the background threads (at once for work not yet started) and
        let go of the buffers: a volume must not stay alive for as long as
        something still holds this object."""
        self._closed.set()
        self._sender.shutdown(wait=True, cancel_futures=True)
        if self._own:
            self.staging.close()
        self.volume = self.out = self.staging = None
        self._touched, self._blocks, self._sent = {}, {}, []
