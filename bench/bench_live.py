"""Benchmark of live reconstruction (leveret.live): a table and optional JSON.

Measures, for frames of ROWS x COLS into the three orthogonal slices of a
ROWS x COLS x COLS volume (one xy slice of COLS^2, xz and yz of ROWS x COLS).
The frames are delivered as a camera or its receiver writes them: raw uint16
counts with a flat and a dark field (``--dtype uint16``, the default; or
float32 line integrals with ``--dtype float32``), each in a buffer from
``LiveReconstructor.frame_buffer()`` (pinned host memory on a GPU):

- sustained frames/s: frames produced at --rate by a paced thread, the
  reconstruction draining what arrived in batches of up to --batch (as
  ``leveret live`` does); "kept up" means it finished within 5 % of the
  scan's duration with no backlog;
- latency: a frame's arrival to its contribution being in ``slices()``
  (median, 95th percentile, max);
- unpaced frames/s: the same frames as fast as the reconstruction takes them;
- per stage, GPU time per frame (CUDA events: upload, correct, filter,
  back-project, store), and the bound of the uploads: frame bytes over
  55 GB/s (pinned host-to-device on an H100/H200 host);
- moving a slice after all frames: time to recompute one rotated slice (the
  target's unit) and the three;
- ZeroMQ, on this host: a sender process per stream sends the frames as fast
  as they go over --streams parallel PUSH/PULL streams (--transport ipc or
  tcp, sent without a copy), and ``ZmqSource(threads=streams)`` receives
  them into the reconstructor's frame pool (each checked, then copied
  once; with --zmq-processes read by child processes, ``processes=True``,
  whose shared memory is lent to the pool without a copy):
  frames/s and GB/s for each count of streams, with the CPU time per frame of
  the receiving processes and the senders; then the same stream, at the
  largest count, through ``LiveSession`` into the reconstruction (what
  ``leveret live ADDR1,ADDR2,...`` does): frames/s received and reconstructed.

Examples::

    python bench/bench_live.py --backend cpu --cols 512 --rows 512 --rate 200
    python bench/bench_live.py --backend cuda --cols 2048 --rows 2048 --frames 1500 --rate 2000 \\
        --storage float16 --out live.json
    python bench/bench_live.py --backend cuda --rows 2160 --cols 2560 --frames 1500 --rate 2000 \\
        --storage float16 --streams 1,2,4,8 --transport ipc --out live.json
    python bench/bench_live.py --zmq-only --rows 2160 --cols 2560 --streams 1,2 --frames 64
    python bench/bench_live.py --zmq-only --zmq-processes --rows 2160 --cols 2560 --streams 1,4,8
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import queue
import resource
import shutil
import socket
import sys
import tempfile
import threading
import time

import numpy as np


PINNED_GBPS = 55.0  # host-to-device from pinned memory, measured on the H100/H200 hosts


def _sync(rec):
    rec.synchronize()


def make_frames(rows, cols, n, dtype, seed=0):
    """4 distinct frames (their content does not change the timing) in ``dtype``:
    uint16 counts (with the flat and dark to correct them) or float32 line integrals."""
    rng = np.random.default_rng(seed)
    lines = rng.random((4, rows, cols), dtype=np.float32)
    if dtype == "float32":
        return lines, None, None, np.linspace(0, np.pi, n, endpoint=False)
    dark = np.full((rows, cols), 100.0, np.float32)
    flat = np.full((rows, cols), 40000.0, np.float32)
    counts = (dark + (flat - dark) * np.exp(-lines)).astype(np.uint16)
    return counts, flat, dark, np.linspace(0, np.pi, n, endpoint=False)


def build(args, flat, dark):
    """The reconstructor of the scan: every frame carries its angle, the geometry gives the detector."""
    import leveret
    from leveret.live import LiveReconstructor

    vol = leveret.VolumeGeometry((args.rows, args.cols, args.cols))
    geometry = leveret.ParallelGeometry([0.0], args.cols, args.rows)
    return LiveReconstructor(
        vol,
        geometry,
        planned=False,
        backend=args.backend,
        storage=args.storage,
        max_views=args.frames,
        flat=flat,
        dark=dark,
        max_batch=args.batch,
    )


_filled: set = set()


def deliver(rec, frames, i, angle):
    """Frame i as a camera delivers it: in a buffer of the reconstructor's pool.
    Writing it is the camera's (DMA) work, not timed: a buffer is filled once,
    when the pool first hands it out, and keeps that content when recycled."""
    from leveret.live import Frame

    src = frames[i % len(frames)]
    buf = rec.frame_buffer(src.dtype)
    if id(buf) not in _filled:
        buf[...] = src
        _filled.add(id(buf))
    return Frame(buf, i, angle=float(angle))


def warm_up(args, frames, flat, dark):
    rec = build(args, flat, dark)
    rec.add_frames([deliver(rec, frames, i, 0.1 * i) for i in range(min(args.batch, args.frames))])
    rec.watch_orthogonal(angles=(10.0, 5.0, 0.0))
    rec.synchronize()


def paced(args, frames, angles, flat, dark):
    """Frames produced at args.rate; drained in batches. Returns (fps, latencies, kept_up, rec)."""
    rec = build(args, flat, dark)
    rec.frame_pool.reserve(8 * args.batch, frames.dtype)  # pinned buffers allocated before the scan
    q: queue.Queue = queue.Queue()
    n = args.frames

    def produce():
        t0 = time.perf_counter()
        for i in range(n):
            wait = t0 + i / args.rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            q.put(deliver(rec, frames, i, angles[i]))

    producer = threading.Thread(target=produce, daemon=True)
    latencies = []
    pending: list = []

    def settle(wait):
        while pending and (wait or pending[0][0] is None or pending[0][0].done):
            event, arrivals = pending.pop(0)
            if event is not None:
                event.synchronize()
            now = time.perf_counter()
            latencies.extend(now - a for a in arrivals)

    done = 0
    t0 = time.perf_counter()
    producer.start()
    while done < n:
        batch = [q.get()]
        while len(batch) < args.batch:
            try:
                batch.append(q.get_nowait())
            except queue.Empty:
                break
        rec.add_frames(batch)
        # a frame is visible once the work queued for it is done: polled, so that the
        # next batch's uploads can overlap this one's kernels (no wait on the GPU here)
        pending.append((rec.ready_event(), [f.arrived for f in batch]))
        settle(False)
        done += len(batch)
    settle(True)
    elapsed = time.perf_counter() - t0
    kept_up = elapsed <= 1.05 * n / args.rate + 0.05
    return n / elapsed, np.array(latencies), kept_up, rec


def unpaced(args, frames, angles, flat, dark):
    """Frames/s and GPU seconds per stage with frames as fast as the reconstruction takes them."""
    rec = build(args, flat, dark)
    rec.frame_pool.reserve(2 * args.batch, frames.dtype)
    n, batch = args.frames, args.batch
    t0 = time.perf_counter()
    for k in range(0, n, batch):
        rec.add_frames([deliver(rec, frames, i, angles[i]) for i in range(k, min(n, k + batch))])
    _sync(rec)
    return n / (time.perf_counter() - t0), rec.gpu_seconds


def move(rec, repeats=3):
    """Seconds to recompute (one rotated slice, the three orthogonal slices, one
    slice along the axes) at a new point and rotation from every view received
    (best of repeats)."""
    from leveret.live import orthogonal_slices

    vol = rec.volume
    best1 = best3 = best_axis = np.inf
    for r in range(repeats):
        point = (vol.coordinates("x")[vol.nx // 5 + r], vol.coordinates("y")[vol.ny // 3], 0.0)
        axis = orthogonal_slices(vol, point)[1]  # xz at another y: the exact kernel
        others = [s for s in rec.watched if s.name != "xz"]
        _sync(rec)
        t0 = time.perf_counter()
        rec.watch([axis] + others)
        _sync(rec)
        best_axis = min(best_axis, time.perf_counter() - t0)
        point = (vol.coordinates("x")[vol.nx // 3 + r], vol.coordinates("y")[vol.ny // 4], 0.0)
        _sync(rec)
        t0 = time.perf_counter()
        rec.watch_orthogonal(point, angles=(10.0 + r, 5.0, 0.0))
        _sync(rec)
        best3 = min(best3, time.perf_counter() - t0)
        one = orthogonal_slices(vol, point, angles=(20.0 + r, 5.0, 0.0))[0]
        others = [s for s in rec.watched if s.name != "xy"]
        _sync(rec)
        t0 = time.perf_counter()
        rec.watch([one] + others)
        _sync(rec)
        best1 = min(best1, time.perf_counter() - t0)
    return best1, best3, best_axis


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (all its threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _children_cpu_seconds(source) -> float:
    """CPU seconds so far of a source's receiving child processes (Linux's /proc; 0 elsewhere)."""
    total = 0.0
    for pid in source.receiver_pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            pass
    return total


def _endpoints(transport, n, folder):
    """n endpoints on this host: ipc:// paths in ``folder``, or free TCP ports of 127.0.0.1."""
    if transport == "ipc":
        return [f"ipc://{folder}/stream{k}" for k in range(n)]
    out = []
    for _ in range(n):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            out.append(f"tcp://127.0.0.1:{s.getsockname()[1]}")
    return out


