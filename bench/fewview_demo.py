"""Few-view demonstration: iterative reconstruction from 1/4 of the views vs FDK.

A circular cone-beam scan (full 360 degrees) of the 3D Shepp-Logan head,
scaled to attenuation values of a real head, is simulated with exact line
integrals and Poisson noise. Three reconstructions are compared against the
rasterised (supersampled) phantom, inside the head:

(a) FDK from all views,
(b) FDK from every 4th view,
(c) an iterative method on ``leveret.Projector`` from the same every 4th view,
    stopped by the discrepancy principle (no look at the truth).

Writes a PNG (central axial and coronal slices, and their differences from the
phantom) and prints (and returns) the RMSEs. Numbers and command:
docs/fewview.md.

    python bench/fewview_demo.py --out fewview.png
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
#: Head length scale: the phantom fits in [-RADIUS, RADIUS]^3 mm (skull
#: semi-axes 69 x 92 x 81 mm).
RADIUS = 100.0
SID, SDD = 500.0, 1000.0      # mm: source-isocentre, source-detector
FOV = 208.0                   # mm: the volume's edge length (the head is 184 mm at most)
DET_SPAN = 440.0              # mm: the detector's edge length (magnification 2 at the axis)
TAU = 1.0                     # discrepancy principle: stop at ||b - A x|| <= TAU * delta
METHODS = ("sirt", "os_sart", "cgls")


def head_phantom(radius: float = RADIUS, mu_scale: float = MU_SCALE):
    """``shepp_logan_3d(radius)`` (modified) with every value times ``mu_scale``: 1/mm."""
    from leveret import phantom
    base = phantom.shepp_logan_3d(radius=radius)
    return phantom.EllipsoidPhantom(
        phantom.Ellipsoid(e.value * mu_scale, e.semi_axes, e.center, e.rotation) for e in base)


def simulate(geometry, head, photons: float, rng):
    """Exact line integrals ``p`` of ``head`` for ``geometry``, then counts ~
    Poisson(I0 exp(-p)) and the measured ``-log(max(counts, 1) / I0)``.
    Returns (noisy line integrals float32, counts)."""
    exact = head.project(geometry)
    counts = rng.poisson(photons * np.exp(-exact))
    noisy = -np.log(np.maximum(counts, 1) / photons)
    return noisy.astype(np.float32), counts


def noise_level(counts) -> float:
    """delta = sqrt(sum 1 / max(counts, 1)): the expected norm of the noise in
    ``-log(counts / I0)`` (its variance is about 1 / counts per ray), from the
    measured counts alone."""
    return float(np.sqrt(np.sum(1.0 / np.maximum(counts, 1).astype(np.float64))))


def iterative(method: str, projections, projector, delta: float, max_iterations: int):
    """Run ``method`` from zero until ``||b - A x|| <= TAU delta`` (discrepancy
    principle) or ``max_iterations``. SIRT and OS-SART are non-negative.
    Returns (volume, iterations run, final residual norm, history)."""
    import leveret
    norm_b = float(np.linalg.norm(projections.astype(np.float64)))
    history = []

    def callback(x, info):
        history.append(info["residual"] * norm_b)
        return False

    tol = TAU * delta / norm_b
    if method == "sirt":
        x = leveret.sirt(projections, projector, max_iterations, nonnegative=True, tol=tol,
                         callback=callback)
    elif method == "os_sart":
        x = leveret.os_sart(projections, projector, max_iterations, nonnegative=True, tol=tol,
                            callback=callback)
    elif method == "cgls":
        x = leveret.cgls(projections, projector, max_iterations, tol=tol, callback=callback)
    else:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    return x, len(history), history[-1], history


def run(size: int = 64, n_views: int = 160, photons: float = 1e4, iterations: int = 20,
        out_png: str | Path | None = "fewview.png", seed: int = 0, method: str = "os_sart",
        model: str = "joseph", det_pixels: int | None = None, supersampling: int = 3,
        stride: int = 4, fdk_filter: str = "ram-lak", verbose: bool = False) -> dict:
    """Simulate, reconstruct three ways, compare with the phantom, draw the figure.

    Parameters
    ----------
    size : int
        Volume edge in voxels (cube of ``FOV`` mm).
    n_views : int
        Views over 360 degrees; the few-view scans take every ``stride``-th.
    photons : float
        I0, unattenuated photons per detector pixel.
    iterations : int
        Cap on the iterations of the iterative method (the discrepancy
        principle normally stops it earlier).
    out_png : path or None
        Where to write the figure (None: no figure).
    method : {"os_sart", "sirt", "cgls"}
    model : {"joseph", "siddon"}: the Projector's model.
    det_pixels : int, optional
        Detector rows = columns (default ``size``).

    Returns
    -------
    dict with the settings, ``rmse`` ({"fdk_all", "fdk_quarter", "iterative"},
    1/mm inside the head), iterations, residual and noise level, timings.
    """
    import leveret

    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    det_pixels = size if det_pixels is None else det_pixels
    rng = np.random.default_rng(seed)
    angles = np.linspace(0.0, 2 * np.pi, n_views, endpoint=False)
    geometry = leveret.ConeGeometry.circular(angles, sid=SID, sdd=SDD, n_rows=det_pixels,
                                             n_cols=det_pixels, pixel_size=DET_SPAN / det_pixels)
    grid = leveret.VolumeGeometry((size,) * 3, voxel_size=FOV / size)
    head = head_phantom()
    timings = {}

    t0 = time.perf_counter()
    projections, counts = simulate(geometry, head, photons, rng)
    truth = head.rasterize(grid, supersampling=supersampling)
    zz, yy, xx = np.meshgrid(*(grid.coordinates(a) for a in "zyx"), indexing="ij")
    inside = head.ellipsoids[0].contains(xx, yy, zz)     # the skull's outer surface
    timings["simulate"] = time.perf_counter() - t0

    few = np.arange(0, n_views, stride)
    few_geometry = leveret.ConeGeometry.circular(angles[few], sid=SID, sdd=SDD, n_rows=det_pixels,
                                                 n_cols=det_pixels, pixel_size=DET_SPAN / det_pixels)
    few_projections = np.ascontiguousarray(projections[few])
    few_counts = counts[few]

    brain = head.ellipsoids[1].contains(xx, yy, zz)      # inside the skull's inner surface

    def rmse(vol, mask=inside):
        return float(np.sqrt(np.mean((vol - truth)[mask] ** 2)))

    t0 = time.perf_counter()
    fdk_all = leveret.fdk(projections, geometry, grid, filter=fdk_filter, short_scan=False, backend="cpu")
    timings["fdk_all"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    fdk_quarter = leveret.fdk(few_projections, few_geometry, grid, filter=fdk_filter, short_scan=False,
                              backend="cpu")
    timings["fdk_quarter"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    projector = leveret.Projector(few_geometry, grid, model=model)
    delta = noise_level(few_counts)
    rec, n_iter, residual, history = iterative(method, few_projections, projector, delta, iterations)
    timings["iterative"] = time.perf_counter() - t0

    result = {
        "size": size, "n_views": n_views, "few_views": int(few.size), "stride": stride,
        "detector": [det_pixels, det_pixels], "photons": photons, "seed": seed,
        "method": method, "model": model, "max_iterations": iterations,
        "iterations": n_iter, "residual": residual, "noise_level": delta, "tau": TAU,
        "voxel_mm": FOV / size, "mu_scale": MU_SCALE, "sid": SID, "sdd": SDD,
        "rmse": {"fdk_all": rmse(fdk_all), "fdk_quarter": rmse(fdk_quarter), "iterative": rmse(rec)},
        "rmse_brain": {"fdk_all": rmse(fdk_all, brain), "fdk_quarter": rmse(fdk_quarter, brain),
                       "iterative": rmse(rec, brain)},
        "timings_s": timings,
    }
    if verbose:
        result["history"] = history
    if out_png is not None:
        t0 = time.perf_counter()
        fig = figure(truth, {"FDK, all %d views" % n_views: fdk_all,
                             "FDK, %d views" % few.size: fdk_quarter,
                             "%s, %d views" % (method.upper().replace("_", "-"), few.size): rec},
                     grid, result)
        out_png = Path(out_png)
        out_png.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out_png, dpi=100, format="png")
        result["png"] = str(out_png)
        timings["figure"] = time.perf_counter() - t0
    return result


def figure(truth, recs: dict, grid, result):
    """Central axial (z = 0) and coronal (y = 0) slices: phantom and each
    reconstruction (window 0.005..0.045 /mm), and each reconstruction minus the
    phantom (+-0.015 /mm). A matplotlib Figure (no pyplot)."""
    from matplotlib.figure import Figure

    k, j = truth.shape[0] // 2, truth.shape[1] // 2
    (x0, x1), (y0, y1), (z0, z1) = (grid.extent(a) for a in "xyz")
    views = [("axial z=0", lambda a: a[k], (x0, x1, y1, y0), "y (mm)"),
             ("coronal y=0", lambda a: a[:, j], (x0, x1, z1, z0), "z (mm)")]
    ncol = 1 + len(recs)
    fig = Figure(figsize=(3.2 * ncol, 12), layout="constrained")
    axes = fig.subplots(4, ncol)
    names = list(recs)
    for v, (label, cut, extent, ylabel) in enumerate(views):
        img_row, diff_row = axes[2 * v], axes[2 * v + 1]
        panels = [("phantom", truth)] + [(n, recs[n]) for n in names]
        for c, (name, vol) in enumerate(panels):
            im = img_row[c].imshow(cut(vol), extent=extent, cmap="gray", vmin=0.005, vmax=0.045,
                                   interpolation="nearest")
            title = name if c == 0 else f"{name}\nRMSE {result['rmse'][_key(c)]:.4f} /mm"
            img_row[c].set_title(f"{title}, {label}", fontsize=8)
            img_row[c].set_xlabel("x (mm)", fontsize=8)
            img_row[c].set_ylabel(ylabel, fontsize=8)
            if c == 0:
                diff_row[0].axis("off")
                diff_row[0].text(0.5, 0.5, f"differences\n(reconstruction - phantom)\n{label}",
                                 ha="center", va="center", transform=diff_row[0].transAxes)
                continue
            dm = diff_row[c].imshow(cut(vol - truth), extent=extent, cmap="RdBu_r", vmin=-0.015,
                                    vmax=0.015, interpolation="nearest")
            diff_row[c].set_title(f"{name} - phantom", fontsize=8)
            diff_row[c].set_xlabel("x (mm)", fontsize=8)
            diff_row[c].set_ylabel(ylabel, fontsize=8)
        fig.colorbar(im, ax=img_row, shrink=0.8, label="1/mm")
        fig.colorbar(dm, ax=diff_row[1:], shrink=0.8, label="1/mm")
    fig.suptitle(f"Few-view cone beam, {result['size']}^3 voxels, I0 = {result['photons']:g}: "
                 f"{result['method']} ({result['iterations']} it., discrepancy principle) "
                 f"vs FDK", fontsize=10)
    return fig


def _key(c: int) -> str:
    return ("fdk_all", "fdk_quarter", "iterative")[c - 1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=64, help="volume edge in voxels (default 64)")
    p.add_argument("--views", type=int, default=160, help="views over 360 degrees (default 160)")
    p.add_argument("--photons", type=float, default=1e4, help="I0 per detector pixel (default 1e4)")
    p.add_argument("--iterations", type=int, default=20, help="iteration cap (default 20)")
    p.add_argument("--method", choices=METHODS, default="os_sart")
    p.add_argument("--model", choices=("joseph", "siddon"), default="joseph")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="fewview.png", help="PNG to write (default fewview.png)")
    p.add_argument("--json", default=None, help="also write the result dict here")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    res = run(size=args.size, n_views=args.views, photons=args.photons, iterations=args.iterations,
              out_png=args.out, seed=args.seed, method=args.method, model=args.model)
    r = res["rmse"]
    print(f"{res['size']}^3 voxels of {res['voxel_mm']:.2f} mm, {res['n_views']} views "
          f"({res['few_views']} for the few-view runs), {res['detector'][0]}x{res['detector'][1]} "
          f"detector, I0 = {res['photons']:g}")
    print(f"RMSE inside the head (1/mm): FDK all views {r['fdk_all']:.5f}, "
          f"FDK 1/{res['stride']} views {r['fdk_quarter']:.5f}, {res['method']} 1/{res['stride']} "
          f"views {r['iterative']:.5f} ({res['iterations']} iterations, residual "
          f"{res['residual']:.2f} vs noise level {res['noise_level']:.2f})")
    print("timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in res["timings_s"].items())
          + f"; total {time.perf_counter() - t0:.1f}")
    if args.out:
        print(f"wrote {args.out}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
