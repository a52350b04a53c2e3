"""``leveret recon`` for scans whose rotation is not a plain circle about the sample:
helical cone beam (``--helical-pitch``) and laminography (``--tilt``), parallel or cone beam.

The geometry comes from the circular flags (``--sid``/``--sdd``/``--pixel-size``/
``--angles`` for cone beam, ``--angles``/``--det-spacing``/``--row-spacing``/
``--center`` for parallel beam) and one of these; the run is the cone-beam
command's (``recon._recon_cone``): the same plan, pipeline, lock, atomic
output, resume and interrupt handling.

Heights: the helix's source is at z = 0 at its middle angle
(``ConeGeometry.helical``'s ``z_center``), so a helical scan covers a z
range about 0; the volume's centre sits at ``--z-center`` (default 0) and,
without ``--volume-shape``, a helical volume takes as many slices as the
helix covers there.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field

import numpy as np


def add_options(p) -> None:
    """The flags of this module, as one argument group of ``recon``."""
    t = p.add_argument_group("helical cone beam and laminography")
    t.add_argument(
        "--helical-pitch",
        type=float,
        default=None,
        metavar="DIST",
        help="helical cone beam (with --beam cone and --sid/--sdd/--pixel-size/--angles over several "
        "turns): the source's rise per turn, in the unit of --sid; its sign is the helix's "
        "handedness (positive: z grows with the angle)",
    )
    t.add_argument(
        "--tilt",
        type=float,
        default=None,
        metavar="DEG",
        help="laminography: the rotation axis tilted by DEG degrees towards the beam (0 <= DEG < 90; "
        "the beam crosses the sample's plane at DEG); parallel beam, or cone beam with --sid; "
        "the angles must cover a full turn",
    )
    t.add_argument(
        "--z-center",
        type=float,
        default=None,
        metavar="DIST",
        help="with --helical-pitch or --tilt: the height of the volume's centre (default 0: the "
        "helix's middle, or where the beam's central ray meets the rotation axis)",
    )


def is_trajectory(args) -> bool:
    """Whether the flags ask for a helical or laminography reconstruction."""
    if getattr(args, "helical_pitch", None) is None and getattr(args, "tilt", None) is None:
        if getattr(args, "z_center", None) is not None:
            raise ValueError(
                "--z-center: places the volume of a helical (--helical-pitch) or laminography "
                "(--tilt) scan; give one of those"
            )
        return False
    return True


@dataclass
class TrajectoryScan:
    """What ``recon._recon_cone`` needs (as ``cone.ConeScan``), and what this geometry adds."""

    projections: object
    geometry: object  # ConeGeometry (helix, tilted) or ParallelVecGeometry
    volume: object  # VolumeGeometry
    flats: np.ndarray | None
    darks: np.ndarray | None
    log_transform: bool
    source: str
    stripes: str | None = None
    stripe_size: int = 5
    options: dict = field(default_factory=dict)  # for reconstruct_slab (method=...)
    metadata: dict = field(default_factory=dict)  # recorded in the output (pitch, tilt)
    kind: str = ""  # "helical cone beam", ...
    notes: list = field(default_factory=list)  # --dry-run's lines about the geometry

    @classmethod
    def from_scan(cls, scan, geometry, volume, **fields) -> "TrajectoryScan":
        """``scan``'s projections, flats, darks and source with this ``geometry`` and ``volume``."""
        return cls(
            scan.projections, geometry, volume, scan.flats, scan.darks, scan.log_transform, scan.source, **fields
        )

    @property
    def preprocess(self) -> dict:
        return {
            "flats": self.flats,
            "darks": self.darks,
            "log_transform": self.log_transform,
            "stripes": self.stripes,
            "stripe_size": self.stripe_size,
        }


def load_trajectory(args) -> TrajectoryScan:
    """The scan, geometry and volume of a helical or laminography recon's flags."""
    from .scan import _say

    scan = _load(args)
    n_views, n_rows, n_cols = scan.geometry.projection_shape
    _say(
        args,
        f"{scan.kind}: {n_views} view(s) of {n_rows} x {n_cols}; volume {scan.volume.shape} of "
        f"{', '.join(f'{d:.4g}' for d in scan.volume.voxel_size)}, centred at z {scan.volume.center[0]:.4g}",
    )
    return scan


