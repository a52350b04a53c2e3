"""TV-regularised iterations on the GPU: one FISTA-TV and one PDHG-TV iteration
against one SIRT iteration on the same operator, ASTRA's SIRT3D_CUDA beside them.

Problem (default): the cone beam of Thompson and Lionheart (2014; bench_projector.py's
"paper" problem), 720 views of 512^2 from 512^3, Joseph (the structured path),
float32, CuPy arrays. ``--size``/``--views`` scale it (``--size 1024 --views
1440 --devices 0,1`` is the two-GPU row). Rows:

  copy         a device-to-device copy of one volume: the memory rate the
               bounds below are reckoned with
  A, A.T       one forward and one back projection
  TV prox      ``leveret.operators.tv.prox`` with ``--tv-iterations`` FGP
               iterations (warm dual field), and the TV value: memory-bound
               kernels, printed beside their bound (bytes moved / copy rate)
  SIRT, FISTA-TV, PDHG-TV iteration
               (T(1 + k iterations) - T(1)) / k, so set-up (SIRT's weights,
               the norm's power iteration, first allocations) is left out;
               each with its predicted time, t(A) + t(A.T) + the bytes its
               elementwise work and TV steps move / copy rate
  norm         ``operator_norm``'s power iteration (once per projector)
  ASTRA        SIRT3D_CUDA per iteration (same timing), when ``import astra`` works

The summary line gives FISTA / SIRT per iteration (the aim: at most 1.3).
``--dry-run`` prints the problem, the memory each method needs and the byte
counts without a GPU.

    PYTHONPATH=src python3 bench/bench_tv.py --out bench_tv.json
    PYTHONPATH=src python3 bench/bench_tv.py --size 256 --views 360          # smaller
    PYTHONPATH=src python3 bench/bench_tv.py --size 1024 --views 1440 --devices 0,1 --no-astra
    PYTHONPATH=src python3 bench/bench_tv.py --dry-run
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from common import median_time, metadata, print_header, record, write_results

SID, SDD, PIXEL = 1000.0, 1500.0, 2.0
ITEMSIZE = 4


def geometry(size: int, n_views: int):
    """bench_projector.py's paper problem scaled to ``size``^3 and ``n_views``."""
    import leveret

    angles = np.linspace(0, 2 * np.pi, n_views, endpoint=False)
    g = leveret.ConeGeometry.circular(angles, SID, SDD, size, size, PIXEL * 512 / size)
    return g, leveret.VolumeGeometry((size,) * 3, 512.0 / size)


# -- bytes moved per iteration, besides A and A.T (float32 values; N voxels, M projection values) --


def prox_values(n: int, ndim: int, inner: int) -> int:
    """FGP: per inner iteration a primal pass (reads ndim + 1, writes 1) and a
    dual pass (reads 1 + 2 ndim, writes 2 ndim); the momentum field's copy
    of the dual (2 ndim) and the final primal pass (ndim + 2)."""
    return n * (inner * (5 * ndim + 3) + 2 * ndim + ndim + 2)


def fista_values(n: int, m: int, ndim: int, inner: int) -> int:
    """y - grad / L (5N), the prox, TV(z) (N), ||z - x|| and ||z|| (3N),
    y and A y as combinations of two iterates (8N, 8M), the data term (2M),
    A y - b (3M)."""
    return prox_values(n, ndim, inner) + 17 * n + 13 * m


def pdhg_values(n: int, m: int, ndim: int) -> int:
    """The data dual's update from A x of two iterates (16M), the data term
    (2M), the TV dual update (reads 2 + ndim, writes ndim), the primal update
    (reads 2 + ndim, writes 1), TV(x) (N), ||x - x_old|| and ||x|| (3N)."""
    return 18 * m + n * ((2 + 2 * ndim) + (3 + ndim) + 1 + 3)


def sirt_values(n: int, m: int) -> int:
    """leveret.sirt without a box: r *= R (3M), b - A x (3M), update *= C and x += update (6N)."""
    return 6 * n + 6 * m


def _gib(b: float) -> str:
    return f"{b / 2**30:.2f} GiB"


