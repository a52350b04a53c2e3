"""``leveret demo`` through the console entry point: outputs go to a named folder."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

import leveret

# The subprocess imports the leveret under test, from whatever folder it runs in.
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(Path(leveret.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]),
}


def _leveret(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "leveret", "demo", *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300
    )


def test_demo_real_reconstructs_the_bundled_scan_into_leveret_demo(tmp_path):
    run = _leveret("--real", "--backend", "cpu", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "centre of rotation: 85.87 px" in run.stdout  # the dataset's centre, found again
    assert "wrote leveret-demo/real.png" in run.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["leveret-demo"]  # nothing loose
    image = imread(tmp_path / "leveret-demo" / "real.png")
    assert image.shape[0] > 300 and image.shape[1] > 900
    assert np.ptp(image[..., :3]) > 0.5  # a picture, not a blank canvas


def test_demo_default_output_is_in_the_leveret_demo_folder(tmp_path):
    run = _leveret("--size", "32", "--slices", "2", "--backend", "cpu", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "wrote leveret-demo/demo.png" in run.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["leveret-demo"]
    assert (tmp_path / "leveret-demo" / "demo.png").stat().st_size > 0


def test_demo_output_flag_writes_where_asked(tmp_path):
    run = _leveret("--real", "--backend", "cpu", "-o", "out/real.png", cwd=tmp_path)
    # -o names a file whose folder must exist: out/ does not
    assert run.returncode == 2 and "out" in run.stderr
    (tmp_path / "out").mkdir()
    run = _leveret("--real", "--backend", "cpu", "-o", "out/real.png", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out" / "real.png").is_file()
    assert not (tmp_path / "leveret-demo").exists()


def test_demo_output_must_be_png(tmp_path):
    run = _leveret("--real", "--output", "x.jpg", cwd=tmp_path)
    assert run.returncode == 2
    assert "--output: expected a .png file" in run.stderr


@pytest.mark.gpu
def test_demo_real_on_the_gpu(tmp_path):
    run = _leveret("--real", "--backend", "cuda", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "centre of rotation: 85.87 px" in run.stdout and "fbp on " in run.stdout
    assert (tmp_path / "leveret-demo" / "real.png").is_file()


def test_a_demo_too_large_for_memory_is_refused_naming_the_flag_and_leaves_no_folder(tmp_path):
    run = _leveret("--size", "100000", "--backend", "cpu", cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    err = run.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("leveret demo: error: --size: "), run.stderr
    assert "needs about 17.5 TiB of memory" in err[0] and "available" in err[0], err[0]
    assert "Unable to allocate" not in run.stderr
    assert list(tmp_path.iterdir()) == []  # no empty leveret-demo/
