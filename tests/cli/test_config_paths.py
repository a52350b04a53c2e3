"""``--config``: relative paths in a config file are relative to the file's folder."""

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import leveret
from leveret.cli import build_parser
from leveret.cli.config import apply_config, load_config

ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(Path(leveret.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]),
}


def _recon_parser() -> argparse.ArgumentParser:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices["recon"]


def test_recon_from_another_folder_reads_and_writes_beside_the_config(tmp_path):
    scan = leveret.datasets.savu_scan()
    job = tmp_path / "job"
    scan.write(job / "savu")
    (job / "job.toml").write_text(
        'input = "savu/projections"\nangles = "savu/angles.txt"\n'
        'flat = "savu/flat.tiff"\ndark = "savu/dark.tiff"\ncenter = 85.87\n'
        '[recon]\noutput = "rec.npy"\n'
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "leveret", "recon", "--config", "../job/job.toml", "--backend", "cpu", "-q"],
        cwd=elsewhere,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert list(elsewhere.iterdir()) == []
    volume = np.load(job / "rec.npy")
    expected = leveret.fbp(scan.line_integrals(), scan.geometry, backend="cpu")
    # same data and geometry; slab-wise CPU FBP agrees with the in-memory one to float32 rounding
    np.testing.assert_allclose(volume, expected, rtol=0, atol=1e-5 * np.abs(expected).max())


def test_missing_file_is_reported_with_the_resolved_path(tmp_path):
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "job.toml").write_text('input = "nothing.npy"\noutput = "rec.npy"\nangles = "0:180:10"\n')
    run = subprocess.run(
        [sys.executable, "-m", "leveret", "recon", "--config", "job/job.toml"],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert os.path.join("job", "nothing.npy") in run.stderr


@pytest.mark.parametrize("ext", ["toml", "yaml"])
def test_path_options_are_joined_to_the_config_folder(tmp_path, ext):
    cfg = tmp_path / "cfg" / f"job.{ext}"
    cfg.parent.mkdir()
    sep = " = " if ext == "toml" else ": "
    cfg.write_text(
        "\n".join(
            f'{k}{sep}"{v}"'
            for k, v in {
                "input": "raw/*.tif",
                "output": "rec/",
                "flat": "flat.tif",
                "dark": "/abs/dark.tif",
                "angles": "0:180:720",
                "filter": "hann",
            }.items()
        )
        + "\n"
    )
    values = apply_config(_recon_parser(), "recon", load_config(str(cfg)), str(cfg))
    folder = str(tmp_path / "cfg")
    assert values["input"] == os.path.join(folder, "raw/*.tif")
    assert values["output"] == os.path.join(folder, "rec/")  # still a folder output
    assert values["flat"] == os.path.join(folder, "flat.tif")
    assert values["dark"] == "/abs/dark.tif"  # absolute: unchanged
    assert values["angles"] == "0:180:720"  # a range, not a file
    assert values["filter"] == "hann"  # not a path


def test_angle_file_named_like_a_range_wins(tmp_path):
    # read_angles prefers an existing file over a spec of the same spelling; so does the config
    (tmp_path / "0:180:720").write_text("0\n90\n")
    cfg = tmp_path / "job.toml"
    cfg.write_text('angles = "0:180:720"\n')
    values = apply_config(_recon_parser(), "recon", load_config(str(cfg)), str(cfg))
    assert values["angles"] == os.path.join(str(tmp_path), "0:180:720")


def test_config_in_the_current_folder_keeps_relative_paths(tmp_path):
    cfg = tmp_path / "job.toml"
    cfg.write_text('input = "raw.npy"\n')
    values = apply_config(_recon_parser(), "recon", load_config(str(cfg)), "job.toml")
    assert values["input"] == "raw.npy"