def dry_run(args) -> int:
    from leveret.algorithms.regularised import memory_bytes

    g, vol = geometry(args.size, args.views)
    A = _Shapes(g, vol)
    n, m = vol.size, math.prod(g.projection_shape)
    print(
        f"cone {args.size}^3 from {args.views} x {args.size}^2, Joseph, float32: volume {_gib(n * ITEMSIZE)}, "
        f"projections {_gib(m * ITEMSIZE)}"
    )
    print(
        f"memory besides the operator's own: FISTA {_gib(memory_bytes('fista', A))}, "
        f"PDHG {_gib(memory_bytes('pdhg', A))}, "
        f"PDHG preconditioned {_gib(memory_bytes('pdhg', A, preconditioned=True))}"
    )
    rate = args.rate
    for name, values in [
        (f"TV prox, {args.tv_iterations} FGP iterations", prox_values(n, 3, args.tv_iterations)),
        ("FISTA-TV elementwise + prox", fista_values(n, m, 3, args.tv_iterations)),
        ("PDHG-TV elementwise + TV steps", pdhg_values(n, m, 3)),
        ("SIRT elementwise", sirt_values(n, m)),
    ]:
        print(
            f"{name:40s} {_gib(values * ITEMSIZE):>11s}  {values * ITEMSIZE / rate * 1e3:8.2f} ms at "
            f"{rate / 1e12:.1f} TB/s"
        )
    return 0


class _Shapes:
    """What memory_bytes reads of a projector, without building one."""

    def __init__(self, g, vol):
        self.volume, self.projection_shape, self.dtype = vol, tuple(g.projection_shape), np.dtype(np.float32)


def _iteration_time(run, k: int, sync) -> float:
    """(T(1 + k iterations) - T(1)) / k after one untimed run (bench_projector.py's)."""
    run(1)
    t1 = median_time(lambda: run(1), reps=1, warmup=0, sync=sync)
    tk = median_time(lambda: run(1 + k), reps=1, warmup=0, sync=sync)
    return max(tk - t1, 0.0) / k


def _fits(nbytes: int, what: str, devices) -> bool:
    import cupy as cp
    from leveret.cuda.devices import parse

    ids = [cp.cuda.Device().id] if devices is None else sorted(set(parse(devices).ids))
    cp.get_default_memory_pool().free_all_blocks()
    free = min(_free(d) for d in ids)
    if nbytes > 0.9 * free:
        print(f"skipped {what}: needs about {_gib(nbytes)} on a GPU, {_gib(free)} free", flush=True)
        return False
    return True


def _free(device: int) -> int:
    import cupy as cp

    with cp.cuda.Device(device):
        return cp.cuda.runtime.memGetInfo()[0]


def bench(args) -> None:
    import cupy as cp
    import leveret
    from leveret.algorithms import operator_norm
    from leveret.algorithms.regularised import _power_iteration, memory_bytes
    from leveret.operators import tv as tvop

    sync = cp.cuda.Device().synchronize
    g, vol = geometry(args.size, args.views)
    label = f"cone {args.size}^3, {args.views} x {args.size}^2"
    tag = "" if args.devices is None else f", devices={args.devices!r}"
    n, m = vol.size, math.prod(g.projection_shape)
    updates = n * args.views
    rate_of = {}

    x = cp.random.default_rng(0).random(vol.shape, dtype=cp.float32)
    copy_dst = cp.empty_like(x)
    t = median_time(lambda: copy_dst.__setitem__(Ellipsis, x), reps=5, sync=sync)
    rate_of["copy"] = 2 * n * ITEMSIZE / t
    record(f"{label} copy one volume", t, None, note=f"{rate_of['copy'] / 1e12:.2f} TB/s (read + write)")
    del copy_dst
    rate = rate_of["copy"]

    A = leveret.Projector(g, vol, model="joseph", backend="cuda", devices=args.devices)
    b = A(x)
    t_a = median_time(lambda: A(x, out=b), reps=3, sync=sync)
    record(f"{label} A{tag}", t_a, updates, note=f"structured={A.structured}")
    back = cp.empty_like(x)
    t_at = median_time(lambda: A.T(b, out=back), reps=3, sync=sync)
    record(f"{label} A.T{tag}", t_at, updates, note=f"transpose={A.transpose!r}")
    del back

    # the TV steps alone, beside their memory bound
    dual = cp.zeros((3,) + vol.shape, cp.float32)
    z = cp.empty_like(x)
    t = median_time(lambda: tvop.prox(x, 0.01, iterations=args.tv_iterations, dual=dual, out=z), reps=3, sync=sync)
    bound = prox_values(n, 3, args.tv_iterations) * ITEMSIZE / rate
    record(
        f"{label} TV prox, {args.tv_iterations} FGP iterations",
        t,
        None,
        note=f"bound {bound * 1e3:.2f} ms at the copy rate ({t / bound:.2f}x)",
    )
    t = median_time(lambda: tvop.total_variation(x), reps=5, sync=sync)
    record(f"{label} TV value", t, None, note=f"bound {n * ITEMSIZE / rate * 1e3:.2f} ms")
    del dual, z
    cp.get_default_memory_pool().free_all_blocks()

    t = median_time(lambda: _power_iteration(A, 10), reps=1, sync=sync)
    record(
        f"{label} norm, power iteration{tag}",
        t,
        None,
        note=f"||A|| <= {operator_norm(A):.5g}, at most 10 A/A.T pairs, once per projector",
    )

    k = args.k
    t_sirt = _iteration_time(lambda i: leveret.sirt(b, A, i), k, sync)
    pred = t_a + t_at + sirt_values(n, m) * ITEMSIZE / rate
    record(f"{label} SIRT iteration{tag}", t_sirt, updates, note=f"predicted {pred * 1e3:.1f} ms")
    cp.get_default_memory_pool().free_all_blocks()

    t_fista = None
    need = memory_bytes("fista", A) + 2 * n * ITEMSIZE
    if _fits(need, "FISTA-TV", args.devices):
        t_fista = _iteration_time(
            lambda i: leveret.fista(b, A, i, tv=args.tv, nonnegative=True, tv_iterations=args.tv_iterations), k, sync
        )
        pred = t_a + t_at + fista_values(n, m, 3, args.tv_iterations) * ITEMSIZE / rate
        record(
            f"{label} FISTA-TV iteration{tag}",
            t_fista,
            updates,
            note=f"tv_iterations={args.tv_iterations}; predicted {pred * 1e3:.1f} ms; {t_fista / t_sirt:.2f}x SIRT's",
        )
        cp.get_default_memory_pool().free_all_blocks()
    need = memory_bytes("pdhg", A) + 2 * n * ITEMSIZE
    if _fits(need, "PDHG-TV", args.devices):
        t_pdhg = _iteration_time(lambda i: leveret.pdhg(b, A, i, tv=args.tv, nonnegative=True), k, sync)
        pred = t_a + t_at + pdhg_values(n, m, 3) * ITEMSIZE / rate
        record(
            f"{label} PDHG-TV iteration{tag}",
            t_pdhg,
            updates,
            note=f"predicted {pred * 1e3:.1f} ms; {t_pdhg / t_sirt:.2f}x SIRT's",
        )
        cp.get_default_memory_pool().free_all_blocks()
    if t_fista is not None:
        print(f"FISTA-TV / SIRT per iteration: {t_fista / t_sirt:.2f} (aim: at most 1.3)", flush=True)
    del A, b, x
    cp.get_default_memory_pool().free_all_blocks()
    if not args.no_astra and args.devices is None:
        bench_astra(g, vol, label, k)


