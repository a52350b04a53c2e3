"""Helical FDK and laminography FBP on analytic phantoms: the numbers and
pictures of docs/helical-laminography.md.

Helical: a long body with inclusions, scanned by a 24-row detector (2.7
degrees half cone angle) at pitch factors 0.5, 1.0 and 1.4 (180 views per
turn), reconstructed by ``leveret.fdk`` (which sends a helix to
``helical_fdk``), and by circular FDK at the same cone angle and sampling
over the slab a circle covers; RMSE inside the body against the supersampled
phantom. The pitch ripple: long off-axis rods, the mean inside one rod slice
by slice, its amplitude at the pitch's frequency with the window's smooth
edges ("auto") and with the sharp Tam-Danielsson window (0), without and
with noise (Gaussian, 0.5 % of the largest line integral), against the
noise's own spectrum.

Laminography: a flat sample (a plate with inclusions) at 20, 45 and 70
degrees of tilt, parallel beam, a full turn of 360 views; FBP against the
object and against the object without its missing cone; at 45 degrees SIRT
(non-negative) and CGLS on ``leveret.Projector`` against FBP.

    PYTHONPATH=src python examples/helical_laminography_demo.py --out docs_img/ --json demo.json

Writes helical.png, helical_ripple.png, laminography.png,
laminography_iterative.png and helical_laminography_geometries.png into
``--out`` and every number into ``--json`` (about 1.5 minutes on two cores).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import leveret
from leveret import phantom
from leveret.geometry import ConeGeometry, ParallelVecGeometry, VolumeGeometry

E = phantom.Ellipsoid
SID, SDD, ROWS, COLS, PIX = 300.0, 500.0, 24, 96, 2.0
ISO = PIX * SID / SDD
HEIGHT = ROWS * ISO
PER_TURN = 180
TILTS = (20, 45, 70)


def body():
    return phantom.EllipsoidPhantom(
        [
            E(1.0, (28, 26, 60)),
            E(0.5, (8, 10, 6), (8, -5, 4)),
            E(-0.4, (5, 5, 9), (-10, 6, -9)),
            E(0.3, (6, 4, 4), (-4, -12, 14), (0.4, 0.2, 0)),
            E(0.6, 3, (12, 10, -15)),
        ]
    )


def plate():
    return phantom.EllipsoidPhantom(
        [E(1.0, (20, 18, 6)), E(0.5, (5, 7, 3), (6, -4, 1)), E(-0.4, (4, 4, 2), (-8, 5, -1)), E(0.7, 2.5, (-3, -9, 2))]
    )


def helix(pitch, volume, per_turn=PER_TURN, rows=ROWS, cols=COLS):
    length = np.ptp(volume.extent("z"))
    n = int(((length + 1.7 * max(pitch, HEIGHT)) / pitch + 0.5) * per_turn)
    return ConeGeometry.helical(np.arange(n) * 2 * np.pi / per_turn, pitch, SID, SDD, rows, cols, PIX)


def inside(volume):
    return phantom.EllipsoidPhantom([E(1.0, (24, 22, 1e3))]).rasterize(volume) > 0


def rmse(a, b, mask):
    return float(np.sqrt(np.mean((a - b)[mask] ** 2)))


# -- helical ------------------------------------------------------------------------------------
def run_helical(pitches=(0.5, 1.0, 1.4, 1.6), size=56, slices=40, sharp=(1.0,)):
    """RMSE inside the body per pitch factor ("auto" window), and with the sharp
    window (``smoothing=0``) at the pitch factors ``sharp`` (keys "F sharp")."""
    ph = body()
    out = {"pitches": {}, "images": {}}
    vol = VolumeGeometry((slices, size, size), ISO)
    truth = ph.rasterize(vol, supersampling=2)
    runs = [(f, "auto") for f in pitches] + [(f, 0.0) for f in sharp]
    for factor, smoothing in runs:
        g = helix(factor * HEIGHT, vol)
        stats: dict = {}
        rec = leveret.helical_fdk(
            ph.project(g).astype(np.float32), g, vol, backend="cpu", stats=stats, smoothing=smoothing
        )
        out["pitches"][str(factor) + ("" if smoothing == "auto" else " sharp")] = {
            "rmse": rmse(rec, truth, inside(vol)),
            "bias": float((rec - truth)[inside(vol)].mean()),
            "n_pi": stats["n_pi"],
            "smoothing": stats["smoothing"],
            "max_pitch_factor": stats["max_pitch"] / HEIGHT,
            "views": g.n_views,
            "views_per_slab": stats["views_per_slab"],
        }
        if factor == 1.0 and smoothing == "auto":
            out["images"].update(helical=rec, truth=truth)
    # circular FDK at the same cone angle and sampling, over the voxels every view sees
    g = ConeGeometry.circular(np.arange(PER_TURN) * 2 * np.pi / PER_TURN, SID, SDD, ROWS, COLS, PIX)
    cvol = VolumeGeometry((ROWS, size, size), ISO)
    rec = leveret.fdk(ph.project(g).astype(np.float32), g, cvol, backend="cpu")
    ctruth = ph.rasterize(cvol, supersampling=2)
    X, Y = np.meshgrid(cvol.coordinates("x"), cvol.coordinates("y"))
    seen = np.abs(cvol.coordinates("z"))[:, None, None] * SID / (SID - np.hypot(X, Y))[None] <= HEIGHT / 2 - ISO
    out["circular"] = {"rmse": rmse(rec, ctruth, inside(cvol) & seen)}
    out["images"]["circular"] = rec
    out["images"]["circular_truth"] = ctruth
    return out


def run_ripple(noise=0.005, seed=0, slices=96, turns=7.5):
    """Slice means inside an off-axis rod: amplitude at the pitch's frequency."""
    rods = phantom.EllipsoidPhantom(
        [E(1.0, (16, 15, 1e4)), E(0.5, (3, 3, 1e4), (7, 2, 0)), E(-0.5, (2.5, 2.5, 1e4), (-5, -6, 0))]
    )
    pitch = 16 * ISO
    vol = VolumeGeometry((slices, 36, 36), voxel_size=(ISO, 1.2 * ISO, 1.2 * ISO))
    g = ConeGeometry.helical(np.arange(int(turns * 120)) * 2 * np.pi / 120, pitch, SID, SDD, 16, 64, PIX)
    clean = rods.project(g).astype(np.float32)
    noisy = clean + np.random.default_rng(seed).normal(0, noise * clean.max(), clean.shape).astype(np.float32)
    X, Y = np.meshgrid(vol.coordinates("x"), vol.coordinates("y"))
    rod = np.hypot(X - 7, Y - 2) < 2.0
    z = vol.coordinates("z")
    freqs = np.fft.rfftfreq(z.size, d=vol.spacing("z"))
    k = int(np.argmin(np.abs(freqs - 1 / pitch)))
    out = {"pitch": pitch, "noise": noise, "z": z, "series": {}}
    for name, data in (("clean", clean), ("noisy", noisy)):
        for smoothing in ("auto", 0.0):
            rec = leveret.helical_fdk(data, g, vol, backend="cpu", smoothing=smoothing)
            means = np.array([s[rod].mean() for s in rec])
            spectrum = 2 * np.abs(np.fft.rfft(means - means.mean())) / z.size
            others = np.delete(spectrum[1:], k - 1)
            key = f"{name}, smoothing {smoothing}"
            out["series"][key] = means
            out[key] = {
                "amplitude_at_pitch": float(spectrum[k]),
                "median_other_frequencies": float(np.median(others)),
                "max_other_frequencies": float(others.max()),
            }
    return out


