"""What leveret keeps on each GPU: one :class:`DeviceState` per device.

Everything a call leaves on a GPU for the next call lives in that GPU's
state, never in process-wide variables: the streams lent for a call, the
caches of textures (:mod:`leveret.cuda.texture`), and the constant memory of
the compiled modules. :func:`device_state` finds a GPU's state; each state
is guarded by a lock of its own, so any number of threads may call leveret
on one GPU or on several at once and get what each call made alone gives.

Constant memory (the parallel kernels' angle table, the cone kernels'
matrices) belongs to a module, and CuPy loads a module once per GPU and
process (it memoises modules by source and options): two callers of one
module on one GPU would overwrite each other's tables. :meth:`DeviceState.
constants` lends a module's constant memory to one caller at a time. The
borrower's stream first waits for the kernels the previous borrower queued,
then the borrower writes its tables and queues its kernels on that stream;
giving it back records the event the next borrower waits for. Only the
queuing is serialised on the host; on the GPU, kernels of one module from
several threads run one after another, as kernels that fill the GPU do
anyway.

Two kinds of state are safe as CuPy keeps them: cuFFT plans (cached per
thread and device) and the device memory pool (guarded by its own lock).
Pinned host memory (:mod:`leveret.cuda.pipeline`) is one pool for every GPU,
its blocks registered as portable, guarded by a lock.

A call given a GPU memory budget runs under a :class:`MemoryBudget`: a memory
pool of its own, limited, for every CuPy allocation of the threads that enter
it, and a texture cache of its own, limited: what the call holds on the GPU
cannot exceed the budget, whatever the plan estimated.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable

_registry_lock = threading.Lock()
_states: dict[int, "DeviceState"] = {}
_local = threading.local()  # .budget: the MemoryBudget this thread's call runs under, or None


class _ConstantSlot:
    """One module's constant memory on one GPU: a lock for its borrower and
    the event after the kernels the last borrower queued."""

    def __init__(self):
        self.lock = threading.RLock()
        self.released = None


class DeviceState:
    """What leveret keeps on GPU ``device`` between calls.

    Attributes
    ----------
    device : int
        The GPU id, as CuPy numbers it.
    lock : threading.RLock
        Guards the caches (:meth:`cache`) of this GPU.
    """

    def __init__(self, device: int):
        self.device = int(device)
        self.lock = threading.RLock()
        self._caches: dict[str, object] = {}
        self._slots: dict[tuple, _ConstantSlot] = {}
        self._idle_streams: list = []  # (number, stream), lowest number first
        self._streams_made = 0

    def __repr__(self) -> str:
        return f"DeviceState(device={self.device}, streams={self._streams_made}, caches={sorted(self._caches)})"

    # -- streams ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def lend_streams(self, count: int = 1):
        """``count`` non-blocking streams of this GPU for the ``with`` block.

        Streams are kept between calls: CuPy's memory pool keeps a block freed
        on a stream for later allocations on that same stream, so a call that
        borrows the streams of the call before it finds that call's buffers
        cached (fresh streams would leave them in arenas nobody allocates
        from again). Streams are lent lowest-numbered first, so a repeated
        call takes the same streams in the same roles; two blocks open at
        once (two threads, or nested) never share a stream. A stream returned
        with work still queued is handed out as it is: the next borrower's
        work queues behind it.
        """
        import cupy

        with self.lock:
            taken, self._idle_streams[:] = self._idle_streams[:count], self._idle_streams[count:]
            while len(taken) < count:
                self._streams_made += 1
                with cupy.cuda.Device(self.device):
                    taken.append((self._streams_made, cupy.cuda.Stream(non_blocking=True)))
        try:
            yield [stream for _, stream in taken]
        finally:
            with self.lock:
                self._idle_streams = sorted(self._idle_streams + taken, key=lambda item: item[0])

    @property
    def streams_made(self) -> int:
        """How many streams were ever made on this GPU."""
        with self.lock:
            return self._streams_made

    # -- caches ----------------------------------------------------------------------------
    def cache(self, name: str, make: Callable[[], object]):
        """This GPU's cache ``name``, made by ``make()`` at first use; use it
        under :attr:`lock`."""
        with self.lock:
            if name not in self._caches:
                self._caches[name] = make()
            return self._caches[name]

    def caches(self) -> list:
        """Every cache made so far."""
        with self.lock:
            return list(self._caches.values())

    # -- constant memory ------------------------------------------------------------------
    @contextlib.contextmanager
    def constants(self, name: str, defines: tuple[str, ...] | None, stream):
        """The compiled module ``name`` (``defines`` as in
        :func:`leveret.cuda._module.load_module`), its constant memory this
        caller's for the ``with`` block.

        Write the constants and queue every kernel that reads them on
        ``stream`` inside the block: ``stream`` first waits for the kernels
        the previous borrower of this module queued, and the next borrower's
        stream waits for the event recorded here on leaving. Nested blocks of
        one thread for the same module are allowed.
        """
        from ._module import load_module

        key = (name, None if defines is None else tuple(defines))
        with self.lock:
            slot = self._slots.setdefault(key, _ConstantSlot())
        with slot.lock:
            if slot.released is not None:
                stream.wait_event(slot.released)
            try:
                yield load_module(name, defines)
            finally:
                slot.released = stream.record()


def device_state(device: int | None = None) -> DeviceState:
    """The state of GPU ``device`` (None: CuPy's current device), made at first use."""
    if device is None:
        import cupy

        device = cupy.cuda.Device().id
    device = int(device)
    with _registry_lock:
        state = _states.get(device)
        if state is None:
            state = _states[device] = DeviceState(device)
        return state


def known_states() -> list[DeviceState]:
    """The states of every GPU this process has used so far."""
    with _registry_lock:
        return list(_states.values())


def lend_streams(count: int = 1):
    """:meth:`DeviceState.lend_streams` of the current GPU (a context manager)."""
    return device_state().lend_streams(count)


def upload(host, dtype=None):
    """``host`` (NumPy) as a CuPy array on the current GPU, complete on
    return: tables cached on an object and read later by other threads'
    streams must not be read before their upload has landed."""
    import cupy

    device = cupy.asarray(host, dtype)
    cupy.cuda.get_current_stream().synchronize()
    return device


class MemoryBudget:
    """At most ``limit`` bytes of GPU ``device``'s memory for one call.

    The threads of the call enter :meth:`active`: their CuPy allocations on
    the budget's GPU (arrays, and cuFFT's work areas) then come from a memory
    pool of the budget's own, whose limit is ``limit`` less the textures'
    share and :data:`CUFFT_RESERVE`; the pool frees its cached blocks and
    retries before it fails, so it never holds more. The call's textures
    (:mod:`leveret.cuda.texture`) are kept in a cache of the budget's own of
    at most ``texture_bytes // 2`` (a texture leaving it is freed at once,
    once its kernels are done), and the textures in use at once must be
    planned within the other half. :meth:`close` frees both.

    Parameters
    ----------
    device : int
    limit : int
        Bytes in all.
    texture_bytes : int
        Bytes of the limit set aside for CUDA arrays (textures).
    """

    #: cuFFT's own memory per plan cache (its work areas come from the pool)
    CUFFT_RESERVE = 16 << 20

    def __init__(self, device: int, limit: int, texture_bytes: int):
        import cupy

        self.device, self.limit, self.texture_bytes = int(device), int(limit), int(texture_bytes)
        self.pool_bytes = self.limit - self.texture_bytes - self.CUFFT_RESERVE
        if self.pool_bytes <= 0:
            raise ValueError(
                f"gpu_memory: {self.limit} bytes leave nothing for arrays beside "
                f"{self.texture_bytes + self.CUFFT_RESERVE} bytes of textures and cuFFT plans"
            )
        self.pool = cupy.cuda.MemoryPool()
        with cupy.cuda.Device(self.device):
            self.pool.set_limit(size=self.pool_bytes)
        self.lock = threading.RLock()
        self._caches: dict[str, object] = {}

    def __repr__(self) -> str:
        return (
            f"MemoryBudget(device={self.device}, limit={self.limit}, pool={self.pool_bytes}, "
            f"textures={self.texture_bytes})"
        )

    def cache(self, name: str, make: Callable[[], object]):
        """The budget's cache ``name`` (as :meth:`DeviceState.cache`)."""
        with self.lock:
            if name not in self._caches:
                self._caches[name] = make()
            return self._caches[name]

    @contextlib.contextmanager
    def active(self):
        """This thread's allocations from the budget's pool for the ``with``
        block; cuFFT plans made inside are dropped on leaving (their work
        areas belong to the pool)."""
        import cupy

        previous = getattr(_local, "budget", None)
        _local.budget = self
        try:
            with cupy.cuda.using_allocator(self.pool.malloc):
                yield self
        finally:
            _local.budget = previous
            with cupy.cuda.Device(self.device):
                cupy.fft.config.get_plan_cache().clear()

    def close(self) -> None:
        """Free the budget's textures (once their kernels are done) and its pool's cached blocks."""
        with self.lock:
            for cache in self._caches.values():
                cache.clear()
        self.pool.free_all_blocks()


def active_budget(device: int | None = None) -> "MemoryBudget | None":
    """The :class:`MemoryBudget` this thread's call runs under on GPU
    ``device`` (None: the current one), or None."""
    budget = getattr(_local, "budget", None)
    if budget is None:
        return None
    if device is None:
        import cupy

        device = cupy.cuda.Device().id
    return budget if budget.device == device else None
