"""Plausibility warnings: one line each on stderr for a scan that reads fine
but is probably not what was meant; the result is the same with or without
them, and --quiet silences them. The centre estimate's confidence drops when
its two methods disagree or when it sits on the edge of its search range."""

from __future__ import annotations

import json

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.cli import main
from leveret.preprocess import find_center


def warnings_in(err: str) -> list[str]:
    return [line for line in err.splitlines() if ": warning: " in line]


@pytest.fixture
def scan(tmp_path):
    """Line integrals of a ball, 60 views over 180 degrees, 4 rows x 32 columns."""
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 60, endpoint=False), 32, n_rows=4)
    lines = phantom.ball(9.0).project(g).astype(np.float32)
    np.save(tmp_path / "proj.npy", lines)
    return tmp_path, lines


def recon(folder, name, *flags):
    return main(["recon", str(folder / "proj.npy"), str(folder / name), "--backend", "cpu", "--no-progress", *flags])


def test_a_full_scan_gets_no_warning(scan, capsys):
    folder, _ = scan
    assert recon(folder, "a.npy", "--angles", "0:180:60") == 0
    assert warnings_in(capsys.readouterr().err) == []


def test_radians_read_as_degrees_warn_once_without_changing_the_result(scan, capsys):
    folder, _ = scan
    assert recon(folder, "loud.npy", "--angles", "0:3.14159:60") == 0
    warned = warnings_in(capsys.readouterr().err)
    assert len(warned) == 1
    assert warned[0].startswith("leveret recon: warning: --angles: the scan covers 3.14 degrees (< 170)")
    assert "--angle-unit radian" in warned[0] and "--limited-angle" in warned[0]
    assert recon(folder, "quiet.npy", "--angles", "0:3.14159:60", "--quiet") == 0
    assert capsys.readouterr().err == ""
    np.testing.assert_array_equal(np.load(folder / "loud.npy"), np.load(folder / "quiet.npy"))
    # meant as radians, or meant as a limited angle: no warning
    assert recon(folder, "rad.npy", "--angles", "0:3.14159:60", "--angle-unit", "radian") == 0
    assert recon(folder, "lim.npy", "--angles", "0:3.14159:60", "--limited-angle") == 0
    assert warnings_in(capsys.readouterr().err) == []
    np.testing.assert_array_equal(np.load(folder / "lim.npy"), np.load(folder / "quiet.npy"))


@pytest.mark.parametrize("dtype", [np.uint16, np.float32])
def test_raw_counts_without_flats_or_minus_log_warn_whatever_their_dtype(scan, capsys, dtype):
    folder, lines = scan
    np.save(folder / "proj.npy", np.round(1000 * np.exp(-0.05 * lines)).astype(dtype))
    assert recon(folder, "a.npy", "--angles", "0:180:60") == 0
    warned = warnings_in(capsys.readouterr().err)
    assert len(warned) == 1 and "--flat/--dark: the projections look like raw detector counts" in warned[0]
    assert warned[0].endswith("give --flat and --dark (or --minus-log if they are transmissions)")
    assert recon(folder, "b.npy", "--angles", "0:180:60", "-q") == 0
    np.testing.assert_array_equal(np.load(folder / "a.npy"), np.load(folder / "b.npy"))
    np.save(folder / "proj.npy", (np.round(1000 * np.exp(-0.05 * lines)) / 1000).astype(dtype))
    if dtype == np.float32:  # transmissions
        assert recon(folder, "c.npy", "--angles", "0:180:60", "--minus-log") == 0
        assert warnings_in(capsys.readouterr().err) == []


def test_integer_line_integrals_are_line_integrals(scan, capsys):
    """Raw counts are recognised by their values (brightest outside the sample), not their dtype."""
    folder, lines = scan
    np.save(folder / "proj.npy", np.round(100 * lines).astype(np.uint16))
    assert recon(folder, "a.npy", "--angles", "0:180:60") == 0
    assert warnings_in(capsys.readouterr().err) == []


def drifted_scan(folder, drift):
    """A 0..180 degree scan (both ends: one 180-degree pair) whose last view
    moved by ``drift`` pixels: the pairs method sees centre + drift / 2, a
    sweep over all views sees the true centre, 24."""
    angles = np.linspace(0, np.pi, 91)
    g = leveret.ParallelGeometry(angles, 48, n_rows=4, center=24.0)
    lines = phantom.ball(10.0).project(g).astype(np.float32)
    lines[-1] = np.roll(lines[-1], drift, axis=-1)
    np.save(folder / "p.npy", lines)
    return [
        "center",
        str(folder / "p.npy"),
        "--angles",
        "0:180:91:endpoint",
        "--backend",
        "cpu",
        "--json",
        str(folder / "c.json"),
    ]


