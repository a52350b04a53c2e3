"""The in-process pipeline (leveret.execution.pipeline): reading, reconstructing and
writing overlap; the buffers it holds are bounded by design and counted by the
plan; a slow or failing stage shows in the split, never corrupts a slab, and
leaves nothing behind; out-of-memory slabs are rebuilt in halves. (The Dask
executor: test_outofcore_dask.py.)"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.execution import pipeline, slab
from leveret.execution.outofcore import host_bytes, plan, reconstruct_to_file
from leveret.io import SlabWriter, atomic, bands

from cases import CupyOutOfMemoryError

WAIT = 20.0  # seconds an event may take on a loaded machine; a missing overlap fails, never hangs


@pytest.fixture(scope="module")
def scan():
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 60, endpoint=False), 48, n_rows=16)
    proj = phantom.shepp_logan_3d(radius=20.0).project(g).astype(np.float32)
    return g, proj, leveret.fbp(proj, g, backend="cpu")


def _pipeline_threads():
    return [
        t.name
        for t in threading.enumerate()
        if t.name.startswith(("leveret-read", "leveret-compute", "leveret-write", "leveret-io")) and t.is_alive()
    ]


def _no_pipeline_threads_left():
    t0 = time.monotonic()
    while _pipeline_threads() and time.monotonic() - t0 < WAIT:
        time.sleep(0.01)
    return _pipeline_threads() == []


def test_reading_reconstructing_and_writing_overlap(tmp_path, scan, monkeypatch):
    """Slab 0 is not finished until slab 1's rows are being read; slab 0 is
    not written until slab 1 is being reconstructed: each stage waits for
    the next one's event, so a sequential run fails here."""
    g, proj, ref = scan
    reading, building = {}, {}
    real_read, real_build = bands.read_band, slab.reconstruct_slab

    def read(source, rows, out, *, pool=None):
        reading.setdefault(tuple(rows), threading.Event()).set()
        return real_read(source, rows, out, pool=pool)

    def build(rows_data, geometry, volume, region, **kw):
        building.setdefault(tuple(region), threading.Event()).set()
        if tuple(region) == (0, 4):
            rows = slab.slab_rows(geometry, volume, (4, 8))
            assert reading.setdefault(rows, threading.Event()).wait(WAIT), "slab 1 not read during slab 0"
        return real_build(rows_data, geometry, volume, region, **kw)

    real_write = SlabWriter.write

    def write(self, start, data, **kwargs):
        if start == 0:
            assert building.setdefault((4, 8), threading.Event()).wait(WAIT), "slab 1 not built during a write"
        return real_write(self, start, data, **kwargs)

    monkeypatch.setattr(bands, "read_band", read)
    monkeypatch.setattr(slab, "reconstruct_slab", build)
    monkeypatch.setattr(SlabWriter, "write", write)
    res = reconstruct_to_file(proj, g, tmp_path / "r.npy", backend="cpu", slab_slices=4)
    assert res.slabs_done == 4
    np.testing.assert_allclose(np.load(tmp_path / "r.npy"), ref, rtol=0, atol=1e-6)
    assert {"read", "preprocess", "reconstruct", "write"} <= set(res.busy) and res.busy["reconstruct"] > 0
    assert list(res.stages) == [s for s in pipeline.STAGES if s in res.stages]  # in pipeline order
    assert res.bound in res.stages and "busy read" in res.summary() and "bound by" in res.summary()
    assert _no_pipeline_threads_left()


def test_the_plan_counts_what_the_pipeline_holds(tmp_path, scan):
    """On the CPU: the rows of two slabs and two output slabs (one being built, one
    being written), as the pipeline's buffers and tokens allow, and no more."""
    g, proj, _ = scan
    vol = g.default_volume()
    rows = 4 + 2  # 4 slices at one row per slice, and the interpolation's
    extra = 60 * rows * 48 * 4 + 4 * vol.ny * vol.nx * 4
    assert host_bytes(g, vol, 4, overlap=True) - host_bytes(g, vol, 4) == extra
    assert pipeline.in_flight(1, "cpu") == (2, 2)
    seen = []
    made = []
    real = pipeline.Buffers._make

    def counted(self):
        made.append(self.nbytes)
        return real(self)

    mp = pytest.MonkeyPatch()
    mp.setattr(pipeline.Buffers, "_make", counted)
    try:
        reconstruct_to_file(proj, g, tmp_path / "r.npy", backend="cpu", slab_slices=2, on_plan=seen.append)
    finally:
        mp.undo()
    assert seen[0].host_bytes == host_bytes(g, vol, 2, overlap=True)
    assert 1 <= len(made) <= 2  # the raw pool: at most two buffers for eight slabs


