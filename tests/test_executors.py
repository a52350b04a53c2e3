"""The in-process executor's pipeline: the next slab's rows are read while one
slab is reconstructed and the one before is written; the plan counts what
that holds; errors and interrupts leave no thread behind. (The Dask
executor: test_outofcore_dask.py.)"""
from __future__ import annotations

import contextlib
import sys
import threading
import time
import types

import numpy as np
import pytest

import leveret
from leveret.execution import executors, slab
from leveret import phantom
from leveret.io import SlabWriter, read_array
from leveret.execution.outofcore import host_bytes, reconstruct_to_file

from cases import CupyOutOfMemoryError

WAIT = 20.0   # seconds an event may take on a loaded machine; a missing overlap fails, never hangs


@pytest.fixture(scope="module")
def scan():
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 60, endpoint=False), 48, n_rows=16)
    proj = phantom.shepp_logan_3d(radius=20.0).project(g).astype(np.float32)
    return g, proj, leveret.fbp(proj, g, backend="cpu")


def _pipeline_threads():
    return [t.name for t in threading.enumerate()
            if t.name.startswith(("leveret-read", "leveret-slab")) and t.is_alive()]


def _no_pipeline_threads_left():
    t0 = time.monotonic()
    while _pipeline_threads() and time.monotonic() - t0 < WAIT:
        time.sleep(0.01)
    return _pipeline_threads() == []


def test_reading_reconstructing_and_writing_overlap(tmp_path, scan, monkeypatch):
    """Slab 0 is not finished until slab 1's rows are being read; slab 0 is
    not written until slab 1 is being reconstructed: each stage waits for
    the next one's event, so a sequential executor fails here."""
    g, proj, ref = scan
    reading, building = {}, {}
    real_read, real_build = executors.read_rows, slab.reconstruct_slab

    def read(source, geometry, volume, region):
        reading.setdefault(tuple(region), threading.Event()).set()
        return real_read(source, geometry, volume, region)

    def build(rows_data, geometry, volume, region, **kw):
        building.setdefault(tuple(region), threading.Event()).set()
        if tuple(region) == (0, 4):
            assert reading.setdefault((4, 8), threading.Event()).wait(WAIT), "slab 1 not read during slab 0"
        return real_build(rows_data, geometry, volume, region, **kw)

    real_write = SlabWriter.write

    def write(self, start, data, **kwargs):
        if start == 0:
            assert building.setdefault((4, 8), threading.Event()).wait(WAIT), "slab 1 not built during a write"
        return real_write(self, start, data, **kwargs)

    monkeypatch.setattr(executors, "read_rows", read)
    monkeypatch.setattr(slab, "reconstruct_slab", build)
    monkeypatch.setattr(SlabWriter, "write", write)
    res = reconstruct_to_file(proj, g, tmp_path / "r.npy", backend="cpu", slab_slices=4)
    assert res.slabs_done == 4
    np.testing.assert_allclose(np.load(tmp_path / "r.npy"), ref, rtol=0, atol=1e-6)
    assert set(res.busy) == {"read", "reconstruct", "write"} and all(v > 0 for v in res.busy.values())
    assert "busy read" in res.summary()
    assert _no_pipeline_threads_left()


def test_the_plan_counts_a_second_slab_of_rows_and_output(tmp_path, scan):
    g, proj, _ = scan
    vol = g.default_volume()
    rows = 4 + 2                                  # 4 slices at one row per slice, and the interpolation's
    extra = 60 * rows * 48 * 4 + 4 * vol.ny * vol.nx * 4
    assert host_bytes(g, vol, 4, overlap=True) - host_bytes(g, vol, 4) == extra
    seen = []
    reconstruct_to_file(proj, g, tmp_path / "r.npy", backend="cpu", slab_slices=4, on_plan=seen.append)
    assert seen[0].host_bytes == host_bytes(g, vol, 4, overlap=True)


def test_a_failed_read_stops_the_run_and_leaves_nothing(tmp_path, scan):
    g, proj, _ = scan

    class Failing:
        shape, dtype = proj.shape, proj.dtype

        def __getitem__(self, key):
            if isinstance(key[1], slice) and key[1].start >= 8:    # the rows of the third slab
                raise OSError("disk gone")
            return proj[key]

    with pytest.raises(OSError, match="disk gone"):
        reconstruct_to_file(Failing(), g, tmp_path / "r.npy", backend="cpu", slab_slices=4)
    assert list(tmp_path.iterdir()) == []
    assert _no_pipeline_threads_left()


def test_an_interrupt_while_writing_leaves_nothing_and_no_thread(tmp_path, scan, monkeypatch):
    g, proj, _ = scan

    def interrupted(self, start, data, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(SlabWriter, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        reconstruct_to_file(proj, g, tmp_path / "r.npy", backend="cpu", slab_slices=4)
    assert list(tmp_path.iterdir()) == []
    assert _no_pipeline_threads_left()


def test_out_of_memory_halves_go_before_the_slab_read_ahead(tmp_path, scan, monkeypatch):
    g, proj, ref = scan
    real = slab.reconstruct_slab
    built = []

    def squeezed(rows_data, geometry, volume, region, **kw):
        built.append(tuple(region))
        if region[1] - region[0] > 4:
            raise CupyOutOfMemoryError("out of memory")
        return real(rows_data, geometry, volume, region, **kw)

    monkeypatch.setattr(slab, "reconstruct_slab", squeezed)
    res = reconstruct_to_file(proj, g, tmp_path / "r.npy", backend="cpu", slab_slices=8)
    assert built == [(0, 8), (0, 4), (4, 8), (8, 16), (8, 12), (12, 16)] and res.retries == 2
    np.testing.assert_allclose(np.load(tmp_path / "r.npy"), ref, rtol=0, atol=1e-6)


def test_slabs_run_on_the_callers_gpu(tmp_path, scan, monkeypatch):
    """The slabs are built in another thread: CuPy's current device is per
    thread, so the executor carries the caller's over (a stand-in CuPy)."""
    g, proj, _ = scan
    entered = []

    @contextlib.contextmanager
    def device(i):
        entered.append((i, threading.current_thread().name))
        yield

    cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: 1), Device=device)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    reconstruct_to_file(proj, g, tmp_path / "r.npy", backend="cpu", slab_slices=8)
    assert [i for i, _ in entered] == [1, 1]
    assert all(name.startswith("leveret-slab") for _, name in entered)
    assert read_array(tmp_path / "r.npy").shape == (16, 48, 48)
