"""bench/bench_preprocess.py runs on the CPU (small sizes): its problems, rows and step split."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _load():
    sys.path.insert(0, str(ROOT / "bench"))  # the script imports common.py beside it
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_preprocess_under_test", ROOT / "bench" / "bench_preprocess.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "bench"))


def test_cpu_rows_and_split():
    bench = _load()
    data = bench.stripes_problem(64, np)
    assert data.shape == (64, 64, 64) and data.dtype == np.float32
    assert np.all(data[:, :, int(0.8 * 64)] == 0.5)  # the dead column
    common = sys.modules["common"]  # the results list the script's record() appends to
    common.RESULTS.clear()
    bench.bench_rings(64, np, reps=1, slab_rows=32, split=True)
    bench.bench_center(128, 90, reps=1)
    rows = {r["problem"]: r for r in common.RESULTS}
    assert "rings 'all' 64 sinograms of 64 x 64, float32, NumPy" in rows
    split = next(r for p, r in rows.items() if p.startswith("rings 'all' steps"))
    assert all(step in split["note"] for step in ("dead columns", "sort", "large stripes", "median 21", "unsort"))
    centre = next(r for p, r in rows.items() if p.startswith("centre 'auto'"))
    assert "method vo" in centre["note"]
