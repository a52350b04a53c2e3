"""A new user's mistakes, caught before they become a volume.

Each mistake is applied to a correct scan (the bundled real scan written as
files, and a simulated tooth-like DXchange scan standing in for tomopy's tooth,
which leveret does not ship); `recon`, `center` and `preview` warn about it
before any work, naming the likely cause and the flag that fixes it, and
--strict makes the warning an error (exit 2, nothing written). The correct
scans give no warning."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile

import leveret
from cases import tooth_like_scan, write_dxchange
from leveret.cli import main

TOOTH_AXIS = 148.3  # tooth_like_scan's


def warnings_in(err: str) -> list[str]:
    return [line for line in err.splitlines() if ": warning: " in line]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The bundled scan as files (TIFF projections, flat, dark, angles in degrees), its line
    integrals and raw counts as .npy, its projections with rows and columns swapped, and a
    tooth-like DXchange file with its line integrals."""
    folder = tmp_path_factory.mktemp("scans")
    savu = leveret.datasets.savu_scan()
    savu.write(folder / "savu")
    np.save(folder / "lines.npy", savu.line_integrals())
    np.save(folder / "counts.npy", savu.projections.astype(np.float32))
    np.save(folder / "swapped.npy", np.ascontiguousarray(np.swapaxes(savu.projections, 1, 2)))
    tifffile.imwrite(folder / "flat_swapped.tiff", np.ascontiguousarray(savu.flat.T))
    tifffile.imwrite(folder / "dark_swapped.tiff", np.ascontiguousarray(savu.dark.T))
    tooth = tooth_like_scan()
    write_dxchange(folder / "tooth.h5", tooth)
    np.save(folder / "tooth_lines.npy", tooth.lines.astype(np.float32))
    np.save(folder / "tooth_flat.npy", tooth.flats.mean(axis=0).astype(np.float32))
    np.save(folder / "tooth_dark.npy", tooth.darks.mean(axis=0).astype(np.float32))
    return folder


def savu_args(folder, *flags, angles=None, flats=True):
    """The bundled scan's files (its angle file unless ``angles`` gives a range), flags after them."""
    f = ["--flat", str(folder / "savu/flat.tiff"), "--dark", str(folder / "savu/dark.tiff")] if flats else []
    return [str(folder / "savu/projections"), "--angles", angles or str(folder / "savu/angles.txt"), *f, *flags]


def run(command, args, output=None, *flags):
    """``leveret command args [output] --backend cpu ...``: the exit code."""
    out = [] if output is None else [str(output)]
    extra = ["--no-progress", "--overwrite"] if command == "recon" else []
    return main([command, *args[:1], *out, *args[1:], "--backend", "cpu", *extra, *flags])


def test_the_correct_scans_give_no_warning(files, tmp_path, capsys):
    assert run("recon", savu_args(files, "--center", "85.87"), tmp_path / "a.npy") == 0
    assert run("recon", savu_args(files, "--center", "auto"), tmp_path / "b.npy", "--strict") == 0
    assert run("center", savu_args(files)) == 0
    assert run("recon", [str(files / "tooth.h5"), "--center", str(TOOTH_AXIS)], tmp_path / "c.npy") == 0
    assert (
        run(
            "recon",
            [str(files / "tooth_lines.npy"), "--angles", "0:180:181:endpoint", "--center", str(TOOTH_AXIS)],
            tmp_path / "d.npy",
        )
        == 0
    )
    assert run("preview", [str(files / "tooth.h5"), "--center", "auto", "-o", str(tmp_path / "p")]) == 0
    assert warnings_in(capsys.readouterr().err) == []


def test_the_original_files_of_the_real_scan_give_no_warning(savu_files, tmp_path, capsys):
    from conftest import savu_folder

    folder = savu_folder()
    assert (
        main(
            [
                "recon",
                str(folder / "projections"),
                str(tmp_path / "a.npy"),
                "--angles",
                str(folder / "angles.txt"),
                "--angle-lines",
                "10:101",
                "--flat",
                str(folder / "flat_00001.tiff"),
                "--dark",
                str(folder / "dark_00001.tiff"),
                "--center",
                "auto",
                "--backend",
                "cpu",
                "--no-progress",
                "--strict",
            ]
        )
        == 0
    )
    assert warnings_in(capsys.readouterr().err) == []


