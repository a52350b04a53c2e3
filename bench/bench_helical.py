"""Helical cone-beam FDK, laminography FBP, and the Projector on both; ASTRA in
the same run where it has the operation.

Helical (default): a 64-row medical-CT-like detector (64 x 736 pixels of 1.0 mm
at 1040 mm from the source, 570 mm source radius: 0.548 mm and 35.1 mm at the
axis), 1000 views per turn, pitch = the detector's height at the axis
(pitch factor 1), 4000 views (4 turns); a volume of 512^2 voxels of 0.68 mm
(348 mm across) and 256 slices spread over the z range the helix covers
(``leveret.algorithms.helical.covered_z``). GU/s counts every voxel for
every view of the scan (n_views x voxels / time; each slab is back-projected
from the views that see it only, about a third here: ``views/slab`` in the
note). ASTRA has no helical FDK; its rows are the cone_vec back-projection
of all views (direct_BP3D), which a helical FDK needs at least once.

Laminography: parallel beam, tilt 30 degrees, 1200 views over a turn of a
512 x 768 detector, a 512^2 x 128 volume (laminography_fbp); cone beam
likewise. ASTRA: parallel3d_vec / cone_vec back-projection.

Projector: A and A.T (Joseph, float32) on a smaller helical scan and on the
laminography scan; ASTRA's direct_FP3D / direct_BP3D on the same vectors.

    PYTHONPATH=src python3 bench/bench_helical.py --out bench_helical.json
    PYTHONPATH=src python3 bench/bench_helical.py --quick            # 1/4 of every size: a minute
    PYTHONPATH=src python3 bench/bench_helical.py --only helical --views 4000 --rows 64 --cols 736 --size 512 --slices 256
    PYTHONPATH=src python3 bench/bench_helical.py --dry-run          # the problems and memory, no GPU

Needs an NVIDIA GPU (CuPy); ASTRA rows where ``import astra`` works.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from common import median_time, metadata, print_header, record, write_results

SID, SDD, PIXEL = 570.0, 1040.0, 1.0  # mm
VOXEL = 0.68  # mm (512 voxels: 348 mm across)
TILT = np.radians(30.0)
PARTS = ("helical", "laminography", "projector")


# -- problems ----------------------------------------------------------------------------------
def helical_problem(views, rows, cols, size, slices, views_per_turn, pitch_factor, voxel):
    """(geometry, volume, note): the helical scan and the volume of ``slices`` spread over its covered z."""
    import leveret
    from leveret.algorithms.helical import covered_z

    height = rows * PIXEL * SID / SDD
    t = np.arange(views) * 2 * np.pi / views_per_turn
    g = leveret.ConeGeometry.helical(t, pitch_factor * height, SID, SDD, rows, cols, PIXEL)
    xy = leveret.VolumeGeometry((1, size, size), voxel)
    lo, hi = covered_z(g, xy)
    dz = 0.999 * (hi - lo) / slices
    vol = leveret.VolumeGeometry((slices, size, size), (dz, voxel, voxel), center=((lo + hi) / 2, 0.0, 0.0))
    return g, vol, f"pitch {pitch_factor:g} x {height:.1f} mm, {views_per_turn} views/turn, slices {dz:.3f} mm"


def laminography_problem(views, rows, cols, size, slices, cone: bool):
    import leveret

    t = np.arange(views) * 2 * np.pi / views
    if cone:
        g = leveret.ConeGeometry.laminography(t, TILT, 600.0, 1200.0, rows, cols, 2 * VOXEL)
    else:
        g = leveret.ParallelVecGeometry.laminography(t, TILT, rows, cols, VOXEL)
    vol = leveret.VolumeGeometry((slices, size, size), VOXEL)
    return g, vol


# -- leveret -------------------------------------------------------------------------------------
def bench_helical(args):
    import cupy as cp
    import leveret

    g, vol, note = helical_problem(
        args.views, args.rows, args.cols, args.size, args.slices, args.views_per_turn, args.pitch_factor, args.voxel
    )
    label = f"helical FDK {args.size}^2 x {args.slices} from {args.views} x {args.rows}x{args.cols}"
    updates = g.n_views * vol.size
    sync = cp.cuda.Device().synchronize
    host = np.random.default_rng(0).random(g.projection_shape, dtype=np.float32)
    proj = cp.asarray(host)
    stats: dict = {}
    t = median_time(lambda: leveret.fdk(proj, g, vol, stats=stats), reps=3, sync=sync)
    record(
        f"{label}, device arrays",
        t,
        updates,
        note=f"{note}; {stats['n_pi']}-PI window; views/slab {stats['views_per_slab']:.0f}; "
        f"filter {stats['filter'] * 1e3:.0f} ms, BP {stats['backproject'] * 1e3:.0f} ms",
    )
    for slab in args.slab_slices:
        t = median_time(lambda: leveret.fdk(proj, g, vol, slab_slices=slab, stats=stats), reps=3, sync=sync)
        record(
            f"{label}, device arrays, slab_slices {slab}",
            t,
            updates,
            note=f"views/slab {stats['views_per_slab']:.0f}; BP {stats['backproject'] * 1e3:.0f} ms",
        )
    t = median_time(lambda: leveret.fdk(host, g, vol, backend="cuda"), reps=3, sync=sync)
    record(f"{label}, NumPy arrays", t, updates, note="filtered views kept on the GPU")
    del proj
    cp.get_default_memory_pool().free_all_blocks()
    if not args.no_astra:
        astra_bp(g, vol, f"cone_vec BP {args.size}^2 x {args.slices} from {args.views} x {args.rows}x{args.cols}")


def bench_laminography(args):
    import cupy as cp
    import leveret

    sync = cp.cuda.Device().synchronize
    for cone in (False, True):
        g, vol = laminography_problem(args.lam_views, args.lam_rows, args.lam_cols, args.size, args.lam_slices, cone)
        kind = "cone" if cone else "parallel"
        label = (
            f"laminography FBP ({kind}, 30 deg) {args.size}^2 x {args.lam_slices} from "
            f"{args.lam_views} x {args.lam_rows}x{args.lam_cols}"
        )
        proj = cp.random.random(g.projection_shape, dtype=cp.float32)
        t = median_time(lambda: leveret.laminography_fbp(proj, g, vol), reps=3, sync=sync)
        record(f"{label}, device arrays", t, g.n_views * vol.size, note="weights, row ramp, BP")
        del proj
        cp.get_default_memory_pool().free_all_blocks()
        if not args.no_astra:
            astra_bp(
                g,
                vol,
                f"{'cone_vec' if cone else 'parallel3d_vec'} BP {args.size}^2 x {args.lam_slices} "
                f"from {args.lam_views} x {args.lam_rows}x{args.lam_cols}",
            )


def bench_projector(args):
    import cupy as cp
    import leveret

    sync = cp.cuda.Device().synchronize
    half = max(16, args.size // 2)
    hv = max(64, args.views // 2)
    problems = [
        (
            f"helical {half}^2 x {args.slices // 2} from {hv} x {args.rows}x{args.cols // 2}",
            helical_problem(
                hv,
                args.rows,
                args.cols // 2,
                half,
                args.slices // 2,
                args.views_per_turn // 2,
                args.pitch_factor,
                2 * args.voxel,
            )[:2],
        ),
        (
            f"laminography (parallel, 30 deg) {half}^2 x {args.lam_slices // 2} from {args.lam_views // 2} x "
            f"{args.lam_rows // 2}x{args.lam_cols // 2}",
            laminography_problem(
                args.lam_views // 2, args.lam_rows // 2, args.lam_cols // 2, half, args.lam_slices // 2, False
            ),
        ),
    ]
    for label, (g, vol) in problems:
        updates = g.n_views * vol.size
        x = cp.random.random(vol.shape, dtype=cp.float32)
        y = cp.empty(g.projection_shape, cp.float32)
        A = leveret.Projector(g, vol, model="joseph", backend="cuda")
        t = median_time(lambda: A(x, out=y), reps=3, sync=sync)
        record(f"Projector A {label}", t, updates, note=f"joseph float32, structured={A.structured}")
        back = cp.empty(vol.shape, cp.float32)
        t = median_time(lambda: A.T(y, out=back), reps=3, sync=sync)
        record(f"Projector A.T {label}", t, updates, note=f"transpose {A.transpose}")
        del x, y, back
        cp.get_default_memory_pool().free_all_blocks()
        if not args.no_astra:
            astra_fp_bp(g, vol, label)


# -- ASTRA --------------------------------------------------------------------------------------
def _astra_geometries(g, vol):
    import astra

    import leveret
    from common import astra_volume_window

    n_views, n_rows, n_cols = g.projection_shape
    if isinstance(g, leveret.ParallelVecGeometry):
        pg = astra.create_proj_geom("parallel3d_vec", n_rows, n_cols, g.to_astra_vectors())
    else:
        pg = astra.create_proj_geom("cone_vec", n_rows, n_cols, g.to_astra_vectors())
    return pg, astra.create_vol_geom(*astra_volume_window(vol))


def astra_bp(g, vol, label):
    try:
        import astra  # noqa: F401
    except ImportError as exc:
        print(f"ASTRA not available: {exc}")
        return
    from common import astra_direct_bp3d

    pg, vg = _astra_geometries(g, vol)
    n_views, n_rows, n_cols = g.projection_shape
    t = astra_direct_bp3d(pg, vg, (n_rows, n_views, n_cols), vol.shape)
    record(f"{label}, device arrays", t, n_views * vol.size, peer="astra", note="direct_BP3D, every view")


def astra_fp_bp(g, vol, label):
    try:
        import astra
        import astra.experimental as ae
        import cupy as cp
    except ImportError as exc:
        print(f"ASTRA not available: {exc}")
        return
    pg, vg = _astra_geometries(g, vol)
    n_views, n_rows, n_cols = g.projection_shape
    nz, ny, nx = vol.shape
    vol_d = cp.random.random(vol.shape, dtype=cp.float32)
    proj_d = cp.zeros((n_rows, n_views, n_cols), cp.float32)
    projector = astra.create_projector("cuda3d", pg, vg)
    vlink = astra.data3d.GPULink(vol_d.data.ptr, nx, ny, nz, nx * 4)
    plink = astra.data3d.GPULink(proj_d.data.ptr, n_cols, n_views, n_rows, n_cols * 4)
    sync = cp.cuda.Device().synchronize
    t = median_time(lambda: ae.direct_FP3D(projector, vlink, plink), reps=3, sync=sync)
    record(f"Projector A {label}", t, n_views * vol.size, peer="astra", note="direct_FP3D (unmatched)")
    t = median_time(lambda: ae.direct_BP3D(projector, vlink, plink), reps=3, sync=sync)
    record(f"Projector A.T {label}", t, n_views * vol.size, peer="astra", note="direct_BP3D (unmatched)")
    astra.projector3d.delete(projector)
    del vol_d, proj_d
    cp.get_default_memory_pool().free_all_blocks()


# -- the command ----------------------------------------------------------------------------------
def dry_run(args):
    """The problems, their memory and the helical window, without a GPU."""
    from leveret.algorithms.helical import HelicalWindow, views_seen
    from leveret.geometry.helix import fit_helix

    g, vol, note = helical_problem(
        args.views, args.rows, args.cols, args.size, args.slices, args.views_per_turn, args.pitch_factor, args.voxel
    )
    w = HelicalWindow(g, fit_helix(g))
    seen = [views_seen(w, vol.slab(k, min(vol.nz, k + 16))) for k in range(0, vol.nz, 16)]
    per_slab = np.mean([s[1] - s[0] for s in seen if s is not None])
    gib = lambda n: n * 4 / 2**30  # noqa: E731
    print(
        f"helical: {g!r}\n  {vol!r}\n  {note}; {w.n_pi}-PI window, edges {w.smoothing:.3f}, largest pitch "
        f"{w.max_pitch:.2f} mm; {per_slab:.0f} of {g.n_views} views per 16-slice slab\n"
        f"  projections {gib(np.prod(g.projection_shape)):.2f} GiB, volume {gib(vol.size):.2f} GiB"
    )
    for cone in (False, True):
        lg, lv = laminography_problem(args.lam_views, args.lam_rows, args.lam_cols, args.size, args.lam_slices, cone)
        print(
            f"laminography: {lg!r}\n  {lv!r}\n  projections {gib(np.prod(lg.projection_shape)):.2f} GiB, "
            f"volume {gib(lv.size):.2f} GiB"
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=PARTS, nargs="+", default=list(PARTS), help="which parts to run")
    parser.add_argument("--views", type=int, default=4000, help="helical views")
    parser.add_argument("--rows", type=int, default=64, help="helical detector rows")
    parser.add_argument("--cols", type=int, default=736, help="helical detector columns")
    parser.add_argument("--views-per-turn", type=int, default=1000)
    parser.add_argument("--pitch-factor", type=float, default=1.0, help="pitch over the detector's height at the axis")
    parser.add_argument("--size", type=int, default=512, help="voxels across (x and y)")
    parser.add_argument("--slices", type=int, default=256, help="helical volume slices")
    parser.add_argument("--voxel", type=float, default=VOXEL, help="voxel size in x and y, mm")
    parser.add_argument(
        "--slab-slices", type=int, nargs="*", default=[32], help="also time helical FDK with these slab thicknesses"
    )
    parser.add_argument("--lam-views", type=int, default=1200, help="laminography views (one turn)")
    parser.add_argument("--lam-rows", type=int, default=512)
    parser.add_argument("--lam-cols", type=int, default=768)
    parser.add_argument("--lam-slices", type=int, default=128)
    parser.add_argument("--quick", action="store_true", help="every size / 4 (views / 4)")
    parser.add_argument("--no-astra", action="store_true", help="leave out the ASTRA rows")
    parser.add_argument("--dry-run", action="store_true", help="print the problems; no GPU needed")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.quick:
        for name in (
            "views",
            "cols",
            "size",
            "slices",
            "lam_views",
            "lam_rows",
            "lam_cols",
            "lam_slices",
            "views_per_turn",
        ):
            setattr(args, name, max(8, getattr(args, name) // 4))
        args.rows = max(16, args.rows // 2)
        args.voxel *= 4
    if args.dry_run:
        dry_run(args)
        return 0
    meta = metadata(with_devices=True)
    print_header()
    for part in args.only:
        {"helical": bench_helical, "laminography": bench_laminography, "projector": bench_projector}[part](args)
    if args.out:
        write_results(args.out, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
