"""One launch of each cone kernel, for Nsight Compute (paper 002's bottleneck
questions answered by the hardware counters). Usage on the GPU machine:
  ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \
      --section InstructionStats --section MemoryWorkloadAnalysis --section WarpStateStats \
      python3 bench/ncu_cone.py [--size 512] [--views 64]
"""
from __future__ import annotations

import argparse
import sys

from bench_cone import geometry


def main(argv=None):
    import cupy as cp

    import leveret
    from leveret.cuda.backproject_cone import ConeTextureBackprojector
    from leveret.operators.cone import index_matrices

    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--views", type=int, default=64)
    parser.add_argument("--kernels", nargs="+", default=["texture", "global", "shared", "hybrid"],
                        help="kernel names, each optionally with macros: ray:LEVERET_CONE_MIN_BLOCKS=6,LEVERET_CONE_K=16")
    args = parser.parse_args(argv)
    g = geometry()
    vol = leveret.VolumeGeometry((args.size,) * 3, voxel_size=256.0 / args.size)
    mats = index_matrices(g.matrices, vol)[:args.views]
    proj = cp.random.random((args.views,) + g.projection_shape[1:], dtype=cp.float32)
    out = cp.empty(vol.shape, cp.float32)
    for spec in args.kernels:
        kernel, _, macros = spec.partition(":")
        defines = tuple(m for m in macros.split(",") if m)
        ConeTextureBackprojector(kernel=kernel, defines=defines)(proj, mats, out)
    cp.cuda.Device().synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
