"""The mistakes a newcomer makes on the command line, through the real console
entry point (a subprocess): each gives one line naming the flag and exit 2,
and none leaves a file or folder behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import leveret
from leveret import phantom

SRC = Path(leveret.__file__).resolve().parents[1]


def leveret_cmd(*args, cwd, env=None):
    """Run ``python -m leveret ARGS`` in ``cwd`` (``env``: more environment
    variables); the CompletedProcess."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "CUDA_VISIBLE_DEVICES": "", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "leveret", *map(str, args)], capture_output=True, text=True, env=env, cwd=cwd
    )


def lines(text: str) -> list[str]:
    return text.strip().splitlines()


@pytest.fixture
def folder(tmp_path):
    """A small scan (60 angles over 180 degrees, 4 rows x 32 columns) as proj.npy."""
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 60, endpoint=False), 32, n_rows=4)
    np.save(tmp_path / "proj.npy", phantom.ball(9.0).project(g).astype(np.float32))
    return tmp_path


def test_existing_output_names_the_overwrite_flag(folder):
    (folder / "rec.npy").write_bytes(b"keep")
    r = leveret_cmd("recon", "proj.npy", "rec.npy", "--angles", "0:180:60", cwd=folder)
    assert r.returncode == 2 and lines(r.stderr) == [
        "leveret recon: error: output: 'rec.npy' already exists; pass --overwrite to replace it"
    ]
    assert (folder / "rec.npy").read_bytes() == b"keep"


def test_library_argument_names_become_flags():
    from leveret.cli.parser import _subparser, build_parser, flag_message

    recon = _subparser(build_parser(), "recon")
    assert flag_message("slab_slices: expected a positive number", recon) == "--slab-slices: expected a positive number"
    assert (
        flag_message("precision: 'double' runs on the CPU backend only; use backend='cpu'", recon)
        == "--precision: 'double' runs on the CPU backend only; use --backend cpu"
    )
    assert flag_message("x exists; pass overwrite=True", recon) == "x exists; pass --overwrite"
    # a name this command has no flag for stays as it is
    bench = _subparser(build_parser(), "bench")
    assert flag_message("center: out of range", bench) == "center: out of range"


def test_unknown_flag_suggests_the_close_one_with_the_subcommand_usage(folder):
    r = leveret_cmd("recon", "in.npy", "out.npy", "--centre", "auto", cwd=folder)
    assert r.returncode == 2
    usage, error = lines(r.stderr)
    assert usage.startswith("usage: leveret recon ")
    assert error == "leveret recon: error: unrecognized arguments: --centre auto (did you mean --center?)"
    r = leveret_cmd("center", "in.npy", "--sweeep", "2", cwd=folder)
    assert r.returncode == 2 and lines(r.stderr)[-1].endswith("(did you mean --sweep?)")


def test_negative_angles_and_centre_are_values_not_flags(folder):
    r = leveret_cmd("recon", "proj.npy", "rec.npy", "--angles", "-88.2:91.8:60", "--dry-run", cwd=folder)
    assert r.returncode == 0, r.stderr
    assert "memory plan" in r.stdout
    # -3.5 reaches the geometry, which says in one line that it is off the detector
    r = leveret_cmd("recon", "proj.npy", "rec.npy", "--angles", "0:180:60", "--center", "-3.5", cwd=folder)
    assert r.returncode == 2 and lines(r.stderr) == [
        "leveret recon: error: --center: expected a column position on the detector, 0 <= center <= 31, got -3.5"
    ]


def test_version(folder):
    r = leveret_cmd("--version", cwd=folder)
    assert r.returncode == 0 and r.stdout.strip() == f"leveret {leveret.__version__}"


@pytest.mark.parametrize("command", ["recon", "center", "preview", "bench", "rabbitct", "demo", "info"])
def test_help_shows_real_defaults_the_same_way(command):
    from leveret.cli.parser import _subparser, build_parser

    help_text = _subparser(build_parser(), command).format_help()
    text = " ".join(help_text.split())  # the same however the lines wrap
    assert "(default: None)" not in text and "(default: False)" not in text
    if command == "recon":
        assert "(default: ram-lak)" in text and "(default: float32)" in text
    if command in ("bench", "rabbitct", "demo"):
        assert "--backend {auto,cuda,cpu} (default: auto)" in text


