"""recon --helical-pitch and --tilt: helical cone beam and laminography (parallel and
cone beam) from the command line, disk to disk slab by slab, equal to the library's
in-memory reconstruction (leveret.helical_fdk, leveret.laminography_fbp); their
metadata, --dry-run, config keys and bad input."""

from __future__ import annotations

import re

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.cli import main
from leveret.io import read_array, read_metadata

SID, SDD, PIX, PITCH = 300.0, 500.0, 2.0, 12.0
TURNS, PER_TURN, ROWS, COLS = 4, 40, 16, 40


@pytest.fixture(scope="module")
def helix(tmp_path_factory):
    folder = tmp_path_factory.mktemp("helix")
    angles = np.arange(TURNS * PER_TURN) * 2 * np.pi / PER_TURN
    g = leveret.ConeGeometry.helical(angles, PITCH, SID, SDD, ROWS, COLS, PIX)
    body = phantom.EllipsoidPhantom([phantom.Ellipsoid(1.0, (16, 13, 100)), phantom.Ellipsoid(0.5, 4, (4, -3, 5))])
    np.save(folder / "proj.npy", body.project(g).astype(np.float32))
    np.savetxt(folder / "angles.txt", np.degrees(angles))
    return folder, g


def _helical(folder, name, *flags, code=0):
    rc = main(
        [
            "recon",
            str(folder / "proj.npy"),
            str(folder / name),
            "--beam",
            "cone",
            "--sid",
            str(SID),
            "--sdd",
            str(SDD),
            "--pixel-size",
            str(PIX),
            "--angles",
            str(folder / "angles.txt"),
            "--backend",
            "cpu",
            "--no-progress",
            "--overwrite",
            *flags,
        ]
    )
    assert rc == code
    return None if code or "--dry-run" in flags else read_array(folder / name)


def _slabs(err: str) -> int:
    return int(re.search(r"wrote .*: (\d+) slab\(s\)", err).group(1))


def test_helical_slab_by_slab_equals_helical_fdk_in_memory(helix, capsys, monkeypatch):
    from leveret.io import bands

    folder, g = helix
    read = []
    real = bands.read_band

    def recording(source, rows, out, **kwargs):
        read.append(kwargs.get("views"))
        return real(source, rows, out, **kwargs)

    monkeypatch.setattr(bands, "read_band", recording)
    out = _helical(
        folder,
        "h.h5",
        "--helical-pitch",
        str(PITCH),
        "--volume-shape",
        "24,40,40",
        "--voxel-size",
        "1.2",
        "--z-center",
        "1.5",
        "--host-memory",
        "2M",
    )
    vol = leveret.VolumeGeometry((24, 40, 40), 1.2, (1.5, 0.0, 0.0))
    ref = leveret.helical_fdk(np.load(folder / "proj.npy"), g, vol, backend="cpu")
    assert np.abs(ref).max() > 0.5
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
    assert _slabs(capsys.readouterr().err) >= 3
    # each slab read the views that see it, not the whole scan
    assert read and all(v is not None and v[1] - v[0] < g.n_views for v in read)
    meta = read_metadata(folder / "h.h5")
    assert meta["helical_pitch"] == PITCH and meta["beam"] == "cone"
    assert meta["center"] == [1.5, 0.0, 0.0]


