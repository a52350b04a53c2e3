"""ZeroMQ sources of several parallel streams: each frame once, every stream's
faults its own, a payload copied once, bounded memory, the scan's end."""

import json
import threading
import time
import tracemalloc

import numpy as np
import pytest
from cases import numbered_frames, parallel_phantom_scan, quiet_reader, take_frames, zmq_addresses, zmq_sender

import leveret
from leveret.live import Frame, LiveReconstructor
from leveret.live.pool import FramePool
from leveret.live.sources import ZmqSource, encode, send_frames, zmq_endpoints

zmq = pytest.importorskip("zmq")


def _tcp(n):
    return zmq_addresses("tcp", n, None)


def test_endpoints_are_one_several_separated_by_commas_or_a_list():
    assert zmq_endpoints("tcp://a:1") == ["tcp://a:1"]
    assert zmq_endpoints("ipc:///tmp/a, ipc:///tmp/b") == ["ipc:///tmp/a", "ipc:///tmp/b"]
    assert zmq_endpoints(("tcp://a:1", "tcp://a:2")) == ["tcp://a:1", "tcp://a:2"]
    for bad in ("", "tcp://a:1,", "a:1", "tcp://a:1,tcp://a:1", "://x"):
        with pytest.raises(ValueError, match="^address"):
            zmq_endpoints(bad)
    with pytest.raises(TypeError, match="^address"):
        zmq_endpoints(5555)


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
@pytest.mark.parametrize("n_streams, threads", [(3, None), (3, 2), (2, 1), (1, 3)])
def test_every_frame_of_several_streams_arrives_once_each_stream_in_its_order(transport, n_streams, threads, ipc_dir):
    endpoints = zmq_addresses(transport, n_streams, ipc_dir)
    src = ZmqSource(",".join(endpoints), timeout=0.1, stop_at_end=True, threads=threads)
    frames = numbered_frames(60)
    sender = zmq_sender(endpoints, frames)
    got = [f for f in src if f is not None]  # ends at the scan's end
    sender.join()
    src.close()
    assert sorted(f.index for f in got) == list(range(60))
    assert all(np.all(f.data == f.index) and f.angle == pytest.approx(0.01 * f.index) for f in got)
    if threads is None or threads <= n_streams:  # one socket per endpoint: each stream in its order
        for k in range(n_streams):
            mine = [f.index for f in got if f.index % n_streams == k]
            assert mine == sorted(mine)
    assert src.closed and src.bad_messages == 0 and src.receiver_pids == []


def test_more_threads_than_endpoints_need_pull_sockets_that_connect():
    endpoint = _tcp(1)[0]
    with pytest.raises(ValueError, match="^threads"):
        ZmqSource(endpoint, pattern="sub", threads=2)
    with pytest.raises(ValueError, match="^threads"):
        ZmqSource(endpoint, bind=True, threads=2)
    with pytest.raises(ValueError, match="^threads"):
        ZmqSource(endpoint, threads=0)


def test_a_stream_of_bad_messages_holds_up_none_of_the_others(ipc_dir):
    bad_end, good_end = zmq_addresses("ipc", 2, ipc_dir)
    src = ZmqSource([bad_end, good_end], timeout=0.1, stop_at_end=True)
    ctx = zmq.Context()
    bad = ctx.socket(zmq.PUSH)
    bad.bind(bad_end)
    sender = zmq_sender(good_end, numbered_frames(30))
    time.sleep(0.3)
    for raw in (b"not json", b'{"index": -1, "shape": [3, 4], "dtype": "uint16"}', b"[" * 10_000):
        bad.send_multipart([raw, b"\0" * 24])
    bad.send_multipart(encode(Frame(np.zeros((5, 5), np.uint16), 0, angle=0.0))[:1])  # a header alone
    bad.send_multipart([b'{"end": true}'])
    got = [f for f in src if f is not None]
    sender.join()
    bad.close(0)
    ctx.term()
    src.close()
    assert sorted(f.index for f in got) == list(range(30)) and src.bad_messages == 4


@pytest.mark.parametrize("n_streams", [1, 2])
def test_a_payload_is_received_without_a_copy_and_copied_once_into_its_buffer(n_streams, ipc_dir):
    """No bytes object (nor any other Python allocation) of a payload's size:
    the message is a view of ZeroMQ's buffer until its copy into the pool's."""
    shape = (512, 1024)  # 1 MiB payloads
    endpoints = zmq_addresses("ipc", n_streams, ipc_dir)
    pool = FramePool(shape)
    pool.reserve(4 * n_streams + 2)
    src = ZmqSource(endpoints, timeout=0.1, stop_at_end=True, buffers=pool.get)
    frames = numbered_frames(12, shape)
    tracemalloc.start()
    try:
        sender = zmq_sender(endpoints, frames, copy=False)
        got = []
        for f in src:
            if f is not None:
                assert pool.owns(f.data) and f.data.min() == f.data.max() == f.index  # allocates nothing
                got.append(f.index)
                pool.release(f.data)
        sender.join()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    src.close()
    assert sorted(got) == list(range(12)) and pool.allocated == 4 * n_streams + 2
    assert peak < frames[0].data.nbytes // 4, f"{peak} bytes allocated by Python while receiving"


