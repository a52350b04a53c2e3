"""recon's disk-to-disk flags: --output-dtype/--output-range (the range stored in
the file), the stage split it reports, and cone beam from the command line
(--matrices, circular parameters, --xtekct) through the same pipeline, equal
to leveret.fdk in memory."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.cli import main
from leveret.io import read_array, read_metadata
from leveret.io.quantize import dequantize


@pytest.fixture(scope="module")
def parallel(tmp_path_factory):
    folder = tmp_path_factory.mktemp("parallel")
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 90, endpoint=False), 40, n_rows=12)
    lines = phantom.ball(8.0, center=(3.0, -2.0, 0.0)).project(g).astype(np.float32)
    np.save(folder / "proj.npy", lines)
    return folder, leveret.fbp(lines, g, backend="cpu")


def _recon(folder, name, *flags, code=0, capsys=None):
    rc = main(
        [
            "recon",
            str(folder / "proj.npy"),
            str(folder / name),
            "--angles",
            "0:180:90",
            "--backend",
            "cpu",
            "--no-progress",
            "--overwrite",
            *flags,
        ]
    )
    assert rc == code
    return read_array(folder / name) if code == 0 else None


@pytest.mark.parametrize("dtype", ["uint16", "uint8"])
def test_integer_outputs_store_the_range_given_and_clip_outside_it(parallel, dtype, capsys):
    folder, ref = parallel
    out = _recon(folder, f"q_{dtype}.h5", "--output-dtype", dtype, "--output-range", "0:0.5")
    assert out.dtype == dtype
    meta = read_metadata(folder / f"q_{dtype}.h5")
    assert meta["value_range"] == [0.0, 0.5] and meta["stored_dtype"] == dtype
    top = np.iinfo(dtype).max
    back = dequantize(out, meta)
    inside = (ref >= 0) & (ref <= 0.5)
    assert np.abs(back - ref)[inside].max() <= 0.5 / top / 2 + 1e-6  # half a step
    assert np.all(out[ref > 0.5] == top) and np.all(out[ref < 0] == 0)  # clipped, as the metadata says
    assert "stored as " + dtype in capsys.readouterr().err


def test_the_automatic_range_covers_the_volume(parallel, capsys):
    folder, ref = parallel
    out = _recon(folder, "auto.zarr" if _zarr() else "auto.h5", "--output-dtype", "uint16")
    meta = read_metadata(folder / ("auto.zarr" if _zarr() else "auto.h5"))
    lo, hi = meta["value_range"]
    assert lo < ref.min() and hi > ref.max() and (hi - lo) < 1.5 * (ref.max() - ref.min())
    np.testing.assert_allclose(dequantize(out, meta), ref, rtol=0, atol=(hi - lo) / 65535)
    err = capsys.readouterr().err
    assert "stages: read" in err and "reconstruct" in err and "bound by" in err


def test_no_sync_leaves_the_volume_to_the_page_cache(parallel, monkeypatch):
    import leveret.io.slabs as slabs

    folder, ref = parallel
    made = []
    real = slabs.SlabWriter.__init__

    def init(self, *args, **kwargs):
        made.append(kwargs.get("sync"))
        real(self, *args, **kwargs)

    monkeypatch.setattr(slabs.SlabWriter, "__init__", init)
    np.testing.assert_allclose(_recon(folder, "ns.npy", "--no-sync"), ref, rtol=0, atol=1e-6)
    _recon(folder, "s.npy")
    assert made == [False, True]


def test_float16_output_halves_the_bytes(parallel):
    folder, ref = parallel
    out = _recon(folder, "h.npy", "--output-dtype", "float16")
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=0, atol=2**-11 * np.abs(ref).max() + 1e-4)


@pytest.mark.parametrize(
    "flags,message",
    [
        (
            ("--output-range", "0:1"),
            "--output-range: a value range applies to --output-dtype uint8 or uint16, not float32",
        ),
        (("--output-dtype", "uint8", "--output-range", "2:1"), "argument --output-range: expected finite LO < HI"),
        (("--io-threads", "0"), "argument --io-threads: expected a positive integer"),
    ],
)
def test_bad_output_flags_are_one_line(parallel, capsys, flags, message):
    folder, _ = parallel
    with pytest.raises(SystemExit) if message.startswith("argument") else _nothing():
        _recon(folder, "bad.h5", *flags, code=2)
    err = capsys.readouterr().err
    assert message in err
    assert not (folder / "bad.h5").exists()


def _zarr() -> bool:
    import importlib.util

    return importlib.util.find_spec("zarr") is not None


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# -- cone beam ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cone(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cone")
    angles = np.linspace(0, 2 * np.pi, 72, endpoint=False)
    g = leveret.ConeGeometry.circular(angles, 200.0, 400.0, 40, 56, 1.0, det_offset=(1.0, 0.0))
    v = leveret.VolumeGeometry((16, 40, 40), 0.5)
    proj = phantom.ball(6.0, center=(1.5, -1.0, 0.5)).project(g).astype(np.float32)
    np.save(folder / "proj.npy", proj)
    return folder, g, v, proj, leveret.fdk(proj, g, v, backend="cpu")


def _cone(folder, name, *flags, code=0):
    rc = main(
        [
            "recon",
            str(folder / "proj.npy"),
            str(folder / name),
            "--backend",
            "cpu",
            "--no-progress",
            "--volume-shape",
            "16,40,40",
            "--voxel-size",
            "0.5",
            "--slab-slices",
            "5",
            *flags,
        ]
    )
    assert rc == code
    return read_array(folder / name) if code == 0 else None


def test_cone_from_circular_parameters_equals_fdk_in_memory(cone):
    folder, g, v, proj, ref = cone
    out = _cone(
        folder,
        "c.h5",
        "--beam",
        "cone",
        "--angles",
        "0:360:72",
        "--sid",
        "200",
        "--sdd",
        "400",
        "--pixel-size",
        "1",
        "--det-offset-u",
        "1",
    )
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-6)
    assert abs(out[8, 20 - 2, 20 + 3] - 1.0) < 0.02  # inside the ball (x 1.5, y -1): its value, 1


def test_cone_from_a_matrix_file_equals_fdk_in_memory(cone):
    folder, g, v, proj, ref = cone
    np.savetxt(folder / "m.txt", g.matrices.reshape(-1, 12))  # row by row
    out = _cone(folder, "m.npy", "--matrices", str(folder / "m.txt"))
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-6)
    # the default volume: the detector at the rotation axis (pitch / magnification 2)
    assert (
        main(
            [
                "recon",
                str(folder / "proj.npy"),
                str(folder / "d.npy"),
                "--matrices",
                str(folder / "m.txt"),
                "--backend",
                "cpu",
                "--dry-run",
            ]
        )
        == 0
    )


def test_cone_from_an_xtekct_file_and_its_tiffs(cone, tmp_path):
    """A Nikon scan: counts in TIFFs beside the parameter file, normalised by its white level."""
    import tifffile

    from leveret.io.scanners import read_xtekct

    folder, _, v, _, _ = cone
    (tmp_path / "scan.xtekct").write_text(
        "[XTekCT]\nName=scan\nVoxelsX=40\nVoxelsY=40\nVoxelsZ=16\nVoxelSizeX=0.5\nVoxelSizeY=0.5\nVoxelSizeZ=0.5\n"
        "SrcToObject=200\nSrcToDetector=400\nDetectorPixelsX=56\nDetectorPixelsY=40\nDetectorPixelSizeX=1.0\n"
        "DetectorPixelSizeY=1.0\nWhiteLevel=60000\nProjections=72\nInitialAngle=0\nAngularStep=5\n"
    )
    scan = read_xtekct(tmp_path / "scan.xtekct")
    lines = phantom.ball(6.0, center=(1.5, -1.0, 0.5)).project(scan.geometry)
    counts = np.round(60000 * np.exp(-0.2 * lines)).astype(np.uint16)  # a ball of 0.2 per mm
    for i, image in enumerate(counts):
        tifffile.imwrite(tmp_path / f"scan_{i + 1:04d}.tif", image)
    assert (
        main(
            [
                "recon",
                "--xtekct",
                str(tmp_path / "scan.xtekct"),
                str(tmp_path / "x.h5"),
                "--backend",
                "cpu",
                "--no-progress",
            ]
        )
        == 0
    )
    ref = leveret.fdk(-np.log(counts / np.float32(60000)).astype(np.float32), scan.geometry, scan.volume, backend="cpu")
    np.testing.assert_allclose(read_array(tmp_path / "x.h5"), ref, rtol=0, atol=1e-5)
    # the same ball as the circular scan above: the geometries agree on where it lies (they sample it
    # differently: a few % at its edge)
    np.testing.assert_allclose(read_array(tmp_path / "x.h5") / 0.2, cone[4], rtol=0, atol=0.06)
    assert abs(read_array(tmp_path / "x.h5")[8, 20 - 2, 20 + 3] - 0.2) < 0.004


@pytest.mark.parametrize(
    "flags,message",
    [
        (("--matrices", "m.txt", "--beam", "parallel"), "--matrices: describes a cone-beam scan, but --beam parallel"),
        (
            ("--beam", "cone", "--sid", "200", "--angles", "0:360:72"),
            "--sid: a circular cone-beam scan also needs --sdd, --pixel-size",
        ),
        (("--beam", "cone"), "--beam: a cone-beam scan takes its geometry from one of --matrices, --xtekct or"),
        (("--matrices", "m.txt", "--center", "20"), "--center: parallel beam only"),
        (
            ("--matrices", "m.txt", "--interpolation", "nearest"),
            "--interpolation: cone beam takes 'linear' or 'linear8'",
        ),
        (
            ("--beam", "cone", "--angles", "0:360:70", "--sid", "200", "--sdd", "400", "--pixel-size", "1"),
            "--angles: expected 72 angles (one per projection in input), got 70",
        ),
    ],
)
def test_bad_cone_flags_are_one_line_and_exit_2(cone, capsys, monkeypatch, flags, message):
    folder, g, *_ = cone
    np.savetxt(folder / "m.txt", g.matrices.reshape(-1, 12))
    monkeypatch.chdir(folder)
    assert _cone(folder, "bad.h5", *flags, code=2) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("leveret recon: error: ") and message in err[-1], err
    assert not (folder / "bad.h5").exists()
