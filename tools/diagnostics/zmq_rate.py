"""ZeroMQ's own rate on this host, without leveret: 2560 x 2160 uint16 frames
(11 MB) from one sender process per stream (PUSH, zero-copy send) to one
receiving thread per stream (PULL, zero-copy receive) or, with --processes,
one receiving process per stream, optionally copied once into a preallocated
buffer, as a reader copies into pinned memory. The ceiling under
`bench/bench_live.py --zmq-only` (docs/performance.md, "Pipelines and the
newer methods"). CPU only; needs pyzmq.

    python3 tools/diagnostics/zmq_rate.py --streams 1,2,4,8 --processes
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import threading
import time

import numpy as np

FRAME_BYTES = 2160 * 2560 * 2


def sender(endpoint: str, n: int) -> None:
    import zmq

    ctx = zmq.Context(io_threads=1)
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, 16)
    sock.bind(endpoint)
    frame = np.ones(FRAME_BYTES, np.uint8)
    time.sleep(0.5)  # the reader connects
    for _ in range(n):
        sock.send(frame, copy=False)
    sock.send(b"end")
    sock.close(linger=-1)
    ctx.term()


def receive(sock, copy: bool, arrivals: list, lock) -> None:
    """Read ``sock`` to its end message, stamping each frame's arrival."""
    into = np.zeros(FRAME_BYTES, np.uint8)
    while True:
        message = sock.recv(copy=False)
        if len(message) < 16:
            return
        if copy:
            np.copyto(into, np.frombuffer(message.buffer, np.uint8))
        with lock:
            arrivals.append(time.perf_counter())


def receiver(endpoint: str, copy: bool, out) -> None:
    """A receiving process of its own (--processes): its arrival times on ``out``."""
    import zmq

    ctx = zmq.Context(io_threads=1)
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.RCVHWM, 16)
    sock.connect(endpoint)
    arrivals: list = []
    receive(sock, copy, arrivals, threading.Lock())
    sock.close(0)
    ctx.term()
    out.put(arrivals)


def rate(streams: int, transport: str, total: int, copy: bool, folder: str, processes: bool = False) -> float:
    """Frames per second over ``streams`` parallel streams, after the first few."""
    import zmq

    endpoints = [
        f"ipc://{folder}/s{k}" if transport == "ipc" else f"tcp://127.0.0.1:{6000 + k}" for k in range(streams)
    ]
    spawn = multiprocessing.get_context("spawn")
    senders = [spawn.Process(target=sender, args=(e, total // streams)) for e in endpoints]
    if processes:
        out = spawn.Queue()
        readers = [spawn.Process(target=receiver, args=(e, copy, out)) for e in endpoints]
        for p in readers + senders:
            p.start()
        arrivals = sorted(t for _ in readers for t in out.get())
        for p in readers + senders:
            p.join()
        skip = max(2 * streams, len(arrivals) // 20)
        return (len(arrivals) - 1 - skip) / (arrivals[-1] - arrivals[skip])
    ctx = zmq.Context(io_threads=streams)
    socks = []
    for e in endpoints:
        sock = ctx.socket(zmq.PULL)
        sock.setsockopt(zmq.RCVHWM, 16)
        sock.connect(e)
        socks.append(sock)
    arrivals, lock = [], threading.Lock()
    readers = [threading.Thread(target=receive, args=(s, copy, arrivals, lock)) for s in socks]
    for t in readers + senders:
        t.start()
    for t in readers + senders:
        t.join()
    for sock in socks:
        sock.close(0)
    ctx.term()
    arrivals.sort()
    skip = max(2 * streams, len(arrivals) // 20)  # connections settling
    return (len(arrivals) - 1 - skip) / (arrivals[-1] - arrivals[skip])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", default="1,2,4,8", help="stream counts, e.g. 1,2,4,8")
    p.add_argument("--frames", type=int, default=480, help="frames per measurement")
    p.add_argument("--processes", action="store_true", help="also measure one receiving process per stream")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for transport in ("ipc", "tcp"):
            for processes in (False, True) if args.processes else (False,):
                for copy in (False, True):
                    for n in (int(k) for k in args.streams.split(",")):
                        fps = rate(n, transport, args.frames, copy, folder, processes)
                        print(
                            f"{transport} {'processes' if processes else 'threads'} {n} copy {copy}: "
                            f"{fps:7.0f} frames/s, {fps * FRAME_BYTES / 1e9:5.2f} GB/s",
                            flush=True,
                        )


if __name__ == "__main__":
    main()