def test_helical_default_volume_fills_the_covered_range_and_handedness(helix, capsys):
    """Without --volume-shape the volume takes the slices the helix covers about
    --z-center; a negative pitch (the other handedness) is another geometry."""
    from leveret.algorithms.helical import covered_z

    folder, g = helix
    out = _helical(folder, "d.h5", "--helical-pitch", str(PITCH))
    dz = PIX * SID / SDD
    lo, hi = covered_z(g, leveret.VolumeGeometry((1, COLS, COLS), dz))
    assert out.shape == (int(np.floor((hi - lo) / dz + 1e-9)), COLS, COLS)
    ref = leveret.helical_fdk(np.load(folder / "proj.npy"), g, leveret.VolumeGeometry(out.shape, dz), backend="cpu")
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
    flipped = _helical(folder, "f.h5", "--helical-pitch", str(-PITCH), "--volume-shape", "8,40,40")
    assert not np.allclose(flipped, out[(out.shape[0] - 8) // 2 :][:8], atol=0.05)


def test_helical_dry_run_shows_the_geometry_window_and_plan(helix, capsys):
    folder, _ = helix
    _helical(
        folder,
        "dry.h5",
        "--helical-pitch",
        str(PITCH),
        "--dry-run",
        "--volume-shape",
        "20,40,40",
        "--host-memory",
        "2M",
    )
    out = capsys.readouterr().out
    assert "helix radius 300, pitch 12 per turn" in out
    assert re.search(r"helical: z -\d+\.\d+\.\.\d+\.\d+ covered \(volume z -12\.\.12\); 1-PI window", out)
    assert "largest pitch without gaps 34.09" in out and "memory plan (cpu)" in out
    assert not (folder / "dry.h5").exists()


def test_helical_resume_continues_an_interrupted_run(helix, monkeypatch):
    from leveret.execution import slab

    folder, g = helix
    calls = []
    real = slab.reconstruct_slab

    def interrupted(*args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(args[3])
        return real(*args, **kwargs)

    monkeypatch.setattr(slab, "reconstruct_slab", interrupted)
    _helical(
        folder,
        "r.h5",
        "--helical-pitch",
        str(PITCH),
        "--volume-shape",
        "24,40,40",
        "--slab-slices",
        "4",
        "--resume",
        code=130,
    )
    assert (folder / ".r.h5.partial").exists() and not (folder / "r.h5").exists()
    monkeypatch.setattr(slab, "reconstruct_slab", real)
    out = _helical(
        folder, "r.h5", "--helical-pitch", str(PITCH), "--volume-shape", "24,40,40", "--slab-slices", "4", "--resume"
    )
    ref = leveret.helical_fdk(np.load(folder / "proj.npy"), g, leveret.VolumeGeometry((24, 40, 40), 1.2), backend="cpu")
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--helical-pitch", "80"],
            (
                r"--helical-pitch: the helix's pitch 80 per turn leaves gaps: .* the largest "
                r"pitch without gaps is 34\.09"
            ),
        ),
        (
            ["--helical-pitch", "12", "--volume-shape", "40,40,40"],
            (
                r"--volume-shape/--voxel-size/--z-center: the volume's z range -24\.\.24 is not inside the range "
                r"-18\.\d+\.\.18\.\d+ the helix covers"
            ),
        ),
        (
            ["--helical-pitch", "12", "--volume-shape", "8,40,40", "--z-center", "16"],
            r"--volume-shape/--voxel-size/--z-center: the volume's z range 11\.2\.\.20\.8 is not inside",
        ),
        (["--helical-pitch", "12", "--z-center", "30"], r"--z-center: 30 is not inside the z range"),
        (["--helical-pitch", "0"], r"--helical-pitch: expected a non-zero length per turn"),
        (["--helical-pitch", "12", "--tilt", "30"], r"--helical-pitch: .* not both"),
        (["--helical-pitch", "12", "--precision", "float64"], r"--precision: a helical scan is reconstructed"),
    ],
)
def test_helical_bad_input_is_one_line_naming_the_flag(helix, capsys, flags, message):
    folder, _ = helix
    _helical(folder, "bad.h5", *flags, code=2)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("leveret recon: error: ")
    assert re.search(message, err[0]), err[0]
    assert not (folder / "bad.h5").exists()


