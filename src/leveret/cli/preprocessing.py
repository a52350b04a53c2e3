"""``leveret recon``'s phase retrieval, ring removal and half-acquisition flags:
their argument group, their checks (one-line errors naming the flag, before any
work) and what they become for :func:`leveret.execution.outofcore.reconstruct_to_file`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

from .flags import _center

#: What ``--stripes`` takes (:func:`leveret.preprocess.remove_stripes`'s methods).
STRIPE_METHODS = ("sort", "mean", "all", "wavelet-fft")
# --stripe-X flags: (remove_stripes' argument, the methods it applies to, its default there)
STRIPE_PARAMETERS = {
    "stripe_snr": ("snr", ("all",), 3.0),
    "stripe_large_size": ("large_size", ("all",), 51),
    "stripe_wavelet": ("wavelet", ("wavelet-fft",), "db5"),
    "stripe_level": ("level", ("wavelet-fft",), None),
    "stripe_sigma": ("sigma", ("wavelet-fft",), 2.0),
}
# --stripe-size's default for each method (remove_stripes' own; 5 for wavelet-fft, which has none)
STRIPE_SIZES = {"sort": 5, "mean": 5, "all": 21, "wavelet-fft": 5}
PHASE_FLAGS = (
    ("energy", "--energy"),
    ("distance", "--distance"),
    ("pixel_size", "--pixel-size"),
    ("delta_beta", "--delta-beta"),
)


def _positive_int_type(text) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def stripe_flags(group) -> None:
    """The parameters of ``--stripes`` beyond ``--stripe-size`` (into the scan
    commands' preprocessing group)."""
    group.add_argument(
        "--stripe-snr",
        type=float,
        default=None,
        metavar="RATIO",
        help="--stripes all: how far (> 1) a column must stand out of its row's spread to count "
        "as a stripe; larger finds fewer (default: 3)",
    )
    group.add_argument(
        "--stripe-large-size",
        type=_positive_int_type,
        default=None,
        metavar="WIDTH",
        help="--stripes all: odd width across columns against which large and dead stripes are "
        "measured and replaced, wider than twice the widest stripe (default: 51)",
    )
    group.add_argument(
        "--stripe-wavelet",
        default=None,
        metavar="NAME",
        help="--stripes wavelet-fft: the wavelet, a PyWavelets name such as db5, db9, sym8 (default: db5)",
    )
    group.add_argument(
        "--stripe-level",
        type=_positive_int_type,
        default=None,
        metavar="LEVELS",
        help="--stripes wavelet-fft: decomposition levels (default: as many as the sinogram allows, at most 6)",
    )
    group.add_argument(
        "--stripe-sigma",
        type=float,
        default=None,
        metavar="WIDTH",
        help="--stripes wavelet-fft: width of the Gaussian damping along the angles, in frequency indices (default: 2)",
    )


def phase_flags(parser: argparse.ArgumentParser) -> None:
    """``leveret recon``'s group: single-distance phase retrieval and 360-degree
    half-acquisition scans (parallel beam)."""
    g = parser.add_argument_group(
        "phase retrieval and 360-degree scans (parallel beam)",
        "--phase filters each projection's transmission (after --flat/--dark, or of a --minus-log input) "
        "in place of -log (Paganin et al. 2002; 'generalized': Paganin et al. 2020); it needs --energy, "
        "--distance, --pixel-size (the detector pixel pitch, here in metres) and --delta-beta. Each slab "
        "reads the rows around it the filter reaches. --half-acquisition stitches each view of a "
        "360-degree scan with the mirrored view 180 degrees later into 180-degree data of nearly twice "
        "the width.",
    )
    g.add_argument(
        "--phase",
        default=None,
        choices=("paganin", "generalized"),
        help="single-distance phase retrieval of each projection",
    )
    g.add_argument("--energy", type=float, default=None, metavar="KEV", help="--phase: photon energy in keV")
    g.add_argument(
        "--distance", type=float, default=None, metavar="M", help="--phase: sample to detector distance in metres"
    )
    g.add_argument(
        "--delta-beta",
        type=float,
        default=None,
        metavar="RATIO",
        help="--phase: delta/beta of the sample's material (hundreds for soft tissue, tens for bone or metal)",
    )
    g.add_argument(
        "--half-acquisition",
        type=_center,
        default=None,
        metavar="auto|COLUMN",
        help="a 360-degree scan with the rotation axis at this detector column near one edge "
        "('auto': found from a few middle rows); replaces --center",
    )


@dataclass
class Steps:
    """The preprocessing the flags ask for beyond flat/dark, -log and the stripe method."""

    phase: dict | None = None
    half_acquisition: float | None = None
    border: int = 0  # rows of context each side of a slab's own (phase retrieval)
    stitched: object = None  # the stitched data's ParallelGeometry (half acquisition)

    def run(self) -> dict:
        """Keywords for reconstruct_to_file."""
        return {k: v for k, v in (("phase", self.phase), ("half_acquisition", self.half_acquisition)) if v is not None}

    def plan(self) -> dict:
        """Keywords for leveret.execution.outofcore.plan."""
        return {"border": self.border, "stitched": self.stitched}


def stripe_options(args, n_angles: int, n_cols: int) -> tuple[int, dict | None]:
    """(``stripe_size``, ``stripe_options``) for ``remove_stripes`` from the flags,
    checked on a sinogram of the scan's size (a wrong value fails now, naming its flag)."""
    method = getattr(args, "stripes", None)
    given = {dest: getattr(args, dest, None) for dest in STRIPE_PARAMETERS}
    for dest, value in given.items():
        methods = STRIPE_PARAMETERS[dest][1]
        if value is not None and method not in methods:
            flag = "--" + dest.replace("_", "-")
            raise ValueError(
                f"{flag}: a parameter of --stripes {' or '.join(methods)}, "
                + ("but no --stripes was given" if method is None else f"not of --stripes {method}")
            )
    size = args.stripe_size if getattr(args, "stripe_size", None) is not None else STRIPE_SIZES.get(method, 5)
    if method is None:
        return size, None
    options = {
        STRIPE_PARAMETERS[d][0]: (v if v is not None else STRIPE_PARAMETERS[d][2])
        for d, v in given.items()
        if method in STRIPE_PARAMETERS[d][1]
    } or None
    if method != "wavelet-fft" and (size < 3 or size % 2 == 0):
        raise ValueError(f"--stripe-size: expected an odd width >= 3, got {size}")
    from ..preprocess import remove_stripes

    remove_stripes(np.zeros((n_angles, 1, n_cols), np.float32), method=method, size=size, **(options or {}))
    return size, options


def check_flags(args, scan) -> None:
    """Refuse what the phase and half-acquisition flags cannot do with this scan,
    before any work."""
    phase_values = [flag for dest, flag in PHASE_FLAGS if dest != "pixel_size" and getattr(args, dest) is not None]
    if args.phase is None and phase_values:
        raise ValueError(f"{phase_values[0]}: a parameter of --phase; give --phase paganin (or generalized) too")
    if args.phase is not None:
        missing = [flag for dest, flag in PHASE_FLAGS if getattr(args, dest) is None]
        if missing:
            raise ValueError(
                f"--phase: needs --energy (keV), --distance (m), --pixel-size (m) and --delta-beta; "
                f"missing {', '.join(missing)}"
            )
        if scan.flats is None and not scan.log_transform:
            raise ValueError(
                "--phase: phase retrieval takes transmissions: give --flat and --dark (or a scan "
                "file holding them), or --minus-log for an input of transmissions"
            )
    if len(scan.shape) == 2:
        for flag, value in (("--phase", args.phase), ("--half-acquisition", args.half_acquisition)):
            if value is not None:
                raise ValueError(
                    f"{flag}: takes projections (n_angles, n_rows, n_cols); the input is a single sinogram {scan.shape}"
                )
    if args.half_acquisition is not None and args.center is not None:
        raise ValueError("--center: with --half-acquisition the rotation axis is the column it gives; give one of them")


def phase_parameters(args) -> dict | None:
    """retrieve_phase's arguments from the flags (checked: a value out of range names its flag)."""
    if args.phase is None:
        return None
    pixel = args.pixel_size
    if isinstance(pixel, tuple):
        if pixel[0] != pixel[1]:
            raise ValueError(
                f"--pixel-size: phase retrieval takes square pixels, one pitch in metres; got {pixel[0]:g},{pixel[1]:g}"
            )
        pixel = pixel[0]
    from ..execution.slab import check_phase

    return check_phase(
        {
            "energy": args.energy,
            "distance": args.distance,
            "pixel_size": pixel,
            "delta_beta": args.delta_beta,
            "method": args.phase,
        }
    )


def steps(args, scan, geometry, *, say, middle_rows) -> Steps:
    """The checked preprocessing steps for ``scan`` (its ``geometry``, centre
    not applied); ``--half-acquisition auto`` finds the axis here in the line
    integrals ``middle_rows()`` returns (``say`` reports it)."""
    from ..execution.slab import border_rows, stitched_geometry

    check_flags(args, scan)
    phase = phase_parameters(args)
    column = args.half_acquisition
    if column == "auto":
        column = find_axis_360(scan, geometry, say, middle_rows)
    stitched = None
    if column is not None:
        column = float(column)
        stitched = stitched_geometry(geometry, column)
    return Steps(phase=phase, half_acquisition=column, border=border_rows(phase), stitched=stitched)


def find_axis_360(scan, geometry, say, middle_rows) -> float:
    """The rotation axis of a half-acquisition scan from a few middle rows
    (``middle_rows()``, :func:`leveret.preprocess.find_center_360`)."""
    from ..execution.slab import stitched_geometry
    from ..preprocess import find_center_360

    stitched_geometry(geometry, (geometry.n_cols - 1) / 2)  # a 360-degree scan? (before reading)
    found = find_center_360(middle_rows(), scan.angles)
    say(
        f"half acquisition: rotation axis at column {found.center:.2f} ({found.side} side, overlap "
        f"{found.overlap:.0f} columns, confidence {found.confidence:.2f})"
    )
    return found.center


def describe(scan, s: Steps) -> list[str]:
    """What --dry-run prints about the preprocessing."""
    lines = []
    if scan.flats is not None:
        lines.append("flat/dark normalisation")
    if s.phase is not None:
        p = s.phase
        lines.append(
            f"phase retrieval ({p.get('method', 'paganin')}): {p['energy']:g} keV, {p['distance']:g} m, "
            f"pixel {p['pixel_size']:g} m, delta/beta {p['delta_beta']:g}; {s.border} row(s) of "
            "context read each side of every slab"
        )
    elif scan.flats is not None or scan.log_transform:
        lines.append("-log")
    if scan.stripes is not None:
        extra = "".join(f", {k} {v}" for k, v in (scan.stripe_options or {}).items() if v is not None)
        size = f", size {scan.stripe_size}" if scan.stripes != "wavelet-fft" else ""
        lines.append(f"stripes {scan.stripes}{size}{extra}")
    if s.stitched is not None:
        g = s.stitched
        lines.append(
            f"half acquisition: axis at column {s.half_acquisition:.2f}; stitched to {g.n_angles} "
            f"view(s) of {g.n_cols} column(s), axis at {g.center:.2f}"
        )
    return ["preprocessing: " + ("; ".join(lines) if lines else "none (the input is line integrals)")]
