"""Fault injection: concurrent writers, full disks, file size limits, signals at
any point of a run, and an input changed before a resume. Nothing may be lost
(a resumed run equals an uninterrupted one bit for bit) and nothing mixed
(two jobs never write into one output)."""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.io import SlabWriter, read_array
from leveret.io import atomic
from leveret.io import slabs as slabs_module
from leveret.io.atomic import OutputBusyError, OutputSpaceError

SRC = Path(leveret.__file__).resolve().parents[1]
FORMATS = {"npy": "v.npy", "bigtiff": "v.tif", "tiff-stack": "v/", "hdf5": "v.h5", "zarr": "v.zarr"}


def _volume(rng, shape=(6, 5, 7)):
    return rng.standard_normal(shape).astype(np.float32)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# -- one writer per output -------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_second_writer_of_the_same_output_is_refused_and_the_first_finishes_intact(tmp_path, fmt, rng):
    vol = _volume(rng)
    out = tmp_path / FORMATS[fmt]
    first = SlabWriter(out, vol.shape, params={"job": 1})
    first.write(0, vol[:3])
    with pytest.raises(OutputBusyError, match=rf"^output: .* is being written by process {os.getpid()}"):
        SlabWriter(out, vol.shape, params={"job": 2})
    with pytest.raises(OutputBusyError):  # resume does not take it over either
        SlabWriter(out, vol.shape, params={"job": 1}, resume=True)
    first.write(3, vol[3:])
    first.finish()
    np.testing.assert_array_equal(read_array(out), vol)
    assert _leftovers(tmp_path) == []  # neither partial folder nor lock file


def test_the_lock_is_free_again_after_an_aborted_writer(tmp_path, rng):
    vol = _volume(rng)
    with pytest.raises(RuntimeError, match="boom"):
        with SlabWriter(tmp_path / "v.npy", vol.shape) as w:
            w.write(0, vol[:2])
            raise RuntimeError("boom")
    with SlabWriter(tmp_path / "v.npy", vol.shape) as w:
        w.write(0, vol)
        w.finish()
    np.testing.assert_array_equal(read_array(tmp_path / "v.npy"), vol)


def test_abort_from_another_thread_waits_for_the_slab_being_written(tmp_path, rng, monkeypatch):
    """The CLI's Ctrl-C clean-up runs in the main thread while the worker writes."""
    vol = _volume(rng)
    w = SlabWriter(tmp_path / "v.npy", vol.shape)
    inside, release = threading.Event(), threading.Event()
    real = SlabWriter._pwrite

    def slow(self, k0, data):
        inside.set()
        release.wait(10)
        real(self, k0, data)

    monkeypatch.setattr(SlabWriter, "_pwrite", slow)
    errors = []

    def worker():
        try:
            w.write(0, vol[:3])
            w.write(3, vol[3:])
        except RuntimeError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=worker)
    t.start()
    assert inside.wait(10)
    aborter = threading.Thread(target=w.abort)
    aborter.start()
    aborter.join(0.2)
    assert aborter.is_alive()  # waits: the slab is still being written
    assert (tmp_path / ".v.npy.partial").exists()
    release.set()
    aborter.join(10)
    t.join(10)
    assert errors and "aborted" in errors[0]  # the second slab never started
    assert _leftovers(tmp_path) == [] and not (tmp_path / "v.npy").exists()


# -- full disks ------------------------------------------------------------------------------------


def _fail_on_second_call(monkeypatch, owner, name, exc):
    real = getattr(owner, name)
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise exc
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, failing)


def _inject_disk_full(monkeypatch, fmt, code=errno.ENOSPC):
    """Make the format's lowest-level data write fail on the second slab."""
    err = OSError(code, os.strerror(code))
    if fmt in ("npy", "bigtiff"):
        _fail_on_second_call(monkeypatch, os, "pwrite", err)
    elif fmt == "tiff-stack":
        import tifffile

        _fail_on_second_call(monkeypatch, tifffile, "imwrite", err)
    elif fmt == "hdf5":  # HDF5 writes each compressed chunk itself: its error, as h5py reports it
        _inject_hdf5_chunk_disk_full(monkeypatch, code)
    else:  # zarr: the chunk files, written by leveret's threads around the library
        _fail_on_second_call(monkeypatch, atomic, "write_at", err)