def bench_astra(g, vol, label: str, k: int) -> None:
    try:
        import astra
    except ImportError as exc:
        print(f"ASTRA not available: {exc}")
        return
    from common import astra_cone_geometry

    pg, vg = astra_cone_geometry(g, vol, pixel_size=PIXEL * 512 / vol.shape[0])
    n_views, n_rows, n_cols = g.projection_shape
    host = np.random.default_rng(0).random((n_rows, n_views, n_cols), dtype=np.float32)
    pid = astra.data3d.create("-proj3d", pg, host)
    vid = astra.data3d.create("-vol", vg, 0)
    cfg = astra.astra_dict("SIRT3D_CUDA")
    cfg["ProjectionDataId"], cfg["ReconstructionDataId"] = pid, vid
    aid = astra.algorithm.create(cfg)
    t = _iteration_time(lambda n: astra.algorithm.run(aid, n), k, None)
    record(f"{label} SIRT iteration", t, vol.size * n_views, peer="astra", note="SIRT3D_CUDA")
    astra.algorithm.delete(aid)
    astra.data3d.delete([pid, vid])


def parse_devices(text):
    if text is None:
        return None
    from leveret.cuda.devices import DeviceSet

    if text.strip().lower() == "all":
        return "all"
    ids = [int(p) for p in text.split(",")]
    return DeviceSet(ids, shared=len(set(ids)) < len(ids))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=512, help="volume edge and detector rows/columns (512)")
    parser.add_argument("--views", type=int, default=720, help="views over 360 degrees (720)")
    parser.add_argument("--tv", type=float, default=1.0, help="TV weight (no effect on the time; 1.0)")
    parser.add_argument("--tv-iterations", type=int, default=10, help="FGP iterations per prox (10)")
    parser.add_argument("--k", type=int, default=2, help="iterations timed beyond the first (2)")
    parser.add_argument("--devices", default=None, help="GPUs of the projector: 'all' or ids, e.g. 0,1")
    parser.add_argument("--no-astra", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="sizes, memory and byte counts; no GPU")
    parser.add_argument(
        "--rate", type=float, default=4.0e12, help="memory rate for --dry-run's predictions, bytes/s (4e12)"
    )
    parser.add_argument("--out", default=None, help="write the rows as JSON")
    args = parser.parse_args(argv)
    if args.dry_run:
        return dry_run(args)
    args.devices = parse_devices(args.devices)
    meta = metadata(with_devices=True)
    print_header()
    bench(args)
    if args.out:
        write_results(args.out, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