def _send(endpoint, indices, rows, cols, dtype, n, hwm, cpu):
    """A sender process: the frames ``indices`` of n (4 distinct images, as
    make_frames) with their angles to ``endpoint`` as fast as they go, without
    a copy; puts its CPU seconds on ``cpu``."""
    from leveret.live import Frame
    from leveret.live.sources import send_frames

    images = make_frames(rows, cols, n, dtype)[0]
    angles = np.linspace(0, np.pi, n, endpoint=False)
    t0 = _cpu_seconds()
    send_frames(
        endpoint,
        (Frame(images[i % len(images)], i, angle=float(angles[i])) for i in indices),
        hwm=hwm,
        connect_wait=0.5,
        copy=False,
        linger=60.0,
    )  # a busy reader still gets the end
    cpu.put(_cpu_seconds() - t0)


def _zmq_stream(args, streams, n, folder):
    """A ZmqSource of ``streams`` threads (or child processes) and a sender
    process per stream, n frames dealt among them (not started): (source,
    senders)."""
    from leveret.live.sources import ZmqSource

    endpoints = _endpoints(args.transport, streams, folder)
    source = ZmqSource(
        endpoints,
        threads=streams,
        timeout=1.0,
        stop_at_end=True,
        hwm=args.zmq_hwm,
        detector_shape=(args.rows, args.cols),
        processes=args.zmq_processes,
    )
    spawn = multiprocessing.get_context("spawn")  # no fork of a process that holds a CUDA context
    cpu = spawn.Queue()
    senders = _Senders(
        [
            spawn.Process(
                target=_send, args=(e, range(k, n, streams), args.rows, args.cols, args.dtype, n, args.zmq_hwm, cpu)
            )
            for k, e in enumerate(endpoints)
        ],
        cpu,
    )
    return source, senders


