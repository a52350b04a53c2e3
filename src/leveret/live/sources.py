"""Where live frames come from. Each source is an iterable of :class:`Frame`.

- :func:`iterable_source`: projections already in Python (arrays, a generator).
- :class:`FolderSource`: a folder being written by the acquisition; a TIFF or
  HDF5 frame is read once complete (its size and modification time unchanged
  over ``settle`` seconds; an HDF5 frame's data written and its geometry
  there), and once only.
- :class:`ZmqSource`: a ZeroMQ stream (PULL or SUB) of multipart messages:

  1. a JSON header ``{"index": int, "angle": float (radians) | "matrix":
     [[...] x 3], "shape": [n_rows, n_cols], "dtype": "uint16"}``; a header
     ``{"end": true}`` (one part) marks the end of a scan;
  2. the frame's raw bytes, C order, little-endian.

  :func:`send_frames` sends such a stream (``leveret live simulate`` uses it).
  Every field is checked before the message becomes a frame
  (:func:`check_header`: an index below a bound, a bounded shape, a number
  type, a finite angle or matrix, the payload's size); a message that fails
  is skipped, logged and counted (``ZmqSource.bad_messages``), and the
  stream goes on.

Sources never stop on a quiet spell: they yield ``None`` every ``timeout``
seconds while nothing arrives (so the caller can refresh and notice Ctrl-C)
and pick the stream or the folder up again when frames resume. ``close()``
may be called from any thread. A source that cannot make its sender wait
(ZeroMQ SUB) says so with ``lossy = True``: the live session then drops the
frames it has no room for (counted) instead of pausing the reader.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import re
import reprlib
import threading
import time
import weakref
from pathlib import Path

import numpy as np

from .pool import FramePool
from .reconstructor import Frame

log = logging.getLogger("leveret.live")

FRAME_SUFFIXES = (".tif", ".tiff", ".h5", ".hdf5")

#: Frame indices are below this unless a source is given another ``max_index``.
MAX_INDEX = 2**31
#: Detector rows or columns at most, and pixels of a frame at most (a frame's
#: bytes are checked against its header before anything is allocated for it).
MAX_SIDE = 1 << 16
MAX_PIXELS = 1 << 28
#: Bytes of a message's JSON header at most (a header is some 100 bytes, 400 with a matrix).
MAX_HEADER_BYTES = 1 << 16


def iterable_source(projections, angles=None, *, matrices=None, rate: float | None = None):
    """Frames from arrays: ``projections`` (n, n_rows, n_cols) or any iterable of
    images, with ``angles`` (radians) or ``matrices`` (n, 3, 4); ``rate``
    (frames per second) paces them like a detector."""
    if (angles is None) == (matrices is None):
        raise ValueError("angles: give angles (parallel beam) or matrices (cone beam), not both or neither")
    geometry = angles if angles is not None else matrices
    t0 = time.perf_counter()
    for index, (image, g) in enumerate(zip(projections, geometry)):
        if rate:
            wait = t0 + index / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
        if angles is not None:
            yield Frame(np.asarray(image), index, angle=float(g))
        else:
            yield Frame(np.asarray(image), index, matrix=np.asarray(g, np.float64))


def frame_index(name: str) -> int | None:
    """The frame number in a file name: its last group of digits ("proj_00042.tif" -> 42)."""
    digits = re.findall(r"\d+", Path(name).stem)
    return int(digits[-1]) if digits else None


class FolderSource:
    """Frames from files landing in ``folder``: ``proj_00000.tif``, ...

    A file is read once its size and modification time have not changed
    for ``settle`` seconds, so a frame still being written is never read
    half-way. Writers should write each frame under another name and
    rename it into place when complete (``proj_00042.tif.tmp`` or a hidden
    ``.proj_00042.tif``, then ``os.replace`` to ``proj_00042.tif``): names
    that do not end in a frame suffix, and hidden names, are never read, and
    with that convention ``settle=0`` reads each frame as soon as it lands.

    Each file gives one frame at most: a file replaced or rewritten after
    its frame was read is not read again (logged). An HDF5 frame is complete
    when its dataset's data are written (an unwritten dataset, which HDF5
    would read as its fill value, is not a frame yet) and it has an angle or
    matrix (its attribute, or ``angles``/``matrices`` for its index); until
    then it is looked at again whenever the file changes.

    Parameters
    ----------
    folder : path
    angles : array (radians), optional
        Angle of frame ``index`` (the last number in the file name). HDF5
        frames may carry their own: an ``angle`` attribute on the dataset.
    matrices : array (n, 3, 4), optional
        Cone beam: the matrix of frame ``index``. HDF5 frames may carry
        their own: a ``matrix`` attribute (3x4) on the dataset.
    dataset : str
        HDF5 dataset holding the image.
    settle : float
        Seconds a file's size and modification time must stay unchanged
        before it is read.
    timeout : float
        Seconds without a new file after which ``None`` is yielded.
    poll : float
        Seconds between folder scans (watchdog, when installed, wakes the
        scan up as soon as a file lands).
    retries : int
        A file that cannot be read is tried again this many times (each after
        another ``settle``) before it is skipped with a warning (and tried
        again if it changes).
    detector_shape : (n_rows, n_cols), optional
        Files of another image shape are skipped (counted) before their data
        are read; may also be set after construction.
    max_index : int
        Frame indices (from the name, or an HDF5 ``index`` attribute) are
        ``0 <= index < max_index``; other files are skipped (counted).

    Notes
    -----
    Files that cannot be used (not an image of at most ``MAX_PIXELS`` numbers,
    another shape, a bad index, angle or matrix, unreadable after
    ``retries``) are counted in ``bad_messages`` and logged; the scan goes on.
    """

    #: Seconds between checks of files already read for a rewrite in place
    #: (a replaced file, a new inode, is noticed at every scan at no cost).
    RECHECK = 1.0

    def __init__(
        self,
        folder,
        *,
        angles=None,
        matrices=None,
        dataset: str = "data",
        settle: float = 0.2,
        timeout: float = 0.5,
        poll: float = 0.05,
        retries: int = 3,
        detector_shape=None,
        max_index: int = MAX_INDEX,
    ):
        from .. import _validate as v

        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise ValueError(f"folder: {folder} is not a folder")
        self.angles = None if angles is None else np.asarray(angles, np.float64).reshape(-1)
        self.matrices = None if matrices is None else np.asarray(matrices, np.float64).reshape(-1, 3, 4)
        self.dataset = dataset
        self.settle, self.timeout, self.poll = float(settle), float(timeout), float(poll)
        for name in ("settle", "timeout", "poll"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name}: expected a number of seconds >= 0, got {getattr(self, name)!r}")
        self.detector_shape = None if detector_shape is None else v.shape_tuple("detector_shape", detector_shape, (2,))
        self.max_index = v.positive_int("max_index", max_index)
        self.bad_messages = 0
        self._used: dict[str, tuple] = {}  # name -> the (inode, size, mtime_ns) its frame came from
        self._changed_after_use: set[str] = set()
        self._waiting: dict[str, tuple] = {}  # name -> the version not (yet) usable: looked at once changed
        self._pending: dict[str, tuple] = {}  # name -> ((inode, size, mtime_ns), first seen so)
        self._failures: dict[tuple, int] = {}
        self._last_recheck = 0.0
        self.retries = int(retries)
        self._wake = threading.Event()
        self._stop = threading.Event()

    def close(self) -> None:
        """Stop iterating (from any thread)."""
        self._stop.set()
        self._wake.set()

    def _watch(self):
        try:
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer
        except ImportError:
            return None
        wake = self._wake

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event):
                wake.set()

        observer = Observer()
        observer.schedule(Handler(), str(self.folder), recursive=False)
        observer.daemon = True
        observer.start()
        return observer

    def _complete(self) -> list[tuple[Path, tuple]]:
        """Files not yet used, with their (inode, size, mtime_ns), that have
        stayed the same for ``settle`` seconds."""
        now = time.monotonic()
        recheck = now - self._last_recheck >= self.RECHECK
        if recheck:
            self._last_recheck = now
        ready, present = [], set()
        with os.scandir(self.folder) as entries:
            for e in entries:
                name = e.name
                if name.startswith(".") or not name.lower().endswith(FRAME_SUFFIXES):
                    continue
                used = self._used.get(name)
                try:
                    if used is not None:
                        # the inode comes with the folder listing; a stat costs a system call
                        if name not in self._changed_after_use and (e.inode() != used[0] or recheck):
                            self._note_change_after_use(name, e, used)
                        continue
                    st = e.stat()
                except FileNotFoundError:
                    continue
                key = (st.st_ino, st.st_size, st.st_mtime_ns)
                if self._waiting.get(name) == key:
                    continue
                present.add(name)
                first = self._pending.get(name)
                if first is None or first[0] != key:
                    self._pending[name] = (key, now)
                    continue
                if st.st_size > 0 and now - first[1] >= self.settle:
                    ready.append((Path(e.path), key))
        for name in list(self._pending):  # files removed before they were read
            if name not in present:
                del self._pending[name]
        return sorted(ready, key=lambda r: (frame_index(r[0].name) is None, frame_index(r[0].name) or 0, r[0].name))

    def _note_change_after_use(self, name, entry, used) -> None:
        st = entry.stat()
        if (st.st_ino, st.st_size, st.st_mtime_ns) != used:
            self._changed_after_use.add(name)
            log.warning("%s changed after it was read: not read again (each file gives one frame)", name)

    def _read(self, path: Path) -> tuple[str, Frame | str | None]:
        """("frame", the frame), ("incomplete", why), ("bad", why) or ("failed", the error)."""
        index = frame_index(path.name)
        angle = matrix = None
        try:
            if path.suffix.lower() in (".h5", ".hdf5"):
                import h5py

                with h5py.File(path, "r") as f:
                    ds = f[self.dataset]
                    why = self._check_image(ds.shape, ds.dtype)
                    if why:
                        return "bad", why
                    if ds.id.get_space_status() != h5py.h5d.SPACE_STATUS_ALLOCATED:
                        return "incomplete", "its data are not written yet"
                    attrs = ds.attrs
                    if "index" in attrs:
                        index = _attribute_index(attrs["index"])
                    if "angle" in attrs:
                        angle = _attribute_real("angle", attrs["angle"])
                    if "matrix" in attrs:
                        matrix = _attribute_matrix(attrs["matrix"])
                    if index is not None and not 0 <= index < self.max_index:
                        return "bad", f"index {index} outside 0..{self.max_index - 1}"
                    if angle is None and matrix is None and not self._has_geometry(index):
                        return "incomplete", "no angle or matrix attribute yet (nor --angles/--matrices)"
                    data = ds[()]
            else:
                import tifffile

                with tifffile.TiffFile(path) as tif:
                    series = tif.series[0]
                    why = self._check_image(series.shape, series.dtype)
                    if why:
                        return "bad", why
                    data = series.asarray()
        except _BadFile as exc:  # attributes that are not what they should be
            return "bad", str(exc)
        except Exception as exc:  # a file being written, locked, corrupt or foreign: tried again
            return "failed", str(exc) or type(exc).__name__
        if index is None:
            return "bad", "no frame number in its name"
        if not 0 <= index < self.max_index:
            return "bad", f"index {index} outside 0..{self.max_index - 1}"
        if angle is None and self.angles is not None and index < self.angles.size:
            angle = float(self.angles[index])
        if matrix is None and self.matrices is not None and index < len(self.matrices):
            matrix = self.matrices[index]
        return "frame", Frame(data, index, angle=angle, matrix=matrix)

    def _check_image(self, shape, dtype) -> str | None:
        """Why an image of this shape and dtype is not a frame (before reading it), or None."""
        shape = tuple(shape)
        if len(shape) != 2 or min(shape) < 1 or math.prod(shape) > MAX_PIXELS:
            return f"expected an image (n_rows, n_cols) of at most {MAX_PIXELS} pixels, got shape {shape}"
        if np.dtype(dtype).kind not in "iuf":
            return f"expected integers or floats, got {dtype}"
        if self.detector_shape is not None and shape != self.detector_shape:
            return f"shape {shape}, expected the detector's {self.detector_shape}"
        return None

    def _has_geometry(self, index) -> bool:
        """Whether ``angles`` or ``matrices`` give frame ``index`` its geometry."""
        if index is None:
            return False
        return any(g is not None and index < len(g) for g in (self.angles, self.matrices))

    def _unchanged(self, path: Path, key: tuple) -> bool:
        try:
            st = path.stat()
        except FileNotFoundError:
            return False
        return (st.st_ino, st.st_size, st.st_mtime_ns) == key

    def _skip(self, name: str, key: tuple, why: str) -> None:
        """Count a file that cannot be used; it is looked at again if it changes."""
        self.bad_messages += 1
        self._waiting[name] = key
        log.warning("%s skipped: %s", name, why)

    def __iter__(self):
        observer = self._watch()
        quiet_since = time.monotonic()
        try:
            while not self._stop.is_set():
                found = False
                for path, key in self._complete():
                    name = path.name
                    status, result = self._read(path)
                    self._pending.pop(name, None)
                    if not self._unchanged(path, key):
                        continue  # written to while it was read: read again once it settles
                    if status == "failed":
                        failures = self._failures.get(key, 0) + 1
                        self._failures[key] = failures
                        if failures <= self.retries:
                            continue  # perhaps a writer that paused: tried again after another settle
                        status = "bad"
                    self._failures.pop(key, None)
                    if status == "incomplete":
                        if self._waiting.pop(name, None) is None:
                            log.info("%s: %s; read once it changes", name, result)
                        self._waiting[name] = key
                    elif status == "bad":
                        self._skip(name, key, result)
                    else:
                        self._waiting.pop(name, None)
                        self._used[name] = key
                        found = True
                        yield result
                if found:
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since >= self.timeout:
                    quiet_since = time.monotonic()
                    yield None
                self._wake.wait(self.poll)
                self._wake.clear()
        finally:
            if observer is not None:
                observer.stop()


class _BadFile(ValueError):
    """A frame file whose contents are not what a frame's should be (not retried)."""