def _load(args) -> TrajectoryScan:
    from .cone import is_cone

    if args.helical_pitch is not None and args.tilt is not None:
        raise ValueError("--helical-pitch: a helical scan has no tilted axis; give --helical-pitch or --tilt, not both")
    if args.helical_pitch is not None:
        if not is_cone(args):
            raise ValueError(
                "--helical-pitch: a helical scan is cone beam; give --beam cone with --sid/--sdd/--pixel-size/--angles"
            )
        return _helical(args)
    tilt = _tilt(args.tilt)
    return _cone_laminography(args, tilt) if is_cone(args) else _parallel_laminography(args, tilt)


def _tilt(degrees: float) -> float:
    """--tilt in radians, in the library's range [0, 90) degrees."""
    if not (math.isfinite(degrees) and 0.0 <= degrees < 90.0):
        raise ValueError(
            f"--tilt: expected degrees in [0, 90) (90 would look along the rotation axis), got {degrees:g}"
        )
    return math.radians(degrees)


def _cone(args):
    """The cone-beam scan of the circular flags (``cone.load_cone``): input,
    preprocessing and the circular parameters, checked there."""
    from .cone import load_cone

    for flag, value in (("--matrices", args.matrices), ("--xtekct", args.xtekct)):
        if value is not None:
            what = "--helical-pitch" if args.helical_pitch is not None else "--tilt"
            raise ValueError(
                f"{what}: builds the geometry from --sid/--sdd/--pixel-size/--angles, not {flag} "
                f"(its matrices already hold the trajectory)"
            )
    # quiet: its line would describe the circular scan's volume; load_trajectory says its own
    return load_cone(argparse.Namespace(**{**vars(args), "quiet": True}))


def _circular_parameters(args, geometry) -> dict:
    du, dv = args.pixel_size if isinstance(args.pixel_size, tuple) else (args.pixel_size,) * 2
    return {
        "sid": args.sid,
        "sdd": args.sdd,
        "n_rows": geometry.n_rows,
        "n_cols": geometry.n_cols,
        "pixel_size": du,
        "row_pixel_size": dv,
        "det_offset": (args.det_offset_u, args.det_offset_v),
    }


def _helical(args) -> TrajectoryScan:
    import leveret

    from ..algorithms.helical import covered_z

    pitch = float(args.helical_pitch)
    if not math.isfinite(pitch) or pitch == 0:
        raise ValueError(
            f"--helical-pitch: expected a non-zero length per turn (its sign the handedness), "
            f"got {args.helical_pitch:g}"
        )
    if args.scheduler is not None:
        raise ValueError(
            "--scheduler: a helical scan runs in this process's pipeline (each slab reads only the "
            "views that see it); leave --scheduler out"
        )
    if args.precision != "float32":
        raise ValueError(f"--precision: a helical scan is reconstructed slab by slab in float32, got {args.precision}")
    scan = _cone(args)
    angles = np.asarray(scan.geometry.angles, np.float64)
    span = float(np.ptp(angles)) if angles.size > 1 else 0.0
    if span <= 2 * np.pi:
        raise ValueError(
            f"--angles: a helical scan turns more than once (over 360 degrees); the angles span "
            f"{np.degrees(span):.4g} degrees"
        )
    g = leveret.ConeGeometry.helical(angles, pitch, **_circular_parameters(args, scan.geometry))
    z = 0.0 if args.z_center is None else float(args.z_center)
    shape = args.volume_shape or scan.volume.shape
    dz = scan.volume.voxel_size[0]
    try:  # the z range covered for the volume's xy extent
        lo, hi = covered_z(g, leveret.VolumeGeometry((1,) + tuple(shape[1:]), scan.volume.voxel_size))
    except ValueError as exc:
        head, _, rest = str(exc).partition(": ")
        if head != "geometry":
            raise
        raise ValueError(f"--helical-pitch: {rest}") from None
    if args.volume_shape is None:  # as many slices as the helix covers about --z-center
        nz = math.floor(2 * min(z - lo, hi - z) / dz + 1e-9) if lo < z < hi else 0
        if nz < 1:
            raise ValueError(f"--z-center: {z:g} is not inside the z range {lo:.6g}..{hi:.6g} the helix covers")
        shape = (nz,) + tuple(shape[1:])
    volume = leveret.VolumeGeometry(shape, scan.volume.voxel_size, (z, 0.0, 0.0))
    _check_covered(g, volume)
    window = _window(g)
    z0, z1 = volume.extent("z")
    notes = [
        repr(g),
        (
            f"helical: z {lo:.4g}..{hi:.4g} covered (volume z {z0:.4g}..{z1:.4g}); {window.n_pi}-PI "
            f"window, edges {window.smoothing:.3g}; largest pitch without gaps {window.max_pitch:.4g}"
        ),
    ]
    return TrajectoryScan.from_scan(
        scan,
        g,
        volume,
        metadata={"beam": "cone", "helical_pitch": pitch},
        kind="helical cone beam",
        notes=notes,
    )