@pytest.mark.parametrize(
    "args",
    [
        ["recon", "proj.npy", "o.npy", "--filter", "nope"],
        ["recon", "proj.npy", "o.npy", "--angles"],
        ["recon", "proj.npy", "o.npy", "--host-memory", "lots"],
        ["bench", "--size", "0"],
        ["rabbitct", "--repeats", "0"],
    ],
)
@pytest.mark.parametrize("verbose", [False, True])
def test_argparse_errors_are_one_line_and_exit_2_even_with_v(folder, args, verbose):
    r = leveret_cmd(*(["-v"] if verbose else []), *args, cwd=folder)
    err = lines(r.stderr)
    assert r.returncode == 2 and len(err) == 2, r.stderr
    assert err[0].startswith(f"usage: leveret {args[0]} ") and err[1].startswith(f"leveret {args[0]}: error: ")
    assert "Traceback" not in r.stderr


def test_bad_value_with_v_is_still_exit_2_without_traceback(folder):
    r = leveret_cmd("-v", "recon", "proj.npy", "o.npy", "--angles", "0:180:61", cwd=folder)
    assert r.returncode == 2 and lines(r.stderr) == [
        "leveret recon: error: --angles: expected 60 angles (one per projection in input), got 61"
    ]


@pytest.mark.parametrize("dry_run", [False, True])
def test_unwritable_output_folder_names_the_output_not_a_temporary(folder, dry_run):
    # /proc takes no new files, not even from root (a chmod'ed folder would not stop root).
    r = leveret_cmd(
        "recon",
        "proj.npy",
        "/proc/rec.h5",
        "--angles",
        "0:180:60",
        "--backend",
        "cpu",
        *(["--dry-run"] if dry_run else []),
        cwd=folder,
    )
    assert r.returncode == 2 and len(lines(r.stderr)) == 1
    assert lines(r.stderr)[0].startswith("leveret recon: error: output: cannot write into the folder '/proc'")
    assert "partial" not in r.stderr


def test_dry_run_refuses_an_existing_output(folder):
    from leveret.io import write_array

    write_array(folder / "rec.h5", np.zeros((4, 32, 32), np.float32))
    r = leveret_cmd("recon", "proj.npy", "rec.h5", "--angles", "0:180:60", "--dry-run", cwd=folder)
    assert r.returncode == 2 and "pass --overwrite" in r.stderr and r.stdout == ""
    r = leveret_cmd("recon", "proj.npy", "rec.h5", "--angles", "0:180:60", "--dry-run", "--overwrite", cwd=folder)
    assert r.returncode == 0 and "memory plan" in r.stdout
    # what --overwrite would refuse to delete, the dry run refuses too
    (folder / "rec.h5").write_bytes(b"keep")
    r = leveret_cmd("recon", "proj.npy", "rec.h5", "--angles", "0:180:60", "--dry-run", "--overwrite", cwd=folder)
    assert r.returncode == 2 and "--overwrite refused to delete 'rec.h5'" in r.stderr and r.stdout == ""


def test_dataset_for_an_input_without_datasets_is_an_error(folder):
    r = leveret_cmd("recon", "proj.npy", "o.npy", "--angles", "0:180:60", "--dataset", "/x", cwd=folder)
    assert r.returncode == 2 and lines(r.stderr) == [
        "leveret recon: error: --dataset: 'proj.npy' is not an HDF5 file (.h5, .hdf5, .hdf, .nxs); "
        "only those hold datasets"
    ]


def test_preview_validates_before_making_its_folder(folder):
    r = leveret_cmd("preview", "proj.npy", "--angles", "0:180:60", "--bin", "100", "-o", "prev", cwd=folder)
    assert r.returncode == 2 and lines(r.stderr) == [
        "leveret preview: error: --bin: 100 is larger than the detector (4 x 32)"
    ]
    r = leveret_cmd("preview", "proj.npy", "--angles", "0:180:61", cwd=folder)
    assert r.returncode == 2
    assert sorted(p.name for p in folder.iterdir()) == ["proj.npy"]  # neither prev/ nor preview/


