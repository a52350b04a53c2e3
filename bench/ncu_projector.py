"""One forward and one transpose of each structured projector kernel on paper
003's problem with few views, for Nsight Compute. Usage on the GPU machine:
  ncu --clock-control none --section SpeedOfLight --section InstructionStats \
      --section MemoryWorkloadAnalysis --section WarpStateStats \
      python3 bench/ncu_projector.py [--size 512] [--views 16]
"""
from __future__ import annotations

import argparse
import sys

from bench_projector import paper_geometry


def main(argv=None):
    import cupy as cp

    import leveret

    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--views", type=int, default=16)
    parser.add_argument("--models", nargs="+", default=["joseph", "siddon"])
    args = parser.parse_args(argv)
    g, vol = paper_geometry(args.size, 720)
    g = leveret.ConeGeometry(g.matrices[:args.views], g.n_rows, g.n_cols)
    x = cp.random.random(vol.shape, dtype=cp.float32)
    for model in args.models:
        A = leveret.Projector(g, vol, model=model, backend="cuda")
        y = A(x)
        A.T(y)
    cp.cuda.Device().synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
