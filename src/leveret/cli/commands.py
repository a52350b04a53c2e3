"""What each ``leveret`` subcommand does; :mod:`leveret.cli` parses and dispatches."""
from __future__ import annotations

import json
import logging
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger("leveret.cli")

CENTER_ROWS = 16        # detector rows the centre estimate uses by default
PREVIEW_COLUMNS = 256   # preview reconstructions are binned to at most this many columns
PREVIEW_FILES = ("slices.png", "sinogram.png", "geometry.png")     # what preview writes into its folder


LIMITED_ANGLE_DEGREES = 170.0   # a parallel-beam scan covering less than this gets a warning


def _say(args, *parts) -> None:
    """A progress message on stderr, unless -q."""
    if not args.quiet:
        print(*parts, file=sys.stderr, flush=True)


def _warn(args, message: str) -> None:
    """A plausibility warning: one line on stderr, unless -q; the result is unchanged."""
    if not args.quiet:
        print(f"leveret {args.command}: warning: {message}", file=sys.stderr, flush=True)


def _precision(args) -> str:
    """--precision as the library spells it; an old spelling warns."""
    from . import OLD_PRECISIONS

    value = OLD_PRECISIONS.get(args.precision, args.precision)
    if value != args.precision:
        _warn(args, f"--precision: {args.precision!r} is deprecated; use {value!r}")
    return value


def _check_output(path: Path, overwrite: bool, flag: str = "output",
                  hint: str = "pass --overwrite to replace it", *, kind: str | None = None, args=None,
                  inside: bool = False, asked_by: str | None = "--overwrite") -> None:
    """Fail now, naming ``flag``, if ``path`` is one of the inputs ``args`` names (or
    holds one; with ``inside``, lies in an input folder), exists (without --overwrite),
    exists as something other than an output of ``kind`` that leveret wrote, or its
    folder is missing or not writable; not after the work, and not naming a temporary.
    ``asked_by`` names what asked to replace an existing ``path`` (None: the command)."""
    import tempfile

    from ..io.atomic import check_replaceable
    from ..io.marks import check_not_input

    path = Path(path)
    if args is not None:
        check_not_input(path, _inputs(args), flag=flag, inside=inside)
    if not path.parent.is_dir():
        raise ValueError(f"{flag}: the folder {str(path.parent)!r} does not exist (for {str(path)!r})")
    if path.exists() and not overwrite:
        raise ValueError(f"{flag}: {str(path)!r} already exists; {hint}")
    if path.exists():
        check_replaceable(path, kind, flag=flag, asked_by=asked_by)
    try:        # the one reliable test of "writable" (permissions, read-only mounts, /proc)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as exc:
        raise ValueError(f"{flag}: cannot write into the folder {str(path.parent.resolve())!r} "
                         f"({exc.strerror or exc})") from None


def _inputs(args) -> list[tuple[str, str]]:
    """The files and folders the flags read, each with how a message names it."""
    found = [("the input", getattr(args, "input", None)), ("--flat", getattr(args, "flat", None)),
             ("--dark", getattr(args, "dark", None)), ("--config", getattr(args, "config", None))]
    angles = getattr(args, "angles", None)
    if isinstance(angles, str) and Path(angles).exists():      # a file, not start:stop:count
        found.append(("--angles", angles))
    return [(what, path) for what, path in found if path is not None]


def _check_plausible(args, angles: np.ndarray, dtype, has_flats: bool) -> None:
    """Warn about a scan that is readable but probably not what was meant."""
    n = angles.size
    if n > 1 and not getattr(args, "limited_angle", False):
        span = float(np.ptp(angles))
        covered = math.degrees(span * n / (n - 1))      # the last view covers one more step
        if covered < LIMITED_ANGLE_DEGREES:
            unit = getattr(args, "angle_unit", "degree")
            hint = ("angles are read in degrees; give --angle-unit radian if they are radians"
                    if unit == "degree" else "the angles were read in radians")
            _warn(args, f"--angles: the scan covers {covered:.3g} degrees (< {LIMITED_ANGLE_DEGREES:g}): {hint}; "
                        "pass --limited-angle if a limited range is meant")
    if np.dtype(dtype).kind in "iu" and not has_flats and not args.minus_log:
        _warn(args, f"input: integer data ({np.dtype(dtype).name}) without --flat/--dark or --minus-log "
                    "is reconstructed as line integrals; raw detector counts need --flat and --dark "
                    "(or --minus-log for transmissions)")