def _attribute_index(value) -> int:
    """An HDF5 ``index`` attribute: one integer."""
    a = np.asarray(value)
    if a.size != 1 or a.dtype.kind not in "iu":
        raise _BadFile(f"index: expected an integer attribute, got {_short(value)}")
    return int(a.reshape(())[()])


def _attribute_real(name: str, value) -> float:
    """An HDF5 attribute holding one finite number."""
    a = np.asarray(value)
    if a.size != 1 or a.dtype.kind not in "iuf" or not np.isfinite(a).all():
        raise _BadFile(f"{name}: expected a finite number, got {_short(value)}")
    return float(a.reshape(())[()])


def _attribute_matrix(value) -> np.ndarray:
    """An HDF5 ``matrix`` attribute: 12 finite numbers, as 3x4."""
    a = np.asarray(value)
    if a.size != 12 or a.dtype.kind not in "iuf" or not np.isfinite(a).all():
        raise _BadFile(f"matrix: expected 3x4 finite numbers, got {_short(value)}")
    return a.astype(np.float64).reshape(3, 4)


def _pattern(pattern: str) -> str:
    from .. import _validate as v

    return v.choice("pattern", pattern, ("pull", "sub", "push", "pub"))


class ZmqSource:
    """Frames from one or several ZeroMQ streams (the module's message format).

    Parameters
    ----------
    address : str or sequence of str
        One endpoint (``"tcp://127.0.0.1:5555"``, ``"ipc:///tmp/detector"``),
        several separated by commas (``"ipc:///tmp/d0,ipc:///tmp/d1"``), or a
        sequence of them: parallel streams, read by ``threads`` sockets.
    pattern : {"pull", "sub"}
        PULL (frames dealt to one reader) or SUB (every subscriber sees all).
    bind : bool
        Bind the address (the sender connects) instead of connecting to it.
    timeout : float
        Seconds without a message after which ``None`` is yielded.
    stop_at_end : bool
        Stop iterating once the scan has ended (an ``{"end": true}`` message
        from every endpoint, see Notes) instead of waiting for the next scan's
        frames.
    hwm : int
        Messages each socket holds before the sender waits (PULL) or messages
        are lost (SUB): with PULL, a reader that stops reading holds back the
        sender once this many frames wait here and in the sender's queue.
    buffers : FramePool or callable, optional
        Where frames go: a pool such as :attr:`LiveReconstructor.frame_pool`
        (pinned memory on a GPU, so a frame uploads asynchronously), whose
        buffers take each message's data (with ``processes``, the shared
        memory a frame arrived in is lent to it instead, see Notes), or
        ``buffers(dtype)`` returning an empty frame to copy into. It may also
        be set after construction. Without it a frame's data are a view of
        the message.
    detector_shape : (n_rows, n_cols), optional
        Frames of any other shape are bad messages (may also be set after
        construction, e.g. once the first frames agreed on a shape).
    max_index : int
        Frame indices are ``0 <= index < max_index``; others are bad messages.
    max_frame_bytes : int
        A message part larger than this is refused by ZeroMQ itself (the
        sender is disconnected, and reconnects) before it is held in memory.
    threads : int, optional
        Receiving threads, each with a socket of its own (default: one per
        endpoint). Fewer threads than endpoints: a socket reads several
        endpoints. More: several PULL sockets connect to one endpoint, whose
        sender deals the messages among them (PULL and connect only: a SUB
        socket each would get every frame, and an address binds once).
    processes : bool
        Read each socket in a child process of its own instead of a thread
        (:mod:`leveret.live.receivers`): the receiving threads of one process
        did not add up past 4-5 GB/s on the hosts measured, processes do
        (1130-1400 frames/s of 11 MB from 8 streams, IPC or TCP, into a
        reconstructor's pool on an H200 host, where threads reached ~440).
        The children take some tenths of a second to start (POSIX only).

    Notes
    -----
    A message is received without a copy (a view of ZeroMQ's message), its
    header checked (:func:`check_header`, and the payload's size), and only
    then its bytes are copied once, into a buffer from ``buffers``. One that
    fails is skipped, counted in ``bad_messages`` and logged (the first
    ``LOGGED`` of them, then every ``LOG_EVERY``-th), and the stream goes on:
    no message ends the iteration, and a bad stream never holds up the others.

    With one socket the thread iterating the source reads it. With several,
    each has a thread of its own that receives, checks and copies its
    messages, and the iteration yields the frames in the order they were
    ready: each stream's in its order, the streams interleaved. At most
    ``QUEUED`` frames per thread wait for the iteration; beyond, the threads
    stop reading and the messages wait in the sockets (up to ``hwm`` each).
    The source's ZeroMQ context has an I/O thread per connection, so the
    streams' bytes move in parallel.

    With ``processes`` the same holds, a child process doing the receiving:
    each message's frame bytes reach this process in a slot of a ring of
    shared memory. With a pool as ``buffers`` the slot itself is lent to the
    pool (its ring's pages locked once, so the frame uploads without a copy)
    and goes back to the child when the frame is released, once its upload is
    done, or when the frame is dropped; a receiver with only two slots free
    copies frames into the pool's buffers instead. Otherwise the frame is
    copied out (into a buffer from ``buffers``, or a new array). Either way a
    frame's data are never a view of the message.

    The scan has ended once an end-of-scan message has come from every
    endpoint (:func:`send_frames` sends one on each). Where sockets share an
    endpoint (``threads`` above the endpoints), its sender's one end message
    reaches one of them: the scan ends ``timeout`` seconds after the last
    message then.

    Sockets are not thread-safe: each is used by one thread at a time and
    closed by the thread that reads it. :meth:`close` from any thread sets a
    flag that the readers see within ``STEP`` seconds; they then close their
    sockets and the iteration ends.
    """

    #: Seconds between two looks at the stop flag while the socket is quiet.
    STEP = 0.05
    #: Bad messages logged one by one; after them, one line every LOG_EVERY.
    LOGGED = 20
    LOG_EVERY = 1000
    #: Frames each receiving thread may have waiting for the iteration.
    QUEUED = 2

    def __init__(
        self,
        address,
        *,
        pattern: str = "pull",
        bind: bool = False,
        timeout: float = 0.5,
        stop_at_end: bool = False,
        hwm: int = 1000,
        buffers=None,
        detector_shape=None,
        max_index: int = MAX_INDEX,
        max_frame_bytes: int = 1 << 30,
        threads: int | None = None,
        processes: bool = False,
    ):
        import zmq

        from .. import _validate as v

        self.address = address
        self.endpoints = zmq_endpoints(address)
        self.pattern = _pattern(pattern)
        if self.pattern not in ("pull", "sub"):
            raise ValueError(f"pattern: a source reads with 'pull' or 'sub', got {pattern!r}")
        self.timeout = float(timeout)
        if not self.timeout > 0:
            raise ValueError(f"timeout: expected seconds > 0, got {timeout!r}")
        self.threads = len(self.endpoints) if threads is None else v.positive_int("threads", threads)
        groups = _socket_endpoints(self.endpoints, self.threads, self.pattern, bind)
        self._shared = self.threads > len(self.endpoints)  # sockets sharing an endpoint
        self.stop_at_end = stop_at_end
        self.lossy = self.pattern == "sub"  # a publisher never waits for its subscribers
        self.bad_messages = 0
        self.buffers = buffers
        self.detector_shape = None if detector_shape is None else v.shape_tuple("detector_shape", detector_shape, (2,))
        self.max_index = v.positive_int("max_index", max_index)
        self.max_frame_bytes = v.positive_int("max_frame_bytes", max_frame_bytes)
        self._lock = threading.Lock()  # orders close() against the start and end of iteration
        self._bad_lock = threading.Lock()  # bad_messages, counted by every receiving thread
        self._stop = threading.Event()
        self._reading = False
        self._iterating = None  # the thread whose iteration reads the source
        self._readers: list = []  # the receiving threads of several sockets
        self._ends = 0  # end-of-scan messages of the scan so far
        self._ready: queue.SimpleQueue = queue.SimpleQueue()  # (frame | END | _Failed) from the threads
        self._room = threading.Semaphore(self.QUEUED * self.threads)
        self.processes = bool(processes)
        max_bytes = max(self.max_frame_bytes, MAX_HEADER_BYTES)
        self._ctx = None
        self._socks = []  # the readers: _SocketReader, or receivers.Receiver with processes
        try:
            if self.processes:
                from .receivers import Receiver

                for k, group in enumerate(groups):
                    self._socks.append(
                        Receiver(
                            group,
                            pattern=self.pattern,
                            bind=bind,
                            hwm=hwm,
                            max_bytes=max_bytes,
                            name=f"leveret-zmq-{k}",
                        )
                    )
                for receiver in self._socks:  # started together, waited for together
                    receiver.wait_ready()
            else:
                # an I/O thread per connection: one thread moves one stream's bytes at a time
                self._ctx = zmq.Context(io_threads=sum(len(g) for g in groups))
                for group in groups:
                    sock = self._ctx.socket(zmq.PULL if self.pattern == "pull" else zmq.SUB)
                    self._socks.append(_SocketReader(sock))
                    sock.setsockopt(zmq.RCVHWM, int(hwm))
                    sock.setsockopt(zmq.LINGER, 0)
                    sock.setsockopt(zmq.MAXMSGSIZE, max_bytes)
                    if self.pattern == "sub":
                        sock.setsockopt(zmq.SUBSCRIBE, b"")
                    for endpoint in group:
                        try:
                            (sock.bind if bind else sock.connect)(endpoint)
                        except zmq.ZMQError as exc:
                            raise ValueError(
                                f"address: cannot {'bind' if bind else 'connect to'} {endpoint!r}: {exc}"
                            ) from None
        except BaseException:
            self._close_all()
            raise
        # Unclosed, the sockets and context outlive a source that is garbage: at collection or
        # exit the context's own end would wait forever for sockets it no longer knows of (and
        # the children would read on).
        self._finalizer = weakref.finalize(self, _close_zmq, self._socks, self._ctx)

    @property
    def closed(self) -> bool:
        return all(s.closed for s in self._socks)

    @property
    def receiver_pids(self) -> list[int]:
        """Process IDs of the receiving children (``processes=True``; empty with
        threads), e.g. to count their CPU time."""
        return [s.process.pid for s in self._socks] if self.processes else []

    def close(self) -> None:
        """Stop the source; safe from any thread. The threads reading the sockets
        close them (within ``STEP`` seconds); with none reading, or from the thread
        whose iteration is suspended (a loop left by break or an exception), they
        are closed here, so that no socket lives on, reconnecting to its endpoint."""
        with self._lock:
            self._stop.set()
            if self._reading and self._iterating != threading.get_ident():
                return
            for t in self._readers:  # they see the flag within STEP and close their sockets
                t.join(timeout=1.0)
            if not any(t.is_alive() for t in self._readers):  # one waiting for a frame buffer closes its own
                self._close_all()

    def _close_all(self) -> None:
        """Close the sockets still open, then the context (no thread may be reading them)."""
        _close_zmq(self._socks, self._ctx)

    def __iter__(self):
        with self._lock:
            if self._stop.is_set():
                return
            if self._reading:
                raise RuntimeError("ZmqSource: already being read (one iteration at a time)")
            self._reading, self._iterating = True, threading.get_ident()
        try:
            if len(self._socks) == 1:
                yield from self._read_here(self._socks[0])
            else:
                yield from self._read_threads()
        finally:
            with self._lock:
                self._reading = False
                if self._stop.is_set():
                    self._close_all()  # the readers have closed theirs: here the one read here, and the context

    def _read_here(self, sock):
        """Frames of the one socket, read by the thread iterating the source."""
        quiet_since = time.monotonic()
        while not self._stop.is_set():
            if not sock.poll(min(self.STEP, self.timeout)):
                if time.monotonic() - quiet_since >= self.timeout:
                    quiet_since = time.monotonic()
                    yield None
                continue
            quiet_since = time.monotonic()
            item = self._take(sock)
            if item is END:
                if self._scan_ended() and self.stop_at_end:
                    return
            elif item is not None:
                yield item

    def _read_threads(self):
        """Frames of several sockets, each read by a thread of its own (class notes)."""
        halt = threading.Event()
        readers = [
            threading.Thread(target=self._receive, args=(sock, halt), name=f"leveret-zmq-{k}", daemon=True)
            for k, sock in enumerate(self._socks)
        ]
        self._readers = readers
        for t in readers:
            t.start()
        try:
            quiet_since = last = time.monotonic()
            draining = False  # the scan has ended; sockets that share an endpoint may still hold frames
            while not self._stop.is_set():
                try:
                    item = self._ready.get(timeout=min(self.STEP, self.timeout))
                except queue.Empty:
                    now = time.monotonic()
                    if draining and now - last >= self.timeout:
                        return
                    if now - quiet_since >= self.timeout:
                        quiet_since = now
                        yield None
                    continue
                if isinstance(item, _Failed):
                    raise item.error
                self._room.release()
                quiet_since = last = time.monotonic()
                if item is END:
                    if self._scan_ended() and self.stop_at_end:
                        if not self._shared:
                            return
                        draining = True
                else:
                    yield item
        finally:
            halt.set()
            for t in readers:
                t.join()

    def _receive(self, sock, halt) -> None:
        """A receiving thread: the messages of ``sock`` checked, copied and queued
        until the source stops (then it closes ``sock``) or ``halt`` is set."""

        def running():
            return not (self._stop.is_set() or halt.is_set())

        try:
            while running():
                if not self._room.acquire(timeout=self.STEP):
                    continue  # the iteration is behind: the messages wait in the socket
                item = None
                try:
                    while item is None and running():
                        if sock.poll(self.STEP):
                            item = self._take(sock)
                finally:
                    if item is None:
                        self._room.release()
                if item is not None:
                    self._ready.put(item)
        except BaseException as exc:  # raised by the iteration, in the thread that iterates
            self._ready.put(_Failed(exc))
        finally:
            if self._stop.is_set():
                sock.close()  # in the thread that used it

    def _take(self, sock):
        """The message waiting on ``sock`` as a Frame or END; None for a bad message (counted)."""
        parts, arrived = sock.recv()
        lend = None
        if self.processes:  # a frame in a child's ring may be lent to a pool that can lock the ring's pages
            sock.pin = self.buffers.pin if isinstance(self.buffers, FramePool) else None
            lend = sock.lend
        try:
            return self._message(parts, arrived, lend)
        except Exception as exc:  # any fault of one message: that message skipped, never the stream
            self._bad(exc)
            return None
        finally:
            sock.done()  # a child's frame has been copied out of its slot, or lent with it

    def _scan_ended(self) -> bool:
        """Count an end-of-scan message; True once every endpoint's has come."""
        self._ends += 1
        if self._ends < len(self.endpoints):
            log.info("end of scan message received (%d of %d endpoints)", self._ends, len(self.endpoints))
            return False
        self._ends = 0
        log.info("end of scan message received")
        return True

    def _message(self, parts, arrived, lend=None):
        """The frame of a multipart message, or END; ValueError if it is neither."""
        header = check_header(parse_header(parts[0]), detector_shape=self.detector_shape, max_index=self.max_index)
        if header is END:
            return END
        if len(parts) != 2:
            raise ValueError(f"message: expected 2 parts (header, frame bytes), got {len(parts)}")
        return _frame(header, parts[1], arrived, self.buffers, copy=self.processes, lend=lend)

    def _bad(self, exc) -> None:
        with self._bad_lock:
            self.bad_messages += 1
            n = self.bad_messages
        reason = str(exc)[:300] or type(exc).__name__
        if n <= self.LOGGED:
            log.warning("message skipped: %s", reason)
        elif n % self.LOG_EVERY == 0:
            log.warning("%d bad messages so far (the latest: %s)", n, reason)