# -- laminography ----------------------------------------------------------------------------------
def without_missing_cone(truth, tilt):
    pz, pxy = 244, 40
    spectrum = np.fft.fftn(np.pad(truth, [(pz, pz), (pxy, pxy), (pxy, pxy)]))
    kz, ky, kx = np.meshgrid(*(np.fft.fftfreq(n) for n in spectrum.shape), indexing="ij")
    spectrum[np.hypot(kx, ky) < np.abs(kz) * np.tan(tilt)] = 0.0
    return np.real(np.fft.ifftn(spectrum))[pz:-pz, pxy:-pxy, pxy:-pxy]


def run_laminography(tilts=TILTS, iterations=(100, 30)):
    from scipy import ndimage

    ph = plate()
    vol = VolumeGeometry((24, 48, 48), 1.0)
    truth = ph.rasterize(vol, supersampling=3)
    body_mask = ph.rasterize(vol) != 0
    core = ndimage.binary_erosion(body_mask, iterations=2)
    out = {"tilts": {}, "images": {"truth": truth}}
    angles = np.arange(360) * 2 * np.pi / 360
    for degrees in tilts:
        tilt = np.radians(degrees)
        g = ParallelVecGeometry.laminography(angles, tilt, 64, 64, 1.0)
        proj = ph.project(g).astype(np.float32)
        rec = leveret.laminography_fbp(proj, g, vol, backend="cpu")
        free = without_missing_cone(truth, tilt)
        entry = {
            "fbp_vs_object": rmse(rec, truth, body_mask),
            "fbp_vs_cone_free_core": rmse(rec, free, core),
            "fbp_relative_error": float(np.linalg.norm(rec - truth) / np.linalg.norm(truth)),
        }
        out["images"][f"fbp {degrees}"] = rec
        out["images"][f"cone-free {degrees}"] = free
        if degrees == 45:
            g90 = ParallelVecGeometry.laminography(angles[::4], tilt, 64, 64, 1.0)
            p90 = ph.project(g90).astype(np.float32)
            A = leveret.Projector(g90, vol, model="joseph", backend="cpu")
            fbp90 = leveret.laminography_fbp(p90, g90, vol, backend="cpu")
            sirt = leveret.sirt(p90, A, iterations[0], nonnegative=True)
            cgls = leveret.cgls(p90, A, iterations[1])
            rel = lambda x: float(np.linalg.norm(x - truth) / np.linalg.norm(truth))  # noqa: E731
            entry["90 views"] = {
                "fbp": rel(fbp90),
                f"sirt_nonnegative_{iterations[0]}": rel(sirt),
                f"cgls_{iterations[1]}": rel(cgls),
            }
            out["images"]["sirt 45"], out["images"]["cgls 45"] = sirt, cgls
            out["images"]["fbp90 45"] = fbp90
        out["tilts"][str(degrees)] = entry
    return out


