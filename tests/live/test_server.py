"""The live session (bounded frame queue, coalesced requests, store bound) and
the web server's guards (origin, request limits, where it listens and writes),
without a browser."""

import asyncio
import json
import os
import queue
import threading
import time

import numpy as np
import pytest

import leveret
from leveret.live import Frame, LiveReconstructor, Slice
from leveret.live.server import MAX_AXIAL, FrameQueue, LiveServer, LiveSession

aiohttp = pytest.importorskip("aiohttp")

ROWS, COLS = 2, 8


def _wait_for(condition, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _frame(i):
    return Frame(np.full((ROWS, COLS), float(i)), i, angle=0.01 * i)


class QueueSource:
    """A source fed by the test; ``lossy`` as a ZeroMQ SUB reader says it."""

    def __init__(self, lossy=False):
        self.frames: queue.Queue = queue.Queue()
        self.lossy = lossy
        self.pulled = 0
        self._stop = threading.Event()

    def __iter__(self):
        while not self._stop.is_set():
            try:
                f = self.frames.get(timeout=0.05)
            except queue.Empty:
                yield None
                continue
            if f is None:
                return
            self.pulled += 1
            yield f

    def close(self):
        self._stop.set()


class Gated(LiveReconstructor):
    """A reconstructor whose first ``add_frames`` (or first slice move) waits for ``release``."""

    def __init__(self, *args, **kwargs):
        self.batches, self.moves = [], []
        self.entered, self.release = threading.Event(), threading.Event()
        super().__init__(*args, **kwargs)

    def _gate(self):
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(30)

    def add_frames(self, frames):
        self.batches.append(len(frames))
        self._gate()
        return super().add_frames(frames)

    def watch_orthogonal(self, point=None, angles=(0.0, 0.0, 0.0)):
        self.moves.append(tuple(point))
        self._gate()
        super().watch_orthogonal(point, angles)


def _rec(cls=LiveReconstructor):
    return cls(
        leveret.VolumeGeometry((ROWS, COLS, COLS)),
        leveret.ParallelGeometry([0.0], COLS, ROWS),
        planned=False,
        backend="cpu",
    )


@pytest.fixture
def running():
    sessions = []

    def start(session):
        sessions.append(session)
        session.start()
        return session

    yield start
    for s in sessions:
        s.rec.release.set() if hasattr(s.rec, "release") else None
        s.stop()
        s.join(10)


def test_moves_requested_during_a_recompute_collapse_into_the_newest(running):
    rec = _rec(Gated)
    session = running(LiveSession(rec, QueueSource()))
    session.request("orthogonal", point=[0.0, 0.0, 0.0], angles=[0, 0, 0])
    assert rec.entered.wait(20)  # the first move is being computed
    for k in range(1, 51):  # a slider dragged meanwhile
        session.request("orthogonal", point=[0.0, 0.1 * k, 0.0], angles=[0, 0, 0])
    rec.release.set()
    assert _wait_for(lambda: session.requests_applied == 2)
    assert rec.moves == [(0.0, 0.0, 0.0), (0.0, 5.0, 0.0)]
    assert session.requests_superseded == 49
    xz = next(s for s in rec.watched if s.name == "xz")
    assert xz.origin[1] == 5.0


def test_a_slow_reconstruction_holds_the_reader_back_at_the_queue_bound(running):
    rec = _rec(Gated)
    source = QueueSource()
    for i in range(100):
        source.frames.put(_frame(i))
    session = running(LiveSession(rec, source, max_batch=2, max_queue_frames=4))
    # the reconstructor busy, the queue full and the reader waiting (or, unbounded, everything read)
    assert _wait_for(
        lambda: (
            (rec.entered.is_set() and session.queue.waiting == 1 and len(session.queue) == 4) or source.pulled == 100
        )
    )
    # the batch in the reconstructor, the 4 queued and the one the reader holds: nothing more read
    assert source.pulled == rec.batches[0] + 4 + 1
    rec.release.set()
    source.frames.put(None)
    assert _wait_for(lambda: session.ended)
    assert rec.stats.received == 100 and session.dropped == {}


def test_the_queue_bound_in_bytes_holds_the_reader_back_too(running):
    rec = _rec(Gated)
    source = QueueSource()
    for i in range(50):
        source.frames.put(_frame(i))
    nbytes = _frame(0).data.nbytes
    session = running(LiveSession(rec, source, max_batch=2, max_queue_bytes=3 * nbytes + 1))
    assert _wait_for(
        lambda: (rec.entered.is_set() and session.queue.waiting == 1 and len(session.queue) == 3) or source.pulled == 50
    )
    assert session.queue.nbytes == 3 * nbytes
    assert source.pulled == rec.batches[0] + 3 + 1
    rec.release.set()


def test_a_source_that_cannot_wait_has_its_overflow_dropped_and_counted(running):
    rec = _rec(Gated)
    source = QueueSource(lossy=True)
    session = running(LiveSession(rec, source, max_batch=2, max_queue_frames=4))
    source.frames.put(_frame(0))
    assert rec.entered.wait(20)  # frame 0 is in the reconstructor
    for i in range(1, 50):
        source.frames.put(_frame(i))
    assert _wait_for(lambda: source.pulled == 50 and len(session.queue) + session.queue.dropped == 49)
    assert len(session.queue) == 4 and session.dropped == {"queue full": 45}
    rec.release.set()
    source.frames.put(None)
    assert _wait_for(lambda: session.ended)
    assert rec.stats.received == 5
    summary = session.summary()
    assert summary["dropped"] == 45 and summary["dropped_reasons"] == {"queue full": 45}


def test_frame_queue_lets_one_frame_larger_than_its_byte_bound_through():
    q = FrameQueue(max_frames=4, max_bytes=8)
    assert q.put(_frame(0)) and len(q) == 1  # 128 bytes > 8: alone it passes
    assert not q.put(_frame(1), wait=False) and q.dropped == 1
    batch, ended = q.get_batch(10)
    assert [f.index for f in batch] == [0] and not ended and q.nbytes == 0
    q.end()
    assert q.get_batch(10) == ([], True)


def test_max_views_stops_the_store_and_counts_the_rest(running):
    rec = _rec()
    source = QueueSource()
    for i in range(12):
        source.frames.put(_frame(i))
    source.frames.put(None)
    session = running(LiveSession(rec, source, max_batch=4, max_views=5))
    assert _wait_for(lambda: session.ended)
    assert rec.n_views == 5 and rec.stats.received == 5
    assert session.dropped == {"store full": 7} and session.summary()["views"] == 5


# -- the web server ---------------------------------------------------------------------------------


@pytest.fixture
def server():
    servers = []

    def start(**kwargs):
        session = LiveSession(_rec(), QueueSource())
        srv = LiveServer(session, port=0, **kwargs)
        srv.start()
        session.start()
        servers.append((srv, session))
        return srv, session

    yield start
    for srv, session in servers:
        session.stop()
        srv.stop()


async def _ws(url, origin=None, send=None, until=lambda m: m["type"] == "state", query=""):
    """Open the websocket (with ``origin``), send ``send``, and return the
    first text message that satisfies ``until``; on refusal the handshake's HTTP status."""
    headers = {} if origin is None else {"Origin": origin}
    async with aiohttp.ClientSession() as http:
        try:
            async with http.ws_connect(url + "ws" + query, headers=headers) as ws:
                if send is not None:
                    await ws.send_str(json.dumps(send))
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.TEXT and until(json.loads(msg.data)):
                        return json.loads(msg.data)
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


def _error(m):
    return m["type"] == "error"


def test_the_websocket_refuses_pages_of_other_origins(server):
    srv, _ = server(allow_origins=["https://viewer.example.org"])
    url, port = srv.url, srv.port
    refused = [
        "http://evil.example",
        f"http://evil.example:{port}",
        f"http://127.0.0.1:{port + 1}",
        "null",
        f"https://127.0.0.1.evil.example:{port}",
    ]
    allowed = [
        None,
        f"http://127.0.0.1:{port}",
        f"http://localhost:{port}",
        f"http://[::1]:{port}",
        "https://viewer.example.org/",
    ]
    for origin in refused:
        assert asyncio.run(_ws(url, origin)) == 403, origin
    for origin in allowed:
        assert asyncio.run(_ws(url, origin))["type"] == "state", origin


def test_origin_rules_for_a_named_host_and_for_all_interfaces():
    session = LiveSession(_rec(), QueueSource())
    named = LiveServer(session, host="10.1.2.3", port=8000)
    assert named.origin_allowed("http://10.1.2.3:8000") and not named.origin_allowed("http://localhost:8000")
    anywhere = LiveServer(session, host="0.0.0.0", port=8000)
    assert anywhere.origin_allowed("http://scanner.lab:8000", "scanner.lab:8000")
    assert not anywhere.origin_allowed("http://evil.example:8000", "scanner.lab:8000")
    with pytest.raises(ValueError, match="^allow_origins"):
        LiveServer(session, allow_origins=["viewer.example.org"])


def test_axial_requests_are_capped_with_a_message_to_the_page(server):
    srv, session = server()
    too_many = asyncio.run(_ws(srv.url, send={"type": "axial", "z": list(range(MAX_AXIAL + 1))}, until=_error))
    assert too_many["message"] == f"axial: at most {MAX_AXIAL} axial slices at once, got {MAX_AXIAL + 1}"
    state = asyncio.run(
        _ws(
            srv.url,
            send={"type": "axial", "z": [0.0] * MAX_AXIAL},
            until=lambda m: m["type"] == "error" or len(m.get("slices", [])) > 3,
        )
    )
    assert len(state["slices"]) == 3 + MAX_AXIAL
    bad = asyncio.run(_ws(srv.url, send={"type": "orthogonal", "point": [0, float("nan"), 0]}, until=_error))
    assert bad["message"] == "point: expected finite numbers, got nan"


def test_the_server_listens_on_this_machine_only_unless_told(server):
    srv, _ = server()
    assert srv.url.startswith("http://127.0.0.1:") and [h for h, _ in srv.addresses] == ["127.0.0.1"]
    srv, _ = server(host="0.0.0.0")
    assert [h for h, _ in srv.addresses] == ["0.0.0.0"]


def test_save_writes_only_into_the_output_folder(tmp_path, server):
    out = tmp_path / "out"
    srv, session = server(output=out)
    plane = Slice("../../escape", (0.0, 0.0, 0.0), (1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (4, 4), (1.0, 1.0))
    with session.lock:
        session.rec.watch([plane])
    names = srv.save()
    assert names and all(os.path.dirname(n) == "" for n in names)
    assert sorted(os.listdir(tmp_path)) == ["out"] and sorted(os.listdir(out)) == sorted(names)


def test_the_page_images_and_colour_range_stay_defined_with_non_finite_pixels():
    from leveret.live.server import auto_range, to_uint8

    image = np.array([[0.0, 1.0], [np.nan, np.inf]], np.float32)
    lo, hi = auto_range([image])
    assert np.isfinite([lo, hi]).all() and 0.0 <= lo < hi <= 1.0
    np.testing.assert_array_equal(to_uint8(image, 0.0, 1.0), [[0, 255], [0, 255]])
    json.dumps({"range": [lo, hi]}, allow_nan=False)  # the state message stays valid JSON


def test_a_zeromq_pull_stream_is_held_back_not_dropped_while_the_reconstruction_is_busy(running):
    """PULL: the reader pauses at the queue bound, the sockets' high-water marks
    fill, the sender waits; every frame arrives in the end."""
    pytest.importorskip("zmq")
    import socket as sockets

    from leveret.live.sources import ZmqSource, send_frames

    with sockets.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    rows, cols, n = 64, 256, 300  # 64 KiB frames: a few MiB of socket buffers hold ~100
    rec = Gated(
        leveret.VolumeGeometry((2, 8, 8)), leveret.ParallelGeometry([0.0], cols, rows), planned=False, backend="cpu"
    )
    source = ZmqSource(address, hwm=8, timeout=0.1, stop_at_end=True)
    sent = []
    frames = [Frame(np.full((rows, cols), i, np.float32), i, angle=0.01 * i) for i in range(n)]
    sender = threading.Thread(target=lambda: sent.append(send_frames(address, frames, hwm=8, connect_wait=0.3)))
    session = running(LiveSession(rec, source, max_batch=4, max_queue_frames=4))
    sender.start()
    assert _wait_for(lambda: rec.entered.is_set() and session.queue.waiting == 1 and len(session.queue) == 4)
    sender.join(1.0)  # unchecked, 19 MiB go in milliseconds
    assert sender.is_alive() and not sent  # held back
    rec.release.set()
    sender.join(60)
    assert sent == [n]
    assert _wait_for(lambda: session.ended)
    assert rec.stats.received == n and session.dropped == {} and rec.stats.missing == 0


# -- requests that must not end the page's connection, and the server's doors ---------------------


async def _ws_session(url, texts, n_replies, headers=None, until=lambda m: m["type"] != "state"):
    """Send the raw ``texts`` over one websocket; return the first ``n_replies``
    text messages that satisfy ``until`` (or fewer if the server closes)."""
    replies = []
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url + "ws", headers=headers or {}) as ws:
            for t in texts:
                await ws.send_str(t)
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue  # the slices' images
                m = json.loads(msg.data)
                if until(m):
                    replies.append(m)
                    if len(replies) == n_replies:
                        break
    return replies


@pytest.mark.parametrize(
    "text, message",
    [
        (json.dumps({"type": "orthogonal", "point": [int("9" * 400), 0, 0]}), "point: expected finite numbers"),
        (json.dumps({"type": "range", "lo": 0, "hi": int("9" * 400)}), "range: expected finite numbers"),
        (json.dumps({"type": "axial", "z": [-int("9" * 400)]}), "z: expected finite numbers"),
        ('{"type": "range", "lo": ' + "[" * 30000 + "]" * 30000 + ', "hi": 1}', "request: JSON nested too deep"),
        ("[" * 30000 + "]" * 30000, "request: JSON nested too deep"),
        ('{"type": "orthogonal", "point": [1, 2, 3', "request: not JSON"),
        ('{"type": "range", "lo": NaN, "hi": 1}', "range: expected finite numbers"),
    ],
)
def test_a_bad_request_gets_an_error_and_the_connection_goes_on(server, text, message):
    srv, _ = server()
    replies = asyncio.run(
        _ws_session(
            srv.url,
            [text, json.dumps({"type": "range", "lo": 0.0, "hi": 2.0})],
            2,
            until=lambda m: m["type"] == "error" or m.get("range") == [0.0, 2.0],
        )
    )
    assert len(replies) == 2, replies
    assert replies[0]["type"] == "error" and replies[0]["message"].startswith(message), replies[0]
    assert replies[1]["type"] == "state" and replies[1]["range"] == [0.0, 2.0]  # still answered


def test_saves_are_rate_limited(tmp_path, server):
    out = tmp_path / "out"
    srv, _ = server(output=out, max_saves_per_minute=4)
    replies = asyncio.run(_ws_session(srv.url, [json.dumps({"type": "save"})] * 30, 30))
    saved = [r for r in replies if r["type"] == "saved"]
    refused = [r for r in replies if r["type"] == "error"]
    assert len(saved) == 4 and len(refused) == 26, replies
    assert refused[0]["message"].startswith("save: at most 4 saves a minute")
    assert len(os.listdir(out)) == 4 * 3


def _http(url, headers=None, allow_redirects=False):
    async def get():
        async with aiohttp.ClientSession() as http:
            async with http.get(url, headers=headers or {}, allow_redirects=allow_redirects) as r:
                return r.status, dict(r.headers), r.cookies

    return asyncio.run(get())


def test_serving_beyond_this_machine_needs_the_token_on_every_request(server):
    srv, _ = server(host="0.0.0.0")
    token, port = srv.token, srv.port
    assert token and len(token) >= 20 and srv.url.endswith(f"/?token={token}")
    base = f"http://127.0.0.1:{port}/"
    for path in ("", "static/app.js", "ws"):
        assert _http(base + path)[0] == 401, path
        assert _http(base + path + "?token=wrong")[0] == 401, path
        assert _http(base + path, {"Authorization": "Bearer wrong"})[0] == 401, path
    status, headers, cookies = _http(base + f"?token={token}")
    assert status == 303 and headers["Location"] == "/"  # the token leaves the address bar
    cookie = cookies[f"leveret_live_{port}"]
    assert cookie.value == token and cookie["httponly"] and cookie["samesite"] == "Strict"
    as_cookie = {"Cookie": f"leveret_live_{port}={token}"}
    assert _http(base, as_cookie)[0] == 200 and _http(base + "static/app.js", as_cookie)[0] == 200
    assert _http(base + "static/app.js", {"Authorization": f"Bearer {token}"})[0] == 200
    assert asyncio.run(_ws(base, f"http://127.0.0.1:{port}")) == 401
    assert asyncio.run(_ws(base, f"http://127.0.0.1:{port}", query=f"?token={token}"))["type"] == "state"


def test_a_token_given_for_a_loopback_server_is_required_too(server):
    srv, _ = server(token="s3cret-token-of-the-user")
    assert srv.url.endswith("/?token=s3cret-token-of-the-user")
    base = f"http://127.0.0.1:{srv.port}/"
    assert _http(base)[0] == 401
    assert _http(base, {"Authorization": "Bearer s3cret-token-of-the-user"})[0] == 200


def test_a_loopback_server_needs_no_token():
    session = LiveSession(_rec(), QueueSource())
    assert LiveServer(session, port=0).token is None
    with pytest.raises(ValueError, match="^token"):
        LiveServer(session, port=0, token="short")


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_a_host_header_of_another_name_is_refused_dns_rebinding(server, host):
    """A page of evil.example whose name was made to point at this machine
    sends Host and Origin evil.example: refused, on loopback (no token) and
    on all interfaces (where the Origin equals the Host)."""
    srv, _ = server(host=host)
    port = srv.port
    q = f"?token={srv.token}" if srv.token else ""
    evil = {"Host": f"evil.example:{port}"}
    base = f"http://127.0.0.1:{port}/"
    assert _http(base + q, evil)[0] == 403
    assert _http(base + "static/app.js" + q, evil)[0] == 403

    async def ws(headers):
        async with aiohttp.ClientSession() as http:
            try:
                async with http.ws_connect(base + "ws" + q, headers=headers) as w:
                    return (await w.receive_json())["type"]
            except aiohttp.WSServerHandshakeError as exc:
                return exc.status

    assert asyncio.run(ws({**evil, "Origin": f"http://evil.example:{port}"})) == 403
    for name in ("localhost", "127.0.0.1"):
        own = {"Host": f"{name}:{port}", "Origin": f"http://{name}:{port}"}
        assert _http(base + q, own)[0] in (200, 303)
        assert asyncio.run(ws(own)) == "state"


def test_one_save_at_a_time(tmp_path, server):
    srv, _ = server(output=tmp_path / "out")
    real_save, started = srv.save, threading.Event()

    def slow_save():
        started.set()
        time.sleep(1.0)
        return real_save()

    srv.save = slow_save

    async def two_pages():
        first = asyncio.create_task(_ws_session(srv.url, [json.dumps({"type": "save"})], 1))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        second = await _ws_session(srv.url, [json.dumps({"type": "save"})], 1)
        return await first, second

    first, second = asyncio.run(two_pages())
    assert first[0]["type"] == "saved"
    assert second == [{"type": "error", "message": "save: a save is being written; try again when it is done"}]