class _SocketReader:
    """A socket read in this process, as :class:`leveret.live.receivers.Receiver`
    reads one in a child: poll, recv (the parts as views of ZeroMQ's
    messages, no copy), done, close."""

    def __init__(self, sock):
        import zmq

        self.sock = sock
        self._poller = zmq.Poller()
        self._poller.register(sock, zmq.POLLIN)

    @property
    def closed(self) -> bool:
        return self.sock.closed

    def poll(self, seconds: float) -> bool:
        return bool(self._poller.poll(int(1000 * seconds)))

    def recv(self):
        parts = self.sock.recv_multipart(copy=False)
        return [p.buffer for p in parts], time.perf_counter()

    def done(self) -> None:
        """Nothing to give back: a frame's data may stay a view of its message."""

    def close(self) -> None:
        self.sock.close(0)


def _close_zmq(socks, ctx) -> None:
    """Close the readers ``socks`` still open, then ``ctx`` (None with child processes)."""
    for s in socks:
        if not s.closed:
            s.close()
    if ctx is not None and not ctx.closed:
        ctx.term()


class _Failed:
    """An exception of a receiving thread, raised by the iteration."""

    def __init__(self, error: BaseException):
        self.error = error


def zmq_endpoints(address) -> list[str]:
    """The ZeroMQ endpoints ``address`` names: one (``"tcp://host:5555"``),
    several separated by commas (``"ipc:///tmp/d0,ipc:///tmp/d1"``), or a
    sequence of them. ValueError naming ``address`` for an empty or repeated
    one, or one without a transport (``tcp://``, ``ipc://``, ...)."""
    if isinstance(address, str):
        items = address.split(",")
    elif isinstance(address, (list, tuple)) and all(isinstance(a, str) for a in address):
        items = list(address)
    else:
        raise TypeError(f"address: expected a ZeroMQ endpoint or a list of them, got {_short(address)}")
    endpoints = [a.strip() for a in items]
    for a in endpoints:
        transport, sep, rest = a.partition("://")
        if not (sep and transport.isalnum() and rest):
            raise ValueError(
                f"address: expected ZeroMQ endpoints such as tcp://host:5555 or ipc:///tmp/name "
                f"(several separated by commas), got {_short(a)} in {_short(address)}"
            )
    if len(set(endpoints)) != len(endpoints):
        raise ValueError(f"address: an endpoint is named twice in {_short(address)}")
    return endpoints


