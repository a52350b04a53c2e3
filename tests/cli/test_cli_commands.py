"""Every leveret subcommand end to end on small data: recon into each format,
--dry-run, config files, the centre, previews, the benchmark, bad arguments,
exit codes, and a real Ctrl-C (SIGINT) that leaves no partial files."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import leveret
import leveret.execution.slab
from leveret import phantom
from leveret.cli import main
from leveret.io import read_array, write_array

SRC = Path(leveret.__file__).resolve().parents[1]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def scan(tmp_path):
    """Raw counts of a shifted-axis scan of a ball (uint16), flat and dark, on disk."""
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 120, endpoint=False), 48, n_rows=8, center=25.0)
    lines = phantom.ball(14.0).project(g)
    dark = np.full(lines.shape[1:], 100.0)
    flat = np.full(lines.shape[1:], 20100.0)
    raw = np.round(dark + 20000.0 * np.exp(-0.05 * lines)).astype(np.uint16)
    write_array(tmp_path / "raw/", raw)
    write_array(tmp_path / "flat.tif", flat.astype(np.float32))
    write_array(tmp_path / "dark.tif", dark.astype(np.float32))
    np.savetxt(tmp_path / "angles.txt", np.r_[[-1, -1], np.degrees(g.angles), [-1]])  # 2 + 120 + 1 lines
    from leveret.preprocess import minus_log, normalize

    ref = leveret.fbp(minus_log(normalize(raw, flat, dark)), g, backend="cpu")
    return tmp_path, g, ref


def _flags(folder):
    return [
        str(folder / "raw"),
        "--angles",
        str(folder / "angles.txt"),
        "--angle-lines",
        "2:122",
        "--flat",
        str(folder / "flat.tif"),
        "--dark",
        str(folder / "dark.tif"),
        "--backend",
        "cpu",
        "--no-progress",
    ]


@pytest.mark.parametrize(
    "name",
    [
        "rec.h5",
        pytest.param(
            "rec.zarr", marks=pytest.mark.skipif(importlib.util.find_spec("zarr") is None, reason="zarr not installed")
        ),
        "rec.tif",
        "rec.npy",
        "rec/",
    ],
)
def test_recon_raw_tiffs_into_every_format(scan, name):
    folder, g, ref = scan
    flags = _flags(folder)
    assert main(["recon", flags[0], str(folder / name)] + flags[1:] + ["--center", "25"]) == 0
    np.testing.assert_allclose(read_array(folder / name), ref, rtol=0, atol=2e-5)
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]


def test_recon_auto_centre_and_small_host_cap(scan, capsys):
    folder, g, ref = scan
    flags = _flags(folder)
    assert (
        main(["recon", flags[0], str(folder / "r.h5")] + flags[1:] + ["--center", "auto", "--host-memory", "1M", "-v"])
        == 0
    )
    err = capsys.readouterr().err
    centre = float(err.split("centre of rotation: ")[1].split()[0])
    assert abs(centre - 25.0) < 0.25
    import re

    n_slabs = int(re.search(r"in (\d+) slab\(s\)", err).group(1))
    assert 1 < n_slabs < 8, err
    out = read_array(folder / "r.h5")
    x = g.default_volume().coordinates("x")
    inside = np.hypot(x[None], x[:, None]) < 11
    assert abs(out[4][inside].mean() - 0.05) < 0.002  # the ball's attenuation, absolutely


def test_dry_run_prints_only_the_plan(scan, capsys):
    folder, _, _ = scan
    flags = _flags(folder)
    assert main(["recon", flags[0], str(folder / "r.zarr")] + flags[1:] + ["--dry-run", "--host-memory", "1M"]) == 0
    out, err = capsys.readouterr()
    assert "memory plan (cpu)" in out and "<- chosen" in out and "host limit 1 MiB" in out
    assert err == ""
    assert sorted(p.name for p in folder.iterdir()) == ["angles.txt", "dark.tif", "flat.tif", "raw"]


def test_config_files_equal_the_flags(scan, capsys):
    folder, g, ref = scan
    toml = folder / "job.toml"
    toml.write_text(f'''
input = "{folder / "raw"}"
angles = "{folder / "angles.txt"}"
angle-lines = "2:122"
flat = "{folder / "flat.tif"}"
dark = "{folder / "dark.tif"}"
backend = "cpu"
no_progress = true

[recon]
output = "{folder / "from_toml.npy"}"
center = 25
filter = "hann"
''')
    assert main(["recon", "--config", str(toml)]) == 0
    flags = _flags(folder)
    assert (
        main(["recon", flags[0], str(folder / "from_flags.npy")] + flags[1:] + ["--center", "25", "--filter", "hann"])
        == 0
    )
    np.testing.assert_array_equal(np.load(folder / "from_toml.npy"), np.load(folder / "from_flags.npy"))
    # flags win over the file
    assert (
        main(["recon", "--config", str(toml), "--filter", "ram-lak", str(folder / "raw"), str(folder / "override.npy")])
        == 0
    )
    np.testing.assert_allclose(np.load(folder / "override.npy"), ref, rtol=0, atol=2e-5)

    yaml = pytest.importorskip("yaml")
    y = folder / "job.yaml"
    y.write_text(
        yaml.safe_dump(
            {
                "input": str(folder / "raw"),
                "output": str(folder / "from_yaml.npy"),
                "angles": str(folder / "angles.txt"),
                "angle_lines": "2:122",
                "flat": str(folder / "flat.tif"),
                "dark": str(folder / "dark.tif"),
                "center": 25.0,
                "filter": "hann",
                "backend": "cpu",
                "no-progress": True,
            }
        )
    )
    assert main(["recon", "--config", str(y)]) == 0
    np.testing.assert_array_equal(np.load(folder / "from_yaml.npy"), np.load(folder / "from_flags.npy"))

    capsys.readouterr()
    (folder / "bad.toml").write_text('filtr = "hann"\n')
    assert main(["recon", "--config", str(folder / "bad.toml")]) == 2
    assert "unknown option 'filtr'" in capsys.readouterr().err
    (folder / "bad2.toml").write_text('filter = "nope"\n')
    assert main(["recon", "--config", str(folder / "bad2.toml")]) == 2
    assert "filter: expected one of" in capsys.readouterr().err
    (folder / "bad3.toml").write_text("filter = \n")
    assert main(["recon", "--config", str(folder / "bad3.toml")]) == 2
    assert "not valid TOML" in capsys.readouterr().err


def test_yaml_without_pyyaml_is_a_clear_error(tmp_path, monkeypatch, capsys):
    (tmp_path / "c.yaml").write_text("backend: cpu\n")
    monkeypatch.setitem(sys.modules, "yaml", None)
    assert main(["info", "--config", str(tmp_path / "c.yaml")]) == 2
    assert "YAML files need PyYAML" in capsys.readouterr().err


def test_nxtomo_input_brings_its_angles_flats_and_darks(tmp_path):
    import h5py

    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 60, endpoint=False), 32, n_rows=4)
    lines = phantom.ball(9.0).project(g)
    proj = (1000.0 * np.exp(-0.05 * lines)).astype(np.float32)
    frames = np.concatenate([np.full((2, 4, 32), 1000.0, np.float32), np.zeros((1, 4, 32), np.float32), proj])
    keys = np.r_[[1, 1, 2], np.zeros(60, int)]
    with h5py.File(tmp_path / "scan.nxs", "w") as f:
        f["entry/data/data"] = frames
        f["entry/data/image_key"] = keys
        f["entry/data/rotation_angle"] = np.r_[[0, 0, 0], np.degrees(g.angles)]
    assert (
        main(["recon", str(tmp_path / "scan.nxs"), str(tmp_path / "r.npy"), "--backend", "cpu", "--no-progress", "-q"])
        == 0
    )
    np.testing.assert_allclose(
        np.load(tmp_path / "r.npy"), leveret.fbp(0.05 * lines, g, backend="cpu"), rtol=0, atol=1e-4
    )


def test_center_command_with_sweep_montage_and_json(scan, capsys):
    folder, _, _ = scan
    flags = _flags(folder)
    assert (
        main(
            ["center"]
            + flags
            + ["--sweep", "2", "--step", "0.5", "--montage", str(folder / "m.png"), "--json", str(folder / "c.json")]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "confidence" in out and "<- best" in out
    result = json.loads((folder / "c.json").read_text())
    assert abs(result["center"] - 25.0) < 0.25 and abs(result["sweep_best"] - result["center"]) <= 1.0
    assert 0 < result["confidence"] <= 1
    assert (folder / "m.png").read_bytes()[:8] == PNG
    assert main(["center"] + flags + ["--montage", str(folder / "x.png")]) == 2


def test_preview_of_a_scan_and_of_a_volume(scan):
    folder, g, ref = scan
    flags = _flags(folder)
    assert main(["preview"] + flags + ["--center", "auto", "-o", str(folder / "prev")]) == 0
    names = sorted(p.name for p in (folder / "prev").iterdir())
    assert names == ["geometry.png", "sinogram.png", "slices.png"]
    assert all((folder / "prev" / n).read_bytes()[:8] == PNG for n in names)
    write_array(folder / "vol.h5", ref)
    assert main(["preview", str(folder / "vol.h5"), "-o", str(folder / "pv")]) == 0
    assert [p.name for p in (folder / "pv").iterdir()] == ["slices.png"]
    assert main(["preview"] + flags + ["--bin", "100", "-o", str(folder / "bad")]) == 2


def test_bench_info_and_help(tmp_path, capsys):
    assert (
        main(
            [
                "bench",
                "--backend",
                "cpu",
                "--size",
                "16",
                "--slices",
                "2",
                "--repeats",
                "1",
                "--json",
                str(tmp_path / "b.json"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "fbp parallel" in out and "fdk cone" in out and "GU/s" in out
    rows = json.loads((tmp_path / "b.json").read_text())["results"]
    assert len(rows) == 2 and all(r["gups"] > 0 for r in rows)
    assert main(["info"]) == 0 and "host" in capsys.readouterr().out
    for cmd in ([], ["recon"], ["center"], ["preview"], ["bench"]):
        with pytest.raises(SystemExit) as e:
            main(cmd + ["--help"])
        assert e.value.code == 0
        assert "examples:" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args,message",
    [
        (["recon", "in.npy"], "output: give the output path"),
        (["recon", "nope/", "o.h5", "--angles", "0:180:4"], "input: no such file"),
        (["recon", "x.npy", "o.png", "--angles", "0:180:4"], "output: unknown extension"),
        (["recon", "RAW", "o.h5", "--angle-lines", "5:3"], "--angle-lines"),
        (["recon", "RAW", "o.h5", "--host-memory", "1K"], "one slice does not fit"),
    ],
)
def test_bad_input_exits_2_with_one_line(scan, capsys, monkeypatch, args, message):
    folder, _, _ = scan
    monkeypatch.chdir(folder)
    if args[1] == "RAW":  # the good flags, then the bad one (the last one given wins)
        args = ["recon", _flags(folder)[0], args[2]] + _flags(folder)[1:] + args[3:]
    rc = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and message in err[-1], err


def test_argparse_errors_exit_2(capsys):
    for bad in (
        ["recon", "a", "b", "--filter", "nope"],
        ["recon", "a", "b", "--host-memory", "lots"],
        ["bench", "--size", "0"],
        ["nonsense"],
    ):
        with pytest.raises(SystemExit) as e:
            main(bad)
        assert e.value.code == 2


def test_unexpected_failure_exits_1(scan, capsys, monkeypatch):
    folder, _, _ = scan

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(leveret.execution.slab, "reconstruct_slab", broken)
    flags = _flags(folder)
    assert main(["recon", flags[0], str(folder / "r.h5")] + flags[1:]) == 1
    assert "failed: ZeroDivisionError: a bug (run with -v" in capsys.readouterr().err
    assert not (folder / "r.h5").exists() and not list(folder.glob(".r.h5*"))


def _wait_for_slabs(manifest: Path, proc, timeout=120.0):
    """Until the run has recorded a slab (so it is mid-run, past any compilation); the
    timeout only ends a run that never gets there."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if json.loads(manifest.read_text())["done"]:
                return
        except (OSError, ValueError):
            pass
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.02)
    raise AssertionError("the run never wrote a slab")


