"""Cone-beam back-projection and FDK on a RabbitCT-like geometry, leveret and
ASTRA in the same run.

496 views at 0.4 degrees, a 1248 x 960 detector of 0.308 mm pixels,
source-isocentre 750 mm, source-detector 1200 mm, volumes of L^3 voxels over a
256 mm cube. GUPS = L^3 x 496 / time / 1e9 (every voxel counted for every
view, as RabbitCT does). Device arrays unless a row says NumPy. Needs an
NVIDIA GPU; ASTRA rows where ``import astra`` works.

    PYTHONPATH=src python3 bench/bench_cone.py --sizes 512 1024 --out bench_cone.json
    PYTHONPATH=src python3 bench/bench_cone.py --kernels --sizes 512     # every kernel, whole scan
    PYTHONPATH=src python3 bench/bench_cone.py --auto-threshold          # kernel B vs ray-hybrid, small voxels
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from common import astra_algorithm3d, astra_direct_bp3d, median_time, metadata, print_header, record, write_results

N_VIEWS, N_ROWS, N_COLS, PIXEL, SID, SDD = 496, 960, 1248, 0.308, 750.0, 1200.0
KERNELS = ("texture", "ray", "ray-hybrid", "quad", "global")


def geometry():
    """The RabbitCT-like circular scan (a leveret.ConeGeometry)."""
    import leveret

    return leveret.ConeGeometry.circular(np.radians(np.arange(N_VIEWS) * 0.4), SID, SDD, N_ROWS, N_COLS, PIXEL)


def volume(size, voxel_size=None):
    import leveret

    return leveret.VolumeGeometry(
        (size,) * 3 if isinstance(size, int) else size,
        voxel_size=voxel_size or 256.0 / (size if isinstance(size, int) else size[-1]),
    )


def bench_leveret(size):
    """The defaults ("auto"), kernel B, exact weights, and FDK from device and NumPy arrays."""
    import cupy as cp
    import leveret

    g, vol = geometry(), volume(size)
    sync = cp.cuda.Device().synchronize
    updates = size**3 * N_VIEWS
    label = f"{size}^3 from {N_VIEWS} x {N_ROWS}x{N_COLS}"
    proj = cp.random.random(g.projection_shape, dtype=cp.float32)
    out = cp.empty(vol.shape, cp.float32)
    op = leveret.ConeBackprojection(g, vol, backend="cuda")
    t = median_time(lambda: op(proj, out), reps=3, sync=sync)
    record(f"cone BP {label}, device arrays", t, updates, note=f"kernel {op.last_kernel} (auto)")
    if op.last_kernel != "texture":
        b = leveret.ConeBackprojection(g, vol, backend="cuda", kernel="texture")
        t = median_time(lambda: b(proj, out), reps=3, sync=sync)
        record(f"cone BP {label}, device arrays, kernel B", t, updates, note="kernel texture")
    exact = leveret.ConeBackprojection(g, vol, backend="cuda", interpolation="linear32")
    t = median_time(lambda: exact(proj, out), reps=3, sync=sync)
    record(
        f"cone BP {label}, device arrays, exact weights",
        t,
        updates,
        note=f"linear32: kernel {exact.last_kernel} (auto)",
    )
    t = median_time(lambda: leveret.fdk(proj, g, vol, backend="cuda"), reps=2, sync=sync)
    record(f"FDK {label}, device arrays", t, updates, note="weighting, filter, BP")
    del proj, out
    host = np.random.default_rng(0).random(g.projection_shape, dtype=np.float32)
    # From host arrays, page faults and host copies spread single runs by ~10 %: more repeats.
    host_reps = 5 if size <= 512 else 3
    t = median_time(lambda: leveret.fdk(host, g, vol, backend="cuda"), reps=host_reps, sync=sync)
    record(f"FDK {label}, NumPy arrays", t, updates, note="transfers pinned and overlapped")
    t = median_time(
        lambda: leveret.fdk(host, g, vol, backend="cuda", interpolation="linear32"), reps=host_reps, sync=sync
    )
    record(f"FDK {label}, NumPy arrays, linear32", t, updates, note=f"BP kernel {exact.last_kernel}")
    if size >= 1024:  # a volume larger than the GPU memory allowed: z-slabs
        cp.get_default_memory_pool().free_all_blocks()
        t = median_time(lambda: leveret.fdk(host, g, vol, backend="cuda", gpu_memory=4 << 30), reps=1, sync=sync)
        record(f"FDK {label}, NumPy arrays, gpu_memory 4 GiB", t, updates, note="z-slabs")


def bench_kernels(size):
    """Every CUDA kernel on the whole scan, and kernel B with near-perfect texture
    cache hits (1e-6 mm voxels: every fetch of a view hits the same texels), which
    is the texture unit's fill rate on this access pattern."""
    import cupy as cp
    import leveret

    g, vol = geometry(), volume(size)
    sync = cp.cuda.Device().synchronize
    proj = cp.random.random(g.projection_shape, dtype=cp.float32)
    out = cp.empty(vol.shape, cp.float32)
    for kernel in KERNELS:
        op = leveret.ConeBackprojection(g, vol, backend="cuda", kernel=kernel)
        t = median_time(lambda: op(proj, out), reps=3, sync=sync)
        record(f"cone {kernel} {size}^3", t, size**3 * N_VIEWS)
    tiny = leveret.ConeBackprojection(g, volume(size, 1e-6), backend="cuda", kernel="texture")
    t = median_time(lambda: tiny(proj, out), reps=3, sync=sync)
    record(f"cone texture {size}^3, 1e-6 mm voxels (near-perfect texture cache)", t, size**3 * N_VIEWS)


