"""Atomic writes: all or nothing, never overwrite unasked."""

import os
from pathlib import Path

import numpy as np
import pytest
import tifffile

from leveret.io import atomic_output, read_array, write_array


def _failing_after(monkeypatch, calls_ok, exc):
    """Make writers' tifffile.imwrite write some files, then write half a file and raise."""
    real = tifffile.imwrite
    count = {"n": 0}

    def imwrite(path, data, **kwargs):
        count["n"] += 1
        # The writer works under a hidden temporary name (file or folder).
        assert any(part.startswith(".") for part in Path(path).parts[-2:])
        if count["n"] > calls_ok:
            with open(path, "wb") as f:
                f.write(b"II*\0 half a file")
            raise exc
        return real(path, data, **kwargs)

    monkeypatch.setattr(tifffile, "imwrite", imwrite)  # writers import it lazily


@pytest.mark.parametrize("exc", [OSError("disk full"), KeyboardInterrupt()])
@pytest.mark.parametrize("name, calls_ok", [("a.tif", 0), ("vol/", 2)])
def test_failed_write_leaves_nothing(tmp_path, monkeypatch, name, calls_ok, exc):
    _failing_after(monkeypatch, calls_ok, exc)
    with pytest.raises(type(exc)):
        write_array(str(tmp_path / name), np.zeros((4, 3, 3), np.float32))
    assert os.listdir(tmp_path) == []


def test_failed_overwrite_keeps_old_output(tmp_path, monkeypatch):
    old = np.ones((2, 3, 3), np.float32)
    write_array(tmp_path / "a.tif", old)
    _failing_after(monkeypatch, 0, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        write_array(tmp_path / "a.tif", np.zeros((2, 3, 3), np.float32), overwrite=True)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["a.tif"]
    np.testing.assert_array_equal(read_array(tmp_path / "a.tif"), old)


def test_failed_hdf5_and_npy_write(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(np, "save", boom)
    with pytest.raises(RuntimeError):
        write_array(tmp_path / "a.npy", np.zeros(3))
    monkeypatch.setattr("h5py.Group.create_dataset", boom)
    with pytest.raises(RuntimeError):
        write_array(tmp_path / "a.h5", np.zeros(3))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["a.npy", "a.tif", "a.h5", "vol/"])
def test_refuses_to_overwrite(tmp_path, name):
    path = str(tmp_path / name)
    write_array(path, np.zeros((2, 3, 3)))
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(ValueError, match=r"^path: .* already exists; pass overwrite=True"):
        write_array(path, np.ones((2, 3, 3)))
    assert sorted(os.listdir(tmp_path)) == before
    np.testing.assert_array_equal(read_array(path), 0)
    write_array(path, np.ones((2, 3, 3)), overwrite=True)
    np.testing.assert_array_equal(read_array(path), 1)
    assert sorted(os.listdir(tmp_path)) == before


def test_overwrite_folder_with_fewer_slices(tmp_path):
    write_array(tmp_path / "vol", np.zeros((5, 2, 2)))
    write_array(tmp_path / "vol", np.ones((2, 2, 2)), overwrite=True)
    assert sorted(os.listdir(tmp_path / "vol")) == ["slice_00000.tif", "slice_00001.tif"]
    assert os.listdir(tmp_path) == ["vol"]


def test_atomic_output_context_manager(tmp_path):
    target = tmp_path / "result.json"
    with atomic_output(target) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".result.json.tmp-")
        tmp.write_text("{}")
        assert not target.exists()
    assert target.read_text() == "{}" and os.listdir(tmp_path) == ["result.json"]

    with pytest.raises(ValueError, match=r"^path: .* already exists"):
        with atomic_output(target):
            pass
    with pytest.raises(ZeroDivisionError):
        with atomic_output(target, overwrite=True) as tmp:
            tmp.write_text("half")
            1 / 0
    assert target.read_text() == "{}" and os.listdir(tmp_path) == ["result.json"]
    with pytest.raises(RuntimeError, match="did not create"):
        with atomic_output(tmp_path / "other.txt"):
            pass
    assert os.listdir(tmp_path) == ["result.json"]


# -- what overwrite may replace ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a.npy", "a.tif", "a.h5", "vol/"])
def test_overwrite_never_deletes_a_folder_that_is_not_an_output_of_that_format(tmp_path, name):
    path = tmp_path / name
    path.mkdir()
    (path / "notes.txt").write_text("keep")
    with pytest.raises(ValueError, match=r"^path: overwrite=True refused to delete .*; delete it yourself"):
        write_array(str(path), np.ones((2, 3, 3)), overwrite=True)
    assert (path / "notes.txt").read_text() == "keep" and sorted(os.listdir(tmp_path)) == [path.name]


def test_overwrite_of_any_output_replaces_a_file_never_a_folder(tmp_path):
    (tmp_path / "r.json").mkdir()
    (tmp_path / "r.json" / "notes.txt").write_text("keep")
    with pytest.raises(ValueError, match=r"^path: overwrite=True refused to delete .*r\.json': it is a folder"):
        with atomic_output(tmp_path / "r.json", overwrite=True) as tmp:
            tmp.write_text("{}")
    assert (tmp_path / "r.json" / "notes.txt").read_text() == "keep"
    assert sorted(os.listdir(tmp_path)) == ["r.json"]


@pytest.mark.parametrize("name", ["a.npy", "a.tif", "a.h5", "vol/"])
def test_write_array_marks_its_outputs_as_leveret_s(tmp_path, name):
    from leveret.io.marks import replace_refusal

    path = tmp_path / name
    write_array(str(path), np.ones((2, 3, 3), np.float32))
    kind = {"a.npy": "npy", "a.tif": "tiff", "a.h5": "hdf5", "vol/": "tiff-stack"}[name]
    assert replace_refusal(path, kind) is None
    for other in {"npy", "tiff", "hdf5", "tiff-stack", "zarr"} - {kind}:
        assert replace_refusal(path, other) is not None  # an output of another format is not replaced


def test_a_foreign_file_of_the_format_is_not_replaced(tmp_path):
    import h5py

    from leveret.io.marks import replace_refusal

    tifffile.imwrite(tmp_path / "a.tif", np.ones((2, 3, 3), np.float32), photometric="minisblack")
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["data"] = np.ones(3)
    assert "leveret did not write" in replace_refusal(tmp_path / "a.tif", "tiff")
    assert "leveret did not write" in replace_refusal(tmp_path / "a.h5", "hdf5")
    assert replace_refusal(tmp_path / "nothing.h5", "hdf5") is None  # nothing there: nothing to delete
