"""Preprocessing before the back-projection: Paganin phase retrieval and the combined ring removal
of Vo et al. (2018) on the GPU, with httomolibgpu (CuPy) timed in the same run where it imports;
the centre of rotation (Vo et al. 2014) on the CPU.

Problems (the issue's, H200):
  Paganin: 2048 projections of 2048^2 on the device, float32, in place
           (20 keV, 0.1 m, 1 um pixels, delta/beta 300: 76 rows of padding each side).
  Rings:   2048 sinograms of 2048 angles x 2048 columns on the device (projections
           (2048, 2048, 2048)), method "all" with the paper's sizes (51, 21), in slabs of
           --slab-rows detector rows (the disk-to-disk pipeline's unit), into a second array.
           The sinograms: one phantom sinogram, 1 % noise, and stripes of each kind.
  Centre:  find_center "auto" on 1800 views over 0-179.9 degrees of 16 rows x 2048 columns,
           NumPy (what `leveret recon --center auto` gives it): Vo's method.

Each row is the median wall time after a warm-up; --split adds the time of each step of the
ring removal on one slab (dead columns, sort, large stripes, median, unsort). httomolibgpu's
functions run on the same arrays, in chunks that fit the GPU's memory (the note gives the chunk);
where it does not import the row says why.

    PYTHONPATH=src python3 bench/bench_preprocess.py --out bench_preprocess.json --split
    PYTHONPATH=src python3 bench/bench_preprocess.py --quick            # 256^3: checks the script
    PYTHONPATH=src python3 bench/bench_preprocess.py --cpu --quick      # the NumPy paths only
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time

import numpy as np

from common import median_time, metadata, print_header, record, write_results

PAGANIN = dict(energy=20.0, distance=0.1, pixel_size=1e-6, delta_beta=300.0)


def stripes_problem(n, xp, seed=0):
    """(n angles, n rows, n columns) float32 line integrals: one phantom sinogram for every row,
    1 % noise, and in every row stripes of each kind (full, partial, large, dead)."""
    import leveret
    from leveret.phantom import EllipsePhantom, disk, random_ellipses

    angles = np.linspace(0, np.pi, n, endpoint=False)
    phantom = EllipsePhantom(list(random_ellipses(30, 7, radius=0.39 * n)) + list(disk(0.44 * n, 0.4)))
    sino = phantom.project(leveret.ParallelGeometry(angles, n)).astype(np.float32)
    sino *= 2.5 / sino.max()
    rng = xp.random.default_rng(seed) if xp is np else xp.random
    data = xp.asarray(sino)[:, None, :] + 0.01 * rng.standard_normal((n, n, n), dtype=xp.float32)
    c = lambda frac: int(frac * n)  # noqa: E731
    data[:, :, c(0.15)] += 0.03  # full
    data[: n // 2, :, c(0.3)] -= 0.03  # partial
    data[:, :, c(0.6) : c(0.6) + max(2, n // 170)] += 0.03  # large
    data[:, :, c(0.8)] = 0.5  # dead
    return data


def bench_paganin(n, xp, reps):
    from leveret.preprocess import phase_border, retrieve_phase

    sync = _sync(xp)
    t = (xp.random.default_rng(1) if xp is np else xp.random).uniform(0.3, 1.0, (n, n, n)).astype(xp.float32)
    seconds = median_time(lambda: retrieve_phase(t, out=t, **PAGANIN), reps=reps, sync=sync)
    where = "device arrays" if xp is not np else "NumPy"
    record(
        f"Paganin {n} x {n}^2, float32, {where}, in place",
        seconds,
        0,
        note=f"padding {phase_border(**PAGANIN)} px each side",
    )
    if xp is not np:
        _httomolibgpu_paganin(t, n, reps)


def _httomolibgpu_paganin(t, n, reps):
    """httomolibgpu's Paganin filters on the same stack, in chunks of views that fit."""
    import cupy as cp

    try:
        from httomolibgpu.prep import phase
    except Exception as exc:  # noqa: BLE001 (any import failure)
        record(f"Paganin {n} x {n}^2", float("nan"), 0, peer="httomo", note=f"not run: {exc!r}"[:120])
        return
    calls = []
    if hasattr(phase, "paganin_filter"):
        params = inspect.signature(phase.paganin_filter).parameters
        kw = {}
        for name, value in (
            ("pixel_size", PAGANIN["pixel_size"]),
            ("distance", PAGANIN["distance"]),
            ("energy", PAGANIN["energy"]),
            ("ratio_delta_beta", PAGANIN["delta_beta"]),
        ):
            if name in params:
                kw[name] = value
        calls.append(("paganin_filter", lambda x: phase.paganin_filter(x, **kw)))
    if hasattr(phase, "paganin_filter_tomopy"):  # centimetres; its filter's alpha is beta/delta
        calls.append(
            (
                "paganin_filter_tomopy",
                lambda x: phase.paganin_filter_tomopy(
                    x,
                    pixel_size=PAGANIN["pixel_size"] * 100,
                    dist=PAGANIN["distance"] * 100,
                    energy=PAGANIN["energy"],
                    alpha=1 / PAGANIN["delta_beta"],
                ),
            )
        )
    if hasattr(phase, "paganin_filter_savu"):  # micrometres
        calls.append(
            (
                "paganin_filter_savu",
                lambda x: phase.paganin_filter_savu(
                    x,
                    ratio=PAGANIN["delta_beta"],
                    energy=PAGANIN["energy"],
                    distance=PAGANIN["distance"],
                    resolution=PAGANIN["pixel_size"] * 1e6,
                ),
            )
        )
    chunk = max(1, min(n, int(2**33 // (16 * (2 * n) ** 2))))  # complex64 of the padded views, x2
    for name, fn in calls:

        def run():
            for v0 in range(0, n, chunk):
                fn(t[v0 : v0 + chunk])

        try:
            seconds = median_time(run, reps=reps, sync=cp.cuda.Device().synchronize)
            record(
                f"Paganin {n} x {n}^2, float32, device arrays",
                seconds,
                0,
                peer="httomo",
                note=f"{name}, {chunk} views per call",
            )
        except Exception as exc:  # noqa: BLE001
            record(f"Paganin {n} x {n}^2", float("nan"), 0, peer="httomo", note=f"{name} failed: {exc!r}"[:120])
        cp.get_default_memory_pool().free_all_blocks()


def bench_rings(n, xp, reps, slab_rows, split):
    from leveret.preprocess import remove_stripes

    sync = _sync(xp)
    data = stripes_problem(n, xp)
    out = xp.empty_like(data)
    slab_rows = min(slab_rows, n)

    def run():
        for r0 in range(0, n, slab_rows):
            out[:, r0 : r0 + slab_rows] = remove_stripes(data[:, r0 : r0 + slab_rows], method="all")

    seconds = median_time(run, reps=reps, warmup=1, sync=sync)
    where = "device arrays" if xp is not np else "NumPy"
    record(f"rings 'all' {n} sinograms of {n} x {n}, float32, {where}", seconds, 0, note=f"slabs of {slab_rows} rows")
    if split:
        _split(data[:, :slab_rows], xp, sync)
    if xp is not np:
        _httomolibgpu_rings(data, out, n, reps, slab_rows)


def _split(slab, xp, sync):
    """The steps of method "all" on one slab, each timed alone."""
    from leveret.preprocess import stripes as s

    slab = xp.ascontiguousarray(slab)
    size, large = s.SIZES["all"], s.LARGE_SIZE
    steps = {}
    steps["dead columns"] = median_time(lambda: s._dead_columns(slab, 3.0, large, xp), reps=3, sync=sync)
    ordered, order = s.sort_angles(slab, xp)
    steps["sort"] = median_time(lambda: s.sort_angles(slab, xp), reps=3, sync=sync)
    steps["large stripes"] = median_time(
        lambda: s._remove_large_sorted(ordered.copy(), 3.0, large, 0.1, xp), reps=3, sync=sync
    )
    steps["median 21"] = median_time(lambda: s.median_across_columns(ordered, size, xp), reps=3, sync=sync)
    steps["unsort"] = median_time(lambda: s.unsort_angles(ordered, order, xp), reps=3, sync=sync)
    record(
        f"rings 'all' steps, one slab {tuple(slab.shape)}",
        sum(steps.values()),
        0,
        note=", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in steps.items()),
    )


def _httomolibgpu_rings(data, out, n, reps, slab_rows):
    import cupy as cp

    try:
        from httomolibgpu.prep.stripe import remove_all_stripe
    except Exception as exc:  # noqa: BLE001
        record(f"rings 'all' {n} sinograms", float("nan"), 0, peer="httomo", note=f"not run: {exc!r}"[:120])
        return

    def run():
        for r0 in range(0, n, slab_rows):
            out[:, r0 : r0 + slab_rows] = remove_all_stripe(
                cp.ascontiguousarray(data[:, r0 : r0 + slab_rows]), snr=3.0, la_size=51, sm_size=21
            )

    try:
        seconds = median_time(run, reps=reps, warmup=1, sync=cp.cuda.Device().synchronize)
        record(
            f"rings 'all' {n} sinograms of {n} x {n}, float32, device arrays",
            seconds,
            0,
            peer="httomo",
            note=f"remove_all_stripe, slabs of {slab_rows} rows",
        )
    except Exception as exc:  # noqa: BLE001
        record(f"rings 'all' {n} sinograms", float("nan"), 0, peer="httomo", note=f"failed: {exc!r}"[:120])


def bench_center(n_cols, n_views, reps):
    """find_center "auto" on 16 rows (NumPy), the CPU path of `--center auto`."""
    import leveret
    from leveret.phantom import EllipsePhantom, disk, random_ellipses
    from leveret.preprocess import find_center

    angles = np.radians(np.linspace(0, 179.9, n_views))
    center = n_cols / 2 + 6.6
    phantom = EllipsePhantom(list(random_ellipses(25, 2, radius=0.4 * n_cols)) + list(disk(0.44 * n_cols, 0.3)))
    sino = phantom.project(leveret.ParallelGeometry(angles, n_cols, center=center)).astype(np.float32)
    sino *= 2.5 / sino.max()
    rng = np.random.default_rng(0)
    stack = sino[:, None, :] + rng.normal(0, 0.02, (n_views, 16, n_cols)).astype(np.float32)
    est = find_center(stack, angles)
    seconds = median_time(lambda: find_center(stack, angles), reps=reps)
    record(
        f"centre 'auto' {n_views} views x 16 rows x {n_cols}, CPU",
        seconds,
        0,
        note=f"method {est.method}, error {est.center - center:+.3f} px",
    )


def _sync(xp):
    if xp is np:
        return None
    return xp.cuda.Device().synchronize


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="256^3 instead of 2048^3 (checks the script)")
    parser.add_argument("--cpu", action="store_true", help="NumPy instead of CuPy (no peer)")
    parser.add_argument(
        "--only", choices=("paganin", "rings", "center"), action="append", help="run only these problems (repeatable)"
    )
    parser.add_argument("--slab-rows", type=int, default=256, help="detector rows per ring-removal call")
    parser.add_argument("--split", action="store_true", help="time each step of the ring removal on one slab")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", help="write the rows as JSON")
    args = parser.parse_args(argv)
    n = 256 if args.quick else 2048
    only = set(args.only or ("paganin", "rings", "center"))
    if args.cpu:
        xp = np
    else:
        import cupy as xp
    print_header()
    t0 = time.perf_counter()
    if "paganin" in only:
        bench_paganin(n, xp, args.reps)
        _free(xp)
    if "rings" in only:
        bench_rings(n, xp, args.reps, args.slab_rows, args.split)
        _free(xp)
    if "center" in only:
        bench_center(256 if args.quick else 2048, 225 if args.quick else 1800, args.reps)
    print(f"total {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if args.out:
        write_results(args.out, metadata(with_devices=not args.cpu))
    return 0


def _free(xp):
    if xp is not np:
        xp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    sys.exit(main())
