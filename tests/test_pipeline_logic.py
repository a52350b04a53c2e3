"""leveret.cuda.pipeline.stream_chunks on the CPU: its bookkeeping (buffers, chunk
order, the time split it fills into ``stats``) with a stand-in for CuPy whose
copies and kernels run at once. Ordering between real CUDA streams is checked
by the GPU tests (tests/operators/test_parallel_kernels_gpu.py,
tests/algorithms/test_fbp_cuda.py); this catches what needs no GPU."""

from __future__ import annotations

import numpy as np
import pytest

import stand_in_cupy
from leveret.cuda import pipeline


@pytest.fixture
def fake_cupy(monkeypatch):
    stand_in_cupy.install(monkeypatch)


@pytest.mark.parametrize("n_slices,chunk", [(7, 2), (8, 8), (1, 1), (9, 4)])
def test_stream_chunks_moves_every_chunk_once(fake_cupy, rng, n_slices, chunk):
    proj = rng.standard_normal((5, n_slices, 6)).astype(np.float32)  # (angles, rows, cols)
    out = np.full((n_slices, 6, 5), np.nan, np.float32)
    chunks = [(k, min(n_slices, k + chunk)) for k in range(0, n_slices, chunk)]
    seen = []

    def compute(c, d_in, d_out):
        seen.append(c)
        d_out[...] = 2 * d_in.transpose(1, 2, 0)  # stands for filter + BP

    st = {"stale": 1.0}  # the caller's dict: filled, other keys left alone
    pipeline.stream_chunks(
        chunks,
        in_shape=lambda c: (5, c[1] - c[0], 6),
        out_shape=lambda c: (c[1] - c[0], 6, 5),
        load=lambda c, buf: pipeline.parallel_copy(buf, proj[:, c[0] : c[1]]),
        compute=compute,
        store=lambda c, buf: pipeline.parallel_copy(out[c[0] : c[1]], buf),
        stats=st,
    )
    assert seen == chunks
    np.testing.assert_array_equal(out, 2 * proj.transpose(1, 2, 0))
    assert st["chunks"] == len(chunks)
    assert set(pipeline.STATS_KEYS) == {"wall", "setup", "chunks", "load", "store", "h2d", "compute", "d2h"}
    assert set(st) == set(pipeline.STATS_KEYS) | {"stale"} and st["stale"] == 1.0
    assert all(st[k] >= 0 for k in st) and st["wall"] >= st["setup"]


def test_stream_chunks_without_outputs(fake_cupy, rng):
    """FDK's form: results stay on the device, nothing is copied out."""
    proj = rng.standard_normal((4, 6, 3)).astype(np.float32)
    total = np.zeros((4, 3), np.float32)
    st: dict = {}

    def compute(c, d_in, d_out):
        assert d_out is None
        total[...] += d_in.sum(axis=1)

    pipeline.stream_chunks(
        [(0, 2), (2, 4), (4, 6)],
        in_shape=lambda c: (4, c[1] - c[0], 3),
        out_shape=None,
        load=lambda c, buf: pipeline.parallel_copy(buf, proj[:, c[0] : c[1]]),
        compute=compute,
        stats=st,
    )
    # float32 sums in another order than NumPy's: the rounding is relative to the
    # terms' size, not to the sum's, which can cancel to near zero (seen: 2.3e-6
    # relative); held to the bound of 4 float32 additions against float64.
    exact = proj.astype(np.float64).sum(axis=1)
    bound = 4 * np.finfo(np.float32).eps * np.abs(proj.astype(np.float64)).sum(axis=1)
    assert np.all(np.abs(total - exact) <= bound)
    assert st["d2h"] == 0 and st["chunks"] == 3
    assert not hasattr(pipeline, "last_stats")  # no module global for the last call


def test_add_stats_sums_the_splits_of_several_runs():
    total: dict = {}
    pipeline.add_stats(total, {"wall": 1.5, "chunks": 2})
    pipeline.add_stats(total, {"wall": 0.5, "chunks": 3, "d2h": 0.25})
    assert total == {"wall": 2.0, "chunks": 5, "d2h": 0.25}


