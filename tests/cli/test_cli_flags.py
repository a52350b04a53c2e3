"""Each flag of recon, center, preview and bench changes the output the way its
help says, checked on the output (quantitatively where the flag is a scale).
Flags tested elsewhere: --filter, --center, --flat/--dark, --angle-lines,
--stripes/--stripe-size, --host-memory, --dry-run, --resume, --config
(test_cli_commands.py); --limited-angle, --quiet (test_cli_warnings.py)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.cli import main
from leveret.io import read_array, read_metadata


@pytest.fixture
def scan(tmp_path):
    """Line integrals of an off-axis ball (so that sharpness and interpolation
    show), 90 views over 180 degrees, 6 rows x 40 columns, as proj.npy."""
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 90, endpoint=False), 40, n_rows=6)
    lines = phantom.ball(8.0, center=(3.0, -2.0, 0.0)).project(g).astype(np.float32)
    np.save(tmp_path / "proj.npy", lines)
    return tmp_path, g, lines


def recon(folder, name, *flags, angles=("--angles", "0:180:90")):
    """``leveret recon proj.npy NAME`` on the CPU; the volume it wrote."""
    rc = main(
        ["recon", str(folder / "proj.npy"), str(folder / name), *angles, "--backend", "cpu", "--no-progress", *flags]
    )
    assert rc == 0
    return read_array(folder / name)


def inside(g, radius=6.0):
    """Pixels well inside the ball (centre x=3, y=-2), in a volume of ``g``'s default grid."""
    vg = g.default_volume()
    x, y = vg.coordinates("x"), vg.coordinates("y")
    return np.hypot(x[None, :] - 3.0, y[:, None] + 2.0) < radius


def test_det_spacing_2_halves_the_attenuation_and_doubles_the_voxels(scan):
    folder, g, _ = scan
    one = recon(folder, "one.h5")
    two = recon(folder, "two.h5", "--det-spacing", "2")
    # the same line integrals over pixels twice as wide: the same image at half the value (exactly:
    # only the filter's 1 / det_spacing scale changes, by a power of two)
    np.testing.assert_array_equal(two, one / 2)
    assert abs(one[3][inside(g)].mean() - 1.0) < 0.01  # the ball's value with unit pixels
    assert read_metadata(folder / "one.h5")["voxel_size"] == [1.0, 1.0, 1.0]
    assert read_metadata(folder / "two.h5")["voxel_size"] == [1.0, 2.0, 2.0]


def test_row_spacing_sets_the_slice_thickness_not_the_values(scan):
    folder, _, _ = scan
    one = recon(folder, "one.h5")
    three = recon(folder, "three.h5", "--row-spacing", "3")
    np.testing.assert_array_equal(three, one)  # parallel beam: rows are independent slices
    assert read_metadata(folder / "three.h5")["voxel_size"] == [3.0, 1.0, 1.0]


def test_angle_unit_radian_reads_the_same_scan_in_radians(scan):
    folder, _, _ = scan
    degrees = recon(folder, "deg.npy")
    radians = recon(folder, "rad.npy", "--angle-unit", "radian", angles=("--angles", f"0:{np.pi!r}:90"))
    np.testing.assert_allclose(radians, degrees, rtol=0, atol=1e-6)  # measured: equal
    # without the flag the same numbers are degrees: a 3-degree scan, another image
    assert (
        np.abs(recon(folder, "as_deg.npy", "--limited-angle", angles=("--angles", f"0:{np.pi!r}:90")) - degrees).max()
        > 0.5
    )


def test_cutoff_is_the_filter_cutoff(scan):
    folder, g, lines = scan
    full = recon(folder, "c1.npy")
    half = recon(folder, "c05.npy", "--cutoff", "0.5", "--filter", "hann")
    np.testing.assert_allclose(half, leveret.fbp(lines, g, filter="hann", cutoff=0.5, backend="cpu"), rtol=0, atol=1e-6)
    # a lower cutoff blurs: the ball's edge (the steepest step along a row) is less steep
    step = lambda img: np.abs(np.diff(img[3], axis=1)).max()
    assert step(half) < 0.5 * step(full)  # measured 0.26


