"""How fast this host takes a volume's bytes into its page cache, by the path
they take: one file written by one thread or by many (``pwrite``), one file
per thread, one preallocated file written through a shared mapping (``mmap``,
with and without populating its pages first), and ``O_DIRECT``. The
difference between "one file, many threads" and "one file per thread" is the
file's own lock on buffered writes: the floor under every single-file output
(.npy, .h5). Prints one JSON line per path (GB/s, and the ``fsync`` after it).

    python3 tools/diagnostics/write_paths.py --dir /path/on/the/disk --gb 8 --threads 16
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

PIECE = 64 << 20
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)


def pieces(nbytes: int, parts: int) -> list[tuple[int, int]]:
    step = -(-nbytes // parts)
    step = -(-step // 4096) * 4096
    return [(a, min(a + step, nbytes)) for a in range(0, nbytes, step)]


def pwrite_range(fd: int, src: memoryview, a: int, b: int, base: int = 0) -> None:
    for at in range(a, b, PIECE):
        view = src[at - base : min(at + PIECE, b) - base]
        pos = at
        while view:
            n = os.pwrite(fd, view, pos)
            view, pos = view[n:], pos + n


def run(name: str, folder: Path, src: np.ndarray, threads: int) -> dict:
    nbytes = src.nbytes
    view = memoryview(src).cast("B")
    paths = [folder / f".write_paths_{name}_{i}" for i in range(threads if name == "files" else 1)]
    fds = []
    out = {"path": name, "threads": 1 if name == "pwrite1" else threads, "gb": nbytes / 1e9}
    try:
        flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if name == "direct" else 0)
        fds = [os.open(p, flags, 0o644) for p in paths]
        if name in ("fallocated", "mmap", "mmap_populate", "direct"):
            os.posix_fallocate(fds[0], 0, nbytes)
        t = time.perf_counter()
        if name == "pwrite1":
            pwrite_range(fds[0], view, 0, nbytes)
        elif name in ("pwrite", "fallocated", "direct"):
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(lambda r: pwrite_range(fds[0], view, *r), pieces(nbytes, threads)))
        elif name == "files":
            parts = pieces(nbytes, threads)
            with ThreadPoolExecutor(threads) as pool:
                list(
                    pool.map(
                        lambda i: pwrite_range(fds[i], view[parts[i][0] :], *parts[i], base=parts[i][0]),
                        range(len(parts)),
                    )
                )
        else:
            m = mmap.mmap(fds[0], nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            dst = np.frombuffer(m, np.uint8)
            flat = np.frombuffer(view, np.uint8)

            def copy(r):
                a, b = r
                if name == "mmap_populate":
                    m.madvise(MADV_POPULATE_WRITE, a, b - a)
                for at in range(a, b, PIECE):
                    np.copyto(dst[at : min(at + PIECE, b)], flat[at : min(at + PIECE, b)])

            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(copy, pieces(nbytes, threads)))
            del dst
            m.close()
        out["seconds"] = time.perf_counter() - t
        t = time.perf_counter()
        for fd in fds:
            os.fsync(fd)
        out["fsync_seconds"] = time.perf_counter() - t
        out["GB_per_s"] = nbytes / out["seconds"] / 1e9
    except OSError as exc:
        out["error"] = str(exc)
    finally:
        for fd in fds:
            os.close(fd)
        for p in paths:
            p.unlink(missing_ok=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, default=Path("."), help="a folder on the disk to measure")
    p.add_argument("--gb", type=float, default=8.0, help="bytes written by each path, in GB")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument(
        "--paths",
        default="pwrite1,pwrite,fallocated,files,mmap,mmap_populate,direct",
        help="comma-separated: pwrite1, pwrite, fallocated, files, mmap, mmap_populate, direct",
    )
    p.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = p.parse_args()
    # page-aligned address and length, as O_DIRECT needs
    src = np.frombuffer(mmap.mmap(-1, int(args.gb * 1e9) // 4096 * 4096), np.float32)
    src[:] = np.random.default_rng(0).random(src.size, dtype=np.float32)
    rows = []
    for name in args.paths.split(","):
        row = run(name, args.dir, src, args.threads)
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