def test_merge_stats_sums_stage_times_and_keeps_the_call_wall():
    """Several GPUs: the stage times and chunk counts of every pipeline add
    up; ``wall`` is the call's, ``busy`` the pipelines' walls summed."""
    splits = [
        {"wall": 1.0, "h2d": 0.25, "compute": 0.75, "chunks": 2},
        {"wall": 1.5, "h2d": 0.5, "compute": 1.0, "chunks": 3},
        {"wall": 0.5, "h2d": 0.125, "compute": 0.25, "chunks": 1},
    ]
    got = pipeline.merge_stats(splits, wall=1.75)
    assert got == {"wall": 1.75, "busy": 3.0, "h2d": 0.875, "compute": 2.0, "chunks": 6}
    assert pipeline.merge_stats([], wall=0.5) == {"wall": 0.5, "busy": 0.0}


def test_stream_chunks_from_an_iterator(fake_cupy, rng):
    """Several GPUs' pipelines pulling from one queue: chunks come from an
    iterator (taken one ahead) and the buffers are sized by ``largest``."""
    proj = rng.standard_normal((3, 10, 4)).astype(np.float32)
    out = np.full((10, 4, 3), np.nan, np.float32)
    chunks = [(0, 4), (4, 8), (8, 10)]
    taken = []

    def source():
        for c in chunks:
            taken.append(c)
            yield c

    def compute(c, d_in, d_out):
        d_out[...] = d_in.transpose(1, 2, 0)

    st: dict = {}
    pipeline.stream_chunks(
        source(),
        largest=(0, 4),
        in_shape=lambda c: (3, c[1] - c[0], 4),
        out_shape=lambda c: (c[1] - c[0], 4, 3),
        load=lambda c, buf: pipeline.parallel_copy(buf, proj[:, c[0] : c[1]]),
        compute=compute,
        store=lambda c, buf: pipeline.parallel_copy(out[c[0] : c[1]], buf),
        stats=st,
    )
    assert taken == chunks
    np.testing.assert_array_equal(out, proj.transpose(1, 2, 0))
    assert st["chunks"] == 3
    # an empty iterator does nothing
    pipeline.stream_chunks(
        iter([]), largest=(0, 4), in_shape=lambda c: (1,), out_shape=None, load=lambda c, buf: None, compute=None
    )


@pytest.mark.parametrize("max_pitch", [None, 64])
def test_stream_chunks_moves_pinned_chunks_in_place(fake_cupy, monkeypatch, rng, max_pitch):
    """``source``/``target``: a chunk of views and some rows of each (first
    axis strided) goes up from pinned memory and comes back into its place,
    by strided copies, or item by item where the pitch is beyond what a
    strided copy takes; nothing is gathered or stored on the host."""
    if max_pitch is not None:
        monkeypatch.setattr(pipeline, "_MAX_PITCH", max_pitch)
    views = pipeline.pinned_array((7, 9, 5), np.float32)
    views[...] = rng.standard_normal(views.shape)
    out = pipeline.pinned_array((7, 9, 5), np.float32)
    out.fill(np.nan)
    rows = slice(2, 6)
    chunks = [(0, 3), (3, 6), (6, 7)]
    seen = []

    def compute(c, d_in, d_out):
        seen.append(c)
        d_out[...] = 3 * d_in

    st: dict = {}
    pipeline.stream_chunks(
        chunks,
        in_shape=lambda c: (c[1] - c[0], 4, 5),
        out_shape=lambda c: (c[1] - c[0], 4, 5),
        source=lambda c: views[c[0] : c[1], rows],
        compute=compute,
        target=lambda c: out[c[0] : c[1], rows],
        stats=st,
    )
    assert seen == chunks and st["load"] == 0 and st["store"] == 0
    np.testing.assert_array_equal(out[:, rows], 3 * views[:, rows])
    assert np.isnan(out[:, :2]).all() and np.isnan(out[:, 6:]).all()  # the rows around are untouched


def test_stream_chunks_names_the_argument_it_cannot_use(fake_cupy):
    pinned = pipeline.pinned_array((4, 3), np.float32)
    kw = dict(in_shape=lambda c: (2, 3), out_shape=None, compute=lambda c, d_in, d_out: None)
    with pytest.raises(TypeError, match="one of load and source"):
        pipeline.stream_chunks([(0, 2)], **kw)
    with pytest.raises(TypeError, match="one of load and source"):
        pipeline.stream_chunks([(0, 2)], load=lambda c, buf: None, source=lambda c: pinned[:2], **kw)
    with pytest.raises(ValueError, match="^source: a chunk's array must lie in pinned memory"):
        pipeline.stream_chunks([(0, 2)], source=lambda c: np.zeros((2, 3), np.float32), **kw)
    with pytest.raises(ValueError, match=r"^source: a chunk's array is float32 of shape \(3, 3\)"):
        pipeline.stream_chunks([(0, 2)], source=lambda c: pinned[:3], **kw)
    with pytest.raises(ValueError, match="^source: a chunk's array is float32 .*, the chunk float64"):
        pipeline.stream_chunks([(0, 2)], source=lambda c: pinned[:2], in_dtype=np.float64, **kw)
    wide = pipeline.pinned_array((3, 6), np.float32)
    with pytest.raises(ValueError, match="^source: .* each item along its first axis C-contiguous"):
        pipeline.stream_chunks([(0, 2)], source=lambda c: wide.T[:2], **kw)  # columns: no strided copy takes them
    with pytest.raises(TypeError, match="one of store and target"):
        pipeline.stream_chunks([(0, 2)], source=lambda c: pinned[:2], **{**kw, "out_shape": lambda c: (2, 3)})