def _check_covered(geometry, volume) -> None:
    """ValueError naming the volume's flags unless the helix covers ``volume``."""
    from ..algorithms.helical import covered_z

    lo, hi = covered_z(geometry, volume)
    z0, z1 = volume.extent("z")
    flags = "--volume-shape/--voxel-size/--z-center"
    if z0 < lo - 1e-9 * max(1.0, abs(lo)) or z1 > hi + 1e-9 * max(1.0, abs(hi)):
        raise ValueError(
            f"{flags}: the volume's z range {z0:.6g}..{z1:.6g} is not inside the range "
            f"{lo:.6g}..{hi:.6g} the helix covers for its width; fewer slices, a smaller "
            f"--voxel-size or another --z-center"
            if hi > lo
            else f"{flags}: the helix covers no slice of a volume this wide (each voxel needs the "
            f"views within its reach); scan a longer helix or choose a narrower volume"
        )
    from ..algorithms.helical import check_coverage

    try:
        check_coverage(_window(geometry), volume)  # and inside the source circle
    except ValueError as exc:
        head, _, rest = str(exc).partition(": ")
        if head != "volume":
            raise
        raise ValueError(f"--volume-shape/--voxel-size: {rest}") from None


def _window(geometry):
    """The helical window the slabs are reconstructed with (fdk_slab's "auto" one)."""
    from ..algorithms.helical import HelicalWindow
    from ..geometry.helix import fit_helix

    return HelicalWindow(geometry, fit_helix(geometry))


def _full_turn(geometry) -> None:
    from ..algorithms.laminography import angle_weights

    try:
        angle_weights(geometry)
    except ValueError as exc:
        head, _, rest = str(exc).partition(": ")
        if head != "geometry":
            raise
        raise ValueError(f"--angles: {rest}") from None


def _placed(volume, z_center):
    import leveret

    z = 0.0 if z_center is None else float(z_center)
    return leveret.VolumeGeometry(volume.shape, volume.voxel_size, (z,) + tuple(volume.center[1:]))


def _cone_laminography(args, tilt: float) -> TrajectoryScan:
    import leveret

    scan = _cone(args)
    g = leveret.ConeGeometry.laminography(
        np.asarray(scan.geometry.angles, np.float64), tilt, **_circular_parameters(args, scan.geometry)
    )
    _full_turn(g)
    volume = _placed(scan.volume, args.z_center)
    return TrajectoryScan.from_scan(
        scan,
        g,
        volume,
        options={"method": "laminography"},
        metadata={"beam": "cone", "tilt": float(args.tilt)},
        kind=f"cone-beam laminography, tilt {float(args.tilt):g} degrees",
        notes=[repr(g)],
    )


def _parallel_laminography(args, tilt: float) -> TrajectoryScan:
    import leveret

    from .scan import load_scan

    if args.center == "auto":
        raise ValueError(
            "--center: 'auto' estimates the axis from 180-degree pairs, which a tilted axis "
            "does not give; give the column the rotation axis projects to"
        )
    for flag, value in (("--angle-lines", args.angle_lines), ("--gpus", args.gpus), ("--stripes", args.stripes)):
        if value is not None:
            raise ValueError(f"{flag}: not available for laminography scans yet")
    scan = load_scan(args, check=False)  # its checks assume an untilted axis
    if len(scan.shape) != 3:
        raise ValueError(f"input: laminography needs projections (n_angles, n_rows, n_cols), got shape {scan.shape}")
    _, n_rows, n_cols = scan.shape
    du = args.det_spacing
    dv = du if args.row_spacing is None else args.row_spacing
    g = leveret.ParallelVecGeometry.laminography(
        scan.angles, tilt, n_rows, n_cols, du, row_pixel_size=dv, center=args.center
    )
    _full_turn(g)
    shape = args.volume_shape or (n_rows, n_cols, n_cols)
    voxel = args.voxel_size if args.voxel_size is not None else du
    volume = leveret.VolumeGeometry(shape, voxel, (0.0 if args.z_center is None else float(args.z_center), 0, 0))
    return TrajectoryScan.from_scan(
        scan,
        g,
        volume,
        metadata={"beam": "parallel", "tilt": float(args.tilt)},
        kind=f"parallel-beam laminography, tilt {float(args.tilt):g} degrees",
        notes=[repr(g)],
    )
