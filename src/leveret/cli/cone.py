"""``leveret recon`` for cone-beam scans: the geometry and volume from the flags."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .scan import _named, _open_input, _say


def is_cone(args) -> bool:
    """Whether the flags describe a cone-beam scan."""
    if args.beam == "parallel":
        for flag, value in (("--matrices", args.matrices), ("--xtekct", args.xtekct), ("--sid", args.sid)):
            if value is not None:
                raise ValueError(f"{flag}: describes a cone-beam scan, but --beam parallel was given")
        return False
    return args.beam == "cone" or any(v is not None for v in (args.matrices, args.xtekct, args.sid))


@dataclass
class ConeScan:
    projections: object  # lazy (n_views, n_rows, n_cols)
    geometry: object  # ConeGeometry
    volume: object  # VolumeGeometry
    flats: np.ndarray | None
    darks: np.ndarray | None
    log_transform: bool
    source: str

    @property
    def preprocess(self) -> dict:
        return dict(flats=self.flats, darks=self.darks, log_transform=self.log_transform)


def load_cone(args) -> ConeScan:
    """The projections, geometry, volume and preprocessing a cone-beam recon's flags name."""
    import leveret
    from ..io import read_array
    from ..io.lazy import TiffStack
    from ..io.scanners import read_matrices, read_xtekct

    sources = [
        flag
        for flag, v in (("--matrices", args.matrices), ("--xtekct", args.xtekct), ("--sid", args.sid))
        if v is not None
    ]
    if len(sources) != 1:
        raise ValueError(
            "--beam: a cone-beam scan takes its geometry from one of --matrices, --xtekct or "
            "--sid/--sdd/--pixel-size/--angles" + (f"; got {', '.join(sources)}" if sources else "")
        )
    if args.center is not None:
        raise ValueError(
            "--center: parallel beam only; a cone-beam scan's rotation axis is in its geometry "
            "(--det-offset-u, the matrices or the xtekct file)"
        )
    for flag, value in (
        ("--stripes", args.stripes),
        ("--angle-lines", args.angle_lines),
        ("--gpus", args.gpus),
        ("--phase", args.phase),
        ("--half-acquisition", args.half_acquisition),
    ):
        if value is not None:
            raise ValueError(f"{flag}: not available for cone-beam scans yet")
    xtek = read_xtekct(args.xtekct) if args.xtekct else None
    if args.input is not None:
        projections, source = _open_input(args), str(args.input)
    elif xtek is not None and xtek.projections:
        projections = TiffStack(xtek.projections, str(xtek.projections[0].parent))
        source = str(xtek.projections[0].parent)
    else:
        raise ValueError(
            "input: give the projections (as the first argument"
            + (", or TIFFs beside the xtekct file named by its InputFolderName and Name)" if xtek is not None else ")")
        )
    shape = tuple(projections.shape)
    if len(shape) != 3:
        raise ValueError(f"input: expected projections (n_views, n_rows, n_cols), got shape {shape}")
    n_views, n_rows, n_cols = shape
    if xtek is not None:
        geometry, volume = xtek.geometry, xtek.volume
    elif args.matrices:
        matrices = read_matrices(args.matrices)
        geometry = leveret.ConeGeometry(matrices, n_rows, n_cols)
        volume = None
    else:
        geometry, volume = _circular(args, shape), None
    if geometry.projection_shape != shape:
        raise ValueError(
            f"input: {shape[0]} projection(s) of {n_rows} x {n_cols}, but the geometry has "
            f"{geometry.n_views} view(s) of {geometry.n_rows} x {geometry.n_cols}"
        )
    volume = _volume(args, geometry, volume)
    flats = darks = None
    if args.flat is not None or args.dark is not None:
        if args.flat is None or args.dark is None:
            raise ValueError("--flat/--dark: give both, or neither")
        flats, darks = _named("--flat", read_array, args.flat), _named("--dark", read_array, args.dark)
    elif xtek is not None and not args.minus_log:
        if xtek.white_level <= 0:
            raise ValueError(
                f"--xtekct: {args.xtekct!r} gives no WhiteLevel; give --flat and --dark, or "
                "--minus-log for transmissions"
            )
        flats = np.full((1, n_rows, n_cols), xtek.white_level, np.float32)  # transmission = counts / white
        darks = np.zeros((1, n_rows, n_cols), np.float32)
    _say(
        args,
        f"cone beam: {n_views} view(s) of {n_rows} x {n_cols}; volume {volume.shape} of "
        f"{', '.join(f'{d:.4g}' for d in volume.voxel_size)}",
    )
    return ConeScan(projections, geometry, volume, flats, darks, bool(args.minus_log) and flats is None, source)


def _circular(args, shape):
    import leveret
    from ..io import read_angles

    n_views, n_rows, n_cols = shape
    missing = [
        flag
        for flag, v in (("--sdd", args.sdd), ("--pixel-size", args.pixel_size), ("--angles", args.angles))
        if v is None
    ]
    if missing:
        raise ValueError(f"--sid: a circular cone-beam scan also needs {', '.join(missing)}")
    angles = read_angles(args.angles, unit=args.angle_unit)
    if angles.size != n_views:
        raise ValueError(f"--angles: expected {n_views} angles (one per projection in input), got {angles.size}")
    du, dv = args.pixel_size if isinstance(args.pixel_size, tuple) else (args.pixel_size,) * 2
    return leveret.ConeGeometry.circular(
        angles,
        args.sid,
        args.sdd,
        n_rows,
        n_cols,
        du,
        row_pixel_size=dv,
        det_offset=(args.det_offset_u, args.det_offset_v),
    )


def _volume(args, geometry, volume):
    """The volume the flags ask for: --volume-shape and --voxel-size over what
    the geometry suggests (the detector's field at the rotation axis)."""
    import leveret

    if volume is None:
        dz, dxy = isocentre_pitch(geometry.matrices[0])
        volume = leveret.VolumeGeometry((geometry.n_rows, geometry.n_cols, geometry.n_cols), (dz, dxy, dxy))
    shape = args.volume_shape or volume.shape
    voxel = (args.voxel_size,) * 3 if args.voxel_size is not None else volume.voxel_size
    return leveret.VolumeGeometry(shape, voxel)


def isocentre_pitch(matrix) -> tuple[float, float]:
    """(row, column) pitch of the detector at the world origin (the rotation
    axis) under the 3x4 ``matrix``: 1 / (pixels per length unit) along z and
    in the xy plane."""
    m = np.asarray(matrix, np.float64).reshape(3, 4)
    w0 = m[2, 3]
    u0, v0 = m[0, 3] / w0, m[1, 3] / w0
    du = (m[0, :3] - u0 * m[2, :3]) / w0  # pixels per length unit along x, y, z
    dv = (m[1, :3] - v0 * m[2, :3]) / w0
    return 1.0 / abs(dv[2]), 1.0 / float(np.hypot(du[0], du[1]))
