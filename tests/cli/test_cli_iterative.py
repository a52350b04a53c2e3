"""``leveret recon --method sirt|cgls|fista|pdhg``: parallel beam slab by slab
equals the library on each slice, cone beam in memory equals the library on
the whole volume; the flags' errors, the cone-beam memory check, a diverging
run, the config keys and the dry run."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.cli import main
from leveret.io import read_array

ANGLES = np.linspace(0, np.pi, 24, endpoint=False)


@pytest.fixture(scope="module")
def parallel(tmp_path_factory):
    """Six slices that differ (a bar through all, a block in two, another in one): a slice
    put in another's place, or one slab's slices mixed with another's, shows."""
    folder = tmp_path_factory.mktemp("iterative")
    g = leveret.ParallelGeometry(ANGLES, 32, n_rows=6)
    volume = g.default_volume()
    truth = np.zeros(volume.shape, np.float32)
    truth[:, 8:24, 10:20] = 1.0
    truth[2:4, 12:16, 12:16] = 2.0
    truth[5, 18:26, 4:9] = 3.0
    lines = leveret.Projector(g, volume, backend="cpu")(truth)
    np.save(folder / "proj.npy", lines)
    np.save(folder / "sino.npy", np.ascontiguousarray(lines[:, 4]))
    return folder, g, lines


def _per_slice(lines, g, method, iterations, **kwargs):
    """The library on each slice's sinogram with a 2D projector."""
    plane = leveret.VolumeGeometry((g.n_cols, g.n_cols), g.det_spacing)
    A = leveret.Projector(g.replace(n_rows=None), plane, backend="cpu")
    fn = getattr(leveret, method)
    return np.stack([fn(np.ascontiguousarray(lines[:, k]), A, iterations, **kwargs) for k in range(lines.shape[1])])


def _recon(folder, name, *flags, source="proj.npy"):
    return main(
        [
            "recon",
            str(folder / source),
            str(folder / name),
            "--angles",
            "0:180:24",
            "--backend",
            "cpu",
            "--no-progress",
            "--overwrite",
            *flags,
        ]
    )


@pytest.mark.parametrize(
    "flags,method,kwargs",
    [
        (("--method", "sirt", "--iterations", "12", "--nonnegative"), "sirt", {"nonnegative": True}),
        (("--method", "cgls", "--iterations", "6"), "cgls", {}),
        (
            ("--method", "fista", "--iterations", "10", "--tv", "0.5", "--nonnegative"),
            "fista",
            {"tv": 0.5, "nonnegative": True},
        ),
        (("--method", "pdhg", "--iterations", "10", "--tv", "0.5"), "pdhg", {"tv": 0.5}),
    ],
)
def test_parallel_slab_by_slab_equals_the_library_per_slice(parallel, flags, method, kwargs):
    folder, g, lines = parallel
    iterations = int(flags[flags.index("--iterations") + 1])
    assert _recon(folder, f"{method}.npy", *flags, "--slab-slices", "4") == 0  # slabs of 4 and 2
    out = read_array(folder / f"{method}.npy")
    ref = _per_slice(lines, g, method, iterations, **kwargs)
    assert out.shape == ref.shape == (6, 32, 32)
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
    # and they reconstruct: the bar's inside is near 1 (not FBP, not another slice)
    assert abs(float(np.median(out[0, 10:22, 12:18])) - 1.0) < 0.4


def test_a_single_sinogram_equals_the_library(parallel, capsys):
    folder, g, lines = parallel
    assert _recon(folder, "one.npy", "--method", "fista", "--iterations", "8", "--tv", "0.2", source="sino.npy") == 0
    ref = _per_slice(lines[:, 4:5], g, "fista", 8, tv=0.2)[0]
    np.testing.assert_allclose(read_array(folder / "one.npy"), ref, rtol=0, atol=1e-5 * np.abs(ref).max())
    stats = {}
    plane = leveret.VolumeGeometry((32, 32))
    leveret.fista(
        np.ascontiguousarray(lines[:, 4]),
        leveret.Projector(g.replace(n_rows=None), plane, backend="cpu"),
        8,
        tv=0.2,
        stats=stats,
    )
    assert f"fista: objective {stats['objective'][-1]:.6g} after 8 iteration(s)" in capsys.readouterr().err