def test_centre_methods_that_agree_keep_their_confidence(tmp_path, capsys):
    assert main(drifted_scan(tmp_path, 0)) == 0
    assert warnings_in(capsys.readouterr().err) == []
    c = json.loads((tmp_path / "c.json").read_text())
    assert c["method"] == "pairs" and abs(c["center"] - 24.0) < 0.01 and c["confidence"] > 0.99
    assert c["check"]["method"] == "sweep" and c["check"]["difference"] <= 0.25  # half the check's 0.5 px step


def test_centre_methods_that_disagree_lower_the_confidence(tmp_path, capsys):
    assert main(drifted_scan(tmp_path, 4)) == 0
    out, err = capsys.readouterr()
    c = json.loads((tmp_path / "c.json").read_text())
    # pairs 26 (24 + 4 / 2) with a perfect match, the sweep 24: 2 px apart, so confidence / 2
    assert abs(c["center"] - 26.0) < 0.01 and abs(c["check"]["center"] - 24.0) <= 0.25
    assert abs(c["confidence"] - 1.0 / c["check"]["difference"]) < 1e-6 and c["confidence"] < 0.6
    warned = warnings_in(err)
    assert len(warned) == 1 and "the methods disagree by 2.00 px (pairs 26.00, sweep 24.00)" in warned[0]
    assert f"confidence {c['confidence']:.2f}" in out
    assert main(drifted_scan(tmp_path, 4) + ["--quiet"]) == 0
    assert capsys.readouterr().err == ""


def off_centre_scan(center):
    """A small off-axis ball scanned about column ``center`` of 48."""
    angles = np.linspace(0, np.pi, 91)
    g = leveret.ParallelGeometry(angles, 48, n_rows=4, center=center)
    return phantom.ball(4.0, center=(2.0, 1.0, 0.0)).project(g), angles


def test_an_estimate_on_the_edge_of_the_search_range_halves_the_confidence():
    lines, angles = off_centre_scan(30.0)  # inside the default range [11.75, 35.25]
    inside = find_center(lines, angles)
    assert not inside.details["at_edge"] and abs(inside.center - 30.0) < 0.01 and inside.confidence > 0.99
    lines, angles = off_centre_scan(36.0)  # beyond it: the estimate stops at the edge
    edge = find_center(lines, angles)
    assert edge.details["at_edge"] and edge.center > 35.25 - 0.5 and edge.confidence <= 0.5
    # the same scan searched over a range that holds the axis: measured, full confidence
    wide = find_center(lines, angles, search=(20.0, 44.0))
    assert not wide.details["at_edge"] and abs(wide.center - 36.0) < 0.01 and wide.confidence > 0.99
    sweep = find_center(lines, angles, method="sweep")
    assert sweep.details["at_edge"]


def test_centre_command_warns_about_an_edge_estimate(tmp_path, capsys):
    lines, _ = off_centre_scan(36.0)
    np.save(tmp_path / "p.npy", lines.astype(np.float32))
    assert main(["center", str(tmp_path / "p.npy"), "--angles", "0:180:91:endpoint", "--backend", "cpu"]) == 0
    out, err = capsys.readouterr()
    warned = warnings_in(err)
    assert any("sits on the edge of the search range" in w for w in warned), err
    confidence = float(out.split("confidence")[1].split()[0])
    assert confidence <= 0.5


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--kernel", "texture"], "--kernel: 'texture' chooses a CUDA kernel; the CPU backend ignores it"),
        (
            ["--precision", "float16"],
            "--precision: float16 filtered sinograms are a GPU mode; the CPU backend computes in float32",
        ),
    ],
)
def test_gpu_only_flags_on_the_cpu_warn_and_change_nothing(scan, capsys, flags, message):
    folder, _ = scan
    plain = recon(folder, "plain.npy", "--angles", "0:180:60")
    capsys.readouterr()
    flagged = recon(folder, "flagged.npy", "--angles", "0:180:60", *flags)
    assert warnings_in(capsys.readouterr().err) == [f"leveret recon: warning: {message}"]
    np.testing.assert_array_equal(flagged, plain)
