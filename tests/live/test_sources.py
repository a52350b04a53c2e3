"""Frame sources: iterable, folder being written, ZeroMQ (PUSH/PULL and PUB/SUB)."""

import json
import os
import socket
import threading
import time

import h5py
import numpy as np
import pytest
import tifffile
from cases import quiet_reader, take_frames

from leveret.live import Frame
from leveret.live.sources import FolderSource, ZmqSource, decode, encode, frame_index, iterable_source, send_frames

zmq = pytest.importorskip("zmq")


def _free_address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def test_iterable_source_yields_frames_with_angles_or_matrices():
    data = np.arange(24, dtype=np.uint16).reshape(3, 2, 4)
    frames = list(iterable_source(data, [0.0, 0.5, 1.0]))
    assert [f.index for f in frames] == [0, 1, 2] and frames[1].angle == 0.5
    np.testing.assert_array_equal(frames[2].data, data[2])
    cone = list(iterable_source(data, matrices=np.ones((3, 3, 4))))
    assert cone[0].matrix.shape == (3, 4) and cone[0].angle is None
    with pytest.raises(ValueError, match="^angles"):
        list(iterable_source(data))


def test_frame_index_is_the_last_number_in_the_name():
    assert frame_index("scan2_proj_00042.tif") == 42
    assert frame_index("flat.tif") is None


def test_folder_source_reads_only_complete_files(tmp_path):
    angles = np.linspace(0, np.pi, 10)
    src = FolderSource(tmp_path, angles=angles, settle=0.3, timeout=0.1, poll=0.02)
    it = iter(src)
    tifffile.imwrite(tmp_path / "proj_00000.tif", np.full((4, 6), 7, np.uint16))
    # a frame still being written: a growing file is not read
    partial = tmp_path / "proj_00001.tif"
    full = np.full((4, 6), 9, np.uint16)
    tifffile.imwrite(tmp_path / "whole.bin.tmp", full)
    blob = (tmp_path / "whole.bin.tmp").read_bytes()
    (tmp_path / "whole.bin.tmp").unlink()
    first = take_frames(it, 1)[0]
    assert first.index == 0 and first.angle == angles[0] and first.data[0, 0] == 7
    with open(partial, "wb") as f:
        step = len(blob) // 8
        for k in range(0, len(blob), step):  # written in pieces, slower than a poll
            f.write(blob[k : k + step])
            f.flush()
            deadline = time.monotonic() + 0.1
            while time.monotonic() < deadline:
                assert next(it) is None  # quiet: the half-written file is not a frame
    frame = take_frames(it, 1)[0]
    assert frame.index == 1 and frame.angle == angles[1]
    np.testing.assert_array_equal(frame.data, full)
    src.close()


def test_folder_source_reads_hdf5_frames_with_their_angle(tmp_path):
    with h5py.File(tmp_path / "frame_0003.h5", "w") as f:
        f.create_dataset("data", data=np.ones((3, 5), np.float32)).attrs["angle"] = 0.25
    src = FolderSource(tmp_path, settle=0.05, timeout=0.1, poll=0.02)
    frame = take_frames(iter(src), 1)[0]
    assert frame.index == 3 and frame.angle == 0.25 and frame.data.shape == (3, 5)
    src.close()


def test_message_round_trip_keeps_dtype_shape_and_geometry():
    data = np.arange(12, dtype=">u2").reshape(3, 4)  # big-endian in, little-endian on the wire
    header, payload = encode(Frame(data, 5, angle=1.5))
    h = json.loads(header)
    assert h == {"index": 5, "shape": [3, 4], "dtype": "u2", "angle": 1.5}
    frame = decode(h, payload)
    np.testing.assert_array_equal(frame.data, data)
    m = np.arange(12.0).reshape(3, 4)
    frame = decode(*[json.loads(encode(Frame(data, 0, matrix=m))[0])] + [encode(Frame(data, 0, matrix=m))[1]])
    np.testing.assert_array_equal(frame.matrix, m)
    with pytest.raises(ValueError):
        decode({"index": 0, "shape": [4, 4], "dtype": "u2"}, payload)