# (name, scan arguments without the output, the warning's start, a text it holds)
MISTAKES = {
    "180 degrees as 360": (
        lambda f: savu_args(f, "--center", "85.87", angles="0:360:91"),
        "--angles: ",
        "a 180-degree scan given as 360 degrees?",
    ),
    "tooth 180 degrees as 360": (
        lambda f: [str(f / "tooth.h5"), "--angles", "0:360:181", "--center", str(TOOTH_AXIS)],
        "--angles: ",
        "a 180-degree scan given as 360",
    ),
    "a wrong centre": (lambda f: savu_args(f, "--center", "20"), "--center: ", "give --center 85.8, or --center auto"),
    "tooth, a wrong centre": (
        lambda f: [str(f / "tooth.h5"), "--center", "120"],
        "--center: ",
        "the rotation axis is probably near 148.2",
    ),  # measured 148.25
    "flats on line integrals": (
        lambda f: [
            str(f / "lines.npy"),
            "--angles",
            str(f / "savu/angles.txt"),
            "--flat",
            str(f / "savu/flat.tiff"),
            "--dark",
            str(f / "savu/dark.tiff"),
            "--center",
            "85.87",
        ],
        "--flat/--dark: ",
        "leave out --flat and --dark for line integrals",
    ),
    "tooth, flats on line integrals": (
        lambda f: [
            str(f / "tooth_lines.npy"),
            "--angles",
            "0:180:181:endpoint",
            "--flat",
            str(f / "tooth_flat.npy"),
            "--dark",
            str(f / "tooth_dark.npy"),
        ],
        "--flat/--dark: ",
        "already normalised or line integrals",
    ),
    "float32 counts without flats": (
        lambda f: [str(f / "counts.npy"), "--angles", str(f / "savu/angles.txt"), "--center", "85.87"],
        "--flat/--dark: ",
        "the projections look like raw detector counts",
    ),
    "swapped detector axes": (
        lambda f: [
            str(f / "swapped.npy"),
            "--angles",
            str(f / "savu/angles.txt"),
            "--flat",
            str(f / "flat_swapped.tiff"),
            "--dark",
            str(f / "dark_swapped.tiff"),
            "--center",
            "auto",
        ],
        "input: ",
        "the detector axes are probably swapped (rows for columns)",
    ),
    "degrees read as radians": (
        lambda f: savu_args(f, "--angle-unit", "radian", "--center", "auto"),
        "--angle-unit: ",
        "give --angle-unit degree",
    ),
    "tooth, degrees read as radians": (
        lambda f: [str(f / "tooth_lines.npy"), "--angles", "0:180:181:endpoint", "--angle-unit", "radian"],
        "--angle-unit: ",
        "the angles are degrees, read as radians",
    ),
    "-log of raw counts": (
        lambda f: savu_args(f, "--minus-log", "--center", "auto", flats=False),
        "--minus-log: ",
        "give --flat and --dark instead of --minus-log for raw counts",
    ),
}


@pytest.mark.parametrize("name", MISTAKES)
def test_each_mistake_is_warned_about_and_strict_makes_it_an_error(files, tmp_path, capsys, name):
    args, start, text = MISTAKES[name]
    args = args(files)
    assert run("recon", args, tmp_path / "out.npy", "--dry-run") == 0
    warned = warnings_in(capsys.readouterr().err)
    assert len(warned) == 1 and warned[0].startswith(f"leveret recon: warning: {start}"), warned
    assert text in warned[0], warned[0]
    assert run("recon", args, tmp_path / "strict.npy", "--strict") == 2
    last = capsys.readouterr().err.splitlines()[-1]  # (a scan file's description comes first)
    assert last.startswith(f"leveret recon: error: {start}") and text in last
    assert not (tmp_path / "strict.npy").exists()


