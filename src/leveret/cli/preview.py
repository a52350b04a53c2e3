"""``leveret preview``: pictures of a scan or a volume."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .scan import (
    _check_backend_flags,
    _check_output,
    _is_scan_file,
    _open_input,
    _rows,
    _say,
    estimate_center,
    load_scan,
)


PREVIEW_COLUMNS = 256  # preview reconstructions are binned to at most this many columns


PREVIEW_FILES = ("slices.png", "sinogram.png", "geometry.png")  # what preview writes into its folder


def preview(args) -> int:
    out = Path(args.output_dir).absolute()
    if args.input is None:
        raise ValueError("input: give a scan (with --angles) or a volume")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--output-dir: {str(out)!r} is a file, not a folder")
    for name in PREVIEW_FILES if out.is_dir() else ():  # replaced as files: never an input, nor a folder
        _check_output(out / name, overwrite=True, flag="--output-dir", args=args, asked_by=None)
    scan_mode = args.angles is not None or _is_scan_file(args)
    # The folder is made when the first figure is saved: a rejected input leaves no empty folder.
    written = _preview_scan(args, out) if scan_mode else _preview_volume(args, out)
    _say(args, f"wrote {', '.join(p.name for p in written)} into {out}")
    return 0


def _save(fig, path: Path) -> Path:
    from ..io import atomic_output

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path, overwrite=True) as tmp:
        fig.savefig(tmp, dpi=90, format="png")
    return path


#: How each slice's vertical axis is drawn: y upwards (as scikit-image, ASTRA and tomopy show their
#: slices of the same data: leveret's row 0, the smallest y, at the bottom), z downwards (as the
#: detector rows it comes from, row 0 at the top).
AXIS_LABELS = {"y": "y (upwards; row 0 at the bottom)", "z": "z (downwards, as the detector rows)"}


def _slices_figure(volume: np.ndarray, geometry, title: str):
    """Axial, coronal and sagittal slices through the middle, in length units: the axial slice
    with y upwards (see AXIS_LABELS), the others with z downwards."""
    from matplotlib.figure import Figure

    nz, ny, nx = volume.shape
    views = [
        (volume[nz // 2], "x", "y", f"axial, z = {geometry.coordinates('z')[nz // 2]:.3g}"),
        (volume[:, ny // 2, :], "x", "z", f"coronal, y = {geometry.coordinates('y')[ny // 2]:.3g}"),
        (volume[:, :, nx // 2], "y", "z", f"sagittal, x = {geometry.coordinates('x')[nx // 2]:.3g}"),
    ]
    lo, hi = np.percentile(np.concatenate([v[0].ravel() for v in views]), [0.5, 99.5])
    fig = Figure(figsize=(13, 4.6), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, (img, h, v, label) in zip(axes, views):
        (h0, h1), (v0, v1) = geometry.extent(h), geometry.extent(v)
        up = v == "y"
        im = ax.imshow(
            img,
            cmap="gray",
            vmin=lo,
            vmax=hi,
            extent=(h0, h1, v0, v1) if up else (h0, h1, v1, v0),
            origin="lower" if up else "upper",
            interpolation="nearest",
        )
        ax.set_title(label, fontsize=9)
        ax.set_xlabel(h)
        ax.set_ylabel(AXIS_LABELS[v])
    fig.colorbar(im, ax=list(axes), shrink=0.8, label="attenuation per length unit")
    fig.suptitle(title)
    return fig


def _preview_volume(args, out: Path) -> list[Path]:
    import leveret

    vol = _open_input(args)
    if len(vol.shape) != 3:
        raise ValueError(
            f"input: a volume preview needs a 3D volume (nz, ny, nx), got shape {vol.shape}; for a scan give --angles"
        )
    nz, ny, nx = vol.shape
    small = np.zeros((nz, ny, nx), np.float32) if nz * ny * nx <= 2**26 else None
    if small is not None:
        small[...] = np.asarray(vol[:])
        data = small
    else:  # only the three middle planes are read
        data = _Planes(vol)
    g = leveret.VolumeGeometry(vol.shape)
    return [_save(_slices_figure(data, g, f"{args.input}: {vol.shape}"), out / "slices.png")]


class _Planes:
    """The three middle planes of a large lazy volume, indexable as _slices_figure does."""

    def __init__(self, vol):
        nz, ny, nx = vol.shape
        self.shape = vol.shape
        self._z, self._y, self._x = (
            np.asarray(vol[nz // 2]),
            np.asarray(vol[:, ny // 2, :]),
            np.asarray(vol[:, :, nx // 2]),
        )

    def __getitem__(self, key):
        if isinstance(key, int):
            return self._z
        return self._y if isinstance(key[1], int) else self._x


def _bin(data: np.ndarray, b: int) -> np.ndarray:
    """Average b x b detector pixels: (A, R, C) -> (A, R // b, C // b)."""
    if b == 1:
        return data
    a, r, c = data.shape
    r, c = r // b * b, c // b * b
    return data[:, :r, :c].reshape(a, r // b, b, c // b, b).mean(axis=(2, 4), dtype=np.float32)


def _preview_scan(args, out: Path) -> list[Path]:
    import leveret
    from matplotlib.figure import Figure

    scan = load_scan(args)
    _check_backend_flags(args)
    if len(scan.shape) != 3:
        raise ValueError(f"input: a scan preview needs projections (n_angles, n_rows, n_cols), got {scan.shape}")
    n_angles, n_rows, n_cols = scan.shape
    if args.bin is not None and args.bin > min(n_rows, n_cols):
        raise ValueError(f"--bin: {args.bin} is larger than the detector ({n_rows} x {n_cols})")
    # by default: to at most PREVIEW_COLUMNS columns, but never past the detector's rows
    b = args.bin or min(max(1, math.ceil(n_cols / PREVIEW_COLUMNS)), n_rows, n_cols)
    center = args.center
    if center == "auto":
        center = estimate_center(args, scan)[0].center
    center = (n_cols - 1) / 2 if center is None else float(center)
    band = max(b, (64 // b) * b)
    binned = np.concatenate(
        [_bin(_rows(scan, r0, min(n_rows // b * b, r0 + band)), b) for r0 in range(0, n_rows // b * b, band)], axis=1
    )
    g = leveret.ParallelGeometry(
        scan.angles,
        binned.shape[2],
        n_rows=binned.shape[1],
        det_spacing=args.det_spacing * b,
        row_spacing=args.row_spacing * b,
        center=min(max((center - (b - 1) / 2) / b, 0), binned.shape[2] - 1),
    )
    volume = leveret.fbp(
        binned,
        g,
        backend=args.backend,
        filter=args.filter,
        cutoff=args.cutoff,
        interpolation=args.interpolation,
        kernel=args.kernel,
        precision=args.precision,
    )
    vg = g.default_volume()
    written = [
        _save(_slices_figure(volume, vg, f"{scan.source}: centre {center:.2f} px, binned {b}x{b}"), out / "slices.png")
    ]
    fig = Figure(figsize=(7, 5), layout="constrained")
    ax = fig.subplots()
    row = binned.shape[1] // 2
    deg = np.degrees(scan.angles)
    im = ax.imshow(
        binned[:, row, :],
        cmap="gray",
        aspect="auto",
        interpolation="nearest",
        extent=(-0.5 * b, (binned.shape[2] - 0.5) * b, deg[-1], deg[0]),
    )
    ax.axvline(center, color="tab:red", lw=0.8, label=f"centre {center:.2f} px")
    ax.set_xlabel("detector column (pixels)")
    ax.set_ylabel("angle (degrees)")
    ax.set_title(f"sinogram of detector row {row * b} (line integrals)")
    ax.legend(loc="upper right", fontsize=8)
    fig.colorbar(im, ax=ax, label="line integral")
    written.append(_save(fig, out / "sinogram.png"))
    full = leveret.ParallelGeometry(
        scan.angles, n_cols, n_rows=n_rows, det_spacing=args.det_spacing, row_spacing=args.row_spacing, center=center
    )
    ax = full.plot(full.default_volume())
    ax.figure.suptitle(f"geometry: {n_angles} angles, {n_rows} x {n_cols} detector")
    written.append(_save(ax.figure, out / "geometry.png"))
    return written
