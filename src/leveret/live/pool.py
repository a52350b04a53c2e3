"""Frame buffers handed out to sources and recycled once their frame is used.

On a GPU they are pinned host memory: a frame uploads from there
asynchronously at the bus's full rate (a pageable one at a fraction of it,
and the host waits). The ownership rule: the caller fills a buffer from
:meth:`FramePool.get` and passes it to the reconstructor; when that call
returns the buffer is the pool's again (its upload is queued, and the next
``get`` of it waits for that upload to finish).
"""
from __future__ import annotations

import numpy as np


class FramePool:
    """Buffers of one frame shape, per dtype, allocated by ``allocate(shape, dtype)``.

    ``get`` returns a free buffer (or a new one); ``release(array, event)``
    takes back a buffer the pool handed out (other arrays are ignored), to be
    reused once ``event`` (a CUDA event, or None) has completed.
    """

    def __init__(self, shape, allocate=np.empty):
        self.shape = tuple(shape)
        self._allocate = allocate
        self._free: dict = {}      # dtype -> [(array, event)]
        self._lent: dict = {}      # id(array) -> array, handed out and not yet back
        self.allocated = 0

    def get(self, dtype=np.uint16) -> np.ndarray:
        free = self._free.setdefault(np.dtype(dtype), [])
        if free:
            array, event = free.pop()
            if event is not None:
                event.synchronize()   # its upload is done before the caller writes into it
        else:
            array = self._allocate(self.shape, np.dtype(dtype))
            self.allocated += 1
        self._lent[id(array)] = array
        return array

    def reserve(self, n: int, dtype=np.uint16) -> None:
        """Have at least ``n`` free buffers of ``dtype`` ready (allocating pinned
        memory takes milliseconds: better before a scan than during it)."""
        free = self._free.setdefault(np.dtype(dtype), [])
        while len(free) < n:
            free.append((self._allocate(self.shape, np.dtype(dtype)), None))
            self.allocated += 1

    def owns(self, array) -> bool:
        """Whether ``array`` is a buffer handed out by this pool and not yet back."""
        return id(array) in self._lent and self._lent[id(array)] is array

    def release(self, array, event=None) -> None:
        if self.owns(array):
            del self._lent[id(array)]
            self._free.setdefault(np.dtype(array.dtype), []).append((array, event))

    def release_all(self, arrays, event=None) -> None:
        for a in arrays:
            self.release(a, event)

    @property
    def lent(self) -> int:
        """Buffers handed out and not yet back."""
        return len(self._lent)
