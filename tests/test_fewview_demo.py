"""examples/fewview_demo.py at a small size: it runs, writes its PNG and JSON-able
numbers, and iterative reconstruction from 1/4 of the views beats the best
FDK (Ram-Lak, Shepp-Logan or Hann, chosen against the truth in FDK's favour)
from the same 1/4, in RMSE over the whole volume and inside the head.

Why it wins (docs/fewview.md): the full scan has ~pi/2 x columns views (the
angular Nyquist rate), so the quarter is 4x undersampled; FDK's view-aliasing
streaks and negative values are removed by the box 0 <= mu <= mu(bone), and
OS-SART's pass count comes from a separate calibration phantom, not from the
test phantom. Inside the skull (the brain) FDK stays better: that is a finding,
recorded in the docs, not asserted here. At 24^3..32^3 voxels the head-region
win disappears (the rim's partial volume dominates), hence 40^3.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "fewview_demo.py"


def _load():
    spec = importlib.util.spec_from_file_location("fewview_demo", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def demo():
    return _load()


@pytest.fixture(scope="module")
def result(demo, tmp_path_factory):
    out = tmp_path_factory.mktemp("fewview") / "fewview.png"
    return demo.run(size=40, photons=1e4, out_png=out, seed=1, supersampling=2, dpi=40), out


def test_runs_and_writes_png(result):
    res, out = result
    assert out.is_file() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert res["n_views"] == 64 and res["few_views"] == 16  # ~pi/2 x 40 columns, 1/4
    json.dumps(res)  # JSON-able as the script writes it
    for kind in ("fdk_all", "fdk_quarter"):
        assert set(res["rmse"][kind]) == {"ram-lak", "shepp-logan", "hann"}
    values = [e for f in res["rmse"]["fdk_quarter"].values() for e in f.values()]
    values += list(res["rmse"]["iterative"].values())
    assert all(np.isfinite(v) and 0 < v < 0.05 for v in values)


def test_iterations_come_from_the_calibration_phantom(demo, result):
    res, _ = result
    cal = res["calibration"]
    assert cal["iterations"] == int(np.argmin(cal["rmse_history"])) + 1
    assert len(cal["rmse_history"]) == 30  # the cap, run in full
    # the test phantom was run for the calibrated count only (no search on it)
    assert len(res["oracle"]) == res["iterations"] == cal["iterations"]
    # and the calibration phantom is a different object
    head, other = demo.head_phantom(), demo.calibration_phantom()
    assert len(head) != len(other) or any(a.semi_axes != b.semi_axes for a, b in zip(head, other))


def test_discrepancy_principle_reported(result):
    res, _ = result
    d = res["discrepancy"]
    assert d["noise_level"] > 0 and len(d["residuals"]) == res["iterations"]
    # model error: the rasterised phantom itself misses the data by more than the noise
    assert d["residual_of_truth"] > d["noise_level"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_iterative_beats_best_quarter_fdk(demo, seed):
    res = demo.run(size=40, photons=1e4, out_png=None, seed=seed, supersampling=2)
    best = res["rmse"]["fdk_quarter_best"]
    it = res["rmse"]["iterative"]
    assert it["volume"] < 0.9 * best["volume"], (it, best)
    assert it["head"] < best["head"], (it, best)
