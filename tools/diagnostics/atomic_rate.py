"""The GPU's rate of float32 global atomic additions, as the scatter transposes
issue them: each warp adds 32 values per instruction into lines drawn at
random over a buffer, its lanes on consecutive floats (4 or 5 32-byte
sectors per instruction, aligned or not) or a sector apart (32 sectors),
and with 16 warps adding into the same lines at once. The rate in sector
operations per second is the floor under a scatter whose additions are
counted in sectors (docs/performance.md, "The GPU's ceilings"); an L2-sized
buffer gives the atomic units' rate, a volume-sized one adds the memory's.
Prints one JSON line per pattern.

    PYTHONPATH=src python3 tools/diagnostics/atomic_rate.py --out atomic_rate.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

# One warp instruction per line: lane l adds 1 to
# buf[line * line_floats + l * stride + offset], the line drawn by a linear
# congruential step per group of `share` warps (the warps of a group add into
# the same lines at about the same time, as a view group's blocks do; distinct
# groups rarely meet on a line).
SOURCE = r"""
extern "C" __global__ void lines(float* buf, unsigned line_mask, int line_floats, int stride, int offset, int share,
                                  int iters)
{
    const unsigned warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    unsigned h = (warp / share) * 2654435761u + 12345u;
    float* const p = buf + lane * stride + offset;
    for (int it = 0; it < iters; it += 8) {
        h = h * 1664525u + 1013904223u;
#pragma unroll
        for (int q = 0; q < 8; ++q)   // eight lines per draw, so that the adds, not the draws, fill the issue slots
            atomicAdd(p + (size_t)((h + q * 40503u) & line_mask) * line_floats, 1.0f);
    }
}
"""

# (name, stride between lanes in floats, offset of lane 0 in floats, warps sharing lines, sectors per instruction)
PATTERNS = [("consecutive, sector-aligned", 1, 0, 1, 4), ("consecutive, offset by 4 floats", 1, 4, 1, 5),
            ("a sector apart", 8, 0, 1, 32), ("consecutive, sector-aligned, 16 warps on the same lines", 1, 0, 16, 4)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[4, 16, 32, 576],
                        help="buffer sizes in MiB (4-32: inside the L2; 576: a 512^3 float32 volume's padded copy)")
    parser.add_argument("--iters", type=int, default=1024,
                        help="warp instructions per warp (rounded up to a multiple of 8)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import cupy as cp

    iters = -(-args.iters // 8) * 8
    kernel = cp.RawModule(code=SOURCE).get_function("lines")
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    blocks, threads = sms * 64, 256
    warps = blocks * threads // 32
    out = []
    for mib in args.mib:
        buf = cp.zeros(mib * 2**20 // 4, cp.float32)
        for name, stride, offset, share, sectors in PATTERNS:
            line_floats = 32 * stride + 32   # room for the offset
            n_lines = 1 << (buf.size // line_floats).bit_length() - 1   # a power of two
            call = (lambda: kernel((blocks,), (threads,), (buf, cp.uint32(n_lines - 1), cp.int32(line_floats),
                                                           cp.int32(stride), cp.int32(offset), cp.int32(share),
                                                           cp.int32(iters))))
            call()
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            times = []
            for _ in range(5):
                start.record()
                call()
                stop.record()
                stop.synchronize()
                times.append(cp.cuda.get_elapsed_time(start, stop) * 1e-3)
            t = sorted(times)[2]
            instructions = warps * iters
            row = {"buffer_mib": mib, "pattern": name, "ms": round(t * 1e3, 3),
                   "adds_per_s": 32 * instructions / t, "sector_ops_per_s": sectors * instructions / t}
            print(json.dumps(row), flush=True)
            out.append(row)
        buf = None   # freed before the next size is allocated
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
