"""read_scan: NXtomo (mixed image keys) and DXchange files, and bad files."""

import h5py
import numpy as np
import pytest

from leveret.io import FrameStack, read_scan

ROWS, COLS = 3, 4
# Flats before, between and after the projections, darks, an invalid frame.
KEYS = np.array([2, 1, 1, 0, 0, 3, 1, 0, 0, 0, 2, 1])


def _frames(n, dtype=np.uint16):
    # Frame k is filled with k * 10 plus a pattern, so frames are recognisable.
    base = np.arange(ROWS * COLS).reshape(ROWS, COLS)
    return np.stack([base + 10 * k for k in range(n)]).astype(dtype)


def _nxtomo(path, keys=KEYS, *, angles_deg=None, units="degree", layout="data", entry="entry"):
    data = _frames(len(keys))
    angles = np.linspace(0, 180, len(keys)) if angles_deg is None else angles_deg
    with h5py.File(path, "a") as f:
        e = f.create_group(entry)
        e.attrs["NX_class"] = "NXentry"
        e["definition"] = "NXtomo"
        det = e.create_group("instrument/detector")
        det["data"] = data
        det["image_key"] = keys
        sample = e.create_group("sample")
        sample["rotation_angle"] = angles
        if units is not None:
            sample["rotation_angle"].attrs["units"] = units
        if layout == "data":  # NXdata group linking the detector's fields
            d = e.create_group("data")
            d["data"] = det["data"]
            d["image_key"] = det["image_key"]
            d["rotation_angle"] = sample["rotation_angle"]
    return data, angles


def _dxchange(path, n=5, *, white=2, dark=1, theta=True):
    data = _frames(n, np.float32)
    with h5py.File(path, "w") as f:
        f["exchange/data"] = data
        if white is not None:
            f["exchange/data_white"] = _frames(white, np.float32) + 1000
        if dark is not None:
            f["exchange/data_dark"] = _frames(dark, np.float32) - 1000
        if theta:
            f["exchange/theta"] = np.linspace(0, 180, n)
    return data


@pytest.mark.parametrize("layout", ["data", "detector"])
def test_nxtomo_mixed_keys_round_trip(tmp_path, layout):
    data, angles = _nxtomo(tmp_path / "s.nxs", layout=layout)
    for how in ("auto", "nxtomo"):
        scan = read_scan(tmp_path / "s.nxs", layout=how)
        assert isinstance(scan.projections, FrameStack)
        assert scan.projections.shape == (5, ROWS, COLS) and scan.projections.dtype == np.uint16
        np.testing.assert_array_equal(np.asarray(scan.projections), data[KEYS == 0])
        np.testing.assert_array_equal(scan.flats, data[KEYS == 1])
        np.testing.assert_array_equal(scan.darks, data[KEYS == 2])
        np.testing.assert_allclose(scan.angles, np.deg2rad(angles[KEYS == 0]))
        assert scan.metadata["path"] == str(tmp_path / "s.nxs")
        assert scan.metadata["layout"] == "nxtomo" and scan.metadata["entry"] == "/entry"
        np.testing.assert_array_equal(scan.metadata["image_key"], KEYS)


def test_frame_stack_indexing_is_lazy_and_numpy_like(tmp_path):
    data, _ = _nxtomo(tmp_path / "s.nxs")
    proj = read_scan(tmp_path / "s.nxs").projections
    ref = data[KEYS == 0]
    assert len(proj) == 5 and proj.ndim == 3
    np.testing.assert_array_equal(proj.frame_indices, np.flatnonzero(KEYS == 0))
    for key in [
        0,
        -1,
        slice(1, 4),
        slice(None, None, -2),
        [4, 0, 2],
        np.array([True, False] * 2 + [True]),
        (2, 1),
        (slice(0, 2), slice(1, 3), 2),
        (1, slice(None, None, -1)),
        (..., 1),
        (slice(None), [0, 2]),
    ]:
        got = proj[key]
        assert isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got, ref[key], err_msg=repr(key))
    assert np.asarray(proj, dtype=np.float32).dtype == np.float32
    with pytest.raises(IndexError):
        proj[5]


def test_nxtomo_radians_and_missing_angles(tmp_path):
    rad = np.linspace(0, np.pi, len(KEYS))
    _nxtomo(tmp_path / "r.nxs", angles_deg=rad, units=b"rad")
    np.testing.assert_allclose(read_scan(tmp_path / "r.nxs").angles, rad[KEYS == 0])
    _nxtomo(tmp_path / "d.nxs", units=None)  # no units attribute: degrees
    np.testing.assert_allclose(
        read_scan(tmp_path / "d.nxs").angles, np.deg2rad(np.linspace(0, 180, len(KEYS))[KEYS == 0])
    )
    _nxtomo(tmp_path / "n.nxs", layout="detector")
    with h5py.File(tmp_path / "n.nxs", "a") as f:
        del f["entry/sample/rotation_angle"]
    assert read_scan(tmp_path / "n.nxs").angles is None


def test_nxtomo_without_flats_or_darks(tmp_path):
    data, _ = _nxtomo(tmp_path / "s.nxs", keys=np.zeros(3, np.int32))
    scan = read_scan(tmp_path / "s.nxs")
    assert scan.flats.shape == scan.darks.shape == (0, ROWS, COLS)
    np.testing.assert_array_equal(scan.projections[:], data)


