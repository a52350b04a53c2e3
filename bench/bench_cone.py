"""Cone-beam benchmark on a RabbitCT-like geometry: leveret and ASTRA 2.5.0 in one run.

496 views at 0.4 degrees, 1248 x 960 detector of 0.308 mm, source-isocentre
750 mm, source-detector 1200 mm, volumes of L^3 voxels over a 256 mm cube.
GUPS = L^3 x 496 / time / 1e9. Usage:
  PYTHONPATH=src python3 bench/bench_cone.py [--sizes 256 512] [--no-astra] [--ray] [--auto-threshold] [--out FILE]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from common import (astra_algorithm3d, astra_direct_bp3d, median_time, metadata, print_header,
                    record, write_results)

N_VIEWS, N_ROWS, N_COLS, PIXEL, SID, SDD = 496, 960, 1248, 0.308, 750.0, 1200.0


def geometry():
    import leveret
    return leveret.ConeGeometry.circular(np.radians(np.arange(N_VIEWS) * 0.4), SID, SDD, N_ROWS, N_COLS,
                                         PIXEL)


def bench_leveret(size):
    import cupy as cp
    import leveret

    g = geometry()
    vol = leveret.VolumeGeometry((size,) * 3, voxel_size=256.0 / size)
    sync = cp.cuda.Device().synchronize
    updates = size**3 * N_VIEWS
    proj = cp.random.random(g.projection_shape, dtype=cp.float32)
    out = cp.empty(vol.shape, cp.float32)
    op = leveret.ConeBackprojection(g, vol, backend="cuda")
    t = median_time(lambda: op(proj, out), reps=3, sync=sync)
    record(f"cone BP {size}^3 from {N_VIEWS} x {N_ROWS}x{N_COLS}, device arrays", t, updates,
           note=f"kernel {op.last_kernel} (auto), texture upload / quad layout included")
    if op.last_kernel != "texture":
        b = leveret.ConeBackprojection(g, vol, backend="cuda", kernel="texture")
        t = median_time(lambda: b(proj, out), reps=3, sync=sync)
        record(f"cone BP {size}^3 from {N_VIEWS} x {N_ROWS}x{N_COLS}, device arrays, kernel B", t, updates,
               note="kernel texture, texture upload included")
    soft = leveret.ConeBackprojection(g, vol, backend="cuda", interpolation="linear32")
    t = median_time(lambda: soft(proj, out), reps=3, sync=sync)
    record(f"cone BP {size}^3 from {N_VIEWS} x {N_ROWS}x{N_COLS}, device arrays, exact weights", t, updates,
           note=f"linear32: kernel {soft.last_kernel} (auto)")
    t = median_time(lambda: leveret.fdk(proj, g, vol, backend="cuda"), reps=2, sync=sync)
    record(f"FDK {size}^3 from {N_VIEWS} x {N_ROWS}x{N_COLS}, device arrays", t, updates,
           note="weighting, filter, BP")
    del proj, out
    host = np.random.default_rng(0).random(g.projection_shape, dtype=np.float32)
    # From host arrays the host's page faults and copies make single runs spread by
    # +-10 % (bench/results/h200_fdk_numpy_schedules_2026-11-24.txt): median of 5.
    host_reps = 5 if size <= 512 else 3
    t = median_time(lambda: leveret.fdk(host, g, vol, backend="cuda"), reps=host_reps, sync=sync)
    record(f"FDK {size}^3 from {N_VIEWS} x {N_ROWS}x{N_COLS}, NumPy arrays", t, updates,
           note=f"weighting, filter, BP ({op.kernel_for(N_VIEWS // 16)}), transfers (pinned, overlapped)")
    t = median_time(lambda: leveret.fdk(host, g, vol, backend="cuda", interpolation="linear32"), reps=host_reps,
                    sync=sync)
    record(f"FDK {size}^3 from {N_VIEWS} x {N_ROWS}x{N_COLS}, NumPy arrays, linear32", t, updates,
           note=f"BP kernel {soft.last_kernel}")
    if size >= 1024:  # issue 3: the 1024^3 case within 4 GiB of GPU memory
        from leveret.algorithms.fdk import _plan_slabs
        cp.get_default_memory_pool().free_all_blocks()
        slabs, chunk = _plan_slabs(g, vol, "cuda", 4 << 30, None)
        t = median_time(lambda: leveret.fdk(host, g, vol, backend="cuda", max_gpu_memory=4 << 30),
                        reps=1, sync=sync)
        record(f"FDK {size}^3 from {N_VIEWS} x {N_ROWS}x{N_COLS}, NumPy arrays, max_gpu_memory 4 GiB", t,
               updates, note=f"{len(slabs)} z-slabs of {slabs[0][1]} slices, {chunk} views per pass")


def bench_shapes(size=512):
    """Kernel B's block shape and z depth K (the texture cache's hit rate depends on both)."""
    import cupy as cp
    import leveret
    from leveret.cuda.backproject_cone import ConeTextureBackprojector
    from leveret.operators.cone import index_matrices

    g = geometry()
    sync = cp.cuda.Device().synchronize
    proj = cp.random.random(g.projection_shape, dtype=cp.float32)
    out = cp.empty((size,) * 3, cp.float32)
    mats = index_matrices(g.matrices, leveret.VolumeGeometry((size,) * 3, voxel_size=256.0 / size))
    for k in (4, 8, 16):
        for block in ((32, 8), (16, 16), (16, 32), (32, 16), (64, 4)):
            if block[0] * block[1] > 256:
                continue
            bp = ConeTextureBackprojector(block, defines=(f"LEVERET_CONE_K={k}",))
            t = median_time(lambda: bp(proj, mats, out), reps=3, sync=sync)
            record(f"kernel B {size}^3, block {block[0]}x{block[1]}, K={k}", t, size**3 * N_VIEWS)


def bench_bottlenecks(size=512):
    """Paper 002's method: the kernel with near-perfect texture cache hits (tiny
    voxels), without texture fetches, and without the volume update too."""
    import cupy as cp
    import leveret
    from leveret.cuda.backproject_cone import ConeTextureBackprojector
    from leveret.operators.cone import index_matrices

    g = geometry()
    sync = cp.cuda.Device().synchronize
    updates = size**3 * N_VIEWS
    proj = cp.random.random(g.projection_shape, dtype=cp.float32)
    out = cp.empty((size,) * 3, cp.float32)
    normal = index_matrices(g.matrices, leveret.VolumeGeometry((size,) * 3, voxel_size=256.0 / size))
    tiny = index_matrices(g.matrices, leveret.VolumeGeometry((size,) * 3, voxel_size=1e-6))
    for label, defines, mats in [("full kernel", (), normal),
                                 ("I|M|T: near-perfect texture cache (1e-6 mm voxels)", (), tiny),
                                 ("I|M|-: no texture fetch", ("LEVERET_CONE_NO_TEXTURE",), normal),
                                 ("I|-|-: no fetch, no volume update",
                                  ("LEVERET_CONE_NO_TEXTURE", "LEVERET_CONE_NO_UPDATE"), normal)]:
        bp = ConeTextureBackprojector(defines=defines)
        t = median_time(lambda: bp(proj, mats, out), reps=3, sync=sync)
        record(f"kernel B {size}^3, {label}", t, updates)


def bench_kernels(size=512, quick=False):
    """The four kernels: block shapes (a warp's footprint on the detector sets the
    texture cache's work), registers (LEVERET_CONE_MIN_BLOCKS), and the hybrid's
    view split (LEVERET_CONE_STAGE staged : LEVERET_CONE_TEX_VIEWS texture views)."""
    import cupy as cp
    import leveret
    from leveret.cuda.backproject_cone import ConeTextureBackprojector
    from leveret.operators.cone import index_matrices

    g = geometry()
    sync = cp.cuda.Device().synchronize
    proj = cp.random.random(g.projection_shape, dtype=cp.float32)
    out = cp.empty((size,) * 3, cp.float32)
    mats = index_matrices(g.matrices, leveret.VolumeGeometry((size,) * 3, voxel_size=256.0 / size))
    blocks = [(32, 8), (8, 32), (16, 16), (4, 64)] if not quick else [(32, 8), (8, 32)]
    configs = [(kernel, block, defines) for kernel in ("texture", "global") for block in blocks
               for defines in ((), ("LEVERET_CONE_MIN_BLOCKS=8",), ("LEVERET_CONE_MIN_BLOCKS=4",))]
    configs += [("shared", (16, 16), ()), ("shared", (8, 32), ())]
    for split in ((1, 2), (1, 3), (1, 4), (1, 6), (2, 6)) if not quick else ((1, 3),):
        for block in ((16, 16), (8, 32)):
            configs.append(("hybrid", block, (f"LEVERET_CONE_STAGE={split[0]}", f"LEVERET_CONE_TEX_VIEWS={split[1]}")))
    for kernel, block, defines in configs:
        bp = ConeTextureBackprojector(block, defines=defines, kernel=kernel)
        t = median_time(lambda: bp(proj, mats, out), reps=3, sync=sync)
        record(f"cone {kernel} {size}^3, block {block[0]}x{block[1]}, {' '.join(defines) or 'defaults'}",
               t, size**3 * N_VIEWS)


def bench_ray(size=512):
    """The ray-aligned kernels beside kernel B and the global kernel (issue 3):
    "ray" (texture), "quad" (exact weights), "ray-hybrid" view splits, views
    per pass, and the same passes with lanes along x (``aligned=False``), so
    the mapping's share of the gain shows. Also one FDK chunk's worth of views
    (32, the FDK's pass), whose time the FDK sees 16 times at 512^3."""
    import cupy as cp
    import leveret
    from leveret.operators.cone import index_matrices

    g = geometry()
    proj = cp.random.random(g.projection_shape, dtype=cp.float32)
    out = cp.empty((size,) * 3, cp.float32)
    mats = index_matrices(g.matrices, leveret.VolumeGeometry((size,) * 3, voxel_size=256.0 / size))
    configs = [("texture", {}), ("global", {}), ("ray", {}), ("quad", {}),
               ("ray", {"aligned": False}), ("quad", {"aligned": False}),
               ("ray-hybrid", {"split": (1, 3)}), ("ray-hybrid", {"split": (1, 2)}),
               ("ray-hybrid", {"split": (2, 3)})]
    passes = (64, 124) if size <= 512 else (124, 496)
    configs += [(k, {"views_per_pass": p}) for k in ("ray", "quad") for p in passes]
    configs += [("quad", {"defines": ("LEVERET_CONE_FAST_RCP",)}), ("quad", {"defines": ("LEVERET_CONE_K=16",)})]
    if size > 512:
        configs = [c for c in configs if c[1].get("aligned", True) and c[1].get("split") not in ((2, 3), (1, 2))
                   and "LEVERET_CONE_K=16" not in c[1].get("defines", ())]
    time_configs(configs, proj, mats, out, size)
    time_chunks(proj, mats, out, size)


def time_configs(configs, proj, mats, out, size):
    """One table row per (kernel, ConeTextureBackprojector options): the whole scan."""
    import cupy as cp
    from leveret.cuda.backproject_cone import ConeTextureBackprojector

    for kernel, options in configs:
        bp = ConeTextureBackprojector(kernel=kernel, **options)
        t = median_time(lambda: bp(proj, mats, out), reps=3, sync=cp.cuda.Device().synchronize)
        label = " ".join(f"{k}={v}" for k, v in options.items()) or "defaults"
        shape = (size,) * 3 if isinstance(size, int) else out.shape
        name = f"{size}^3" if isinstance(size, int) else size
        record(f"cone {kernel} {name}, {label}", t, int(np.prod(shape)) * N_VIEWS)


def time_chunks(proj, mats, out, size, kernels=("texture", "ray", "quad")):
    """One FDK chunk's worth of views (32), whose time the FDK sees 15.5 times."""
    import cupy as cp
    from leveret.cuda.backproject_cone import ConeTextureBackprojector

    chunk = proj[:32]
    for kernel in kernels:
        bp = ConeTextureBackprojector(kernel=kernel)
        t = median_time(lambda: bp(chunk, mats[:32], out, accumulate=True), reps=5,
                        sync=cp.cuda.Device().synchronize)
        record(f"cone {kernel} {size}^3, one 32-view chunk (accumulate) x 15.5", t * N_VIEWS / 32,
               size**3 * N_VIEWS, note=f"{t * 1e3:.2f} ms per chunk")


def bench_auto_threshold():
    """Kernel B against "ray-hybrid" as the voxel shrinks below a detector
    pixel (operators.cone.RAY_MIN_PIXELS): central slabs of 256 slices of
    cubes of 1024^2, 1536^2 and 2048^2 voxels over the 256 mm field."""
    import cupy as cp
    import leveret
    from leveret.operators.cone import index_matrices, projected_voxel_pixels

    g = geometry()
    proj = cp.random.random(g.projection_shape, dtype=cp.float32)
    for n in (1024, 1536, 2048):
        vol = leveret.VolumeGeometry((256, n, n), voxel_size=256.0 / n)
        mats = index_matrices(g.matrices, vol)
        pixels = projected_voxel_pixels(mats, vol)
        out = cp.empty(vol.shape, cp.float32)
        time_configs([("texture", {}), ("ray-hybrid", {})], proj, mats, out, f"256x{n}x{n} ({pixels:.2f} px/voxel)")
        del out
        cp.get_default_memory_pool().free_all_blocks()


def bench_astra(size):
    try:
        import astra
    except Exception as exc:  # noqa: BLE001
        print(f"ASTRA not available: {exc}")
        return
    vectors = geometry().to_astra_vectors(pixel_size=PIXEL)
    half = 128.0
    vg = astra.create_vol_geom(size, size, size, -half, half, -half, half, -half, half)
    pg = astra.create_proj_geom("cone_vec", N_ROWS, N_COLS, vectors)
    updates = size**3 * N_VIEWS
    t = astra_direct_bp3d(pg, vg, (N_ROWS, N_VIEWS, N_COLS), (size,) * 3)
    record(f"cone BP {size}^3 from {N_VIEWS} x {N_ROWS}x{N_COLS}, device arrays", t, updates, peer="astra",
           note="direct_BP3D")
    t = astra_algorithm3d("FDK_CUDA", pg, vg, (N_ROWS, N_VIEWS, N_COLS), reps=2)
    record(f"FDK {size}^3 from {N_VIEWS} x {N_ROWS}x{N_COLS}, NumPy arrays", t, updates, peer="astra",
           note="FDK_CUDA")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--no-astra", action="store_true")
    parser.add_argument("--out", default=None)
    parser.add_argument("--kernels-only", action="store_true", help="only the kernel comparison")
    parser.add_argument("--no-sweeps", action="store_true", help="skip the block/K and kernel sweeps")
    parser.add_argument("--ray", action="store_true", help="also the ray-aligned kernels side by side")
    parser.add_argument("--auto-threshold", action="store_true",
                        help="only kernel B against ray-hybrid below one detector pixel per voxel")
    args = parser.parse_args(argv)
    meta = metadata(with_devices=True)
    print_header()
    if args.auto_threshold:
        bench_auto_threshold()
        if args.out:
            write_results(args.out, meta)
        return 0
    if args.kernels_only:
        for size in args.sizes:
            if args.ray:
                bench_ray(size)
            else:
                bench_kernels(size, quick=size > 512)
        if args.out:
            write_results(args.out, meta)
        return 0
    for size in args.sizes:
        bench_leveret(size)
        if not args.no_astra:
            bench_astra(size)
        if args.ray:
            bench_ray(size)
    bench_bottlenecks(512 if 512 in args.sizes else max(args.sizes))
    if not args.no_sweeps:
        bench_shapes(512 if 512 in args.sizes else max(args.sizes))
        for size in args.sizes:
            if size >= 512:
                bench_kernels(size, quick=size > 512)
    if args.out:
        write_results(args.out, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