def test_the_slabs_log_the_objective(parallel, capsys):
    folder, g, lines = parallel
    assert _recon(folder, "log.npy", "--method", "pdhg", "--iterations", "5", "--tv", "0.5", "-v") == 0
    total = 0.0
    plane = leveret.VolumeGeometry((32, 32))
    A = leveret.Projector(g.replace(n_rows=None), plane, backend="cpu")
    for k in range(6):
        stats = {}
        leveret.pdhg(np.ascontiguousarray(lines[:, k]), A, 5, tv=0.5, stats=stats)
        total += stats["objective"][-1]
    assert f"pdhg: slices 0:6, objective {total:.6g} (the sum over the slices) after 5" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags,message",
    [
        (("--method", "sirt"), "--iterations: method 'sirt' needs a number of iterations"),
        (("--method", "fista", "--iterations", "3"), "--tv: method 'fista' needs the weight"),
        (("--method", "sirt", "--iterations", "3", "--tv", "1"), "--tv: only fista and pdhg have a total-variation"),
        (("--method", "cgls", "--iterations", "3", "--tv", "1"), "--tv: only fista and pdhg"),
        (
            (
                "--tv",
                "1",
            ),
            "--tv: applies to the iterative methods (sirt, cgls, fista, pdhg), not to --method fbp",
        ),
        (("--iterations", "3"), "--iterations: applies to the iterative methods"),
        (("--nonnegative",), "--nonnegative: applies to sirt, fista and pdhg, not to fbp"),
        (("--method", "pdhg", "--iterations", "3", "--tv", "-1"), "--tv: expected a finite weight >= 0, got -1"),
        (("--method", "sirt", "--iterations", "0"), "--iterations: expected a positive integer, got 0"),
        (("--method", "cgls", "--iterations", "2", "--nonnegative"), "--nonnegative: cgls is unconstrained"),
        (("--method", "sirt", "--iterations", "2", "--filter", "hann"), "--filter: shapes fbp (and FDK) only"),
        (("--method", "sirt", "--iterations", "2", "--precision", "float16"), "--precision: float16 filtered"),
    ],
)
def test_bad_method_flags_are_one_line_and_write_nothing(parallel, capsys, flags, message):
    folder, _, _ = parallel
    assert _recon(folder, "bad.npy", *flags) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("leveret recon: error: ")
    assert not (folder / "bad.npy").exists()


def test_an_unknown_method_is_refused_by_the_parser(parallel, capsys):
    folder, _, _ = parallel
    with pytest.raises(SystemExit) as stop:
        _recon(folder, "bad.npy", "--method", "art", "--iterations", "2")
    assert stop.value.code == 2
    assert "argument --method: invalid choice: 'art'" in capsys.readouterr().err


