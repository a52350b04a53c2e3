"""leveret.cuda.devices without a GPU: parsing ``devices=``, dealing ranges to
workers, the out-of-memory shrink, errors and cancellation (fake workers)."""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np
import pytest

from leveret.cuda import devices


@pytest.fixture
def fake_gpus(monkeypatch):
    """A host with 4 visible GPUs whose workers need no CUDA."""
    monkeypatch.setattr(devices, "visible_device_count", lambda: 4)
    monkeypatch.setattr(devices, "_worker_context", lambda device, budget=None: contextlib.nullcontext())
    monkeypatch.setattr(devices, "_release_memory", lambda device: None)
    return 4


# -- parsing -------------------------------------------------------------------------------------


def test_none_means_the_current_device():
    assert devices.parse(None) is None


def test_all_is_every_visible_gpu(fake_gpus):
    assert devices.parse("all").ids == (0, 1, 2, 3)
    assert devices.parse("ALL") == devices.DeviceSet([0, 1, 2, 3])


def test_a_list_keeps_its_order(fake_gpus):
    assert devices.parse([2, 0]).ids == (2, 0)
    assert devices.parse((1,)).ids == (1,)
    assert devices.parse(np.array([3, 1])).ids == (3, 1)
    assert devices.parse(2).ids == (2,)


def test_a_device_set_passes_through(fake_gpus):
    ds = devices.DeviceSet([0, 0], shared=True)
    assert devices.parse(ds) is ds
    assert repr(ds) == "DeviceSet([0, 0], shared=True)"


def test_id_beyond_the_host_names_devices(monkeypatch):
    monkeypatch.setattr(devices, "visible_device_count", lambda: 2)
    with pytest.raises(ValueError, match=r"^devices: GPU 7 does not exist; this host has 2 visible GPU\(s\)"):
        devices.parse([7])


def test_no_gpu_names_devices(monkeypatch):
    monkeypatch.setattr(devices, "visible_device_count", lambda: 0)
    with pytest.raises(ValueError, match=r"^devices: 'all' needs a CUDA GPU"):
        devices.parse("all")
    with pytest.raises(ValueError, match=r"^devices: \[0\] needs a CUDA GPU"):
        devices.parse([0])


def test_repeated_id_needs_shared(fake_gpus):
    with pytest.raises(ValueError, match=r"^devices: GPU 1 is listed more than once.*shared=True"):
        devices.parse([0, 1, 1])
    assert devices.DeviceSet([1, 1], shared=True).ids == (1, 1)


@pytest.mark.parametrize("bad", ["every", [], [0.5], [-1], [True], "0,1", {"a": 1}, 1.0])
def test_bad_values_name_devices(fake_gpus, bad):
    with pytest.raises(ValueError, match=r"^devices: "):
        devices.parse(bad)


def test_shared_must_be_a_bool(fake_gpus):
    with pytest.raises(ValueError, match=r"^shared: "):
        devices.DeviceSet([0], shared="yes")


def test_blocks_cover_the_range_in_order():
    assert devices.blocks(10, 3) == [(0, 3), (3, 7), (7, 10)]
    assert devices.blocks(2, 5) == [(0, 1), (1, 2)]
    assert devices.blocks(7, 1) == [(0, 7)]


# -- running work --------------------------------------------------------------------------------


def test_every_range_runs_once_and_results_come_sorted(fake_gpus):
    ds = devices.DeviceSet([0, 1, 2])
    seen = []
    lock = threading.Lock()

    def work(worker, a, b):
        with lock:
            seen.append((a, b))
        return worker.index

    chunks = devices.blocks(100, 17)
    out = ds.run(chunks, work)
    assert sorted(seen) == chunks
    assert [(a, b) for a, b, _ in out] == chunks


def test_the_queue_gives_a_fast_worker_more_ranges(fake_gpus):
    ds = devices.DeviceSet([0, 1])

    def work(worker, a, b):
        time.sleep(0.02 if worker.index == 1 else 0.001)
        return worker.index

    out = ds.run(devices.blocks(40, 40), work)
    counts = np.bincount([r for _, _, r in out], minlength=2)
    # worker 1 is 20x slower; in the time it takes a few, worker 0 takes the rest
    assert counts[0] > 2 * counts[1]


def test_fixed_dealing_gives_range_i_to_worker_i_mod_n(fake_gpus):
    ds = devices.DeviceSet([3, 1])
    out = ds.run(devices.blocks(5, 5), lambda w, a, b: (w.index, w.device), fixed=True)
    assert [r for _, _, r in out] == [(0, 3), (1, 1), (0, 3), (1, 1), (0, 3)]