def _socket_endpoints(endpoints: list[str], threads: int, pattern: str, bind: bool) -> list[list[str]]:
    """The endpoints of each of ``threads`` sockets: the endpoints dealt out
    (a socket may read several), or, with more sockets than endpoints, each
    socket connected to one endpoint that others share."""
    n = len(endpoints)
    if threads <= n:
        return [endpoints[k::threads] for k in range(threads)]
    if pattern != "pull" or bind:
        raise ValueError(
            f"threads: {threads} threads for {n} endpoint(s) need PULL sockets that connect (each "
            f"message to one of them); a SUB socket each would get every frame, and an address "
            f"binds once"
        )
    return [[endpoints[k % n]] for k in range(threads)]


def decode(
    header: dict,
    payload,
    arrived: float | None = None,
    buffers=None,
    *,
    detector_shape=None,
    max_index: int = MAX_INDEX,
) -> Frame:
    """A :class:`Frame` from a message's JSON header and its bytes, every field
    checked first (:func:`check_header`; ValueError naming the field). The data
    keep the dtype and shape the header states; with ``buffers`` (see
    :class:`ZmqSource`) they are copied into one of its buffers when it has that shape."""
    h = check_header(header, detector_shape=detector_shape, max_index=max_index)
    if h is END:
        raise ValueError("header: an end-of-scan message carries no frame")
    return _frame(h, payload, arrived, buffers)


