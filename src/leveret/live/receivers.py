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
pair. The parent checks the message as a thread-read one and either lends
the slot itself (its pages locked once, :meth:`Receiver.lend`: the frame
uploads to the GPU straight from it, and the slot goes back once that upload
is done) or, with few slots left free, copies the frame out and gives the
slot back at once. With every slot lent, the child stops reading and the
messages wait in its socket (up to ``hwm``), as they do for a thread.

The child knows nothing of frames: it forwards every message, so a bad one
is counted and skipped by the parent exactly as a thread-read one is.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection

import numpy as np

#: Slots in each child's ring: frames lent from them wait in the source's queue and in the batch being
#: gathered (a batch of 64 frames from 8 streams holds 8 of each).
SLOTS = 16
#: Slots a receiver keeps free by copying frames out instead of lending them: its stream never stalls
#: for a caller that holds its frames.
KEEP_FREE = 2
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


def _child(endpoints, pattern, bind, hwm, max_bytes, slots, conn) -> None:
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
                old, ring = ring, _Ring.create(payload.size, slots)
                if old is not None:
                    old.close()
                    with contextlib.suppress(OSError):
                        os.unlink(old.path)
                free = list(range(slots))
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
        _child(job["endpoints"], job["pattern"], job["bind"], job["hwm"], job["max_bytes"], job["slots"], conn)
    finally:
        conn.close()


class Receiver:
    """The parent's end of one child process reading ``endpoints``.

    Used by one thread at a time, like a socket: :meth:`poll`, :meth:`recv`
    (the message's parts, the frame's a view of a ring slot), then
    :meth:`lend` (the slot kept with the frame) or :meth:`done` (the view
    copied: its slot goes back), :meth:`close`. The child is a fresh
    interpreter running this file (not a multiprocessing spawn, which would
    import the caller's main script again); a socket pair between the two
    carries the words.

    ``pin``, where set (``FramePool.pin``), locks a ring's pages once, at its
    first lent frame, and returns the call that unlocks them (None: it cannot,
    and nothing is lent).
    """

    def __init__(self, endpoints, *, pattern: str, bind: bool, hwm: int, max_bytes: int, name: str):
        if os.name != "posix":
            raise ValueError("processes: receiving in child processes needs a POSIX system (use threads)")
        ours, theirs = socket.socketpair()
        self._conn = Connection(ours.detach())
        fd = theirs.detach()
        job = dict(endpoints=list(endpoints), pattern=pattern, bind=bind, hwm=hwm, max_bytes=max_bytes)
        job.update(slots=SLOTS, fd=fd)
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
        self.pin = None
        self._ring = None
        self._unpin = None  # the ring's pages locked: the call that unlocks them (False: they cannot be)
        self._lent = None  # the slot of the message returned by recv, until done or lend
        self._out = 0  # slots lent with their frames, not yet released
        self._out_lock = threading.Lock()
        self._send_lock = threading.Lock()  # slots go back from the receiving thread and the returner
        self._returns: queue.SimpleQueue = queue.SimpleQueue()  # (slot, event) given back; None: stop
        self._returner = None
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
            if word[0] == "ring":  # the child has every slot of the old ring back
                _, path, slot_bytes, slots = word
                self._close_ring()
                self._ring = _Ring(path, slot_bytes, slots)
                with contextlib.suppress(OSError):
                    os.unlink(path)  # both processes have it mapped: nothing is left behind
                continue
            _, header, slot, size, arrived = word
            if slot is None:
                return [header] + [b""] * (size - 1), arrived
            self._lent = slot
            return [header, self._ring.array[slot, :size]], arrived

    def lend(self):
        """Keep the last message's slot with its frame: the call ``give_back(event)``
        that returns it once ``event`` (a CUDA event, or None) has completed, or
        None where the frame should be copied instead (no ``pin``, a ring whose
        pages cannot be locked, or only ``KEEP_FREE`` slots left free)."""
        if self._lent is None or self.pin is None:
            return None
        if self._unpin is None:
            self._unpin = self.pin(self._ring.array) or False
        with self._out_lock:
            if not self._unpin or self._out >= self._ring.slots - KEEP_FREE:
                return None
            self._out += 1
        if self._returner is None:
            self._returner = threading.Thread(target=self._return_slots, name=f"{self.name}-returns", daemon=True)
            self._returner.start()
        slot, self._lent = self._lent, None
        given = []

        def give_back(event=None) -> None:
            if not given:  # once: a release, or the frame's end
                given.append(True)
                with self._out_lock:  # released: free again once its upload is done
                    self._out -= 1
                self._returns.put((slot, event))

        return give_back

    def _return_slots(self) -> None:
        """The returner thread: each slot given back goes to the child once its upload is done."""
        while (item := self._returns.get()) is not None:
            slot, event = item
            # a failed wait (a GPU gone wrong, which the reconstruction reports) must not end the returns
            with contextlib.suppress(Exception):
                if event is not None:
                    event.synchronize()
            self._send(slot)

    def _send(self, slot) -> None:
        with self._send_lock, contextlib.suppress(OSError):  # a child that has gone needs none back
            self._conn.send(slot)

    def done(self) -> None:
        """The last message's frame has been copied (or lent): its slot is the child's again."""
        if self._lent is not None:
            slot, self._lent = self._lent, None
            self._send(slot)

    def _close_ring(self) -> None:
        """Unlock and unmap the ring (its pages stay locked while lent frames may still upload)."""
        if self._ring is None:
            return
        if self._unpin and self._out == 0:
            self._unpin()
        self._ring.close()
        self._ring, self._unpin = None, None

    def close(self) -> None:
        """Stop the child (it closes its socket) and wait for it."""
        if self.closed:
            return
        self.closed = True
        if self._returner is not None:  # the slots given back so far reach the child first
            self._returns.put(None)
            self._returner.join()
        self._send(None)
        try:
            self.process.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            self.process.wait()
        self._conn.close()
        self._close_ring()


if __name__ == "__main__":
    _main()
