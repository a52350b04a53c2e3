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
- ZeroMQ: per-frame cost of the PUSH/PULL path over TCP on this host
  (encode, send, receive, decode), and its bandwidth.

Examples::

    python bench/bench_live.py --backend cpu --cols 512 --rows 512 --rate 200
    python bench/bench_live.py --backend cuda --cols 2048 --rows 2048 --frames 1500 --rate 2000 \\
        --storage float16 --out live.json
"""
from __future__ import annotations

import argparse
import json
import platform
import queue
import socket
import sys
import threading
import time

import numpy as np


PINNED_GBPS = 55.0   # host-to-device from pinned memory, measured on the H100/H200 hosts


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
    return LiveReconstructor(vol, geometry, planned=False, backend=args.backend, storage=args.storage,
                             max_views=args.frames, flat=flat, dark=dark, max_batch=args.batch)


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
    rec.frame_pool.reserve(8 * args.batch, frames.dtype)   # pinned buffers allocated before the scan
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
        axis = orthogonal_slices(vol, point)[1]   # xz at another y: the exact kernel
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


def zmq_overhead(rows, cols, n=200):
    """(seconds per frame, MB/s) of encode + PUSH + PULL + decode over TCP on this host."""
    import zmq
    from leveret.live import Frame
    from leveret.live.sources import decode, encode

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    ctx = zmq.Context.instance()
    push, pull = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    push.bind(address)
    pull.connect(address)
    data = np.zeros((rows, cols), np.uint16)
    time.sleep(0.2)
    done = threading.Event()

    def receive():
        for _ in range(n):
            parts = pull.recv_multipart(copy=False)
            decode(json.loads(bytes(parts[0].buffer)), parts[1].buffer)
        done.set()

    t = threading.Thread(target=receive, daemon=True)
    t.start()
    t0 = time.perf_counter()
    for i in range(n):
        push.send_multipart(encode(Frame(data, i, angle=0.1 * i)), copy=False)
    done.wait()
    elapsed = time.perf_counter() - t0
    push.close(0)
    pull.close(0)
    return elapsed / n, data.nbytes * n / elapsed / 1e6


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--backend", default="cpu", choices=("auto", "cpu", "cuda"))
    p.add_argument("--cols", type=int, default=512, help="detector columns (slices are cols^2 and rows x cols)")
    p.add_argument("--rows", type=int, default=512, help="detector rows (volume slices)")
    p.add_argument("--frames", type=int, default=400, help="frames per run (and views before moving a slice)")
    p.add_argument("--rate", type=float, default=200.0, help="produced frames per second")
    p.add_argument("--batch", type=int, default=None,
                   help="at most this many frames per add (default: leveret live's, 16 on the CPU, 64 on a GPU)")
    p.add_argument("--storage", default="float32", choices=("float32", "float16"))
    p.add_argument("--dtype", default="uint16", choices=("uint16", "float32"),
                   help="frames as raw uint16 counts with flat/dark (a camera's), or float32 line integrals")
    p.add_argument("--out", default=None, help="write the results as JSON to this file")
    args = p.parse_args(argv)
    if args.batch is None:
        from leveret.backends import resolve
        from leveret.live.server import default_batch
        args.batch = default_batch(resolve(args.backend))

    frames, flat, dark, angles = make_frames(args.rows, args.cols, args.frames, args.dtype)
    warm_up(args, frames, flat, dark)   # compiles kernels, creates FFT plans
    fps, lat, kept_up, rec = paced(args, frames, angles, flat, dark)
    fast, stages = unpaced(args, frames, angles, flat, dark)
    move1, move3, move_axis = move(rec)
    zmq_s, zmq_mb = zmq_overhead(args.rows, args.cols)
    frame_bytes = args.rows * args.cols * np.dtype(args.dtype).itemsize
    bound = PINNED_GBPS * 1e9 / frame_bytes
    per_frame = {k: 1e3 * t / args.frames for k, t in stages.items()}
    result = {
        "backend": rec.backend, "storage": args.storage, "dtype": args.dtype, "rows": args.rows,
        "cols": args.cols, "frames": args.frames, "rate": args.rate, "batch": args.batch,
        "sustained_fps": fps, "kept_up": bool(kept_up),
        "latency_ms": {"median": 1e3 * float(np.median(lat)), "p95": 1e3 * float(np.percentile(lat, 95)),
                       "max": 1e3 * float(lat.max())},
        "unpaced_fps": fast, "gpu_ms_per_frame": per_frame,
        "upload_bound_fps": bound if rec.backend == "cuda" else None,
        "move_one_slice_ms": 1e3 * move1, "move_slices_ms": 1e3 * move3, "move_axis_slice_ms": 1e3 * move_axis,
        "zmq_us_per_frame": 1e6 * zmq_s, "zmq_MB_per_s": zmq_mb,
        "machine": platform.platform(), "python": sys.version.split()[0],
    }
    rows = [
        ("frames", f"{args.frames} x {args.rows}x{args.cols} {args.dtype} in pool buffers "
                   f"({args.storage} storage, {rec.backend})"),
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
        ("ZeroMQ PUSH/PULL per frame", f"{1e6 * zmq_s:.0f} us ({zmq_mb:.0f} MB/s)"),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