def test_decode_copies_into_a_given_buffer_of_the_frame_shape():
    from leveret.live.pool import FramePool

    data = np.arange(12, dtype="<u2").reshape(3, 4)
    header, payload = encode(Frame(data, 2, angle=0.5))
    pool = FramePool((3, 4))
    frame = decode(json.loads(header), payload, buffers=pool.get)
    assert pool.owns(frame.data) and frame.data.dtype == np.uint16
    np.testing.assert_array_equal(frame.data, data)
    other = decode({"index": 0, "shape": [4, 3], "dtype": "u2"}, payload, buffers=FramePool((3, 4)).get)
    assert other.data.shape == (4, 3)  # not the buffers' shape: a view of the message as before


@pytest.mark.parametrize("send_pattern, read_pattern", [("push", "pull"), ("pub", "sub")])
def test_zmq_stream_delivers_frames_in_order(send_pattern, read_pattern):
    address = _free_address()
    frames = [Frame(np.full((2, 3), i, np.float32), i, angle=0.1 * i) for i in range(20)]
    src = ZmqSource(address, pattern=read_pattern, timeout=0.1, stop_at_end=True)
    sender = threading.Thread(
        target=send_frames, args=(address, frames), kwargs=dict(pattern=send_pattern, rate=1000, connect_wait=0.5)
    )
    sender.start()
    got = [f for f in src if f is not None]
    sender.join()
    src.close()
    assert [f.index for f in got] == list(range(20))
    assert got[7].angle == pytest.approx(0.7) and got[7].data[0, 0] == 7


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_zmq_sender_that_leaves_first_loses_nothing_to_a_slow_reader(tmp_path, transport):
    """A reader slower than its sender with a small high-water mark: ZeroMQ drops
    what is in flight to a full receive queue when the sender closes
    (docs/references.md, "ZeroMQ"), so send_frames waits for the reader to go:
    every frame and the end of the scan arrive."""
    address = f"ipc://{tmp_path}/s" if transport == "ipc" else _free_address()
    frames = [Frame(np.full((2, 3), i, np.float32), i, angle=0.0) for i in range(40)]
    src = ZmqSource(address, timeout=0.1, stop_at_end=True, hwm=4)
    sender = threading.Thread(target=send_frames, args=(address, frames), kwargs=dict(hwm=4, connect_wait=0.3))
    sender.start()
    got, quiet = [], 0
    for f in src:
        if f is None:
            quiet += 1
            assert quiet < 50, f"the end of the scan never came ({len(got)} frames)"
            continue
        got.append(f.index)
        time.sleep(0.01)  # slower than the sender: its queue and the reader's fill up
    src.close()
    sender.join(timeout=10)
    assert not sender.is_alive() and got == list(range(40))


def test_zmq_source_picks_a_stream_up_again_after_it_stops():
    address = _free_address()
    src = ZmqSource(address, timeout=0.1)
    it = iter(src)
    part1 = [Frame(np.zeros((2, 2), np.float32), i, angle=0.0) for i in range(3)]
    part2 = [Frame(np.zeros((2, 2), np.float32), i, angle=0.0) for i in range(3, 6)]
    send_frames(address, part1, end=False, connect_wait=0.3)  # a sender that goes away
    assert [f.index for f in take_frames(it, 3)] == [0, 1, 2]
    assert next(it) is None  # quiet spell
    send_frames(address, part2, end=False, connect_wait=0.3)  # and comes back
    assert [f.index for f in take_frames(it, 3)] == [3, 4, 5]
    src.close()


def test_zmq_source_skips_malformed_messages():
    address = _free_address()
    src = ZmqSource(address, timeout=0.1, stop_at_end=True)
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.PUSH)
    sock.bind(address)
    time.sleep(0.3)
    sock.send_multipart([b"not json", b""])
    sock.send_multipart(encode(Frame(np.ones((2, 2), np.uint8), 0, angle=0.0)))
    sock.send_multipart([b'{"end": true}'])
    got = [f for f in src if f is not None]
    sock.close()
    src.close()
    assert len(got) == 1 and src.bad_messages == 1


@pytest.mark.parametrize("header", [b"[1, 2]", b'"x"', b"3", b"null", b"\xff\xfe"])
def test_zmq_source_counts_a_header_that_is_not_a_json_object_and_goes_on(header):
    address = _free_address()
    src = ZmqSource(address, timeout=0.1, stop_at_end=True)
    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.bind(address)
    sock.send_multipart([header, b"\0" * 8])
    sock.send_multipart([header])
    sock.send_multipart(encode(Frame(np.ones((2, 2), np.uint8), 0, angle=0.0)))
    sock.send_multipart([b'{"end": true}'])
    got = [f for f in src if f is not None]
    sock.close(0)
    src.close()
    assert [f.index for f in got] == [0] and src.bad_messages == 2


