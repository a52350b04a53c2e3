"""Auto-tuning cached on disk: the parallel-beam back-projection kernels, and
the cone transpose's cost correction (what ``leveret tune`` measures:
:mod:`leveret.operators.autotune`).

A short search times each candidate configuration (kernel + parameters) on
the problem at hand, keeps the fastest, and stores it in a JSON file keyed by
GPU name and problem class, so the next run on the same GPU and a similar
problem starts with the winner without searching again.

- cache file: ``$LEVERET_CACHE_DIR/tuning.json``, else
  ``$XDG_CACHE_HOME/leveret/tuning.json``, else ``~/.cache/leveret/tuning.json``.
- an explicit ``kernel=`` argument wins over the cache; where there is no
  entry for the GPU and problem class, the operator's rule decides. The
  operator's ``kernel_choice`` and ``leveret info`` say which decided.

Nothing here needs a GPU: the timing function is passed in (the tests use
a fake one).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterable

CACHE_VERSION = 2  # 2: precision keys are dtype names ("float32", "float16")


def cache_path() -> Path:
    """Where the tuning results live (see the module docstring)."""
    if os.environ.get("LEVERET_CACHE_DIR"):
        return Path(os.environ["LEVERET_CACHE_DIR"]) / "tuning.json"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "leveret" / "tuning.json"


def _bucket(n: int) -> int:
    """n rounded to a power of two (geometric buckets: 1, 2, 4, ...)."""
    return 1 << max(0, round(math.log2(max(1, n))))


def problem_class(n_slices: int, ny: int, nx: int, n_angles: int, interpolation: str, precision: str) -> str:
    """A key for problems that share a best kernel: slice count in 1 / 2-3 / 4-15 / 16+,
    image side and angle count to the nearest power of two, interpolation, precision."""
    slices = 1 if n_slices < 2 else 2 if n_slices < 4 else 4 if n_slices < 16 else 16
    side = _bucket(int(math.sqrt(max(1, ny * nx))))
    return f"parallel/s{slices}/n{side}/a{_bucket(n_angles)}/{interpolation}/{precision}"


# The last text read per path, with the file's inode, modification time and
# size (tune() replaces the file, so each write makes a new inode): every
# kernel="auto" call looks the cache up, and reading the file took as long as
# a small problem's back-projection.
_READ: dict[Path, tuple[tuple[int, int, int], str]] = {}


def load(path: Path | None = None) -> dict:
    """The whole cache ({gpu name: {problem class: entry}}); empty if absent or
    unreadable. Parsed afresh per call (callers may change it); the file is
    read again only when its inode, modification time or size changed."""
    path = path or cache_path()
    try:
        stat = path.stat()
        signature = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        seen = _READ.get(path)
        if seen is None or seen[0] != signature:
            seen = (signature, path.read_text())
            _READ[path] = seen
        data = json.loads(seen[1])
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return {}
    return data.get("gpus", {})


def _store(gpus: dict, path: Path) -> None:
    """Write atomically: a crash leaves the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tuning-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"version": CACHE_VERSION, "gpus": gpus}, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def lookup(gpu: str, key: str, path: Path | None = None) -> dict | None:
    """The cached configuration for (gpu, key), or None."""
    entry = load(path).get(gpu, {}).get(key)
    return dict(entry["config"]) if entry else None


def candidates(interpolation: str, precision: str, n_slices: int) -> list[dict]:
    """The search space: every kernel and parameter set valid for the mode."""
    out: list[dict] = []
    if precision == "float16":
        out = [
            {"kernel": "texture", "packing": "half2"},
            {"kernel": "texz", "packing": "half2", "nq": 4},
            {"kernel": "texz", "packing": "half2", "nq": 8},
        ]
        if n_slices >= 3:
            out.append({"kernel": "texz", "packing": "half4", "nq": 4})
        if interpolation == "linear":
            out.append({"kernel": "hybrid", "tile": 32, "packing": "half2", "ratio": (1, 2)})
            if n_slices >= 3:
                out += [
                    {"kernel": "hybrid", "tile": 32, "packing": "half4", "ratio": r} for r in ((1, 3), (1, 2), (2, 3))
                ]
        return out
    pack = "float2" if n_slices > 1 else "float"
    out.append({"kernel": "texture", "packing": pack})
    out += [{"kernel": "texz", "packing": pack, "nq": nq} for nq in (4, 8)]
    if interpolation == "linear8":
        return out  # only the texture unit has 8-bit weights
    nvs = (1, 2) if n_slices > 1 else (1,)
    for tile in (32, 64):
        for nv in nvs:
            if interpolation == "nearest" and nv == 1 and tile == 64:
                continue
            out.append({"kernel": "alu", "tile": tile, "nv": nv})
    if interpolation == "linear" and n_slices >= 3:
        out.append({"kernel": "alu", "tile": 32, "nv": 4})
    if interpolation == "linear":
        for tile in (32, 64):
            for ratio in ((1, 3), (1, 2), (2, 3)):
                out.append({"kernel": "hybrid", "tile": tile, "packing": pack, "ratio": ratio})
    return out


def tune(
    gpu: str,
    key: str,
    configs: Iterable[dict],
    time_fn: Callable[[dict], float],
    *,
    path: Path | None = None,
    store: bool = True,
) -> tuple[dict, list[tuple[dict, float]]]:
    """Time every config (``time_fn`` returns seconds; a config that raises
    ValueError or returns a non-finite time is skipped), cache the fastest under
    (gpu, key) and return (best, [(config, seconds), ...])."""
    path = path or cache_path()
    results: list[tuple[dict, float]] = []
    for config in configs:
        try:
            seconds = float(time_fn(config))
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds > 0:
            results.append((dict(config), seconds))
    if not results:
        raise ValueError(f"tune: no candidate ran for {key} on {gpu}")
    best, seconds = min(results, key=lambda r: r[1])
    if store:
        store_entry(gpu, key, best, seconds=seconds, tried=len(results), path=path)
    return best, results


def store_entry(gpu: str, key: str, config: dict, *, seconds: float, tried: int, path: Path | None = None) -> None:
    """Cache ``config`` for (gpu, key), keeping every other entry. The file's
    read-modify-write holds a lock (``filelock``, beside the file), so two
    processes tuning at once both keep their entries."""
    from filelock import FileLock

    path = path or cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        gpus = load(path)
        gpus.setdefault(gpu, {})[key] = {
            "config": {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()},
            "seconds": seconds,
            "tried": tried,
        }
        _store(gpus, path)


def describe(path: Path | None = None) -> list[str]:
    """Lines for ``leveret info``: the cached choices."""
    lines = []
    for gpu, entries in sorted(load(path).items()):
        for key, entry in sorted(entries.items()):
            cfg = ", ".join(f"{k}={v}" for k, v in entry["config"].items())
            lines.append(f"{gpu} {key}: {cfg} ({entry['seconds'] * 1e3:.2f} ms)")
    return lines
