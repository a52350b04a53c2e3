"""Few-view demonstration: iterative reconstruction from 1/4 of the views vs FDK.

A circular cone-beam scan (full 360 degrees) of the 3D Shepp-Logan head,
scaled to attenuation values of a real head, is simulated with exact line
integrals averaged over each detector pixel's area and Poisson noise. The full
scan has about the angular Nyquist number of views for the detector
(pi/2 x columns); the few-view scan takes every 4th of them. Compared against
the rasterised (supersampled) phantom, in four regions (whole volume, inside
the head, inside the skull, and inside the skull 2 voxels away from it):

(a) FDK from all views and (b) FDK from every 4th view, each with the
    Ram-Lak, Shepp-Logan and Hann filters (the best of the three is the
    baseline the iterative method must beat),
(c) OS-SART (or SIRT) on ``leveret.Projector`` from the same every 4th view,
    with the box constraint 0 <= mu <= mu(bone), run for a number of passes
    calibrated on a *different* phantom (no look at the test phantom). The
    discrepancy principle is evaluated and reported too.

Writes a PNG (central axial and coronal slices, and their differences from the
phantom), a JSON of every number, and prints a table. Numbers and command:
docs/fewview.md.

    python examples/fewview_demo.py --out fewview.png --json fewview.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

#: Attenuation per mm = MU_SCALE x the modified Shepp-Logan values (Toft's, in
#: [0, 1]): brain 0.2 -> 0.020 /mm (water at ~70 keV is 0.019 /mm), skull rim
#: 1.0 -> 0.10 /mm, the small features 0.1..0.3 -> 0.010..0.030 /mm.
MU_SCALE = 0.1
#: Upper bound of the box constraint, 1/mm: nothing in a head attenuates more
#: than the skull's bone (1.0 in Toft's units here). A user knows this from
#: the effective energy and the anatomy, not from the reconstruction.
MU_BONE = 1.0 * MU_SCALE
#: Head length scale: the phantom fits in [-RADIUS, RADIUS]^3 mm (skull
#: semi-axes 69 x 92 x 81 mm).
RADIUS = 100.0
SID, SDD = 500.0, 1000.0  # mm: source-isocentre, source-detector
FOV = 208.0  # mm: the volume's edge length (the head is 184 mm at most)
DET_SPAN = 440.0  # mm: the detector's edge length (magnification 2 at the axis)
FILTERS = ("ram-lak", "shepp-logan", "hann")
METHODS = ("os_sart", "sirt")
#: Regions of the RMSE: all voxels; inside the skull's outer surface; inside
#: its inner surface; and that inner surface shrunk by 2 voxels (the brain
#: away from the skull's partial-volume rim: a diagnostic, defined by geometry).
REGIONS = ("volume", "head", "brain", "interior")
#: Seed of the calibration phantom: fixed, and independent of the test's seed.
CALIBRATION_SEED = 12345


def head_phantom(radius: float = RADIUS, mu_scale: float = MU_SCALE):
    """``shepp_logan_3d(radius)`` (modified) with every value times ``mu_scale``: 1/mm."""
    from leveret import phantom

    base = phantom.shepp_logan_3d(radius=radius)
    return phantom.EllipsoidPhantom(
        phantom.Ellipsoid(e.value * mu_scale, e.semi_axes, e.center, e.rotation) for e in base
    )


def calibration_phantom(seed: int = CALIBRATION_SEED):
    """A phantom that is *not* the test head, used only to choose the number
    of iterations: a water ellipsoid (0.019 /mm, semi-axes 80 x 90 x 75 mm)
    in a 5 mm bone shell (0.1 /mm), with 12 random ellipsoidal inserts of
    +-0.004..0.012 /mm inside (``random_ellipsoids`` with ``seed``)."""
    from leveret import phantom

    rng = np.random.default_rng(seed)
    outer = (85.0, 95.0, 80.0)
    shell = [phantom.Ellipsoid(MU_BONE, outer), phantom.Ellipsoid(0.019 - MU_BONE, tuple(a - 5.0 for a in outer))]
    inserts = [
        phantom.Ellipsoid(float(rng.choice([-1, 1])) * e.value * 0.015, e.semi_axes, e.center, e.rotation)
        for e in phantom.random_ellipsoids(12, rng, radius=70.0)
    ]
    return phantom.EllipsoidPhantom(shell + inserts)


def nyquist_views(n_cols: int) -> int:
    """About pi/2 x ``n_cols`` views (the angular sampling that matches the
    detector's radial sampling), rounded to a multiple of 4."""
    return int(4 * round(np.pi / 2 * n_cols / 4))


def simulate(geometry_fine, subsampling: int, head, photons: float, rng):
    """Exact line integrals of ``head`` on ``geometry_fine`` (a detector with
    ``subsampling`` x ``subsampling`` sub-pixels per pixel), intensities
    averaged over each pixel's area (what a detector pixel measures), then
    counts ~ Poisson(I0 x mean exp(-p)) and ``-log(max(counts, 1) / I0)``.
    Returns (noisy line integrals float32, counts), the detector of
    ``geometry_fine`` binned by ``subsampling``."""
    fine = head.project(geometry_fine)
    n, r, c = fine.shape
    s = subsampling
    mean = np.exp(-fine).reshape(n, r // s, s, c // s, s).mean(axis=(2, 4))
    counts = rng.poisson(photons * mean)
    noisy = -np.log(np.maximum(counts, 1) / photons)
    return noisy.astype(np.float32), counts


def noise_level(counts) -> float:
    """delta = sqrt(sum 1 / max(counts, 1)): the expected norm of the noise in
    ``-log(counts / I0)`` (its variance is about 1 / counts per ray), from the
    measured counts alone."""
    return float(np.sqrt(np.sum(1.0 / np.maximum(counts, 1).astype(np.float64))))


def iterate(method: str, projections, projector, iterations: int, callback=None, upper: float | None = MU_BONE):
    """``method`` from zero for ``iterations`` passes, box 0 <= mu <= ``upper``
    (None: non-negativity only)."""
    import leveret

    kw = dict(bounds=(0.0, upper), callback=callback)
    if method == "os_sart":
        return leveret.os_sart(projections, projector, iterations, **kw)
    if method == "sirt":
        return leveret.sirt(projections, projector, iterations, **kw)
    raise ValueError(f"method: expected one of {METHODS}, got {method!r}")


class Scan:
    """One simulated scan: geometries, the volume grid, data, truth, masks."""

    def __init__(self, phantom, size, det_pixels, n_views, stride, photons, subsampling, supersampling, rng):
        import leveret

        angles = np.linspace(0.0, 2 * np.pi, n_views, endpoint=False)
        self.few = np.arange(0, n_views, stride)
        px = DET_SPAN / det_pixels

        def geom(a, n):
            return leveret.ConeGeometry.circular(a, sid=SID, sdd=SDD, n_rows=n, n_cols=n, pixel_size=DET_SPAN / n)

        self.geometry = geom(angles, det_pixels)
        self.few_geometry = geom(angles[self.few], det_pixels)
        self.grid = leveret.VolumeGeometry((size,) * 3, voxel_size=FOV / size)
        self.projections, self.counts = simulate(
            geom(angles, det_pixels * subsampling), subsampling, phantom, photons, rng
        )
        self.few_projections = np.ascontiguousarray(self.projections[self.few])
        self.few_counts = self.counts[self.few]
        self.truth = phantom.rasterize(self.grid, supersampling=supersampling)
        zz, yy, xx = np.meshgrid(*(self.grid.coordinates(a) for a in "zyx"), indexing="ij")
        es = list(phantom)
        self.masks = {
            "volume": np.ones(self.truth.shape, bool),
            "head": es[0].contains(xx, yy, zz),  # the skull's outer surface
            "brain": es[1].contains(xx, yy, zz),  # the skull's inner surface
            "interior": self._shrunk(es[1], 2 * FOV / size).contains(xx, yy, zz),
        }
        self.pixel_mm = px

    @staticmethod
    def _shrunk(ellipsoid, margin: float):
        from leveret import phantom

        return phantom.Ellipsoid(
            ellipsoid.value, tuple(a - margin for a in ellipsoid.semi_axes), ellipsoid.center, ellipsoid.rotation_matrix
        )

    def rmse(self, vol) -> dict:
        return {k: float(np.sqrt(np.mean((vol - self.truth)[m] ** 2))) for k, m in self.masks.items()}


_CALIBRATIONS: dict = {}


def calibrate(method, scan_kw, max_iterations: int, upper: float | None = MU_BONE) -> dict:
    """The pass count with the lowest RMSE inside the object (``head`` region:
    the shell's outer surface) on the calibration phantom, scanned exactly like
    the test (same geometry, dose, noise model). It does not depend on the
    test's seed, so it is computed once per set-up and process."""
    import leveret

    key = (method, tuple(sorted(scan_kw.items())), max_iterations, upper)
    if key in _CALIBRATIONS:
        return dict(_CALIBRATIONS[key])
    scan = Scan(calibration_phantom(), rng=np.random.default_rng(CALIBRATION_SEED), **scan_kw)
    projector = leveret.Projector(scan.few_geometry, scan.grid, model="joseph")
    history = []
    iterate(
        method,
        scan.few_projections,
        projector,
        max_iterations,
        upper=upper,
        callback=lambda x, info: history.append(scan.rmse(x)["head"]),
    )
    _CALIBRATIONS[key] = {"iterations": int(np.argmin(history)) + 1, "rmse_history": history}
    return dict(_CALIBRATIONS[key])


def run(
    size: int = 64,
    n_views: int | None = None,
    photons: float = 1e4,
    out_png: str | Path | None = "fewview.png",
    seed: int = 0,
    method: str = "os_sart",
    det_pixels: int | None = None,
    subsampling: int = 3,
    supersampling: int = 3,
    stride: int = 4,
    iterations: int | None = None,
    max_iterations: int = 30,
    upper: float | None = MU_BONE,
    dpi: int = 100,
    colors: int | None = None,
) -> dict:
    """Simulate, reconstruct every way, compare with the phantom, draw the figure.

    Parameters
    ----------
    size : int
        Volume edge in voxels (cube of ``FOV`` mm).
    n_views : int, optional
        Views over 360 degrees (default :func:`nyquist_views` of the detector);
        the few-view scan takes every ``stride``-th.
    photons : float
        I0, unattenuated photons per detector pixel.
    seed : int
        Noise seed of the test scan (the calibration scan has its own).
    method : {"os_sart", "sirt"}
    det_pixels : int, optional
        Detector rows = columns (default ``size``).
    subsampling : int
        Sub-pixels per detector pixel edge in the simulation.
    supersampling : int
        Rasterisation of the reference phantom (samples per voxel edge).
    iterations : int, optional
        Passes of the iterative method; default: calibrated (see
        :func:`calibrate`) up to ``max_iterations``.
    upper : float or None
        Upper bound of the box constraint, 1/mm (None: non-negativity only).
    dpi : int
        Resolution of the PNG.
    colors : int, optional
        Quantise the PNG to this many colours (a small file for the docs).

    Returns
    -------
    dict (JSON-able): settings; ``rmse`` (1/mm) per region
    (``volume``, ``head``, ``brain``, ``interior``) for ``fdk_all`` and ``fdk_quarter``
    (per filter), ``fdk_all_best``/``fdk_quarter_best`` (best filter per
    region) and ``iterative``; ``oracle`` (the iterative RMSE at every pass,
    for the record only); ``discrepancy`` (noise level and residuals);
    timings.
    """
    import leveret

    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    det_pixels = size if det_pixels is None else det_pixels
    n_views = nyquist_views(det_pixels) if n_views is None else n_views
    scan_kw = dict(
        size=size,
        det_pixels=det_pixels,
        n_views=n_views,
        stride=stride,
        photons=photons,
        subsampling=subsampling,
        supersampling=supersampling,
    )
    timings = {}

    t0 = time.perf_counter()
    scan = Scan(head_phantom(), rng=np.random.default_rng(seed), **scan_kw)
    timings["simulate"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    fdk = {"all": {}, "quarter": {}}
    fdk_vol = {}
    for f in FILTERS:
        fdk_vol["all", f] = leveret.fdk(
            scan.projections, scan.geometry, scan.grid, filter=f, short_scan=False, backend="cpu"
        )
        fdk_vol["quarter", f] = leveret.fdk(
            scan.few_projections, scan.few_geometry, scan.grid, filter=f, short_scan=False, backend="cpu"
        )
        fdk["all"][f] = scan.rmse(fdk_vol["all", f])
        fdk["quarter"][f] = scan.rmse(fdk_vol["quarter", f])
    timings["fdk"] = time.perf_counter() - t0

    calibration = None
    if iterations is None:
        t0 = time.perf_counter()
        calibration = calibrate(method, scan_kw, max_iterations, upper)
        iterations = calibration["iterations"]
        timings["calibrate"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    projector = leveret.Projector(scan.few_geometry, scan.grid, model="joseph")
    norm_b = float(np.linalg.norm(scan.few_projections.astype(np.float64)))
    oracle, residuals = [], []

    def record(x, info):
        residuals.append(info["residual"] * norm_b)
        oracle.append(scan.rmse(x))

    rec = iterate(method, scan.few_projections, projector, iterations, callback=record, upper=upper)
    timings["iterative"] = time.perf_counter() - t0
    delta = noise_level(scan.few_counts)
    model_residual = float(
        np.linalg.norm(scan.few_projections.astype(np.float64) - projector(scan.truth.astype(np.float32)))
    )

    def best(kind):
        return {r: min(fdk[kind][f][r] for f in FILTERS) for r in REGIONS}

    def best_filter(kind):
        return {r: min(FILTERS, key=lambda f: fdk[kind][f][r]) for r in REGIONS}

    result = {
        "size": size,
        "n_views": n_views,
        "few_views": int(scan.few.size),
        "stride": stride,
        "detector": [det_pixels, det_pixels],
        "detector_subsampling": subsampling,
        "photons": photons,
        "seed": seed,
        "method": method,
        "model": "joseph",
        "bounds": [0.0, upper],
        "iterations": iterations,
        "voxel_mm": FOV / size,
        "pixel_at_axis_mm": scan.pixel_mm * SID / SDD,
        "mu_scale": MU_SCALE,
        "sid": SID,
        "sdd": SDD,
        "rmse": {
            "fdk_all": fdk["all"],
            "fdk_quarter": fdk["quarter"],
            "fdk_all_best": best("all"),
            "fdk_quarter_best": best("quarter"),
            "iterative": scan.rmse(rec),
        },
        "best_filter": {"all": best_filter("all"), "quarter": best_filter("quarter")},
        "calibration": calibration,
        "oracle": oracle,
        "discrepancy": {
            "noise_level": delta,
            "residuals": residuals,
            "residual_of_truth": model_residual,
            "met_at": next((k + 1 for k, r in enumerate(residuals) if r <= delta), None),
        },
        "timings_s": timings,
    }
    if out_png is not None:
        t0 = time.perf_counter()
        fa, fq = result["best_filter"]["all"]["head"], result["best_filter"]["quarter"]["head"]
        fig = figure(
            scan.truth,
            {
                f"FDK {fa}, all {n_views} views": (fdk_vol["all", fa], fdk["all"][fa]["head"]),
                f"FDK {fq}, {scan.few.size} views": (fdk_vol["quarter", fq], fdk["quarter"][fq]["head"]),
                f"{method.upper().replace('_', '-')}, {scan.few.size} views": (
                    rec,
                    result["rmse"]["iterative"]["head"],
                ),
            },
            scan.grid,
            result,
        )
        out_png = Path(out_png)
        out_png.parent.mkdir(parents=True, exist_ok=True)
        from leveret.io.atomic import atomic_output

        with atomic_output(out_png, overwrite=True) as tmp:
            fig.savefig(tmp, dpi=dpi, format="png")
            if colors is not None:
                from PIL import Image  # matplotlib's own dependency

                with Image.open(tmp) as im:
                    small = im.convert("RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT)
                small.save(tmp, format="png", optimize=True)
        result["png"] = str(out_png)
        timings["figure"] = time.perf_counter() - t0
    return result


def figure(truth, recs: dict, grid, result):
    """Central axial (z = 0) and coronal (y = 0) slices: phantom and each
    reconstruction (``recs``: title -> (volume, head RMSE); window
    0.005..0.045 /mm), and each reconstruction minus the phantom
    (+-0.015 /mm). A matplotlib Figure (no pyplot)."""
    from matplotlib.figure import Figure

    k, j = truth.shape[0] // 2, truth.shape[1] // 2
    (x0, x1), (y0, y1), (z0, z1) = (grid.extent(a) for a in "xyz")
    views = [
        ("axial z=0", lambda a: a[k], (x0, x1, y1, y0), "y (mm)"),
        ("coronal y=0", lambda a: a[:, j], (x0, x1, z1, z0), "z (mm)"),
    ]
    ncol = 1 + len(recs)
    fig = Figure(figsize=(2.6 * ncol, 10), layout="constrained")
    axes = fig.subplots(4, ncol)
    panels = [("phantom", truth, None)] + [(n, vol, e) for n, (vol, e) in recs.items()]
    for v, (label, cut, extent, ylabel) in enumerate(views):
        img_row, diff_row = axes[2 * v], axes[2 * v + 1]
        for c, (name, vol, err) in enumerate(panels):
            im = img_row[c].imshow(
                cut(vol), extent=extent, cmap="gray", vmin=0.005, vmax=0.045, interpolation="nearest"
            )
            title = name if err is None else f"{name}\nhead RMSE {err:.5f} /mm"
            img_row[c].set_title(f"{title}\n{label}", fontsize=7)
            img_row[c].set_ylabel(ylabel, fontsize=7)
            img_row[c].tick_params(labelsize=6)
            if c == 0:
                diff_row[0].axis("off")
                diff_row[0].text(
                    0.5,
                    0.5,
                    f"differences\n(reconstruction\n- phantom)\n{label}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    transform=diff_row[0].transAxes,
                )
                continue
            dm = diff_row[c].imshow(
                cut(vol - truth), extent=extent, cmap="RdBu_r", vmin=-0.015, vmax=0.015, interpolation="nearest"
            )
            diff_row[c].set_title(f"{name} - phantom", fontsize=7)
            diff_row[c].set_xlabel("x (mm)", fontsize=7)
            diff_row[c].tick_params(labelsize=6)
        fig.colorbar(im, ax=img_row, shrink=0.8, label="1/mm")
        fig.colorbar(dm, ax=diff_row[1:], shrink=0.8, label="1/mm")
    fig.suptitle(
        f"Few-view cone beam, {result['size']}^3 voxels, {result['n_views']} / "
        f"{result['few_views']} views, I0 = {result['photons']:g}; "
        f"{result['method']} {result['iterations']} passes, bounds {result['bounds']} /mm",
        fontsize=9,
    )
    return fig


def table(res) -> str:
    """The RMSEs as a text table (1/mm), one row per reconstruction."""
    r = res["rmse"]
    rows = [(f"FDK {f}, all {res['n_views']} views", r["fdk_all"][f]) for f in FILTERS]
    rows += [(f"FDK {f}, {res['few_views']} views", r["fdk_quarter"][f]) for f in FILTERS]
    rows += [(f"{res['method']} {res['iterations']} passes, {res['few_views']} views", r["iterative"])]
    lines = [f"{'reconstruction':<36}" + "".join(f"{k:>10}" for k in REGIONS)]
    lines += [f"{name:<36}" + "".join(f"{e[k]:>10.5f}" for k in REGIONS) for name, e in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=64, help="volume edge in voxels (default 64)")
    p.add_argument("--views", type=int, default=None, help="views over 360 degrees (default ~pi/2 x detector columns)")
    p.add_argument("--photons", type=float, default=1e4, help="I0 per detector pixel (default 1e4)")
    p.add_argument(
        "--iterations",
        type=int,
        default=None,
        help="passes of the iterative method (default: calibrated on another phantom)",
    )
    p.add_argument("--max-iterations", type=int, default=30, help="calibration cap (default 30)")
    p.add_argument("--method", choices=METHODS, default="os_sart")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="fewview.png", help="PNG to write (default fewview.png)")
    p.add_argument("--json", default=None, help="also write the result dict here")
    p.add_argument("--dpi", type=int, default=100, help="PNG resolution (default 100)")
    p.add_argument("--colors", type=int, default=None, help="quantise the PNG to this many colours (docs/img uses 128)")
    p.add_argument(
        "--no-upper", action="store_true", help="non-negativity only (default: box 0 <= mu <= %g /mm)" % MU_BONE
    )
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    res = run(
        size=args.size,
        n_views=args.views,
        photons=args.photons,
        iterations=args.iterations,
        max_iterations=args.max_iterations,
        out_png=args.out or None,
        seed=args.seed,
        method=args.method,
        dpi=args.dpi,
        colors=args.colors,
        upper=None if args.no_upper else MU_BONE,
    )
    print(
        f"{res['size']}^3 voxels of {res['voxel_mm']:.2f} mm, {res['n_views']} views "
        f"({res['few_views']} for the few-view runs), {res['detector'][0]}x{res['detector'][1]} "
        f"detector ({res['pixel_at_axis_mm']:.2f} mm at the axis), I0 = {res['photons']:g}"
    )
    print("RMSE (1/mm) against the phantom:")
    print(table(res))
    d = res["discrepancy"]
    print(
        f"discrepancy principle: noise level {d['noise_level']:.2f}, residual after the last "
        f"pass {d['residuals'][-1]:.2f}, residual of the rasterised phantom itself "
        f"{d['residual_of_truth']:.2f}; met at pass {d['met_at']}"
    )
    print(
        "timings (s): "
        + ", ".join(f"{k} {v:.1f}" for k, v in res["timings_s"].items())
        + f"; total {time.perf_counter() - t0:.1f}"
    )
    if args.out:
        print(f"wrote {args.out}")
    if args.json:
        from leveret.io.atomic import atomic_output

        with atomic_output(args.json, overwrite=True) as tmp:
            Path(tmp).write_text(json.dumps(res, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
