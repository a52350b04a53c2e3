"""ZeroMQ sources read by child processes (``processes=True``): the same frames,
faults and ends as threads, every frame copied out of shared memory, and
nothing left behind: no process, no shared-memory file."""

import os
import signal
import tempfile
import time

import numpy as np
import pytest

from cases import in_shared_ring, numbered_frames, quiet_reader, zmq_addresses, zmq_sender

from leveret.live import Frame
from leveret.live.sources import ZmqSource, encode

zmq = pytest.importorskip("zmq")
pytestmark = pytest.mark.skipif(os.name != "posix", reason="child receivers need a POSIX system")


def _rings():
    folder = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    return {name for name in os.listdir(folder) if name.startswith("leveret-zmq-")}


def _children_gone(src):
    return all(r.process.poll() is not None for r in src._socks)


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
@pytest.mark.parametrize("n_streams, threads", [(3, None), (1, 2)])
def test_every_frame_arrives_once_each_stream_in_its_order_and_owns_its_data(transport, n_streams, threads, ipc_dir):
    rings = _rings()
    endpoints = zmq_addresses(transport, n_streams, ipc_dir)
    src = ZmqSource(endpoints, timeout=0.1, stop_at_end=True, threads=threads, processes=True)
    sender = zmq_sender(endpoints, numbered_frames(60))
    got = [f for f in src if f is not None]
    sender.join()
    src.close()
    assert sorted(f.index for f in got) == list(range(60)) and src.bad_messages == 0
    assert all(np.all(f.data == f.index) and f.angle == pytest.approx(0.01 * f.index) for f in got)
    assert all(f.data.base is None for f in got)  # a copy: the slot it came through is reused
    if threads is None:
        for k in range(n_streams):
            mine = [f.index for f in got if f.index % n_streams == k]
            assert mine == sorted(mine)
    assert src.closed and _children_gone(src) and _rings() == rings


def test_frames_go_into_the_given_buffers_and_a_larger_frame_gets_a_larger_ring(ipc_dir):
    endpoints = zmq_addresses("ipc", 1, ipc_dir)
    taken = []

    def buffers(dtype):
        taken.append(np.empty((8, 16), dtype))
        return taken[-1]

    src = ZmqSource(endpoints, timeout=0.1, stop_at_end=True, buffers=buffers, processes=True)
    small, large = numbered_frames(5, (2, 3)), numbered_frames(10, (8, 16))[5:]  # larger frames after smaller ones
    sender = zmq_sender(endpoints, small + large)
    got = [f for f in src if f is not None]
    sender.join()
    src.close()
    assert [f.index for f in got] == list(range(10))
    assert all(f.data.shape == (2, 3) and np.all(f.data == f.index) for f in got[:5])
    assert all(any(f.data is b for b in taken) and np.all(f.data == f.index) for f in got[5:])


class _Upload:
    """A CUDA event's stand-in: done once synchronized."""

    def __init__(self):
        self.done = False

    def synchronize(self):
        self.done = True


@pytest.mark.parametrize("n_streams", [1, 3])
def test_frames_are_lent_from_the_ring_to_a_pool_and_each_slot_returns_after_its_upload(n_streams, ipc_dir):
    from leveret.live.pool import FramePool
    from leveret.live.receivers import SLOTS

    locked = []
    pool = FramePool((3, 4), register=lambda ring: locked.append(ring.nbytes) or (lambda: locked.pop()))
    endpoints = zmq_addresses("ipc", n_streams, ipc_dir)
    src = ZmqSource(endpoints, timeout=0.1, stop_at_end=True, buffers=pool, processes=True)
    n = 6 * SLOTS * n_streams  # many times the slots: every slot is given back, again and again
    sender = zmq_sender(endpoints, numbered_frames(n))
    got, uploads = [], []
    for f in src:
        if f is None:
            continue
        got.append((f.index, int(f.data[0, 0]), in_shared_ring(f.data)))
        uploads.append(_Upload())
        pool.release(f.data, uploads[-1])  # as the reconstructor does once the upload is queued
    sender.join()
    assert sorted(i for i, _, _ in got) == list(range(n)) and all(i == v for i, v, _ in got)
    assert [lent for _, _, lent in got] == [True] * n and pool.allocated == 0  # no frame copied
    assert locked == [SLOTS * 3 * 4 * 2] * n_streams  # each ring locked once, while the source lives
    assert all(u.done for u in uploads[: -SLOTS * n_streams])  # a slot went back only after its upload
    src.close()
    assert locked == [] and pool.lent == 0 and _children_gone(src)


