"""The leveret command end to end on small data (in-process and as a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import leveret
import leveret.execution.slab
from leveret import phantom
from leveret.cli import main
from leveret.io import read_array, write_array

SRC = Path(leveret.__file__).resolve().parents[1]


@pytest.fixture
def scan(tmp_path):
    """A small 3D scan of a ball on disk as .npy, with its angles in a text file."""
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 90, endpoint=False), 40, n_rows=6)
    proj = phantom.ball(12.0).project(g).astype(np.float32)
    write_array(tmp_path / "proj.npy", proj)
    np.savetxt(tmp_path / "angles.txt", np.degrees(g.angles))
    return tmp_path, g, proj


def test_fbp_npy_to_tiff_round_trip(scan):
    folder, g, proj = scan
    rc = main(
        [
            "fbp",
            str(folder / "proj.npy"),
            str(folder / "rec.tif"),
            "--angles",
            "0:180:90",
            "--backend",
            "cpu",
            "--no-progress",
        ]
    )
    assert rc == 0
    rec = read_array(folder / "rec.tif")
    np.testing.assert_allclose(rec, leveret.fbp(proj, g, backend="cpu"), rtol=1e-6, atol=1e-6)
    x = g.default_volume().coordinates("x")
    assert abs(rec[3][np.hypot(x[None], x[:, None]) < 9].mean() - 1) < 0.01


def test_fbp_tiff_folder_and_hdf5_inputs_with_angle_file(scan):
    folder, g, proj = scan
    write_array(folder / "tiffs/", proj)
    write_array(folder / "scan.h5:/exchange/data", proj)
    for source in (str(folder / "tiffs"), str(folder / "scan.h5:/exchange/data")):
        out = folder / f"rec_{len(source)}.npy"
        assert (
            main(
                [
                    "fbp",
                    source,
                    str(out),
                    "--angles",
                    str(folder / "angles.txt"),
                    "--backend",
                    "cpu",
                    "--center",
                    "19.5",
                    "--filter",
                    "hann",
                    "--no-progress",
                ]
            )
            == 0
        )
        np.testing.assert_allclose(
            np.load(out), leveret.fbp(proj, g, filter="hann", backend="cpu"), rtol=1e-5, atol=1e-6
        )


def test_fbp_with_flat_and_dark(scan):
    folder, g, proj = scan
    dark = np.full(proj.shape[1:], 100.0, np.float32)
    flat = np.full(proj.shape[1:], 10100.0, np.float32)
    proj = 0.1 * proj  # transmissions a float32 count can resolve
    raw = (dark + 10000.0 * np.exp(-proj)).astype(np.float32)
    write_array(folder / "raw.npy", raw)
    write_array(folder / "flat.npy", flat)
    write_array(folder / "dark.npy", dark)
    assert (
        main(
            [
                "fbp",
                str(folder / "raw.npy"),
                str(folder / "rec.npy"),
                "--angles",
                "0:180:90",
                "--flat",
                str(folder / "flat.npy"),
                "--dark",
                str(folder / "dark.npy"),
                "--backend",
                "cpu",
                "--no-progress",
            ]
        )
        == 0
    )
    np.testing.assert_allclose(np.load(folder / "rec.npy"), leveret.fbp(proj, g, backend="cpu"), atol=1e-4)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--angles", "0:180:45"], "--angles: expected 90 angles"),
        (["--angles", "0:180:90", "--center", "80"], "--center: expected a column position"),
        (["--angles", "0:180:90", "--flat", "x.npy"], "--flat/--dark"),
        (["--angles", "0:180:90", "--backend", "cpu", "--slab-slices", "0"], "--slab-slices: expected a positive"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(scan, capsys, args, message):
    folder, _, _ = scan
    rc = main(["fbp", str(folder / "proj.npy"), str(folder / "out.npy")] + args)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and message in err[-1] and err[-1].startswith("leveret fbp: error:")
    assert not (folder / "out.npy").exists()
    assert not [p for p in folder.iterdir() if p.name.startswith(".out")]  # no temporaries


def test_existing_output_is_refused_before_any_work(scan, capsys):
    folder, _, _ = scan
    (folder / "rec.npy").write_bytes(b"keep me")
    assert main(["fbp", str(folder / "proj.npy"), str(folder / "rec.npy"), "--angles", "0:180:90"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (folder / "rec.npy").read_bytes() == b"keep me"


def test_missing_input_and_nan_input(scan, capsys):
    folder, _, proj = scan
    assert main(["fbp", str(folder / "nope.npy"), str(folder / "o.npy"), "--angles", "0:180:90"]) == 2
    bad = proj.copy()
    bad[5, 2, 3] = np.nan
    write_array(folder / "bad.npy", bad)
    assert (
        main(
            [
                "fbp",
                str(folder / "bad.npy"),
                str(folder / "o.npy"),
                "--angles",
                "0:180:90",
                "--backend",
                "cpu",
                "--no-progress",
            ]
        )
        == 2
    )
    assert "projections: expected finite values" in capsys.readouterr().err
    assert not (folder / "o.npy").exists()


def test_interrupt_leaves_no_output(scan, monkeypatch, capsys):
    folder, _, _ = scan

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(leveret.execution.slab, "reconstruct_slab", interrupted)
    rc = main(["fbp", str(folder / "proj.npy"), str(folder / "o.npy"), "--angles", "0:180:90"])
    assert rc == 130 and "interrupted" in capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir()) == ["angles.txt", "proj.npy"]


def test_info_and_demo_as_a_real_command(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(SRC), CUDA_VISIBLE_DEVICES="")
    info = subprocess.run([sys.executable, "-m", "leveret", "info"], capture_output=True, text=True, env=env)
    assert info.returncode == 0 and "cpu" in info.stdout and "cuda" in info.stdout
    png = tmp_path / "demo.png"
    demo = subprocess.run(
        [
            sys.executable,
            "-m",
            "leveret",
            "demo",
            "--size",
            "64",
            "--slices",
            "4",
            "--output",
            str(png),
            "--backend",
            "cpu",
            "--seed",
            "1",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert demo.returncode == 0, demo.stderr
    assert "GU/s" in demo.stdout and "RMSE" in demo.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = subprocess.run(
        [sys.executable, "-m", "leveret", "demo", "--output", str(tmp_path / "x.jpg")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_rabbitct_from_a_file(tmp_path, capsys):
    from leveret.rabbitct import make_dataset, write_rabbitct

    data = make_dataset(n_views=24, n_rows=40, n_cols=48, reference_sizes=(8, 16), backend="cpu")
    write_rabbitct(tmp_path / "tiny.rct", data)
    rc = main(
        [
            "rabbitct",
            "--input",
            str(tmp_path / "tiny.rct"),
            "--size",
            "16",
            "--backend",
            "cpu",
            "--repeats",
            "1",
            "--json",
            str(tmp_path / "r.json"),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "GUPS" in out and "RMSE" in out
    import json

    result = json.loads((tmp_path / "r.json").read_text())
    assert result["size"] == 16 and result["n_views"] == 24 and result["gups"] > 0
    assert main(["rabbitct", "--input", str(tmp_path / "tiny.rct"), "--size", "0"]) == 2
