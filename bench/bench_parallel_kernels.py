"""Parallel-beam back-projection kernels (the kernel family of Chilingaryan et
al. 2020: texture, Z-order texture, shared-memory/ALU and hybrid) side by side,
with ASTRA in the same run.

Each kernel and precision on 64 slices of 2048^2 from 2048 angles (device
arrays), in GU/s and as a fraction of the texture unit's filter rate on an
H200 (the ceilings in docs/performance.md). Then, on request:

--stack N   the whole scan host to host: N slices of n^2 from a NumPy (angles, N, n)
            float32 stack into a NumPy (N, n, n) volume with leveret.fbp's defaults
            (float32 and float16), with the pipeline's time split (fbp(stats=...));
            each precision cold (pinned buffers allocated) and warm. N = 2048 needs
            64 GiB of host memory.
--roi       the default kernels on the full slice and on centred ROIs (GU/s per ROI
            pixel: a ROI should cost per pixel what the full slice does).
--fbp       the whole FBP (filter + back-projection) per kernel choice.
--tune      run ParallelBackprojection.tune (writes the user's tuning cache).

    PYTHONPATH=src python3 bench/bench_parallel_kernels.py --astra --out bench_parallel_kernels.json
    PYTHONPATH=src python3 bench/bench_parallel_kernels.py --only-stack --roi --stack 2048

Needs an NVIDIA GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

from common import RESULTS, astra_direct_bp3d, median_time, metadata, print_header, record, write_results

# Bilinear texture fetches per second on an H200 by texel size (docs/performance.md, ceilings)
TEX_CEILING = {32: 1017e9, 64: 609e9}
TEXEL_BITS = {"float": 32, "float2": 64, "half2": 32, "half4": 64}
SLICES_PER_TEXEL = {"float": 1, "float2": 2, "half2": 2, "half4": 4}

CONFIGS = [
    # (label, kernel, precision, kernel_options)
    ("texture float2", "texture", "float32", {"packing": "float2"}),
    ("texture float", "texture", "float32", {"packing": "float"}),
    ("texz float2 q4", "texz", "float32", {"packing": "float2", "nq": 4}),
    ("texz float2 q8", "texz", "float32", {"packing": "float2", "nq": 8}),
    ("texz float q4", "texz", "float32", {"packing": "float", "nq": 4}),
    ("alu t32 nv1", "alu", "float32", {"tile": 32, "nv": 1}),
    ("alu t32 nv2", "alu", "float32", {"tile": 32, "nv": 2}),
    ("alu t64 nv1", "alu", "float32", {"tile": 64, "nv": 1}),
    ("alu t64 nv2", "alu", "float32", {"tile": 64, "nv": 2}),
    ("alu t32 nv4", "alu", "float32", {"tile": 32, "nv": 4}),
    ("hybrid t32 float2 1/3", "hybrid", "float32", {"tile": 32, "packing": "float2", "ratio": (1, 3)}),
    ("hybrid t32 float2 1/2", "hybrid", "float32", {"tile": 32, "packing": "float2", "ratio": (1, 2)}),
    ("hybrid t32 float2 2/3", "hybrid", "float32", {"tile": 32, "packing": "float2", "ratio": (2, 3)}),
    ("hybrid t64 float2 1/2", "hybrid", "float32", {"tile": 64, "packing": "float2", "ratio": (1, 2)}),
    ("hybrid t64 float2 2/3", "hybrid", "float32", {"tile": 64, "packing": "float2", "ratio": (2, 3)}),
    ("texture half2", "texture", "float16", {"packing": "half2"}),
    ("texz half2 q4", "texz", "float16", {"packing": "half2", "nq": 4}),
    ("texz half2 q8", "texz", "float16", {"packing": "half2", "nq": 8}),
    ("texz half4 q4", "texz", "float16", {"packing": "half4", "nq": 4}),
    ("hybrid t32 half2 1/2", "hybrid", "float16", {"tile": 32, "packing": "half2", "ratio": (1, 2)}),
    ("hybrid t32 half4 1/3", "hybrid", "float16", {"tile": 32, "packing": "half4", "ratio": (1, 3)}),
    ("hybrid t32 half4 1/2", "hybrid", "float16", {"tile": 32, "packing": "half4", "ratio": (1, 2)}),
    ("hybrid t32 half4 2/3", "hybrid", "float16", {"tile": 32, "packing": "half4", "ratio": (2, 3)}),
]


def _problem(n, n_angles, n_slices):
    import cupy as cp
    import leveret

    g = leveret.ParallelGeometry(np.linspace(0, np.pi, n_angles, endpoint=False), n, n_rows=n_slices)
    sinos = cp.random.random((n_slices, n_angles, n), dtype=cp.float32)
    return g, g.default_volume(), sinos


def _ceiling_note(kernel, options, gus):
    packing = options.get("packing")
    if kernel in ("texture", "texz", "hybrid") and packing:
        ceiling = TEX_CEILING[TEXEL_BITS[packing]] * SLICES_PER_TEXEL[packing] / 1e9
        alone = " alone" if kernel == "hybrid" else ""
        return f"{100 * gus / ceiling:.0f} % of the {packing} texture ceiling{alone} ({ceiling:.0f} GU/s)"
    return ""


def bench_kernels(n, n_angles, n_slices):
    import cupy as cp
    from leveret.operators import ParallelBackprojection

    sync = cp.cuda.Device().synchronize
    g, vol, sinos = _problem(n, n_angles, n_slices)
    out = cp.empty((n_slices, n, n), cp.float32)
    updates = n * n * n_slices * n_angles
    for label, kernel, precision, options in CONFIGS:
        try:
            op = ParallelBackprojection(
                g, vol, backend="cuda", kernel=kernel, precision=precision, kernel_options=options
            )
            t = median_time(lambda: op(sinos, out=out), reps=3, sync=sync)
        except Exception as exc:  # noqa: BLE001 - a failing kernel is reported, the others still run
            record(f"BP {label}", float("nan"), None, note=f"FAILED: {type(exc).__name__}: {exc}")
            continue
        record(
            f"BP {label}, {n_slices}x{n}^2 from {n_angles}",
            t,
            updates,
            note=f"{op.last_kernel}; {precision}; " + _ceiling_note(kernel, options, updates / t / 1e9),
        )


def bench_roi(n, n_angles, n_slices):
    """Default kernels (kernel="auto", the rule: an empty tuning cache): the full
    slice against a centred half-side ROI and a 1/8-side one."""
    import cupy as cp
    from leveret.operators import ParallelBackprojection

    cache = os.environ.get("LEVERET_CACHE_DIR")
    os.environ["LEVERET_CACHE_DIR"] = tempfile.mkdtemp(prefix="leveret-no-tuning-")
    sync = cp.cuda.Device().synchronize
    g, vol, sinos = _problem(n, n_angles, n_slices)
    for precision in ("float32", "float16"):
        for side in (n, n // 2, n // 8):
            y0 = (n - side) // 2
            op = ParallelBackprojection(
                g, vol, backend="cuda", precision=precision, roi=None if side == n else (y0, y0, side, side)
            )
            out = cp.empty((n_slices, side, side), cp.float32)
            t = median_time(lambda: op(sinos, out=out), reps=3, sync=sync)
            record(
                f"BP ROI {side}^2 of {n}^2, {n_slices} slices from {n_angles}, {precision}",
                t,
                side * side * n_slices * n_angles,
                note=f"{op.last_kernel}; GU/s per ROI pixel",
            )
    if cache is None:
        del os.environ["LEVERET_CACHE_DIR"]
    else:
        os.environ["LEVERET_CACHE_DIR"] = cache


def bench_fbp_kernels(n, n_angles, n_slices):
    """Whole FBP (filter + back-projection), device arrays, per kernel choice."""
    import cupy as cp
    import leveret

    sync = cp.cuda.Device().synchronize
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, n_angles, endpoint=False), n, n_rows=n_slices)
    proj = cp.random.random((n_angles, n_slices, n), dtype=cp.float32)
    out = cp.empty((n_slices, n, n), cp.float32)
    updates = n * n * n_slices * n_angles
    for kernel, precision, opts in [
        ("texture", "float32", None),
        ("alu", "float32", {"tile": 32, "nv": 2}),
        ("alu", "float32", {"tile": 32, "nv": 4}),
        ("hybrid", "float32", {"tile": 32, "ratio": (1, 2)}),
        ("texz", "float16", {"packing": "half4"}),
        ("hybrid", "float16", {"tile": 32, "packing": "half4", "ratio": (1, 2)}),
    ]:
        t = median_time(
            lambda: leveret.fbp(proj, g, out=out, kernel=kernel, precision=precision, kernel_options=opts),
            reps=3,
            sync=sync,
        )
        record(f"FBP {n_slices}x{n}^2 from {n_angles}, device arrays, kernel={kernel} {precision}", t, updates)


def bench_tune(n, n_angles, n_slices):
    import cupy as cp
    from leveret.operators import ParallelBackprojection

    g, vol, sinos = _problem(n, n_angles, n_slices)
    for precision in ("float32", "float16"):
        op = ParallelBackprojection(g, vol, backend="cuda", precision=precision)
        best, results = op.tune(sinos, repeats=2)
        for config, seconds in sorted(results, key=lambda r: r[1]):
            record(f"tune {precision}: {config}", seconds, n * n * n_slices * n_angles)
        print(f"best {precision}: {best}")
    cp.cuda.Device().synchronize()


def bench_stack(n_stack, n, n_angles, reps=2):
    """Whole-scan FBP host to host (see the module docstring)."""
    import cupy as cp
    import leveret
    from leveret.resources import host_available_bytes
    from leveret.operators import ParallelBackprojection
    from leveret.cuda.pipeline import parallel_copy

    need = (n_angles * n_stack * n + n_stack * n * n) * 4  # projections + volume, float32
    avail = host_available_bytes()
    if need + (4 << 30) > avail:  # + pinned buffers and headroom
        print(
            f"--stack {n_stack}: needs {need / 2**30:.1f} GiB of host memory, {avail / 2**30:.1f} GiB "
            "available: skipped"
        )
        return
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, n_angles, endpoint=False), n, n_rows=n_stack)
    vol = g.default_volume()
    t0 = time.perf_counter()
    proj = np.empty((n_angles, n_stack, n), np.float32)
    # The contents do not change the kernels' work; written by the copy threads
    # because a single-threaded first touch of 32 GiB takes minutes.
    pattern = np.cos(np.linspace(0, 7, n_stack * n, dtype=np.float32)).reshape(1, n_stack, n)
    parallel_copy(proj, np.broadcast_to(pattern, proj.shape))
    out = np.empty(vol.shape, np.float32)
    parallel_copy(out, np.broadcast_to(np.float32(0), out.shape))  # pre-faulted, as a reused output is
    print(
        f"stack set-up (host arrays {(proj.nbytes + out.nbytes) / 2**30:.1f} GiB written): "
        f"{time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    updates = n_stack * n * n * n_angles
    for precision in ("float32", "float16"):
        op = ParallelBackprojection(g, vol, backend="cuda", precision=precision)
        for rep in range(reps):
            cp.cuda.Device().synchronize()
            st: dict = {}
            t = time.perf_counter()
            leveret.fbp(proj, g, vol, out=out, precision=precision, stats=st)
            t = time.perf_counter() - t
            chunk = -(-n_stack // max(1, st.get("chunks", 1)))
            split = (
                f"{st.get('chunks')} chunks of {chunk}: load {st.get('load', 0):.2f} s, "
                f"h2d {st.get('h2d', 0):.2f} s, compute {st.get('compute', 0):.2f} s, "
                f"d2h {st.get('d2h', 0):.2f} s, store {st.get('store', 0):.2f} s, "
                f"setup {st.get('setup', 0):.2f} s; kernel {op.resolve_kernel(chunk)}"
            )
            record(
                f"FBP stack {n_stack}x{n}^2 from {n_angles}, host to host, {precision} "
                f"({'cold' if rep == 0 else 'warm'})",
                t,
                updates,
                note=split,
            )


def bench_astra(n, n_angles, n_slices):
    try:
        import astra
    except ImportError:
        print("ASTRA not importable: its rows are left out")
        return
    angles = np.linspace(0, np.pi, n_angles, endpoint=False)
    vg3 = astra.create_vol_geom(n, n, n_slices)
    pg3 = astra.create_proj_geom("parallel3d", 1.0, 1.0, n_slices, n, angles)
    t = astra_direct_bp3d(pg3, vg3, (n_slices, n_angles, n), (n_slices, n, n))
    record(
        f"BP {n_slices}x{n}^2 from {n_angles}, device arrays",
        t,
        n * n * n_slices * n_angles,
        peer="astra",
        note="direct_BP3D",
    )
    best = {
        row["problem"]: row["GU_per_s"]
        for row in RESULTS
        if row["code"] == "leveret" and row.get("GU_per_s") and row["problem"].startswith("BP ")
    }
    rate = RESULTS[-1]["GU_per_s"]
    for name, gus in sorted(best.items(), key=lambda kv: -kv[1])[:5]:
        print(f"speed-up over ASTRA: {gus / rate:5.2f}x  {name}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2048, help="slice side (pixels)")
    parser.add_argument("--angles", type=int, default=2048, help="number of projection angles")
    parser.add_argument("--slices", type=int, default=64, help="slices per call in the kernel table")
    parser.add_argument("--astra", action="store_true", help="add ASTRA's direct_BP3D on the same problem")
    parser.add_argument("--fbp", action="store_true", help="whole FBP per kernel choice")
    parser.add_argument("--tune", action="store_true", help="run the auto-tuner (writes the user cache)")
    parser.add_argument("--roi", action="store_true", help="default kernels on ROIs against the full slice")
    parser.add_argument(
        "--stack",
        type=int,
        default=0,
        metavar="N",
        help="whole-scan FBP of N slices host to host (N=2048: 64 GiB of host memory)",
    )
    parser.add_argument("--only-stack", action="store_true", help="leave out the kernel table")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    meta = metadata(with_devices=True)
    print_header()
    if not args.only_stack:
        bench_kernels(args.n, args.angles, args.slices)
    if args.stack:
        bench_stack(args.stack, args.n, args.angles)
    if args.fbp:
        bench_fbp_kernels(args.n, args.angles, args.slices)
    if args.roi:
        bench_roi(args.n, args.angles, args.slices)
    if args.tune:
        bench_tune(args.n, args.angles, args.slices)
    if args.astra:
        bench_astra(args.n, args.angles, args.slices)
    if args.out:
        write_results(args.out, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
