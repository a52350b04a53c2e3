"""The frame-buffer pool and the block store of filtered views (CPU logic)."""

import numpy as np
import pytest

import leveret
from leveret.live import LiveReconstructor
from leveret.live.pool import FramePool
from leveret.live.store import ViewStore
from leveret.phantom import shepp_logan_3d


class _Event:
    def __init__(self):
        self.waited = False

    def synchronize(self):
        self.waited = True


def test_pool_recycles_a_buffer_only_after_it_came_back_and_its_upload_finished():
    pool = FramePool((3, 4))
    a = pool.get(np.uint16)
    b = pool.get(np.uint16)
    assert a is not b and a.shape == (3, 4) and a.dtype == np.uint16 and pool.lent == 2
    event = _Event()
    pool.release(a, event)
    pool.release(np.zeros((3, 4), np.uint16))  # not the pool's: ignored
    pool.release(a)  # twice: ignored
    assert pool.lent == 1
    c = pool.get(np.uint16)
    assert c is a and event.waited  # waited for a's upload before handing it out again
    assert pool.get(np.float32).dtype == np.float32 and pool.allocated == 3


def test_a_lent_frame_goes_back_to_its_owner_once_released_with_the_event_of_its_upload():
    pool = FramePool((3, 4))
    given = []
    frame = np.zeros((3, 4), np.uint16)  # memory the pool did not allocate (a receiver's slot)
    pool.lend(frame, given.append)
    assert pool.lent == 1
    event = _Event()
    pool.release(frame, event)
    pool.release(frame)  # twice: ignored
    assert given == [event] and pool.lent == 0
    del frame  # released already: not given back again when it goes
    assert given == [event] and pool.allocated == 0


def test_a_lent_frame_dropped_unreleased_goes_back_when_it_goes():
    """A frame a caller skips must not hold its slot for good (the receiver would stall)."""
    pool = FramePool((3, 4))
    given = []
    frame = np.zeros((3, 4), np.uint16)
    pool.lend(frame, given.append)
    view = frame[1:]
    del frame
    assert given == []  # a view still holds it
    del view
    assert given == [None] and pool.lent == 0


def test_pin_locks_through_register_and_is_a_no_op_without_it():
    assert FramePool((2, 2)).pin(np.zeros(4))() is None  # the CPU: plain memory serves
    locked = []
    pool = FramePool((2, 2), register=lambda a: locked.append(a) or (lambda: locked.remove(a)))
    ring = np.zeros(8, np.uint8)
    unpin = pool.pin(ring)
    assert locked == [ring]
    unpin()
    assert locked == []
    assert FramePool((2, 2), register=lambda a: None).pin(ring) is None  # refused: frames are copied


def test_reconstructor_takes_back_its_frame_buffers_after_add_frames():
    from leveret.live import Frame

    vol = leveret.VolumeGeometry((4, 16, 16))
    rec = LiveReconstructor(vol, leveret.ParallelGeometry([0.0], 16, 4), planned=False, backend="cpu")
    frames = []
    for i in range(3):
        buf = rec.frame_buffer(np.float32)
        buf[...] = 1.0
        frames.append(Frame(buf, i, angle=0.3 * i))
    assert rec.add_frames(frames) == 3
    assert rec._pool.lent == 0
    assert rec.frame_buffer(np.float32) is frames[-1].data  # recycled, not reallocated


def test_store_keeps_views_across_blocks_and_device_limit():
    rng = np.random.default_rng(0)
    views = rng.standard_normal((11, 2, 3)).astype(np.float32)
    store = ViewStore((2, 3), np.float32, np, block_views=4, device_views=6)
    store.append(views[:3])
    store.append(views[3:11])
    assert store.n == 11 and len(store.blocks) == 3 and store.n_device_blocks == 2  # 6 rounded up to 8
    pick = np.array([10, 0, 5, 4, 9])
    np.testing.assert_array_equal(store.gather(pick), views[pick])
    seen = [(b, list(local), list(pos)) for b, _, local, pos in store.runs(pick)]
    assert seen == [(0, [0], [1]), (1, [1, 0], [2, 3]), (2, [2, 1], [0, 4])]


@pytest.mark.parametrize("storage, tol", [("float32", 2e-6), ("float16", 3e-4)])
def test_slices_stay_exact_when_the_store_spans_many_blocks(storage, tol):
    angles = np.linspace(0, np.pi, 30, endpoint=False)
    g = leveret.ParallelGeometry(angles, 24, 6)
    vol = g.default_volume()
    proj = shepp_logan_3d(radius=10).project(g).astype(np.float32)
    ref = leveret.fbp(proj, g, vol, backend="cpu")
    rec = LiveReconstructor(vol, g, backend="cpu", max_views=4, storage=storage)  # blocks of 4 views
    for b in np.array_split(np.random.default_rng(3).permutation(30), 7):
        rec.add(proj[b], angles[b])
    assert len(rec._store.blocks) == 8
    rec.watch_orthogonal((vol.coordinates("x")[7], vol.coordinates("y")[15], vol.coordinates("z")[2]))
    s = rec.slices()
    err = np.abs(s["xz"] - ref[:, 15, :]).max() / np.abs(ref).max()
    assert err < tol