def test_interpolation_nearest_is_the_library_s(scan):
    folder, g, lines = scan
    linear = recon(folder, "lin.npy")
    nearest = recon(folder, "near.npy", "--interpolation", "nearest")
    np.testing.assert_allclose(
        nearest, leveret.fbp(lines, g, interpolation="nearest", backend="cpu"), rtol=0, atol=1e-6
    )
    assert np.abs(nearest - linear).max() > 0.1  # measured 0.30


def test_precision_float64_and_no_old_spelling(scan, capsys):
    folder, g, lines = scan
    single = recon(folder, "f32.npy")
    double = recon(folder, "f64.npy", "--precision", "float64")
    exact = leveret.fbp(lines.astype(np.float64), g, precision="float64", backend="cpu")
    # float64 arithmetic, stored as float32: each value is the float64 one rounded (half an ulp, 2^-24)
    assert np.all(np.abs(double - exact) <= 2.0**-24 * np.abs(exact))
    assert np.abs(single - exact).max() > 2 * np.abs(double - exact).max()  # float32 arithmetic
    assert not [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    with pytest.raises(SystemExit) as stop:  # argparse's exit, one line and the usage
        main(["recon", str(folder / "proj.npy"), str(folder / "old.npy"), "--precision", "double"])
    assert stop.value.code == 2
    assert "expected one of float32, float64, float16, got 'double'" in capsys.readouterr().err


def test_minus_log_takes_the_log_of_transmissions(scan):
    folder, g, lines = scan
    lines = 0.1 * lines  # transmissions >= exp(-1.6), far above minus_log's floor
    np.save(folder / "proj.npy", lines)
    ref = recon(folder, "lines.npy")
    np.save(folder / "proj.npy", np.exp(-lines).astype(np.float32))
    rec = recon(folder, "trans.npy", "--minus-log")
    # the float32 exp/log round trip: measured 4e-8 at most in the image; 1e-6 leaves a 25x margin
    np.testing.assert_allclose(rec, ref, rtol=0, atol=1e-6)
    assert np.abs(recon(folder, "no_log.npy") - ref).max() > 0.05


@pytest.mark.parametrize(
    "compression,filters",
    [
        ("default", {"32001"}),
        ("lz4", {"32001"}),
        ("zstd", {"32001"}),
        ("gzip", {"gzip", "shuffle"}),
        ("lzf", {"lzf", "shuffle"}),
        ("none", set()),
    ],
)
def test_compression_of_hdf5_output(scan, compression, filters):
    """Blosc (the registered HDF5 filter 32001) by default; gzip, lzf and none on request."""
    import h5py

    folder, _, _ = scan
    rec = recon(folder, "c.h5", "--compression", compression)
    with h5py.File(folder / "c.h5") as f:
        (name,) = [k for k in f if isinstance(f[k], h5py.Dataset)] or ["volume"]
        assert set(f[name]._filters) == filters
        if compression in ("default", "lz4", "zstd"):  # Blosc's options: level 3, bit shuffle, the compressor
            assert f[name]._filters["32001"][4:] == (3, 2, {"zstd": 5}.get(compression, 1))
    np.testing.assert_array_equal(rec, recon(folder, "ref.npy"))


def test_slab_slices_sets_the_number_of_slabs(scan, capsys):
    folder, _, _ = scan
    capsys.readouterr()
    rec = recon(folder, "s.h5", "--slab-slices", "2")
    assert re.search(r"in 3 slab\(s\)", capsys.readouterr().err)  # 6 rows, 2 per slab
    np.testing.assert_array_equal(rec, recon(folder, "whole.npy"))


def test_no_progress_hides_the_progress_bar(scan, capsys):
    folder, _, _ = scan
    main(["recon", str(folder / "proj.npy"), str(folder / "p.h5"), "--angles", "0:180:90", "--backend", "cpu"])
    assert "reconstruct:" in capsys.readouterr().err
    recon(folder, "q.h5")
    assert "reconstruct:" not in capsys.readouterr().err


def test_overwrite_replaces_an_existing_output(scan):
    folder, _, _ = scan
    np.save(folder / "r.npy", np.zeros(3))
    assert (
        main(["recon", str(folder / "proj.npy"), str(folder / "r.npy"), "--angles", "0:180:90", "--backend", "cpu"])
        == 2
    )
    assert np.load(folder / "r.npy").shape == (3,)
    assert recon(folder, "r.npy", "--overwrite").shape == (6, 40, 40)


def test_dataset_picks_the_hdf5_dataset(scan):
    import h5py

    folder, g, lines = scan
    with h5py.File(folder / "two.h5", "w") as f:
        f["a"] = np.zeros_like(lines)
        f["b"] = lines
    assert (
        main(
            [
                "recon",
                str(folder / "two.h5"),
                str(folder / "r.npy"),
                "--dataset",
                "/b",
                "--angles",
                "0:180:90",
                "--backend",
                "cpu",
                "--no-progress",
            ]
        )
        == 0
    )
    np.testing.assert_array_equal(np.load(folder / "r.npy"), recon(folder, "ref.npy"))


def test_center_method_and_rows(tmp_path):
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 91), 40, n_rows=6, center=21.0)  # 0 and 180: a pair
    lines = phantom.ball(8.0, center=(3.0, -2.0, 0.0)).project(g).astype(np.float32)
    lines[:, 4:] = 0  # rows 4, 5 hold nothing to register
    np.save(tmp_path / "p.npy", lines)
    base = ["center", str(tmp_path / "p.npy"), "--angles", "0:180:91:endpoint", "--backend", "cpu", "-q"]
    results = {}
    for name, flags in (
        ("pairs", ["--method", "pairs"]),
        ("sweep", ["--method", "sweep"]),
        ("rows", ["--rows", "0:2"]),
        ("empty", ["--rows", "4:6"]),
    ):
        out = tmp_path / f"{name}.json"
        rc = main(base + flags + ["--json", str(out)])
        results[name] = (rc, json.loads(out.read_text()) if rc == 0 else None)
    assert results["pairs"][1]["method"] == "pairs" and results["sweep"][1]["method"] == "sweep"
    for name in ("pairs", "sweep", "rows"):
        assert abs(results[name][1]["center"] - 21.0) < 0.1, (name, results[name])
    assert results["empty"][0] == 2  # rows 4:6 are empty: "the paired views are constant"