def _named(flag: str, read, *args, **kwargs):
    """``read(*args, **kwargs)``, its "path: ..." errors naming ``flag`` instead."""
    try:
        return read(*args, **kwargs)
    except ValueError as exc:
        head, sep, rest = str(exc).partition(": ")
        if head != "path" or not sep:
            raise
        raise ValueError(f"{flag}: {rest}") from None


def _check_backend_flags(args) -> None:
    """Refuse flags the chosen backend cannot run (before any work or plan is
    printed); warn about GPU-only flags that a CPU run ignores."""
    from ..backends import resolve

    if resolve(args.backend) != "cpu":
        if args.precision in ("float64", "double"):
            raise ValueError("--precision: float64 runs on the CPU backend only; use --backend cpu")
        return
    if args.kernel != "auto":
        _warn(args, f"--kernel: {args.kernel!r} chooses a CUDA kernel; the CPU backend ignores it")
    if args.precision in ("float16", "fast"):
        _warn(args, "--precision: float16 filtered sinograms are a GPU mode; the CPU backend computes in float32")


def _open_input(args):
    """The lazy array of ``input`` (``--dataset`` only for HDF5 files)."""
    from ..io import open_array
    from ..io._common import HDF5_EXTS, split_dataset

    path, _ = split_dataset(args.input, None)
    if args.dataset is not None and path.suffix.lower() not in HDF5_EXTS:
        raise ValueError(f"--dataset: {args.input!r} is not an HDF5 file ({', '.join(HDF5_EXTS)}); "
                         "only those hold datasets")
    return _named("input", open_array, args.input, dataset=args.dataset)


# -- the scan: input, angles, flats/darks ----------------------------------------------------------

@dataclass
class ScanInput:
    projections: object          # lazy (n_angles, n_rows, n_cols) or (n_angles, n_cols)
    angles: np.ndarray           # radians
    flats: np.ndarray | None
    darks: np.ndarray | None
    log_transform: bool
    source: str

    @property
    def shape(self):
        return tuple(self.projections.shape)

    stripes: str | None = None
    stripe_size: int = 5

    @property
    def preprocess(self) -> dict:
        return dict(flats=self.flats, darks=self.darks, log_transform=self.log_transform,
                    stripes=self.stripes, stripe_size=self.stripe_size)


def _select(values: np.ndarray, spec: str | None, what: str) -> np.ndarray:
    if spec is None:
        return values
    try:
        a, b = (int(x) if x.strip() else None for x in str(spec).split(":"))
    except ValueError:
        raise ValueError(f"{what}: expected A:B (entries A to B-1), got {spec!r}") from None
    out = values[slice(a, b)]
    if out.size == 0:
        raise ValueError(f"{what}: {spec!r} selects none of the {values.size} entries")
    return out


def _is_scan_file(args) -> bool:
    from ..io._common import HDF5_EXTS, split_dataset

    path, inline = split_dataset(args.input, args.dataset)
    if inline is not None or path.suffix.lower() not in HDF5_EXTS or not path.is_file():
        return False
    import h5py

    from ..io.scans import _nxtomo_entries
    try:
        with h5py.File(path, "r") as f:
            return bool(_nxtomo_entries(f, None)) or isinstance(f.get("/exchange/data"), h5py.Dataset)
    except OSError:        # not HDF5 after all: the array reader gives the error
        return False


def load_scan(args) -> ScanInput:
    """The projections (lazy), angles and flats/darks the flags name."""
    from ..io import read_angles, read_array, read_scan

    if args.input is None:
        raise ValueError("input: give the projections (as the first argument, or input = ... in --config)")
    flats = darks = None
    angles = None
    if _is_scan_file(args):
        scan = read_scan(args.input)
        projections = scan.projections
        if len(scan.flats) and len(scan.darks):
            flats, darks = scan.flats, scan.darks
        angles = scan.angles
        if angles is None:
            raise ValueError(f"--angles: {args.input!r} stores no rotation angles; give --angles")
        _say(args, f"scan {args.input} ({scan.metadata['layout']}): {scan.projections.shape} "
                   f"{scan.projections.dtype}, {len(scan.flats)} flat(s), {len(scan.darks)} dark(s)")
    else:
        projections = _open_input(args)
        if args.angles is None:
            raise ValueError("--angles: required (a file, or start:stop:count) for this input")
    if args.angles is not None:
        angles = read_angles(args.angles, unit=args.angle_unit)
    angles = _select(angles, args.angle_lines, "--angle-lines")
    if args.flat is not None or args.dark is not None:
        if args.flat is None or args.dark is None:
            raise ValueError("--flat/--dark: give both, or neither")
        flats, darks = _named("--flat", read_array, args.flat), _named("--dark", read_array, args.dark)
    shape = tuple(projections.shape)
    if len(shape) not in (2, 3):
        raise ValueError(f"input: expected a sinogram (n_angles, n_cols) or projections "
                         f"(n_angles, n_rows, n_cols), got shape {shape}")
    if angles.size != shape[0]:
        raise ValueError(f"--angles: expected {shape[0]} angles (one per projection in input), "
                         f"got {angles.size}")
    _check_plausible(args, angles, projections.dtype, flats is not None)
    return ScanInput(projections, angles, flats, darks, bool(args.minus_log) and flats is None,
                     str(args.input), args.stripes, args.stripe_size)


