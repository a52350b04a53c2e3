"""Argument types and the flags every ``leveret`` command shares."""

from __future__ import annotations

import argparse
import math
import re


def _size(text: str) -> int:
    """'512M', '2G', '1.5GiB', '1000000' -> bytes."""

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a size such as 512M, 2G or 1.5GiB, got {text!r}")
    scale = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}[m.group(2).lower()]
    value = int(float(m.group(1)) * scale)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive size, got {text!r}")
    return value


def _positive_int(text) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _device(text) -> int:
    """A CUDA device number: 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a CUDA device number (0, 1, ...), got {text!r}")
    return value


def _center(text):
    if str(text).strip().lower() == "auto":
        return "auto"
    try:
        return float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a column position or 'auto', got {text!r}") from None


def _cutoff(text) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction of Nyquist in (0, 1], got {text!r}")
    return value


def _gpus(text):
    """'all' or comma-separated GPU ids (leveret.cuda.devices checks that they exist)."""
    value = str(text).strip().lower()
    if value == "all":
        return "all"
    try:
        gpus = [int(part) for part in value.split(",")]
    except ValueError:
        gpus = []
    if not gpus or min(gpus) < 0 or len(set(gpus)) != len(gpus):
        raise argparse.ArgumentTypeError(f"expected 'all' or GPU ids such as 0,1, got {text!r}")
    return gpus


def _precision(text) -> str:
    """float32 | float64 | float16."""
    value = str(text).strip().lower()
    if value not in PRECISIONS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(PRECISIONS)}, got {text!r}")
    return value


PRECISIONS = ("float32", "float64", "float16")
#: What ``--output-dtype`` takes (leveret.io.quantize.OUTPUT_DTYPES).
OUTPUT_DTYPES = ("float32", "float16", "uint16", "uint8")


def _output_range(text):
    """'LO:HI' -> (lo, hi) with lo < hi, or 'auto'."""
    value = str(text).strip()
    if value.lower() == "auto":
        return "auto"
    try:
        lo, hi = (float(x) for x in value.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO:HI (two numbers) or 'auto', got {text!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise argparse.ArgumentTypeError(f"expected finite LO < HI, got {text!r}")
    return (lo, hi)


def _positive_float(text) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _pixel_size(text):
    """'0.2' or '0.2,0.3' (columns, rows) -> a float or a pair."""
    parts = str(text).split(",")
    if len(parts) not in (1, 2):
        raise argparse.ArgumentTypeError(f"expected one pitch or U,V, got {text!r}")
    values = tuple(_positive_float(x) for x in parts)
    return values[0] if len(values) == 1 else values


def _shape3(text) -> tuple[int, int, int]:
    """'NZ,NY,NX' -> three positive ints."""
    parts = str(text).replace("x", ",").split(",")
    try:
        shape = tuple(int(x) for x in parts)
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected three positive sizes NZ,NY,NX, got {text!r}")
    return shape


def _common(parser: argparse.ArgumentParser) -> None:
    """Flags every subcommand shares; SUPPRESS keeps the top-level values."""
    g = parser.add_argument_group("general")
    g.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="more messages (-vv: debug); tracebacks of unexpected errors",
    )
    g.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=argparse.SUPPRESS,
        help="only errors: no progress bars, no warnings",
    )
    g.add_argument(
        "--config", default=None, metavar="FILE", help="TOML or YAML file of option values (flags given here win)"
    )


def _strict(group) -> None:
    """--strict: the scan commands' warnings about the data become errors."""
    group.add_argument(
        "--strict",
        action="store_true",
        help="treat warnings about the scan (data that disagree with the geometry, flags a "
        "backend ignores, ...) as errors: exit 2 before any work",
    )
