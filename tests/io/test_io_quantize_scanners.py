"""Outputs in fewer bytes (float16, uint16/uint8 over a range) and cone-beam
geometries from files (row-major matrix files, Nikon .xtekct)."""

from __future__ import annotations

import numpy as np
import pytest

from leveret.io import quantize as q
from leveret.io.scanners import read_matrices, read_xtekct


# -- output dtypes ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,top", [("uint16", 65535), ("uint8", 255)])
def test_integers_map_the_range_onto_their_whole_range_and_clip_outside(dtype, top):
    values = np.array([-1.0, 0.0, 0.25, 0.5, 2.0, 3.0], np.float32)
    stored = q.quantize(values, dtype, (0.0, 2.0))
    assert stored.dtype == dtype
    assert stored.tolist() == [0, 0, round(0.125 * top), round(0.25 * top), top, top]  # below 0 and above 2 clip
    meta = q.value_metadata(dtype, (0.0, 2.0))
    assert meta["value_range"] == [0.0, 2.0] and meta["add_offset"] == 0.0
    assert meta["scale_factor"] == pytest.approx(2.0 / top)
    assert "below 0 are stored as 0" in meta["clipped"] and f"above 2 as {top}" in meta["clipped"]
    inside = (values >= 0) & (values <= 2)
    assert np.abs(q.dequantize(stored, meta) - values)[inside].max() <= 1.0 / top + 1e-7  # half a step


def test_float16_keeps_values_to_its_precision_and_clips_at_its_largest():
    values = np.array([1e-3, 0.5, 1234.5, 1e6, -1e6], np.float32)
    stored = q.quantize(values, "float16")
    assert stored.dtype == np.float16 and stored[3] == 65504 and stored[4] == -65504
    np.testing.assert_allclose(stored[:3].astype(np.float32), values[:3], rtol=2**-11)
    assert q.value_metadata("float16")["stored_dtype"] == "float16" and q.value_metadata("float32") == {}


def test_the_automatic_range_takes_the_percentiles_and_a_margin():
    sample = np.linspace(0.0, 1.0, 100_001, dtype=np.float32)
    lo, hi = q.auto_range(sample)
    assert lo == pytest.approx(0.0001 - 0.1 * 0.9998, abs=1e-6) and hi == pytest.approx(0.9999 + 0.1 * 0.9998, abs=1e-6)
    assert q.auto_range(np.full(10, 2.0, np.float32)) == pytest.approx((1.8, 2.2))  # constant: around it


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: q.output_dtype("int16"), "output_dtype: expected one of float32, float16, uint16, uint8"),
        (lambda: q.check_range((2, 1)), "output_range: expected finite lo < hi"),
        (lambda: q.check_range("ab"), r"output_range: expected \(lo, hi\)"),
        (lambda: q.quantize(np.zeros(2, np.float32), "uint8"), "output_range: storing as uint8 needs a value range"),
    ],
)
def test_bad_output_types_and_ranges_name_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# -- projection matrices ------------------------------------------------------------------------


def test_matrices_are_read_row_by_row_from_text(tmp_path):
    P = np.arange(24, dtype=np.float64).reshape(2, 3, 4) + 1
    (tmp_path / "m.txt").write_text("# two views\n" + "\n".join(" ".join(str(v) for v in m.ravel()) for m in P))
    np.testing.assert_array_equal(read_matrices(tmp_path / "m.txt"), P)
    np.save(tmp_path / "m.npy", P)
    np.testing.assert_array_equal(read_matrices(tmp_path / "m.npy"), P)
    (tmp_path / "bad.txt").write_text("1 2 3\n")
    with pytest.raises(ValueError, match=r"matrices: expected finite 3x4 matrices, .* 12 numbers per line"):
        read_matrices(tmp_path / "bad.txt")
    with pytest.raises(ValueError, match="matrices: .* does not exist"):
        read_matrices(tmp_path / "none.txt")


# -- Nikon XTek CT -------------------------------------------------------------------------------

XTEK = """[XTekCT]
Name=bolt
VoxelsX=40
VoxelsY=40
VoxelsZ=20
VoxelSizeX=0.25
VoxelSizeY=0.25
VoxelSizeZ=0.5
SrcToObject=150.0
SrcToDetector=600.0
DetectorPixelsX=64
DetectorPixelsY=32
DetectorPixelSizeX=0.4
DetectorPixelSizeY=0.5
DetectorOffsetX={dx}
DetectorOffsetY={dy}
CentreOfRotationTop={cor}
CentreOfRotationBottom={cor}
WhiteLevel=58000.0
Projections=36
InitialAngle={first}
AngularStep=10.0
InputFolderName=
"""


def _xtek(tmp_path, dx=0.0, dy=0.0, cor=0.0, first=0.0, extra=""):
    path = tmp_path / "bolt.xtekct"
    path.write_text(XTEK.format(dx=dx, dy=dy, cor=cor, first=first) + extra)
    return path


