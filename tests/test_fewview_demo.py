"""bench/fewview_demo.py at tiny sizes: it runs, writes its PNG, and reports the
few-view comparison. Whether iterative reconstruction beats quarter-view FDK is
a finding of the demo, not yet a property of leveret (docs/fewview.md: not
shown so far), so it is reported, not asserted here."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "fewview_demo.py"


def _load():
    spec = importlib.util.spec_from_file_location("fewview_demo", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("fewview") / "fewview.png"
    return _load().run(size=16, n_views=48, photons=1e4, iterations=30, out_png=out, seed=1,
                       method="sirt", supersampling=2), out


def test_runs_and_writes_png(result):
    res, out = result
    assert out.is_file() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert res["few_views"] == 12
    assert all(np.isfinite(v) and v > 0 for v in res["rmse"].values())