def _frame(h: dict, payload, arrived, buffers, *, copy: bool = False, lend=None) -> Frame:
    """The frame of a checked header (:func:`check_header`) and its bytes:
    lent to ``buffers`` as they are where it is a :class:`FramePool` and
    ``lend()`` gives the call that returns them (a receiver's ring slot),
    otherwise copied into a buffer of ``buffers`` (or, with ``copy``, a new
    array)."""
    if payload is None:
        raise ValueError("no frame bytes after the header")
    shape, dtype = h["shape"], h["dtype"]
    nbytes = math.prod(shape) * dtype.itemsize
    got = memoryview(payload).nbytes
    if got != nbytes:
        raise ValueError(f"payload: {got} bytes for a frame of shape {shape} and dtype {dtype} ({nbytes} bytes)")
    data = np.frombuffer(payload, dtype=dtype).reshape(shape)
    buf = give_back = None
    if isinstance(buffers, FramePool):
        if buffers.shape == data.shape:
            give_back = None if lend is None else lend()
            if give_back is not None:
                buffers.lend(data, give_back)  # no copy: the frame uploads from its slot
            else:
                buf = buffers.get(dtype)
    elif buffers is not None:
        buf = buffers(dtype)
    if buf is not None and buf.shape == data.shape:
        np.copyto(buf, data)
        data = buf
    elif copy and give_back is None:
        data = data.copy()
    return Frame(
        data,
        h["index"],
        angle=h["angle"],
        matrix=h["matrix"],
        arrived=time.perf_counter() if arrived is None else arrived,
    )


