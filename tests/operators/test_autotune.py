"""What ``leveret tune`` measures (leveret.operators.autotune): the transpose's
per-GPU correction from probe timings, cached and read back by
``transpose="auto"``'s rule, with fake timings on the CPU; on the GPU, that
the measured correction makes the rule pick the faster transpose on both
probes."""

from __future__ import annotations

import math

import pytest

from leveret.cuda import tuning
from leveret.cuda.raytrace import auto_transpose, transpose_times, tuned_atomic_scale
from leveret.operators import autotune


def test_atomic_scale_is_the_geometric_mean_of_the_ratio_errors():
    assert autotune.atomic_scale([(1.0, 4.0)], [(2.0, 8.0)]) == pytest.approx(1.0)
    # measured atomic/voxel 2x and 8x the predicted ratio: geometric mean 4
    assert autotune.atomic_scale([(1.0, 2.0), (1.0, 8.0)], [(1.0, 1.0), (1.0, 1.0)]) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="atomic_scale"):
        autotune.atomic_scale([(1.0, 2.0)], [])


def test_probes_straddle_the_rule():
    """The two probes sit on either side of the rule at scale 1 (the gather
    predicted faster on the full detector, the scatter on 8 rows), so their
    timings measure the correction where it decides."""
    full, few = (transpose_times(autotune.probe_work(p)) for p in autotune.TRANSPOSE_PROBES)
    assert auto_transpose(full) == "gather" and auto_transpose(few) == "scatter"


def test_tune_transpose_caches_the_correction_and_auto_uses_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LEVERET_CACHE_DIR", str(tmp_path))
    assert tuned_atomic_scale("stand-in GPU") == 1.0  # nothing measured: the model as fitted
    predicted = {p["rows"]: transpose_times(autotune.probe_work(p)) for p in autotune.TRANSPOSE_PROBES}
    calls = []

    def fake(geometry, volume, transpose):
        # a GPU whose band transpose is 5x slower than the model says, its gather as predicted
        calls.append((geometry.n_rows, transpose))
        rows = None if geometry.n_rows != 8 else 8
        return predicted[rows][transpose] * (5.0 if transpose == "scatter" else 1.0)

    result = autotune.tune_transpose(fake, gpu="stand-in GPU")
    assert result["atomic_scale"] == pytest.approx(5.0, rel=1e-3)
    assert len(calls) == 4 and {t for _, t in calls} == {"gather", "scatter"}
    assert tuned_atomic_scale("stand-in GPU") == pytest.approx(5.0, rel=1e-3)
    assert tuned_atomic_scale("another GPU") == 1.0
    # a detector of 64 rows, sent to the band transpose by the fitted model by less than 5x, goes to the
    # gather here
    rows64 = {"rows": 64, "sampling": 1.0}
    few = transpose_times(autotune.probe_work(rows64))
    assert few["scatter"] < few["gather"] < 5.0 * few["scatter"]
    assert auto_transpose(transpose_times(autotune.probe_work(rows64), atomic_scale=5.0)) == "gather"
    assert any("cone/transpose" in line and "atomic_scale=5" in line for line in tuning.describe())


def test_store_entry_keeps_other_entries(tmp_path):
    path = tmp_path / "tuning.json"
    tuning.store_entry("gpu", "a", {"kernel": "alu", "ratio": (1, 2)}, seconds=1.0, tried=2, path=path)
    tuning.store_entry("gpu", "b", {"atomic_scale": 2.0}, seconds=1.0, tried=2, path=path)
    assert tuning.lookup("gpu", "a", path=path) == {"kernel": "alu", "ratio": [1, 2]}
    assert tuning.lookup("gpu", "b", path=path) == {"atomic_scale": 2.0}
    assert not list(tmp_path.glob(".tuning-*"))  # no temporary file left


@pytest.mark.gpu
def test_tuned_rule_picks_the_faster_transpose_on_the_probes(tmp_path, monkeypatch):
    """On this GPU: the measured correction, cached, makes ``transpose="auto"``
    pick the transpose measured faster on each probe."""
    monkeypatch.setenv("LEVERET_CACHE_DIR", str(tmp_path))
    result = autotune.tune_transpose()
    scale = result["atomic_scale"]
    assert math.isfinite(scale) and scale > 0
    for probe, (t_voxel, t_atomic) in zip(autotune.TRANSPOSE_PROBES, result["measured"]):
        faster = "gather" if t_voxel <= t_atomic else "scatter"
        assert auto_transpose(transpose_times(autotune.probe_work(probe), atomic_scale=scale)) == faster