def _inject_hdf5_chunk_disk_full(monkeypatch, code):
    """Make HDF5's write of the second chunk (``write_direct_chunk``) fail with the
    words h5py gives a failed write: no errno on the exception, the HDF5 text.
    h5py's DatasetID is a compiled type whose methods cannot be replaced, so the
    file, dataset and id the writer sees are stand-ins around the real ones."""
    real, calls = slabs_module.SlabWriter._hdf5_file, []

    class Chunks:  # the dataset's id, whose second chunk fails
        def __init__(self, dsid):
            self.dsid = dsid

        def write_direct_chunk(self, *args, **kwargs):
            calls.append(1)
            if len(calls) == 2:
                raise OSError(f"Can't write chunk (file write failed: errno = {code}, error message = 'x')")
            return self.dsid.write_direct_chunk(*args, **kwargs)

        def __getattr__(self, name):  # the id's other methods, as they are
            return getattr(self.dsid, name)

    class Dataset:
        def __init__(self, ds):
            self.id, self.file = Chunks(ds.id), ds.file

    class File:
        def __init__(self, f):
            self.f = f

        def __getitem__(self, name):
            return Dataset(self.f[name])

    monkeypatch.setattr(slabs_module.SlabWriter, "_hdf5_file", lambda self: File(real(self)))


def _inject_hdf5_disk_full(monkeypatch, code=errno.ENOSPC):
    """Make HDF5's own write of the second slab fail (an lzf output, which HDF5
    writes itself): as h5py reports it, no errno on the exception, the HDF5 text."""
    import h5py

    _fail_on_second_call(
        monkeypatch,
        h5py.Dataset,
        "__setitem__",
        OSError(f"Can't write data (file write failed: errno = {code}, error message = '{os.strerror(code)}')"),
    )


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_full_disk_mid_run_is_a_clear_error_and_removes_the_partial_output(tmp_path, fmt, code, rng, monkeypatch):
    vol = _volume(rng)
    out = tmp_path / FORMATS[fmt]
    _inject_disk_full(monkeypatch, fmt, code)
    with pytest.raises(
        OutputSpaceError,
        match=r"^output: writing .* failed: .*still to write, .* free; "
        r"the partial output was removed",
    ) as info:
        with SlabWriter(out, vol.shape) as w:
            for k in range(vol.shape[0]):
                w.write(k, vol[k])
    assert info.value.errno == code
    assert _leftovers(tmp_path) == [] and not out.exists()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG])
def test_a_full_disk_in_hdf5_s_own_write_is_the_same_clear_error(tmp_path, code, rng, monkeypatch):
    vol = _volume(rng)
    _inject_hdf5_disk_full(monkeypatch, code)
    with pytest.raises(
        OutputSpaceError,
        match=r"^output: writing .* failed: .*still to write, .* free; "
        r"the partial output was removed",
    ) as info:
        with SlabWriter(tmp_path / "v.h5", vol.shape, compression="lzf") as w:
            for k in range(vol.shape[0]):
                w.write(k, vol[k])
    assert info.value.errno == code
    assert _leftovers(tmp_path) == [] and not (tmp_path / "v.h5").exists()


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_full_disk_with_resume_keeps_the_partial_output_and_resuming_completes_it(tmp_path, fmt, rng, monkeypatch):
    vol = _volume(rng)
    out = tmp_path / FORMATS[fmt]
    with monkeypatch.context() as m:
        _inject_disk_full(m, fmt)
        with pytest.raises(OutputSpaceError, match="kept for --resume"):
            with SlabWriter(out, vol.shape, resume=True) as w:
                for k in range(vol.shape[0]):
                    w.write(k, vol[k])
    with SlabWriter(out, vol.shape, resume=True) as w:
        assert w.done.sum() == 1
        for k0, k1 in w.todo(2):
            w.write(k0, vol[k0:k1])
        w.finish()
    np.testing.assert_array_equal(read_array(out), vol)


