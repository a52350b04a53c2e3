"""``leveret demo``: the main job on the embedded default.

Simulates a parallel-beam scan of the 3D Shepp-Logan phantom (exact line
integrals, then Poisson noise), reconstructs it with FBP on the fastest
backend present, prints time, GU/s and the error against the phantom, and
writes a PNG of phantom, reconstruction and difference.

``leveret demo --real`` reconstructs the real scan bundled with leveret
(:func:`leveret.datasets.savu_scan`) instead: flat and dark correction,
``-log``, the centre of rotation, FBP, and a PNG of the result.

The PNG goes to ``--output`` or, by default, into the folder ``leveret-demo/``
of the current folder (``demo.png`` or ``real.png``), never loose into the
current folder.
"""

from __future__ import annotations

import os
import time

import numpy as np


def simulate(size: int, n_slices: int, n_angles: int, photons: float, rng) -> tuple:
    """(geometry, noisy projections, phantom object): a 2 mm-radius head phantom
    seen by a detector of ``size`` columns 5 mm wide whose ``n_slices`` rows
    span the head's height (4 mm), as attenuation per mm."""
    import leveret
    from leveret import phantom

    det = 5.0 / size
    geometry = leveret.ParallelGeometry(
        np.linspace(0, np.pi, n_angles, endpoint=False),
        size,
        n_rows=n_slices,
        det_spacing=det,
        row_spacing=4.0 / n_slices,
    )
    head = phantom.shepp_logan_3d(radius=2.0)
    exact = head.project(geometry)
    counts = rng.poisson(photons * np.exp(-exact))
    noisy = -np.log(np.maximum(counts, 1) / photons)
    return geometry, noisy.astype(np.float32), head


DEFAULT_FOLDER = "leveret-demo"


def _output(args, name: str):
    """The PNG to write: ``--output``, else ``leveret-demo/<name>``. The default
    folder is made only when the PNG is saved (:func:`_save`), so that a
    demo that fails leaves no empty folder."""
    from pathlib import Path
    from leveret.io.atomic import check_writable

    output = Path(args.output) if args.output else Path(DEFAULT_FOLDER) / name
    if output.suffix.lower() != ".png":
        raise ValueError(f"--output: expected a .png file, got {str(output)!r}")
    if args.output or output.parent.is_dir():
        check_writable(output, overwrite=True, flag="--output", asked_by=None)
    elif not os.access(output.parent.parent, os.W_OK):
        raise ValueError(
            f"--output: cannot make the folder {str(output.parent.absolute())!r} "
            "(the current folder is not writable); give --output"
        )
    return output


def _save(fig, output, dpi: int) -> None:
    """Write ``fig`` as the PNG ``output`` (all or nothing), making the default folder."""
    from leveret.io import atomic_output

    output.parent.mkdir(exist_ok=True)  # the default folder; --output's exists already
    with atomic_output(output, overwrite=True) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")


#: Bytes per projection sample at the simulation's peak: the exact line integrals
#: (float64), the photon counts (int64) and one float64 temporary.
SAMPLE_BYTES = 24
#: Bytes per voxel: the reconstruction (float32), the phantom's slices and the
#: difference (float64 each), and a float32 copy.
VOXEL_BYTES = 24


def check_memory(size: int, n_slices: int, n_angles: int) -> None:
    """Refuse a demo whose arrays do not fit in the memory available, naming --size,
    before any of them is allocated."""
    from leveret.resources import format_bytes, host_available_bytes

    needed = SAMPLE_BYTES * n_angles * n_slices * size + VOXEL_BYTES * n_slices * size * size
    available = host_available_bytes()
    if needed > available:
        raise ValueError(
            f"--size: a demo of {n_slices} slices of {size} x {size} pixels from {n_angles} "
            f"angles needs about {format_bytes(needed)} of memory but {format_bytes(available)} "
            "are available; give a smaller --size (or --slices, --angles)"
        )


