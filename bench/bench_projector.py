"""Matched ray-driven projectors (issue 5): leveret's CUDA Siddon/Joseph pair and ASTRA 2.5.0 in one run.

Problems (GPU, data on the device, float32):
  P1  paper 003's problem: cone beam, 720 views over 360 degrees, 512 x 512
      detector, 512^3 volume. Paper 003 gives only the sizes; here: unit
      voxels, source-isocentre 1000, source-detector 1500, detector pixel 2.0
      (the volume's inscribed cylinder fits; cone half-angle 18.8 degrees, so
      paper 003's structured path applies). Forward (Joseph, Siddon: general
      and structured), back-projection (transpose), one SIRT and one CGLS
      iteration. An iteration's time is (T(1 + k iterations) - T(1)) / k, so
      set-up (SIRT's weights) is left out, for ASTRA as for leveret.
  P2  RabbitCT geometry (bench_cone.py's: 496 views, 960 x 1248 detector,
      0.308 mm pixels, 750 / 1200 mm): forward projection of a 512^3 volume
      (0.5 mm voxels).
ASTRA: FP3D/BP3D through direct_FP3D/direct_BP3D on GPULink (device arrays),
SIRT3D_CUDA and CGLS3D_CUDA on its own GPU copies (its algorithms keep data on
the GPU between iterations). --cpu adds a 2D table (512^2, 720 angles, 725
detector pixels) of leveret's Numba pair against ASTRA's CPU 'line' and
'linear' projectors (run it only on a quiet machine).

Predicted times (H100/H200, written before measuring; phase 1 kernels)
------------------------------------------------------------------------
Rays: 720 x 512 x 512 = 1.89e8. A ray crosses about 512 (|cos| + |sin|) ~ 650
xy voxels (Siddon: ~650 xy + up to ~170 z crossings; Joseph: 512 samples of
4 voxels). Phase 1 traces in float64 (to repeat the CPU's float64 traversal
bit for bit), so the arithmetic runs on the FP64 units: H100 SXM ~34 TFLOP/s
(H200 the same), half the FP32 rate.
- Siddon general forward: 1.89e8 x ~800 steps x ~25 FP64 ops (min of three,
  compare, branchy step) = 3.8e12 ops -> >= 110 ms at peak; branch divergence
  (threads of a warp step different axes) and data-dependent loops make it
  ~3-5x worse: predicted 400-700 ms. Reads hit L1/L2 (4 B per step,
  uncoalesced across a warp: 6e11 B through L1).
- Siddon structured forward (paper 003): per (view, column) block 2 x 513
  crossing parameters and a 1026-element merge (binary searches, ~10 x 1026
  ops, shared by 512 rows: negligible); per ray only the segments inside
  the grid (two binary searches skip the zero-length ends of the padded
  1025-entry list): ~650 segments x ~20 FP64 ops = 2.5e12 ops -> predicted
  100-200 ms, FP64 bound; volume reads coalesced (z-fastest copy,
  adjacent threads = adjacent z): 2 x 4 B x 1025 per ray over 32-ray warps
  ~ 50 GB of L2 traffic, ~10 ms. The transposes of the volume (512 MiB each
  way) add ~0.5 ms.
- Joseph general forward: 1.89e8 x 512 samples x ~30 FP64 ops = 2.9e12 ->
  predicted 250-400 ms (bilinear reads: adjacent threads = adjacent columns
  sample neighbouring voxels of one plane: good L1 reuse).
- Back-projections (transpose): float32 atomicAdd per (ray, voxel) weight.
  Siddon structured: ~1.5e11 non-zero weights -> 1.5e11 atomics; coalesced
  (32 rows -> consecutive z), but L2 atomic throughput (~1e11/s over the
  chip) bounds it: predicted 1-2 s. General Siddon and Joseph back: the same
  count, uncoalesced: 2-5 s. Targets (<= 150 ms) need a gather transpose
  (phase 2), not atomics.
- Structured back-projection as a gather (voxel-driven: per voxel column
  (i, j), 8 z voxels per thread, per view ~3 candidate detector columns,
  each with its exact xy segment through the cell, then ~10 candidate rows
  with the forward's z split; per row one FP64 division and one square
  root, ~100 instructions; per column ~250): about 2000-2500 instructions
  per (view, thread) x 720 views x 512^3 / 8 threads = 2.7e13 -> predicted
  0.8-1.5 s: deterministic and atomic-free, near the atomic version; the
  <= 150 ms target needs FP32 arithmetic with a justified error bound and
  the per-row work shared across threads (phase 2).
- SIRT iteration = forward + back + 4 elementwise passes over 512^3 and
  720 x 512^2 arrays (~4 GB traffic, ~2 ms): forward + back.
- CGLS iteration = forward + back + 2 norms and 3 axpys (~3 ms).
- RabbitCT forward, 496 x 960 x 1248 = 5.9e8 rays, each ~1.1 x 512 voxels in
  the 512^3 grid -> 3.1x P1's rays: Joseph ~0.8-1.2 s; Siddon structured
  5.9e8 x ~600 segments x ~20 FP64 ops = 7e12 ops, 0.2 s at FP64 peak ->
  0.3-0.5 s (at or above the 400 ms target in FP64).
Phase 1 measured (H200): forward Joseph 816 ms, Siddon 443, structured 294;
back 2139 / 1044 / 448 (atomic) / 2571 (gather); SIRT 747, CGLS 752
(structured): the iterations added 5-10 ms to A + A.T.

Phase 2 predictions (H200; written before measuring; float32 march)
------------------------------------------------------------------------
Counts per ray (P1): ~600 xy segments inside the grid (Siddon), ~435 planes
inside (Joseph). Issue rate: 132 SMs x 4 schedulers x 1.98 GHz = 1.05e12
warp instructions/s.
- Siddon structured forward, float32 march: per segment ~35 instructions
  (3 shared loads of the column's list, ~18 FP32/INT for the z split,
  64-bit address, 2 coalesced global loads, 2 FMA) -> 1.89e8 x 600 x 35 / 32
  = 1.2e11 warp instructions = 120 ms at full issue; predicted 130-200 ms
  (phase 1's float64 march: 294 ms).
- Siddon structured back (atomic), float32: the same march plus ~1.26
  atomics per segment (l2 > 0 only where a z face is crossed): 1.4e11
  float32 REDs, coalesced over a warp's rows (adjacent z). Phase 1 shows
  ~150 ms for them on top of the march: predicted 250-350 ms. This is at
  the floor of a ray-driven transpose: a (view, column) block's 512 rows
  touch ~400-500 distinct z voxels per segment (rows ~1-1.7 voxels apart),
  so summing rows in shared memory first would remove at most ~25 % of the
  atomics; adjacent columns and views share few cells. The <= 150 ms target
  needs a voxel-driven transpose whose per-(voxel, view) work is a few
  FP32 operations; phase 1's exact gather (float64 per-row set-up) is 5.7x
  slower than the atomics, so it stays an option, not the default.
- Joseph structured forward (new: planes and in-plane xy index shared by a
  column's rows; per row only z): per sample ~35 instructions (3 broadcast
  shared loads, ~20 FP32/INT, 4 global loads: two pairs of adjacent z)
  -> 1.89e8 x 435 x 35 / 32 = 9e10 = 85 ms at full issue; predicted
  100-160 ms (target <= 150).
- Joseph structured back: 4 atomics per sample (3.3e11, coalesced over
  rows) -> predicted 400-550 ms.
- Joseph general forward, float32 march (per-ray float64 set-up, no float64
  division per plane any more): ~45 instructions per sample (64-bit index
  math, bilinear weights, 4 loads spread over the warp's columns) ->
  1.1e11 warp instructions = 110 ms at full issue, memory-latency bound:
  predicted 200-350 ms (816). Back (4 scattered atomics per sample):
  1.0-1.8 s (2139).
- Siddon general: unchanged (float64 traversal): 443 / 1044 ms.
- Siddon structured, precision="float64" (bench row "f64"): as phase 1,
  ~300 / ~450 ms: the float32 rows' gain is the float32 march itself.
- SIRT / CGLS iteration = A + A.T + ~3 ms of elementwise passes (the norm is
  now one fused float64 reduction, no float64 copy of the residual; one
  scalar read-back per iteration): structured Siddon 400-550 ms, structured
  Joseph 500-700 ms.
- RabbitCT forward: a circular scan (structured ratio 0.17), so both
  structured kernels apply; 5.9e8 rays (3.1x P1) of ~550 segments/planes:
  Siddon structured 400-600 ms (target <= 400; ASTRA 699), Joseph
  structured 300-500 ms; general Joseph float32 0.6-1.0 s, general Siddon
  (float64) ~1.4 s.
- Whole run (P1, ASTRA, RabbitCT): ~2-3 minutes plus NVRTC compiles.

Phase 3 (2026-11-22, session 3): from Nsight Compute, then predictions, then measurements
------------------------------------------------------------------------
Nsight Compute on 16 views of P1 (bench/ncu_projector.py; results in
bench/results/h200_ncu_projector_*_2026-11-22.txt): phase 2's structured
Joseph forward executed ~81 warp instructions per (ray, plane) sample at 40 %
occupancy (72 registers) with 15 cycles between issues (latency-bound: each
sample's shared load -> index -> global load -> FMA chain waits ~700
cycles), DRAM 16 % (the volume streamed once per view: 630 MB per view).
- Joseph forward, rewritten (padded volume: no bounds tests; one 16-byte
  shared entry per plane; 8 planes' 32 loads in flight while the previous 8
  are summed; 16 views per column side by side so that their reads meet in
  L2): ~20-28 instructions per sample -> 97 G samples x 25 / 32 = 7.6e10
  warp instructions = 73 ms at full issue; predicted 90-150 ms. Measured
  93 ms (ncu: L1/TEX 94 %, L2 hit 87 %, DRAM 12 %): L1-bound.
- Joseph transpose as a gather (per voxel column and 32 z voxels: per view
  ~2 candidate columns, ~0.9 rows per voxel per column at ~20 instructions
  each): ~25-30 instructions per (voxel, view) -> predicted 100-150 ms.
  Measured 458 ms: ncu shows 57 instructions per (voxel, view) and the
  L1/TEX pipe at 99.8 % (the lanes' row-table loads diverge across columns,
  and each row is two shared read-modify-writes of the voxel accumulators).
  Off by 3-4x; the atomic scatter (405 ms) stays the default.
- Siddon structured, the same view groups and pipelining: forward predicted
  150-200 (measured 154 ms), transpose (its atomics now meet in L2) measured
  223 ms (from 445).
- The scatter's floor: the transposes run at 650-830 G float32 atomic
  additions per second (Siddon 1.5e11 in 223 ms, Joseph 3.4e11 in 405 ms);
  a warp-private shared window that first merges a warp's rows (tried,
  reverted) made Siddon's 2.1x slower (480 ms: shared-memory float atomics
  are compare-and-swap loops), and 16-byte vector atomics (a sample's two z
  neighbours in one red.global.add.v4.f32, two lanes adding zero) made
  Joseph's 1.9x slower (785 ms: the L2 works per element; reverted). At
  that rate a ray-driven transpose of P1
  cannot go under ~190 ms (Siddon); <= 150 ms needs a gather whose
  per-(voxel, view) work is L1-light (open).

Phase 4 (written before its first GPU run): structured Joseph's transpose
voxel-driven with a warp per voxel column (joseph_voxel_gather): lanes are 32
consecutive z voxels, so the (view, column, plane) work is uniform across the
warp and the lanes' rows are adjacent entries of one detector column's values
(layout (view, column, row)): each load is one or two 128-byte lines, against
the table gather's lanes spread over ~16 columns. Count for P1: 9.7e10
(voxel, view) pairs; ~1.5 contributing columns per pair; per (voxel, column)
~18 instructions (row coordinate stepped in float32, clamp, two rows of one
load and four operations each where rows are over a voxel apart, four rows
below); the uniform set-up (four column coordinates per view, per candidate
tau, fu, zA, zS in float64) amortised over a lane's 16 voxels: ~30-35
instructions per (voxel, view) = 1.0e11 warp instructions, ~95 ms at full
issue; ~3 loads per (voxel, view) at 1-2 L1 wavefronts each (not the bound);
L2 traffic with 8 neighbouring voxel columns per block sharing detector
columns ~190 GB (~30 ms, overlapped). Predicted 100-140 ms for the transpose
(+2-3 ms for the value and column tables and 1 ms for the copy out of the
z-fastest volume), so SIRT ~ 92 + 120 + 3 = ~215 ms, CGLS ~220 ms.

Targets (issue 5): forward <= 150 ms Joseph, <= 250 ms Siddon, back <= 150 ms,
SIRT <= 300 ms, CGLS <= 320 ms, RabbitCT forward <= 400 ms. ASTRA 2.5.0 on
H200 (issue): FP 235 ms, BP 207 ms, SIRT 484 ms, CGLS 541 ms, RabbitCT FP 699 ms.

The table's rate column is GU/s: views x voxels / time / 1e9, as in the
other benchmarks (not rays per second).

Usage (from bench/, PYTHONPATH=../src):
  python3 bench_projector.py [--size 512] [--views 720] [--no-astra] [--no-rabbitct] [--no-paper] [--cpu] [--out FILE]
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
    rays = g.projection_shape[0] * vol.size     # GU/s column: voxel updates (views x voxels) / s
    for model, structured, precision, note in [
            ("joseph", False, "float32", "general path, float32 march"),
            ("joseph", True, "float32", "structured (xy planes shared by rows), float32 march"),
            ("siddon", False, "float32", "general path, float64 traversal"),
            ("siddon", True, "float32", "paper 003 structured path, float32 march"),
            ("siddon", True, "float64", "paper 003 structured path, float64 march")]:
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
        default = A._gpu.transpose if A.structured else "atomic"
        notes = {"atomic": "ray-driven, atomicAdd",
                 "gather": ("voxel-driven gather, no atomics, float64" if model == "siddon"
                            else "table gather, no atomics, the forward's float32 weights"),
                 "voxel": "voxel-driven, a warp per voxel column, no atomics"}
        t = median_time(lambda: A.T(yr, out=back), reps=2, sync=sync)
        record(f"{label} back {tag}", t, rays, note=f"{note}, {notes[default]} (default)")
        others = ["atomic", "gather"] + (["voxel"] if getattr(A._gpu, "voxel_ok", False) else [])
        for mode in (m for m in others if A.structured and m != default):   # the other transposes, for the record
            A._gpu.transpose = mode
            t = median_time(lambda: A.T(yr, out=back), reps=2, sync=sync)
            record(f"{label} back {tag} {mode}", t, rays, note=notes[mode])
        A._gpu.transpose = default
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
    except Exception as exc:  # noqa: BLE001
        print(f"ASTRA not available: {exc}")
        return
    sync = cp.cuda.Device().synchronize
    nz, ny, nx = vol.shape
    (x0, x1), (y0, y1), (z0, z1) = (vol.extent(a) for a in "xyz")
    vg = astra.create_vol_geom(ny, nx, nz, x0, x1, y0, y1, z0, z1)
    n_views, n_rows, n_cols = g.projection_shape
    pg = astra.create_proj_geom("cone_vec", n_rows, n_cols, g.to_astra_vectors(pixel_size=pixel))
    rays = n_views * vol.size                   # voxel updates, as for leveret
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
    except Exception as exc:  # noqa: BLE001
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
    parser.add_argument("--no-paper", action="store_true", help="skip paper 003's problem (P1)")
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
