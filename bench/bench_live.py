"""Benchmark of live reconstruction (leveret.live): a table and optional JSON.

Measures, for frames of ROWS x COLS into the three orthogonal slices of a
ROWS x COLS x COLS volume (one xy slice of COLS^2, xz and yz of ROWS x COLS):

- sustained frames/s: frames produced at --rate by a paced thread, the
  reconstruction draining what arrived in batches of up to --batch (as
  ``leveret live`` does); "kept up" means it finished within 5 % of the
  scan's duration with no backlog;
- latency: a frame's arrival to its contribution being in ``slices()``
  (median, 95th percentile, max);
- unpaced frames/s: the same frames as fast as the reconstruction takes them;
- moving a slice after all frames: time to recompute the three slices;
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


def _sync(rec):
    if rec.xp is not np:
        rec.xp.cuda.get_current_stream().synchronize()


def make_frames(rows, cols, n, seed=0):
    """n frames of smooth random line integrals (their content does not change the timing)."""
    rng = np.random.default_rng(seed)
    base = rng.random((4, rows, cols), dtype=np.float32)
    return [base[i % 4] for i in range(n)], np.linspace(0, np.pi, n, endpoint=False)


def build(args):
    import leveret
    from leveret.live import LiveReconstructor
    vol = leveret.VolumeGeometry((args.rows, args.cols, args.cols))
    return LiveReconstructor(vol, (args.rows, args.cols), backend=args.backend, storage=args.storage,
                             max_views=args.frames)


def paced(args, frames, angles):
    """Frames produced at args.rate; drained in batches. Returns (fps, latencies, kept_up, rec)."""
    from leveret.live import Frame
    rec = build(args)
    rec.add(frames[0], angles[0])   # warm-up: compiles, allocates
    rec = build(args)
    q: queue.Queue = queue.Queue()
    n = len(frames)

    def produce():
        t0 = time.perf_counter()
        for i in range(n):
            wait = t0 + i / args.rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            q.put(Frame(frames[i], i, angle=float(angles[i])))

    producer = threading.Thread(target=produce, daemon=True)
    latencies = []
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
        _sync(rec)
        now = time.perf_counter()
        latencies += [now - f.arrived for f in batch]
        done += len(batch)
    elapsed = time.perf_counter() - t0
    kept_up = elapsed <= 1.05 * n / args.rate + 0.05
    return n / elapsed, np.array(latencies), kept_up, rec


def unpaced(args, frames, angles):
    from leveret.live import Frame
    rec = build(args)
    rec.add(frames[0], angles[0])
    rec = build(args)
    batch = args.batch
    t0 = time.perf_counter()
    for k in range(0, len(frames), batch):
        rec.add_frames([Frame(frames[i], i, angle=float(angles[i])) for i in range(k, min(len(frames), k + batch))])
    _sync(rec)
    return len(frames) / (time.perf_counter() - t0)


def move(rec, repeats=3):
    """Seconds to recompute the three orthogonal slices at a new point and rotation (best of repeats)."""
    vol = rec.volume
    best = np.inf
    for r in range(repeats):
        point = (vol.coordinates("x")[vol.nx // 3 + r], vol.coordinates("y")[vol.ny // 4], 0.0)
        _sync(rec)
        t0 = time.perf_counter()
        rec.watch_orthogonal(point, angles=(10.0 + r, 5.0, 0.0))
        _sync(rec)
        best = min(best, time.perf_counter() - t0)
    return best


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
    p.add_argument("--out", default=None, help="write the results as JSON to this file")
    args = p.parse_args(argv)
    if args.batch is None:
        from leveret.backends import resolve
        from leveret.live.server import default_batch
        args.batch = default_batch(resolve(args.backend))

    frames, angles = make_frames(args.rows, args.cols, args.frames)
    fps, lat, kept_up, rec = paced(args, frames, angles)
    fast = unpaced(args, frames, angles)
    moved = move(rec)
    zmq_s, zmq_mb = zmq_overhead(args.rows, args.cols)
    result = {
        "backend": rec.backend, "storage": args.storage, "rows": args.rows, "cols": args.cols,
        "frames": args.frames, "rate": args.rate, "batch": args.batch,
        "sustained_fps": fps, "kept_up": bool(kept_up),
        "latency_ms": {"median": 1e3 * float(np.median(lat)), "p95": 1e3 * float(np.percentile(lat, 95)),
                       "max": 1e3 * float(lat.max())},
        "unpaced_fps": fast, "move_slices_ms": 1e3 * moved,
        "zmq_us_per_frame": 1e6 * zmq_s, "zmq_MB_per_s": zmq_mb,
        "machine": platform.platform(), "python": sys.version.split()[0],
    }
    rows = [
        ("frames", f"{args.frames} x {args.rows}x{args.cols} ({args.storage}, {rec.backend})"),
        ("slices", f"xy {args.cols}^2, xz and yz {args.rows}x{args.cols}"),
        (f"sustained at {args.rate:g}/s", f"{fps:.1f} frames/s ({'kept up' if kept_up else 'fell behind'})"),
        ("latency median / p95 / max", "{median:.1f} / {p95:.1f} / {max:.1f} ms".format(**result["latency_ms"])),
        ("unpaced", f"{fast:.1f} frames/s"),
        (f"move 3 slices after {args.frames} frames", f"{1e3 * moved:.1f} ms"),
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