def test_a_diverging_run_exits_2_and_writes_nothing(parallel, tmp_path, capsys, monkeypatch):
    """A norm far below ||A|| makes FISTA's steps too long: the library's
    FloatingPointError is the user's to fix (tv, the data's scale): exit 2,
    its message in one line, no output and no partial output left."""
    from leveret.algorithms import regularised

    folder, _, _ = parallel
    monkeypatch.setattr(regularised, "operator_norm", lambda projector: 1e-3)
    out = tmp_path / "diverged.h5"
    rc = main(
        [
            "recon",
            str(folder / "proj.npy"),
            str(out),
            "--angles",
            "0:180:24",
            "--backend",
            "cpu",
            "--no-progress",
            "--method",
            "fista",
            "--iterations",
            "40",
            "--tv",
            "0.1",
            "--slab-slices",
            "2",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "leveret recon: error: fista: diverged at iteration" in err and "no volume is returned" in err
    assert list(tmp_path.iterdir()) == []


def test_dry_run_shows_the_method_and_its_working_set(parallel, capsys):
    from leveret.execution.iterate import working_bytes
    from leveret.resources import format_bytes

    folder, _, _ = parallel
    assert _recon(folder, "dry.npy", "--method", "fista", "--iterations", "7", "--tv", "0.25", "--dry-run") == 0
    out = capsys.readouterr().out
    need = format_bytes(working_bytes("fista", (32, 32), (24, 32), backend="cpu"))
    assert (
        f"method: fista, 7 iteration(s), tv 0.25; slab by slab, each slice its own 2D problem; one run "
        f"holds {need} (host)"
    ) in out
    assert "memory plan (cpu)" in out
    assert not (folder / "dry.npy").exists()


def test_the_plan_counts_the_iterative_working_set(parallel):
    """The host estimate holds one slice's run, and a cap between FBP's and
    FISTA's one-slice peaks plans FBP but refuses FISTA."""
    from leveret.execution.iterate import working_bytes
    from leveret.execution.outofcore import host_bytes, plan

    _, g, _ = parallel
    volume = g.default_volume()
    need = working_bytes("fista", (32, 32), (24, 32), backend="cpu")
    assert host_bytes(g, volume, 1, method="fista") >= need > host_bytes(g, volume, 1) // 4
    cap = (host_bytes(g, volume, 1) + host_bytes(g, volume, 1, method="fista")) // 2
    assert host_bytes(g, volume, 1) < cap < host_bytes(g, volume, 1, method="fista")
    assert plan(g, backend="cpu", host_memory=cap).slab_slices >= 1
    with pytest.raises(MemoryError, match="one slice does not fit"):
        plan(g, backend="cpu", host_memory=cap, method="fista")


@pytest.mark.parametrize("method", ["sirt", "cgls", "fista", "pdhg"])
def test_working_bytes_bound_what_a_run_holds(method):
    """The count is an upper bound of a run's traced peak (NumPy arrays: the
    projector's tables, the method's arrays) and not loose by more than 2x."""
    import tracemalloc

    from leveret.execution.iterate import run, working_bytes

    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 60, endpoint=False), 96)
    plane = leveret.VolumeGeometry((96, 96))
    b = leveret.Projector(g, plane, backend="cpu")(phantom.shepp_logan((96, 96)).astype(np.float32))
    kwargs = {"tv": 0.1} if method in ("fista", "pdhg") else {}
    tracemalloc.start()
    try:
        A = leveret.Projector(g, plane, backend="cpu")
        run(b, A, method, iterations=3, **kwargs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    need = working_bytes(method, plane.shape, b.shape, backend="cpu")
    assert peak <= need <= 2 * peak + (1 << 20), (peak, need)


def test_config_keys_equal_the_flags(parallel, tmp_path):
    folder, _, _ = parallel
    (tmp_path / "job.toml").write_text(
        f'input = "{folder / "proj.npy"}"\nangles = "0:180:24"\nbackend = "cpu"\n\n[recon]\n'
        f'output = "{tmp_path / "cfg.npy"}"\nmethod = "fista"\niterations = 6\ntv = 0.5\nnonnegative = true\n'
    )
    assert main(["recon", "--config", str(tmp_path / "job.toml"), "--no-progress"]) == 0
    assert _recon(folder, "flags.npy", "--method", "fista", "--iterations", "6", "--tv", "0.5", "--nonnegative") == 0
    np.testing.assert_array_equal(read_array(tmp_path / "cfg.npy"), read_array(folder / "flags.npy"))


def test_a_bad_config_value_names_the_key(parallel, tmp_path, capsys):
    folder, _, _ = parallel
    (tmp_path / "bad.toml").write_text('[recon]\nmethod = "sirt"\niterations = "many"\n')
    assert (
        main(
            [
                "recon",
                str(folder / "proj.npy"),
                str(tmp_path / "o.npy"),
                "--angles",
                "0:180:24",
                "--config",
                str(tmp_path / "bad.toml"),
            ]
        )
        == 2
    )
    assert "iterations: invalid value 'many'" in capsys.readouterr().err


# -- cone beam -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cone(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cone_iterative")
    angles = np.linspace(0, 2 * np.pi, 30, endpoint=False)
    g = leveret.ConeGeometry.circular(angles, 100.0, 200.0, 16, 24, 1.0)
    v = leveret.VolumeGeometry((8, 20, 20), 0.5)
    proj = phantom.ball(3.0, center=(0.5, -0.5, 0.0)).project(g).astype(np.float32)
    np.save(folder / "proj.npy", proj)
    np.savetxt(folder / "m.txt", g.matrices.reshape(-1, 12))
    return folder, g, v, proj


def _cone(folder, name, *flags):
    return main(
        [
            "recon",
            str(folder / "proj.npy"),
            str(folder / name),
            "--matrices",
            str(folder / "m.txt"),
            "--backend",
            "cpu",
            "--no-progress",
            "--volume-shape",
            "8,20,20",
            "--voxel-size",
            "0.5",
            "--overwrite",
            *flags,
        ]
    )


@pytest.mark.parametrize(
    "method,flags,kwargs",
    [
        ("sirt", ("--iterations", "10", "--nonnegative"), {"nonnegative": True}),
        ("fista", ("--iterations", "8", "--tv", "0.05"), {"tv": 0.05}),
    ],
)
def test_cone_in_memory_equals_the_library(cone, method, flags, kwargs, capsys):
    folder, g, v, proj = cone
    assert _cone(folder, f"{method}.h5", "--method", method, *flags) == 0
    ref = getattr(leveret, method)(proj, leveret.Projector(g, v, backend="cpu"), int(flags[1]), **kwargs)
    out = read_array(folder / f"{method}.h5")
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
    assert abs(float(out[4, 11, 9]) - 1.0) < 0.3  # inside the ball (x 0.5, y -0.5): near its value, 1
    err = capsys.readouterr().err
    assert f"by {method} in memory" in err


def test_cone_too_big_for_the_host_memory_cap_is_one_line(cone, capsys):
    from leveret.execution.iterate import working_bytes
    from leveret.resources import format_bytes

    folder, _, v, proj = cone
    assert _cone(folder, "big.h5", "--method", "sirt", "--iterations", "3", "--host-memory", "64K", "-q") == 2
    err = capsys.readouterr().err
    need = working_bytes("sirt", v.shape, proj.shape, backend="cpu") + proj.nbytes * 2 + v.size * 4
    assert err.count("\n") == 1 and "leveret recon: error: memory: --method sirt in cone beam" in err
    assert f"needs host {format_bytes(need)} of 64 KiB (--host-memory)" in err
    assert not (folder / "big.h5").exists()


def test_cone_dry_run_shows_the_method_in_memory(cone, capsys):
    folder, _, _, _ = cone
    assert _cone(folder, "dry.h5", "--method", "pdhg", "--iterations", "4", "--tv", "1", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "method: pdhg, 4 iteration(s), tv 1; in memory; one run holds" in out
    assert "memory (in memory, cpu): host" in out
    assert not (folder / "dry.h5").exists()


def test_cone_slab_slices_is_a_warning_or_with_strict_an_error(cone, capsys):
    folder, _, _, _ = cone
    flags = ("--method", "sirt", "--iterations", "2", "--slab-slices", "4")
    assert _cone(folder, "w.npy", *flags) == 0
    assert "warning: --slab-slices: --method sirt in cone beam reconstructs the whole volume" in capsys.readouterr().err
    assert _cone(folder, "s.npy", *flags, "--strict") == 2
    assert not (folder / "s.npy").exists()


def test_cone_fbp_still_runs_fdk(cone):
    folder, g, v, proj = cone
    assert _cone(folder, "fdk.npy", "--method", "fbp") == 0
    np.testing.assert_allclose(
        read_array(folder / "fdk.npy"), leveret.fdk(proj, g, v, backend="cpu"), rtol=0, atol=1e-6
    )