def test_without_a_cap_the_volume_is_cut_into_slabs_for_the_pipeline():
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 30, endpoint=False), 64, n_rows=256)
    p = plan(g, backend="cpu", host_memory=1 << 34, overlap=True)
    assert p.slab_slices == 8 and p.n_slabs == 32  # TARGET_SLABS, MIN_SLAB
    assert plan(g, backend="cpu", host_memory=1 << 34).slab_slices == 256  # the plan alone: all that fits
    assert plan(g, backend="cpu", host_memory=1 << 34, overlap=True, max_slices=100).slab_slices == 100
    assert pipeline.pipeline_slab(2048, 4096) == 64 and pipeline.pipeline_slab(2048, 30) == 28  # multiple of 4
    assert pipeline.pipeline_slab(5, 100) == 5


def test_the_first_and_last_slabs_are_cut_so_the_writer_starts_early_and_ends_soon():
    slabs = [(k, k + 64) for k in range(0, 2048, 64)]
    cut = pipeline.graded(slabs)
    assert cut[:5] == [(0, 8), (8, 16), (16, 32), (32, 64), (64, 128)]
    assert cut[-5:] == [(1920, 1984), (1984, 2016), (2016, 2032), (2032, 2040), (2040, 2048)]
    assert cut[5:-5] == slabs[2:-2] and len(cut) == 38  # every slice once, in order
    assert pipeline.graded([(0, 128), (128, 256), (300, 428), (428, 440)])[:4] == [
        (0, 16),
        (16, 32),
        (32, 64),
        (64, 128),
    ]
    assert pipeline.graded([(0, 128), (128, 256), (300, 428), (428, 440)])[-1] == (428, 440)  # too small to cut
    small = [(k, k + 36) for k in range(0, 144, 36)]  # no pieces of MIN_SLAB and a rest
    assert pipeline.graded(small) == small and pipeline.graded(slabs[:3]) == slabs[:3]


def test_graded_slabs_give_the_volume_of_whole_ones(tmp_path):
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 12, endpoint=False), 16, n_rows=160)
    proj = np.random.default_rng(0).random((12, 160, 16), np.float32)
    whole = reconstruct_to_file(proj, g, tmp_path / "w.npy", backend="cpu", slab_slices=40)
    assert whole.slabs_done == 4 + 6  # the first and the last slab in four pieces each
    ref = leveret.fbp(proj, g, backend="cpu")
    np.testing.assert_allclose(np.load(whole.path), ref, rtol=1e-5, atol=1e-6)


def test_a_failed_read_stops_the_run_and_leaves_nothing(tmp_path, scan):
    g, proj, _ = scan

    class Failing:
        shape, dtype = proj.shape, proj.dtype

        def __getitem__(self, key):
            if isinstance(key[1], slice) and key[1].start >= 8:  # the rows of the third slab
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