class _Senders:
    """The sender processes of one run, started, watched and joined together."""

    def __init__(self, processes, cpu):
        self.processes, self._cpu = processes, cpu

    def start(self):
        for p in self.processes:
            p.start()

    def join(self):
        for p in self.processes:
            p.join()

    @property
    def exitcode(self):
        """The first failure's exit code, else 0 once all have ended, else None."""
        codes = [p.exitcode for p in self.processes]
        failed = [c for c in codes if c not in (None, 0)]
        return failed[0] if failed else (0 if all(c == 0 for c in codes) else None)

    def cpu_seconds(self) -> float:
        return sum(self._cpu.get(timeout=60) for _ in self.processes)


#: Seconds without a message, after the sender processes ended, before a run gives up.
SENDER_GONE = 10.0


def _check_sender(senders, quiet_since) -> None:
    """RuntimeError if a sender process failed, or they ended SENDER_GONE seconds
    ago and messages are still missing (a run never waits forever)."""
    if senders.exitcode is not None and senders.exitcode != 0:
        raise RuntimeError(f"ZeroMQ: a sender process failed (exit code {senders.exitcode})")
    if senders.exitcode == 0 and time.monotonic() - quiet_since > SENDER_GONE:
        raise RuntimeError(
            f"ZeroMQ: the senders ended {SENDER_GONE:.0f} s ago and their end-of-scan messages have not all come"
        )