def test_decode_rejects_a_header_that_is_not_an_object_or_a_payload_that_is_not_numbers():
    with pytest.raises(TypeError, match="^header: expected a JSON object, got list"):
        decode([1, 2], b"\0" * 4)
    with pytest.raises(ValueError, match="^dtype"):
        decode({"index": 0, "shape": [1, 1], "dtype": "O"}, b"\0" * 8)


def test_zmq_source_closed_from_another_thread_is_closed_by_the_thread_reading_it(monkeypatch):
    closed_in = []
    real_close = zmq.Socket.close

    def close(sock, *args, **kwargs):
        closed_in.append(threading.get_ident())
        return real_close(sock, *args, **kwargs)

    monkeypatch.setattr(zmq.Socket, "close", close)
    src = ZmqSource(_free_address(), timeout=0.1)
    reader, nones, errors = quiet_reader(src)
    assert len(nones) >= 2  # the reader is inside its poll loop
    src.close()  # from this thread
    reader.join(5)
    assert not reader.is_alive() and errors == []
    assert src.closed and closed_in == [reader.ident]
    src.close()  # again: nothing left to do
    assert closed_in == [reader.ident]


def test_zmq_source_closed_before_anyone_reads_it_closes_its_socket_at_once():
    src = ZmqSource(_free_address(), timeout=0.1)
    src.close()
    assert src.closed and list(src) == []


def test_zmq_source_says_whether_it_can_make_the_sender_wait():
    pull, sub = ZmqSource(_free_address()), ZmqSource(_free_address(), pattern="sub")
    assert not pull.lossy and sub.lossy
    pull.close()
    sub.close()


def _tiff_bytes(value, shape=(4, 6)):
    import io

    buf = io.BytesIO()
    tifffile.imwrite(buf, np.full(shape, value, np.uint16))
    return buf.getvalue()


