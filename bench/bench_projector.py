"""Matched ray-driven projectors: leveret's CUDA Siddon/Joseph pairs and ASTRA in the same run.

Problems (GPU, device arrays, float32):
  paper  the problem of Thompson and Lionheart (2014; docs/references.md), whose
         matched Siddon/Jacobs projector leveret's structured path follows:
         cone beam, 720 views over 360 degrees, a 512 x 512 detector, a 512^3 volume; unit voxels, source-isocentre 1000,
         source-detector 1500, detector pixel 2.0 (the volume's inscribed cylinder
         is seen whole, so the structured paths apply). Forward (Joseph, Siddon;
         general and structured paths), back-projection (the exact transpose, each
         transpose="auto" | "gather" | "scatter" that applies), one SIRT and one CGLS
         iteration, timed as (T(1 + k iterations) - T(1)) / k so that set-up
         (SIRT's weights) is left out, for ASTRA as for leveret.
  rabbit RabbitCT's geometry (bench_cone.py's): forward projection of a 512^3
         volume of 0.5 mm voxels.
ASTRA: direct_FP3D / direct_BP3D on device arrays (GPULink), SIRT3D_CUDA and
CGLS3D_CUDA on its own GPU copies. --cpu adds a 2D table (512^2, 720 angles,
725 detector pixels) of leveret's Numba pair against ASTRA's CPU "line" and
"linear" projectors (run it on a quiet machine); --no-gpu leaves the GPU out.
The GU/s column counts views x voxels / time.

    PYTHONPATH=src python3 bench/bench_projector.py --out bench_projector.json
    PYTHONPATH=src python3 bench/bench_projector.py --cpu --no-gpu
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from common import median_time, metadata, print_header, record, write_results

SID, SDD, PIXEL = 1000.0, 1500.0, 2.0


def paper_geometry(size: int, n_views: int):
    import leveret

    angles = np.linspace(0, 2 * np.pi, n_views, endpoint=False)
    g = leveret.ConeGeometry.circular(angles, SID, SDD, size, size, PIXEL * 512 / size)
    return g, leveret.VolumeGeometry((size,) * 3, 512.0 / size)


def rabbitct_geometry(size: int = 512):
    import leveret
    from bench_cone import geometry

    return geometry(), leveret.VolumeGeometry((size,) * 3, 256.0 / size)


def _iteration_time(run, k: int, sync) -> float:
    """(T(1 + k iterations) - T(1)) / k: the cost of one iteration without set-up
    (after one untimed run: the first compiles the algorithm's kernels)."""
    run(1)
    t1 = median_time(lambda: run(1), reps=1, warmup=0, sync=sync)
    tk = median_time(lambda: run(1 + k), reps=1, warmup=0, sync=sync)
    return max(tk - t1, 0.0) / k


def bench_leveret(g, vol, label: str, *, iterations: bool, k: int = 2):
    import cupy as cp
    import leveret

    sync = cp.cuda.Device().synchronize
    rng = cp.random.default_rng(0)
    x = rng.random(vol.shape, dtype=cp.float32)
    y = cp.empty(g.projection_shape, cp.float32)
    back = cp.empty(vol.shape, cp.float32)
    rays = g.projection_shape[0] * vol.size  # GU/s column: voxel updates (views x voxels) / s
    for model, structured, precision, note in [
        ("joseph", False, "float32", "general path, float32 march"),
        ("joseph", True, "float32", "structured (xy planes shared by rows), float32 march"),
        ("siddon", False, "float32", "general path, float64 traversal"),
        ("siddon", True, "float32", "structured path, float32 march"),
        ("siddon", True, "float64", "structured path, float64 march"),
    ]:
        if precision == "float64" and not iterations:
            continue
        try:
            A = leveret.Projector(g, vol, model=model, backend="cuda", structured=structured, precision=precision)
        except ValueError as exc:
            print(f"skipped {model} structured={structured}: {exc}")
            continue
        if precision == "float64":
            # the float64 march, for the cost of float64 itself: forward and back only
            x64, y64, b64 = x.astype(cp.float64), cp.empty(g.projection_shape, cp.float64), back.astype(cp.float64)
            t = median_time(lambda: A(x64, out=y64), reps=2, sync=sync)
            record(f"{label} forward siddon structured f64", t, rays, note=note)
            t = median_time(lambda: A.T(y64, out=b64), reps=2, sync=sync)
            record(f"{label} back siddon structured f64", t, rays, note=note + ", atomicAdd")
            del x64, y64, b64
            continue
        tag = f"{model}{' structured' if structured else ''}"
        t = median_time(lambda: A(x, out=y), reps=3, sync=sync)
        record(f"{label} forward {tag}", t, rays, note=note)
        if not iterations:
            continue
        yr = rng.random(g.projection_shape, dtype=cp.float32)
        t = median_time(lambda: A.T(yr, out=back), reps=2, sync=sync)
        record(f"{label} back {tag}", t, rays, note=f"{note}, transpose='auto'")
        for mode in ("gather", "scatter") if structured else ():  # each explicit transpose, for the record
            try:
                At = leveret.Projector(
                    g, vol, model=model, backend="cuda", structured=structured, precision=precision, transpose=mode
                )
                t = median_time(lambda: At.T(yr, out=back), reps=2, sync=sync)
            except ValueError as exc:  # the gather transpose does not apply to this model or geometry
                print(f"skipped {tag} transpose={mode!r}: {exc}")
                continue
            record(f"{label} back {tag} {mode}", t, rays, note=f"transpose={mode!r}")
            del At
        b = A(x)
        t = _iteration_time(lambda n: leveret.sirt(b, A, n), k, sync)
        record(f"{label} SIRT iteration {tag}", t, rays, note=note)
        t = _iteration_time(lambda n: leveret.cgls(b, A, n), k, sync)
        record(f"{label} CGLS iteration {tag}", t, rays, note=note)
        del b, yr
    del x, y, back
    cp.get_default_memory_pool().free_all_blocks()


def bench_astra(g, vol, label: str, pixel: float, *, iterations: bool, k: int = 2):
    try:
        import astra
        import astra.experimental as ae
        import cupy as cp
    except ImportError as exc:
        print(f"ASTRA not available: {exc}")
        return
    sync = cp.cuda.Device().synchronize
    nz, ny, nx = vol.shape
    (x0, x1), (y0, y1), (z0, z1) = (vol.extent(a) for a in "xyz")
    vg = astra.create_vol_geom(ny, nx, nz, x0, x1, y0, y1, z0, z1)
    n_views, n_rows, n_cols = g.projection_shape
    pg = astra.create_proj_geom("cone_vec", n_rows, n_cols, g.to_astra_vectors(pixel_size=pixel))
    rays = n_views * vol.size  # voxel updates, as for leveret
    proj_shape = (n_rows, n_views, n_cols)
    vol_d = cp.random.random(vol.shape, dtype=cp.float32)
    proj_d = cp.zeros(proj_shape, cp.float32)
    projector = astra.create_projector("cuda3d", pg, vg)
    vlink = astra.data3d.GPULink(vol_d.data.ptr, nx, ny, nz, nx * 4)
    plink = astra.data3d.GPULink(proj_d.data.ptr, n_cols, n_views, n_rows, n_cols * 4)
    t = median_time(lambda: ae.direct_FP3D(projector, vlink, plink), reps=3, sync=sync)
    record(f"{label} forward", t, rays, peer="astra", note="direct_FP3D (interpolating, unmatched)")
    if iterations:
        t = median_time(lambda: ae.direct_BP3D(projector, vlink, plink), reps=3, sync=sync)
        record(f"{label} back", t, rays, peer="astra", note="direct_BP3D (voxel-driven, unmatched)")
    astra.projector3d.delete(projector)
    del vol_d, proj_d
    cp.get_default_memory_pool().free_all_blocks()
    if not iterations:
        return
    host = np.random.default_rng(0).random(proj_shape, dtype=np.float32)
    for name in ("SIRT3D_CUDA", "CGLS3D_CUDA"):
        pid = astra.data3d.create("-proj3d", pg, host)
        vid = astra.data3d.create("-vol", vg, 0)
        cfg = astra.astra_dict(name)
        cfg["ProjectionDataId"], cfg["ReconstructionDataId"] = pid, vid
        aid = astra.algorithm.create(cfg)
        t = _iteration_time(lambda n: astra.algorithm.run(aid, n), k, None)
        record(f"{label} {name[:4]} iteration", t, rays, peer="astra", note=name)
        astra.algorithm.delete(aid)
        astra.data3d.delete([pid, vid])


def bench_cpu(n_angles: int = 720, size: int = 512):
    """2D parallel: leveret's Numba pair and ASTRA's CPU projectors."""
    import leveret

    angles = np.linspace(0, np.pi, n_angles, endpoint=False)
    n_det = int(np.ceil(size * np.sqrt(2))) | 1
    g = leveret.ParallelGeometry(angles, n_det)
    vol = leveret.VolumeGeometry((size, size))
    x = np.random.default_rng(0).random(vol.shape, dtype=np.float32)
    y = np.random.default_rng(1).random(g.projection_shape, dtype=np.float32)
    rays = n_angles * vol.size
    label = f"CPU 2D {size}^2, {n_angles} x {n_det}"
    for model in ("siddon", "joseph"):
        A = leveret.Projector(g, vol, model=model, backend="cpu")
        record(f"{label} forward {model}", median_time(lambda: A(x), reps=3), rays)
        record(f"{label} back {model}", median_time(lambda: A.T(y), reps=3), rays)
    try:
        import astra
    except ImportError as exc:
        print(f"ASTRA not available: {exc}")
        return
    vg = astra.create_vol_geom(size, size)
    pg = astra.create_proj_geom("parallel", 1.0, n_det, angles)
    for kind in ("line", "linear"):
        pid = astra.create_projector(kind, pg, vg)

        def fp():
            sid, _ = astra.create_sino(x, pid)
            astra.data2d.delete(sid)

        def bp():
            bid, _ = astra.create_backprojection(y, pid)
            astra.data2d.delete(bid)

        record(f"{label} forward {kind}", median_time(fp, reps=3), rays, peer="astra")
        record(f"{label} back {kind}", median_time(bp, reps=3), rays, peer="astra")
        astra.projector.delete(pid)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--views", type=int, default=720)
    parser.add_argument("--no-astra", action="store_true")
    parser.add_argument("--no-rabbitct", action="store_true")
    parser.add_argument("--no-paper", action="store_true", help="leave out the paper's problem")
    parser.add_argument("--no-gpu", action="store_true")
    parser.add_argument("--cpu", action="store_true", help="add the 2D CPU table")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    meta = metadata(with_devices=not args.no_gpu)
    print_header()
    if not args.no_gpu and not args.no_paper:
        g, vol = paper_geometry(args.size, args.views)
        label = f"cone {args.size}^3, {args.views} x {args.size}^2"
        bench_leveret(g, vol, label, iterations=True)
        if not args.no_astra:
            bench_astra(g, vol, label, PIXEL * 512 / args.size, iterations=True)
        if not args.no_rabbitct:
            from bench_cone import PIXEL as RPIXEL

            g, vol = rabbitct_geometry(args.size)
            label = f"RabbitCT {args.size}^3, 496 x 960x1248"
            bench_leveret(g, vol, label, iterations=False)
            if not args.no_astra:
                bench_astra(g, vol, label, RPIXEL, iterations=False)
    if args.cpu:
        bench_cpu()
    if args.out:
        write_results(args.out, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