def test_a_caller_holding_its_frames_gets_copies_once_few_slots_are_free_and_never_stalls(ipc_dir):
    from leveret.live.pool import FramePool
    from leveret.live.receivers import KEEP_FREE, SLOTS

    pool = FramePool((3, 4))
    endpoints = zmq_addresses("ipc", 1, ipc_dir)
    src = ZmqSource(endpoints, timeout=0.1, stop_at_end=True, buffers=pool, processes=True)
    sender = zmq_sender(endpoints, numbered_frames(3 * SLOTS))
    held = [f for f in src if f is not None]  # nothing released: the frames keep their slots
    sender.join()
    src.close()
    assert [f.index for f in held] == list(range(3 * SLOTS)) and all(np.all(f.data == f.index) for f in held)
    lent = [in_shared_ring(f.data) for f in held]
    assert lent == [True] * (SLOTS - KEEP_FREE) + [False] * (2 * SLOTS + KEEP_FREE)
    assert all(any(f.data is b for b in pool._lent.values()) for f in held if not in_shared_ring(f.data))


def test_frames_dropped_without_a_release_give_their_slots_back(ipc_dir):
    from leveret.live.pool import FramePool
    from leveret.live.receivers import SLOTS

    pool = FramePool((3, 4))
    endpoints = zmq_addresses("ipc", 1, ipc_dir)
    src = ZmqSource(endpoints, timeout=0.1, stop_at_end=True, buffers=pool, processes=True)
    sender = zmq_sender(endpoints, numbered_frames(4 * SLOTS))
    lent = [in_shared_ring(f.data) for f in src if f is not None]  # each frame dropped once looked at
    sender.join()
    src.close()
    assert lent == [True] * (4 * SLOTS) and pool.allocated == 0 and pool.lent == 0


def test_a_slot_whose_upload_wait_fails_still_goes_back(ipc_dir):
    """A failed event (a GPU gone wrong: the reconstruction reports it) must not end a stream's returns."""
    from leveret.live.pool import FramePool
    from leveret.live.receivers import SLOTS

    class Failed:
        def synchronize(self):
            raise RuntimeError("an illegal memory access was encountered")

    pool = FramePool((3, 4))
    endpoints = zmq_addresses("ipc", 1, ipc_dir)
    src = ZmqSource(endpoints, timeout=0.1, stop_at_end=True, buffers=pool, processes=True)
    sender = zmq_sender(endpoints, numbered_frames(3 * SLOTS))
    lent, quiet = [], 0
    for f in src:
        quiet = quiet + 1 if f is None else 0
        if quiet > 100:  # 10 s without a frame: the slots stopped coming back (a guard, not a timing)
            break
        if f is not None:
            lent.append(in_shared_ring(f.data))
            pool.release(f.data, Failed())
    src.close()
    sender.join(10)
    assert lent == [True] * (3 * SLOTS) and pool.allocated == 0


