"""What the scan commands share: loading a scan, checking it and its flags, the centre."""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger("leveret.cli")


CENTER_ROWS = 16  # detector rows the centre estimate uses by default


LIMITED_ANGLE_DEGREES = 170.0  # a parallel-beam scan covering less than this gets a warning


def _say(args, *parts) -> None:
    """A progress message on stderr, unless -q."""
    if not args.quiet:
        print(*parts, file=sys.stderr, flush=True)


def _warn(args, message: str) -> None:
    """A plausibility warning: one line on stderr, unless -q; the result is unchanged.
    With --strict it is an error instead (a ValueError: exit 2, before any work)."""
    if getattr(args, "strict", False):
        raise ValueError(message)
    if not args.quiet:
        print(f"leveret {args.command}: warning: {message}", file=sys.stderr, flush=True)


def _check_output(
    path: Path,
    overwrite: bool,
    flag: str = "output",
    hint: str = "pass --overwrite to replace it",
    *,
    kind: str | None = None,
    args=None,
    inside: bool = False,
    asked_by: str | None = "--overwrite",
) -> None:
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
    try:  # the one reliable test of "writable" (permissions, read-only mounts, /proc)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as exc:
        raise ValueError(
            f"{flag}: cannot write into the folder {str(path.parent.resolve())!r} ({exc.strerror or exc})"
        ) from None


def _inputs(args) -> list[tuple[str, str]]:
    """The files and folders the flags read, each with how a message names it."""
    found = [
        ("the input", getattr(args, "input", None)),
        ("--flat", getattr(args, "flat", None)),
        ("--dark", getattr(args, "dark", None)),
        ("--config", getattr(args, "config", None)),
    ]
    angles = getattr(args, "angles", None)
    if isinstance(angles, str) and Path(angles).exists():  # a file, not start:stop:count
        found.append(("--angles", angles))
    return [(what, path) for what, path in found if path is not None]


def _check_plausible(args, angles: np.ndarray) -> None:
    """Warn about angles that are readable but probably not what was meant."""
    n = angles.size
    if n > 1 and not getattr(args, "limited_angle", False):
        span = float(np.ptp(angles))
        covered = math.degrees(span * n / (n - 1))  # the last view covers one more step
        if covered < LIMITED_ANGLE_DEGREES:
            unit = getattr(args, "angle_unit", "degree")
            hint = (
                "angles are read in degrees; give --angle-unit radian if they are radians"
                if unit == "degree"
                else "the angles were read in radians"
            )
            _warn(
                args,
                f"--angles: the scan covers {covered:.3g} degrees (< {LIMITED_ANGLE_DEGREES:g}): {hint}; "
                "pass --limited-angle if a limited range is meant",
            )


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
        if args.precision == "float64":
            raise ValueError("--precision: float64 runs on the CPU backend only; use --backend cpu")
        return
    if getattr(args, "gpu_memory", None) is not None:
        _warn(args, "--gpu-memory: a GPU memory budget; the CPU backend ignores it (--host-memory caps a CPU run)")
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
        raise ValueError(
            f"--dataset: {args.input!r} is not an HDF5 file ({', '.join(HDF5_EXTS)}); only those hold datasets"
        )
    return _named("input", open_array, args.input, dataset=args.dataset)


@dataclass
class ScanInput:
    projections: object  # lazy (n_angles, n_rows, n_cols) or (n_angles, n_cols)
    angles: np.ndarray  # radians
    flats: np.ndarray | None
    darks: np.ndarray | None
    log_transform: bool
    source: str

    @property
    def shape(self):
        return tuple(self.projections.shape)

    stripes: str | None = None
    stripe_size: int = 5
    stripe_options: dict | None = None  # remove_stripes' further arguments (--stripe-snr, ...)

    @property
    def preprocess(self) -> dict:
        extra = {} if self.stripe_options is None else {"stripe_options": self.stripe_options}
        return dict(
            flats=self.flats,
            darks=self.darks,
            log_transform=self.log_transform,
            stripes=self.stripes,
            stripe_size=self.stripe_size,
            **extra,
        )


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
    except OSError:  # not HDF5 after all: the array reader gives the error
        return False


def load_scan(args, check: bool = True) -> ScanInput:
    """The projections (lazy), angles and flats/darks the flags name; ``check``:
    the data against a circular parallel-beam geometry (:func:`check_scan`)."""
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
        _say(
            args,
            f"scan {args.input} ({scan.metadata['layout']}): {scan.projections.shape} "
            f"{scan.projections.dtype}, {len(scan.flats)} flat(s), {len(scan.darks)} dark(s)",
        )
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
        raise ValueError(
            f"input: expected a sinogram (n_angles, n_cols) or projections "
            f"(n_angles, n_rows, n_cols), got shape {shape}"
        )
    if angles.size != shape[0]:
        raise ValueError(f"--angles: expected {shape[0]} angles (one per projection in input), got {angles.size}")
    if flats is not None:
        flats, darks = _checked_fields(flats, darks, shape)
        if args.minus_log:
            where = "--flat/--dark" if args.flat is not None else f"the flats and darks in {args.input!r}"
            raise ValueError(
                f"--minus-log: the flat/dark normalisation ({where}) takes -log already; "
                "give --minus-log only for transmissions without flats and darks"
            )
    _check_plausible(args, angles)
    from .preprocessing import stripe_options

    stripe_size, options = stripe_options(args, shape[0], shape[-1])
    scan = ScanInput(
        projections, angles, flats, darks, bool(args.minus_log), str(args.input), args.stripes, stripe_size, options
    )
    if check:
        check_scan(args, scan)
    return scan