def parse_header(raw) -> dict:
    """The JSON object of a message's first part: at most ``MAX_HEADER_BYTES``,
    UTF-8, parsed without letting its nesting or its numbers escape as anything
    but a ValueError."""
    raw = bytes(raw)
    if len(raw) > MAX_HEADER_BYTES:
        raise ValueError(f"header: {len(raw)} bytes, at most {MAX_HEADER_BYTES}")
    try:
        header = json.loads(raw)
    except RecursionError:
        raise ValueError("header: JSON nested too deep") from None
    except ValueError as exc:  # also not UTF-8, and integers beyond Python's digit limit
        raise ValueError(f"header: not JSON ({exc})") from None
    if not isinstance(header, dict):  # what the bytes hold, not their type: a bad message
        raise ValueError(f"header: expected a JSON object, got {type(header).__name__}")
    return header


#: What :func:`check_header` returns for an end-of-scan message.
END = object()


def check_header(header, *, detector_shape=None, max_index: int = MAX_INDEX):
    """A message header's fields, checked: ``{"index": int, "shape": (rows, cols),
    "dtype": numpy dtype (little-endian), "angle": float | None, "matrix":
    (3, 4) array | None}``, or :data:`END` for ``{"end": true}``.

    ``index`` is a JSON integer with ``0 <= index < max_index``; ``shape`` two
    integers in ``1..MAX_SIDE`` of at most ``MAX_PIXELS`` pixels (equal to
    ``detector_shape`` when given); ``dtype`` a NumPy name or code of an
    integer or float type of at most 8 bytes; ``angle`` a finite number
    (radians); ``matrix`` 3 rows of 4 finite numbers (or 12 numbers).
    ValueError naming the first field that is not so; TypeError if ``header``
    is not a dict (:func:`parse_header` gives one).
    """
    if not isinstance(header, dict):
        raise TypeError(f"header: expected a JSON object, got {type(header).__name__}")
    if header.get("end") is True:
        return END
    index = _integer("index", header.get("index"), 0, max_index)
    shape = header.get("shape")
    if not isinstance(shape, list) or len(shape) != 2:
        raise ValueError(f"shape: expected [n_rows, n_cols], got {_short(shape)}")
    shape = tuple(_integer("shape", s, 1, MAX_SIDE + 1) for s in shape)
    if math.prod(shape) > MAX_PIXELS:
        raise ValueError(f"shape: at most {MAX_PIXELS} pixels, got {shape}")
    if detector_shape is not None and shape != tuple(detector_shape):
        raise ValueError(f"shape: {shape}, expected the detector's {tuple(detector_shape)}")
    dtype, dt = header.get("dtype"), None
    if isinstance(dtype, str) and len(dtype) <= 16:
        try:
            dt = np.dtype(dtype)
        except (TypeError, ValueError):
            pass
    if dt is None:
        raise ValueError(f"dtype: expected a NumPy type name such as 'uint16', got {_short(dtype)}")
    if dt.kind not in "iuf" or dt.itemsize > 8:
        raise ValueError(f"dtype: expected an integer or float type of at most 8 bytes, got {_short(dtype)}")
    angle, matrix = header.get("angle"), header.get("matrix")
    if angle is not None:
        angle = _real("angle", angle)
    if matrix is not None:
        rows = matrix if isinstance(matrix, list) and len(matrix) == 3 else None
        if rows is not None and all(isinstance(r, list) and len(r) == 4 for r in rows):
            values = [x for r in rows for x in r]
        elif isinstance(matrix, list) and len(matrix) == 12:
            values = matrix
        else:
            raise ValueError(f"matrix: expected 3 rows of 4 numbers, got {_short(matrix)}")
        matrix = np.array([_real("matrix", x) for x in values], np.float64).reshape(3, 4)
    return {"index": index, "shape": shape, "dtype": dt.newbyteorder("<"), "angle": angle, "matrix": matrix}