def test_a_ring_whose_pages_cannot_be_locked_has_its_frames_copied_into_the_pool(ipc_dir):
    from leveret.live.pool import FramePool

    pool = FramePool((3, 4), register=lambda ring: None)  # the driver refuses
    endpoints = zmq_addresses("ipc", 1, ipc_dir)
    src = ZmqSource(endpoints, timeout=0.1, stop_at_end=True, buffers=pool, processes=True)
    sender = zmq_sender(endpoints, numbered_frames(20))
    got = []
    for f in src:
        if f is not None:
            got.append((in_shared_ring(f.data), f.index, int(f.data[0, 0])))
            pool.release(f.data)
    sender.join()
    src.close()
    assert [(ring, i) for ring, i, _ in got] == [(False, i) for i in range(20)] and all(i == v for _, i, v in got)
    assert 1 <= pool.allocated <= 2


def test_bad_messages_are_counted_by_the_parent_and_the_stream_goes_on(ipc_dir):
    (endpoint,) = zmq_addresses("ipc", 1, ipc_dir)
    src = ZmqSource(endpoint, timeout=0.1, stop_at_end=True, bind=True, processes=True)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(endpoint)
    good = encode(Frame(np.full((3, 4), 1, np.uint16), 1, angle=0.0))
    for raw in (b"not json", b'{"index": -1, "shape": [3, 4], "dtype": "uint16"}'):
        sock.send_multipart([raw, b"\0" * 24])
    sock.send_multipart(good[:1])  # a header alone
    sock.send_multipart([*good, b"more"])  # three parts
    sock.send_multipart([good[0], b"\0" * 23])  # a byte short
    sock.send_multipart(good)
    sock.send_multipart([b'{"end": true}'])
    got = [f for f in src if f is not None]
    sock.close(0)
    ctx.term()
    src.close()
    assert [f.index for f in got] == [1] and np.all(got[0].data == 1) and src.bad_messages == 5


def test_an_endpoint_that_cannot_be_bound_is_an_error_naming_the_address(ipc_dir):
    (endpoint,) = zmq_addresses("tcp", 1, ipc_dir)
    first = ZmqSource(endpoint, bind=True, processes=True)
    try:
        with pytest.raises(ValueError, match="^address: cannot bind"):
            ZmqSource(endpoint, bind=True, processes=True)
    finally:
        first.close()
    assert _children_gone(first)


def test_a_child_that_dies_is_an_error_of_the_iteration(ipc_dir):
    src = ZmqSource(zmq_addresses("ipc", 2, ipc_dir), timeout=0.05, processes=True)
    frames = iter(src)
    assert next(frames) is None
    assert len(set(src.receiver_pids)) == 2 and os.getpid() not in src.receiver_pids
    os.kill(src.receiver_pids[1], signal.SIGKILL)
    with pytest.raises(RuntimeError, match="receiving process leveret-zmq-1 ended"):
        for _ in frames:
            pass
    src.close()
    assert _children_gone(src)


@pytest.mark.parametrize("n_streams", [1, 3])
def test_closing_from_another_thread_ends_every_child(n_streams, ipc_dir):
    src = ZmqSource(zmq_addresses("ipc", n_streams, ipc_dir), timeout=0.05, processes=True)
    reader, nones, errors = quiet_reader(src)
    src.close()
    reader.join(10)
    assert not reader.is_alive() and errors == [] and nones == [None] * len(nones)
    assert src.closed and _children_gone(src)


def test_a_source_never_closed_lets_the_interpreter_exit_and_ends_its_children(tmp_path):
    import subprocess
    import sys

    script = f"""
import threading
import numpy as np
from leveret.live import Frame
from leveret.live.sources import ZmqSource, send_frames
address = "ipc://{tmp_path}/s"
source = ZmqSource(address, stop_at_end=True, processes=True)
print(source.receiver_pids[0])
frames = [Frame(np.zeros((2, 3), np.float32), i, angle=0.1 * i) for i in range(3)]
sender = threading.Thread(target=send_frames, args=(address, frames))
sender.start()
print(sum(f is not None for f in source))
sender.join()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    pid, count = done.stdout.split()
    assert done.returncode == 0 and count == "3", done.stderr
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