def _inject_full_manifest(monkeypatch, code=errno.ENOSPC):
    """Make the manifest's second save fail as a full disk does (the first is at the start):
    the data of the first slab are written, the record of them is not."""
    real = json.dump
    calls = []

    def dump(obj, fh, *args, **kwargs):
        if str(getattr(fh, "name", "")).endswith(slabs_module.MANIFEST + ".tmp"):
            calls.append(1)
            if len(calls) == 2:
                raise OSError(code, os.strerror(code))
        return real(obj, fh, *args, **kwargs)

    monkeypatch.setattr(slabs_module.json, "dump", dump)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_full_disk_at_the_manifest_write_is_the_same_clear_error(tmp_path, fmt, rng, monkeypatch):
    vol = _volume(rng)
    out = tmp_path / FORMATS[fmt]
    _inject_full_manifest(monkeypatch)
    with pytest.raises(
        OutputSpaceError,
        match=r"^output: writing .* failed: .*No space left on device; "
        r".* still to write, .* free; the partial output was removed",
    ):
        with SlabWriter(out, vol.shape) as w:
            for k in range(vol.shape[0]):
                w.write(k, vol[k])
            w.finish()  # the record is saved in the background: its failure is raised here at the latest
    assert _leftovers(tmp_path) == [] and not out.exists()


@pytest.mark.parametrize("fmt", ["npy", "bigtiff"])
def test_a_full_disk_at_the_manifest_write_with_resume_records_only_what_is_recorded(tmp_path, fmt, rng, monkeypatch):
    vol = _volume(rng)
    out = tmp_path / FORMATS[fmt]
    with monkeypatch.context() as m:
        _inject_full_manifest(m)
        with pytest.raises(OutputSpaceError, match="kept for --resume"):
            with SlabWriter(out, vol.shape, resume=True) as w:
                w.write(0, vol[:2])
                w.finish()
    assert [p.name for p in (tmp_path / f".{out.name}.partial").iterdir()] != []
    with SlabWriter(out, vol.shape, resume=True) as w:
        assert w.done.sum() == 0  # the slab whose record failed counts as not written
        for k0, k1 in w.todo(4):
            w.write(k0, vol[k0:k1])
        w.finish()
    np.testing.assert_array_equal(read_array(out), vol)


def test_a_full_disk_at_the_manifest_write_is_one_line_and_exit_2_from_the_cli(tmp_path, monkeypatch, capsys):
    from leveret.cli import main

    _scan(tmp_path)
    _inject_full_manifest(monkeypatch)
    code = main(
        [
            "recon",
            str(tmp_path / "p.npy"),
            str(tmp_path / "r.npy"),
            "--angles",
            "0:180:90",
            "--backend",
            "cpu",
            "--slab-slices",
            "4",
            "--no-progress",
            "-q",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("leveret recon: error: output: writing ") and err.count("\n") == 1, err
    assert "No space left on device" in err and "the partial output was removed" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.npy"]


@pytest.mark.parametrize("fmt", ["npy", "bigtiff", "hdf5", "tiff-stack"])
def test_too_little_free_space_is_refused_before_anything_is_written(tmp_path, fmt, rng, monkeypatch):
    monkeypatch.setattr("leveret.io.atomic.free_bytes", lambda folder: 1000)
    monkeypatch.setattr(slabs_module, "free_bytes", lambda folder: 1000)
    with pytest.raises(OutputSpaceError, match=r"^output: .* needs 1.64 KiB but only 1000 B are free") as info:
        SlabWriter(tmp_path / FORMATS[fmt], (6, 5, 7), dtype=np.float64, compression=None)
    assert "free" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def _scan(tmp_path, n_rows=16, n_angles=90, n_cols=48):
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, n_angles, endpoint=False), n_cols, n_rows=n_rows)
    proj = phantom.shepp_logan_3d(radius=20.0).project(g).astype(np.float32)
    np.save(tmp_path / "p.npy", proj)
    return g, proj


def _cli(tmp_path, out, *extra):
    return [
        sys.executable,
        "-m",
        "leveret",
        "recon",
        str(tmp_path / "p.npy"),
        str(out),
        "--angles",
        "0:180:90",
        "--backend",
        "cpu",
        "--slab-slices",
        "1",
        *extra,
    ]


