"""The ``leveret`` command: ``recon`` (alias ``fbp``), ``preview``, ``center``,
``rabbitct``, ``bench``, ``info`` and ``demo``.

Exit codes: 0 success; 2 bad input (a bad flag or value, a missing GPU, a
memory cap that not even one slice fits, an output another process is
writing, a full disk; one line on stderr, naming the flag); 1 failure
(anything else: one line, the traceback with ``-v``); 130 interrupted
(Ctrl-C), 143 terminated (SIGTERM), 129 hung up (SIGHUP). Plausibility
warnings (one line each on stderr) never change the result; ``--quiet``
silences them.

The work runs in a worker thread while the main thread waits, so Ctrl-C (or
SIGTERM, SIGHUP) is seen at once even while a compiled kernel runs: the main
thread waits for a slab being written to reach the disk, removes the
temporaries of unfinished outputs (keeping a ``--resume`` run's partial
output) and the process exits without waiting for the kernel. Outputs are
written atomically, so an interrupted or failed run leaves no file behind.
Writers register their clean-up before they create anything, none starts
once the clean-up ran, and a second signal cannot cut the clean-up short.
"""

from __future__ import annotations

from .app import main, run
from .parser import build_parser, flag_message, parse

__all__ = ["build_parser", "flag_message", "main", "parse", "run"]
