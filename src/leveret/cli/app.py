"""The ``leveret`` command's run: dispatch, exit codes, interruption."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading

from ..backends import CudaUnavailable
from ..io.atomic import OutputSpaceError
from .parser import _subparser, build_parser, flag_message, parse


def _setup_logging(args) -> None:
    level = logging.ERROR if args.quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)]
    root = logging.getLogger("leveret")
    root.setLevel(level)
    if not any(getattr(h, "_leveret_cli", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("leveret: %(message)s"))
        handler._leveret_cli = True
        root.addHandler(handler)
    for h in root.handlers:
        if getattr(h, "_leveret_cli", False):
            h.stream = sys.stderr  # the current one (pytest swaps it)


_worker: threading.Thread | None = None


def _run_in_worker(fn, args):
    """Run ``fn(args)`` in a thread, so that Ctrl-C reaches this one at once."""
    global _worker
    box: dict = {}

    def target():
        try:
            box["value"] = fn(args)
        except BaseException as exc:  # handed to the main thread as is
            box["error"] = exc

    _worker = threading.Thread(target=target, name="leveret-worker", daemon=True)
    _worker.start()
    while _worker.is_alive():
        _worker.join(0.05)
    if "error" in box:
        raise box["error"]
    return box["value"]


_args: argparse.Namespace | None = None  # the command being run, once its arguments are parsed


def main(argv=None) -> int:
    global _args
    from ..execution.signals import handling
    from ..io.atomic import start_command

    _args = None
    start_command()
    try:
        # From here on (main thread only) the first SIGINT, SIGTERM or SIGHUP raises and
        # the clean-up it starts removes what was written; later ones cannot cut it short.
        with handling(once=True):
            return _main(argv)
    except KeyboardInterrupt as exc:  # after the command ended, as the handlers are restored
        return _stopped(exc)


def _stopped(exc: KeyboardInterrupt) -> int:
    """Clean up after an interruption and say so in one line: the exit code."""
    from ..execution.signals import exit_code
    from ..io.atomic import cleanup_pending, written_outputs

    # Waits for a slab being written, then removes or keeps the partial output; no
    # output starts after it (the worker may be about to start one).
    cleanup_pending(stop=True)
    if _args is None:  # before the command was known: nothing written yet
        print("\nleveret: interrupted", file=sys.stderr)
    else:  # a newline first: the progress bar's line has none
        print(f"\nleveret {_args.command}: " + _interrupted(_args, exc, written_outputs()), file=sys.stderr)
    return exit_code(exc)


def _main(argv) -> int:
    global _args

    try:
        args = parse(argv)
        _setup_logging(args)
        from . import bench, center, demo, info, live, preview, rabbitct, recon
    except ValueError as exc:  # a bad --config file
        print(f"leveret: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # during start-up: nothing written yet
        return _stopped(exc)
    _args = args

    runners = {
        "recon": recon.recon,
        "fbp": recon.recon,
        "center": center.center,
        "preview": preview.preview,
        "bench": bench.bench,
        "info": info.info,
        "tune": info.tune,
        "rabbitct": rabbitct.rabbitct,
        "demo": demo.run_demo,
        "live": live.run,
    }
    sub = None
    try:
        sub = _subparser(build_parser(), args.command)
        return _run_in_worker(runners[args.command], args)
    except (ValueError, TypeError, MemoryError, CudaUnavailable, OutputSpaceError, FloatingPointError) as exc:
        # bad input, too little memory, no GPU, a full disk, an iterative method that diverged (its
        # step, tv or the data's scale): the user's to fix, one line at any verbosity
        print(f"leveret {args.command}: error: {flag_message(str(exc), sub)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        return _stopped(exc)
    except Exception as exc:  # a bug: say so in one line, the traceback with -v
        if args.verbose:
            raise
        print(
            f"leveret {args.command}: failed: {type(exc).__name__}: {exc} (run with -v for the traceback)",
            file=sys.stderr,
        )
        return 1


def _interrupted(args, exc: KeyboardInterrupt, written: list) -> str:
    """The line after an interruption: what stopped the command and what it leaves."""
    what = "interrupted" if not hasattr(exc, "signum") else f"stopped by {exc}"
    # (live's clean-up writes its --json summary; tune keeps what it measured)
    kept = {"live": "", "tune": "; the choices measured so far stay cached"}
    if args.command in kept:
        return what + kept[args.command]
    if written:  # completed before the signal came: complete, and kept
        return what + "; written: " + ", ".join(repr(str(p)) for p in written)
    return (
        what
        + "; no output written"
        + (" (--resume continues from the slabs already done)" if getattr(args, "resume", False) else "")
    )


def run() -> None:
    """Console entry point: exit with :func:`main`'s code without waiting for
    a worker still inside a kernel after Ctrl-C."""
    try:
        code = main()
    except KeyboardInterrupt as exc:  # before main's handlers were in place
        from ..execution.signals import exit_code

        print("\nleveret: interrupted", file=sys.stderr)
        code = exit_code(exc)
    # After Ctrl-C the worker may still be inside a kernel, or just leaving
    # one: a normal interpreter shutdown would then wait for it, or abort in
    # a native thread pool's destructor. The outputs are already cleaned up.
    if code in (129, 130, 143) or (_worker is not None and _worker.is_alive()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
