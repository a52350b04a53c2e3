"""The live viewer: a reconstruction thread and an aiohttp web app.

:class:`LiveSession` reads a source in a thread, hands the frames that
arrived together to :meth:`LiveReconstructor.add_frames` in one batch, and
applies the viewer's requests (move or rotate the slices, axial slices)
between batches. :class:`LiveServer` serves ``static/`` and pushes the
slices over a websocket as 8-bit images, with the colour range applied on
the server; text messages carry the counters.

Websocket protocol (the page in ``static/`` is its only client):

- server -> page, text: ``{"type": "state", ...}`` (counters, slices, range);
- server -> page, binary: ``uint32 little-endian n``, then ``n`` bytes of a JSON
  header ``{"name", "width", "height"}``, then ``width * height`` uint8 pixels;
- page -> server, text: ``{"type": "orthogonal", "point": [x, y, z],
  "angles": [a, b, c]}``, ``{"type": "axial", "z": [...]}``,
  ``{"type": "range", "lo": .., "hi": ..}`` or ``{"type": "range", "auto": true}``,
  ``{"type": "save"}`` (the slices as TIFF files into the output folder).
"""
from __future__ import annotations

import asyncio
import inspect
import json
import logging
import queue
import struct
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np

from .reconstructor import LiveReconstructor

log = logging.getLogger("leveret.live")

STATIC = Path(__file__).resolve().parent / "static"


def default_batch(backend: str) -> int:
    """Frames per filter + back-projection call: 16 on the CPU (measured 1.3-1.7x
    the frame rate of 64 on 2 cores, docs/performance.md), 64 on a GPU."""
    return 16 if backend == "cpu" else 64


class LiveSession:
    """A source feeding a :class:`LiveReconstructor` in a background thread.

    Parameters
    ----------
    reconstructor : LiveReconstructor
    source : iterable of Frame (or None while nothing arrives)
    max_batch : int, optional
        At most this many frames per filter + back-projection call; default
        :func:`default_batch` (16 on the CPU, where larger batches' temporaries
        leave the caches, 64 on a GPU).
    on_update : callable, optional
        Called (in the reconstruction thread) after every batch.
    """

    def __init__(self, reconstructor: LiveReconstructor, source, *, max_batch: int | None = None,
                 on_update=None):
        self.rec = reconstructor
        self.source = source
        self.max_batch = default_batch(reconstructor.backend) if max_batch is None else int(max_batch)
        self.on_update = on_update
        self.lock = threading.Lock()          # guards the reconstructor between threads
        self.version = 0
        self.newest_arrival_epoch = None      # time.time() of the newest frame in the slices
        self.ended = False
        self.error: BaseException | None = None
        self._requests: queue.Queue = queue.Queue()
        self._frames: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._arrivals: deque = deque(maxlen=4096)
        self._threads: list[threading.Thread] = []

    # -- requests from the viewer ------------------------------------------------------------
    def request(self, kind: str, **values) -> None:
        """Queue a change of the watched slices ("orthogonal" or "axial"), applied between batches."""
        self._requests.put((kind, values))
        self._frames.put(_WAKE)

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
        self._frames.put(_WAKE)
        # FolderSource/ZmqSource stop waiting; a generator cannot be closed from
        # another thread while it runs: its (daemon) reader thread is left behind.
        if not inspect.isgenerator(self.source):
            close = getattr(self.source, "close", None)
            if close is not None:
                close()

    def join(self, timeout: float | None = None) -> None:
        for t in self._threads:
            t.join(timeout)

    def _read(self):
        try:
            for frame in self.source:
                if self._stop.is_set():
                    break
                if frame is not None:
                    self._arrivals.append(frame.arrived)
                    self._frames.put(frame)
        except BaseException as exc:   # reported on the page and by the CLI
            log.error("source failed: %s", exc)
            self.error = exc
        finally:
            self._frames.put(_END)

    def _apply_requests(self) -> bool:
        changed = False
        while True:
            try:
                kind, values = self._requests.get_nowait()
            except queue.Empty:
                return changed
            try:
                with self.lock:
                    if kind == "orthogonal":
                        self.rec.watch_orthogonal(values.get("point"), values.get("angles", (0, 0, 0)))
                    elif kind == "axial":
                        self.rec.watch_axial(values.get("z", []))
                changed = True
            except (ValueError, TypeError) as exc:
                log.warning("request %s ignored: %s", kind, exc)

    def _work(self):
        try:
            while True:
                item = self._frames.get()
                batch, end = [], False
                while True:
                    if item is _END:
                        end = True
                    elif item is not _WAKE:
                        batch.append(item)
                    if len(batch) >= self.max_batch or end:
                        break
                    try:
                        item = self._frames.get_nowait()
                    except queue.Empty:
                        break
                changed = self._apply_requests()
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


_WAKE = object()
_END = object()


