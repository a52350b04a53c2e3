"""CUDA streams lent for the length of a call and kept for the next one.

CuPy's memory pool keeps a block freed on a stream for later allocations on
that same stream only (its arenas are per stream, so that reuse is ordered
behind the work that last read the block). A call that made fresh streams
would leave its buffers in arenas nobody allocates from again, and the next
call would ``cudaMalloc`` its buffers anew; once the GPU fills, the pool frees
every cached block and starts over. Calls that borrow their streams here get
the streams of the call before them, and with them its cached blocks.

Streams are lent lowest-numbered first, so a repeated call takes the same
streams in the same roles. A stream returned with work still queued is
handed out as it is: the next borrower's work queues behind it.
"""
from __future__ import annotations

import contextlib
import threading

_lock = threading.Lock()
_idle: dict[int, list] = {}     # GPU id -> idle streams as (number, stream), lowest number first
_made: dict[int, int] = {}      # GPU id -> streams made on it


@contextlib.contextmanager
def lent(count: int = 1):
    """``count`` non-blocking streams of the current GPU, for the ``with`` block.

    Yields a list of ``cupy.cuda.Stream``; they go back to the idle list on
    exit, also after an exception. Two blocks open at once (two threads, or
    nested) never share a stream.
    """
    import cupy

    device = cupy.cuda.Device().id
    with _lock:
        idle = _idle.setdefault(device, [])
        taken, idle[:] = idle[:count], idle[count:]
        while len(taken) < count:
            _made[device] = _made.get(device, 0) + 1
            taken.append((_made[device], cupy.cuda.Stream(non_blocking=True)))
    try:
        yield [stream for _, stream in taken]
    finally:
        with _lock:
            _idle[device] = sorted(_idle[device] + taken, key=lambda item: item[0])


def made(device: int) -> int:
    """How many streams were ever made on GPU ``device`` (a test reads it)."""
    with _lock:
        return _made.get(device, 0)