# -- pictures ------------------------------------------------------------------------------------
def _figure(rows, cols, size):
    from matplotlib.figure import Figure

    return Figure(figsize=size)


def picture_helical(h, path, dpi=70):
    im = h["images"]
    fig = _figure(2, 3, (11, 6.5))
    axes = fig.subplots(2, 3)
    j = im["helical"].shape[1] // 2 + 3
    k = im["helical"].shape[0] // 2
    show = [
        (im["helical"][k], "helical FDK, pitch 1, axial", "gray", (0.4, 1.7)),
        (im["helical"][:, j], "helical FDK, coronal (z up)", "gray", (0.4, 1.7)),
        (im["circular"][:, j], "circular FDK, same cone angle", "gray", (0.4, 1.7)),
        (im["helical"][k] - im["truth"][k], "helical - phantom, axial", "RdBu_r", (-0.06, 0.06)),
        (im["helical"][:, j] - im["truth"][:, j], "helical - phantom, coronal", "RdBu_r", (-0.06, 0.06)),
        (im["circular"][:, j] - im["circular_truth"][:, j], "circular - phantom, coronal", "RdBu_r", (-0.06, 0.06)),
    ]
    for ax, (img, title, cmap, (lo, hi)) in zip(axes.ravel(), show):
        a = ax.imshow(img, cmap=cmap, vmin=lo, vmax=hi, origin="lower")
        ax.set_title(title, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
        fig.colorbar(a, ax=ax, shrink=0.7)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)


def picture_ripple(r, path, dpi=70):
    fig = _figure(1, 2, (11, 3.8))
    axes = fig.subplots(1, 2)
    for ax, name in zip(axes, ("clean", "noisy")):
        for smoothing, style in (("auto", "-"), (0.0, "--")):
            key = f"{name}, smoothing {smoothing}"
            amp = r[key]["amplitude_at_pitch"]
            ax.plot(r["z"], r["series"][key], style, label=f"smoothing {smoothing}: {amp * 1e3:.2f}e-3 at the pitch")
        for z in np.arange(np.ceil(r["z"][0] / r["pitch"]), r["z"][-1] / r["pitch"]) * r["pitch"]:
            ax.axvline(z, color="0.8", lw=0.6)
        ax.set_title(f"{name} data: mean inside an off-axis rod (value 1.5) per slice", fontsize=9)
        ax.set_xlabel("z (mm); grey lines one pitch apart")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)