def _env():
    path = os.pathsep.join(p for p in [str(SRC), os.environ.get("PYTHONPATH", "")] if p)  # and what this run sees
    return dict(os.environ, PYTHONPATH=path, NUMBA_NUM_THREADS="1")


@pytest.mark.parametrize("name", ["r.npy", "r.tif", "r.h5"])  # zarr and folders: small files each
def test_a_file_size_limit_is_a_clear_error_not_a_crash(tmp_path, name):
    """``ulimit -f``: the kernel's SIGXFSZ would kill the process; the CLI ignores
    it, so the write fails with EFBIG, reported in one line (exit 2)."""
    _scan(tmp_path, n_rows=16, n_angles=90, n_cols=48)
    limit = 20_000  # bytes: less than the 144 KiB volume in one file

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    run = subprocess.run(
        _cli(tmp_path, tmp_path / name, "--no-progress", "--compression", "none"),
        capture_output=True,
        text=True,
        env=_env(),
        preexec_fn=small_files,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert "error: output: writing" in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.npy"]


# -- concurrent CLI runs, signals, resume ----------------------------------------------------------


def _wait_for_slabs(manifest: Path, proc, n: int, timeout=90.0):
    """Until the run has recorded at least ``n`` slices (an event, not a guess at timing)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            done = json.loads(manifest.read_text())["done"]
            if sum(b - a for a, b in done) >= n:
                return
        except (OSError, ValueError, KeyError):
            pass
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.01)
    raise AssertionError("the run never wrote a slab")


def _start(cmd):
    # A shell's background jobs inherit SIGINT ignored; a terminal's Ctrl-C finds it at its default.
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


HOLDER = """
import sys, numpy as np
from leveret.io import SlabWriter
vol = np.load(sys.argv[2])
with SlabWriter(sys.argv[1], vol.shape, params={"job": "first"}) as w:
    w.write(0, vol[:1])
    print("ready", flush=True)
    sys.stdin.read()             # until the test lets it finish
    w.write(1, vol[1:])
    w.finish()
"""


@pytest.mark.parametrize("name", ["r.npy", "r.zarr", "r.h5"])
def test_a_cli_run_on_an_output_another_process_writes_exits_2_naming_it(tmp_path, name, rng):
    _scan(tmp_path)
    vol = rng.standard_normal((16, 48, 48)).astype(np.float32)
    np.save(tmp_path / "first.npy", vol)
    out = tmp_path / name
    first = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out), str(tmp_path / "first.npy")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert first.stdout.readline().strip() == "ready"
    second = subprocess.run(
        _cli(tmp_path, out, "--no-progress"), capture_output=True, text=True, env=_env(), timeout=120
    )
    assert second.returncode == 2, second.stderr
    assert f"error: output: {str(out)!r} is being written by process {first.pid}" in second.stderr
    first.communicate("", timeout=60)
    assert first.returncode == 0
    np.testing.assert_array_equal(read_array(out), vol)  # the first job's volume, unmixed
    assert _leftovers(tmp_path) == []


#: Slices (one per slab) of the signalled runs: enough slabs that a run is still
#: going when the signal comes, with reading, reconstructing and writing overlapped.
SIGNALLED_ROWS = 64


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted CLI run: the volume every resumed run must equal bit for bit."""
    folder = tmp_path_factory.mktemp("reference")
    _scan(folder, n_rows=SIGNALLED_ROWS)
    run = subprocess.run(
        _cli(folder, folder / "r.h5", "--no-progress"), capture_output=True, text=True, env=_env(), timeout=120
    )
    assert run.returncode == 0, run.stderr
    return read_array(folder / "r.h5")


SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGKILL, -9)]