def run_demo(args) -> int:
    if getattr(args, "real", False):
        return run_real(args)
    import leveret
    from leveret.backends import resolve

    size, n_slices = args.size, args.slices
    for name, value in (("--size", size), ("--slices", n_slices)):
        if value < 2:
            raise ValueError(f"{name}: expected at least 2, got {value}")
    n_angles = args.angles if args.angles is not None else int(round(1.5 * size))
    if n_angles < 1:
        raise ValueError(f"--angles: expected at least 1, got {n_angles}")
    if not args.photons > 0:
        raise ValueError(f"--photons: expected a positive count, got {args.photons}")
    check_memory(size, n_slices, n_angles)
    output = _output(args, "demo.png")
    backend = resolve(args.backend)
    rng = np.random.default_rng(args.seed)

    t0 = time.perf_counter()
    geometry, proj, head = simulate(size, n_slices, n_angles, args.photons, rng)
    t_sim = time.perf_counter() - t0
    volume = geometry.default_volume()
    print(
        f"scan: {n_angles} angles x {n_slices} rows x {size} columns, Poisson noise at "
        f"{args.photons:g} photons/pixel (simulated in {t_sim:.2f} s)"
    )

    if backend == "cuda":
        import cupy

        data = cupy.asarray(proj)
        leveret.fbp(data[:, :1], geometry.replace(n_rows=1), backend="cuda")  # compile, plan FFTs
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        rec = leveret.fbp(data, geometry, backend="cuda")
        cupy.cuda.Device().synchronize()
        t_rec = time.perf_counter() - t0
        rec = cupy.asnumpy(rec)
        t0 = time.perf_counter()
        leveret.fbp(proj, geometry, backend="cuda")
        t_host = time.perf_counter() - t0
    else:
        leveret.fbp(proj[:, :1], geometry.replace(n_rows=1), backend="cpu")  # JIT-compile first
        t0 = time.perf_counter()
        rec = leveret.fbp(proj, geometry, backend="cpu")
        t_rec = t_host = time.perf_counter() - t0

    # Detector rows are point samples in z, so slice k shows the plane z_k:
    # compare with that plane's cross-section, supersampled in-plane only.
    plane = leveret.VolumeGeometry(volume.shape[1:], volume.voxel_size[1:], volume.center[1:])
    truth = np.stack([head.slice_2d(z).rasterize(plane, supersampling=3) for z in volume.coordinates("z")])
    inside = np.hypot(*np.meshgrid(volume.coordinates("x"), volume.coordinates("y"))) < 1.9
    rmse = float(np.sqrt(np.mean((rec - truth)[:, inside] ** 2)))
    rel = float(np.linalg.norm(rec - truth) / np.linalg.norm(truth))
    updates = volume.size * n_angles
    device = _device_name(backend)
    print(
        f"fbp on {device}: {t_rec * 1e3:.1f} ms ({updates / t_rec / 1e9:.2f} GU/s)"
        + (f"; from NumPy arrays {t_host * 1e3:.1f} ms" if backend == "cuda" else "")
    )
    print(f"error against the phantom: RMSE {rmse:.4f} per mm inside the head (values 0..1), relative {rel:.3f}")

    _save(_figure(truth, rec, volume, f"{device}: {t_rec * 1e3:.0f} ms, RMSE {rmse:.3f}"), output, dpi=110)
    print(f"wrote {output}")
    return 0


def run_real(args) -> int:
    """Reconstruct the bundled real scan: flat/dark, -log, centre, FBP, a PNG."""
    import leveret
    from leveret.backends import resolve
    from leveret.preprocess import find_center

    output = _output(args, "real.png")
    backend = resolve(args.backend)
    scan = leveret.datasets.savu_scan()
    print(
        f"scan: {scan.name}, {scan.projections.shape[0]} projections of "
        f"{scan.projections.shape[1]} x {scan.projections.shape[2]} pixels, {scan.projections.dtype}"
    )
    lines = scan.line_integrals()  # (p - dark) / (flat - dark), then -log
    middle = scan.projections.shape[1] // 2
    est = find_center(lines[:, middle - 8 : middle + 8], scan.angles)
    print(
        f"centre of rotation: {est.center:.2f} px (confidence {est.confidence:.2f}); "
        f"detector middle {(scan.geometry.n_cols - 1) / 2:g} px"
    )
    geometry = scan.geometry.replace(center=est.center)
    leveret.fbp(lines[:, :1], geometry.replace(n_rows=1), backend=backend)  # compile first
    t0 = time.perf_counter()
    volume = leveret.fbp(lines, geometry, backend=backend)
    t_rec = time.perf_counter() - t0  # NumPy in, NumPy out: transfers included
    # The same slice with the axis assumed in the detector middle, to show what the centre is for.
    k = volume.shape[0] // 2
    naive = leveret.fbp(lines[:, k : k + 1], geometry.replace(n_rows=1, center=None), backend=backend)
    device = _device_name(backend)
    print(
        f"fbp on {device}: volume {volume.shape} in {t_rec * 1e3:.1f} ms "
        f"({volume.size * scan.angles.size / t_rec / 1e9:.2f} GU/s)"
    )
    _save(_real_figure(lines, volume, naive[0], est.center, geometry), output, dpi=100)
    print(f"wrote {output}")
    return 0