def test_a_mistake_still_writes_its_volume_with_the_warning(files, tmp_path, capsys):
    assert run("recon", savu_args(files, "--center", "20"), tmp_path / "out.npy") == 0
    assert len(warnings_in(capsys.readouterr().err)) == 1 and (tmp_path / "out.npy").exists()


@pytest.mark.parametrize("command", ["center", "preview"])
def test_center_and_preview_check_the_scan_too(files, tmp_path, capsys, command):
    args = savu_args(files, angles="0:360:91")
    if command == "preview":
        args += ["--center", "auto", "-o", str(tmp_path / "p")]
    assert run(command, args) == 0
    warned = warnings_in(capsys.readouterr().err)
    assert warned and warned[0].startswith(f"leveret {command}: warning: --angles: ")
    assert "a 180-degree scan given as 360 degrees?" in warned[0]
    assert run(command, args + ["--strict"]) == 2
    assert "error: --angles: " in capsys.readouterr().err


def test_center_leaves_the_centre_to_its_estimate(files, capsys):
    """`leveret center` estimates the centre: no warning that the detector middle is not it."""
    assert run("center", savu_args(files, "--strict")) == 0
    out, err = capsys.readouterr()
    assert "center 85.87" in out and warnings_in(err) == []


def test_minus_log_with_flats_is_an_error(files, tmp_path, capsys):
    assert run("recon", savu_args(files, "--minus-log"), tmp_path / "out.npy") == 2
    assert capsys.readouterr().err == (
        "leveret recon: error: --minus-log: the flat/dark normalisation "
        "(--flat/--dark) takes -log already; give --minus-log only for "
        "transmissions without flats and darks\n"
    )
    assert run("recon", [str(files / "tooth.h5"), "--minus-log"], tmp_path / "out.npy") == 2
    assert "the flats and darks in" in capsys.readouterr().err


def test_quiet_silences_the_warnings_but_strict_still_stops(files, tmp_path, capsys):
    assert run("recon", savu_args(files, "--center", "20"), tmp_path / "out.npy", "--dry-run", "-q") == 0
    assert capsys.readouterr().err == ""
    assert run("recon", savu_args(files, "--center", "20"), tmp_path / "out.npy", "-q", "--strict") == 2
    assert "error: --center: " in capsys.readouterr().err