@pytest.mark.parametrize("resume", [False, True])
def test_ctrl_c_mid_run_exits_130_and_leaves_no_partial_files(tmp_path, resume):
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 360, endpoint=False), 192, n_rows=48)
    proj = phantom.shepp_logan_3d(radius=90.0).project(g).astype(np.float32)
    np.save(tmp_path / "p.npy", proj)
    out = tmp_path / "rec.h5"
    cmd = [
        sys.executable,
        "-m",
        "leveret",
        "recon",
        str(tmp_path / "p.npy"),
        str(out),
        "--angles",
        "0:180:360",
        "--backend",
        "cpu",
        "--slab-slices",
        "1",
        "--no-progress",
    ] + (["--resume"] if resume else [])
    env = dict(os.environ, PYTHONPATH=str(SRC), NUMBA_NUM_THREADS="1")
    # A shell's background jobs inherit SIGINT ignored; a terminal's Ctrl-C finds it at its default.
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _wait_for_slabs(tmp_path / ".rec.h5.partial" / "manifest.json", proc)
    proc.send_signal(signal.SIGINT)
    # A Ctrl-C that waited for the run to finish would leave rec.h5 written (and the resumed
    # manifest complete); the timeout only guards against a hang.
    proc.wait(timeout=120)
    err = proc.stderr.read()
    assert proc.returncode == 130 and "interrupted" in err, err
    assert not out.exists()
    left = sorted(p.name for p in tmp_path.iterdir())
    if not resume:
        assert left == ["p.npy"]
        return
    assert left == [".rec.h5.partial", "p.npy"]
    done = json.loads((tmp_path / ".rec.h5.partial" / "manifest.json").read_text())["done"]
    assert done and done[0][0] == 0 and done[-1][1] < 48
    again = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert again.returncode == 0, again.stderr
    assert "slice(s) resumed" in again.stderr
    np.testing.assert_allclose(read_array(out), leveret.fbp(proj, g, backend="cpu"), rtol=0, atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.npy", "rec.h5"]


def test_the_real_scan_in_one_command(savu_scan, tmp_path, capsys):
    """The guide's command: raw TIFFs, flat, dark, angles file, centre search,
    out-of-core into HDF5 (several slabs), equal to the in-memory pipeline."""
    from leveret.preprocess import minus_log, normalize

    s = leveret.datasets.savu_scan().write(tmp_path / "savu")
    flags = [
        str(s / "projections"),
        "--angles",
        str(s / "angles.txt"),
        "--flat",
        str(s / "flat.tiff"),
        "--dark",
        str(s / "dark.tiff"),
        "--backend",
        "cpu",
        "--no-progress",
    ]
    assert main(["center"] + flags + ["--sweep", "2", "--step", "0.25", "--json", str(tmp_path / "c.json")]) == 0
    c = json.loads((tmp_path / "c.json").read_text())
    assert 85 < c["center"] < 87 and abs(c["sweep_best"] - c["center"]) <= 1.0 and c["confidence"] > 0.5
    capsys.readouterr()
    assert (
        main(["recon", flags[0], str(tmp_path / "rec.h5")] + flags[1:] + ["--center", "auto", "--host-memory", "8M"])
        == 0
    )
    err = capsys.readouterr().err
    assert "slab(s) of" in err and "1 slab(s)" not in err
    lines = minus_log(normalize(savu_scan.projections, savu_scan.flat, savu_scan.dark))
    g = leveret.ParallelGeometry(savu_scan.angles, 160, n_rows=135, center=c["center"])
    np.testing.assert_allclose(read_array(tmp_path / "rec.h5"), leveret.fbp(lines, g, backend="cpu"), rtol=0, atol=1e-5)


def test_recon_with_stripe_removal(scan):
    from leveret.preprocess import minus_log, normalize, remove_stripes

    folder, g, _ = scan
    raw = read_array(folder / "raw")
    lines = minus_log(normalize(raw, read_array(folder / "flat.tif"), read_array(folder / "dark.tif")))
    ref = leveret.fbp(remove_stripes(lines, method="sort", size=7), g, backend="cpu")
    flags = _flags(folder)
    assert (
        main(
            ["recon", flags[0], str(folder / "r.npy")]
            + flags[1:]
            + ["--center", "25", "--stripes", "sort", "--stripe-size", "7", "--slab-slices", "3"]
        )
        == 0
    )
    np.testing.assert_allclose(np.load(folder / "r.npy"), ref, rtol=0, atol=1e-6)
    assert (
        main(["recon", flags[0], str(folder / "s.npy")] + flags[1:] + ["--stripe-size", "4", "--stripes", "mean"]) == 2
    )


def test_dry_run_plan_is_the_run_plan_and_a_log_gets_wrote_on_its_own_line(scan, capsys):
    """--dry-run prints the slabs the run writes; with stderr a file (not a terminal)
    the progress bar stays, so 'wrote ...' starts a line of its own."""
    folder, _, _ = scan
    flags = _flags(folder)
    args = ["recon", flags[0], str(folder / "r.h5")] + flags[1:] + ["--host-memory", "1M"]
    assert main(args + ["--dry-run"]) == 0
    planned = re.search(r"in (\d+) slab\(s\) of (\d+) slice", capsys.readouterr().out).groups()
    assert main([a for a in args if a != "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert re.search(rf"^wrote .*r\.h5: {planned[0]} slab\(s\) of up to {planned[1]} slice", err, re.M), err