def _band(shape, spec: str | None = None, n: int = CENTER_ROWS) -> tuple[int, int]:
    n_rows = shape[1]
    if spec is not None:
        rows = _select(np.arange(n_rows), spec, "--rows")
        return int(rows[0]), int(rows[-1]) + 1
    mid = n_rows // 2
    return max(0, mid - n // 2), min(n_rows, mid - n // 2 + n)


def _rows(scan: ScanInput, r0: int, r1: int) -> np.ndarray:
    """Line integrals (n_angles, r1 - r0, n_cols), float32."""
    from ..execution.slab import preprocess_rows

    raw = np.asarray(scan.projections[:, r0:r1, :])
    return preprocess_rows(raw, (r0, r1), **scan.preprocess)


def _sinogram_data(scan: ScanInput) -> np.ndarray:
    """A 2D input (n_angles, n_cols) as float32 line integrals."""
    data = np.asarray(scan.projections)[:, None, :]
    from ..execution.slab import preprocess_rows
    from ..preprocess import sinogram_fields
    n_cols = scan.shape[-1]
    flats = None if scan.flats is None else sinogram_fields("--flat", scan.flats, n_cols)
    darks = None if scan.darks is None else sinogram_fields("--dark", scan.darks, n_cols)
    return preprocess_rows(data, (0, 1), flats=flats, darks=darks, log_transform=scan.log_transform,
                           stripes=scan.stripes, stripe_size=scan.stripe_size)[:, 0]


def estimate_center(args, scan: ScanInput, method: str = "auto", cross_check: bool = False):
    """:func:`leveret.preprocess.find_center` on a band of middle rows.

    With ``cross_check`` the other method (sweep for pairs, pairs for sweep)
    estimates the centre too; if the two differ by ``d`` > 1 pixel the
    confidence is divided by ``d`` (details["check"] holds the other estimate).
    """
    from ..preprocess import find_center

    if len(scan.shape) == 2:
        data = _sinogram_data(scan)
    else:
        r0, r1 = _band(scan.shape, getattr(args, "rows", None))
        data = _rows(scan, r0, r1)
    est = find_center(data, scan.angles, method=method)
    if est.details.get("at_edge"):
        _warn(args, f"centre: the estimate {est.center:.2f} px sits on the edge of the search range "
                    f"(the middle half of the detector); the axis may lie outside it, so the confidence "
                    f"is lowered; check with 'leveret center --sweep'")
    if cross_check:
        other = _other_method(data, scan.angles, est)
        if other is not None:
            difference = abs(other.center - est.center)
            est.details["check"] = {"method": other.method, "center": other.center, "difference": difference}
            if difference > 1.0:
                est = est._replace(confidence=est.confidence / difference)
                _warn(args, f"centre: the methods disagree by {difference:.2f} px ({est.method} "
                            f"{est.center:.2f}, {other.method} {other.center:.2f}); confidence lowered "
                            f"to {est.confidence:.2f}")
    _say(args, f"centre of rotation: {est.center:.2f} px (confidence {est.confidence:.2f}, "
               f"method {est.method}, spread {est.details.get('spread', 0.0):.2f} px)")
    return est, data


CHECK_PIXELS = 3.0    # the sweep that checks a pairs estimate tries centres within +-this of it


def _other_method(data: np.ndarray, angles: np.ndarray, est):
    """The centre by the method ``est`` did not use, or None where that one cannot run."""
    from ..preprocess import CenterEstimate, center_sweep, find_center

    if est.method == "sweep":
        try:
            return find_center(data, angles, method="pairs")
        except ValueError:                  # no 180-degree pair among the angles
            return None
    sino = data[:, data.shape[1] // 2, :] if data.ndim == 3 else data
    n_cols = sino.shape[1]
    # 0.5 px steps resolve the 1 px disagreement that matters, with 13 trial slices
    centers = np.arange(est.center - CHECK_PIXELS, est.center + CHECK_PIXELS + 0.25, 0.5)
    centers = centers[(centers >= 0) & (centers <= n_cols - 1)]
    if centers.size < 3:
        return None
    scores = center_sweep(sino, angles, centers)
    return CenterEstimate(center=float(centers[int(np.argmin(scores))]), confidence=float("nan"),
                          method="sweep", details={})


def _geometry(args, scan: ScanInput, center):
    import leveret

    shape = scan.shape
    return leveret.ParallelGeometry(scan.angles, shape[-1], n_rows=shape[1] if len(shape) == 3 else None,
                                    det_spacing=args.det_spacing, row_spacing=args.row_spacing, center=center)


def _devices(args) -> dict:
    """``devices=`` for the reconstruction from --gpus."""
    if args.gpus is None:
        return {}
    if args.scheduler is not None:
        raise ValueError("--gpus: give it without --scheduler; each Dask worker uses its own GPU")
    return {"devices": args.gpus}


# -- recon -----------------------------------------------------------------------------------------

def recon(args) -> int:
    """``leveret recon``: with --scheduler, on a Dask cluster connected before any work."""
    if args.scheduler is None:
        return _recon(args, None)
    from ..execution.executors import check_address, connect

    if args.scheduler.strip().lower() != "local":
        check_address(args.scheduler)
    if args.dry_run:
        return _recon(args, None)
    with connect(args.scheduler, backend=args.backend) as client:
        _say(args, f"dask: {len(client.nthreads())} worker(s) at {client.scheduler.address}; "
                   f"dashboard {client.dashboard_link}")
        return _recon(args, client)


def _recon(args, client) -> int:
    import leveret
    from ..io import write_array
    from ..io._common import split_dataset
    from ..io.slabs import output_format
    from ..execution.outofcore import plan, reconstruct_to_file

    if args.output is None:
        raise ValueError("output: give the output path (second argument, or output = ... in --config)")
    out_path, dataset = split_dataset(args.output, None)
    fmt = output_format(args.output if dataset is None else out_path)     # a bad extension fails now
    _check_output(out_path, args.overwrite, kind={"bigtiff": "tiff"}.get(fmt, fmt), args=args, inside=True)
    compression = None if str(args.compression).lower() == "none" else args.compression
    scan = load_scan(args)
    _check_backend_flags(args)
    progress = not (args.no_progress or args.quiet)
    options = dict(filter=args.filter, cutoff=args.cutoff, interpolation=args.interpolation,
                   kernel=args.kernel, precision=_precision(args), **_devices(args))
    if args.chunk_slices is not None and args.chunk_slices < 1:
        raise ValueError(f"chunk_slices: expected a positive number of slices, got {args.chunk_slices}")

    if len(scan.shape) == 2:     # one sinogram: one slice, in memory
        g = _geometry(args, scan, None if args.center in (None, "auto") else args.center)
        if args.dry_run:
            print(f"memory plan: one slice {g.n_cols} x {g.n_cols} from a sinogram {scan.shape}; in memory")
            return 0
        data = _sinogram_data(scan)
        if args.center == "auto":
            g = g.replace(center=estimate_center(args, scan)[0].center)
        if client is not None:
            _warn(args, "--scheduler: a single sinogram is one slice, reconstructed in this process")
        t0 = time.perf_counter()
        image = leveret.fbp(data, g, backend=args.backend, progress=progress, **options)
        write_array(args.output, image, overwrite=args.overwrite)
        _say(args, f"wrote {out_path}: {image.shape} float32 in {time.perf_counter() - t0:.2f} s")
        return 0

    g = _geometry(args, scan, None if args.center in (None, "auto") else args.center)
    itemsize = np.dtype(scan.projections.dtype).itemsize
    resident = 0 if scan.flats is None else np.asarray(scan.flats).nbytes + np.asarray(scan.darks).nbytes
    the_plan = plan(g, backend=args.backend, host_memory=args.host_memory, gpu_memory=args.gpu_memory,
                    input_itemsize=itemsize, preprocess=scan.flats is not None or scan.log_transform,
                    resident=resident, max_slices=args.chunk_slices, stripes=scan.stripes is not None)
    if args.dry_run:
        print(f"input {scan.source}: {scan.shape} {scan.projections.dtype}; output {args.output} "
              f"({output_format(args.output if dataset is None else out_path)})")
        if args.center == "auto":
            print("centre: 'auto', estimated when the run starts")
        print(the_plan.describe())
        return 0
    if args.center == "auto":
        g = g.replace(center=estimate_center(args, scan)[0].center)
    _say(args, f"input {scan.source}: {scan.shape} {scan.projections.dtype}; {g!r}")
    run = dict(backend=args.backend, host_memory=args.host_memory, gpu_memory=args.gpu_memory,
               resume=args.resume, overwrite=args.overwrite, compression=compression, progress=progress,
               params={"input": scan.source}, metadata={"center": g.center, "input": scan.source},
               **scan.preprocess, **options)
    if client is None:
        _say(args, the_plan.describe())
        result = reconstruct_to_file(scan.projections, g, args.output, slab_slices=the_plan.slab_slices, **run)
    else:   # planned for the smallest worker; --slab-slices still caps it
        result = reconstruct_to_file(scan.projections, g, args.output, slab_slices=args.chunk_slices,
                                     client=client, on_plan=lambda p: _say(args, p.describe()), **run)
    updates = g.default_volume().size * g.n_angles
    _say(args, result.summary() + f"; {updates / result.seconds / 1e9:.3f} GU/s overall")
    return 0


# -- center ----------------------------------------------------------------------------------------

def center(args) -> int:
    from ..io import atomic_output
    from ..preprocess import center_sweep

    for flag, path in (("--json", args.json), ("--montage", args.montage)):
        if path is not None:
            _check_output(Path(path), overwrite=True, flag=flag, args=args, asked_by=None)
    if args.sweep is not None:
        _check_sweep(args.sweep, args.step)
    elif args.montage:
        raise ValueError("--montage: needs --sweep")
    scan = load_scan(args)
    est, data = estimate_center(args, scan, method=args.method, cross_check=True)
    print(f"center {est.center:.2f}  confidence {est.confidence:.2f}  method {est.method}")
    result = {"center": est.center, "confidence": est.confidence, "method": est.method,
              "spread": est.details.get("spread"), "at_edge": bool(est.details.get("at_edge")),
              "check": est.details.get("check")}
    n_cols = scan.shape[-1]
    if args.sweep is not None:
        centers = np.arange(est.center - args.sweep, est.center + args.sweep + args.step / 2, args.step)
        centers = centers[(centers >= 0) & (centers <= n_cols - 1)]
        sino = data[:, data.shape[1] // 2, :] if data.ndim == 3 else data
        scores = center_sweep(sino, scan.angles, centers)
        best = float(centers[int(np.argmin(scores))])
        print(f"{'centre':>8} {'negativity':>12}")
        for c, s in zip(centers, scores):
            print(f"{c:8.2f} {s:12.5f}{'  <- best' if c == best else ''}")
        print(f"sweep best {best:.2f} (estimate {est.center:.2f}, difference {best - est.center:+.2f} px)")
        result.update(sweep_best=best, sweep_centers=centers.tolist(), sweep_scores=scores.tolist())
        if args.montage:
            fig = _montage(sino, scan.angles, centers, scores, best)
            with atomic_output(args.montage, overwrite=True) as tmp:
                fig.savefig(tmp, dpi=90, format="png")
            _say(args, f"wrote {args.montage}")
    if args.json:
        with atomic_output(args.json, overwrite=True) as tmp:
            tmp.write_text(json.dumps(result, indent=1))
    return 0


#: Bytes per trial centre of a sweep: its position and score as float64 arrays, their in-range
#: copies and masks, and the Python floats of the printed table and the JSON lists.
SWEEP_BYTES_PER_CENTRE = 96


def _check_sweep(sweep: float, step: float) -> None:
    """Refuse a --sweep/--step that is not positive, or whose trial centres do not fit in
    memory, before any work (and before NumPy tries to allocate them)."""
    from ..resources import format_bytes, host_available_bytes

    if not (math.isfinite(sweep) and math.isfinite(step) and sweep > 0 and step > 0):
        raise ValueError(f"--sweep/--step: expected positive pixel counts, got {sweep} and {step}")
    count = math.ceil(2 * sweep / step + 0.5)       # as np.arange(-sweep, sweep + step / 2, step) counts
    needed, available = count * SWEEP_BYTES_PER_CENTRE, host_available_bytes()
    if needed > available:
        raise ValueError(f"--step: a sweep of +-{sweep:g} px in steps of {step:g} px is {count:.3g} trial "
                         f"centres, which needs about {format_bytes(needed)} of memory but "
                         f"{format_bytes(available)} are available; give a larger --step or a smaller --sweep")


def _montage(sino, angles, centers, scores, best):
    import leveret
    from matplotlib.figure import Figure

    picks = np.unique(np.r_[np.linspace(0, len(centers) - 1, min(8, len(centers))).round().astype(int),
                            int(np.argmin(scores))])
    cols = min(3, len(picks))
    rows = -(-len(picks) // cols)
    fig = Figure(figsize=(3.2 * cols, 3.2 * rows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    images = [leveret.fbp(sino, leveret.ParallelGeometry(angles, sino.shape[1], center=float(centers[i])),
                          backend="auto") for i in picks]
    lo, hi = np.percentile(np.concatenate([im.ravel() for im in images]), [1, 99.5])
    for ax, i, im in zip(axes, picks, images):
        ax.imshow(im, cmap="gray", vmin=lo, vmax=hi)
        ax.set_title(f"centre {centers[i]:.2f}: {scores[i]:.4f}" + ("  (best)" if centers[i] == best else ""),
                     fontsize=9, color="tab:red" if centers[i] == best else "black")
        ax.axis("off")
    for ax in axes[len(picks):]:
        ax.axis("off")
    fig.suptitle("centre sweep (negativity score, lower is better)")
    return fig


# -- preview ---------------------------------------------------------------------------------------

def preview(args) -> int:
    out = Path(args.output_dir).absolute()
    if args.input is None:
        raise ValueError("input: give a scan (with --angles) or a volume")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--output-dir: {str(out)!r} is a file, not a folder")
    for name in PREVIEW_FILES if out.is_dir() else ():    # replaced as files: never an input, nor a folder
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


def _slices_figure(volume: np.ndarray, geometry, title: str):
    """Axial, coronal and sagittal slices through the middle, in length units."""
    from matplotlib.figure import Figure

    nz, ny, nx = volume.shape
    views = [(volume[nz // 2], "x", "y", f"axial, z = {geometry.coordinates('z')[nz // 2]:.3g}"),
             (volume[:, ny // 2, :], "x", "z", f"coronal, y = {geometry.coordinates('y')[ny // 2]:.3g}"),
             (volume[:, :, nx // 2], "y", "z", f"sagittal, x = {geometry.coordinates('x')[nx // 2]:.3g}")]
    lo, hi = np.percentile(np.concatenate([v[0].ravel() for v in views]), [0.5, 99.5])
    fig = Figure(figsize=(13, 4.6), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, (img, h, v, label) in zip(axes, views):
        (h0, h1), (v0, v1) = geometry.extent(h), geometry.extent(v)
        im = ax.imshow(img, cmap="gray", vmin=lo, vmax=hi, extent=(h0, h1, v1, v0), interpolation="nearest")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel(h)
        ax.set_ylabel(v)
    fig.colorbar(im, ax=list(axes), shrink=0.8, label="attenuation per length unit")
    fig.suptitle(title)
    return fig


def _preview_volume(args, out: Path) -> list[Path]:
    import leveret

    vol = _open_input(args)
    if len(vol.shape) != 3:
        raise ValueError(f"input: a volume preview needs a 3D volume (nz, ny, nx), got shape {vol.shape}; "
                         "for a scan give --angles")
    nz, ny, nx = vol.shape
    small = np.zeros((nz, ny, nx), np.float32) if nz * ny * nx <= 2**26 else None
    if small is not None:
        small[...] = np.asarray(vol[:])
        data = small
    else:   # only the three middle planes are read
        data = _Planes(vol)
    g = leveret.VolumeGeometry(vol.shape)
    return [_save(_slices_figure(data, g, f"{args.input}: {vol.shape}"), out / "slices.png")]


class _Planes:
    """The three middle planes of a large lazy volume, indexable as _slices_figure does."""

    def __init__(self, vol):
        nz, ny, nx = vol.shape
        self.shape = vol.shape
        self._z, self._y, self._x = (np.asarray(vol[nz // 2]), np.asarray(vol[:, ny // 2, :]),
                                     np.asarray(vol[:, :, nx // 2]))

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
    b = args.bin or max(1, math.ceil(n_cols / PREVIEW_COLUMNS))
    if b > min(n_rows, n_cols):
        raise ValueError(f"--bin: {b} is larger than the detector ({n_rows} x {n_cols})")
    center = args.center
    if center == "auto":
        center = estimate_center(args, scan)[0].center
    center = (n_cols - 1) / 2 if center is None else float(center)
    band = max(b, (64 // b) * b)
    binned = np.concatenate([_bin(_rows(scan, r0, min(n_rows // b * b, r0 + band)), b)
                             for r0 in range(0, n_rows // b * b, band)], axis=1)
    g = leveret.ParallelGeometry(scan.angles, binned.shape[2], n_rows=binned.shape[1],
                                 det_spacing=args.det_spacing * b, row_spacing=args.row_spacing * b,
                                 center=min(max((center - (b - 1) / 2) / b, 0), binned.shape[2] - 1))
    volume = leveret.fbp(binned, g, backend=args.backend, filter=args.filter, cutoff=args.cutoff,
                         interpolation=args.interpolation, kernel=args.kernel, precision=_precision(args))
    vg = g.default_volume()
    written = [_save(_slices_figure(volume, vg, f"{scan.source}: centre {center:.2f} px, binned {b}x{b}"),
                     out / "slices.png")]
    fig = Figure(figsize=(7, 5), layout="constrained")
    ax = fig.subplots()
    row = binned.shape[1] // 2
    deg = np.degrees(scan.angles)
    im = ax.imshow(binned[:, row, :], cmap="gray", aspect="auto", interpolation="nearest",
                   extent=(-0.5 * b, (binned.shape[2] - 0.5) * b, deg[-1], deg[0]))
    ax.axvline(center, color="tab:red", lw=0.8, label=f"centre {center:.2f} px")
    ax.set_xlabel("detector column (pixels)")
    ax.set_ylabel("angle (degrees)")
    ax.set_title(f"sinogram of detector row {row * b} (line integrals)")
    ax.legend(loc="upper right", fontsize=8)
    fig.colorbar(im, ax=ax, label="line integral")
    written.append(_save(fig, out / "sinogram.png"))
    full = leveret.ParallelGeometry(scan.angles, n_cols, n_rows=n_rows, det_spacing=args.det_spacing,
                                    row_spacing=args.row_spacing, center=center)
    ax = full.plot(full.default_volume())
    ax.figure.suptitle(f"geometry: {n_angles} angles, {n_rows} x {n_cols} detector")
    written.append(_save(ax.figure, out / "geometry.png"))
    return written


# -- bench -----------------------------------------------------------------------------------------

def bench(args) -> int:
    import leveret
    from leveret import phantom
    from ..backends import resolve
    from ..io import atomic_output

    json_path = None if args.json is None else Path(args.output_dir).absolute() / args.json
    if json_path is not None:
        if json_path.parent.exists() and not json_path.parent.is_dir():
            raise ValueError(f"--output-dir: {str(json_path.parent)!r} is a file, not a folder")
        if json_path.parent.is_dir():
            _check_output(json_path, overwrite=True, flag="--json", args=args, asked_by=None)
    backend = resolve(args.backend)
    sizes = sorted({max(16, args.size // 4), max(16, args.size // 2), max(16, args.size)})
    rows = []

    def timed(fn):
        fn()                               # compile and plan first
        best = math.inf
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            r = fn()
            if backend == "cuda":
                import cupy
                cupy.cuda.Device().synchronize()
            best = min(best, time.perf_counter() - t0)
            del r
        return best

    for n in sizes:
        g = leveret.ParallelGeometry(np.linspace(0, np.pi, n, endpoint=False), n, n_rows=args.slices)
        proj = phantom.ball(0.4 * n).project(g).astype(np.float32)
        t = timed(lambda: leveret.fbp(proj, g, backend=backend))
        updates = g.default_volume().size * g.n_angles
        rows.append(dict(case="fbp parallel", backend=backend, projections=list(proj.shape),
                         volume=list(g.default_volume().shape), seconds=t, gups=updates / t / 1e9))
    n = sizes[-1] // 2 if sizes[-1] >= 32 else sizes[-1]
    cg = leveret.ConeGeometry.circular(np.linspace(0, 2 * np.pi, n, endpoint=False), sid=4.0 * n, sdd=8.0 * n,
                                       n_rows=n, n_cols=n, pixel_size=1.0)
    cv = leveret.VolumeGeometry((args.slices, n // 2, n // 2), 1.0)
    cproj = phantom.ball(0.2 * n).project(cg).astype(np.float32)
    t = timed(lambda: leveret.fdk(cproj, cg, cv, backend=backend))
    rows.append(dict(case="fdk cone", backend=backend, projections=list(cproj.shape), volume=list(cv.shape),
                     seconds=t, gups=cv.size * cg.n_views / t / 1e9))

    print(f"{'case':<14} {'backend':<7} {'projections':<18} {'volume':<16} {'best (ms)':>10} {'GU/s':>8}")
    for r in rows:
        print(f"{r['case']:<14} {r['backend']:<7} {'x'.join(map(str, r['projections'])):<18} "
              f"{'x'.join(map(str, r['volume'])):<16} {r['seconds'] * 1e3:>10.2f} {r['gups']:>8.3f}")
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(json_path, overwrite=True) as tmp:
            tmp.write_text(json.dumps({"repeats": args.repeats, "results": rows}, indent=1))
        _say(args, f"wrote {json_path}")
    return 0


# -- info, rabbitct, demo --------------------------------------------------------------------------

def info(args) -> int:
    from ..backends import describe
    import leveret

    print(f"leveret {leveret.__version__}")
    for dev in describe():
        if dev["backend"] == "cpu":
            print(f"  cpu   : {dev['threads']} threads (numba {dev['numba']}, numpy {dev['numpy']})")
        elif not dev.get("available"):
            print(f"  cuda  : not available: {dev['reason']}")
        else:
            print(f"  cuda:{dev['device']}: {dev['name']} (sm_{dev['compute_capability'].replace('.', '')}, "
                  f"{dev['multiprocessors']} SMs), {dev['memory_free_gib']:.1f} of "
                  f"{dev['memory_total_gib']:.1f} GiB free; CuPy {dev['cupy']}, CUDA runtime "
                  f"{dev['cuda_runtime']}, driver {dev['cuda_driver']}")
    from ..resources import format_bytes, host_available_bytes
    print(f"  host  : {format_bytes(host_available_bytes())} available")
    from ..cuda import tuning
    tuned = tuning.describe()
    print(f"  tuned choices ({tuning.cache_path()}, 'leveret tune'):" + ("" if tuned else " none yet"))
    for line in tuned:
        print(f"    {line}")
    return 0


def tune(args) -> int:
    from ..backends import resolve

    resolve("cuda")   # a RuntimeError naming what is missing without a GPU
    import cupy

    from ..cuda import gpu_name, tuning
    from ..operators import autotune

    n_devices = cupy.cuda.runtime.getDeviceCount()
    if args.device >= n_devices:
        raise ValueError(f"--device: no CUDA device {args.device} ({n_devices} found)")
    with cupy.cuda.Device(args.device):
        print(f"tuning {gpu_name()} into {tuning.cache_path()}", flush=True)
        t = autotune.tune_transpose()
        ms = [f"{m * 1e3:.1f}" for pair in t["measured"] for m in pair]
        print(f"  cone transpose: the band transpose takes {t['atomic_scale']:.2f} x the model's time (probes: "
              f"gather {ms[0]} / {ms[2]} ms, band {ms[1]} / {ms[3]} ms)", flush=True)

        done = iter(range(1, len(autotune.PARALLEL_CLASSES) + 1))

        def said(row):
            problem = (f"[{next(done)}/{len(autotune.PARALLEL_CLASSES)}, {row['elapsed']:.0f} of "
                       f"{args.budget} s] {row['slices']} x {row['side']}^2 from {row['angles']} angles, "
                       f"{row['precision']}")
            if "skipped" in row:
                print(f"  parallel {problem}: skipped, {row['skipped']}", flush=True)
                return
            config = ", ".join(f"{k}={val}" for k, val in row["kernel"].items())
            print(f"  parallel {problem}: {config} ({row['seconds'] * 1e3:.2f} ms, best of {row['tried']})",
                  flush=True)

        autotune.tune_parallel(budget_s=args.budget, progress=said)
    return 0


def rabbitct(args) -> int:
    from ..io import atomic_output
    from ..rabbitct import make_dataset, read_rabbitct, run_benchmark, write_rabbitct

    if args.size < 1:
        raise ValueError(f"--size: expected a positive volume edge, got {args.size}")
    if args.json is not None:
        _check_output(Path(args.json), overwrite=True, flag="--json", args=args, asked_by=None)
    if args.save is not None:       # before the synthetic dataset is made (minutes)
        if args.input is not None:
            raise ValueError("--save: writes the synthetic dataset; not with --input")
        _check_output(Path(args.save), overwrite=False, flag="--save", hint="choose another name", args=args)
    if args.input is not None:
        data = read_rabbitct(args.input)
        reference = None                        # the file's own reference volumes
    else:
        shape = dict(n_views=124, n_rows=240, n_cols=312) if args.small else {}
        cache: dict = {}
        _say(args, f"making a synthetic RabbitCT dataset{' (small)' if args.small else ''} and its "
                   f"float64 reference at L = {args.size} ...")
        data = make_dataset(reference_sizes=(args.size,), cache=cache, progress=not args.quiet,
                            backend=args.backend, **shape)
        reference = cache[args.size]
        if args.save:
            write_rabbitct(args.save, data)
    result = run_benchmark(data, args.size, backend=args.backend, repeats=args.repeats, reference=reference)
    print(result.table())
    if args.json:
        with atomic_output(args.json, overwrite=True) as tmp:
            tmp.write_text(json.dumps(result.to_dict(), indent=1))
    return 0


def demo(args) -> int:
    from .demo import run_demo
    return run_demo(args)