def to_uint8(image: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``image`` mapped linearly from [lo, hi] to 0..255 (clipped)."""
    scale = 255.0 / (hi - lo) if hi > lo else 0.0
    return np.clip((image - lo) * scale + 0.5, 0, 255).astype(np.uint8)


def auto_range(images) -> tuple[float, float]:
    """The 0.5 and 99.5 percentiles over all images (a robust default window)."""
    values = np.concatenate([np.asarray(i, np.float32).reshape(-1) for i in images]) if images else np.zeros(1)
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
    """

    def __init__(self, session: LiveSession, *, host: str = "127.0.0.1", port: int = 8000, output=None,
                 min_interval: float = 0.03):
        self.session = session
        self.host, self.port = host, int(port)
        self.output = None if output is None else Path(output).resolve()
        self.min_interval = float(min_interval)
        self.url: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clients: dict = {}   # websocket -> its state (event, colour range)
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._shutdown: asyncio.Event | None = None
        self._saves = 0

    # -- running -------------------------------------------------------------------------------
    def start(self) -> str:
        """Serve from a background thread; returns the URL once listening."""
        self._thread = threading.Thread(target=lambda: asyncio.run(self.serve()), name="leveret-live-http",
                                        daemon=True)
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
        app = web.Application()
        app.router.add_get("/", self._index)
        app.router.add_get("/ws", self._websocket)
        app.router.add_static("/static/", STATIC, show_index=False, follow_symlinks=False)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
            port = runner.addresses[0][1]
            self.url = f"http://{self.host}:{port}/"
        finally:
            self._ready.set()
        self.session.on_update = self._notify_threadsafe
        try:
            await self._shutdown.wait()
        finally:
            for ws in list(self._clients):
                await ws.close()
            await runner.cleanup()

    # -- handlers --------------------------------------------------------------------------------
    async def _index(self, request):
        from aiohttp import web
        return web.FileResponse(STATIC / "index.html")

    def _notify_threadsafe(self):
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._notify)
            except RuntimeError:   # the loop closed meanwhile
                pass

    def _notify(self):
        for client in self._clients.values():
            client["event"].set()

    async def _websocket(self, request):
        from aiohttp import WSMsgType, web

        ws = web.WebSocketResponse(max_msg_size=1 << 20)
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
        try:
            msg = json.loads(text)
            kind = msg.get("type")
            if kind == "orthogonal":
                point = [float(x) for x in msg["point"]]
                angles = [float(a) for a in msg.get("angles", (0, 0, 0))]
                self.session.request("orthogonal", point=point, angles=angles)
            elif kind == "axial":
                self.session.request("axial", z=[float(z) for z in msg.get("z", [])])
            elif kind == "range":
                client["range"] = None if msg.get("auto") else (float(msg["lo"]), float(msg["hi"]))
                client["event"].set()
            elif kind == "save":
                names = await asyncio.get_running_loop().run_in_executor(None, self.save)
                await client["ws"].send_str(json.dumps({"type": "saved", "files": names}))
            else:
                raise ValueError(f"unknown request type {kind!r}")
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("viewer request ignored: %s", exc)
            await client["ws"].send_str(json.dumps({"type": "error", "message": str(exc)}))

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
            if path.parent != self.output:   # names are built here; never a path from the page
                raise ValueError(f"save: {path} lies outside the output folder")
            tifffile.imwrite(path, image)
            names.append(path.name)
        return names

    def _state(self, lo, hi):
        s = self.session
        rec = s.rec
        st = rec.stats
        return {
            "type": "state", "received": st.received, "rejected": st.rejected,
            "rejected_reasons": st.rejected_reasons, "missing": len(st.missing),
            "missing_first": st.missing[:10], "views": rec.n_views, "fps": round(s.frame_rate(), 1),
            "lag_ms": round(1000 * st.last_lag, 1), "batch_ms": round(1000 * st.last_batch_seconds, 1),
            "arrived_epoch_ms": None if s.newest_arrival_epoch is None else 1000 * s.newest_arrival_epoch,
            "version": s.version, "ended": s.ended, "error": None if s.error is None else str(s.error),
            "range": [lo, hi], "slices": [sl.to_dict() for sl in rec.watched],
            "volume": {"shape": list(rec.volume.shape), "voxel_size": list(rec.volume.voxel_size),
                       "center": list(rec.volume.center),
                       "extent": {a: list(rec.volume.extent(a)) for a in "xyz"}},
            "beam": rec.beam, "detector": list(rec.detector_shape), "can_save": self.output is not None,
        }

    async def _push(self, client):
        ws, event = client["ws"], client["event"]
        loop = asyncio.get_running_loop()
        while not ws.closed:
            await event.wait()
            event.clear()
            messages = await loop.run_in_executor(None, self._render, client["range"])
            for m in messages:
                if isinstance(m, str):
                    await ws.send_str(m)
                else:
                    await ws.send_bytes(m)
            await asyncio.sleep(self.min_interval)

    def _render(self, window):
        """The state message and the 8-bit images (run in a worker thread)."""
        s = self.session
        with s.lock:
            images = s.rec.slices()
            sino = s.rec.sinogram()
        lo, hi = window if window is not None else auto_range(list(images.values()))
        out = [json.dumps(self._state(lo, hi))]
        for name, image in images.items():
            out.append(_binary(name, to_uint8(image, lo, hi)))
        if sino.shape[0]:
            sino = sino[-1024:]
            out.append(_binary("sinogram", to_uint8(sino, *auto_range([sino]))))
        return out