def _quiet(it, seconds):
    """Every item of ``it`` over ``seconds`` is None (no frame)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        frame = next(it)
        assert frame is None, f"frame {frame.index} read"


def test_folder_source_uses_a_frame_once_even_when_it_is_replaced_under_the_same_name(tmp_path, caplog):
    src = FolderSource(tmp_path, angles=np.zeros(4), settle=0.05, timeout=0.05, poll=0.01)
    it = iter(src)
    (tmp_path / "proj_0002.tif").write_bytes(_tiff_bytes(1))
    assert take_frames(it, 1)[0].data[0, 0] == 1
    (tmp_path / "proj_0002.tif.tmp").write_bytes(_tiff_bytes(2))  # same size, new content
    os.replace(tmp_path / "proj_0002.tif.tmp", tmp_path / "proj_0002.tif")
    with caplog.at_level("WARNING", logger="leveret.live"):
        _quiet(it, 3 * FolderSource.RECHECK)
    assert sum("changed after it was read" in r.message for r in caplog.records) == 1
    src.close()


def test_folder_source_uses_a_frame_once_even_when_it_is_rewritten_in_place(tmp_path):
    src = FolderSource(tmp_path, angles=np.zeros(4), settle=0.05, timeout=0.05, poll=0.01)
    it = iter(src)
    path = tmp_path / "proj_0001.tif"
    path.write_bytes(_tiff_bytes(5))
    first = take_frames(it, 1)[0]
    mtime = path.stat().st_mtime_ns
    with open(path, "r+b") as f:  # same inode, same size
        f.write(_tiff_bytes(6))
    os.utime(path, ns=(mtime + 10**9, mtime + 10**9))  # a later time even on coarse clocks
    _quiet(it, 2 * FolderSource.RECHECK)
    assert first.data[0, 0] == 5
    src.close()


def test_folder_source_never_reads_an_hdf5_frame_whose_data_are_not_written_yet(tmp_path):
    """A writer that makes the dataset, closes the file, and writes the data in
    place later: the unwritten dataset (HDF5 would give its fill value, zeros)
    is not a frame; the frame is read once, when its data are there."""
    path = tmp_path / "frame_0004.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", shape=(3, 5), dtype=np.float32).attrs["angle"] = 0.5
    src = FolderSource(tmp_path, settle=0.05, timeout=0.05, poll=0.01)
    it = iter(src)
    _quiet(it, 0.5)  # settled, and still not read
    with h5py.File(path, "r+") as f:
        f["data"][...] = 7.0
    frame = take_frames(it, 1)[0]
    assert frame.index == 4 and frame.angle == 0.5 and np.all(frame.data == 7.0)
    _quiet(it, 2 * FolderSource.RECHECK)  # and once only
    src.close()


def test_folder_source_waits_for_the_angle_of_an_hdf5_frame_written_after_its_data(tmp_path):
    path = tmp_path / "frame_0002.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=np.ones((3, 5), np.float32))
    src = FolderSource(tmp_path, settle=0.05, timeout=0.05, poll=0.01)
    it = iter(src)
    _quiet(it, 0.5)  # no angle, none given: not complete yet
    with h5py.File(path, "r+") as f:
        f["data"].attrs["angle"] = 0.25
    frames = [take_frames(it, 1)[0]]
    _quiet(it, 2 * FolderSource.RECHECK)
    assert [(f.index, f.angle) for f in frames] == [(2, 0.25)]
    src.close()


@pytest.mark.parametrize(
    "name, attrs",
    [
        ("proj_99999999999.tif", {}),  # index beyond max_index
        ("frame_0001.h5", {"index": 1e300}),
        ("frame_0001.h5", {"index": "3"}),
        ("frame_0001.h5", {"index": -2}),
        ("frame_0001.h5", {"angle": np.inf}),
        ("frame_0001.h5", {"angle": "x"}),
        ("frame_0001.h5", {"matrix": np.ones(5)}),
        ("frame_0001.h5", {"shape": (2, 3, 5)}),
        ("frame_0001.h5", {"shape": (4, 4)}),  # not the detector's shape
        ("proj_0001.tif", {"shape": (4, 4)}),
    ],
)
def test_folder_source_counts_a_file_it_cannot_use_and_reads_on(tmp_path, name, attrs):
    attrs = dict(attrs)
    shape = attrs.pop("shape", (3, 5))
    if name.endswith(".h5"):
        with h5py.File(tmp_path / name, "w") as f:
            ds = f.create_dataset("data", data=np.ones(shape, np.float32))
            ds.attrs["angle"] = 0.5
            for k, value in attrs.items():
                ds.attrs[k] = value
    else:
        tifffile.imwrite(tmp_path / name, np.ones(shape, np.float32))
    tifffile.imwrite(tmp_path / "proj_0003.tif", np.full((3, 5), 2, np.float32))
    src = FolderSource(
        tmp_path, angles=np.zeros(8), settle=0.0, timeout=0.05, poll=0.01, max_index=10**6, detector_shape=(3, 5)
    )
    it = iter(src)
    got = take_frames(it, 1)
    _quiet(it, 0.3)
    assert [f.index for f in got] == [3] and src.bad_messages == 1
    src.close()


def test_folder_source_waits_for_a_preallocated_file_to_stop_changing(tmp_path):
    """A writer that sets the final size first and fills the file afterwards:
    the size is stable from the start, the modification time is not."""
    settle = 0.3
    src = FolderSource(tmp_path, angles=np.zeros(2), settle=settle, timeout=0.02, poll=0.01)
    it = iter(src)
    blob = _tiff_bytes(9)
    path = tmp_path / "proj_0000.tif"
    path.write_bytes(b"\0" * len(blob))
    mtime = path.stat().st_mtime_ns
    step = len(blob) // 6
    for k, offset in enumerate(range(0, len(blob), step)):
        with open(path, "r+b") as f:
            f.seek(offset)
            f.write(blob[offset : offset + step])
        stamp = mtime + (k + 1) * 10**8
        os.utime(path, ns=(stamp, stamp))
        deadline = time.monotonic() + settle / 2  # a pause shorter than settle
        while time.monotonic() < deadline:
            assert next(it) is None  # never read half-way
    frame = take_frames(it, 1)[0]
    assert frame.index == 0 and np.all(frame.data == 9)
    src.close()


def test_folder_source_reads_a_cone_matrix_stored_with_an_hdf5_frame(tmp_path):
    m = np.arange(12.0).reshape(3, 4)
    with h5py.File(tmp_path / "frame_0007.h5", "w") as f:
        f.create_dataset("data", data=np.ones((3, 5), np.float32)).attrs["matrix"] = m
    src = FolderSource(tmp_path, settle=0.0, timeout=0.1, poll=0.01)
    frame = take_frames(iter(src), 1)[0]
    assert frame.index == 7 and frame.angle is None
    np.testing.assert_array_equal(frame.matrix, m)
    src.close()


# -- a stream outlives any message ---------------------------------------------------------------------

_GOOD = {"index": 0, "shape": [2, 2], "dtype": "uint8", "angle": 0.0}
_DEEP = b'{"index": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


def _header(**fields):
    h = dict(_GOOD)
    h.update(fields)
    return json.dumps(h).encode()


# each: the raw header of a message whose payload is the 4 bytes of a 2x2 uint8 frame
BAD_HEADERS = {
    "index 1e999 (inf)": b'{"index": 1e999, "shape": [2, 2], "dtype": "uint8", "angle": 0.0}',
    "shape [1e999, 2]": b'{"index": 0, "shape": [1e999, 2], "dtype": "uint8", "angle": 0.0}',
    "nested 100k deep": _DEEP,
    "a bare array 100k deep": b"[" * 100_000 + b"]" * 100_000,
    "index of 400 digits": _header(index=int("9" * 400)),
    "index above the bound": _header(index=2**31),
    "index negative": _header(index=-1),
    "index true": _header(index=True),
    "index 1.5": _header(index=1.5),
    "index a string": _header(index="3"),
    "shape of 3 numbers": _header(shape=[1, 2, 2]),
    "shape [0, 4]": _header(shape=[0, 4]),
    "shape of strings": _header(shape=["2", "2"]),
    "shape of 400-digit ints": _header(shape=[int("9" * 400), 1]),
    "shape larger than a detector": _header(shape=[1 << 17, 1]),
    "dtype object": _header(dtype="O"),
    "dtype complex": _header(dtype="complex64"),
    "dtype float128": _header(dtype="f16"),
    "dtype a list": _header(dtype=["u1"]),
    "dtype structured": _header(dtype="u1,u1"),
    "angle 1e999 (inf)": b'{"index": 0, "shape": [2, 2], "dtype": "uint8", "angle": 1e999}',
    "angle a string": _header(angle="0.5"),
    "angle of 400 digits": _header(angle=int("9" * 400)),
    "matrix 2x2": _header(angle=None, matrix=[[1, 0], [0, 1]]),
    "matrix of strings": _header(angle=None, matrix=[["1"] * 4] * 3),
    "matrix nested deep": b'{"index": 0, "shape": [2, 2], "dtype": "uint8", "matrix": '
    + b"[" * 500
    + b"]" * 500
    + b"}",
    "header larger than the bound": _header(note="x" * (1 << 17)),
    "payload of the wrong size": _header(shape=[2, 3]),
}


@pytest.mark.parametrize("raw", list(BAD_HEADERS.values()), ids=list(BAD_HEADERS))
def test_zmq_source_counts_a_bad_header_and_reads_on(raw):
    """Every message is checked before it becomes a frame: the bad one is
    counted and logged, the reader goes on to the next frame and the end."""
    address = _free_address()
    src = ZmqSource(address, timeout=0.1, stop_at_end=True)
    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.bind(address)
    sock.send_multipart([raw, b"\1" * 4])
    sock.send_multipart(encode(Frame(np.ones((2, 2), np.uint8), 1, angle=0.0)))
    sock.send_multipart([b'{"end": true}'])
    got = [f for f in src if f is not None]
    sock.close(0)
    src.close()
    assert [f.index for f in got] == [1] and src.bad_messages == 1


def test_zmq_source_takes_only_frames_of_the_detector_shape_it_is_given():
    address = _free_address()
    src = ZmqSource(address, timeout=0.1, stop_at_end=True, detector_shape=(2, 3))
    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.bind(address)
    sock.send_multipart(encode(Frame(np.ones((1, 6), np.uint8), 0, angle=0.0)))
    sock.send_multipart(encode(Frame(np.ones((2, 3), np.uint8), 1, angle=0.0)))
    sock.send_multipart([b'{"end": true}'])
    got = [f for f in src if f is not None]
    sock.close(0)
    src.close()
    assert [f.index for f in got] == [1] and src.bad_messages == 1


def test_zmq_source_bounds_frame_indices_by_max_index():
    address = _free_address()
    src = ZmqSource(address, timeout=0.1, stop_at_end=True, max_index=10)
    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.bind(address)
    for i in (9, 10, 11):
        sock.send_multipart(encode(Frame(np.ones((2, 2), np.uint8), i, angle=0.0)))
    sock.send_multipart([b'{"end": true}'])
    got = [f for f in src if f is not None]
    sock.close(0)
    src.close()
    assert [f.index for f in got] == [9] and src.bad_messages == 2