@pytest.mark.parametrize("sig,code", SIGNALS, ids=[s.name for s, _ in SIGNALS])
def test_a_signal_at_a_random_slab_then_resume_gives_the_uninterrupted_volume(tmp_path, sig, code, reference):
    _scan(tmp_path, n_rows=SIGNALLED_ROWS)
    out = tmp_path / "r.h5"
    cmd = _cli(tmp_path, out, "--resume")  # with the progress bar: the message must start a line
    proc = _start(cmd)
    after = int(np.random.default_rng(int(sig)).integers(1, 8))
    _wait_for_slabs(tmp_path / ".r.h5.partial" / "manifest.json", proc, after)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    if sig != signal.SIGKILL:
        assert "\nleveret recon: " in err and "no output written" in err and "Traceback" not in err, err
    assert not out.exists()
    # SIGKILL leaves the lock file (unlocked: the OS dropped the lock); the resume takes it over.
    assert _leftovers(tmp_path) == ([".r.h5.lock"] if sig == signal.SIGKILL else []) + [".r.h5.partial"]
    again = subprocess.run(cmd + ["--no-progress"], capture_output=True, text=True, env=_env(), timeout=120)
    assert again.returncode == 0, again.stderr
    np.testing.assert_array_equal(read_array(out), reference)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.npy", "r.h5"]


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_without_resume_leave_nothing(tmp_path, sig, code):
    _scan(tmp_path, n_rows=SIGNALLED_ROWS)
    proc = _start(_cli(tmp_path, tmp_path / "r.npy", "--no-progress"))
    _wait_for_slabs(tmp_path / ".r.npy.partial" / "manifest.json", proc, 1)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.npy"]