def test_helical_needs_cone_beam_and_more_than_a_turn(helix, tmp_path, capsys):
    folder, _ = helix
    rc = main(
        [
            "recon",
            str(folder / "proj.npy"),
            str(tmp_path / "p.h5"),
            "--angles",
            "0:1440:160",
            "--helical-pitch",
            "12",
            "--backend",
            "cpu",
        ]
    )
    assert rc == 2
    assert (
        "leveret recon: error: --helical-pitch: a helical scan is cone beam; give --beam cone"
        in capsys.readouterr().err
    )
    proj = np.load(folder / "proj.npy")[:30]
    np.save(tmp_path / "short.npy", proj)
    rc = main(
        [
            "recon",
            str(tmp_path / "short.npy"),
            str(tmp_path / "s.h5"),
            "--beam",
            "cone",
            "--sid",
            "300",
            "--sdd",
            "500",
            "--pixel-size",
            "2",
            "--angles",
            "0:270:30",
            "--helical-pitch",
            "12",
            "--backend",
            "cpu",
        ]
    )
    assert rc == 2
    assert (
        "--angles: a helical scan turns more than once (over 360 degrees); the angles span 261 degrees"
        in capsys.readouterr().err
    )


# -- laminography ------------------------------------------------------------------------------

TILT = 30.0


@pytest.fixture(scope="module")
def plate(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lam")
    angles = np.arange(60) * 2 * np.pi / 60
    body = phantom.EllipsoidPhantom([phantom.Ellipsoid(1.0, (5, 10, 9)), phantom.Ellipsoid(0.5, 2.5, (2, 3, -2))])
    par = leveret.ParallelVecGeometry.laminography(angles, np.radians(TILT), 20, 28, 1.0, center=13.0)
    cone = leveret.ConeGeometry.laminography(angles, np.radians(TILT), SID, SDD, 20, 28, 1.0)
    np.save(folder / "par.npy", body.project(par).astype(np.float32))
    np.save(folder / "cone.npy", body.project(cone).astype(np.float32))
    np.savetxt(folder / "angles.txt", np.degrees(angles))
    return folder, par, cone


def _laminography(folder, kind, name, *flags, code=0):
    beam = [] if kind == "par" else ["--beam", "cone", "--sid", str(SID), "--sdd", str(SDD), "--pixel-size", "1"]
    rc = main(
        [
            "recon",
            str(folder / f"{kind}.npy"),
            str(folder / name),
            "--angles",
            str(folder / "angles.txt"),
            "--backend",
            "cpu",
            "--no-progress",
            "--overwrite",
            *beam,
            *flags,
        ]
    )
    assert rc == code
    return None if code or "--dry-run" in flags else read_array(folder / name)


def test_parallel_laminography_slab_by_slab_equals_laminography_fbp(plate, capsys):
    folder, par, _ = plate
    out = _laminography(
        folder,
        "par",
        "p.h5",
        "--tilt",
        str(TILT),
        "--center",
        "13",
        "--volume-shape",
        "16,24,24",
        "--z-center",
        "0.5",
        "--slab-slices",
        "4",
    )
    vol = leveret.VolumeGeometry((16, 24, 24), 1.0, (0.5, 0.0, 0.0))
    ref = leveret.laminography_fbp(np.load(folder / "par.npy"), par, vol, backend="cpu")
    assert np.abs(ref).max() > 0.3
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
    assert _slabs(capsys.readouterr().err) >= 2
    meta = read_metadata(folder / "p.h5")
    assert meta["tilt"] == TILT and meta["beam"] == "parallel"


def test_cone_laminography_slab_by_slab_equals_laminography_fbp(plate, capsys):
    folder, _, cone = plate
    out = _laminography(
        folder,
        "cone",
        "c.h5",
        "--tilt",
        str(TILT),
        "--volume-shape",
        "16,24,24",
        "--voxel-size",
        "0.7",
        "--slab-slices",
        "4",
    )
    vol = leveret.VolumeGeometry((16, 24, 24), 0.7)
    ref = leveret.laminography_fbp(np.load(folder / "cone.npy"), cone, vol, backend="cpu")
    assert np.abs(ref).max() > 0.3
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
    # FDK's circular weights are not laminography's: the method reached the slabs
    fdk = leveret.fdk(np.load(folder / "cone.npy"), cone, vol, backend="cpu")
    assert np.abs(fdk - ref).max() > 1e-3 * np.abs(ref).max()
    assert _slabs(capsys.readouterr().err) == 4
    meta = read_metadata(folder / "c.h5")
    assert meta["tilt"] == TILT and meta["beam"] == "cone"


def test_laminography_dry_run_shows_the_geometry(plate, capsys):
    folder, _, _ = plate
    _laminography(folder, "par", "dry.h5", "--tilt", str(TILT), "--dry-run")
    out = capsys.readouterr().out
    assert "parallel beam, volume (20, 28, 28)" in out
    assert (
        "ParallelVecGeometry(60 views, detector 20 rows x 28 cols" in out and "rays 30 deg out of the xy plane" in out
    )
    assert "memory plan (cpu)" in out


@pytest.mark.parametrize("tilt", ["90", "-5", "120", "nan"])
def test_tilt_out_of_range_is_one_line(plate, capsys, tilt):
    folder, _, _ = plate
    _laminography(folder, "par", "bad.h5", f"--tilt={tilt}", code=2)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        (
            f"leveret recon: error: --tilt: expected degrees in [0, 90) (90 would look along the rotation "
            f"axis), got {float(tilt):g}"
        )
    ]