@pytest.mark.parametrize("processes", [False, True])
def test_the_receivers_stop_reading_while_the_iteration_is_behind(ipc_dir, processes):
    """Threads or child processes (``processes``) alike."""
    endpoints = zmq_addresses("ipc", 2, ipc_dir)
    copied = []

    def buffers(dtype):
        copied.append(dtype)
        return np.empty((3, 4), dtype)

    src = ZmqSource(endpoints, timeout=0.1, stop_at_end=True, buffers=buffers, processes=processes)
    sender = zmq_sender(endpoints, numbered_frames(40))
    it = iter(src)
    first = take_frames(it, 1)
    time.sleep(1.0)  # the frames are all sent; nobody iterates
    assert 1 <= len(copied) <= 1 + ZmqSource.QUEUED * 2
    rest = [f for f in it if f is not None]
    sender.join()
    src.close()
    assert sorted(f.index for f in first + rest) == list(range(40)) and len(copied) == 40


def test_sockets_sharing_an_endpoint_end_the_scan_a_timeout_after_its_end():
    endpoint = _tcp(1)[0]
    src = ZmqSource(endpoint, timeout=0.2, stop_at_end=True, threads=3)
    sender = zmq_sender(endpoint, numbered_frames(30))
    t0 = None
    got = []
    for f in src:
        if f is not None:
            got.append(f.index)
            t0 = time.monotonic()
    ended_after = time.monotonic() - t0
    sender.join()
    src.close()
    assert sorted(got) == list(range(30)) and 0.15 <= ended_after < 5


def test_closing_from_another_thread_stops_every_receiving_thread_which_closes_its_socket(monkeypatch, ipc_dir):
    closed_in = []
    real_close = zmq.Socket.close

    def close(sock, *args, **kwargs):
        if not sock.closed:
            closed_in.append(threading.get_ident())
        return real_close(sock, *args, **kwargs)

    monkeypatch.setattr(zmq.Socket, "close", close)
    src = ZmqSource(zmq_addresses("ipc", 3, ipc_dir), timeout=0.1)
    reader, nones, errors = quiet_reader(src)
    src.close()
    reader.join(5)
    assert not reader.is_alive() and errors == [] and nones == [None] * len(nones)
    assert src.closed and src._ctx.closed
    assert len(set(closed_in)) == 3 and threading.get_ident() not in closed_in and reader.ident not in closed_in
    assert not any(t.name.startswith("leveret-zmq") for t in threading.enumerate())


def test_frames_of_several_streams_are_each_reconstructed_once(ipc_dir):
    """A scan dealt over three streams, through LiveSession, equals leveret.fbp."""
    from leveret.live.server import LiveSession

    angles, g, proj = parallel_phantom_scan(24, 4, 36)
    vol = g.default_volume()
    ref = leveret.fbp(proj, g, vol, backend="cpu")
    endpoints = zmq_addresses("ipc", 3, ipc_dir)
    rec = LiveReconstructor(vol, g, planned=False, backend="cpu")
    src = ZmqSource(endpoints, timeout=0.1, stop_at_end=True, buffers=rec.frame_buffer)
    session = LiveSession(rec, src, max_batch=5)
    session.start()
    frames = [Frame(proj[i], i, angle=float(a)) for i, a in enumerate(angles)]
    frames.append(Frame(proj[7], 7, angle=float(angles[7])))  # sent twice: used once
    send_frames(endpoints, frames, connect_wait=0.3)
    session.join(30)
    session.stop()
    assert session.ended and session.error is None
    assert rec.stats.received == 36 and rec.stats.rejected == 1 and rec.stats.missing == 0
    mid = vol.shape[0] // 2
    xy = rec.slices()["xy"]
    assert float(np.abs(xy - ref[mid]).max() / np.abs(ref[mid]).max()) < 2e-6


def test_encode_sends_a_frame_without_a_copy_when_its_data_are_little_endian_c_order():
    data = np.arange(12, dtype="<u2").reshape(3, 4)
    header, payload = encode(Frame(data, 0, angle=0.0))
    assert np.shares_memory(np.frombuffer(payload, np.uint8), data) and payload.nbytes == 24
    swapped = encode(Frame(data.astype(">u2"), 0, angle=0.0))[1]
    assert bytes(swapped) == data.tobytes() and json.loads(header)["dtype"] == "u2"


@pytest.mark.parametrize("n_streams", [1, 3])
def test_closing_after_a_loop_left_early_closes_the_sockets_and_the_context(n_streams, ipc_dir):
    """A loop left by break or an exception leaves the iteration suspended: close() from
    that thread still closes every socket (none lives on, reconnecting to its endpoint and
    taking a later sender's messages) and the context (whose end would wait at exit)."""
    endpoints = zmq_addresses("ipc", n_streams, ipc_dir)
    src = ZmqSource(endpoints, timeout=0.05)
    frames = iter(src)
    assert next(frames) is None  # nothing sent: the iteration is running, then suspended
    src.close()
    assert src.closed and src._ctx.closed
    assert not any(t.name.startswith("leveret-zmq") and t.is_alive() for t in threading.enumerate())


def test_a_source_never_closed_lets_the_interpreter_exit(tmp_path):
    """A source read to its end and dropped without close(), as a script does: its
    sockets and context are closed when it is collected, so exit does not wait forever."""
    import subprocess
    import sys

    script = f"""
import threading
import numpy as np
from leveret.live import Frame
from leveret.live.sources import ZmqSource, send_frames
address = "ipc://{tmp_path}/s"
source = ZmqSource(address, stop_at_end=True)
frames = [Frame(np.zeros((2, 3), np.float32), i, angle=0.1 * i) for i in range(3)]
sender = threading.Thread(target=send_frames, args=(address, frames))
sender.start()
print(sum(f is not None for f in source))
sender.join()
source.cycle = source  # garbage in a cycle, as a test runner's last collection finds it
del source
import gc
gc.collect()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.strip() == "3", done.stderr
