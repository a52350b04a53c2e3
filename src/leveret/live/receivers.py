"""ZeroMQ sockets read in child processes, for :class:`leveret.live.sources.ZmqSource`
with ``processes=True``.

Receiving threads of one process do not add up for large frames: on a
16-core host, 11 MB frames over 4 to 8 streams stayed at 400-450 frames/s
read by threads of one process and reached 1400-1600 read by as many
processes (``tools/diagnostics/zmq_rate.py --processes``; pyzmq alone, no
leveret), whatever the allocator's mmap thresholds or the socket buffers.

Here each reader is a child process with a socket of its own; it copies
each message's frame bytes into a slot of a small ring in shared memory (a
file in ``/dev/shm`` mapped by both processes, unlinked once both have it)
and sends the header, the slot and the time it arrived through a socket
pair. The parent checks the message as a thread-read one, copies the frame
out of the slot and gives the slot back. With every slot lent, the child
stops reading and the messages wait in its socket (up to ``hwm``), as they
do for a thread.

The child knows nothing of frames: it forwards every message, so a bad one
is counted and skipped by the parent exactly as a thread-read one is.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection

import numpy as np

#: Slots in each child's ring: the parent frees one as soon as it has copied the frame out.
SLOTS = 4
#: Seconds a child may take to start and connect (it imports NumPy and ZeroMQ).
START_TIMEOUT = 60.0
#: Seconds between two looks at the parent's pipe while the socket is quiet.
STEP = 0.05


class _Ring:
    """``slots`` slots of ``slot_bytes`` each in the shared file ``path``, mapped
    here; made by the child (:meth:`create`), opened by the parent."""

    def __init__(self, path: str, slot_bytes: int, slots: int, fd: int | None = None):
        if fd is None:
            fd = os.open(path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, max(1, slot_bytes * slots))
        finally:
            os.close(fd)
        self.path, self.slot_bytes, self.slots = path, slot_bytes, slots
        self.array = np.frombuffer(self._map, np.uint8)[: slot_bytes * slots].reshape(slots, slot_bytes)

    @classmethod
    def create(cls, slot_bytes: int, slots: int) -> "_Ring":
        folder = "/dev/shm" if os.path.isdir("/dev/shm") else None  # memory, not a disk, where there is one
        fd, path = tempfile.mkstemp(prefix="leveret-zmq-", dir=folder)
        try:
            os.ftruncate(fd, max(1, slot_bytes * slots))
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        return cls(path, slot_bytes, slots, fd)

    def close(self) -> None:
        self.array = None
        with contextlib.suppress(BufferError):  # a view still held: the map goes with it
            self._map.close()


def _child(endpoints, pattern, bind, hwm, max_bytes, conn) -> None:
    """A child process: read ``endpoints`` with one socket until the parent says stop
    (None on the pipe) or goes; every message forwarded as
    ``("msg", header bytes, slot or None, frame bytes or parts, arrival time)``."""
    import zmq

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops us
    ctx = zmq.Context(io_threads=len(endpoints))
    sock = ctx.socket(zmq.PULL if pattern == "pull" else zmq.SUB)
    ring, free = None, []
    try:
        sock.setsockopt(zmq.RCVHWM, int(hwm))
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, int(max_bytes))
        if pattern == "sub":
            sock.setsockopt(zmq.SUBSCRIBE, b"")
        for endpoint in endpoints:
            try:
                (sock.bind if bind else sock.connect)(endpoint)
            except zmq.ZMQError as exc:
                conn.send(("error", f"cannot {'bind' if bind else 'connect to'} {endpoint!r}: {exc}"))
                return
        conn.send(("ready",))
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        while True:
            wait = 0 if ring is None or free else STEP  # every slot lent: only the parent's word matters
            while conn.poll(wait):
                slot = conn.recv()
                if slot is None:
                    return
                free.append(slot)
                wait = 0
            if ring is not None and not free:
                continue
            if not poller.poll(int(1000 * STEP)):
                continue
            parts = sock.recv_multipart(copy=False)
            arrived = time.perf_counter()
            header = parts[0].bytes
            if len(parts) != 2:  # an end of scan, or a bad message: the parent tells which
                conn.send(("msg", header, None, len(parts), arrived))
                continue
            payload = np.frombuffer(parts[1].buffer, np.uint8)
            if ring is None or payload.size > ring.slot_bytes:
                while ring is not None and len(free) < ring.slots:  # the parent holds none of the old ring
                    slot = conn.recv()
                    if slot is None:
                        return
                    free.append(slot)
                old, ring = ring, _Ring.create(payload.size, SLOTS)
                if old is not None:
                    old.close()
                    with contextlib.suppress(OSError):
                        os.unlink(old.path)
                free = list(range(SLOTS))
                conn.send(("ring", ring.path, ring.slot_bytes, ring.slots))
            slot = free.pop()
            ring.array[slot, : payload.size] = payload
            conn.send(("msg", header, slot, payload.size, arrived))
    except (EOFError, BrokenPipeError):  # the parent went
        return
    finally:
        sock.close(0)
        ctx.term()
        if ring is not None:
            with contextlib.suppress(OSError):
                os.unlink(ring.path)  # the parent may not have mapped it
            ring.close()


def _main() -> None:
    """The child's entry point (this file run as a script, so that the child imports
    only NumPy and ZeroMQ): its job as JSON in ``sys.argv[1]``."""
    job = json.loads(sys.argv[1])
    sys.path[:0] = job["path"]  # where the parent found pyzmq
    conn = Connection(job["fd"])
    try:
        _child(job["endpoints"], job["pattern"], job["bind"], job["hwm"], job["max_bytes"], conn)
    finally:
        conn.close()


class Receiver:
    """The parent's end of one child process reading ``endpoints``.

    Used by one thread at a time, like a socket: :meth:`poll`, :meth:`recv`
    (the message's parts, the frame's a view of a ring slot), :meth:`done`
    (the view copied: its slot goes back), :meth:`close`. The child is a
    fresh interpreter running this file (not a multiprocessing spawn, which
    would import the caller's main script again); a socket pair between the
    two carries the words.
    """

    def __init__(self, endpoints, *, pattern: str, bind: bool, hwm: int, max_bytes: int, name: str):
        if os.name != "posix":
            raise ValueError("processes: receiving in child processes needs a POSIX system (use threads)")
        ours, theirs = socket.socketpair()
        self._conn = Connection(ours.detach())
        fd = theirs.detach()
        job = dict(endpoints=list(endpoints), pattern=pattern, bind=bind, hwm=hwm, max_bytes=max_bytes, fd=fd)
        try:
            self.process = subprocess.Popen(
                [sys.executable, __file__, json.dumps({**job, "path": sys.path})],
                pass_fds=(fd,),
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            self._conn.close()
            raise
        finally:
            os.close(fd)
        self.name = name
        self._ring = None
        self._lent = None  # the slot of the message returned by recv, until done
        self.closed = False

    def wait_ready(self) -> None:
        """Wait for the child to have connected (or bound) its socket."""
        if not self._conn.poll(START_TIMEOUT):
            self.close()
            raise RuntimeError(f"ZeroMQ receiving process did not start within {START_TIMEOUT:.0f} s")
        try:
            word = self._conn.recv()
        except EOFError:
            self.close()
            raise RuntimeError(f"ZeroMQ receiving process ended at its start (exit code {self.process.wait()})")
        if word[0] == "error":
            self.close()
            raise ValueError(f"address: {word[1]}")

    def poll(self, seconds: float) -> bool:
        return self._conn.poll(seconds)

    def recv(self):
        """The next message: (parts, arrival time); parts are bytes, or a ring view for the frame."""
        self.done()
        while True:
            try:
                word = self._conn.recv()
            except EOFError:
                raise RuntimeError(
                    f"ZeroMQ receiving process {self.name} ended (exit code {self.process.poll()})"
                ) from None
            if word[0] == "ring":
                _, path, slot_bytes, slots = word
                if self._ring is not None:
                    self._ring.close()
                self._ring = _Ring(path, slot_bytes, slots)
                with contextlib.suppress(OSError):
                    os.unlink(path)  # both processes have it mapped: nothing is left behind
                continue
            _, header, slot, size, arrived = word
            if slot is None:
                return [header] + [b""] * (size - 1), arrived
            self._lent = slot
            return [header, self._ring.array[slot, :size]], arrived

    def done(self) -> None:
        """The last message's frame has been copied: its slot is the child's again."""
        if self._lent is not None:
            slot, self._lent = self._lent, None
            with contextlib.suppress(OSError):  # a child that has gone needs none back
                self._conn.send(slot)

    def close(self) -> None:
        """Stop the child (it closes its socket) and wait for it."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(OSError):
            self._conn.send(None)
        try:
            self.process.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            self.process.wait()
        self._conn.close()
        if self._ring is not None:
            self._ring.close()


if __name__ == "__main__":
    _main()