def zmq_receive(args, rec, streams, folder):
    """Frames over ``streams`` parallel ZeroMQ streams into ``rec``'s frame
    buffers (each given back at once): frames/s and GB/s after the first
    few frames, and CPU milliseconds per frame of the receiving processes
    (this one and its receiving children) and of the senders."""
    n = args.zmq_frames
    source, sender = _zmq_stream(args, streams, n, folder)
    source.buffers = rec.frame_pool
    rec.frame_pool.reserve((source.QUEUED + 2) * streams + 4, np.dtype(args.dtype))
    arrivals = []
    t_cpu = _cpu_seconds() + _children_cpu_seconds(source)
    sender.start()
    quiet_since = time.monotonic()
    try:
        for frame in source:
            if frame is not None:
                quiet_since = time.monotonic()
                arrivals.append(frame.arrived)
                rec.frame_pool.release(frame.data)
            else:
                _check_sender(sender, quiet_since)
        t_cpu = _cpu_seconds() + _children_cpu_seconds(source) - t_cpu
        source.close()  # the senders wait for their readers to go (send_frames)
        sender_cpu = sender.cpu_seconds()
    finally:
        sender.join()
        source.close()
    if len(arrivals) != n or source.bad_messages:
        raise RuntimeError(f"ZeroMQ: {len(arrivals)} of {n} frames received, {source.bad_messages} bad messages")
    skip = max(2 * streams, n // 20)  # connections and first buffers settling
    fps = (n - 1 - skip) / (arrivals[-1] - arrivals[skip])
    frame_bytes = args.rows * args.cols * np.dtype(args.dtype).itemsize
    return {
        "streams": streams,
        "fps": fps,
        "GB_per_s": fps * frame_bytes / 1e9,
        "receiver_cpu_ms_per_frame": 1e3 * t_cpu / n,
        "sender_cpu_ms_per_frame": 1e3 * sender_cpu / n,
    }


def zmq_live(args, flat, dark, streams, folder):
    """--frames frames over ``streams`` ZeroMQ streams through LiveSession into
    the reconstruction, as leveret live runs it: frames/s from the first
    frame's arrival until the last one's contribution is in the slices."""
    from leveret.live.server import LiveSession

    rec = build(args, flat, dark)
    source, sender = _zmq_stream(args, streams, args.frames, folder)
    source.buffers = rec.frame_pool
    rec.frame_pool.reserve((source.QUEUED + 2) * streams + 2 * args.batch, np.dtype(args.dtype))
    first: list = []

    def frames():
        quiet_since = time.monotonic()
        for frame in source:
            if frame is not None:
                quiet_since = time.monotonic()
                if not first:
                    first.append(frame.arrived)
            else:
                _check_sender(sender, quiet_since)
            yield frame

    session = LiveSession(rec, source, frames=frames(), max_batch=args.batch)
    session.start()
    sender.start()
    try:
        session.join()
        rec.synchronize()
        elapsed = time.perf_counter() - first[0]
        source.close()  # the senders wait for their readers to go (send_frames)
        sender.cpu_seconds()
    finally:
        sender.join()
        session.stop()
        source.close()
    if session.error is not None or rec.stats.received != args.frames:
        raise RuntimeError(
            f"ZeroMQ: {rec.stats.received} of {args.frames} frames reconstructed ({session.error or session.summary()})"
        )
    return rec.stats.received / elapsed


def _streams(text):
    try:
        out = sorted({int(t) for t in text.split(",")})
        if out[0] < 1:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected stream counts such as 1,4, got {text!r}") from None
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    p.add_argument("--backend", default="cpu", choices=("auto", "cpu", "cuda"))
    p.add_argument("--cols", type=int, default=512, help="detector columns (slices are cols^2 and rows x cols)")
    p.add_argument("--rows", type=int, default=512, help="detector rows (volume slices)")
    p.add_argument("--frames", type=int, default=400, help="frames per run (and views before moving a slice)")
    p.add_argument("--rate", type=float, default=200.0, help="produced frames per second")
    p.add_argument(
        "--batch",
        type=int,
        default=None,
        help="at most this many frames per add (default: leveret live's, 16 on the CPU, 64 on a GPU)",
    )
    p.add_argument("--storage", default="float32", choices=("float32", "float16"))
    p.add_argument(
        "--dtype",
        default="uint16",
        choices=("uint16", "float32"),
        help="frames as raw uint16 counts with flat/dark (a camera's), or float32 line integrals",
    )
    p.add_argument("--out", default=None, help="write the results as JSON to this file")
    z = p.add_argument_group("ZeroMQ")
    z.add_argument(
        "--streams",
        type=_streams,
        default=[1, 4],
        metavar="N[,N...]",
        help="parallel ZeroMQ streams (a receiving thread each) to measure, e.g. 1,2,4,8 (default "
        "1,4); the largest also feeds the reconstruction",
    )
    z.add_argument(
        "--transport",
        default="ipc",
        choices=("ipc", "tcp"),
        help="ipc:// (Unix sockets, default) or tcp:// on 127.0.0.1",
    )
    z.add_argument(
        "--zmq-frames",
        type=int,
        default=1000,
        help="frames sent per count of streams into the frame buffers (default 1000)",
    )
    z.add_argument(
        "--zmq-hwm",
        type=int,
        default=16,
        help="ZeroMQ high-water mark of each socket, both sides, in frames (default 16)",
    )
    z.add_argument(
        "--zmq-only",
        action="store_true",
        help="measure the ZeroMQ path only (not the frames handed over in this process)",
    )
    z.add_argument(
        "--zmq-processes",
        action="store_true",
        help="receive in child processes, one per stream (ZmqSource(processes=True)), not threads",
    )
    args = p.parse_args(argv)
    if args.batch is None:
        from leveret.backends import resolve
        from leveret.live.server import default_batch

        args.batch = default_batch(resolve(args.backend))

    frames, flat, dark, angles = make_frames(args.rows, args.cols, args.frames, args.dtype)
    warm_up(args, frames, flat, dark)  # compiles kernels, creates FFT plans
    frame_bytes = args.rows * args.cols * np.dtype(args.dtype).itemsize
    result = {
        "backend": None,
        "storage": args.storage,
        "dtype": args.dtype,
        "rows": args.rows,
        "cols": args.cols,
        "frames": args.frames,
        "rate": args.rate,
        "batch": args.batch,
    }
    rows = []
    if not args.zmq_only:
        rec = in_process(args, frames, angles, flat, dark, result, rows)
    else:
        rec = build(args, flat, dark)
        result["backend"] = rec.backend
        rows.append(("frames", f"{args.rows}x{args.cols} {args.dtype} ({args.storage} storage, {rec.backend})"))
    zmq_rows(args, rec, flat, dark, frame_bytes, result, rows)
    result.update({"machine": platform.platform(), "python": sys.version.split()[0]})
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return 0


def in_process(args, frames, angles, flat, dark, result, rows):
    """The frames handed over in this process: sustained and unpaced rates,
    latency, GPU time per stage, moved slices (into ``result`` and ``rows``)."""
    fps, lat, kept_up, rec = paced(args, frames, angles, flat, dark)
    fast, stages = unpaced(args, frames, angles, flat, dark)
    move1, move3, move_axis = move(rec)
    frame_bytes = args.rows * args.cols * np.dtype(args.dtype).itemsize
    bound = PINNED_GBPS * 1e9 / frame_bytes
    per_frame = {k: 1e3 * t / args.frames for k, t in stages.items()}
    result.update(
        {
            "backend": rec.backend,
            "sustained_fps": fps,
            "kept_up": bool(kept_up),
            "latency_ms": {
                "median": 1e3 * float(np.median(lat)),
                "p95": 1e3 * float(np.percentile(lat, 95)),
                "max": 1e3 * float(lat.max()),
            },
            "unpaced_fps": fast,
            "gpu_ms_per_frame": per_frame,
            "upload_bound_fps": bound if rec.backend == "cuda" else None,
            "move_one_slice_ms": 1e3 * move1,
            "move_slices_ms": 1e3 * move3,
            "move_axis_slice_ms": 1e3 * move_axis,
        }
    )
    rows += [
        (
            "frames",
            f"{args.frames} x {args.rows}x{args.cols} {args.dtype} in pool buffers "
            f"({args.storage} storage, {rec.backend})",
        ),
        ("slices", f"xy {args.cols}^2, xz and yz {args.rows}x{args.cols}"),
        (f"sustained at {args.rate:g}/s", f"{fps:.1f} frames/s ({'kept up' if kept_up else 'fell behind'})"),
        ("latency median / p95 / max", "{median:.1f} / {p95:.1f} / {max:.1f} ms".format(**result["latency_ms"])),
        ("unpaced", f"{fast:.1f} frames/s"),
    ]
    if rec.backend == "cuda":
        rows.append(("GPU ms per frame", ", ".join(f"{k} {t:.3f}" for k, t in per_frame.items())))
        rows.append(("upload bound (bytes / 55 GB/s)", f"{bound:.0f} frames/s"))
    rows += [
        (f"move 1 slice after {args.frames} frames", f"{1e3 * move1:.1f} ms"),
        (f"move 3 slices after {args.frames} frames", f"{1e3 * move3:.1f} ms"),
        ("move 1 slice along the axes (exact)", f"{1e3 * move_axis:.1f} ms"),
    ]
    return rec


def zmq_rows(args, rec, flat, dark, frame_bytes, result, rows):
    """The ZeroMQ measurements (into ``result`` and ``rows``)."""
    folder = tempfile.mkdtemp(prefix="leveret-bench-")  # the ipc:// endpoints
    try:
        received = [zmq_receive(args, rec, n, folder) for n in args.streams]
        streams = args.streams[-1]
        live_fps = zmq_live(args, flat, dark, streams, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    top = received[-1]
    result.update(
        {
            "zmq_us_per_frame": 1e6 / top["fps"],
            "zmq_MB_per_s": top["fps"] * frame_bytes / 1e6,
            "zmq_transport": args.transport,
            "zmq_receivers": "processes" if args.zmq_processes else "threads",
            "zmq_frames": args.zmq_frames,
            "zmq_receive": received,
            "zmq_live_streams": streams,
            "zmq_live_fps": live_fps,
        }
    )
    receivers = "processes" if args.zmq_processes else "threads"
    for r in received:
        rows.append(
            (
                f"ZeroMQ, {r['streams']} stream(s) ({args.transport}, {receivers}) into frame buffers",
                f"{r['fps']:.1f} frames/s ({r['GB_per_s']:.2f} GB/s); CPU ms per frame: receiving "
                f"{r['receiver_cpu_ms_per_frame']:.2f}, sending {r['sender_cpu_ms_per_frame']:.2f}",
            )
        )
    rows += [
        (
            f"ZeroMQ, {streams} stream(s) ({args.transport}, {receivers}) reconstructed",
            f"{live_fps:.1f} frames/s ({args.frames} frames)",
        ),
        (
            "ZeroMQ PUSH/PULL per frame",
            f"{1e6 / top['fps']:.0f} us ({top['fps'] * frame_bytes / 1e6:.0f} MB/s, {streams} stream(s))",
        ),
    ]


if __name__ == "__main__":
    sys.exit(main())
