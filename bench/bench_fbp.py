"""Parallel-beam FBP with leveret's defaults (CPU and CUDA), ASTRA in the same run.

Problems:
  --cpu    FBP of 512^2 from 720 angles on all cores
  --gpu    back-projection and FBP of 2048^2 slices from 2048 angles, 1 and 64
           slices, from device (CuPy) arrays and from NumPy arrays
  --astra  ASTRA's BP_CUDA / FBP_CUDA (2D) and parallel3d back-projection on the
           same problems
  --floor  the streaming pipeline with the GPU work replaced by a copy: the host
           and PCIe cost that FBP from NumPy arrays can at best hide

GU/s = image pixels x slices x angles / time / 1e9. No switch: --cpu --gpu --astra.
The kernels one by one: bench_parallel_kernels.py.

    PYTHONPATH=src python3 bench/bench_fbp.py --gpu --astra --out bench_fbp.json
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from common import astra_algorithm3d, astra_direct_bp3d, median_time, metadata, print_header, record, write_results


def bench_cpu():
    import leveret

    n, n_angles = 512, 720
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, n_angles, endpoint=False), n)
    sino = np.random.default_rng(0).random((n_angles, n), dtype=np.float32)
    t = median_time(lambda: leveret.fbp(sino, g, backend="cpu"), reps=5)
    record("FBP 512^2 from 720 angles (CPU, all cores)", t, n * n * n_angles)


def bench_gpu(n=2048, n_angles=2048, slice_counts=(1, 64)):
    import cupy as cp
    import leveret
    from leveret.operators import ParallelBackprojection

    sync = cp.cuda.Device().synchronize
    angles = np.linspace(0, np.pi, n_angles, endpoint=False)
    for n_slices in slice_counts:
        g = leveret.ParallelGeometry(angles, n, n_rows=n_slices)
        vol = g.default_volume()
        updates = n * n * n_slices * n_angles
        op = ParallelBackprojection(g, vol, backend="cuda")
        sinos = cp.random.random((n_slices, n_angles, n), dtype=cp.float32)
        out = cp.empty((n_slices, n, n), cp.float32)
        t = median_time(lambda: op(sinos, out=out), reps=5, sync=sync)
        record(
            f"BP {n}^2 x {n_slices} slices from {n_angles} angles, device arrays",
            t,
            updates,
            note="texture upload included",
        )
        if n_slices == 1:  # where FBP's time goes besides the back-projection
            from leveret.filters import apply_filter, filter_response

            resp = filter_response(n)
            w = cp.full(n_angles, np.pi / n_angles, cp.float32)
            t = median_time(lambda: apply_filter(sinos, resp, weights=w), reps=5, sync=sync)
            record(f"filter only, {n_slices} slice of {n_angles} x {n}, device arrays", t, 0)
        del sinos, out
        proj_dev = cp.random.random((n_angles, n_slices, n), dtype=cp.float32)
        out_dev = cp.empty(vol.shape, cp.float32)
        t = median_time(lambda: leveret.fbp(proj_dev, g, out=out_dev), reps=5, sync=sync)
        record(f"FBP {n}^2 x {n_slices} slices from {n_angles} angles, device arrays", t, updates)
        del proj_dev, out_dev
        proj = np.random.default_rng(1).random((n_angles, n_slices, n), dtype=np.float32)
        out_host = np.empty(vol.shape, np.float32)
        t = median_time(lambda: leveret.fbp(proj, g, out=out_host), reps=3, sync=sync)
        pcie = (proj.nbytes + out_host.nbytes) / 55e9
        record(
            f"FBP {n}^2 x {n_slices} slices from {n_angles} angles, NumPy arrays",
            t,
            updates,
            note=f"pinned PCIe floor for the bytes alone {pcie * 1e3:.0f} ms",
        )


def bench_pipeline_floor(n=2048, n_angles=2048, n_slices=64):
    """The streaming pipeline with the GPU work replaced by a copy: the host and
    PCIe cost that FBP from NumPy arrays can at best hide."""
    import cupy as cp
    from leveret.cuda.pipeline import parallel_copy, stream_chunks

    proj = np.random.default_rng(2).random((n_angles, n_slices, n), dtype=np.float32)
    out = np.empty((n_slices, n, n), np.float32)
    chunks = [(k, k + 4) for k in range(0, n_slices, 4)]

    def run():
        stream_chunks(
            chunks,
            in_shape=lambda c: (n_angles, c[1] - c[0], n),
            out_shape=lambda c: (c[1] - c[0], n, n),
            load=lambda c, buf: parallel_copy(buf, proj[:, c[0] : c[1]]),
            compute=lambda c, d_in, d_out: d_out.__setitem__(Ellipsis, d_in.reshape(d_out.shape)),
            store=lambda c, buf: parallel_copy(out[c[0] : c[1]], buf),
        )

    t = median_time(run, reps=3, sync=cp.cuda.Device().synchronize)
    record(
        "pipeline floor: 1 GiB in + 1 GiB out, 16 chunks, no compute",
        t,
        0,
        note=f"{2 * proj.nbytes / t / 1e9:.1f} GB/s host<->device",
    )


def bench_astra(n=2048, n_angles=2048, n_slices=64):
    try:
        import astra
    except ImportError as exc:
        print(f"ASTRA not available: {exc}")
        return
    angles = np.linspace(0, np.pi, n_angles, endpoint=False)
    vg = astra.create_vol_geom(n, n)
    pg = astra.create_proj_geom("parallel", 1.0, n, angles)
    sino = np.random.rand(n_angles, n).astype(np.float32)
    for alg in ("BP_CUDA", "FBP_CUDA"):
        sid = astra.data2d.create("-sino", pg, sino)
        rid = astra.data2d.create("-vol", vg, 0)
        cfg = astra.astra_dict(alg)
        cfg["ProjectionDataId"], cfg["ReconstructionDataId"] = sid, rid
        aid = astra.algorithm.create(cfg)
        t = median_time(lambda: astra.algorithm.run(aid), reps=3)
        record(f"{alg} {n}^2 x 1 slice from {n_angles} angles, NumPy arrays", t, n * n * n_angles, peer="astra")
        astra.algorithm.delete(aid)
        astra.data2d.delete([sid, rid])

    vg3 = astra.create_vol_geom(n, n, n_slices)
    pg3 = astra.create_proj_geom("parallel3d", 1.0, 1.0, n_slices, n, angles)
    updates = n * n * n_slices * n_angles
    t = astra_direct_bp3d(pg3, vg3, (n_slices, n_angles, n), (n_slices, n, n))
    record(
        f"BP {n}^2 x {n_slices} slices from {n_angles} angles, device arrays",
        t,
        updates,
        peer="astra",
        note="direct_BP3D",
    )
    t = astra_algorithm3d("BP3D_CUDA", pg3, vg3, (n_slices, n_angles, n))
    record(
        f"BP {n}^2 x {n_slices} slices from {n_angles} angles, NumPy arrays",
        t,
        updates,
        peer="astra",
        note="BP3D_CUDA, no filter",
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="run the CPU problem")
    parser.add_argument("--gpu", action="store_true", help="run the leveret GPU problems")
    parser.add_argument("--astra", action="store_true", help="run ASTRA on the GPU problems")
    parser.add_argument("--floor", action="store_true", help="the pipeline's transfer-only floor")
    parser.add_argument("--out", default=None, help="JSON file for the results")
    args = parser.parse_args(argv)
    if not (args.cpu or args.gpu or args.astra or args.floor):
        args.cpu = args.gpu = args.astra = True
    meta = metadata(with_devices=args.gpu or args.astra or args.floor)
    print_header()
    if args.cpu:
        bench_cpu()
    if args.gpu:
        bench_gpu()
    if args.floor:
        bench_pipeline_floor()
    if args.astra:
        bench_astra()
    if args.out:
        write_results(args.out, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
