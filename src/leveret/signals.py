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


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """Within a ``with`` block, SIGTERM and SIGHUP raise :class:`Interrupted`
    and SIGXFSZ is ignored; the previous handlers are restored after it.

    Does nothing outside the main thread (where Python cannot set handlers),
    and leaves alone a signal whose handler is not the default one (an
    application's own, or SIGHUP ignored under ``nohup``)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in SIGNALS:
        if signal.getsignal(sig) is signal.SIG_DFL:
            previous[sig] = signal.signal(sig, _raise)
    if hasattr(signal, "SIGXFSZ") and signal.getsignal(signal.SIGXFSZ) is signal.SIG_DFL:
        previous[signal.SIGXFSZ] = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
