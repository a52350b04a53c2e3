"""Mismatch of ``Projector(adjoint="unmatched")`` (the scaled voxel-driven cone
back-projection) to the exact transpose of structured Joseph, on the CPU, over
detector sampling: relative 2-norm of the difference on smooth projections
(of a Gaussian blob) and on random ones, the ratio of their totals, and the
adjoint gap ``|<A x, y> - <x, A' y>| / (|A x| |y|)`` for random x, y.

    PYTHONPATH=src python3 tools/diagnostics/adjoint_mismatch.py
"""
from __future__ import annotations

import argparse

import numpy as np

from leveret.geometry import ConeGeometry, VolumeGeometry
from leveret.operators import Projector


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=48, help="grid side (unit voxels)")
    parser.add_argument("--views", type=int, default=120)
    parser.add_argument("--sampling", type=float, nargs="+", default=[0.5, 0.75, 1.0, 1.5, 2.0, 2.5])
    args = parser.parse_args()
    n = args.n
    volume = VolumeGeometry((n, n, n), 1.0)
    z, y, x = np.mgrid[:n, :n, :n] - (n - 1) / 2
    blob = np.exp(-(x * x + y * y + z * z) / (2 * (n / 6) ** 2))
    rng = np.random.default_rng(0)
    print("| px/voxel | smooth: rel. 2-norm | smooth: total ratio | random: rel. 2-norm | adjoint gap |")
    print("|---|---|---|---|---|")
    for s in args.sampling:
        n_det = int(round(n * 4 / 3 * s))
        geometry = ConeGeometry.circular(np.linspace(0, 2 * np.pi, args.views, endpoint=False), sid=3 * n,
                                         sdd=4.5 * n, n_rows=n_det, n_cols=n_det, pixel_size=1.5 / s)
        A = Projector(geometry, volume, model="joseph", backend="cpu", precision="float64")
        V = Projector(geometry, volume, model="joseph", backend="cpu", precision="float64", adjoint="unmatched")
        smooth = A(blob)
        e, u = A.T(smooth), V.T(smooth)
        noise = rng.standard_normal(A.projection_shape)
        en, un = A.T(noise), V.T(noise)
        xr = rng.standard_normal(volume.shape)
        Ax = A(xr)
        gap = abs(np.vdot(Ax, noise) - np.vdot(xr, un)) / (np.linalg.norm(Ax) * np.linalg.norm(noise))
        print(f"| {s} | {np.linalg.norm(u - e) / np.linalg.norm(e):.2e} | {u.sum() / e.sum():.4f} | "
              f"{np.linalg.norm(un - en) / np.linalg.norm(en):.2f} | {gap:.1e} |", flush=True)


if __name__ == "__main__":
    main()