def _real_figure(lines, volume, naive, center, geometry):
    from matplotlib.figure import Figure

    k = volume.shape[0] // 2
    fig = Figure(figsize=(12, 4), layout="constrained")
    axes = fig.subplots(1, 3)
    axes[0].imshow(
        lines[:, k],
        cmap="gray",
        aspect="auto",
        interpolation="nearest",
        extent=(-0.5, lines.shape[2] - 0.5, np.degrees(geometry.angles[-1]), np.degrees(geometry.angles[0])),
    )
    axes[0].axvline(center, color="tab:orange", lw=1)
    axes[0].set(title=f"sinogram, row {k}; centre {center:.2f} px", xlabel="column (px)", ylabel="angle (deg)")
    vmax = float(np.percentile(volume[k], 99.9))
    for ax, img, title in (
        (axes[1], volume[k], f"FBP, centre {center:.2f} px"),
        (axes[2], naive, f"centre {(geometry.n_cols - 1) / 2:g} px (detector middle)"),
    ):
        # y upwards (row 0 at the bottom), as scikit-image, ASTRA and tomopy show this slice
        im = ax.imshow(img, cmap="gray", vmin=0, vmax=vmax, interpolation="nearest", origin="lower")
        ax.set(title=f"slice {k}, {title}", xlabel="x (px)", ylabel="y (px, upwards)")
    fig.colorbar(im, ax=axes[1:], shrink=0.8, label="attenuation per pixel")
    fig.suptitle("leveret demo --real: savu-image-test (Diamond Light Source), flat/dark, -log, FBP")
    return fig


def _device_name(backend: str) -> str:
    if backend == "cpu":
        import numba

        return f"CPU ({numba.get_num_threads()} threads)"
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
    return name.decode() if isinstance(name, bytes) else name


def _figure(truth, rec, volume, title):
    from matplotlib.figure import Figure

    k = truth.shape[0] // 2
    j = truth.shape[1] // 2
    rows = [
        ("axial z = %.2f mm" % volume.coordinates("z")[k], truth[k], rec[k]),
        ("coronal y = %.2f mm" % volume.coordinates("y")[j], truth[:, j], rec[:, j]),
    ]
    fig = Figure(figsize=(11, 7), layout="constrained")
    axes = fig.subplots(2, 3)
    (x0, x1), (y0, y1), (z0, z1) = volume.extent("x"), volume.extent("y"), volume.extent("z")
    for r, (label, t, v) in enumerate(rows):
        # axial: y upwards (as scikit-image, ASTRA and tomopy show it); coronal: z downwards (the rows)
        extent, origin = ((x0, x1, y0, y1), "lower") if r == 0 else ((x0, x1, z1, z0), "upper")
        for c, (img, name, kw) in enumerate(
            [
                (t, "phantom", dict(cmap="gray", vmin=0, vmax=0.4)),
                (v, "reconstruction", dict(cmap="gray", vmin=0, vmax=0.4)),
                (v - t, "difference", dict(cmap="RdBu_r", vmin=-0.2, vmax=0.2)),
            ]
        ):
            im = axes[r, c].imshow(img, extent=extent, origin=origin, aspect="equal", interpolation="nearest", **kw)
            axes[r, c].set_title(f"{name}, {label}", fontsize=9)
            axes[r, c].set_xlabel("x (mm)")
            axes[r, c].set_ylabel("y (mm, upwards)" if r == 0 else "z (mm, downwards)")
            fig.colorbar(im, ax=axes[r, c], shrink=0.8, label="per mm")
    fig.suptitle(f"leveret demo: FBP of a noisy parallel-beam scan ({title})")
    return fig
