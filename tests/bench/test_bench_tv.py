"""bench/bench_tv.py without a GPU: --dry-run prints the memory the methods
need (as memory_bytes counts it for a real projector) and the byte counts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench_tv():
    sys.path.insert(0, str(ROOT / "bench"))  # the script imports common.py beside it
    try:
        spec = importlib.util.spec_from_file_location("bench_tv_under_test", ROOT / "bench" / "bench_tv.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(ROOT / "bench"))


def test_dry_run_memory_is_the_projectors(bench_tv, capsys):
    import leveret
    from leveret.algorithms.regularised import memory_bytes

    assert bench_tv.main(["--dry-run", "--size", "48", "--views", "20"]) == 0
    out = capsys.readouterr().out
    g, vol = bench_tv.geometry(48, 20)
    A = leveret.Projector(g, vol, model="joseph", backend="cpu")
    assert f"FISTA {memory_bytes('fista', A) / 2**30:.2f} GiB" in out
    assert f"PDHG {memory_bytes('pdhg', A) / 2**30:.2f} GiB" in out
    assert "TV prox, 10 FGP iterations" in out and "SIRT elementwise" in out


def test_prox_bytes_per_voxel(bench_tv):
    """72 bytes per voxel and inner iteration in 3D float32 (18 values:
    primal 5, dual 13), plus the set-up and final passes."""
    n = 1000
    per_iteration = (bench_tv.prox_values(n, 3, 11) - bench_tv.prox_values(n, 3, 10)) * bench_tv.ITEMSIZE / n
    assert per_iteration == 72
    assert bench_tv.fista_values(n, 0, 3, 10) > bench_tv.prox_values(n, 3, 10) > bench_tv.pdhg_values(n, 0, 3)