def test_laminography_needs_a_full_turn_and_a_given_centre(plate, tmp_path, capsys):
    folder, _, _ = plate
    np.save(tmp_path / "half.npy", np.load(folder / "par.npy")[:30])
    rc = main(
        [
            "recon",
            str(tmp_path / "half.npy"),
            str(tmp_path / "h.h5"),
            "--angles",
            "0:180:30",
            "--tilt",
            "30",
            "--backend",
            "cpu",
        ]
    )
    assert rc == 2
    assert "leveret recon: error: --angles: laminography FBP needs views over a full turn" in capsys.readouterr().err
    _laminography(folder, "par", "a.h5", "--tilt", "30", "--center", "auto", code=2)
    assert "--center: 'auto' estimates the axis from 180-degree pairs" in capsys.readouterr().err
    rc = main(["recon", str(folder / "par.npy"), str(tmp_path / "z.h5"), "--angles", "0:360:60", "--z-center", "2"])
    assert rc == 2
    assert "--z-center: places the volume of a helical (--helical-pitch) or laminography" in capsys.readouterr().err


def test_config_file_keys(helix, plate, tmp_path, capsys):
    folder, _ = helix
    (tmp_path / "h.toml").write_text(
        f'input = "{folder / "proj.npy"}"\nangles = "{folder / "angles.txt"}"\n[recon]\noutput = "out.h5"\n'
        f'beam = "cone"\nsid = 300\nsdd = 500\npixel_size = 2\nhelical_pitch = 12\nvolume_shape = "20,40,40"\n'
        f'backend = "cpu"\n'
    )
    assert main(["recon", "--config", str(tmp_path / "h.toml"), "--dry-run"]) == 0
    assert "pitch 12 per turn" in capsys.readouterr().out
    lam, _, _ = plate
    (tmp_path / "l.toml").write_text(
        f'input = "{lam / "par.npy"}"\nangles = "{lam / "angles.txt"}"\noutput = "out.h5"\ntilt = 30\nbackend = "cpu"\n'
    )
    assert main(["recon", "--config", str(tmp_path / "l.toml"), "--dry-run"]) == 0
    assert "rays 30 deg out of the xy plane" in capsys.readouterr().out
    (tmp_path / "bad.toml").write_text(
        f'input = "{lam / "par.npy"}"\nangles = "0:360:60"\noutput = "o.h5"\ntilt = 95\n'
    )
    assert main(["recon", "--config", str(tmp_path / "bad.toml"), "--dry-run"]) == 2
    assert "--tilt: expected degrees in [0, 90)" in capsys.readouterr().err
