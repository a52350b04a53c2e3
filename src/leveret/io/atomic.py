"""All-or-nothing outputs: write under a temporary name, then rename into place."""
from __future__ import annotations

import contextlib
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


def register_cleanup(key: int, cleanup: Callable[[], None]) -> None:
    """Register ``cleanup`` under ``key`` (an ``id``) until :func:`unregister_cleanup`."""
    with _PENDING_LOCK:
        _PENDING[key] = cleanup


def unregister_cleanup(key: int) -> None:
    with _PENDING_LOCK:
        _PENDING.pop(key, None)


def cleanup_pending() -> int:
    """Run every registered clean-up (remove temporaries of unfinished outputs);
    returns how many ran. For a process about to exit without unwinding."""
    with _PENDING_LOCK:
        todo = list(_PENDING.values())
        _PENDING.clear()
    for cleanup in todo:
        with contextlib.suppress(Exception):
            cleanup()
    return len(todo)


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


def check_writable(path: Path, overwrite: bool) -> None:
    """Raise ValueError naming ``path`` if it exists (unless overwrite) or has no parent folder."""
    if not path.parent.is_dir():
        raise ValueError(f"path: the folder {str(path.parent)!r} does not exist (for {str(path)!r})")
    if path.exists() and not overwrite:
        raise ValueError(f"path: {str(path)!r} already exists; pass overwrite=True to replace it")


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, *, overwrite: bool = False) -> Iterator[Path]:
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

    Raises
    ------
    ValueError
        ``path`` exists and ``overwrite`` is False, or its folder is missing.

    Examples
    --------
    >>> with atomic_output("result.json") as tmp:        # doctest: +SKIP
    ...     tmp.write_text(json.dumps(result))
    """
    path = Path(os.fspath(path))
    check_writable(path, overwrite)
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
        _commit(tmp, path, overwrite)
    except BaseException:
        _remove(tmp)
        raise
    finally:
        unregister_cleanup(id(tmp))
    _fsync_path(path.parent)  # make the rename itself durable


def _commit(tmp: Path, path: Path, overwrite: bool) -> None:
    # Checked again: something may have appeared at path while we wrote.
    check_writable(path, overwrite)
    if not path.exists() and not path.is_symlink():
        os.replace(tmp, path)
        return
    if tmp.is_file() and not path.is_dir():
        os.replace(tmp, path)  # atomic on POSIX and Windows
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
    _remove(old)
