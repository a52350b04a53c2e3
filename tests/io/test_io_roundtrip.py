"""read_array / write_array: round trips, dispatch and bad input."""

import os

import h5py
import numpy as np
import pytest
import tifffile

from leveret.io import read_array, write_array
from leveret.io import writers


def _stack(dtype=np.uint16, shape=(4, 5, 7)):
    return (np.arange(np.prod(shape)) % 251).reshape(shape).astype(dtype)


def _listing(folder):
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.float32, np.float64])
@pytest.mark.parametrize("name", ["a.npy", "a.tif", "a.tiff", "a.h5", "a.hdf5", "slices/", "slices"])
def test_round_trip_preserves_values_shape_dtype(tmp_path, name, dtype):
    a = _stack(dtype)
    out = write_array(str(tmp_path / name) + ("/" if name.endswith("/") else ""), a)
    b = read_array(out)
    assert b.dtype == a.dtype and b.shape == a.shape
    np.testing.assert_array_equal(b, a)
    assert _listing(tmp_path) == [out.name]  # no temporary left behind


@pytest.mark.parametrize("shape", [(5, 7), (1, 5, 7), (3, 5, 7), (4, 6, 3)])
def test_tiff_single_and_multi_page(tmp_path, shape):
    a = _stack(np.float32, shape)
    write_array(tmp_path / "a.tif", a)
    with tifffile.TiffFile(tmp_path / "a.tif") as tif:
        assert len(tif.pages) == (1 if len(shape) == 2 else shape[0])
        assert not tif.is_bigtiff
    np.testing.assert_array_equal(read_array(tmp_path / "a.tif"), a)


def test_bigtiff_above_threshold(tmp_path, monkeypatch):
    monkeypatch.setattr(writers, "BIGTIFF_THRESHOLD", 100)
    write_array(tmp_path / "big.tif", _stack())
    with tifffile.TiffFile(tmp_path / "big.tif") as tif:
        assert tif.is_bigtiff
    np.testing.assert_array_equal(read_array(tmp_path / "big.tif"), _stack())


def test_hdf5_inline_and_keyword_dataset(tmp_path):
    a = _stack(np.float32)
    write_array(f"{tmp_path / 'a.h5'}:/entry/volume", a)
    with h5py.File(tmp_path / "a.h5", "r") as f:
        assert list(f) == ["entry"]
    np.testing.assert_array_equal(read_array(f"{tmp_path / 'a.h5'}:/entry/volume"), a)
    np.testing.assert_array_equal(read_array(tmp_path / "a.h5", dataset="entry/volume"), a)
    # The only dataset of a file is found without naming it.
    np.testing.assert_array_equal(read_array(tmp_path / "a.h5"), a)
    # Default dataset "/data".
    write_array(tmp_path / "b.hdf5", a)
    with h5py.File(tmp_path / "b.hdf5", "r") as f:
        np.testing.assert_array_equal(f["/data"][()], a)


def test_hdf5_dataset_errors(tmp_path):
    with h5py.File(tmp_path / "m.nxs", "w") as f:
        f["entry/x"] = np.zeros(3)
        f["entry/y"] = np.ones(3)
    with pytest.raises(ValueError, match=r"^dataset: .*2 datasets.*/entry/x, /entry/y"):
        read_array(tmp_path / "m.nxs")
    with pytest.raises(ValueError, match=r"^dataset: .*'/entry/z'.*found nothing"):
        read_array(f"{tmp_path / 'm.nxs'}:/entry/z")
    with pytest.raises(ValueError, match=r"^dataset: .*found a group"):
        read_array(tmp_path / "m.nxs", dataset="/entry")
    with pytest.raises(ValueError, match=r"^dataset: given both"):
        read_array(f"{tmp_path / 'm.nxs'}:/entry/x", dataset="/entry/x")
    np.testing.assert_array_equal(read_array(f"{tmp_path / 'm.nxs'}:/entry/y"), np.ones(3))