def test_copy_threads_grow_with_the_pipelines_up_to_the_cores(monkeypatch):
    monkeypatch.setattr(pipeline, "_copy_pool", None)
    monkeypatch.setattr(pipeline, "_copy_pool_size", 0)
    monkeypatch.setattr(pipeline, "_COPY_THREADS", 2)
    monkeypatch.setattr(pipeline.os, "cpu_count", lambda: 5)
    pipeline.copy_threads_for(1)
    assert pipeline._copy_pool_size == 2
    pipeline.copy_threads_for(2)
    assert pipeline._copy_pool_size == 4
    pipeline.copy_threads_for(8)
    assert pipeline._copy_pool_size == 5  # the host's cores
    pipeline.copy_threads_for(1)
    assert pipeline._copy_pool_size == 5  # never shrinks
    dst, src = np.zeros((64, 1 << 16), np.float32), np.ones((64, 1 << 16), np.float32)
    pipeline.parallel_copy(dst, src)
    assert (dst == 1).all()


def test_a_pinned_block_goes_back_to_the_pool_when_no_view_is_left(fake_cupy):
    """empty_pinned's blocks are reused by size, and never while a slice of
    an array handed out still uses the block."""
    a = pipeline.empty_pinned((3, 5), np.float32)
    assert a.shape == (3, 5) and a.dtype == np.float32
    ptr = a.ctypes.data
    part = a[1:]
    del a
    other = pipeline.empty_pinned(15, np.float32)  # the same rounded size, while the slice lives: a new block
    assert other.ctypes.data != ptr
    part[...] = 7.0
    del part
    again = pipeline.empty_pinned((15,), np.float32)
    assert again.ctypes.data == ptr and again.shape == (15,)
    larger = pipeline.empty_pinned(pipeline.PINNED_ROUND, np.uint8)  # a size of its own
    assert larger.nbytes == pipeline.PINNED_ROUND and larger.ctypes.data not in (ptr, other.ctypes.data)


def test_a_pinned_array_is_unlocked_with_its_last_view_and_never_pooled(fake_cupy, monkeypatch):
    import cupy

    unlocked = []
    monkeypatch.setattr(cupy.cuda.runtime, "hostUnregister", unlocked.append)
    a = pipeline.pinned_array((3, 1000), np.float32)
    ptr = a.ctypes.data
    assert a.shape == (3, 1000) and pipeline.is_pinned(a) and pipeline.is_pinned(a[1:, ::2])
    assert not pipeline.is_pinned(np.empty(4)) and not pipeline.is_pinned(np.array(a))
    part = a[2]
    del a
    assert unlocked == []  # a view still uses the memory
    del part
    assert unlocked == [ptr] and pipeline._pinned_free == {}

    def refuse(ptr, n, flags):
        raise cupy.cuda.runtime.CUDARuntimeError("cudaErrorNotSupported")

    monkeypatch.setattr(cupy.cuda.runtime, "hostRegister", refuse)
    assert pipeline.pinned_array(16) is None  # the caller keeps pageable memory


def test_pinned_memory_falls_back_to_cupy_where_registering_fails(fake_cupy, monkeypatch):
    import cupy

    def refuse(ptr, n, flags):
        raise cupy.cuda.runtime.CUDARuntimeError("cudaErrorNotSupported")

    monkeypatch.setattr(cupy.cuda.runtime, "hostRegister", refuse)
    monkeypatch.setattr(pipeline, "_register_failed", False)
    a = pipeline.empty_pinned((4, 2), np.float64)
    assert a.shape == (4, 2) and a.dtype == np.float64 and pipeline._register_failed
    assert not isinstance(a.base, pipeline._PinnedOwner) and pipeline._pinned_free == {}