def test_preview_bin_centre_and_filter_flags_reach_the_reconstruction(scan, monkeypatch, tmp_path):
    folder, _, _ = scan
    seen = []
    real_fbp = leveret.fbp

    def spy(data, geometry, **kwargs):
        seen.append((data.shape, geometry.det_spacing, geometry.center, kwargs))
        return real_fbp(data, geometry, **kwargs)

    monkeypatch.setattr(leveret, "fbp", spy)
    monkeypatch.chdir(tmp_path)
    for b in (1, 2):
        assert (
            main(
                [
                    "preview",
                    str(folder / "proj.npy"),
                    "--angles",
                    "0:180:90",
                    "--backend",
                    "cpu",
                    "-q",
                    "--bin",
                    str(b),
                    "-o",
                    f"b{b}",
                    "--center",
                    "20.5",
                    "--filter",
                    "hann",
                    "--cutoff",
                    "0.8",
                    "--interpolation",
                    "nearest",
                ]
            )
            == 0
        )
    # binned b x b: columns and rows / b, pixels b wide, the centre column (20.5 - (b - 1) / 2) / b
    assert [s[:3] for s in seen] == [((90, 6, 40), 1.0, 20.5), ((90, 3, 20), 2.0, 10.0)]
    for *_, kwargs in seen:
        assert (kwargs["filter"], kwargs["cutoff"], kwargs["interpolation"]) == ("hann", 0.8, "nearest")


def test_preview_and_bench_write_into_a_named_folder_and_say_where(scan, monkeypatch, capsys):
    folder, _, _ = scan
    monkeypatch.chdir(folder)
    assert main(["preview", "proj.npy", "--angles", "0:180:90", "--backend", "cpu"]) == 0
    err = capsys.readouterr().err
    assert f"into {folder.resolve() / 'preview'}" in err
    assert sorted(p.name for p in (folder / "preview").iterdir()) == ["geometry.png", "sinogram.png", "slices.png"]
    assert (
        main(["bench", "--backend", "cpu", "--size", "16", "--slices", "2", "--repeats", "1", "--json", "b.json"]) == 0
    )
    assert f"wrote {folder.resolve() / 'leveret-bench' / 'b.json'}" in capsys.readouterr().err
    assert json.loads((folder / "leveret-bench" / "b.json").read_text())["repeats"] == 1
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
                "-o",
                "mine",
                "--json",
                "b.json",
            ]
        )
        == 0
    )
    assert (folder / "mine" / "b.json").is_file()