def test_a_failed_reconstruction_still_writes_the_slabs_built_before_it(tmp_path, scan, monkeypatch):
    """Slabs reconstructed and queued for writing when a later one fails are
    written before the error is raised (a failed read or write stops at once):
    with resume, the partial output keeps them and the resumed run does only
    the rest. The writer holds slab 0 until the failure, so slabs 1 and 2 are
    still queued then (room for four output slabs here)."""
    g, proj, ref = scan
    real_build, real_write = slab.reconstruct_slab, SlabWriter.write
    failed = threading.Event()

    def failing(rows_data, geometry, volume, region, **kw):
        if region[0] == 12:
            failed.set()
            raise RuntimeError("kernel failed")
        return real_build(rows_data, geometry, volume, region, **kw)

    def held(self, start, data, **kwargs):
        if start == 0:
            assert failed.wait(WAIT)
        return real_write(self, start, data, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(pipeline, "in_flight", lambda workers, backend="cuda": (2, 4))
        m.setattr(slab, "reconstruct_slab", failing)
        m.setattr(SlabWriter, "write", held)
        with pytest.raises(RuntimeError, match="kernel failed"):
            reconstruct_to_file(proj, g, tmp_path / "r.npy", backend="cpu", slab_slices=4, resume=True)
    res = reconstruct_to_file(proj, g, tmp_path / "r.npy", backend="cpu", slab_slices=4, resume=True)
    assert res.slices_resumed == 12 and res.slabs_done == 1
    np.testing.assert_allclose(np.load(tmp_path / "r.npy"), ref, rtol=0, atol=1e-6)
    assert _no_pipeline_threads_left()


def test_out_of_memory_halves_are_built_from_the_rows_already_read(tmp_path, scan, monkeypatch):
    g, proj, ref = scan
    real = slab.reconstruct_slab
    built = []

    def squeezed(rows_data, geometry, volume, region, **kw):
        built.append(tuple(region))
        if region[1] - region[0] > 4:
            raise CupyOutOfMemoryError("out of memory")
        assert rows_data.shape[1] == kw["rows"][1] - kw["rows"][0]  # the piece's own rows
        return real(rows_data, geometry, volume, region, **kw)

    reads = []
    real_read = bands.read_band
    monkeypatch.setattr(
        bands, "read_band", lambda s, rows, out, pool=None: (reads.append(rows), real_read(s, rows, out, pool=pool))[1]
    )
    monkeypatch.setattr(slab, "reconstruct_slab", squeezed)
    res = reconstruct_to_file(proj, g, tmp_path / "r.npy", backend="cpu", slab_slices=8)
    assert built == [(0, 8), (0, 4), (4, 8), (8, 16), (8, 12), (12, 16)] and res.retries == 2
    assert len(reads) == 2 and res.slab_slices == 4  # each slab's rows read once
    np.testing.assert_allclose(np.load(tmp_path / "r.npy"), ref, rtol=0, atol=1e-6)


@pytest.mark.parametrize("stage", ["read", "write"])
def test_a_stalled_stage_shows_in_the_split_and_corrupts_no_slab(tmp_path, scan, monkeypatch, stage):
    """A reader (or writer) that stalls on every slab: the result is exact, the
    stage's busy time holds the stalls and the run is bound by it; no buffer
    is refilled while a later stage still reads it."""
    g, proj, ref = scan
    stall = 0.15
    if stage == "read":
        real_read = bands.read_band

        def slow_read(source, rows, out, *, pool=None):
            real_read(source, rows, out, pool=pool)
            time.sleep(stall)
            return out

        monkeypatch.setattr(bands, "read_band", slow_read)
    else:
        real_write = atomic.write_at

        def slow_write(fd, buffer, offset):
            snapshot = bytes(buffer)
            time.sleep(stall)  # the slab's bytes must not change meanwhile
            assert bytes(buffer) == snapshot, "a slab's buffer changed while it was written"
            return real_write(fd, buffer, offset)

        monkeypatch.setattr(atomic, "write_at", slow_write)
    res = reconstruct_to_file(proj, g, tmp_path / "r.npy", backend="cpu", slab_slices=2)
    np.testing.assert_allclose(np.load(tmp_path / "r.npy"), ref, rtol=0, atol=1e-6)
    assert res.busy[stage] >= 8 * stall * 0.9
    assert res.bound == stage, res.stages


def test_buffers_wait_for_a_free_one_and_stop_when_halted():
    pool = pipeline.Buffers(2, 64)
    a = pool.take((4, 4), np.float32, lambda: False)
    b = pool.take((2, 8), np.float32, lambda: False)
    assert a.array.shape == (4, 4) and b.array.shape == (2, 8)
    halted = threading.Event()
    got = []
    t = threading.Thread(target=lambda: got.append(pool.take((16,), np.float32, halted.is_set)))
    t.start()
    t.join(0.3)
    assert t.is_alive()  # no free buffer: it waits
    a.release()
    t.join(WAIT)
    assert got and got[0].array.shape == (16,) and pool._made == 2  # the one given back, not a third
    assert pool.take((1,), np.float32, lambda: True) is None
    with pytest.raises(ValueError, match="does not fit"):
        got[0].release() or pool.take((17,), np.float32, lambda: False)


def test_buffers_made_ahead_on_a_thread_never_exceed_their_count(monkeypatch):
    """prepare makes the first slabs' buffers on a thread of its own; a take
    meanwhile makes its own, and the two together never make more than count."""
    made = []
    real = pipeline.Buffers._make

    def slow_make(self):
        made.append(threading.current_thread().name)
        time.sleep(0.05)
        return real(self)

    monkeypatch.setattr(pipeline.Buffers, "_make", slow_make)

    def settled(pool, free):
        deadline = time.monotonic() + WAIT
        while len(pool._free) < free:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.1)  # nothing more comes

    ahead = pipeline.Buffers(3, 64)
    ahead.prepare(5)
    settled(ahead, 3)
    assert made == ["leveret-buffers"] * 3 and ahead._made == 3
    made.clear()
    short = pipeline.Buffers(4, 64)
    short.prepare(2)  # a run of two slabs: two buffers
    settled(short, 2)
    assert len(made) == 2 and short._made == 2
    made.clear()
    racing = pipeline.Buffers(2, 64)
    racing.prepare(2)
    taken = [racing.take((4,), np.float32, lambda: False) for _ in range(2)]
    time.sleep(0.2)
    assert all(t.array.shape == (4,) for t in taken) and len(made) == 2 and racing._made == 2


def test_stage_times_report_rates_shares_and_the_bound():
    times = pipeline.StageTimes({"read": 1, "reconstruct": 1, "write": 2})
    times.add("read", 1.0, 2_000_000_000)
    times.add("reconstruct", 3.0, 1_000_000_000)
    times.add("write", 2.0, 4_000_000_000)
    report = times.report(4.0)
    assert list(report) == ["read", "reconstruct", "write"]
    assert report["read"]["rate"] == pytest.approx(2.0) and report["read"]["busy"] == pytest.approx(0.25)
    assert report["write"]["busy"] == pytest.approx(0.25)  # two lanes
    assert times.line(4.0).endswith("bound: reconstruct") and "write 2.0 GB/s 25%" in times.line(4.0)