def test_resume_after_the_input_changed_is_refused_and_keeps_the_partial_output(tmp_path):
    g, proj = _scan(tmp_path)
    out = tmp_path / "r.h5"
    cmd = _cli(tmp_path, out, "--resume", "--no-progress")
    proc = _start(cmd)
    _wait_for_slabs(tmp_path / ".r.h5.partial" / "manifest.json", proc, 2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    # Same shape, size and modification time; other values (a re-exported scan).
    stat = (tmp_path / "p.npy").stat()
    np.save(tmp_path / "p.npy", proj * 2)
    os.utime(tmp_path / "p.npy", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    again = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=120)
    assert again.returncode == 2, again.stderr
    assert "resume: the input changed" in again.stderr and "content differs" in again.stderr
    assert "run without --resume" in again.stderr
    assert (tmp_path / ".r.h5.partial" / "manifest.json").exists() and not out.exists()
    fresh = subprocess.run(
        _cli(tmp_path, out, "--no-progress"), capture_output=True, text=True, env=_env(), timeout=120
    )
    assert fresh.returncode == 0, fresh.stderr
    np.testing.assert_array_equal(read_array(out), leveret.fbp(proj * 2, g, backend="cpu"))


def _unsampled_value(path: Path, shape, done_rows: int) -> tuple[int, int, int]:
    """An (angle, row, column) of the .npy ``path`` in rows 1..done_rows - 1 that neither
    the sampled blocks of the file's fingerprint nor the sampled detector rows read."""
    n_angles, n_rows, n_cols = shape
    with open(path, "rb") as fh:
        np.lib.format.read_magic(fh)
        np.lib.format.read_array_header_1_0(fh)
        header = fh.tell()
    total, block = path.stat().st_size, 1 << 16
    blocks = np.unique(np.linspace(0, total - block, 8).astype(np.int64))
    for a in range(1, n_angles - 1):
        for r in range(1, done_rows):
            offset = header + ((a * n_rows + r) * n_cols + n_cols // 2) * 4
            if a != n_angles // 2 and r != n_rows // 2 and not any(b <= offset < b + block for b in blocks):
                return a, r, n_cols // 2
    raise AssertionError("every value of the finished rows is sampled: make the scan larger")


def test_resume_after_one_value_of_a_finished_slab_s_input_changed_is_refused(tmp_path):
    """One value, in rows that finished slabs used, changed in place with the size and
    modification time kept, where the sampled fingerprint does not look: refused, not mixed."""
    from leveret.execution.outofcore import _fingerprint

    g, proj = _scan(tmp_path, n_rows=SIGNALLED_ROWS)  # 1.1 MB: more than the 8 sampled 64 KiB blocks
    out, source = tmp_path / "r.h5", tmp_path / "p.npy"
    manifest = tmp_path / ".r.h5.partial" / "manifest.json"
    cmd = _cli(tmp_path, out, "--resume", "--no-progress")
    proc = _start(cmd)
    _wait_for_slabs(manifest, proc, 10)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    done = json.loads(manifest.read_text())["done"]
    assert done[0][0] == 0 and done[0][1] >= 10
    a, r, c = _unsampled_value(source, proj.shape, done[0][1])  # slice k used rows k and k + 1
    before, stat = _fingerprint(np.load(source, mmap_mode="r"), str(source)), source.stat()
    data = np.load(source, mmap_mode="r+")
    data[a, r, c] += 1.0
    data.flush()
    del data
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert _fingerprint(np.load(source, mmap_mode="r"), str(source)) == before  # the samples miss it
    again = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=120)
    assert again.returncode == 2, again.stderr
    error = again.stderr.strip().splitlines()[-1]
    assert error.startswith("leveret recon: error: --resume: the input changed since the partial output "), error
    assert f"(detector rows {r - 1}:{r + 1}, from which slices {r - 1}:{r} were made, differ)" in error
    assert "run without --resume to start afresh" in error and "Traceback" not in again.stderr
    assert manifest.exists() and not out.exists()  # kept for the right input; nothing mixed


@pytest.mark.parametrize("exc,code", [(KeyboardInterrupt(), 130), ("SIGTERM", 143)])
def test_an_interrupt_during_start_up_is_a_clean_message(monkeypatch, capsys, exc, code):
    """Before the work starts (parsing, imports): no traceback, the signal's exit code."""
    import leveret.cli.app as cli
    from leveret.execution.signals import Interrupted

    error = Interrupted(signal.SIGTERM) if exc == "SIGTERM" else exc

    def parse(argv=None):
        raise error

    monkeypatch.setattr(cli, "parse", parse)
    assert cli.main(["info"]) == code
    assert capsys.readouterr().err == "\nleveret: interrupted\n"


def test_a_failed_writer_never_removes_the_partial_output_of_the_next_one(tmp_path, rng, monkeypatch):
    vol = _volume(rng)
    out = tmp_path / "v.npy"
    first = SlabWriter(out, vol.shape)
    with monkeypatch.context() as m:
        _inject_disk_full(m, "npy")
        first.write(0, vol[:1])
        with pytest.raises(OutputSpaceError, match="the partial output was removed"):
            first.write(1, vol[1:2])
    assert _leftovers(tmp_path) == []  # removed, and the lock is free
    with SlabWriter(out, vol.shape) as second:
        second.write(0, vol[:3])
        first.abort()  # late clean-up of the failed writer
        assert (tmp_path / ".v.npy.partial").exists()
        second.write(3, vol[3:])
        second.finish()
    np.testing.assert_array_equal(read_array(out), vol)


STARTING = """
import sys, time
sys.argv[0] = "leveret"          # as the console script
import leveret                   # the command's imports: a second or more on a slow disk
print("ready", flush=True)
time.sleep(60)                   # still starting: main() has not run
"""


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_while_the_command_imports_is_one_line(sig, code):
    proc = subprocess.Popen(
        [sys.executable, "-c", STARTING],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code and err == "\nleveret: interrupted\n", err


def test_importing_the_library_leaves_the_signal_handlers_alone():
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import signal, leveret; "
            "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, "
            "signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)",
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert run.stdout.split() == ["True", "True"], run.stderr


# -- Ctrl-C anywhere in a run -----------------------------------------------------------------------

#: Runs the command with a SIGINT sent to itself when its threads enter their N-th
#: function of leveret, from the imports on; that thread then stays at that point for a
#: while, as a thread busy there would, while the main thread handles the interrupt.
#: N = 0: no signal; at exit the number of calls and the first call of each function are
#: written to a JSON report. REPORT.signalled appears when the signal was sent.
AT_CALL = r"""
import atexit, json, os, signal, sys, threading, time
target, pause, report, src = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
del sys.argv[1:5]
sys.argv[0] = "leveret"                  # as the console script
calls, first, lock = [0], {}, threading.Lock()

def hook(frame, event, arg):
    if event != "call" or not frame.f_code.co_filename.startswith(src):
        return
    with lock:
        calls[0] += 1
        n = calls[0]
        first.setdefault(frame.f_code.co_qualname, n)
    if n == target:
        os.kill(os.getpid(), signal.SIGINT)
        open(report + ".signalled", "w").close()
        time.sleep(pause)

def save():
    with open(report, "w") as fh:
        json.dump({"calls": calls[0], "first": first}, fh)

sys.setprofile(hook)
threading.setprofile(hook)
atexit.register(save)
from leveret.cli import run
run()
"""


def _at_call(folder: Path, target: int, pause: float = 0.3, output: str = "r.h5"):
    cmd = [
        sys.executable,
        "-c",
        AT_CALL,
        str(target),
        str(pause),
        str(folder / "report.json"),
        str(SRC / "leveret"),
        "recon",
        str(folder / "p.npy"),
        str(folder / output),
        "--angles",
        "0:180:90",
        "--backend",
        "cpu",
        "--slab-slices",
        "4",
        "--no-progress",
    ]
    return _start(cmd)


def _fuzz_points(report: dict) -> list[int]:
    """Call numbers over the whole run: the imports and the parsing (main thread) from
    the moment leveret's first lines took Ctrl-C over from Python's traceback, the
    command's start in its worker thread, most densely the output writer's start (lock,
    partial output, payload, manifest) up to its first slab, then the slabs and the end."""
    first, total = report["first"], report["calls"]
    bounds = [
        first["quiet_start"] + 1,
        first["_run_in_worker"],
        first["SlabWriter.__init__"],
        first["SlabWriter.__enter__"],
        first["SlabWriter.write"],
        total,
    ]
    counts = [4, 4, 8, 3, 4]
    points = [np.linspace(a, b, n, endpoint=False) for a, b, n in zip(bounds, bounds[1:], counts)]
    return sorted({int(p) for p in np.rint(np.concatenate(points))} | {total})


@pytest.mark.slow
def test_ctrl_c_anywhere_in_a_run_leaves_nothing_half_written_and_says_what(tmp_path):
    """SIGINT while the command is at any of ~24 points of a run, from its first import
    through the writer's start to its end: exit 130, the command's own one-line message
    ("leveret: interrupted" only before the command has parsed its arguments), and no
    lock, partial output or output, unless the output was complete and the message says so."""
    _scan(tmp_path)
    calibration = _at_call(tmp_path, 0)
    _, err = calibration.communicate(timeout=120)
    assert calibration.returncode == 0, err
    report = json.loads((tmp_path / "report.json").read_text())
    complete = read_array(tmp_path / "r.h5")
    (tmp_path / "report.json").unlink()
    (tmp_path / "r.h5").unlink()
    failures = []
    points = _fuzz_points(report)
    for pair in (points[i : i + 2] for i in range(0, len(points), 2)):  # two at a time, in their folders
        runs = []
        for n in pair:
            folder = tmp_path / f"at_{n}"
            folder.mkdir()
            os.link(tmp_path / "p.npy", folder / "p.npy")
            runs.append((n, folder, _at_call(folder, n)))
        for n, folder, proc in runs:
            _, err = proc.communicate(timeout=120)
            if proc.returncode == 0 and not (folder / "report.json.signalled").exists():
                # the pipeline's threads make a few calls fewer in some runs: the point lay beyond
                # this run's end, which must then be the complete output
                if not np.array_equal(read_array(folder / "r.h5"), complete):
                    failures.append(f"call {n} of {report['calls']}: not signalled, an output that differs")
                continue
            left = sorted(p.name for p in folder.iterdir() if p.name not in ("p.npy", "report.json.signalled"))
            last = err.strip().splitlines()[-1] if err.strip() else ""
            expected = ["leveret recon: interrupted; no output written"]
            if n < report["first"]["_run_in_worker"]:
                expected.append("leveret: interrupted")
            if left == ["r.h5"]:
                expected = [f"leveret recon: interrupted; written: {str(folder / 'r.h5')!r}"]
                if not np.array_equal(read_array(folder / "r.h5"), complete):
                    left.append("(r.h5 differs)")
            if proc.returncode != 130 or last not in expected or "Traceback" in err or left not in ([], ["r.h5"]):
                failures.append(f"call {n} of {report['calls']}: exit {proc.returncode}, {last!r}, left {left}")
    assert not failures, "\n".join(failures)


@pytest.mark.slow
@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_during_the_clean_up_does_not_cut_it_short(tmp_path, second):
    """Ctrl-C while a slab is being written: the clean-up waits for that write; another
    Ctrl-C (or a SIGTERM) meanwhile changes nothing: the same message, exit 130, nothing left."""
    _scan(tmp_path)
    calibration = _at_call(tmp_path, 0, output="c.npy")
    assert calibration.communicate(timeout=120)[0] is not None and calibration.returncode == 0
    writing = json.loads((tmp_path / "report.json").read_text())["first"]["SlabWriter._pwrite"]
    (tmp_path / "report.json").unlink()
    (tmp_path / "c.npy").unlink()
    proc = _at_call(tmp_path, writing, pause=3.0, output="c.npy")  # 3 s inside the slab's write
    signalled = tmp_path / "report.json.signalled"
    t0 = time.monotonic()
    while not signalled.exists():
        assert proc.poll() is None and time.monotonic() - t0 < 60, proc.communicate()
        time.sleep(0.01)
    time.sleep(0.5)  # the clean-up is waiting for the write now
    proc.send_signal(second)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "leveret recon: interrupted; no output written", err
    signalled.unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.npy"]


def test_only_the_first_termination_signal_raises_within_a_once_block():
    from leveret.execution.signals import Interrupted, handling

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with handling(once=True):
        with pytest.raises(Interrupted) as info:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs here, in the main thread
        assert info.value.signum == signal.SIGTERM
        os.kill(os.getpid(), signal.SIGINT)  # the clean-up's time: nothing raised
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
    assert {sig: signal.getsignal(sig) for sig in before} == before
    with handling(once=True), pytest.raises(KeyboardInterrupt):  # each block afresh; Ctrl-C as usual
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)


def test_no_output_starts_in_the_interrupted_work_once_the_process_stops(tmp_path, rng):
    """After the clean-up (here, this thread's), the other threads, where the interrupted
    work still runs, start no output: each start is undone at once and refused."""
    from leveret.io.atomic import StoppingError, cleanup_pending, register_cleanup, start_command

    ran, raised = [], []

    def work():
        for start in (
            lambda: register_cleanup(1, lambda: ran.append("undone at once")),
            lambda: SlabWriter(tmp_path / "v.h5", (2, 3, 4)),
        ):
            try:
                start()
            except StoppingError as exc:
                raised.append(exc)

    try:
        cleanup_pending(stop=True)
        thread = threading.Thread(target=work)
        thread.start()
        thread.join(30)
        with SlabWriter(tmp_path / "mine.h5", (2, 3, 4)) as w:  # the stopping thread's own clean-up
            w.abort()
    finally:
        start_command()  # a command after it starts outputs again
    assert ran == ["undone at once"] and len(raised) == 2 and list(tmp_path.iterdir()) == []
    thread = threading.Thread(target=lambda: write_slabs_in(tmp_path / "v.h5"))
    thread.start()
    thread.join(30)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.h5"]


def write_slabs_in(path):
    with SlabWriter(path, (2, 3, 4)) as w:
        w.write(0, np.ones((2, 3, 4)))
        w.finish()


def test_an_abort_during_the_writer_s_start_waits_for_it_and_removes_what_it_made(tmp_path, monkeypatch):
    """The command's clean-up (another thread) meets a writer still creating its lock
    file and partial output: it waits for the start to end, then removes both."""
    from leveret.io.atomic import cleanup_pending

    started, go = threading.Event(), threading.Event()
    real = SlabWriter._create_payload

    def slow(self):
        started.set()
        assert go.wait(30)
        real(self)

    monkeypatch.setattr(SlabWriter, "_create_payload", slow)
    made = []
    thread = threading.Thread(target=lambda: made.append(SlabWriter(tmp_path / "v.h5", (2, 3, 4))))
    thread.start()
    assert started.wait(30)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".v.h5.lock", ".v.h5.partial"]
    cleaning = threading.Thread(target=cleanup_pending)
    cleaning.start()
    time.sleep(0.2)
    assert cleaning.is_alive()  # waiting for the start to end
    go.set()
    cleaning.join(30)
    thread.join(30)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError, match="aborted"):
        made[0].write(0, np.ones((2, 3, 4)))
