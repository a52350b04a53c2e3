"""SlabWriter: every format round-trips data and metadata; interrupted runs
leave no output, resume from the manifest, and refuse another job's partial output."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import leveret
from leveret.io import SlabWriter, open_array, output_format, read_array, read_metadata, write_slabs

HAVE_ZARR = importlib.util.find_spec("zarr") is not None
needs_zarr = pytest.mark.skipif(not HAVE_ZARR, reason="zarr not installed (leveret[io]; zarr 3 needs Python >= 3.11)")
FORMATS = ["vol.npy", "vol.tif", "vol/", "vol.h5", "vol.zarr"]
AVAILABLE = [n for n in FORMATS if HAVE_ZARR or not n.endswith(".zarr")]
CASES = [pytest.param(n, marks=needs_zarr) if n.endswith(".zarr") else n for n in FORMATS]
SRC = Path(leveret.__file__).resolve().parents[1]


def _volume(rng, shape=(9, 7, 11)):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("name", CASES)
def test_round_trip_data_and_metadata(tmp_path, rng, name):
    vol = _volume(rng)
    meta = {"voxel_size": [0.5, 0.25, 0.25], "units": "mm"}
    with SlabWriter(tmp_path / name, vol.shape, params={"job": 1}, metadata=meta) as w:
        assert w.todo(4) == [(0, 4), (4, 8), (8, 9)]
        for k0, k1 in w.todo(4)[::-1]:  # any order
            w.write(k0, vol[k0:k1])
        path = w.finish()
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # nothing else left
    np.testing.assert_array_equal(read_array(path), vol)
    np.testing.assert_array_equal(np.asarray(open_array(path)[:, 2:5, :]), vol[:, 2:5, :])
    # zarr keeps leveret's mark among the array's attributes (HDF5 and TIFF elsewhere)
    marked = {**meta, "software": "leveret"} if name.endswith(".zarr") else meta
    assert read_metadata(path) == ({} if name.endswith(".npy") else marked)


def test_formats_and_options(tmp_path, rng):
    assert [output_format(n) for n in FORMATS] == ["npy", "bigtiff", "tiff-stack", "hdf5", "zarr"]
    with pytest.raises(ValueError, match="output: unknown extension '.png'"):
        output_format("x.png")
    vol = _volume(rng)
    for name, compression in (("g.h5", "lzf"), ("z.zarr", "lz4"), ("t/", "zlib"), ("n.h5", None)):
        if name.endswith(".zarr") and not HAVE_ZARR:
            continue
        write_slabs(tmp_path / name, [(0, vol[:5]), (5, vol[5:])], vol.shape, compression=compression)
        np.testing.assert_array_equal(read_array(tmp_path / name), vol)
    write_slabs(tmp_path / "d.h5:/entry/rec", [(0, vol)], vol.shape)
    np.testing.assert_array_equal(read_array(tmp_path / "d.h5", dataset="/entry/rec"), vol)
    import tifffile

    with tifffile.TiffFile(tmp_path / "t" / "slice_00000.tif") as t:
        assert t.pages[0].compression == 8  # zlib
    with pytest.raises(ValueError, match="compression: expected one of"):
        SlabWriter(tmp_path / "x.npy", vol.shape, compression="gzip")
    with pytest.raises(ValueError, match="shape: expected a 3D volume shape"):
        SlabWriter(tmp_path / "x.npy", (3, 4))
    with pytest.raises(ValueError, match="dataset: only HDF5"):
        SlabWriter(tmp_path / "x.npy", vol.shape, dataset="/a")
    with SlabWriter(tmp_path / "x.npy", vol.shape) as w:
        with pytest.raises(ValueError, match="data: expected slices"):
            w.write(7, vol[:3])
        with pytest.raises(ValueError, match=r"finish: slices \[\(0, 9\)\]"):
            w.finish()
    assert not list(tmp_path.glob(".x.npy*"))  # the failed writer left nothing


def test_bigtiff_is_bigtiff_and_existing_output_is_kept(tmp_path, rng):
    import tifffile

    vol = _volume(rng)
    write_slabs(tmp_path / "v.tif", [(0, vol)], vol.shape)
    with tifffile.TiffFile(tmp_path / "v.tif") as t:
        assert t.is_bigtiff and len(t.pages) == vol.shape[0]
    with pytest.raises(ValueError, match="already exists"):
        SlabWriter(tmp_path / "v.tif", vol.shape)
    write_slabs(tmp_path / "v.tif", [(0, 2 * vol)], vol.shape, overwrite=True)
    np.testing.assert_array_equal(read_array(tmp_path / "v.tif"), 2 * vol)


@pytest.mark.parametrize("name", CASES)
def test_interrupt_then_resume(tmp_path, rng, name):
    vol = _volume(rng)
    params = {"center": 3.5, "angles": np.arange(5.0)}

    class Stop(KeyboardInterrupt):
        pass

    with pytest.raises(Stop):
        with SlabWriter(tmp_path / name, vol.shape, params=params, resume=True) as w:
            for k0, k1 in w.todo(3):
                if k0 == 6:  # Ctrl-C after the data, before the manifest records them
                    w.synced()

                    def interrupted():
                        raise Stop

                    w._save_manifest = interrupted
                    w.write(k0, np.full_like(vol[k0:k1], np.nan))
                    w.synced()  # the flushing thread's failure, raised here
                w.write(k0, vol[k0:k1])
    final = tmp_path / name
    assert not final.exists()  # no partial final output
    partial = tmp_path / f".{final.name}.partial"
    manifest = json.loads((partial / "manifest.json").read_text())
    assert manifest["done"] == [[0, 6]] and manifest["shape"] == list(vol.shape)

    with pytest.raises(ValueError, match="resume: the partial output .* different parameters"):
        SlabWriter(tmp_path / name, vol.shape, params={**params, "center": 4.0}, resume=True)
    with pytest.raises(ValueError, match="resume: .* has shape"):
        SlabWriter(tmp_path / name, (10, 7, 11), params=params, resume=True)

    written = []
    with SlabWriter(tmp_path / name, vol.shape, params=params, resume=True) as w:
        assert w.done.sum() == 6 and w.todo(5) == [(6, 9)]
        for k0, k1 in w.todo(5):
            written.append((k0, k1))
            w.write(k0, vol[k0:k1])
        w.finish()
    assert written == [(6, 9)]
    np.testing.assert_array_equal(read_array(final), vol)
    assert sorted(p.name for p in tmp_path.iterdir()) == [final.name]


@pytest.mark.parametrize("name", CASES)
def test_a_slab_is_recorded_once_flushed_and_writing_does_not_wait_for_the_flush(tmp_path, rng, monkeypatch, name):
    """write() returns while the disk is still busy; the manifest lists a slab
    only after every file it touched was flushed; finish waits for that."""
    import threading

    import leveret.io.slabs as slabs

    vol = _volume(rng)
    disk_free, flushed = threading.Event(), []

    def slow_fsync(path):
        disk_free.wait(timeout=60)  # a guard against a hang, not a timing
        flushed.append(Path(path))

    monkeypatch.setattr(slabs, "_fsync_path", slow_fsync)
    with SlabWriter(tmp_path / name, vol.shape, resume=True) as w:
        w.write(0, vol[:4])
        w.write(4, vol[4:])  # not held up by the first slab's flush
        on_disk = json.loads((w.partial / "manifest.json").read_text())["done"]
        assert not w.done.any() and on_disk == []
        assert flushed == []
        disk_free.set()
        w.synced()
        assert w.done.all()
        assert w.payload in flushed or any(p.is_relative_to(w.payload) for p in flushed)
        assert json.loads((w.partial / "manifest.json").read_text())["done"] == [[0, 9]]
        w.finish()
    np.testing.assert_array_equal(read_array(tmp_path / name), vol)


@pytest.mark.parametrize("name", CASES)
def test_without_sync_nothing_is_flushed_and_every_slab_is_recorded(tmp_path, rng, monkeypatch, name):
    import leveret.io.slabs as slabs

    vol = _volume(rng)
    flushed = []
    monkeypatch.setattr(slabs, "_fsync_path", lambda path: flushed.append(Path(path)))
    monkeypatch.setattr(slabs.os, "fsync", lambda fd: flushed.append(fd))  # the manifest's flush
    with SlabWriter(tmp_path / name, vol.shape, sync=False) as w:
        w.write(0, vol[:4])
        w.write(4, vol[4:])
        w.synced()
        assert w.done.all()
        assert json.loads((w.partial / "manifest.json").read_text())["done"] == [[0, 9]]
        w.finish()
    assert flushed == []  # neither the data, the manifest nor the rename: each would wait for the disk
    np.testing.assert_array_equal(read_array(tmp_path / name), vol)


@pytest.mark.parametrize("sync", [True, False])
@pytest.mark.parametrize("name", [pytest.param("v.zarr", marks=needs_zarr), "slices/"])
def test_a_folder_output_starts_each_files_writeback_once_written_when_it_syncs(tmp_path, rng, monkeypatch, name, sync):
    import leveret.io.slabs as slabs

    vol = _volume(rng)
    started = []
    monkeypatch.setattr(slabs, "start_writeback", lambda fd, *span: started.append(os.fstat(fd).st_size))
    with SlabWriter(tmp_path / name, vol.shape, sync=sync) as w:
        w.write(0, vol)
        sizes = sorted(p.stat().st_size for p in w.payload.rglob("*") if p.is_file() and p.name != "zarr.json")
        w.finish()
    assert sorted(started) == (sizes if sync else [])  # every file of the slab, each once it holds all its bytes


@pytest.mark.parametrize("sync", [True, False])
def test_an_uncompressed_file_starts_each_pieces_writeback_once_written_when_it_syncs(tmp_path, rng, monkeypatch, sync):
    import leveret.io.slabs as slabs

    vol = _volume(rng)
    started = []
    monkeypatch.setattr(slabs, "start_writeback", lambda fd, offset, nbytes: started.append((offset, nbytes)))
    with SlabWriter(tmp_path / "v.npy", vol.shape, sync=sync) as w:
        w.write(4, vol[4:])
        w.write(0, vol[:4])
        start = w._offset
        w.finish()
    ends = [start]
    for offset, nbytes in sorted(started):  # the pieces tile the pixel data, each started once
        assert offset == ends[-1]
        ends.append(offset + nbytes)
    assert ends[-1] == (start + vol.nbytes if sync else start)
    np.testing.assert_array_equal(read_array(tmp_path / "v.npy"), vol)


@pytest.mark.parametrize("sync", [True, False])
def test_a_compressed_hdf5_starts_its_writeback_from_one_thread_each_chunk_once(tmp_path, rng, monkeypatch, sync):
    import h5py

    from leveret.io import atomic

    vol = _volume(rng)
    started = []

    def start(fd, offset, nbytes):
        started.append((threading.current_thread().name, offset, nbytes))

    monkeypatch.setattr(atomic, "start_writeback", start)
    monkeypatch.setattr(atomic, "_SYNC_FILE_RANGE", atomic._SYNC_FILE_RANGE or (lambda *a: 0))
    with SlabWriter(tmp_path / "v.h5", vol.shape, sync=sync, compression="lz4", chunks=(1, 3, vol.shape[2])) as w:
        w.write(0, vol[:4])
        w.write(4, vol[4:])
        w.finish()
    with h5py.File(tmp_path / "v.h5") as f:
        ds = f[w.dataset]
        stored = [ds.id.get_chunk_info(i) for i in range(ds.id.get_num_chunks())]
    assert len(stored) > vol.shape[0]  # several chunks a slice
    if not sync:
        assert started == []
    else:  # from the follower alone (never the pool), the spans apart, each chunk in one of them
        assert started and {name for name, *_ in started} == {"leveret-writeback"}
        spans = sorted((offset, offset + nbytes) for _, offset, nbytes in started)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
        for c in stored:
            assert sum(a <= c.byte_offset and c.byte_offset + c.size <= b for a, b in spans) == 1
    np.testing.assert_array_equal(read_array(tmp_path / "v.h5"), vol)


def test_a_writeback_follower_starts_at_once_and_gathers_what_comes_while_held(tmp_path, monkeypatch):
    from leveret.io import atomic

    started, entered, gate = [], threading.Event(), threading.Event()

    def start(fd, offset, nbytes):
        started.append((offset, nbytes))
        entered.set()
        gate.wait(5)  # held as the kernel holds it while the disk's queue is full

    monkeypatch.setattr(atomic, "start_writeback", start)
    monkeypatch.setattr(atomic, "_SYNC_FILE_RANGE", atomic._SYNC_FILE_RANGE or (lambda *a: 0))
    with open(tmp_path / "f", "wb") as f:
        follower = atomic.WritebackFollower(f.fileno())
        follower.wrote(0, 10)
        assert entered.wait(5)  # ten bytes: started at once, not kept back for a larger run
        for offset in (30, 10, 20):  # noted while that start is held, out of order: one span next
            follower.wrote(offset, 10)
        gate.set()
        follower.close()
    assert started == [(0, 10), (10, 30)]
    assert not follower._thread.is_alive()


def test_a_writeback_follower_starts_whatever_is_noted_before_it_closes(tmp_path, monkeypatch):
    from leveret.io import atomic

    started = []
    monkeypatch.setattr(atomic, "start_writeback", lambda fd, offset, nbytes: started.append((offset, nbytes)))
    monkeypatch.setattr(atomic, "_SYNC_FILE_RANGE", atomic._SYNC_FILE_RANGE or (lambda *a: 0))
    with open(tmp_path / "f", "wb") as f:
        idle = atomic.WritebackFollower(f.fileno())
        idle.close()  # nothing noted: nothing to start
        follower = atomic.WritebackFollower(f.fileno())
        follower.wrote(8, 8)
        follower.close()
    assert started == [(8, 8)]
    assert not idle._thread.is_alive() and not follower._thread.is_alive()


def test_start_writeback_is_the_kernels_on_linux(tmp_path):
    from leveret.io import atomic

    if sys.platform.startswith("linux"):
        assert atomic._SYNC_FILE_RANGE is not None  # else every folder output's flush waits in turn, silently
    with open(tmp_path / "f", "wb") as f:
        f.write(b"x" * 100_000)
        f.flush()
        atomic.start_writeback(f.fileno())
    assert (tmp_path / "f").read_bytes() == b"x" * 100_000


def test_a_flush_that_fails_for_space_is_one_error_at_the_next_write(tmp_path, rng, monkeypatch):
    import errno

    import leveret.io.slabs as slabs
    from leveret.io import OutputSpaceError

    vol = _volume(rng)

    def full(path):
        raise OSError(errno.ENOSPC, "No space left on device")

    with SlabWriter(tmp_path / "v.npy", vol.shape, resume=True) as w:
        w.write(0, vol[:3])
        w.synced()
        monkeypatch.setattr(slabs, "_fsync_path", full)
        w.write(3, vol[3:6])
        with pytest.raises(OutputSpaceError, match="no space left|No space left"):
            w.finish()
    monkeypatch.undo()
    manifest = json.loads((tmp_path / ".v.npy.partial" / "manifest.json").read_text())
    assert manifest["done"] == [[0, 3]]  # the slab whose flush failed is not recorded


def test_without_resume_an_interrupted_run_leaves_nothing_and_old_partials_are_dropped(tmp_path, rng):
    vol = _volume(rng)
    with pytest.raises(KeyboardInterrupt):
        with SlabWriter(tmp_path / "v.h5", vol.shape) as w:
            w.write(0, vol[:3])
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(KeyboardInterrupt):
        with SlabWriter(tmp_path / "v.h5", vol.shape, resume=True) as w:
            w.write(0, vol[:3])
            raise KeyboardInterrupt
    with SlabWriter(tmp_path / "v.h5", vol.shape) as w:  # no resume: starts afresh
        assert w.done.sum() == 0
        w.write(0, vol)
        w.finish()
    assert [p.name for p in tmp_path.iterdir()] == ["v.h5"]


def test_damaged_partial_output_restarts(tmp_path, rng):
    vol = _volume(rng)
    with pytest.raises(KeyboardInterrupt):
        with SlabWriter(tmp_path / "v.h5", vol.shape, resume=True) as w:
            w.write(0, vol[:3])
            raise KeyboardInterrupt
    (tmp_path / ".v.h5.partial" / "data.h5").write_bytes(b"\x89HDF garbage")
    with SlabWriter(tmp_path / "v.h5", vol.shape, resume=True) as w:
        assert w.done.sum() == 0


@needs_zarr
def test_sigint_to_a_writing_process(tmp_path):
    """A real Ctrl-C (SIGINT) mid-run: no final file, nothing written after the
    signal, and the partial output resumes."""
    import signal

    script = textwrap.dedent(f"""
        import sys, numpy as np
        from leveret.io import SlabWriter
        vol = np.arange(20 * 4 * 5, dtype=np.float32).reshape(20, 4, 5)
        with SlabWriter({str(tmp_path / "v.zarr")!r}, vol.shape, params={{'a': 1}}, resume=True) as w:
            for k0, k1 in w.todo(1):
                w.write(k0, vol[k0:k1])
                if k0 == 3 and len(sys.argv) == 1:
                    print('ready', flush=True)
                    sys.stdin.readline()      # blocks here until the signal arrives
            w.finish()
    """)
    # the packages this interpreter finds on PYTHONPATH (zarr, where it is not installed) found there too
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
        "PATH": "/usr/bin:/bin",
    }
    p = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGINT)
    p.wait(timeout=60)  # a guard against a hang, not a timing
    p.stdin.close()
    assert p.returncode != 0
    assert not (tmp_path / "v.zarr").exists()
    done = json.loads((tmp_path / ".v.zarr.partial" / "manifest.json").read_text())["done"]
    assert done == [[0, 4]]  # slices 0..3 were written before the signal, none after
    subprocess.run([sys.executable, "-c", script, "resume"], check=True, env=env, capture_output=True)
    np.testing.assert_array_equal(read_array(tmp_path / "v.zarr"), np.arange(400, dtype=np.float32).reshape(20, 4, 5))


def test_hypothesis_slab_orders_and_sizes_round_trip():
    """Any volume shape, dtype, slab size and slab order: what is read back is what was written."""
    hypothesis = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")
    import tempfile

    @hypothesis.settings(max_examples=25, deadline=None, database=None)
    @hypothesis.given(
        shape=st.tuples(st.integers(1, 6), st.integers(1, 5), st.integers(1, 5)),
        dtype=st.sampled_from(["float32", "uint16", "int8", "float64"]),
        slab=st.integers(1, 7),
        name=st.sampled_from(AVAILABLE),
        seed=st.integers(0, 2**32 - 1),
        reverse=st.booleans(),
    )
    def check(shape, dtype, slab, name, seed, reverse):
        vol = (np.random.default_rng(seed).standard_normal(shape) * 50).astype(dtype)
        with tempfile.TemporaryDirectory() as d:
            with SlabWriter(Path(d) / name, shape, dtype) as w:
                todo = w.todo(slab)
                for k0, k1 in todo[::-1] if reverse else todo:
                    w.write(k0, vol[k0:k1])
                path = w.finish()
            back = read_array(path)
            assert back.dtype == np.dtype(dtype) and back.shape == shape
            np.testing.assert_array_equal(back, vol)
            lazy = open_array(path)
            np.testing.assert_array_equal(np.asarray(lazy[:, : shape[1] // 2 + 1]), vol[:, : shape[1] // 2 + 1])

    check()


@pytest.mark.parametrize("junk", [b"\x00", b"\x01\x02", b"II*\x00"])
def test_a_tiff_cut_inside_its_header_is_a_clear_error(tmp_path, junk):
    """Cases the property test below found: tifffile raised struct.error, or
    read an empty array from a header pointing nowhere."""
    vol = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    path = write_slabs(tmp_path / "v.tif", [(0, vol)], vol.shape, compression=None)
    data = path.read_bytes()
    path.write_bytes(data[: int(0.0078125 * len(data))] + junk)
    with pytest.raises(ValueError, match="path: cannot read .* as a TIFF file"):
        read_array(path)


def test_hypothesis_damaged_files_give_clear_errors():
    """Truncated or overwritten bytes in TIFF, .npy and zarr chunks: a ValueError naming path, never a crash."""
    hypothesis = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")
    import tempfile

    vol = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)

    def intact_voxels(name, path, data, kept):
        """Voxels whose stored bytes lie in another file or before the first ``kept`` bytes."""
        if name == "v.npy":
            start = len(data) - vol.nbytes
            return (start + 4 * np.arange(vol.size) + 4 <= kept).reshape(vol.shape)
        if name == "v.tif":
            import tifffile

            with tifffile.TiffFile(path) as t:
                starts = np.array([page.dataoffsets[0] for page in t.pages])
            return starts[:, None, None] + 4 * np.arange(vol[0].size).reshape(vol[0].shape) + 4 <= kept
        first = 1  # the stack's first TIFF holds slice 0
        if name == "v.zarr":  # the first (compressed) zarr chunk holds its slices
            import zarr

            first = zarr.open_array(path, mode="r").chunks[0]
        intact = np.ones(vol.shape, bool)
        intact[:first] = False
        return intact

    @hypothesis.settings(max_examples=30, deadline=None, database=None)
    @hypothesis.given(
        name=st.sampled_from(["v.tif", "v.npy", "v/"] + (["v.zarr"] if HAVE_ZARR else [])),
        cut=st.floats(0.0, 0.95),
        junk=st.binary(min_size=1, max_size=64),
    )
    def check(name, cut, junk):
        with tempfile.TemporaryDirectory() as d:
            path = write_slabs(Path(d) / name, [(0, vol)], vol.shape, compression=None if name != "v.zarr" else "zstd")
            files = (
                sorted(f for f in path.rglob("*") if f.is_file() and f.name != "zarr.json") if path.is_dir() else [path]
            )
            target = files[0]
            data = target.read_bytes()
            kept = int(cut * len(data))
            intact = intact_voxels(name, path, data, kept)
            target.write_bytes(data[:kept] + junk)
            try:
                back = read_array(path)
            except ValueError as exc:
                assert "path:" in str(exc)
            else:
                # Junk that still parses: the volume's shape and dtype, and every voxel
                # whose bytes the damage did not reach (another file, or before the cut)
                # keeps its value. (Without checksums a damaged chunk cannot be detected.)
                assert back.shape == vol.shape and back.dtype == vol.dtype
                np.testing.assert_array_equal(back[intact], vol[intact])

    check()


@pytest.mark.parametrize("name", CASES)
def test_slab_writer_marks_its_outputs_and_refuses_to_replace_a_folder_of_other_files(tmp_path, rng, name):
    from leveret.io.marks import replace_refusal
    from leveret.io.slabs import output_format

    vol = _volume(rng)
    out = tmp_path / name
    write_slabs(out, [(0, vol)], vol.shape)
    kind = {"bigtiff": "tiff"}.get(output_format(out), output_format(out))
    assert replace_refusal(out, kind) is None
    write_slabs(out, [(0, 2 * vol)], vol.shape, overwrite=True)  # its own output: replaced
    np.testing.assert_array_equal(read_array(out), 2 * vol)
    other = tmp_path / ("x" + name)
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    with pytest.raises(ValueError, match="overwrite=True refused to delete"):
        SlabWriter(other, vol.shape, overwrite=True)
    assert (other / "notes.txt").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, other.name])


def test_what_each_slab_was_made_from_is_kept_for_a_resumed_run(tmp_path, rng):
    vol = _volume(rng)
    out = tmp_path / "v.h5"
    with SlabWriter(out, vol.shape, resume=True) as w:
        w.write(0, vol[:3], source={"rows": [0, 4], "crc32": 7})
        w.write(3, vol[3:5])  # made from nothing recorded
        w.synced()
        assert w.sources() == [(0, 3, {"rows": [0, 4], "crc32": 7})]
    with SlabWriter(out, vol.shape, resume=True) as w:  # the interrupted run's, taken over
        assert w.sources() == [(0, 3, {"rows": [0, 4], "crc32": 7})]
        w.write(5, vol[5:], source={"rows": [4, 9], "crc32": 8})
        w.synced()
        assert [s[:2] for s in w.sources()] == [(0, 3), (5, 9)]
        w.finish()
    with SlabWriter(tmp_path / "w.h5", vol.shape, resume=True) as w:  # a fresh output: none
        assert w.sources() == []


def test_rows_checksum_sees_one_value_and_the_layout(rng):
    from leveret.io.slabs import rows_checksum

    rows = rng.standard_normal((5, 3, 4)).astype(np.float32)
    crc = rows_checksum(rows)
    assert rows_checksum(rows.copy()) == crc
    assert rows_checksum(np.asfortranarray(rows)) == crc  # the values, not their layout
    changed = rows.copy()
    changed[2, 1, 3] = np.nextafter(changed[2, 1, 3], np.float32(np.inf))  # one bit of one value
    assert rows_checksum(changed) != crc
    assert rows_checksum(rows.reshape(5, 4, 3)) != crc  # the same bytes, another shape
    assert rows_checksum(rows.astype(np.float64)) != crc


def test_parameters_hash_is_sha256_of_the_canonical_json_with_each_arrays_bytes_hashed():
    """The formula a partial output's manifest was written with: a resumed run
    finds its job only while it stays the same (arrays by their C-order bytes,
    whatever their layout, byte order or dtype)."""
    import hashlib
    import json

    from leveret.io.slabs import parameters_hash

    field = np.arange(12, dtype=np.float32).reshape(3, 4)
    params = {
        "flats": field,
        "view": field[:, ::2],  # not contiguous
        "angles": np.arange(5, dtype=">f8"),
        "nested": [np.ones(3, bool), np.zeros(2, np.complex64), np.array(2.5), {"n": np.int64(7)}],
        "path": Path("a/b"),
    }

    def expected_default(obj):
        if isinstance(obj, np.ndarray):
            digest = hashlib.sha256(np.ascontiguousarray(obj).tobytes()).hexdigest()
            return {"array": digest, "shape": list(obj.shape), "dtype": str(obj.dtype)}
        if isinstance(obj, np.generic):
            return obj.item()
        return str(obj)

    text = json.dumps(params, sort_keys=True, default=expected_default)
    assert parameters_hash(params) == hashlib.sha256(text.encode()).hexdigest()
    changed = {**params, "view": field[:, 1::2]}
    assert parameters_hash(changed) != parameters_hash(params)
    assert parameters_hash(None) == parameters_hash({}) == hashlib.sha256(b"{}").hexdigest()