def picture_laminography(lam, path, dpi=70):
    im = lam["images"]
    tilts = sorted(int(t) for t in lam["tilts"])
    fig = _figure(3, len(tilts) + 1, (3.2 * (len(tilts) + 1), 7.5))
    axes = fig.subplots(3, len(tilts) + 1)
    j = im["truth"].shape[1] // 2 + 4
    k = im["truth"].shape[0] // 2 + 1

    def show(ax, img, title):
        ax.imshow(img, cmap="gray", vmin=-0.3, vmax=1.7, origin="lower", aspect="equal")
        ax.set_title(title, fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])

    show(axes[0, 0], im["truth"][k], "phantom, xy")
    show(axes[1, 0], im["truth"][:, j], "phantom, xz (z up)")
    axes[2, 0].axis("off")
    for c, t in enumerate(tilts, start=1):
        show(axes[0, c], im[f"fbp {t}"][k], f"FBP {t} deg, xy")
        show(axes[1, c], im[f"fbp {t}"][:, j], f"FBP {t} deg, xz")
        show(axes[2, c], im[f"cone-free {t}"][:, j], f"object without the {t} deg cone, xz")
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    if "sirt 45" in im:
        fig = _figure(1, 4, (12, 3.2))
        axes = fig.subplots(1, 4)
        errors = list(lam["tilts"]["45"]["90 views"].values())  # fbp, sirt, cgls
        for ax, key, title in zip(
            axes, ("truth", "fbp90 45", "sirt 45", "cgls 45"), ("phantom", "FBP", "SIRT, non-negative", "CGLS")
        ):
            err = "" if key == "truth" else f", error {errors[['fbp90 45', 'sirt 45', 'cgls 45'].index(key)]:.2f}"
            show(ax, im[key][:, j], f"45 deg, 90 views: {title}{err}")
        fig.tight_layout()
        fig.savefig(str(path).replace(".png", "_iterative.png"), dpi=dpi)


def picture_geometries(path, dpi=70):
    fig = _figure(1, 2, (11, 5.5))
    ax1 = fig.add_subplot(1, 2, 1, projection="3d")
    ax2 = fig.add_subplot(1, 2, 2, projection="3d")
    g = ConeGeometry.helical(np.arange(3 * 60) * 2 * np.pi / 60, 60.0, 150.0, 260.0, 16, 64, 2.0)
    g.plot(VolumeGeometry((60, 40, 40), 2.0), ax=ax1, n_views=4)
    lam = ParallelVecGeometry.laminography(np.arange(36) * 2 * np.pi / 36, np.radians(30), 24, 48, 1.0)
    lam.plot(VolumeGeometry((8, 40, 40), 1.0), ax=ax2, n_views=4)
    for ax in (ax1, ax2):
        ax.legend(fontsize=6, loc="upper left")
        ax.title.set_fontsize(9)
    fig.subplots_adjust(left=0.02, right=0.98, bottom=0.04, top=0.93, wspace=0.1)
    fig.savefig(path, dpi=dpi)


def _jsonable(d):
    if isinstance(d, dict):
        return {k: _jsonable(v) for k, v in d.items() if k not in ("images", "series", "z")}
    return d


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=".", help="folder for the PNG files")
    parser.add_argument("--json", default=None, help="write every number here")
    parser.add_argument("--dpi", type=int, default=70)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    helical = run_helical()
    ripple = run_ripple()
    lam = run_laminography()
    picture_helical(helical, out / "helical.png", args.dpi)
    picture_ripple(ripple, out / "helical_ripple.png", args.dpi)
    picture_laminography(lam, out / "laminography.png", args.dpi)
    picture_geometries(out / "helical_laminography_geometries.png", args.dpi)
    numbers = {"helical": _jsonable(helical), "ripple": _jsonable(ripple), "laminography": _jsonable(lam)}
    print(json.dumps(numbers, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(numbers, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
