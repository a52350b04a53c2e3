"""What skipping off-detector samples buys each cone kernel (issue 3).

At RabbitCT's geometry a third of all (voxel, view) pairs project off the
detector: the 256 mm cube's corners lie outside the 118.5 mm cylinder the
detector sees and its top and bottom beyond the +-92 mm it sees at the axis.
The kernels skip a thread's K samples of a view when all miss the detector
(segment_visible in backproject_cone.cu); LEVERET_CONE_NO_CLIP turns that off.
This script counts the pairs (on the detector; per thread segment; per warp,
the granularity at which issue slots are saved), then times every kernel with
and without the skip, the hybrid's splits, and one FDK chunk of 32 views.

Predicted before the first run (H200, RabbitCT-like circle): 65.4 % of the
pairs are on the detector, 66-67 % of thread segments and 67-69 % of warp
segments reach it. Kernel B at 1024^3 is bound by the texture unit's filter
rate (557 ms at 92-94 % of it): x 0.66 plus ~2 issue slots per update for the
test, 370-390 ms. At 512^3 it is bound by texture-cache misses, which the
skipped border fetches never caused: 99 -> 65-75 ms; "ray" 86 -> 58-65 ms.
"quad" is issue-bound: whole warps skip 31 % of their work, the test adds
~2.4 of ~27 slots per update: 91 -> ~70 ms (512^3), 646 -> ~470 ms (1024^3).

Usage: PYTHONPATH=src python3 bench/diag_cone_clip.py [--sizes 512 1024] [--out FILE]
"""
from __future__ import annotations

import argparse

import numpy as np

from bench_cone import N_COLS, N_ROWS, geometry, time_chunks, time_configs
from common import metadata, print_header, write_results


def coverage(index_matrices: np.ndarray, size: int, k: int = 8, n_warps: int = 4000, seed: int = 1) -> dict:
    """Fractions of the (voxel, view) pairs a kernel-B-shaped launch (warps of
    32 x-consecutive columns, K z voxels per thread) must interpolate: pairs
    on the detector, pairs in thread segments that reach it, pairs in warps
    that reach it; over ``n_warps`` random warps and every other view."""
    rng = np.random.default_rng(seed)
    i = rng.integers(0, size // 32, n_warps) * 32
    j = rng.integers(0, size, n_warps)
    kz = rng.integers(0, size // k, n_warps) * k
    lanes, depth = np.arange(32)[None, :, None], np.arange(k)[None, None, :]
    x = np.broadcast_to(i[:, None, None] + lanes, (n_warps, 32, k))
    y = np.broadcast_to(j[:, None, None], (n_warps, 32, k))
    z = np.broadcast_to(kz[:, None, None] + depth, (n_warps, 32, k))
    points = np.stack([x.ravel(), y.ravel(), z.ravel(), np.ones(x.size)]).astype(np.float64)
    counts = np.zeros(3)
    views = range(0, index_matrices.shape[0], 2)
    for n in views:
        q = index_matrices[n].reshape(3, 4) @ points
        u, v = q[0] / q[2], q[1] / q[2]
        on = ((u > -1) & (u < N_COLS) & (v > -1) & (v < N_ROWS)).reshape(n_warps, 32, k)
        thread = on.any(axis=2)
        counts += [on.sum(), thread.sum() * k, thread.any(axis=1).sum() * 32 * k]
    total = n_warps * 32 * k * len(views)
    return dict(zip(("voxel", "thread", "warp"), (counts / total).round(4).tolist()))


def sweep(proj, mats, out, size):
    """The ray kernels' depth K and occupancy (LEVERET_CONE_MIN_BLOCKS), the
    hybrid's splits and the views per pass."""
    configs = []
    for kernel in ("ray", "ray-hybrid", "quad"):
        for k, blocks in ((8, 4), (16, 3), (16, 4), (24, 2), (24, 3), (32, 2)):
            configs.append((kernel, {"defines": (f"LEVERET_CONE_K={k}", f"LEVERET_CONE_MIN_BLOCKS={blocks}")}))
    for split in ((1, 4), (1, 5), (1, 6), (1, 7)):
        configs.append(("ray-hybrid", {"split": split, "defines": ("LEVERET_CONE_K=16",)}))
    for per_pass in (83, 100, 166):
        configs.append(("ray-hybrid", {"split": (1, 5), "views_per_pass": per_pass, "defines": ("LEVERET_CONE_K=16",)}))
        configs.append(("ray", {"views_per_pass": per_pass, "defines": ("LEVERET_CONE_K=16",)}))
    time_configs(configs, proj, mats, out, size)


def main(argv=None):
    import cupy as cp
    import leveret
    from leveret.operators.cone import index_matrices

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    parser.add_argument("--out", default=None)
    parser.add_argument("--sweep", action="store_true",
                        help="only the ray kernels' occupancy (LEVERET_CONE_MIN_BLOCKS), depth K and hybrid splits")
    args = parser.parse_args(argv)
    meta = metadata(with_devices=True)
    print_header()
    g = geometry()
    proj = cp.random.random(g.projection_shape, dtype=cp.float32)
    for size in args.sizes:
        mats = index_matrices(g.matrices, leveret.VolumeGeometry((size,) * 3, voxel_size=256.0 / size))
        cover = coverage(mats.reshape(-1, 12), size)
        meta[f"coverage_{size}"] = cover
        print(f"{size}^3 pairs to interpolate: {cover}", flush=True)
        out = cp.empty((size,) * 3, cp.float32)
        if args.sweep:
            sweep(proj, mats, out, size)
            continue
        configs = [(kernel, {"defines": d}) for kernel in ("texture", "ray", "quad")
                   for d in ((), ("LEVERET_CONE_NO_CLIP",))]
        configs += [("ray-hybrid", {"split": s}) for s in ((1, 3), (1, 2), (2, 3), (1, 4))]
        configs += [("texture", {"defines": ("LEVERET_CONE_K=8",)}), ("quad", {"defines": ("LEVERET_CONE_K=8",)}),
                    ("ray", {"views_per_pass": 496}), ("quad", {"views_per_pass": 496})]
        time_configs(configs, proj, mats, out, size)
        time_chunks(proj, mats, out, size)
        del out
        cp.get_default_memory_pool().free_all_blocks()
    if args.out:
        write_results(args.out, meta)


if __name__ == "__main__":
    main()
