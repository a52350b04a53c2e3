"""The input fingerprint a resumed run is checked against."""

from __future__ import annotations

import os

import numpy as np
import pytest

from leveret.io import SlabWriter, input_fingerprint


def test_a_rewritten_file_with_the_same_size_and_time_is_told_apart(tmp_path, rng):
    f = tmp_path / "p.npy"
    data = rng.random((4, 8, 8)).astype(np.float32)
    np.save(f, data)
    before = input_fingerprint(f)
    st = f.stat()
    data[2, 3, 4] += 1  # one value; the whole file is within the sampled blocks
    np.save(f, data)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = input_fingerprint(f)
    assert (after["bytes"], after["listing"]) == (before["bytes"], before["listing"])
    assert after["sample"] != before["sample"]


def test_a_folder_or_glob_counts_its_files(tmp_path):
    for k in range(3):
        (tmp_path / f"p_{k}.tif").write_bytes(bytes([k]) * 100)
    folder, pattern = input_fingerprint(tmp_path), input_fingerprint(str(tmp_path / "p_*.tif"))
    assert folder["files"] == pattern["files"] == 3 and folder["bytes"] == 300
    (tmp_path / "p_3.tif").write_bytes(b"x")
    assert input_fingerprint(tmp_path)["files"] == 4
    assert input_fingerprint(tmp_path)["listing"] != folder["listing"]


def test_an_hdf5_dataset_path_fingerprints_the_file(tmp_path):
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "s.h5", "w") as fh:
        fh["/exchange/data"] = np.ones((2, 3, 4))
    fp = input_fingerprint(f"{tmp_path / 's.h5'}:/exchange/data")
    assert fp["files"] == 1 and fp["bytes"] == (tmp_path / "s.h5").stat().st_size


def test_resume_with_another_input_is_refused_naming_what_changed(tmp_path):
    with SlabWriter(tmp_path / "v.npy", (3, 2, 2), resume=True, fingerprint={"bytes": 10, "sample": "a"}) as w:
        w.write(0, np.ones((1, 2, 2)))
    with pytest.raises(
        ValueError,
        match=r"^resume: the input changed .*\(its size differs\); run without "
        r"--resume to start afresh, or restore the input",
    ):
        SlabWriter(tmp_path / "v.npy", (3, 2, 2), resume=True, fingerprint={"bytes": 11, "sample": "a"})
    assert (tmp_path / ".v.npy.partial").exists()  # kept for the right input
    with SlabWriter(tmp_path / "v.npy", (3, 2, 2), resume=True, fingerprint={"bytes": 10, "sample": "a"}) as w:
        assert w.done.tolist() == [True, False, False]
