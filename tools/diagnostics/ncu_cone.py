"""One launch of each cone-beam back-projection kernel on the RabbitCT-like
geometry, for Nsight Compute. On a GPU machine:

    ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \\
        --section InstructionStats --section MemoryWorkloadAnalysis --section WarpStateStats \\
        env PYTHONPATH=src python3 tools/diagnostics/ncu_cone.py --size 512 --views 124
"""
from __future__ import annotations

import argparse
import sys

import numpy as np


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=512, help="cube edge (voxels) over 256 mm")
    parser.add_argument("--views", type=int, default=124, help="views of the 496 to back-project")
    parser.add_argument("--kernels", nargs="+", default=["texture", "ray", "ray-hybrid", "quad", "global"])
    args = parser.parse_args(argv)
    import cupy as cp
    import leveret

    # bench/bench_cone.py's geometry: 496 views at 0.4 degrees, 960 x 1248 pixels of 0.308 mm
    angles = np.radians(np.arange(496) * 0.4)[:args.views]
    g = leveret.ConeGeometry.circular(angles, 750.0, 1200.0, 960, 1248, 0.308)
    vol = leveret.VolumeGeometry((args.size,) * 3, voxel_size=256.0 / args.size)
    proj = cp.random.random(g.projection_shape, dtype=cp.float32)
    out = cp.empty(vol.shape, cp.float32)
    for kernel in args.kernels:
        leveret.ConeBackprojection(g, vol, backend="cuda", kernel=kernel)(proj, out)
    cp.cuda.Device().synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
