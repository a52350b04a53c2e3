"""Frame buffers handed out to sources and recycled once their frame is used.

On a GPU they are pinned host memory: a frame uploads from there
asynchronously at the bus's full rate (a pageable one at a fraction of it,
and the host waits). The ownership rule: the caller fills a buffer from
:meth:`FramePool.get` and passes it to the reconstructor; when that call
returns the buffer is the pool's again (its upload is queued, and the next
``get`` of it waits for that upload to finish).

A pool also lends out memory it did not allocate: a ZeroMQ receiving
process's shared ring (:mod:`leveret.live.receivers`), whose slots are locked
once (:meth:`FramePool.pin`) so that a frame uploads straight from the slot it
arrived in. Such a frame is released like a buffer; its slot then goes back to
its owner once the upload is done (:meth:`FramePool.lend`).

A pool is shared by the threads of a live session (a source taking buffers
while the reconstruction gives them back): its books are kept under a lock
of its own, held only for the bookkeeping (never while allocating or
waiting for an upload), so a source is never held up by a batch.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np


class FramePool:
    """Buffers of one frame shape, per dtype, allocated by ``allocate(shape, dtype)``.

    ``get`` returns a free buffer (or a new one); ``release(array, event)``
    takes back a buffer the pool handed out, to be reused once ``event`` (a
    CUDA event, or None) has completed, or gives back an array it was lent
    (:meth:`lend`); other arrays are ignored. ``register(array)``, where
    given, locks the pages of memory allocated elsewhere and returns the call
    that unlocks them, or None where it cannot (:meth:`pin`).
    """

    def __init__(self, shape, allocate=np.empty, register=None):
        self.shape = tuple(shape)
        self._allocate = allocate
        self._register = register
        self._lock = threading.Lock()
        self._free: dict = {}  # dtype -> [(array, event)]
        self._lent: dict = {}  # id(array) -> array, handed out and not yet back
        self._borrowed: dict = {}  # id(array) -> (weak reference, give_back, its finalizer), lent to the pool
        self.allocated = 0

    def get(self, dtype=np.uint16) -> np.ndarray:
        dtype = np.dtype(dtype)
        with self._lock:
            free = self._free.setdefault(dtype, [])
            entry = free.pop() if free else None
        if entry is None:
            array = self._allocate(self.shape, dtype)
        else:
            array, event = entry
            if event is not None:
                event.synchronize()  # its upload is done before the caller writes into it
        with self._lock:
            self.allocated += int(entry is None)
            self._lent[id(array)] = array
        return array

    def reserve(self, n: int, dtype=np.uint16) -> None:
        """Have at least ``n`` free buffers of ``dtype`` ready (allocating pinned
        memory takes milliseconds: better before a scan than during it)."""
        dtype = np.dtype(dtype)
        while True:
            with self._lock:
                if len(self._free.setdefault(dtype, [])) >= n:
                    return
            array = self._allocate(self.shape, dtype)
            with self._lock:
                self._free[dtype].append((array, None))
                self.allocated += 1

    def owns(self, array) -> bool:
        """Whether ``array`` is a buffer handed out by this pool and not yet back."""
        with self._lock:
            return self._lent.get(id(array)) is array

    def pin(self, array):
        """Lock ``array``'s pages (a whole shared ring, once) so that frames lent
        from it upload asynchronously: the call that unlocks them, a no-op without
        ``register`` (plain memory serves the CPU), or None where they cannot be
        locked (its frames are then better copied into the pool's buffers)."""
        if self._register is None:
            return lambda: None
        return self._register(array)

    def lend(self, array, give_back) -> None:
        """Count ``array`` (a frame in memory the pool did not allocate) as handed
        out: when it is released, ``give_back(event)`` is called instead of keeping
        it, and the owner may reuse the memory once ``event`` has completed. An
        array dropped without a release is given back (event None) when it goes:
        a frame a caller skipped never holds its slot for good."""
        key = id(array)
        gone = weakref.finalize(array, self._dropped, key, give_back)
        with self._lock:
            self._borrowed[key] = (weakref.ref(array), give_back, gone)

    def _dropped(self, key, give_back) -> None:
        with self._lock:
            entry = self._borrowed.get(key)
            if entry is not None and entry[1] is give_back:
                del self._borrowed[key]
        give_back(None)

    def release(self, array, event=None) -> None:
        with self._lock:
            if self._lent.get(id(array)) is array:
                del self._lent[id(array)]
                self._free.setdefault(np.dtype(array.dtype), []).append((array, event))
                return
            entry = self._borrowed.get(id(array))
            if entry is None or entry[0]() is not array:
                return
            del self._borrowed[id(array)]
        entry[2].detach()  # given back once, here
        entry[1](event)

    def release_all(self, arrays, event=None) -> None:
        for a in arrays:
            self.release(a, event)

    @property
    def lent(self) -> int:
        """Buffers handed out and frames lent to the pool, not yet back."""
        with self._lock:
            return len(self._lent) + len(self._borrowed)