def _integer(name: str, value, lo: int, hi: int) -> int:
    """A JSON integer (not a bool, not a float) with ``lo <= value < hi``."""
    if type(value) is not int:
        raise ValueError(f"{name}: expected an integer, got {_short(value)}")
    if not lo <= value < hi:
        raise ValueError(f"{name}: expected an integer from {lo} to {hi - 1}, got {_short(value)}")
    return value


def _real(name: str, value) -> float:
    """A finite JSON number as a float (an integer too large for a float is not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}: expected a number, got {_short(value)}")
    try:
        out = float(value)
    except OverflowError:
        out = math.inf
    if not math.isfinite(out):
        raise ValueError(f"{name}: expected a finite number, got {_short(value)}")
    return out


def _short(value) -> str:
    """``repr(value)`` cut short (long numbers, deep or long lists), for messages."""
    return reprlib.repr(value)


def encode(frame: Frame) -> list:
    """The two message parts of ``frame``: its JSON header (bytes), and its data
    as C-order little-endian bytes (a memoryview: of ``frame.data`` itself
    when it is so already, else of a converted copy)."""
    data = np.ascontiguousarray(frame.data)
    data = data.astype(data.dtype.newbyteorder("<"), copy=False)
    header = {"index": int(frame.index), "shape": list(data.shape), "dtype": data.dtype.str.lstrip("<|=")}
    if frame.angle is not None:
        header["angle"] = float(frame.angle)
    if frame.matrix is not None:
        header["matrix"] = np.asarray(frame.matrix, np.float64).reshape(3, 4).tolist()
    return [json.dumps(header).encode(), memoryview(data.reshape(-1)).cast("B")]


def send_frames(
    address,
    frames,
    *,
    pattern: str = "push",
    bind: bool = True,
    rate: float | None = None,
    end: bool = True,
    stop: threading.Event | None = None,
    connect_wait: float = 0.2,
    hwm: int = 1000,
    copy: bool = True,
    linger: float | None = 2.0,
) -> int:
    """Send ``frames`` (iterable of :class:`Frame`) with PUSH or PUB at ``rate``
    frames per second (None: as fast as possible); returns the number sent.

    ``address`` names one endpoint or several (see :func:`zmq_endpoints`):
    with several, a socket each, frame ``i`` going to endpoint ``i % n`` (the
    parallel streams a :class:`ZmqSource` of ``threads`` reads), each sent by
    an I/O thread of its own. ``end`` sends the ``{"end": true}`` message on
    every endpoint after the last frame. With PUSH, once ``hwm`` messages
    wait on a socket (and the reader's ``hwm`` there) sending waits for the
    reader; PUB drops them instead. ``copy=False`` hands each frame's data
    to ZeroMQ without a copy (when they are C-order little-endian already):
    for data that do not change afterwards, such as a scan held in memory.
    Returns once every reader has read every message and disconnected (a
    :class:`ZmqSource` closed, or its process gone), or ``linger`` seconds
    after the last message (None: no limit): messages still queued then, for
    a reader that is too slow or keeps reading the next scan, may be lost.

    The wait for the readers is there because ZeroMQ drops the messages in
    flight to a reader whose receive queue is full (``hwm``) when the sender
    closes its socket (docs/references.md, "ZeroMQ"): every message handed
    over is not every message read.
    """
    import zmq

    endpoints = zmq_endpoints(address)
    pattern = _pattern(pattern)
    if pattern not in ("push", "pub"):
        raise ValueError(f"pattern: a sender writes with 'push' or 'pub', got {pattern!r}")
    ctx = zmq.Context(io_threads=len(endpoints))
    socks, monitors = [], []
    sent = 0
    deadline = None  # of the wait for the readers and the queued messages, once all is sent
    try:
        for endpoint in endpoints:
            sock = ctx.socket(zmq.PUSH if pattern == "push" else zmq.PUB)
            socks.append(sock)
            # the readers' connections, to wait for them at the end (below)
            monitors.append(sock.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED))
            sock.setsockopt(zmq.SNDHWM, int(hwm))
            sock.setsockopt(zmq.LINGER, -1 if linger is None else int(1000 * linger))
            (sock.bind if bind else sock.connect)(endpoint)
        time.sleep(connect_wait)  # let readers connect (PUB drops messages nobody reads yet)
        t0 = time.perf_counter()
        for frame in frames:
            if stop is not None and stop.is_set():
                break
            if rate:
                wait = t0 + sent / rate - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
            socks[sent % len(socks)].send_multipart(encode(frame), copy=copy)
            sent += 1
        if end:
            for sock in socks:
                sock.send_multipart([json.dumps({"end": True}).encode()])
        deadline = None if linger is None else time.monotonic() + linger
        _wait_for_readers(monitors, deadline)
    finally:
        left = None if deadline is None else max(0, int(1000 * (deadline - time.monotonic())))
        for sock in socks:
            sock.disable_monitor()
            sock.close(linger=left)  # None: the LINGER set above
        for monitor in monitors:
            monitor.close(0)
        ctx.term()  # waits for the messages queued (LINGER)
    return sent


def _wait_for_readers(monitors, deadline: float | None) -> None:
    """Until the peers of every socket (counted by its monitor: accepted or
    connected, less disconnected) are gone, or ``deadline`` (monotonic)."""
    import zmq
    from zmq.utils.monitor import recv_monitor_message

    peers = [0] * len(monitors)
    poller = zmq.Poller()
    for monitor in monitors:
        poller.register(monitor, zmq.POLLIN)
    while True:
        for k, monitor in enumerate(monitors):
            while monitor.poll(0):
                event = recv_monitor_message(monitor)["event"]
                peers[k] += -1 if event == zmq.EVENT_DISCONNECTED else 1
        if not any(n > 0 for n in peers):
            return
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return
        poller.poll(100 if left is None else max(1, min(100, int(1000 * left))))