def test_workers_run_at_the_same_time(fake_gpus):
    ds = devices.DeviceSet([0, 1, 2, 3])
    barrier = threading.Barrier(4, timeout=5)
    # each worker waits for the other three: this only finishes if all four run together
    out = ds.run(devices.blocks(4, 4), lambda w, a, b: barrier.wait() is not None, fixed=True)
    assert len(out) == 4


def test_results_match_one_worker(fake_gpus):
    data = np.random.default_rng(0).random(1000)

    def work(worker, a, b):
        return data[a:b].copy()

    one = np.concatenate([r for _, _, r in devices.DeviceSet([0]).run(devices.blocks(1000, 13), work)])
    four = np.concatenate([r for _, _, r in devices.DeviceSet([0, 1, 2, 3]).run(devices.blocks(1000, 13), work)])
    np.testing.assert_array_equal(four, one)


# -- out of memory -------------------------------------------------------------------------------


def test_out_of_memory_halves_the_range_and_keeps_the_smaller_size(fake_gpus):
    ds = devices.DeviceSet([0, 1])
    limit = {0: 5, 1: 1000}  # worker 0's GPU holds at most 5 elements
    calls = []
    lock = threading.Lock()

    def work(worker, a, b):
        with lock:
            calls.append((worker.index, a, b))
        if b - a > limit[worker.index]:
            raise MemoryError("out of memory (fake)")
        return worker.limit

    out = ds.run([(0, 16), (16, 32), (32, 48)], work, fixed=True)
    assert [(a, b) for a, b, _ in out if a >= 32] == [(32, 36), (36, 40), (40, 44), (44, 48)]
    # every element computed exactly once, in ranges that fit
    got = np.zeros(48, int)
    for a, b, _ in out:
        got[a:b] += 1
    assert (got == 1).all()
    # worker 0 tried 16, then 8, then 4 fitted; its next range went straight to 4s
    w0 = [(a, b) for i, a, b in calls if i == 0]
    assert w0[:4] == [(0, 16), (0, 8), (0, 4), (4, 8)]
    assert w0[6:] == [(32, 36), (36, 40), (40, 44), (44, 48)]
    assert [(a, b) for i, a, b in calls if i == 1] == [(16, 32)]


def test_out_of_memory_on_one_element_is_raised(fake_gpus):
    def work(worker, a, b):
        raise MemoryError("out of memory (fake)")

    with pytest.raises(MemoryError, match="fake"):
        devices.DeviceSet([0]).run([(0, 4)], work)


# -- errors and cancellation ---------------------------------------------------------------------


def test_first_error_is_raised_and_stops_the_others(fake_gpus):
    ds = devices.DeviceSet([0, 1, 2])
    started = []
    lock = threading.Lock()

    def work(worker, a, b):
        with lock:
            started.append(a)
        if a == 0:
            raise RuntimeError("kernel failed on range 0")
        time.sleep(0.01)
        return None

    with pytest.raises(RuntimeError, match="kernel failed on range 0"):
        ds.run(devices.blocks(200, 200), work)
    # the two other workers stop at their next range: far fewer than 200 started
    assert len(started) < 50


def test_keyboard_interrupt_stops_every_worker(fake_gpus, monkeypatch):
    ds = devices.DeviceSet([0, 1])
    ran = []

    def work(worker, a, b):
        ran.append(a)
        time.sleep(0.01)

    real_wait = threading.Event.wait
    calls = {"n": 0}

    def wait(self, timeout=None):  # the caller's third wait for its workers is interrupted
        if threading.current_thread() is threading.main_thread():
            calls["n"] += 1
            if calls["n"] == 3:
                raise KeyboardInterrupt
        return real_wait(self, timeout)

    monkeypatch.setattr(threading.Event, "wait", wait)
    with pytest.raises(KeyboardInterrupt):
        ds.run(devices.blocks(1000, 1000), work)
    n = len(ran)
    time.sleep(0.05)
    assert len(ran) == n < 1000  # nothing runs after the interrupt


def test_a_repeated_call_runs_each_worker_in_the_thread_that_ran_it(fake_gpus):
    """Worker threads are kept between calls (CuPy's cuFFT plan caches are per thread)."""

    def names(ds):
        return ds.run_each(lambda worker, stop: threading.current_thread().name)

    ds = devices.DeviceSet([1, 0, 1], shared=True)
    first = names(ds)
    assert len(set(first)) == 3 and all(n.startswith(f"leveret-gpu{d}-") for n, d in zip(first, ds.ids))
    with pytest.raises(RuntimeError, match="once"):
        ds.run_each(lambda worker, stop: (_ for _ in ()).throw(RuntimeError("once")))
    assert names(ds) == first  # a failed call leaves its threads usable


def test_a_call_made_inside_a_worker_gets_threads_of_its_own(fake_gpus):
    inner = devices.DeviceSet([0])

    def outer(worker, stop):
        return inner.run_each(lambda w, s: threading.current_thread().name)[0], threading.current_thread().name

    ((nested, own),) = devices.DeviceSet([0]).run_each(outer)
    assert nested != own