def bench_auto_threshold():
    """Kernel B against "ray-hybrid" as the voxel shrinks below a detector pixel:
    central slabs of 256 slices of 1024^2, 1536^2 and 2048^2 voxels over the 256 mm
    field (the measurement behind "auto"'s pixels-per-voxel threshold)."""
    import cupy as cp
    import leveret
    from leveret.operators.cone import index_matrices, projected_voxel_pixels

    g = geometry()
    sync = cp.cuda.Device().synchronize
    proj = cp.random.random(g.projection_shape, dtype=cp.float32)
    for n in (1024, 1536, 2048):
        vol = volume((256, n, n))
        pixels = projected_voxel_pixels(index_matrices(g.matrices, vol), vol)
        out = cp.empty(vol.shape, cp.float32)
        for kernel in ("texture", "ray-hybrid"):
            op = leveret.ConeBackprojection(g, vol, backend="cuda", kernel=kernel)
            t = median_time(lambda: op(proj, out), reps=3, sync=sync)
            record(f"cone {kernel} 256x{n}x{n} ({pixels:.2f} px/voxel)", t, 256 * n * n * N_VIEWS)
        del out
        cp.get_default_memory_pool().free_all_blocks()


def bench_astra(size):
    try:
        import astra
    except ImportError as exc:
        print(f"ASTRA not available: {exc}")
        return
    vectors = geometry().to_astra_vectors(pixel_size=PIXEL)
    half = 128.0
    vg = astra.create_vol_geom(size, size, size, -half, half, -half, half, -half, half)
    pg = astra.create_proj_geom("cone_vec", N_ROWS, N_COLS, vectors)
    updates = size**3 * N_VIEWS
    label = f"{size}^3 from {N_VIEWS} x {N_ROWS}x{N_COLS}"
    t = astra_direct_bp3d(pg, vg, (N_ROWS, N_VIEWS, N_COLS), (size,) * 3)
    record(f"cone BP {label}, device arrays", t, updates, peer="astra", note="direct_BP3D")
    t = astra_algorithm3d("FDK_CUDA", pg, vg, (N_ROWS, N_VIEWS, N_COLS), reps=2)
    record(f"FDK {label}, NumPy arrays", t, updates, peer="astra", note="FDK_CUDA")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024], help="cube edges L (voxels)")
    parser.add_argument("--no-astra", action="store_true", help="leave out the ASTRA rows")
    parser.add_argument("--kernels", action="store_true", help="also every CUDA kernel on the whole scan")
    parser.add_argument(
        "--auto-threshold",
        action="store_true",
        help="only kernel B against ray-hybrid below one detector pixel per voxel",
    )
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    meta = metadata(with_devices=True)
    print_header()
    if args.auto_threshold:
        bench_auto_threshold()
    else:
        for size in args.sizes:
            bench_leveret(size)
            if not args.no_astra:
                bench_astra(size)
            if args.kernels:
                bench_kernels(size)
    if args.out:
        write_results(args.out, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