def test_dxchange_round_trip(tmp_path):
    data = _dxchange(tmp_path / "dx.h5")
    for how in ("auto", "dxchange"):
        scan = read_scan(tmp_path / "dx.h5", layout=how)
        np.testing.assert_array_equal(np.asarray(scan.projections), data)
        np.testing.assert_array_equal(scan.flats, _frames(2, np.float32) + 1000)
        np.testing.assert_array_equal(scan.darks, _frames(1, np.float32) - 1000)
        np.testing.assert_allclose(scan.angles, np.deg2rad(np.linspace(0, 180, 5)))
        assert scan.metadata["layout"] == "dxchange" and scan.metadata["dataset"] == "/exchange/data"
    _dxchange(tmp_path / "bare.h5", white=None, dark=None, theta=False)
    scan = read_scan(tmp_path / "bare.h5")
    assert scan.angles is None and scan.flats.shape == scan.darks.shape == (0, ROWS, COLS)


def _check(path, match, **kwargs):
    with pytest.raises(ValueError, match=r"^path: .*" + match):
        read_scan(path, **kwargs)


def test_bad_nxtomo_files(tmp_path):
    _nxtomo(tmp_path / "none.nxs", keys=np.array([1, 2, 3]))
    _check(tmp_path / "none.nxs", r"no projections")
    _nxtomo(tmp_path / "len.nxs")
    with h5py.File(tmp_path / "len.nxs", "a") as f:
        for g in ("data", "instrument/detector"):
            del f[f"entry/{g}/image_key"]
        f["entry/data/image_key"] = KEYS[:-1]
    _check(tmp_path / "len.nxs", r"image_key has 11 values but .* 12 frames")
    _nxtomo(tmp_path / "key.nxs", keys=np.array([0, 4, 0]))
    _check(tmp_path / "key.nxs", r"holds 4; expected 0 \(projection\)")
    _nxtomo(tmp_path / "ang.nxs", angles_deg=np.arange(3.0))
    _check(tmp_path / "ang.nxs", r"holds 3 angles for 12 frames")
    _nxtomo(tmp_path / "unit.nxs", units="gradian")
    _check(tmp_path / "unit.nxs", r"unknown units 'gradian'")
    _nxtomo(tmp_path / "nokey.nxs", layout="detector")
    with h5py.File(tmp_path / "nokey.nxs", "a") as f:
        del f["entry/instrument/detector/image_key"]
    _check(tmp_path / "nokey.nxs", r"no image_key")
    _nxtomo(tmp_path / "two.nxs")
    _nxtomo(tmp_path / "two.nxs", entry="entry2")
    _check(tmp_path / "two.nxs", r"several NXtomo entries")
    assert read_scan(tmp_path / "two.nxs", entry="/entry2").metadata["entry"] == "/entry2"
    with h5py.File(tmp_path / "2d.nxs", "w") as f:
        f["entry/data/data"] = np.zeros((3, 3))
        f["entry/data/image_key"] = np.zeros(3)
    _check(tmp_path / "2d.nxs", r"expected frames \(n_frames, n_rows, n_cols\)")


def test_bad_files_and_layouts(tmp_path):
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["data"] = np.zeros((2, 2, 2))
    _check(tmp_path / "other.h5", r"fits neither layout")
    _check(tmp_path / "other.h5", r"no /exchange/data", layout="dxchange")
    _check(tmp_path / "other.h5", r"no NXtomo frames", layout="nxtomo")
    _dxchange(tmp_path / "both.h5")
    _nxtomo(tmp_path / "both.h5")
    _check(tmp_path / "both.h5", r"fits both")
    assert read_scan(tmp_path / "both.h5", layout="nxtomo").projections.shape == (5, ROWS, COLS)
    _dxchange(tmp_path / "badwhite.h5")
    with h5py.File(tmp_path / "badwhite.h5", "a") as f:
        del f["exchange/data_white"]
        f["exchange/data_white"] = np.zeros((2, ROWS + 1, COLS))
    _check(tmp_path / "badwhite.h5", r"data_white frames are \(4, 4\)")
    _dxchange(tmp_path / "theta.h5")
    with h5py.File(tmp_path / "theta.h5", "a") as f:
        del f["exchange/theta"]
        f["exchange/theta"] = np.zeros(4)
    _check(tmp_path / "theta.h5", r"holds 4 angles for 5 frames")
    _check(tmp_path / "missing.h5", r"no such file")
    (tmp_path / "junk.h5").write_bytes(b"not an HDF5 file at all")
    _check(tmp_path / "junk.h5", r"cannot read")
    _dxchange(tmp_path / "cut.h5")
    data = (tmp_path / "cut.h5").read_bytes()
    (tmp_path / "cut.h5").write_bytes(data[: len(data) // 2])
    _check(tmp_path / "cut.h5", r"cannot read")
    with pytest.raises(ValueError, match=r"^layout: expected one of"):
        read_scan(tmp_path / "cut.h5", layout="tiff")
    with pytest.raises(ValueError, match=r"^entry: "):
        read_scan(tmp_path / "cut.h5", layout="dxchange", entry="/entry")


def test_hypothesis_truncated_files_give_value_error(tmp_path):
    # Truncation only: flipped bytes can crash the HDF5 C library itself.
    hypothesis = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")
    _nxtomo(tmp_path / "s.nxs")
    good = (tmp_path / "s.nxs").read_bytes()

    @hypothesis.settings(max_examples=30, deadline=None, database=None)
    @hypothesis.given(cut=st.integers(0, len(good) - 1))
    def check(cut):
        path = tmp_path / "cut.nxs"
        path.write_bytes(good[:cut])
        with pytest.raises(ValueError, match=r"^path: "):
            np.asarray(read_scan(path).projections)

    check()
