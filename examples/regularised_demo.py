"""Regularised reconstruction from few views and limited angles: TV (FISTA,
PDHG) against FDK/FBP, SIRT and CGLS, each at its best setting.

Cases (CPU, a few minutes each on two cores):

- phantom: the cone-beam head of ``examples/fewview_demo.py`` (modified 3D
  Shepp-Logan in 1/mm, exact line integrals averaged over 2 x 2 sub-pixels,
  Poisson counts at I0 photons per pixel), 64^3 voxels of 3.25 mm; few-view:
  30 views over 360 degrees; limited angle: 36 views over 120 degrees. The
  truth is the phantom rasterised (3 x 3 x 3 samples per voxel).
- savu: the bundled real parallel-beam scan (``leveret.datasets.savu_scan``),
  its 16 middle rows; few-view: 30 of its 91 views over 180 degrees (every
  3rd); limited angle: the 61 views within 120 degrees. There is no truth:
  the reference is FBP (Ram-Lak) from all 91 views, scored inside the disc
  that every view sees whole (the corners are outside the scan).

Every method gets its best setting against the truth (a favour no user has;
the same for all): FBP/FDK the best filter (and for FDK on a partial arc,
with or without Parker weights), clipped at 0; SIRT (non-negative) and CGLS
the best iteration (up to a cap, doubled while the best is at it); FISTA-TV (non-negative) the best weight of a
search in steps of 2.5x, run for a fixed number of iterations; PDHG at
FISTA's weight (same minimiser). PSNR and SSIM (scikit-image) over the whole
volume (the scan: inside its disc), data range that of the truth.

    python examples/regularised_demo.py --json regularised.json --out-dir docs/img
    python examples/regularised_demo.py --convergence      # PDHG steps and preconditioning
    python examples/regularised_demo.py --steps            # PDHG's default step, x 0.1 .. 10
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FILTERS = ("ram-lak", "shepp-logan", "hann")
SCENARIOS = ("few-view", "limited-angle")


def _fewview():
    """examples/fewview_demo.py: its head phantom, scan set-up and noise model."""
    spec = importlib.util.spec_from_file_location("fewview_demo", HERE / "fewview_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Case:
    name: str  # "phantom few-view", ...
    projections: np.ndarray  # line integrals, float32
    geometry: object
    grid: object
    truth: np.ndarray  # the phantom, or the full-data reference
    cone: bool
    arc_degrees: float
    regions: dict | None = None  # name -> voxels scored (None: all); the first picks the settings

    @property
    def data_range(self) -> float:
        return float(self.truth.max() - self.truth.min())


def phantom_case(scenario: str, size: int = 64, photons: float = 1e4, seed: int = 0) -> Case:
    import leveret

    fv = _fewview()
    if scenario == "few-view":
        angles, arc = np.linspace(0.0, 2 * np.pi, 30, endpoint=False), 360.0
    else:
        angles, arc = np.radians(np.linspace(0.0, 120.0, 36, endpoint=False)), 120.0

    def geometry(n):
        return leveret.ConeGeometry.circular(
            angles, sid=fv.SID, sdd=fv.SDD, n_rows=n, n_cols=n, pixel_size=fv.DET_SPAN / n
        )

    head = fv.head_phantom()
    noisy, _ = fv.simulate(geometry(2 * size), 2, head, photons, np.random.default_rng(seed))
    grid = leveret.VolumeGeometry((size,) * 3, voxel_size=fv.FOV / size)
    zz, yy, xx = np.meshgrid(*(grid.coordinates(a) for a in "zyx"), indexing="ij")
    # fewview_demo's "interior": inside the skull's inner surface shrunk by 2 voxels (the brain
    # away from the skull's partial-volume rim)
    brain = fv.Scan._shrunk(list(head)[1], 2 * fv.FOV / size).contains(xx, yy, zz)
    return Case(
        f"phantom {scenario}",
        noisy,
        geometry(size),
        grid,
        head.rasterize(grid, supersampling=3),
        cone=True,
        arc_degrees=arc,
        regions={"volume": None, "brain": brain},
    )


def savu_case(scenario: str, rows: int = 16) -> Case:
    import leveret

    scan = leveret.datasets.savu_scan()
    r0 = scan.projections.shape[1] // 2 - rows // 2
    p = scan.line_integrals()[:, r0 : r0 + rows]
    full = leveret.ParallelGeometry(scan.angles, p.shape[2], n_rows=rows, center=scan.center)
    grid = full.default_volume()
    reference = leveret.fbp(np.ascontiguousarray(p), full, grid, backend="cpu")
    if scenario == "few-view":
        views = np.arange(0, 90, 3)
    else:
        views = np.flatnonzero(np.degrees(scan.angles - scan.angles[0]) < 120.0 + 1e-6)
    geometry = leveret.ParallelGeometry(scan.angles[views], p.shape[2], n_rows=rows, center=scan.center)
    arc = float(np.degrees(np.ptp(scan.angles[views])))
    # scored inside the disc every view sees whole: the axis' distance to the nearer detector edge
    radius = min(scan.center, p.shape[2] - 1 - scan.center) - 2.0
    yy, xx = np.meshgrid(grid.coordinates("y"), grid.coordinates("x"), indexing="ij")
    disc = np.broadcast_to(xx**2 + yy**2 < radius**2, grid.shape)
    return Case(
        f"savu {scenario}",
        np.ascontiguousarray(p[views]),
        geometry,
        grid,
        reference,
        cone=False,
        arc_degrees=arc,
        regions={"disc": disc},
    )


def metrics(case: Case, volume) -> dict:
    """PSNR and SSIM (scikit-image's SSIM map, averaged over each region),
    per region: ``{"psnr": ..., "ssim": ..., "<region>": {"psnr", "ssim"}}``,
    the first region's at the top."""
    from skimage.metrics import structural_similarity

    t = case.truth.astype(np.float64)
    x = np.asarray(volume, np.float64)
    _, ssim_map = structural_similarity(t, x, data_range=case.data_range, full=True)
    out = {}
    for name, mask in case.regions.items():
        out[name] = {
            "psnr": psnr(case, volume, mask),
            "ssim": float(ssim_map.mean() if mask is None else ssim_map[mask].mean()),
        }
    first = out[next(iter(case.regions))]
    return {"psnr": first["psnr"], "ssim": first["ssim"], **out}


def psnr(case: Case, volume, mask="first") -> float:
    """PSNR over a region's voxels (``"first"``: the first region's; scikit-image's
    peak_signal_noise_ratio where it is all of them), data range the truth's."""
    if isinstance(mask, str):
        mask = next(iter(case.regions.values()))
    err = (np.asarray(volume, np.float64) - case.truth) ** 2
    mse = float(err.mean() if mask is None else err[mask].mean())
    return 10 * np.log10(case.data_range**2 / mse)


def analytic(case: Case) -> tuple[dict, np.ndarray]:
    """FDK (cone) or FBP (parallel), the best filter (and Parker weighting on a
    partial arc), clipped at 0."""
    import leveret

    best = None
    options = [(f, False) for f in FILTERS]
    if case.cone and case.arc_degrees < 360:
        options += [(f, True) for f in FILTERS]
    for f, parker in options:
        try:
            if case.cone:
                vol = leveret.fdk(
                    case.projections, case.geometry, case.grid, filter=f, short_scan=parker, backend="cpu"
                )
            else:
                vol = leveret.fbp(case.projections, case.geometry, case.grid, filter=f, backend="cpu")
        except ValueError as exc:  # Parker weights need a longer arc
            print(f"  {case.name}: {f} parker={parker} skipped: {exc}", flush=True)
            continue
        np.clip(vol, 0, None, out=vol)
        score = psnr(case, vol)
        if best is None or score > best[0]:
            setting = f + (", Parker" if parker else "")
            best = (score, setting, vol)
    return {"setting": best[1], **metrics(case, best[2])}, best[2]


def projector(case: Case):
    import leveret

    return leveret.Projector(case.geometry, case.grid, model="joseph", backend="cpu")


def best_iteration(case: Case, method: str, cap: int, max_cap: int = 1200, **kw) -> tuple[dict, np.ndarray]:
    """``method`` from zero, the iterate with the best PSNR up to ``cap``; run
    again with twice the cap while the best is the last one (up to ``max_cap``)."""
    import leveret

    best = {"psnr": -np.inf}

    def keep(x, info):
        score = psnr(case, x)
        if score > best["psnr"]:
            best.update(psnr=score, iteration=info["iteration"], volume=x.copy())

    while True:
        getattr(leveret, method)(case.projections, projector(case), cap, callback=keep, **kw)
        if best["iteration"] < cap or 2 * cap > max_cap:
            break
        best, cap = {"psnr": -np.inf}, 2 * cap
    vol = best.pop("volume")
    setting = f"{best['iteration']} iterations" + (" (the cap)" if best["iteration"] == cap else "")
    return {"setting": setting, "iterations": best["iteration"], **metrics(case, vol)}, vol


def tv_search(case: Case, iterations: int, start: float, factor: float = 2.5, evaluations: int = 6):
    """FISTA-TV (non-negative) for ``iterations`` at weights ``start * factor^k``,
    walking from ``start`` in the direction PSNR rises, then at the
    geometric midpoints beside the best: the best weight of them."""
    import leveret

    A = projector(case)
    scores = {}

    def score(lam):
        if lam not in scores:
            vol = leveret.fista(case.projections, A, iterations, tv=lam, nonnegative=True)
            scores[lam] = (psnr(case, vol), vol)
            print(f"  {case.name}: FISTA tv={lam:.4g}: PSNR {scores[lam][0]:.2f}", flush=True)
        return scores[lam][0]

    lam = start
    step = factor if score(start * factor) > score(start) else 1 / factor
    while len(scores) < evaluations and score(lam * step) > score(lam):
        lam *= step
    best = max(scores, key=lambda k: scores[k][0])
    for refine in (best * np.sqrt(factor), best / np.sqrt(factor)):
        score(refine)
    best = max(scores, key=lambda k: scores[k][0])
    return best, scores[best][1], {f"{k:.4g}": v[0] for k, v in sorted(scores.items())}


def run_case(
    case: Case,
    *,
    tv_start: float,
    sirt_cap: int = 150,
    cgls_cap: int = 40,
    fista_iterations: int = 100,
    pdhg_iterations: int = 200,
) -> tuple[dict, dict]:
    import leveret

    rows, volumes, t = {}, {}, {}
    t0 = time.perf_counter()
    rows["FBP/FDK"], volumes["FBP/FDK"] = analytic(case)
    t["analytic"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    rows["SIRT"], volumes["SIRT"] = best_iteration(case, "sirt", sirt_cap, nonnegative=True)
    t["sirt"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    rows["CGLS"], volumes["CGLS"] = best_iteration(case, "cgls", cgls_cap)
    t["cgls"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    lam, vol, searched = tv_search(case, fista_iterations, tv_start)
    rows["FISTA-TV"] = {
        "setting": f"tv={lam:.3g}, {fista_iterations} iterations",
        "tv": lam,
        "searched": searched,
        **metrics(case, vol),
    }
    volumes["FISTA-TV"] = vol
    t["fista"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    A = projector(case)
    stats_f, stats_p = {}, {}
    leveret.fista(case.projections, A, 1, tv=lam, nonnegative=True, x0=vol, stats=stats_f)
    vol_p = leveret.pdhg(case.projections, A, pdhg_iterations, tv=lam, nonnegative=True, stats=stats_p)
    rows["PDHG-TV"] = {
        "setting": f"tv={lam:.3g}, {pdhg_iterations} iterations",
        "tv": lam,
        "objective_vs_fista": stats_p["objective"][-1] / stats_f["objective"][-1] - 1,
        **metrics(case, vol_p),
    }
    volumes["PDHG-TV"] = vol_p
    t["pdhg"] = time.perf_counter() - t0
    for name, row in rows.items():
        regions = "  ".join(f"{r}: PSNR {row[r]['psnr']:6.2f} dB SSIM {row[r]['ssim']:.3f}" for r in case.regions)
        print(f"  {case.name}: {name:9s} {regions}  ({row['setting']})", flush=True)
    return {
        "rows": rows,
        "seconds": t,
        "arc_degrees": case.arc_degrees,
        "regions": list(case.regions),
        "views": int(case.projections.shape[0]),
    }, volumes


def figure(cases: list[Case], volumes: list[dict], results: list[dict], title: str):
    """One row per case: the truth (or reference) and each method's central
    slice (axial for the phantom, the middle row for the scan)."""
    from matplotlib.figure import Figure

    names = ["truth"] + list(volumes[0])
    fig = Figure(figsize=(2.0 * len(names), 2.4 * len(cases) + 0.4), layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(cases), len(names)))
    for row, (case, vols, res) in enumerate(zip(cases, volumes, results)):
        k = case.truth.shape[0] // 2
        # the phantom: fewview_demo's window (brain contrast); the scan: up to its 98th
        # percentile inside the disc, so the faint tube and the streaks show (the sample saturates)
        lo, hi = (
            (0.005, 0.045)
            if case.cone
            else (0.0, float(np.percentile(case.truth[k][next(iter(case.regions.values()))[k]], 98)))
        )
        for col, name in enumerate(names):
            ax = axes[row, col]
            img = case.truth if name == "truth" else vols[name]
            ax.imshow(img[k], cmap="gray", vmin=lo, vmax=hi, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if name == "truth":
                label = "phantom" if case.cone else "reference: FBP,\nall 91 views"
                ax.set_ylabel(f"{case.name}\n{res['views']} views, {res['arc_degrees']:.0f} deg", fontsize=7)
            else:
                r = res["rows"][name]
                label = f"{name}\n{r['psnr']:.1f} dB, SSIM {r['ssim']:.2f}"
                if "brain" in r:
                    label += f"\nbrain {r['brain']['psnr']:.1f} dB, {r['brain']['ssim']:.2f}"
            ax.set_title(label, fontsize=7)
    fig.suptitle(title, fontsize=8)
    return fig


def save_png(fig, path: Path, dpi: int, colors: int | None) -> None:
    from leveret.io.atomic import atomic_output

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path, overwrite=True) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")
        if colors is not None:
            from PIL import Image  # matplotlib's own dependency

            with Image.open(tmp) as im:
                small = im.convert("RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT)
            small.save(tmp, format="png", optimize=True)


def table(results: dict) -> str:
    """A Markdown table: one row per case and method, PSNR and SSIM per region."""
    lines = ["| case | method | PSNR (dB) | SSIM | setting |", "|---|---|---|---|---|"]
    for case, res in results.items():
        for name, row in res["rows"].items():
            cells = [
                " / ".join(f"{row[r][key]:.{d}f}" for r in res["regions"]) for key, d in (("psnr", 2), ("ssim", 3))
            ]
            lines.append(f"| {case} | {name} | {cells[0]} | {cells[1]} | {row['setting']} |")
    return "\n".join(lines)


# -- PDHG's steps, measured ----------------------------------------------------------------------


def convergence(
    size: int = 32, views: int = 30, tv: float = 2.0, iterations: int = 200, reference_iterations: int = 400
) -> dict:
    """PDHG's step choices on a small cone-beam problem (the head at ``size``^3,
    2 % Gaussian noise): relative objective gap to the best value found (FISTA
    run ``reference_iterations``) after 25..``iterations`` iterations for plain
    Chambolle-Pock (tau = sigma = 1/||K||), leveret's balanced scalar steps
    (the default) and the diagonal preconditioning of Pock and Chambolle
    (``preconditioned=True``); FISTA's own curve beside them."""
    import leveret
    from leveret.algorithms import operator_norm
    from leveret.operators import tv as tvop

    fv = _fewview()
    angles = np.linspace(0, 2 * np.pi, views, endpoint=False)
    geometry = leveret.ConeGeometry.circular(
        angles, sid=fv.SID, sdd=fv.SDD, n_rows=size, n_cols=size, pixel_size=fv.DET_SPAN / size
    )
    grid = leveret.VolumeGeometry((size,) * 3, voxel_size=fv.FOV / size)
    A = leveret.Projector(geometry, grid, model="joseph", backend="cpu")
    b = fv.head_phantom().project(geometry).astype(np.float32)
    b += np.random.default_rng(0).normal(0, 0.02 * b.max(), b.shape).astype(np.float32)
    curves = {}
    stats = {}
    leveret.fista(b, A, reference_iterations, tv=tv, nonnegative=True, tv_iterations=30, stats=stats)
    curves["FISTA (tv_iterations=30)"] = stats["objective"][:iterations]
    norm_k = float(np.hypot(operator_norm(A), np.sqrt(tvop.gradient_norm_bound(3))))
    for name, kw in [
        ("PDHG, plain (tau = sigma = 0.99 / ||K||)", None),
        ("PDHG, balanced steps (default)", {}),
        ("PDHG, diagonal preconditioning", {"preconditioned": True}),
    ]:
        s = {}
        if kw is None:
            _plain_pdhg(b, A, iterations, tv, 0.99 / norm_k, s)
        else:
            leveret.pdhg(b, A, iterations, tv=tv, nonnegative=True, stats=s, **kw)
        curves[name] = s["objective"]
        print(f"  {name}: done", flush=True)
    best = min(min(stats["objective"]), *(min(c) for c in curves.values()))
    checkpoints = [k for k in (25, 50, 100, 200, 400) if k <= iterations]
    gaps = {name: {k: (c[k - 1] - best) / best for k in checkpoints} for name, c in curves.items()}
    return {"size": size, "views": views, "tv": tv, "best": best, "gaps": gaps}


def step_sweep(
    size: int = 24,
    views: int = 20,
    weights=(0.5, 8.0),
    factors=(0.1, 0.3, 1.0, 3.0, 10.0),
    iterations: int = 150,
    reference_iterations: int = 300,
) -> dict:
    """PDHG's default primal step against ``factors`` times it, on the head at
    ``size``^3 (cone beam, ``views`` views, 2 % noise) at each TV weight, with
    lengths in mm and again in cm (the same line integrals; the weight
    scaled with the unit): relative objective gap after ``iterations``."""
    import leveret

    fv = _fewview()
    angles = np.linspace(0, 2 * np.pi, views, endpoint=False)
    rows = {}
    b = None
    for unit, unit_name in ((1.0, "mm"), (0.1, "cm")):
        geometry = leveret.ConeGeometry.circular(
            angles, sid=fv.SID * unit, sdd=fv.SDD * unit, n_rows=size, n_cols=size, pixel_size=fv.DET_SPAN * unit / size
        )
        grid = leveret.VolumeGeometry((size,) * 3, voxel_size=fv.FOV * unit / size)
        A = leveret.Projector(geometry, grid, model="joseph", backend="cpu")
        if b is None:  # line integrals do not depend on the unit
            b = fv.head_phantom().project(geometry).astype(np.float32)
            b += np.random.default_rng(0).normal(0, 0.02 * b.max(), b.shape).astype(np.float32)
        for weight in weights:
            tv = weight * unit
            stats = {}
            leveret.fista(b, A, reference_iterations, tv=tv, nonnegative=True, tv_iterations=30, stats=stats)
            best = min(stats["objective"])
            default = {}
            leveret.pdhg(b, A, 1, tv=tv, nonnegative=True, stats=default)
            gaps = {}
            for factor in factors:
                s = {}
                leveret.pdhg(b, A, iterations, tv=tv, nonnegative=True, tau=factor * default["tau"], stats=s)
                best = min(best, min(s["objective"]))
                gaps[factor] = s["objective"][-1]
            key = f"tv={tv:g}/{unit_name}"
            rows[key] = {f"{f:g}": (v - best) / best for f, v in gaps.items()}
            print(f"  {key}: " + "  ".join(f"x{f}: {g:.1e}" for f, g in rows[key].items()), flush=True)
    return {"size": size, "views": views, "iterations": iterations, "gaps": rows}


def _plain_pdhg(b, A, iterations, tv, step, stats):
    """Chambolle-Pock with one step for every block: tau = sigma = ``step``."""
    from leveret.operators import tv as tvop

    x = np.zeros(A.volume.shape, np.float32)
    x_old, ax, ax_old, y = x.copy(), np.zeros_like(b), np.zeros_like(b), np.zeros_like(b)
    p = np.zeros((3,) + x.shape, np.float32)
    stats["objective"] = []
    for _ in range(iterations):
        np.subtract(ax, ax_old, out=ax_old)
        ax_old += ax
        ax_old -= b
        ax_old *= step
        y += ax_old
        y /= 1 + step
        tvop.dual_update(x, p, sigma=step, bound=tv, z1=x_old, c0=2.0, c1=-1.0)
        g = A.T(y, out=x_old)
        x_new = tvop.primal_update(x, p, g, b=g, c=-1.0, step=step, bounds=(0.0, None))
        ax_new = A(x_new, out=ax_old)
        r = (ax_new - b).astype(np.float64)
        stats["objective"].append(0.5 * float(r.ravel() @ r.ravel()) + tv * tvop.total_variation(x_new))
        x_old, x = x, x_new
        ax_old, ax = ax, ax_new


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="phantom,savu", help="phantom, savu or both (default)")
    parser.add_argument("--size", type=int, default=64, help="phantom volume edge (default 64)")
    parser.add_argument("--photons", type=float, default=1e4, help="I0 per detector pixel (default 1e4)")
    parser.add_argument("--out-dir", default=".", help="folder of the PNGs (default: here)")
    parser.add_argument("--json", default=None, help="write every number here")
    parser.add_argument("--dpi", type=int, default=90)
    parser.add_argument("--colors", type=int, default=128, help="PNG colours (default 128)")
    parser.add_argument("--convergence", action="store_true", help="measure PDHG's step choices instead")
    parser.add_argument("--steps", action="store_true", help="PDHG's default step against multiples of it")
    args = parser.parse_args(argv)
    out = {}
    if args.convergence:
        res = convergence()
        print(f"relative objective gap, {res['size']}^3 cone beam, {res['views']} views, tv={res['tv']}:")
        for name, g in res["gaps"].items():
            print(f"  {name:45s} " + "  ".join(f"k={k}: {v:.1e}" for k, v in g.items()))
        out["convergence"] = res
    elif args.steps:
        out["steps"] = step_sweep()
    else:
        # starting weights of the search (data term per TV unit differ per case)
        starts = {"phantom": 1.0, "savu": 0.5}
        for kind in args.cases.split(","):
            cases, volumes, results = [], [], []
            for scenario in SCENARIOS:
                case = phantom_case(scenario, args.size, args.photons) if kind == "phantom" else savu_case(scenario)
                print(
                    f"{case.name}: {case.projections.shape[0]} views over {case.arc_degrees:.0f} degrees, "
                    f"volume {case.grid.shape}",
                    flush=True,
                )
                res, vols = run_case(case, tv_start=starts[kind])
                out[case.name] = res
                cases.append(case)
                volumes.append(vols)
                results.append(res)
            title = (
                "cone-beam head, 64^3, I0 = %g, axial slice z = 0" % args.photons
                if kind == "phantom"
                else "savu-image-test (real, parallel beam), middle row"
            )
            save_png(
                figure(cases, volumes, results, title),
                Path(args.out_dir) / f"regularised_{kind}.png",
                args.dpi,
                args.colors,
            )
        print(table({k: v for k, v in out.items()}))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
