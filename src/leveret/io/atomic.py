"""All-or-nothing outputs: write under a temporary name, then rename into place."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import threading
from pathlib import Path
from typing import Callable, Iterator


# Temporaries being written now, and other clean-ups to run if the process
# must stop at once (the CLI on Ctrl-C, while a worker thread is still busy).
_PENDING: dict[int, Callable[[], None]] = {}
_PENDING_LOCK = threading.Lock()
_STOPPED_BY: int | None = None  # the thread that ran cleanup_pending(stop=True): no other may start
_WRITTEN: list[Path] | None = None  # outputs completed since start_command(); None: not counted


class StoppingError(RuntimeError):
    """An output was about to start after the process began to stop (:func:`cleanup_pending`)."""


def register_cleanup(key: int, cleanup: Callable[[], None]) -> None:
    """Register ``cleanup`` under ``key`` (an ``id``) until :func:`unregister_cleanup`.

    Writers register before they create anything. Once the process stops
    (``cleanup_pending(stop=True)``) a registration from another thread than
    the one that stopped it (the interrupted work's) runs ``cleanup`` at once
    and raises :class:`StoppingError`, so that no output starts after the
    clean-up that would have removed it."""
    with _PENDING_LOCK:
        if _STOPPED_BY is None or _STOPPED_BY == threading.get_ident():
            _PENDING[key] = cleanup
            return
    with contextlib.suppress(Exception):
        cleanup()
    raise StoppingError("the process is stopping (interrupted): no new output is started")


def unregister_cleanup(key: int) -> None:
    with _PENDING_LOCK:
        _PENDING.pop(key, None)


def cleanup_pending(*, stop: bool = False) -> int:
    """Run every registered clean-up (remove temporaries of unfinished outputs);
    returns how many ran. For a process about to exit without unwinding.

    ``stop``: from now on no output may start in another thread than this one
    (:func:`register_cleanup` refuses), as the interrupted work, still running
    there, may be about to start one."""
    global _STOPPED_BY
    with _PENDING_LOCK:
        if stop and _STOPPED_BY is None:
            _STOPPED_BY = threading.get_ident()
        todo = list(_PENDING.values())
        _PENDING.clear()
    for cleanup in todo:
        with contextlib.suppress(Exception):
            cleanup()
    return len(todo)


def start_command() -> None:
    """A command starts in this process: outputs may start again after an earlier
    one's stop, and those completed from now on are listed by :func:`written_outputs`."""
    global _STOPPED_BY, _WRITTEN
    with _PENDING_LOCK:
        _STOPPED_BY = None
        _WRITTEN = []


def written_outputs() -> list[Path]:
    """The outputs completed (renamed into place) since :func:`start_command`."""
    with _PENDING_LOCK:
        return list(_WRITTEN or [])


def _written(path: Path) -> None:
    with _PENDING_LOCK:
        if _WRITTEN is not None:
            _WRITTEN.append(path)


def _fsync_path(path: Path) -> None:
    """Flush a file, or a folder entry list, to disk (best effort for folders)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) if path.is_dir() else os.O_RDONLY
    try:
        fd = os.open(path, flags)
    except OSError:
        if path.is_dir():  # Windows cannot open folders; nothing to sync there
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not path.is_dir():  # some file systems refuse fsync on folders
            raise
    finally:
        os.close(fd)


def _sync_file_range():
    """Linux's ``sync_file_range`` from the C library, or None where there is none."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    return call


_SYNC_FILE_RANGE = _sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2  # start writing the range's dirty pages; wait for none


def start_writeback(fd: int, offset: int = 0, nbytes: int = 0) -> None:
    """Have the kernel start writing the dirty pages of ``nbytes`` bytes at
    ``offset`` (0: to the end) of the open file ``fd`` to disk, without
    waiting for them (Linux; elsewhere nothing): a flush later finds them on
    disk or on their way, and the disk does not idle until then."""
    if _SYNC_FILE_RANGE is not None:  # a refusal is harmless: the flush still comes
        _SYNC_FILE_RANGE(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE)


class WritebackFollower:
    """Start the way to disk of an open file's bytes as they are written, from one
    thread of its own (``leveret-writeback``).

    For a file written in many small pieces (an HDF5 file's compressed chunks):
    a writeback start per piece, from many threads, makes them contend in the
    file system for the one file, and its writer waits with them. Here
    :meth:`wrote` only notes a written piece, and the thread starts what is
    noted as soon as it is free. While the kernel holds it (the disk's queue
    is full), the pieces written meanwhile gather into one span, started next:
    the runs grow as far as the disk is behind, and no written byte waits
    unstarted while the disk could take it. :meth:`close` starts the rest and
    ends the thread. Nothing waits for the disk: the flush that makes the bytes
    durable comes later. Where :func:`start_writeback` does nothing, neither
    does this."""

    def __init__(self, fd: int):
        self.fd = fd
        self._cond = threading.Condition()
        self._span: list[int] | None = None  # [first, end) of the bytes noted and not yet started
        self._closed = False
        self._thread = None
        if _SYNC_FILE_RANGE is not None:
            self._thread = threading.Thread(target=self._loop, name="leveret-writeback", daemon=True)
            self._thread.start()

    def wrote(self, offset: int, nbytes: int) -> None:
        """Note ``nbytes`` bytes written at ``offset``."""
        with self._cond:
            if self._span is None:
                self._span = [int(offset), int(offset) + int(nbytes)]
            else:
                self._span = [min(self._span[0], int(offset)), max(self._span[1], int(offset) + int(nbytes))]
            self._cond.notify()

    def close(self) -> None:
        """Start what is noted and end the thread (the file may be closed after)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._span is None and not self._closed:
                    self._cond.wait()
                span, self._span = self._span, None
                if span is None:  # closed, nothing left
                    return
            start_writeback(self.fd, span[0], span[1] - span[0])  # the kernel may hold it while its queue is full


def write_at(fd: int, buffer, offset: int) -> None:
    """Write all of ``buffer`` (any contiguous buffer) into the open file ``fd``
    at byte ``offset`` with ``pwrite``: the one place every slab writer's
    payload bytes go through (a full disk surfaces here as an OSError)."""
    view = memoryview(buffer).cast("B")
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _temporary_name(path: Path, tag: str) -> Path:
    # Hidden (leading dot) so that folder readers skip it; pid plus a random
    # token so that concurrent writers, processes or threads, never collide.
    return path.with_name(f".{path.name}.{tag}-{os.getpid()}-{secrets.token_hex(4)}")


# -- one writer per output ---------------------------------------------------------------------


class OutputBusyError(ValueError):
    """Another process (or another writer in this one) is writing the same output."""


class OutputLock:
    """An exclusive lock on an output path, held while a writer fills it.

    The lock is a hidden file ``.<name>.lock`` beside the output holding the
    owner's process id; it is removed on :meth:`release`. A second writer
    fails at once with :class:`OutputBusyError` naming that process. The
    operating system drops the lock when its process dies, even by SIGKILL,
    so a stale lock file never blocks a later run.

    On POSIX the lock is ``flock`` on the file, checked after locking to be
    the file still at that path (a lock file removed by the previous owner
    in between is not a lock); elsewhere :mod:`filelock` provides it.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(os.fspath(path))
        self.lock_path = self.path.with_name(f".{self.path.name}.lock")
        self._fd: int | None = None
        self._fallback = None

    def acquire(self) -> "OutputLock":
        try:
            import fcntl
        except ImportError:  # Windows: no flock; filelock has the native lock there
            return self._acquire_filelock()
        while True:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                raise OutputBusyError(self._busy_message()) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.lock_path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the previous owner removed this file as we locked it: try again
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except BaseException:
            os.close(fd)  # closing drops the lock: a failed acquire holds nothing
            raise
        self._fd = fd
        return self

    def _acquire_filelock(self) -> "OutputLock":
        from filelock import FileLock, Timeout

        lock = FileLock(str(self.lock_path) + ".filelock", timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise OutputBusyError(self._busy_message()) from None
        self.lock_path.write_text(f"{os.getpid()}\n")
        self._fallback = lock
        return self

    def _busy_message(self) -> str:
        try:
            owner = f"process {int(self.lock_path.read_text().split()[0])}"
        except (OSError, ValueError, IndexError):
            owner = "another process"
        return (
            f"output: {str(self.path)!r} is being written by {owner} (lock {str(self.lock_path)!r}); "
            "wait for it to finish or write to another path"
        )

    def release(self) -> None:
        if self._fd is not None:
            # Removed while still held: a writer that opened the old file
            # sees that it is gone once it gets the lock, and retries.
            with contextlib.suppress(OSError):
                os.unlink(self.lock_path)
            os.close(self._fd)  # closing drops the flock
            self._fd = None
        if self._fallback is not None:
            with contextlib.suppress(OSError):
                self.lock_path.unlink()
            self._fallback.release()
            self._fallback = None

    @property
    def held(self) -> bool:
        return self._fd is not None or self._fallback is not None

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


# -- a full disk -----------------------------------------------------------------------------------

#: errno values that mean "the output does not fit" (disk full, file size limit, quota).
SPACE_ERRNOS = frozenset(e for e in (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", None)) if e)


class OutputSpaceError(OSError):
    """An output does not fit: too little free space, a file size limit or a quota."""

    def __str__(self) -> str:
        return str(self.strerror)


def is_space_error(exc: BaseException) -> bool:
    """True for an error that says the disk, quota or file size limit is full
    (also as HDF5 and zarr word it, without an errno)."""
    if isinstance(exc, OSError) and exc.errno in SPACE_ERRNOS:
        return True
    text = str(exc)
    return isinstance(exc, (OSError, RuntimeError)) and any(
        w in text
        for w in ("No space left", "File too large", "Disk quota exceeded", "errno = 28", "errno = 27", "errno = 122")
    )


def space_errno(exc: BaseException) -> int:
    """The errno of a space error, read from the HDF5 text when the exception has none."""
    import re

    if getattr(exc, "errno", None):
        return int(exc.errno)
    m = re.search(r"errno = (\d+)", str(exc))
    return int(m.group(1)) if m else errno.ENOSPC


def free_bytes(folder: str | os.PathLike) -> int:
    """Bytes the calling user may still write in ``folder``'s file system."""
    import shutil

    return int(shutil.disk_usage(os.fspath(folder)).free)


def check_space(path: str | os.PathLike, needed: int) -> None:
    """Raise :class:`OutputSpaceError` if ``needed`` bytes do not fit beside ``path``."""
    from ..resources import format_bytes

    folder = Path(os.fspath(path)).parent
    free = free_bytes(folder)
    if needed > free:
        raise OutputSpaceError(
            errno.ENOSPC,
            f"output: {str(path)!r} needs {format_bytes(needed)} but only "
            f"{format_bytes(free)} are free in {str(folder)!r}; free some space or "
            "write elsewhere",
        )


def check_writable(
    path: Path, overwrite: bool, kind: str | None = None, *, flag: str = "path", asked_by: str | None = "overwrite=True"
) -> None:
    """Raise ValueError naming ``flag`` if ``path`` has no parent folder, exists (unless
    ``overwrite``), or exists and is not an output of ``kind`` that leveret wrote
    (:func:`check_replaceable`: ``overwrite`` never deletes anything else)."""
    if not path.parent.is_dir():
        raise ValueError(f"{flag}: the folder {str(path.parent)!r} does not exist (for {str(path)!r})")
    if not path.exists():
        return
    if not overwrite:
        raise ValueError(f"{flag}: {str(path)!r} already exists; pass overwrite=True to replace it")
    check_replaceable(path, kind, flag=flag, asked_by=asked_by)


def check_replaceable(
    path: Path, kind: str | None = None, *, flag: str = "path", asked_by: str | None = "overwrite=True"
) -> None:
    """Raise ValueError naming ``flag`` and what was not deleted if an existing ``path``
    is not an output of ``kind`` that leveret wrote (:func:`leveret.io.marks.replace_refusal`).
    ``asked_by`` names what asked for the replacement in the message (None: nothing)."""
    from .marks import replace_refusal

    refusal = replace_refusal(path, kind)
    if refusal is not None:
        raise ValueError(
            f"{flag}: {asked_by + ' ' if asked_by else ''}refused to delete {str(path)!r}: "
            f"{refusal}; delete it yourself if it may go, or give another path"
        )


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, *, overwrite: bool = False, kind: str | None = None) -> Iterator[Path]:
    """Context manager for writing ``path`` all or nothing.

    Yields a temporary path in the same folder (``.<name>.tmp-<pid>-<token>``).
    The body creates a file *or* a folder there. On success the result is
    fsynced and renamed onto ``path``; if the body raises anything (including
    KeyboardInterrupt) the temporary is removed and the exception propagates,
    so neither ``path`` nor a temporary is left behind.

    Parameters
    ----------
    path : str or os.PathLike
        Final output path. Its folder must exist.
    overwrite : bool
        Replace an existing ``path``. Without it an existing path raises
        ValueError before anything is written. A file replacing a file is one
        atomic ``os.replace``; a replacement involving a folder moves the old
        one aside first, so for a moment neither exists at ``path`` (never a
        half-written one).
    kind : {"npy", "tiff", "tiff-stack", "hdf5", "zarr"} or None
        The output's format: ``overwrite`` replaces only an output of that
        format that leveret wrote (:func:`leveret.io.marks.replace_refusal`).
        None (default): any file, never a folder.

    Raises
    ------
    ValueError
        ``path`` exists and ``overwrite`` is False, or is not something
        ``overwrite`` may delete, or its folder is missing.

    Examples
    --------
    >>> with atomic_output("result.json") as tmp:        # doctest: +SKIP
    ...     tmp.write_text(json.dumps(result))
    """
    path = Path(os.fspath(path))
    check_writable(path, overwrite, kind)
    tmp = _temporary_name(path, "tmp")
    register_cleanup(id(tmp), lambda: _remove(tmp))
    try:
        yield tmp
        if not tmp.exists():
            raise RuntimeError(f"atomic_output: the body did not create {str(tmp)!r}")
        if tmp.is_dir():
            for f in tmp.rglob("*"):
                if f.is_file():
                    _fsync_path(f)
        _fsync_path(tmp)
        _commit(tmp, path, overwrite, kind)
    except BaseException as exc:
        _remove(tmp)
        if is_space_error(exc) and not isinstance(exc, OutputSpaceError):  # the disk's, not a bug
            raise OutputSpaceError(space_errno(exc), f"output: {str(path)!r} did not fit: {exc}") from exc
        raise
    finally:
        unregister_cleanup(id(tmp))
    _fsync_path(path.parent)  # make the rename itself durable


def _commit(tmp: Path, path: Path, overwrite: bool, kind: str | None = None) -> None:
    # Checked again: something may have appeared at path while we wrote.
    check_writable(path, overwrite, kind)
    if (not path.exists() and not path.is_symlink()) or (tmp.is_file() and not path.is_dir()):
        os.replace(tmp, path)  # atomic on POSIX and Windows
        _written(path)
        return
    # os.replace cannot put a folder over a non-empty folder (or over a file):
    # move the old output aside, rename, then delete the old one; if the
    # rename fails, put the old output back.
    old = _temporary_name(path, "old")
    os.replace(path, old)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.replace(old, path)
        raise
    _written(path)
    _remove(old)