def _checked_fields(flats, darks, shape):
    """Flats and darks checked against the whole detector (shape, finite, not swapped) before any
    work, so that their errors name the projections' shape, not that of the rows a step reads."""
    from ..preprocess import check_flats_darks, sinogram_fields

    if len(shape) == 2:  # one sinogram: the flats and darks of its detector row
        flats, darks = sinogram_fields("--flat", flats, shape[-1]), sinogram_fields("--dark", darks, shape[-1])
        check_flats_darks(flats, darks, (1, shape[-1]))
        return flats, darks
    return check_flats_darks(flats, darks, shape[1:])


def check_scan(args, scan: ScanInput) -> None:
    """Check the scan's data against its geometry (:func:`leveret.preprocess.check_consistency`
    on a few middle rows) before any work: each finding one warning naming the flag at fault and
    the flag that fixes it; with --strict the first one is an error. The `center` command and
    --center auto leave the centre unchecked (it is to be estimated)."""
    from ..preprocess import check_consistency
    from ..preprocess.consistency import CHECKS

    given = args.command != "center" and args.center not in ("auto",)
    g = _geometry(args, scan, args.center if given else None)
    checks = CHECKS if given else tuple(c for c in CHECKS if c != "center")
    if getattr(args, "half_acquisition", None) is not None:
        # the axis near an edge: the views' sums and mirror images differ by design
        checks = ("values",)
    findings = check_consistency(
        scan.projections, g, flats=scan.flats, darks=scan.darks, log_transform=scan.log_transform, checks=checks
    )
    for finding in findings:
        _warn(args, finding.cli_message())


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
    from ..io.bands import read_rows

    raw = read_rows(scan.projections, (r0, r1))
    return preprocess_rows(raw, (r0, r1), **scan.preprocess)


def _sinogram_data(scan: ScanInput) -> np.ndarray:
    """A 2D input (n_angles, n_cols) as float32 line integrals (its flats and darks are stacks
    (k, 1, n_cols), as load_scan checked them)."""
    from ..execution.slab import preprocess_rows

    data = np.asarray(scan.projections)[:, None, :]
    return preprocess_rows(data, (0, 1), **scan.preprocess)[:, 0]


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
        _warn(
            args,
            f"centre: the estimate {est.center:.2f} px sits on the edge of the search range "
            f"(the middle half of the detector); the axis may lie outside it, so the confidence "
            f"is lowered; check with 'leveret center --sweep'",
        )
    if cross_check:
        other = _other_method(data, scan.angles, est)
        if other is not None:
            difference = abs(other.center - est.center)
            est.details["check"] = {"method": other.method, "center": other.center, "difference": difference}
            if difference > 1.0:
                est = est._replace(confidence=est.confidence / difference)
                _warn(
                    args,
                    f"centre: the methods disagree by {difference:.2f} px ({est.method} "
                    f"{est.center:.2f}, {other.method} {other.center:.2f}); confidence lowered "
                    f"to {est.confidence:.2f}",
                )
    _say(
        args,
        f"centre of rotation: {est.center:.2f} px (confidence {est.confidence:.2f}, "
        f"method {est.method}, spread {est.details.get('spread', 0.0):.2f} px)",
    )
    return est, data


CHECK_PIXELS = 3.0  # the sweep that checks a pairs estimate tries centres within +-this of it


def _other_method(data: np.ndarray, angles: np.ndarray, est):
    """The centre by the method ``est`` did not use, or None where that one cannot run."""
    from ..preprocess import CenterEstimate, center_sweep, find_center

    if est.method == "sweep":
        try:
            return find_center(data, angles, method="pairs")
        except ValueError:  # no 180-degree pair among the angles
            return None
    sino = data[:, data.shape[1] // 2, :] if data.ndim == 3 else data
    n_cols = sino.shape[1]
    # 0.5 px steps resolve the 1 px disagreement that matters, with 13 trial slices
    centers = np.arange(est.center - CHECK_PIXELS, est.center + CHECK_PIXELS + 0.25, 0.5)
    centers = centers[(centers >= 0) & (centers <= n_cols - 1)]
    if centers.size < 3:
        return None
    scores = center_sweep(sino, angles, centers)
    return CenterEstimate(
        center=float(centers[int(np.argmin(scores))]), confidence=float("nan"), method="sweep", details={}
    )


def _geometry(args, scan: ScanInput, center):
    import leveret

    shape = scan.shape
    return leveret.ParallelGeometry(
        scan.angles,
        shape[-1],
        n_rows=shape[1] if len(shape) == 3 else None,
        det_spacing=args.det_spacing,
        row_spacing=args.row_spacing,
        center=center,
    )


def _devices(args) -> dict:
    """``devices=`` for the reconstruction from --gpus."""
    if args.gpus is None:
        return {}
    if args.scheduler is not None:
        raise ValueError("--gpus: give it without --scheduler; each Dask worker uses its own GPU")
    return {"devices": args.gpus}
