"""The input is never overwritten, and --overwrite replaces only what leveret
can tell is one of its own outputs of that format: anything else is refused in
one line (exit 2) naming what was not deleted, and stays as it was."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.cli import main
from leveret.io import read_array, write_array

ANGLES = ["--angles", "0:180:60", "--backend", "cpu", "--no-progress", "-q"]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """proj.npy (60 angles, 4 rows, 32 columns), flat.npy, dark.npy and angles.npy, in the current folder."""
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 60, endpoint=False), 32, n_rows=4)
    np.save(tmp_path / "proj.npy", phantom.ball(9.0).project(g).astype(np.float32))
    np.save(tmp_path / "flat.npy", np.full((4, 32), 2.0, np.float32))
    np.save(tmp_path / "dark.npy", np.zeros((4, 32), np.float32))
    np.save(tmp_path / "angles.npy", np.linspace(0, 180, 60, endpoint=False))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _contents(folder):
    """Every file under ``folder`` with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(capsys, args, start):
    """Run ``leveret recon ARGS``: exit 2, one line starting with ``start``, no file changed."""
    before = _contents(Path.cwd())
    assert main(["recon", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"leveret recon: error: {start}") and err.count("\n") == 1, err
    assert _contents(Path.cwd()) == before  # nothing deleted, replaced or added
    return err


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_the_output_is_never_the_input(folder, capsys, overwrite):
    os.link("proj.npy", "hard.npy")
    os.symlink("proj.npy", "soft.npy")
    for output, extra, what in (
        ("proj.npy", [], "the input 'proj.npy'"),
        ("hard.npy", [], "the input 'proj.npy'"),  # the same file by a hard link
        ("soft.npy", [], "the input 'proj.npy'"),  # and by a symbolic one
        ("./sub/../proj.npy", [], "the input 'proj.npy'"),
        ("flat.npy", ["--flat", "flat.npy", "--dark", "dark.npy"], "--flat 'flat.npy'"),
        ("dark.npy", ["--flat", "flat.npy", "--dark", "dark.npy"], "--dark 'dark.npy'"),
    ):
        os.makedirs("sub", exist_ok=True)
        err = _refused(
            capsys,
            ["proj.npy", output, *ANGLES, *extra, *overwrite],
            f"output: {str(Path(output))!r} is the same file as {what}; ",
        )
        assert "never writes over its input" in err
    angles = ["--angles", "angles.npy", "--backend", "cpu", "-q"]
    _refused(
        capsys,
        ["proj.npy", "angles.npy", *angles, *overwrite],
        "output: 'angles.npy' is the same file as --angles 'angles.npy'; ",
    )


def test_the_output_is_never_inside_an_input_folder_nor_above_an_input(folder, capsys):
    stack = np.load("proj.npy")
    write_array("raw/", stack)  # a TIFF folder input
    os.makedirs("data")
    os.replace("proj.npy", "data/proj.npy")
    _refused(capsys, ["raw", "raw/rec.h5", *ANGLES], "output: 'raw/rec.h5' is inside the folder of the input 'raw'")
    _refused(capsys, ["raw", "raw/", *ANGLES, "--overwrite"], "output: 'raw' is the same folder as the input 'raw'")
    _refused(
        capsys, ["data/proj.npy", "data", *ANGLES, "--overwrite"], "output: 'data' holds the input 'data/proj.npy'; "
    )
    _refused(capsys, ["data/proj.npy", ".", *ANGLES, "--overwrite"], "output: '.' holds the input 'data/proj.npy'")
    main(["recon", "data/proj.npy", "elsewhere.h5", *ANGLES])  # beside the input: fine
    assert read_array("elsewhere.h5").shape == (4, 32, 32)


@pytest.mark.parametrize("name", ["rec.h5", "rec.tif", "rec.zarr", "rec/", "rec.npy"])
def test_overwrite_refuses_a_folder_that_is_not_a_leveret_output(folder, capsys, name):
    os.makedirs(name)
    with open(os.path.join(name, "notes.txt"), "w") as fh:
        fh.write("keep")
    err = _refused(
        capsys,
        ["proj.npy", name, *ANGLES, "--overwrite"],
        f"output: --overwrite refused to delete {str(Path(name))!r}: ",
    )
    assert "delete it yourself" in err
    assert Path(name, "notes.txt").read_text() == "keep"


@pytest.mark.parametrize("name", ["rec.h5", "rec.tif", "rec.npy", "rec.zarr"])
def test_overwrite_refuses_a_file_that_is_not_a_leveret_output_of_that_format(folder, capsys, name):
    import tifffile

    with open(name, "wb") as fh:
        fh.write(b"keep")
    _refused(capsys, ["proj.npy", name, *ANGLES, "--overwrite"], f"output: --overwrite refused to delete {name!r}: ")
    if name in ("rec.h5", "rec.tif"):  # of the format, but not written by leveret
        os.remove(name)
        if name == "rec.h5":
            import h5py

            with h5py.File(name, "w") as f:
                f["data"] = np.ones((4, 32, 32), np.float32)
        else:
            tifffile.imwrite(name, np.ones((4, 32, 32), np.float32), photometric="minisblack")
        err = _refused(
            capsys, ["proj.npy", name, *ANGLES, "--overwrite"], f"output: --overwrite refused to delete {name!r}: "
        )
        assert "leveret did not write" in err


def test_overwrite_refuses_a_slice_folder_of_other_files(folder, capsys):
    write_array("rec/", np.ones((4, 32, 32), np.float32))
    with open("rec/notes.txt", "w") as fh:
        fh.write("keep")
    _refused(capsys, ["proj.npy", "rec/", *ANGLES, "--overwrite"], "output: --overwrite refused to delete 'rec': ")


@pytest.mark.parametrize("name", ["rec.h5", "rec.tif", "rec.zarr", "rec/", "rec.npy"])
def test_overwrite_replaces_a_leveret_output(folder, name):
    assert main(["recon", "proj.npy", name, *ANGLES]) == 0
    first = read_array(name)
    assert main(["recon", "proj.npy", name, *ANGLES, "--center", "15"]) == 2  # not without --overwrite
    assert main(["recon", "proj.npy", name, *ANGLES, "--center", "15", "--overwrite"]) == 0
    assert not np.array_equal(read_array(name), first)
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []


def test_the_other_commands_never_write_over_an_input_nor_a_folder(folder, capsys):
    before = _contents(folder)
    assert main(["center", "proj.npy", "--angles", "0:180:60", "--json", "proj.npy", "-q"]) == 2
    assert capsys.readouterr().err == (
        "leveret center: error: --json: 'proj.npy' is the same file as the input "
        "'proj.npy'; leveret never writes over its input: give another path\n"
    )
    os.makedirs("prev/slices.png")
    assert main(["preview", "proj.npy", "--angles", "0:180:60", "-o", "prev", "-q"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("leveret preview: error: --output-dir: refused to delete '")
        and "prev/slices.png': it is a folder, not a file; " in err
    ), err
    assert _contents(folder) == before