def test_a_config_table_of_no_command_is_an_error_with_the_closest_name(files, tmp_path, capsys):
    """[reconstruct] for [recon]: its filter and host_memory were dropped without a word."""
    config = tmp_path / "scan.toml"
    config.write_text(
        f'input = "{files / "lines.npy"}"\nangles = "{files / "savu/angles.txt"}"\n'
        f'center = 85.87\noutput = "{tmp_path / "out.npy"}"\n'
        '[reconstruct]\nfilter = "hann"\nhost_memory = "1G"\n[preview]\nbin = 2\n'
    )
    assert main(["recon", "--config", str(config), "--backend", "cpu", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"leveret: error: --config: {str(config)!r}: unknown table [reconstruct] (did you mean "
        "[recon]?); tables hold the options of one command: [bench], [center], "
    )
    assert not (tmp_path / "out.npy").exists()
    config.write_text(config.read_text().replace("[reconstruct]", "[recon]").replace("filter", "filtr"))
    assert main(["recon", "--config", str(config), "--backend", "cpu", "--no-progress"]) == 2
    assert "unknown option 'filtr' for 'recon' (did you mean 'filter'?); known: " in capsys.readouterr().err
    config.write_text(config.read_text().replace("filtr", "filter"))
    assert main(["recon", "--config", str(config), "--backend", "cpu", "--no-progress"]) == 0


# -- messages that point at the cause ----------------------------------------------------------------


@pytest.mark.parametrize("center", ["auto", "85.87"])
def test_a_flat_of_the_wrong_shape_names_its_shape_and_the_projections(files, tmp_path, capsys, center):
    """Not the shape of the rows the centre estimate reads (16 x 160)."""
    args = [
        str(files / "savu/projections"),
        "--angles",
        str(files / "savu/angles.txt"),
        "--flat",
        str(files / "flat_swapped.tiff"),
        "--dark",
        str(files / "savu/dark.tiff"),
        "--center",
        center,
    ]
    assert run("recon", args, tmp_path / "out.npy") == 2
    assert capsys.readouterr().err == (
        "leveret recon: error: --flat: expected one image of shape (135, 160) or a stack (k, 135, 160) matching "
        "the projections' rows and columns, got shape (160, 135)\n"
    )


@pytest.mark.parametrize("command", ["recon", "center", "preview"])
def test_swapped_flat_and_dark_say_so_with_an_estimated_centre(files, tmp_path, capsys, command):
    args = [
        str(files / "savu/projections"),
        "--angles",
        str(files / "savu/angles.txt"),
        "--flat",
        str(files / "savu/dark.tiff"),
        "--dark",
        str(files / "savu/flat.tiff"),
    ]
    args += {"recon": ["--center", "auto"], "center": [], "preview": ["--center", "auto", "-o", str(tmp_path)]}[command]
    assert run(command, args, tmp_path / "out.npy" if command == "recon" else None) == 2
    assert capsys.readouterr().err == (
        f"leveret {command}: error: --flat: the flat field is not brighter than the dark field in 100% of the "
        "detector pixels; check that --flat and --dark are not swapped\n"
    )


def test_a_wrong_hdf5_dataset_lists_what_the_file_holds(files, tmp_path, capsys):
    assert (
        run(
            "recon",
            [f"{files / 'tooth.h5'}:/exchange/projections", "--angles", "0:180:181:endpoint"],
            tmp_path / "out.npy",
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("leveret recon: error: --dataset: expected a dataset at '/exchange/projections' in ")
    assert "found nothing" in err and "datasets there: '/exchange/data' (181, 8, 320) uint16, " in err
    assert "'/exchange/theta' (181,) float64" in err
    assert (
        run(
            "recon",
            [str(files / "tooth.h5"), "--dataset", "/exchange/dat", "--angles", "0:180:181"],
            tmp_path / "out.npy",
        )
        == 2
    )
    assert "found nothing; did you mean '/exchange/data'?" in capsys.readouterr().err


def test_gpu_memory_on_a_cpu_run_warns_like_the_other_gpu_only_flags(files, tmp_path, capsys):
    args = savu_args(files, "--center", "85.87", "--gpu-memory", "2G")
    assert run("recon", args, tmp_path / "out.npy", "--dry-run") == 0
    assert warnings_in(capsys.readouterr().err) == [
        "leveret recon: warning: --gpu-memory: a GPU memory budget; the CPU backend ignores it "
        "(--host-memory caps a CPU run)"
    ]


def test_preview_bins_a_short_detector_within_its_rows(tmp_path, capsys):
    """640 columns would bin by 3, more than the 2 rows: preview bins by 2, as the detector allows."""
    from cases import tooth_like_scan

    scan = tooth_like_scan(n_rows=2, n_cols=640, center=296.6)
    np.save(tmp_path / "lines.npy", scan.lines.astype(np.float32))
    assert (
        main(
            [
                "preview",
                str(tmp_path / "lines.npy"),
                "--angles",
                "0:180:181:endpoint",
                "--center",
                "296.6",
                "--backend",
                "cpu",
                "-o",
                str(tmp_path / "p"),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert warnings_in(err) == [] and "wrote slices.png, sinogram.png, geometry.png" in err
    assert (
        main(
            [
                "preview",
                str(tmp_path / "lines.npy"),
                "--angles",
                "0:180:181:endpoint",
                "--bin",
                "3",
                "--backend",
                "cpu",
                "-o",
                str(tmp_path / "p"),
            ]
        )
        == 2
    )
    assert "--bin: 3 is larger than the detector (2 x 640)" in capsys.readouterr().err
