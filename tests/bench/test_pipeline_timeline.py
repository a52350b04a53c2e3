"""tools/diagnostics/pipeline_timeline.py runs on the CPU at a small size: it
stamps the pipeline's and the writer's own methods (a rename of one of them
fails here), and its milestones follow the run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("sync", [True, False])
def test_the_timeline_stamps_every_slab_and_the_flushes_only_of_a_durable_run(tmp_path, sync):
    out = tmp_path / "t.json"
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "diagnostics" / "pipeline_timeline.py"),
            "--size",
            "24",
            "--backend",
            "cpu",
            "--dir",
            str(tmp_path),
            "--formats",
            "npy,tiff",
            "--out",
            str(out),
            *([] if sync else ["--no-sync"]),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "NUMBA_NUM_THREADS": "2"},
    )
    assert run.returncode == 0, run.stderr
    runs = json.loads(out.read_text())
    assert [r["format"] for r in runs] == ["npy", "tiff"]
    for r in runs:
        slabs = r["write"]["calls"]
        assert slabs >= 1 and r["read"]["calls"] == r["build"]["calls"] == slabs
        assert r["read"]["first"] <= r["build"]["first"] <= r["write"]["first"] <= r["finish"]["first"] <= r["wall"]
        assert ("flush" in r) == sync  # sync=False flushes nothing, not even the manifest's folder
        assert r["manifest"]["calls"] >= 2  # created, then each recorded batch
