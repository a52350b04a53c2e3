"""Termination signals as exceptions, so that outputs are cleaned up on every way of stopping.

SIGINT (Ctrl-C) already raises :class:`KeyboardInterrupt` in Python's main
thread. SIGTERM (``kill``, a batch queue's time limit) and SIGHUP (a closed
terminal) would kill the process at once and leave a partial output behind;
within :func:`handling` they raise :class:`Interrupted`, a KeyboardInterrupt
that remembers its signal, so the same clean-up runs and the command exits
with the shell's code for that signal (:func:`exit_code`: 130, 143, 129).

SIGXFSZ (a file grew past ``ulimit -f``) is ignored while handling, so the
write fails with EFBIG, which becomes a clear error, instead of the process
being killed.

The command handles SIGINT too, and only the first of these signals
(``handling(once=True)``): a second Ctrl-C while the first one's clean-up
waits for a slab to reach the disk would otherwise cut that clean-up short
and leave the lock and the partial output behind.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

#: The signals turned into :class:`Interrupted` (those that exist on this platform).
SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class Interrupted(KeyboardInterrupt):
    """The process received a termination signal (``signum``)."""

    def __init__(self, signum: int):
        super().__init__(f"received {signal.Signals(signum).name}")
        self.signum = int(signum)


def exit_code(exc: BaseException) -> int:
    """The shell's exit code for an interruption: 128 + signal number
    (SIGINT 130, SIGHUP 129, SIGTERM 143)."""
    return 128 + getattr(exc, "signum", int(signal.SIGINT))


def _raise(signum, frame) -> None:
    raise Interrupted(signum)


def _raise_once(signum, frame) -> None:
    """The first termination signal of a ``handling(once=True)`` block: later ones
    are ignored from now on, then this one raises (Ctrl-C a plain KeyboardInterrupt)."""
    for sig in (signal.SIGINT,) + SIGNALS:
        if signal.getsignal(sig) is _raise_once:
            signal.signal(sig, _ignore)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Interrupted(signum)


def _ignore(signum, frame) -> None:
    """A termination signal after the first: its clean-up is running already."""


@contextlib.contextmanager
def handling(*, once: bool = False) -> Iterator[None]:
    """Within a ``with`` block, SIGTERM and SIGHUP raise :class:`Interrupted`
    and SIGXFSZ is ignored; the previous handlers are restored after it.

    Parameters
    ----------
    once : bool
        Also handle SIGINT (as KeyboardInterrupt), and raise only for the
        first of SIGINT, SIGTERM and SIGHUP: later ones are ignored until the
        block ends, so that the clean-up the first one starts runs to its end
        (the command's: it waits for a slab being written, then removes the
        partial output). It takes over from :func:`quiet_start` at once.

    Does nothing outside the main thread (where Python cannot set handlers),
    and leaves alone a signal whose handler is not the default one (an
    application's own, or SIGHUP ignored under ``nohup``)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    defaults = (signal.SIG_DFL, signal.default_int_handler, _exit_quietly)
    previous = {}
    try:
        for sig in ((signal.SIGINT,) if once else ()) + SIGNALS:
            if signal.getsignal(sig) in defaults and (once or sig != signal.SIGINT):
                previous[sig] = signal.signal(sig, _raise_once if once else _raise)
        if hasattr(signal, "SIGXFSZ") and signal.getsignal(signal.SIGXFSZ) is signal.SIG_DFL:
            previous[signal.SIGXFSZ] = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# -- start-up of the command -----------------------------------------------------------------------


def is_command() -> bool:
    """True when this process is the ``leveret`` command (``leveret ...`` or
    ``python -m leveret ...``), not a program importing the library."""
    import multiprocessing
    import os
    import sys

    if multiprocessing.parent_process() is not None:
        return False  # a worker the command started (Dask, a pool) inherits argv, not the command
    argv0 = os.path.basename(sys.argv[0]) if sys.argv else ""
    orig = list(getattr(sys, "orig_argv", []))
    as_module = any(a == "-m" and b == "leveret" for a, b in zip(orig, orig[1:]))
    return argv0 in ("leveret", "leveret.exe") or as_module


def _exit_quietly(signum, frame) -> None:
    import os
    import sys

    sys.stderr.write("\nleveret: interrupted\n")
    sys.stderr.flush()
    os._exit(128 + signum)  # nothing is written yet: nothing to clean up


def quiet_start() -> None:
    """While the command imports its libraries (a second or more), stop on
    SIGINT, SIGTERM or SIGHUP at once with one line and the signal's exit
    code instead of a traceback of whatever import was running. The
    command's main function hands over with ``handling(once=True)``."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT,) + SIGNALS:
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(sig, _exit_quietly)
