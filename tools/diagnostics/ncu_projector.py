"""One forward and one transpose of each structured projector on the problem of
bench/bench_projector.py with few views, for Nsight Compute. On a GPU machine:

    ncu --clock-control none --section SpeedOfLight --section InstructionStats \\
        --section MemoryWorkloadAnalysis --section WarpStateStats \\
        env PYTHONPATH=src python3 tools/diagnostics/ncu_projector.py --views 16
"""
from __future__ import annotations

import argparse
import sys

import numpy as np


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=512, help="cube edge and detector side")
    parser.add_argument("--views", type=int, default=16, help="views of the 720")
    parser.add_argument("--models", nargs="+", default=["joseph", "siddon"])
    parser.add_argument("--transpose", default="auto", choices=("auto", "gather", "scatter"))
    args = parser.parse_args(argv)
    import cupy as cp
    import leveret

    # bench/bench_projector.py's geometry: source-isocentre 1000, source-detector 1500, pixel 2 at 512
    angles = np.linspace(0, 2 * np.pi, 720, endpoint=False)[:args.views]
    g = leveret.ConeGeometry.circular(angles, 1000.0, 1500.0, args.size, args.size, 2.0 * 512 / args.size)
    vol = leveret.VolumeGeometry((args.size,) * 3, 512.0 / args.size)
    x = cp.random.random(vol.shape, dtype=cp.float32)
    for model in args.models:
        transpose = args.transpose if model == "joseph" else "auto"
        A = leveret.Projector(g, vol, model=model, backend="cuda", transpose=transpose)
        A.T(A(x))
    cp.cuda.Device().synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
