"""The live viewer: a reconstruction thread and an aiohttp web app.

:class:`LiveSession` reads a source in a thread into a bounded
:class:`FrameQueue`, hands the frames that arrived together to
:meth:`LiveReconstructor.add_frames` in one batch, and applies the viewer's
requests (move or rotate the slices, axial slices) between batches, the
newest of each kind only. :class:`LiveServer` serves ``static/`` and pushes
the slices over a websocket as 8-bit images, with the colour range applied
on the server; text messages carry the counters.

Websocket protocol (the page in ``static/`` is its only client; a browser
page from another origin is refused, see :class:`LiveServer`):

- server -> page, text: ``{"type": "state", ...}`` (counters, slices, range),
  ``{"type": "error", "message": ...}`` (a request refused);
- server -> page, binary: ``uint32 little-endian n``, then ``n`` bytes of a JSON
  header ``{"name", "width", "height"}``, then ``width * height`` uint8 pixels;
- page -> server, text: ``{"type": "orthogonal", "point": [x, y, z],
  "angles": [a, b, c]}``, ``{"type": "axial", "z": [...]}`` (at most
  ``MAX_AXIAL`` heights), ``{"type": "range", "lo": .., "hi": ..}`` or
  ``{"type": "range", "auto": true}``, ``{"type": "save"}`` (the slices as
  TIFF files into the output folder).
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import ipaddress
import json
import logging
import math
import re
import reprlib
import secrets
import socket
import struct
import threading
import time
from collections import deque
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from .reconstructor import LiveReconstructor

log = logging.getLogger("leveret.live")

STATIC = Path(__file__).resolve().parent / "static"
#: Missing frame indices listed in the summary (``missing`` counts them all).
MISSING_LISTED = 1000
#: Axial slices the page may ask for at once (each is recomputed from every view on a move).
MAX_AXIAL = 16
#: Bytes of one websocket message from the page at most (its requests are some 100 bytes).
MAX_REQUEST_BYTES = 1 << 16
#: What a token may be made of (it travels in URLs and cookies), and its least length.
TOKEN_CHARS = re.compile(r"[A-Za-z0-9._~-]+")
MIN_TOKEN = 16


def default_batch(backend: str) -> int:
    """Frames per filter + back-projection call: 16 on the CPU (measured 1.3-1.7x
    the frame rate of 64 on 2 cores, docs/performance.md), 64 on a GPU."""
    return 16 if backend == "cpu" else 64


class FrameQueue:
    """Frames on their way from the source's thread to the reconstruction's:
    at most ``max_frames`` frames and ``max_bytes`` bytes of frame data (a
    single frame larger than ``max_bytes`` still passes, alone).

    :meth:`put` waits for room (``wait=True``) or drops the frame and counts
    it (``wait=False``, ``dropped``); :meth:`get_batch` waits for frames, the
    end of the source, :meth:`wake` or :meth:`close`.
    """

    def __init__(self, max_frames: int = 256, max_bytes: int = 1 << 30):
        from .. import _validate as v

        self.max_frames = v.positive_int("max_frames", max_frames)
        self.max_bytes = v.positive_int("max_bytes", max_bytes)
        self.dropped = 0
        self.waiting = 0  # producers waiting for room now
        self._items: deque = deque()
        self._bytes = 0
        self._cond = threading.Condition()
        self._ended = self._closed = self._woken = False

    def __len__(self) -> int:
        return len(self._items)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def _fits(self, nbytes: int) -> bool:
        return not self._items or (len(self._items) < self.max_frames and self._bytes + nbytes <= self.max_bytes)

    def put(self, frame, *, wait: bool = True) -> bool:
        """Queue ``frame``; False if it was dropped (no room and ``wait=False``) or the queue closed."""
        nbytes = int(getattr(frame.data, "nbytes", 0))
        with self._cond:
            if not self._fits(nbytes):
                if not wait:
                    self.dropped += 1
                    return False
                self.waiting += 1
                try:
                    self._cond.wait_for(lambda: self._closed or self._fits(nbytes))
                finally:
                    self.waiting -= 1
            if self._closed:
                return False
            self._items.append(frame)
            self._bytes += nbytes
            self._cond.notify_all()
            return True

    def get_batch(self, max_frames: int) -> tuple[list, bool]:
        """Up to ``max_frames`` queued frames (waiting for at least one, the
        end, a wake-up or the close) and whether no more will come."""
        with self._cond:
            self._cond.wait_for(lambda: self._items or self._ended or self._closed or self._woken)
            self._woken = False
            batch = []
            while self._items and len(batch) < max_frames:
                frame = self._items.popleft()
                self._bytes -= int(getattr(frame.data, "nbytes", 0))
                batch.append(frame)
            self._cond.notify_all()  # room for a waiting producer
            return batch, self._closed or (self._ended and not self._items)

    def end(self) -> None:
        """No more frames will be put (the frames queued are still taken)."""
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def wake(self) -> None:
        """Return from a waiting :meth:`get_batch` (with what is queued, maybe nothing)."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def close(self) -> None:
        """Stop: waiting producers and the consumer return at once."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class LiveSession:
    """A source feeding a :class:`LiveReconstructor` in a background thread.

    Parameters
    ----------
    reconstructor : LiveReconstructor
    source : iterable of Frame (or None while nothing arrives)
        Its ``bad_messages`` counter (:class:`~leveret.live.sources.ZmqSource`),
        if any, is shown on the page; its ``close()`` is called by :meth:`stop`.
    frames : iterator of Frame, optional
        What is read instead of ``iter(source)``: e.g. the source's iterator
        with a first frame already taken put back in front.
    max_batch : int, optional
        At most this many frames per filter + back-projection call; default
        :func:`default_batch` (16 on the CPU, where larger batches' temporaries
        leave the caches, 64 on a GPU).
    max_queue_frames, max_queue_bytes : int
        Bound of the queue between the source and the reconstruction
        (default 256 frames and 1 GiB). When it is full the reader waits
        (the source holds the frames: files stay in the folder, a ZeroMQ PULL
        socket holds the sender back), or, for a source that cannot wait
        (``source.lossy``, ZeroMQ SUB), the frame is dropped and counted in
        ``dropped["queue full"]``.
    when_full : {"wait", "drop"}, optional
        Overrides that choice.
    max_views : int, optional
        Stop adding frames once this many views are reconstructed; later
        frames are counted in ``dropped["store full"]`` (bounds the memory of
        the stored views). Default: no bound.
    on_update : callable, optional
        Called (in the reconstruction thread) after every batch.

    Notes
    -----
    Requests from the viewer (:meth:`request`) are applied between batches,
    the newest of each kind only: dragging a slider sends many requests, and
    each superseded one would cost a recompute of the slices from every view.
    """

    def __init__(
        self,
        reconstructor: LiveReconstructor,
        source,
        *,
        frames=None,
        max_batch: int | None = None,
        max_queue_frames: int = 256,
        max_queue_bytes: int = 1 << 30,
        when_full: str | None = None,
        max_views: int | None = None,
        on_update=None,
    ):
        from .. import _validate as v

        self.rec = reconstructor
        self.source = source
        self._frames_iter = frames
        self.max_batch = default_batch(reconstructor.backend) if max_batch is None else int(max_batch)
        if when_full is None:
            when_full = "drop" if getattr(source, "lossy", False) else "wait"
        self.when_full = v.choice("when_full", when_full, ("wait", "drop"))
        self.max_views = None if max_views is None else v.positive_int("max_views", max_views)
        self.on_update = on_update
        # a batch, a move and the page's reads of slices and counters, each whole (the
        # reconstructor guards its own state; this keeps the page's counters those of its slices)
        self.lock = threading.Lock()
        self.version = 0
        self.newest_arrival_epoch = None  # time.time() of the newest frame in the slices
        self.ended = False
        self.error: BaseException | None = None
        self.request_error: str | None = None  # why the last request from the viewer failed
        self.requests_applied = 0
        self.requests_superseded = 0
        self.queue = FrameQueue(max_queue_frames, max_queue_bytes)
        self._store_full = 0
        self._pending: dict = {}  # request kind -> the newest values
        self._pending_lock = threading.Lock()
        self._stop = threading.Event()
        self._arrivals: deque = deque(maxlen=4096)
        self._threads: list[threading.Thread] = []

    @property
    def dropped(self) -> dict:
        """Frames received but not reconstructed, by reason ("queue full", "store full")."""
        out = {}
        if self.queue.dropped:
            out["queue full"] = self.queue.dropped
        if self._store_full:
            out["store full"] = self._store_full
        return out

    @property
    def bad_messages(self) -> int:
        """Messages the source could not decode (0 for sources that have none)."""
        return int(getattr(self.source, "bad_messages", 0))

    def summary(self) -> dict:
        """The run's counters (what ``leveret live --json`` writes): ``missing`` is
        the number of frames missing, ``missing_first`` the first ``MISSING_LISTED``
        of their indices."""
        st = self.rec.stats
        return {
            "received": st.received,
            "rejected": st.rejected,
            "rejected_reasons": dict(st.rejected_reasons),
            "missing": st.missing,
            "missing_first": self.rec.missing_indices(MISSING_LISTED),
            "views": self.rec.n_views,
            "dropped": sum(self.dropped.values()),
            "dropped_reasons": self.dropped,
            "bad_messages": self.bad_messages,
            "error": None if self.error is None else str(self.error),
        }

    # -- requests from the viewer ------------------------------------------------------------
    def request(self, kind: str, **values) -> None:
        """Ask for a change of the watched slices ("orthogonal" or "axial"),
        applied between batches; a newer request of the same kind not yet
        applied replaces this one."""
        with self._pending_lock:
            if kind in self._pending:
                self.requests_superseded += 1
            self._pending[kind] = values
        self.queue.wake()

    def frame_rate(self, window: float = 2.0) -> float:
        """Frames per second received over the last ``window`` seconds."""
        now = time.perf_counter()
        recent = [t for t in list(self._arrivals) if now - t <= window]
        if len(recent) < 2:
            return 0.0
        return (len(recent) - 1) / max(recent[-1] - recent[0], 1e-9)

    # -- threads ---------------------------------------------------------------------------------
    def start(self) -> None:
        reader = threading.Thread(target=self._read, name="leveret-live-source", daemon=True)
        worker = threading.Thread(target=self._work, name="leveret-live-recon", daemon=True)
        self._threads = [reader, worker]
        reader.start()
        worker.start()

    def stop(self) -> None:
        self._stop.set()
        self.queue.close()
        # FolderSource/ZmqSource stop waiting (close() is safe from any thread);
        # a generator cannot be closed from another thread while it runs: its
        # (daemon) reader thread is left behind.
        if not inspect.isgenerator(self.source):
            close = getattr(self.source, "close", None)
            if close is not None:
                close()

    def join(self, timeout: float | None = None) -> None:
        for t in self._threads:
            t.join(timeout)

    def _read(self):
        wait = self.when_full == "wait"
        try:
            for frame in self._frames_iter if self._frames_iter is not None else self.source:
                if self._stop.is_set():
                    break
                if frame is not None:
                    self._arrivals.append(frame.arrived)
                    self.queue.put(frame, wait=wait)
        except BaseException as exc:  # reported on the page and by the CLI
            log.error("source failed: %s", exc)
            self.error = exc
        finally:
            self.queue.end()

    def _apply_requests(self) -> bool:
        with self._pending_lock:
            todo, self._pending = self._pending, {}
        for kind, values in todo.items():
            try:
                with self.lock:
                    if kind == "orthogonal":
                        self.rec.watch_orthogonal(values.get("point"), values.get("angles", (0, 0, 0)))
                    elif kind == "axial":
                        self.rec.watch_axial(values.get("z", []))
                    else:
                        raise ValueError(f"kind: expected 'orthogonal' or 'axial', got {kind!r}")
                self.requests_applied += 1
                self.request_error = None
            except (ValueError, TypeError) as exc:
                log.warning("request %s ignored: %s", kind, exc)
                self.request_error = f"{kind}: {exc}"
        return bool(todo)

    def _room(self, batch: list) -> list:
        """The frames of ``batch`` the store has room for; the others are counted as dropped."""
        if self.max_views is None:
            return batch
        room = max(0, self.max_views - self.rec.n_views)
        if len(batch) > room:
            if self._store_full == 0:
                log.warning("%d views stored (max_views): later frames are counted, not reconstructed", self.max_views)
            self._store_full += len(batch) - room
        return batch[:room]

    def _work(self):
        try:
            while True:
                batch, end = self.queue.get_batch(self.max_batch)
                changed = self._apply_requests()
                batch = self._room(batch)
                if batch:
                    offset = time.time() - time.perf_counter()
                    with self.lock:
                        self.rec.add_frames(batch)
                    self.newest_arrival_epoch = max(f.arrived for f in batch) + offset
                    changed = True
                if changed:
                    self.version += 1
                    if self.on_update is not None:
                        self.on_update()
                if end or self._stop.is_set():
                    break
        except BaseException as exc:
            log.error("reconstruction failed: %s", exc)
            self.error = exc
        finally:
            self.ended = True
            if self.on_update is not None:
                self.on_update()


def to_uint8(image: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``image`` mapped linearly from [lo, hi] to 0..255 (clipped; NaN to 0)."""
    scale = 255.0 / (hi - lo) if hi > lo else 0.0
    out = np.clip((image - lo) * scale + 0.5, 0, 255)
    return np.nan_to_num(out, nan=0.0, copy=False).astype(np.uint8)