def test_folder_natural_order_and_filtering(tmp_path):
    folder = tmp_path / "scan"
    folder.mkdir()
    for k in [10, 2, 1, 0, 33]:
        tifffile.imwrite(folder / f"raw_{k}.tif", np.full((3, 4), k, np.uint16))
    (folder / "angles.txt").write_text("0\n")  # not a TIFF: ignored
    tifffile.imwrite(folder / ".raw_5.tif.tmp-1.tif", np.zeros((3, 4), np.uint16))  # hidden: ignored
    expected = [0, 1, 2, 10, 33]
    assert read_array(folder)[:, 0, 0].tolist() == expected
    assert read_array(folder / "raw_*.tif")[:, 0, 0].tolist() == expected
    assert read_array(str(folder / "raw_?.tif"))[:, 0, 0].tolist() == [0, 1, 2]


def test_write_folder_names_slices(tmp_path):
    write_array(tmp_path / "vol", _stack())
    assert _listing(tmp_path / "vol") == [f"slice_{k:05d}.tif" for k in range(4)]


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda p: p / "missing.npy", r"no such file"),
        (lambda p: p / "missing_*.tif", r"matches no file"),
        (lambda p: (p / "a.txt").write_text("1") and p / "a.txt", r"unknown extension '.txt'"),
        (lambda p: (p / "empty").mkdir() or p / "empty", r"holds no .tif"),
        (lambda p: (p / "bad.tif").write_bytes(b"not a tiff") and p / "bad.tif", r"cannot read .* as a TIFF"),
        (lambda p: (p / "bad.h5").write_bytes(b"not hdf5") and p / "bad.h5", r"cannot read .* as an HDF5"),
    ],
)
def test_bad_input_names_path(tmp_path, make, match):
    with pytest.raises(ValueError, match=r"^path: .*" + match):
        read_array(make(tmp_path))


def test_stack_of_differing_images(tmp_path):
    tifffile.imwrite(tmp_path / "a1.tif", np.zeros((3, 4), np.uint16))
    tifffile.imwrite(tmp_path / "a2.tif", np.zeros((3, 5), np.uint16))
    with pytest.raises(ValueError, match=r"^path: .*images differ.*\(3, 4\).*\(3, 5\)"):
        read_array(tmp_path)
    tifffile.imwrite(tmp_path / "a2.tif", np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match=r"^path: .*images differ.*uint16.*float32"):
        read_array(tmp_path)
    tifffile.imwrite(tmp_path / "a0.tif", np.zeros((2, 3, 4), np.uint16))
    with pytest.raises(ValueError, match=r"^path: .*expected 2D images.*\(2, 3, 4\)"):
        read_array(tmp_path)


def test_dataset_with_non_hdf5(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros(3))
    with pytest.raises(ValueError, match=r"^dataset: only HDF5"):
        read_array(tmp_path / "a.npy", dataset="/data")
    with pytest.raises(ValueError, match=r"^dataset: only HDF5"):
        write_array(tmp_path / "b.npy", np.zeros(3), dataset="/data")


def test_write_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match=r"^path: unknown extension '.png'"):
        write_array(tmp_path / "a.png", np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"^path: the folder .* does not exist"):
        write_array(tmp_path / "nope" / "a.npy", np.zeros(2))
    with pytest.raises(ValueError, match=r"^array: a TIFF file takes 2 or 3D"):
        write_array(tmp_path / "a.tif", np.zeros((2, 2, 2, 2)))
    with pytest.raises(ValueError, match=r"^array: a folder of TIFF slices takes 3D"):
        write_array(tmp_path / "slices/", np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"^array: expected numeric"):
        write_array(tmp_path / "a.npy", np.array([object()]))
    assert _listing(tmp_path) == []


def test_path_of_wrong_type():
    with pytest.raises(TypeError, match=r"^path: expected a str or os.PathLike"):
        read_array(42)
    with pytest.raises(TypeError, match=r"^path: expected a str or os.PathLike"):
        write_array(None, np.zeros(2))