# -- pipelines pulling from one queue -------------------------------------------------------------


def test_pipelines_take_ranges_lazily_and_return_in_worker_order(fake_gpus):
    ds = devices.DeviceSet([2, 0])
    taken = {0: [], 1: []}

    def work(worker, ranges):
        for a, b in ranges:
            taken[worker.index].append((a, b))
            time.sleep(0.002)
        return worker.device

    assert ds.run_pipelines(devices.blocks(30, 10), work) == [2, 0]
    assert sorted(taken[0] + taken[1]) == devices.blocks(30, 10)
    assert taken[0] and taken[1]  # both took some: the queue is shared, not pre-dealt


def test_pipeline_error_stops_the_other_pipelines(fake_gpus):
    ds = devices.DeviceSet([0, 1])
    count = []

    def work(worker, ranges):
        for a, b in ranges:
            count.append(a)
            if worker.index == 0:
                raise RuntimeError("compute failed")
            time.sleep(0.01)

    with pytest.raises(RuntimeError, match="compute failed"):
        ds.run_pipelines(devices.blocks(500, 500), work)
    assert len(count) < 50


def test_out_of_memory_is_recognised_from_cupy_the_driver_and_cufft():
    assert devices.out_of_memory(MemoryError("Out of memory allocating 1,024 bytes"))
    assert devices.out_of_memory(RuntimeError("CUDA_ERROR_OUT_OF_MEMORY: out of memory"))
    assert devices.out_of_memory(RuntimeError("cudaErrorMemoryAllocation: out of memory"))
    assert devices.out_of_memory(RuntimeError("CUFFT_ALLOC_FAILED"))
    assert not devices.out_of_memory(RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS"))
    assert not devices.out_of_memory(ValueError("projections: expected finite values"))


def test_a_driver_out_of_memory_error_also_shrinks(fake_gpus):
    def work(worker, a, b):
        if b - a > 2:
            raise RuntimeError("cuFFT error: CUFFT_ALLOC_FAILED")
        return b - a

    out = devices.DeviceSet([0]).run([(0, 8)], work)
    assert [(a, b) for a, b, _ in out] == [(0, 2), (2, 4), (4, 6), (6, 8)]


def test_out_of_memory_splits_keep_aligned_tiles(fake_gpus):
    """With ``align=4`` a range that does not fit is cut at multiples of 4
    only (the 3D Radon kernel's 4-slice tiles); the end of the whole range
    (37, not a multiple) stays an end."""
    ds = devices.DeviceSet([0])
    seen = []

    def work(worker, a, b):
        seen.append((a, b))
        if b - a > 9:
            raise MemoryError("out of memory (fake)")

    out = ds.run([(0, 24), (24, 37)], work, align=4)
    ranges = [(a, b) for a, b, _ in out]
    assert all(a % 4 == 0 for a, _ in seen) and all(b % 4 == 0 or b == 37 for _, b in seen)
    got = np.zeros(37, int)
    for a, b in ranges:
        got[a:b] += 1
    assert (got == 1).all() and max(b - a for a, b in ranges) <= 9


def test_out_of_memory_on_one_tile_is_raised(fake_gpus):
    def work(worker, a, b):
        raise MemoryError("out of memory (fake)")

    with pytest.raises(MemoryError, match="fake"):
        devices.DeviceSet([0]).run([(0, 4)], work, align=4)


def test_align_must_be_positive(fake_gpus):
    with pytest.raises(ValueError, match=r"^align: expected a positive integer, got 0"):
        devices.DeviceSet([0]).run([(0, 4)], lambda w, a, b: None, align=0)


@pytest.mark.parametrize("n,parts,align", [(37, 8, 4), (8, 8, 4), (3, 2, 4), (100, 3, 1), (64, 4, 2)])
def test_aligned_blocks_cover_the_range_at_aligned_boundaries(n, parts, align):
    got = devices.aligned_blocks(n, parts, align)
    assert got[0][0] == 0 and got[-1][1] == n and len(got) <= parts
    assert all(b == c for (_, b), (c, _) in zip(got[:-1], got[1:]))
    assert all(a % align == 0 and a < b for a, b in got)
    sizes = [b - a for a, b in got[:-1]]
    assert not sizes or max(sizes) - min(sizes) <= align


def test_for_backend_refuses_devices_off_cuda(fake_gpus):
    assert devices.for_backend(None, "cpu") is None
    assert devices.for_backend([0, 1], "cuda") == devices.DeviceSet([0, 1])
    with pytest.raises(ValueError, match=r"^devices: runs on CUDA GPUs, but the backend is 'cpu'"):
        devices.for_backend([0, 1], "cpu")