def auto_range(images) -> tuple[float, float]:
    """The 0.5 and 99.5 percentiles of the finite values of all images (a robust default window)."""
    values = np.concatenate([np.asarray(i, np.float32).reshape(-1) for i in images]) if images else np.zeros(1)
    values = values[np.isfinite(values)]
    lo, hi = np.percentile(values, [0.5, 99.5]) if values.size else (0.0, 1.0)
    return float(lo), float(hi if hi > lo else lo + 1.0)


def _binary(name: str, image: np.ndarray) -> bytes:
    header = json.dumps({"name": name, "height": int(image.shape[0]), "width": int(image.shape[1])}).encode()
    return struct.pack("<I", len(header)) + header + np.ascontiguousarray(image, np.uint8).tobytes()


class LiveServer:
    """The web viewer of a :class:`LiveSession`.

    Parameters
    ----------
    session : LiveSession
    host, port : str, int
        Where to listen; the default host is this machine only. Port 0 picks a free one.
    output : path, optional
        The only folder the server writes to (the page's "save" button); None: it writes nothing.
    min_interval : float
        Seconds between two pushes to a page (updates in between are merged).
    allow_origins : list of str, optional
        Web origins (``"https://viewer.example.org:8443"``) whose pages may
        use the websocket besides the server's own address (their host names
        are also accepted in the ``Host`` header).
    token : str, optional
        A secret every request must carry (at least ``MIN_TOKEN`` characters
        of ``A-Z a-z 0-9 . _ ~ -``). Default: none on a loopback host, else
        one generated here (``secrets.token_urlsafe``); :attr:`url` carries it.
    max_saves_per_minute : int
        The page's "save" requests answered per minute (one at a time);
        others get an error.

    Notes
    -----
    Who may use the server:

    - The ``Host`` header must name the address served: a loopback host
      answers ``localhost`` and loopback addresses only; a named host its
      name (and loopback names); ``0.0.0.0`` or ``::`` any IP address, this
      machine's names and loopback names. Host names of ``allow_origins``
      are accepted too. Others get HTTP 403: a page of another site whose
      name was made to resolve to this machine (DNS rebinding) is refused.
    - With a token (always beyond loopback), every request carries it: the
      query ``?token=``, the header ``Authorization: Bearer``, or the cookie
      that opening ``/?token=...`` sets (HttpOnly, SameSite=Strict; the page
      is then reloaded without the token in its address). Else HTTP 401.
    - A browser sends the ``Origin`` of the page opening a websocket. The
      websocket is refused (HTTP 403) to a page of any other origin than the
      address served (for a loopback host, ``127.0.0.1``, ``localhost`` and
      ``[::1]`` at the same port; for ``0.0.0.0`` or ``::``, the address the
      page was loaded from, once its Host passed) and ``allow_origins``, so
      that a page on another site cannot drive the server through the user's
      browser. Clients that send no ``Origin`` (not browsers) are let in.
    """

    def __init__(
        self,
        session: LiveSession,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        output=None,
        min_interval: float = 0.03,
        allow_origins=(),
        token: str | None = None,
        max_saves_per_minute: int = 10,
    ):
        from .. import _validate as v

        self.session = session
        self.host, self.port = host, int(port)
        self.allow_origins = {normalise_origin("allow_origins", o) for o in allow_origins}
        self.output = None if output is None else Path(output).resolve()
        self.min_interval = float(min_interval)
        check_token(token)
        if token is None and not _is_loopback(host):
            token = secrets.token_urlsafe(24)
        self.token = token
        self.max_saves_per_minute = v.positive_int("max_saves_per_minute", max_saves_per_minute)
        self._host_names = self._names_served()
        self.url: str | None = None
        self.addresses: list[tuple] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clients: dict = {}  # websocket -> its state (event, colour range)
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._shutdown: asyncio.Event | None = None
        self._saves = 0
        self._save_times: deque = deque()  # loop time of the recent saves
        self._saving = False

    # -- running -------------------------------------------------------------------------------
    def start(self) -> str:
        """Serve from a background thread; returns the URL once listening."""
        self._thread = threading.Thread(target=lambda: asyncio.run(self.serve()), name="leveret-live-http", daemon=True)
        self._thread.start()
        if not self._ready.wait(30) or self.url is None:
            raise RuntimeError(f"the live viewer did not start on {self.host}:{self.port}")
        return self.url

    def stop(self) -> None:
        if self._loop is not None and self._shutdown is not None:
            self._loop.call_soon_threadsafe(self._shutdown.set)
        if self._thread is not None:
            self._thread.join(10)

    async def serve(self) -> None:
        """Serve until :meth:`stop` (or the task is cancelled)."""
        from aiohttp import web

        self._loop = asyncio.get_running_loop()
        self._shutdown = asyncio.Event()

        @web.middleware
        async def guard(request, handler):
            return await self._guard(request, handler)

        app = web.Application(middlewares=[guard])
        app.router.add_get("/", self._index)
        app.router.add_get("/ws", self._websocket)
        app.router.add_static("/static/", STATIC, show_index=False, follow_symlinks=False)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
            self.addresses = [tuple(a[:2]) for a in runner.addresses]  # (host, port) listened on
            self.port = self.addresses[0][1]
            host = f"[{self.host}]" if ":" in self.host else self.host
            self.url = f"http://{host}:{self.port}/" + (f"?token={self.token}" if self.token else "")
        finally:
            self._ready.set()
        self.session.on_update = self._notify_threadsafe
        try:
            await self._shutdown.wait()
        finally:
            for ws in list(self._clients):
                await ws.close()
            await runner.cleanup()

    # -- who may ask -----------------------------------------------------------------------------
    def _names_served(self) -> set:
        """Host names (not addresses) the Host header may carry, besides loopback ones."""
        names = {urlsplit(o).hostname for o in self.allow_origins}
        host = self.host.strip("[]").lower()
        if _is_wildcard(self.host):
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        elif not _is_ip(host):
            names.add(host)
        return {n for n in names if n}

    def host_allowed(self, host_header: str | None) -> bool:
        """Whether a request's ``Host`` names the address served (class notes)."""
        try:
            name = urlsplit("//" + (host_header or "")).hostname
        except ValueError:
            return False
        if not name:
            return False
        if _is_loopback(name) or name in self._host_names:
            return True
        if _is_loopback(self.host):
            return False
        if _is_wildcard(self.host):
            return _is_ip(name)  # an address cannot be made to point elsewhere by DNS
        return name == self.host.strip("[]").lower()

    def _token_of(self, request) -> str | None:
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return auth[len("Bearer ") :].strip()
        return request.query.get("token") or request.cookies.get(self._cookie)

    @property
    def _cookie(self) -> str:
        return f"leveret_live_{self.port}"

    def token_ok(self, given: str | None) -> bool:
        """Whether ``given`` is the server's token (always true without one)."""
        if self.token is None:
            return True
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    async def _guard(self, request, handler):
        """Middleware: the Host, then the token, of every request (class notes)."""
        from aiohttp import web

        if not self.host_allowed(request.host):
            log.warning("request refused: host %s is not served here", str(request.host)[:100])
            raise web.HTTPForbidden(text=f"host: {str(request.host)[:100]} is not served here")
        if not self.token_ok(self._token_of(request)):
            raise web.HTTPUnauthorized(text="token: open the address leveret live printed, with its ?token=")
        if self.token is not None and request.path == "/" and "token" in request.query:
            response = web.HTTPSeeOther("/")  # the cookie carries the token; the address bar does not
            response.set_cookie(self._cookie, self.token, httponly=True, samesite="Strict", path="/")
            response.headers["Cache-Control"] = "no-store"
            raise response
        response = await handler(request)
        if self.token is not None and not response.prepared:
            response.headers["Cache-Control"] = "no-store"  # a browser asks again, with the token, each time
        return response

    # -- handlers --------------------------------------------------------------------------------
    async def _index(self, request):
        from aiohttp import web

        return web.FileResponse(STATIC / "index.html")

    def _notify_threadsafe(self):
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._notify)
            except RuntimeError:  # the loop closed meanwhile
                pass

    def _notify(self):
        for client in self._clients.values():
            client["event"].set()

    def origin_allowed(self, origin: str | None, host_header: str | None = None) -> bool:
        """Whether a page of ``origin`` may use the websocket (see the class notes);
        ``host_header`` is the request's ``Host`` (for a server on all interfaces)."""
        if origin is None:
            return True
        try:
            origin = normalise_origin("origin", origin)
        except ValueError:
            return False  # "null" (a file or sandboxed page) and other non-URLs
        if origin in self.allow_origins:
            return True
        parts = urlsplit(origin)
        default_port = 443 if parts.scheme == "https" else 80
        if (parts.port or default_port) != self.port:
            return False
        if _is_wildcard(self.host):
            own = urlsplit("//" + (host_header or "")).hostname
            return own is not None and parts.hostname == own.lower()
        if _is_loopback(self.host):
            return _is_loopback(parts.hostname)
        return parts.hostname == self.host.strip("[]").lower()

    async def _websocket(self, request):
        from aiohttp import WSMsgType, web

        origin = request.headers.get("Origin")
        if not self.origin_allowed(origin, request.headers.get("Host")):
            log.warning("websocket refused to a page of origin %s", origin)
            raise web.HTTPForbidden(
                text=f"origin: {origin} may not use this server (leveret live --allow-origin adds an origin)"
            )
        ws = web.WebSocketResponse(max_msg_size=MAX_REQUEST_BYTES)
        await ws.prepare(request)
        client = {"ws": ws, "event": asyncio.Event(), "range": None}
        self._clients[ws] = client
        sender = asyncio.create_task(self._push(client))
        client["event"].set()
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    await self._handle(client, msg.data)
                elif msg.type == WSMsgType.ERROR:
                    break
        finally:
            sender.cancel()
            self._clients.pop(ws, None)
        return ws

    async def _handle(self, client, text):
        """Apply one request of the page; a bad one gets an error message, never an exception."""
        try:
            await self._request(client, text)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("viewer request ignored: %s", str(exc)[:300])
            await self._send_error(client, str(exc)[:300])
        except Exception as exc:  # a fault of ours: logged, and the page's connection goes on
            log.exception("viewer request failed")
            await self._send_error(client, f"request failed: {type(exc).__name__}")

    async def _send_error(self, client, message):
        ws = client["ws"]
        if not ws.closed:
            await ws.send_str(json.dumps({"type": "error", "message": message}))

    async def _request(self, client, text):
        try:
            msg = json.loads(text)
        except RecursionError:
            raise ValueError("request: JSON nested too deep") from None
        except ValueError as exc:
            raise ValueError(f"request: not JSON ({exc})") from None
        if not isinstance(msg, dict):  # what the text holds, not its type: a bad request
            raise ValueError(f"request: expected a JSON object, got {type(msg).__name__}")
        kind = msg.get("type")
        if kind == "orthogonal":
            point = _numbers("point", msg["point"], 3)
            angles = _numbers("angles", msg.get("angles", (0, 0, 0)), 3)
            self.session.request("orthogonal", point=point, angles=angles)
        elif kind == "axial":
            z = msg.get("z", [])
            if isinstance(z, list) and len(z) > MAX_AXIAL:
                raise ValueError(f"axial: at most {MAX_AXIAL} axial slices at once, got {len(z)}")
            self.session.request("axial", z=_numbers("z", z))
        elif kind == "range":
            client["range"] = None if msg.get("auto") else tuple(_numbers("range", [msg["lo"], msg["hi"]], 2))
            client["event"].set()
        elif kind == "save":
            await self._save_request(client)
        else:
            raise ValueError(f"unknown request type {kind!r}"[:200])

    async def _save_request(self, client):
        """One save at a time, at most ``max_saves_per_minute`` a minute."""
        if self.output is None:
            raise ValueError("save: the server was started without an output folder (--output)")
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self._save_times and now - self._save_times[0] >= 60.0:
            self._save_times.popleft()
        if self._saving:
            raise ValueError("save: a save is being written; try again when it is done")
        if len(self._save_times) >= self.max_saves_per_minute:
            wait = 60.0 - (now - self._save_times[0])
            raise ValueError(
                f"save: at most {self.max_saves_per_minute} saves a minute; try again in {math.ceil(wait)} s"
            )
        self._saving = True
        self._save_times.append(now)
        try:
            names = await loop.run_in_executor(None, self.save)
        finally:
            self._saving = False
        await client["ws"].send_str(json.dumps({"type": "saved", "files": names}))

    def save(self) -> list[str]:
        """Write the watched slices as TIFF files into the output folder; returns their names."""
        if self.output is None:
            raise ValueError("save: the server was started without an output folder (--output)")
        import tifffile

        self.output.mkdir(parents=True, exist_ok=True)
        with self.session.lock:
            images = self.session.rec.slices()
            n = self.session.rec.n_views
        self._saves += 1
        names = []
        for name, image in images.items():
            safe = "".join(c if c.isalnum() else "_" for c in name)
            path = (self.output / f"slice_{safe}_{n:06d}views_{self._saves:03d}.tif").resolve()
            if path.parent != self.output:  # names are built here; never a path from the page
                raise ValueError(f"save: {path} lies outside the output folder")
            tifffile.imwrite(path, image)
            names.append(path.name)
        return names

    def _state(self):
        """The page's state message (its "range" set by the caller); call with the session's lock held."""
        s = self.session
        rec = s.rec
        st = rec.stats
        dropped = s.dropped
        return {
            "type": "state",
            "received": st.received,
            "rejected": st.rejected,
            "dropped": sum(dropped.values()),
            "dropped_reasons": dropped,
            "bad_messages": s.bad_messages,
            "queued": len(s.queue),
            "max_views": s.max_views,
            "max_axial": MAX_AXIAL,
            "request_error": s.request_error,
            "rejected_reasons": dict(st.rejected_reasons),
            "missing": st.missing,
            "missing_first": rec.missing_indices(10),
            "views": rec.n_views,
            "fps": round(s.frame_rate(), 1),
            "lag_ms": round(1000 * st.last_lag, 1),
            "batch_ms": round(1000 * st.last_batch_seconds, 1),
            "arrived_epoch_ms": None if s.newest_arrival_epoch is None else 1000 * s.newest_arrival_epoch,
            "version": s.version,
            "ended": s.ended,
            "error": None if s.error is None else str(s.error),
            "range": None,
            "slices": [sl.to_dict() for sl in rec.watched],
            "volume": {
                "shape": list(rec.volume.shape),
                "voxel_size": list(rec.volume.voxel_size),
                "center": list(rec.volume.center),
                "extent": {a: list(rec.volume.extent(a)) for a in "xyz"},
            },
            "beam": rec.beam,
            "detector": list(rec.detector_shape),
            "can_save": self.output is not None,
        }

    async def _push(self, client):
        ws, event = client["ws"], client["event"]
        loop = asyncio.get_running_loop()
        while not ws.closed:
            await event.wait()
            event.clear()
            try:
                messages = await loop.run_in_executor(None, self._render, client["range"])
            except Exception as exc:  # logged; the page keeps its last images and gets the next update
                log.error("viewer update failed: %s", exc)
                messages = [json.dumps({"type": "error", "message": f"update failed: {exc}"})]
            for m in messages:
                if isinstance(m, str):
                    await ws.send_str(m)
                else:
                    await ws.send_bytes(m)
            await asyncio.sleep(self.min_interval)

    def _render(self, window):
        """The state message and the 8-bit images (run in a worker thread)."""
        s = self.session
        with s.lock:  # the counters as of these slices, not mutated by the next batch while dumped
            images = s.rec.slices()
            sino = s.rec.sinogram()
            state = self._state()
        lo, hi = window if window is not None else auto_range(list(images.values()))
        state["range"] = [lo, hi]
        out = [json.dumps(state)]
        for name, image in images.items():
            out.append(_binary(name, to_uint8(image, lo, hi)))
        if sino.shape[0]:
            sino = sino[-1024:]
            out.append(_binary("sinogram", to_uint8(sino, *auto_range([sino]))))
        return out