def test_xtekct_gives_the_detector_volume_angles_and_white_level(tmp_path):
    scan = read_xtekct(_xtek(tmp_path))
    g = scan.geometry
    assert g.projection_shape == (36, 32, 64) and g.pixel_size == (0.4, 0.5)
    assert scan.volume.shape == (20, 40, 40) and scan.volume.voxel_size == (0.5, 0.25, 0.25)
    assert scan.white_level == 58000.0 and scan.projections == []
    np.testing.assert_allclose(np.degrees(g.angles), 10.0 * np.arange(36) - 180.0)
    # magnification 4: the rotation axis's point at height z lands 4 z / 0.5 rows from the middle,
    # row 0 being the detector's top (as the TIFFs store it): higher points on lower rows
    u, v, _ = g.project(np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]]))
    np.testing.assert_allclose(u[:, 0], 31.5, atol=1e-9)
    np.testing.assert_allclose(v[:, 0], 15.5, atol=1e-9)
    np.testing.assert_allclose(v[:, 1], 15.5 - 4 * 1.0 / 0.5, atol=1e-9)
    np.testing.assert_allclose(g.source_positions()[:, 2], 0.0, atol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(g.source_positions(), axis=1), 150.0)


def test_xtekct_offsets_move_the_detector_and_the_axis(tmp_path):
    """A detector moved by d along its columns (DetectorOffsetX) or up
    (DetectorOffsetY) shows a fixed point d / pitch pixels the other way (row 0
    at the top); a rotation axis off the beam's centre by c at the detector
    (CentreOfRotation) shows at c / pitch pixels along the columns."""
    base = read_xtekct(_xtek(tmp_path)).geometry
    moved = read_xtekct(_xtek(tmp_path, dx=0.8, dy=-1.0)).geometry
    origin = np.zeros((1, 3))
    du = moved.project(origin)[0] - base.project(origin)[0]
    dv = moved.project(origin)[1] - base.project(origin)[1]
    np.testing.assert_allclose(du, -0.8 / 0.4, atol=1e-9)
    np.testing.assert_allclose(dv, -1.0 / 0.5, atol=1e-9)  # the detector went down: the point shows higher
    axis = read_xtekct(_xtek(tmp_path, cor=0.4)).geometry
    np.testing.assert_allclose(axis.project(origin)[0] - base.project(origin)[0], 0.4 / 0.4, atol=1e-6)


def test_xtekct_rotation_turns_the_sample_clockwise_seen_from_above(tmp_path):
    """Seen from the source the TIFFs' columns run right to left; the sample
    turning clockwise seen from above moves a point on the source's side of
    the axis to the left: to larger columns from one view to the next."""
    g = read_xtekct(_xtek(tmp_path)).geometry
    for i in (0, 9, 20):
        point = 0.3 * g.source_positions()[i : i + 1]
        u = g.project(point)[0][:, 0]
        assert u[i + 1] > u[i] and u[i - 1] < u[i]


@pytest.mark.parametrize(
    "extra,message",
    [
        ("ObjectTilt=2.0\n", "ObjectTilt = 2.0 .* not supported"),
        ("", None),
    ],
)
def test_xtekct_refuses_what_it_cannot_model(tmp_path, extra, message):
    path = _xtek(tmp_path, extra=extra)
    if message:
        with pytest.raises(ValueError, match=f"xtekct: {message}"):
            read_xtekct(path)
    path.write_text(
        XTEK.format(dx=0, dy=0, cor=0, first=0).replace("CentreOfRotationBottom=0", "CentreOfRotationBottom=1")
    )
    with pytest.raises(ValueError, match="xtekct: CentreOfRotationTop 0.0 and CentreOfRotationBottom 1.0 differ"):
        read_xtekct(path)
    path.write_text(XTEK.format(dx=0, dy=0, cor=0, first=0).replace("SrcToObject=150.0\n", ""))
    with pytest.raises(ValueError, match="xtekct: .* lacks SrcToObject"):
        read_xtekct(path)
    path.write_text(XTEK.format(dx=0, dy=0, cor=0, first=0).replace("Projections=36", "Projections=many"))
    with pytest.raises(ValueError, match="xtekct: Projections is 'many'"):
        read_xtekct(path)


def test_xtekct_finds_its_projections(tmp_path):
    import tifffile

    for i in (2, 10, 1):
        tifffile.imwrite(tmp_path / f"bolt_{i:04d}.tif", np.zeros((32, 64), np.uint16))
    tifffile.imwrite(tmp_path / "other.tif", np.zeros((32, 64), np.uint16))
    scan = read_xtekct(_xtek(tmp_path))
    assert [p.name for p in scan.projections] == ["bolt_0001.tif", "bolt_0002.tif", "bolt_0010.tif"]