def test_rabbitct_checks_its_flags_before_making_the_dataset(folder):
    (folder / "old.rct").write_bytes(b"keep")
    for args, message in (
        (["--save", "nodir/x.rct"], "--save: the folder 'nodir' does not exist"),
        (["--save", "old.rct"], "--save: 'old.rct' already exists"),
        (["--json", "nodir/r.json"], "--json: the folder 'nodir' does not exist"),
    ):
        r = leveret_cmd("rabbitct", "--small", "--size", "8", *args, cwd=folder)
        assert r.returncode == 2 and len(lines(r.stderr)) == 1 and message in r.stderr, r.stderr
        assert "making a synthetic" not in r.stderr


def test_missing_files_name_their_flag(folder):
    for args, message in (
        (["nope.npy", "o.npy"], "input: no such file or folder: 'nope.npy'"),
        (
            ["proj.npy", "o.npy", "--flat", "proj.npy", "--dark", "nope.npy"],
            "--dark: no such file or folder: 'nope.npy'",
        ),
    ):
        r = leveret_cmd("recon", *args, "--angles", "0:180:60", cwd=folder)
        assert r.returncode == 2 and lines(r.stderr) == [f"leveret recon: error: {message}"]


def test_cutoff_out_of_range_fails_before_any_work(folder):
    r = leveret_cmd("recon", "proj.npy", "o.npy", "--angles", "0:180:60", "--cutoff", "-1", cwd=folder)
    assert r.returncode == 2 and lines(r.stderr)[-1] == (
        "leveret recon: error: argument --cutoff: expected a fraction of Nyquist in (0, 1], got '-1'"
    )


def test_v_adds_the_traceback_only_for_a_real_bug(folder, monkeypatch):
    import leveret.execution.slab
    from leveret.cli import main

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(leveret.execution.slab, "reconstruct_slab", broken)
    flags = [str(folder / "proj.npy"), str(folder / "o.npy"), "--angles", "0:180:60", "--backend", "cpu", "-q"]
    assert main(["recon", *flags]) == 1  # one line, exit 1
    with pytest.raises(ZeroDivisionError):  # -v: the traceback (the console exits 1)
        main(["-v", "recon", *flags])
    assert main(["-v", "recon", *flags[:2], "--angles", "0:180:61"]) == 2  # bad input stays exit 2


def test_gpus_flag_is_checked_and_named(folder):
    r = leveret_cmd("recon", "proj.npy", "rec.npy", "--angles", "0:180:60", "--gpus", "zero", cwd=folder)
    assert r.returncode == 2 and "argument --gpus: expected 'all' or GPU ids such as 0,1, got 'zero'" in r.stderr
    # on the CPU backend: refused with the flag's name (no GPU here, or a CPU run)
    r = leveret_cmd(
        "recon", "proj.npy", "rec.npy", "--angles", "0:180:60", "--backend", "cpu", "--gpus", "0", cwd=folder
    )
    assert r.returncode == 2 and lines(r.stderr)[-1].startswith("leveret recon: error: --gpus: "), r.stderr
    assert not (folder / "rec.npy").exists()


def test_tune_checks_its_device_and_names_what_is_missing(folder):
    r = leveret_cmd("tune", "--device", "-1", cwd=folder)
    assert r.returncode == 2 and "argument --device: expected a CUDA device number" in r.stderr
    r = leveret_cmd("tune", "--budget", "0", cwd=folder)
    assert r.returncode == 2 and "argument --budget" in r.stderr
    # no GPU visible (here, or hidden on a machine with one): one line naming what is missing
    r = leveret_cmd("tune", cwd=folder)
    assert r.returncode == 2, r.stderr
    assert lines(r.stderr)[-1].startswith("leveret tune: error: backend='cuda' needs a CUDA GPU"), r.stderr


def test_a_centre_sweep_too_fine_for_memory_is_refused_naming_the_flag(folder):
    r = leveret_cmd("center", "proj.npy", "--angles", "0:180:60", "--sweep", "3", "--step", "1e-9", cwd=folder)
    assert r.returncode == 2 and len(lines(r.stderr)) == 1, r.stderr
    message = lines(r.stderr)[0]
    assert message.startswith(
        "leveret center: error: --step: a sweep of +-3 px in steps of 1e-09 px is "
        "6e+09 trial centres, which needs about "
    ), message
    assert "GiB of memory" in message and "Unable to allocate" not in message
    assert r.stdout == ""  # refused before the centre is estimated