def _numbers(name: str, values, length: int | None = None) -> list[float]:
    """``values`` as a list of finite floats (of ``length``), else ValueError naming ``name``."""
    if not isinstance(values, (list, tuple)) or (length is not None and len(values) != length):
        want = f"{length} numbers" if length is not None else "a list of numbers"
        raise ValueError(f"{name}: expected {want}, got {values!r}"[:200])
    out = []
    for x in values:
        value = None
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            try:
                value = float(x)
            except OverflowError:  # an integer of hundreds of digits
                pass
        if value is None or not math.isfinite(value):
            raise ValueError(f"{name}: expected finite numbers, got {reprlib.repr(x)}")
        out.append(value)
    return out


def check_token(token) -> None:
    """ValueError naming ``token`` unless it is None or at least ``MIN_TOKEN``
    characters of ``A-Z a-z 0-9 . _ ~ -`` (it travels in URLs and cookies)."""
    if token is not None and (not isinstance(token, str) or len(token) < MIN_TOKEN or not TOKEN_CHARS.fullmatch(token)):
        raise ValueError(f"token: expected at least {MIN_TOKEN} characters of A-Z a-z 0-9 . _ ~ -")


def normalise_origin(name: str, text: str) -> str:
    """The web origin ``text`` as ``scheme://host[:port]`` in lower case, without
    a trailing slash; ValueError naming ``name`` if it is not an http(s) origin."""
    parts = urlsplit(str(text).strip().rstrip("/").lower())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query:
        raise ValueError(f"{name}: expected an origin such as http://host:8000, got {text!r}")
    try:
        parts.port
    except ValueError:
        raise ValueError(f"{name}: expected an origin such as http://host:8000, got {text!r}") from None
    return f"{parts.scheme}://{parts.netloc}"


def _is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::", "[::]")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
