"""Cone-beam scan geometries from files: projection matrices, and Nikon XTek CT parameter files.

:func:`read_matrices` reads one 3x4 projection matrix per view; :func:`read_xtekct`
reads a Nikon ``.xtekct`` file into an :class:`XtekScan`: the
:class:`leveret.ConeGeometry` of the scan, the volume the file asks for, the
white level the projections are normalised by, and where the projections lie.
"""

from __future__ import annotations

import configparser
import math
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ._common import natural_key, suffix, tiff_files


def read_matrices(path) -> np.ndarray:
    """Projection matrices ``(n, 3, 4)`` from a file.

    A text file (``.txt``, ``.csv``, ``.dat`` or no extension) holds one view
    per line, 12 numbers **row by row**: ``P[0,0] P[0,1] P[0,2] P[0,3] P[1,0] ...
    P[2,3]`` (blank- or comma-separated, ``#`` comments). This is not
    RabbitCT's order, which stores each matrix column by column
    (:func:`leveret.geometry.matrix_from_rabbitct` converts those). A
    ``.npy``, TIFF or HDF5 array holds ``(n, 3, 4)`` or ``(n, 12)`` (row by
    row). Each matrix maps ``(x, y, z, 1)`` to ``(u w, v w, w)`` with u the
    detector column and v the row, in pixels (docs/conventions.md).

    Raises
    ------
    ValueError
        Naming ``matrices``: a missing or unreadable file, or anything but
        finite numbers in multiples of 12.
    """
    from .readers import read_array

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"matrices: {str(path)!r} does not exist or is not a file")
    if suffix(p) in (".txt", ".csv", ".dat", ""):
        try:
            m = np.loadtxt(p, delimiter="," if suffix(p) == ".csv" else None, ndmin=2, comments="#")
        except ValueError as exc:
            raise ValueError(f"matrices: {str(path)!r} is not a text file of numbers: {exc}") from None
    else:
        try:
            m = np.asarray(read_array(p), np.float64)
        except ValueError as exc:
            raise ValueError(f"matrices: {exc}") from None
    if m.size == 0 or m.size % 12 or m.shape[-1] not in (4, 12) or not np.all(np.isfinite(m)):
        raise ValueError(
            f"matrices: expected finite 3x4 matrices, (n, 3, 4) or 12 numbers per line (row by "
            f"row), got shape {m.shape} from {str(path)!r}"
        )
    return np.ascontiguousarray(m.reshape(-1, 3, 4))


class XtekScan(NamedTuple):
    """What a Nikon ``.xtekct`` file says about a scan.

    Attributes
    ----------
    geometry : ConeGeometry
        One matrix per projection, for the projections as the TIFFs store
        them (row 0 at the top of the detector).
    volume : VolumeGeometry
        ``VoxelsZ x VoxelsY x VoxelsX`` voxels of ``VoxelSize{Z,Y,X}``, centred
        on the rotation axis.
    white_level : float
        The detector's value without object (``WhiteLevel``): transmission is
        counts / white_level.
    projections : list of pathlib.Path
        The projection TIFFs, in order (``InputFolderName`` beside the file,
        those named ``<Name>_*`` if there are such, else all of them); empty
        when none are found.
    parameters : dict
        Every key = value of the file's ``[XTekCT]`` section, as text.
    """

    geometry: object
    volume: object
    white_level: float
    projections: list
    parameters: dict


#: The keys :func:`read_xtekct` needs; the others it reads have defaults of 0.
XTEK_REQUIRED = (
    "SrcToObject",
    "SrcToDetector",
    "DetectorPixelsX",
    "DetectorPixelsY",
    "DetectorPixelSizeX",
    "DetectorPixelSizeY",
    "Projections",
    "AngularStep",
)


def read_xtekct(path) -> XtekScan:
    """Read a Nikon XTek CT parameter file (``.xtekct``: an INI file whose
    ``[XTekCT]`` section holds ``key=value`` lines).

    Keys used (lengths in mm, angles in degrees):

    - ``SrcToObject``, ``SrcToDetector``: source to rotation axis and to detector;
    - ``DetectorPixelsX``/``Y``, ``DetectorPixelSizeX``/``Y``: the detector;
    - ``DetectorOffsetX``/``Y``: the detector's shift, along its columns and up;
    - ``Projections``, ``InitialAngle``, ``AngularStep``: view ``i`` at
      ``InitialAngle + i * AngularStep``; the sample turns clockwise seen from
      above as the angle grows;
    - ``ObjectOffsetX`` (the rotation axis' shift at the object), or in older
      files ``CentreOfRotationTop``/``Bottom`` (the same at the detector; their
      mean, demagnified, is used);
    - ``WhiteLevel``; ``VoxelsX``/``Y``/``Z``, ``VoxelSizeX``/``Y``/``Z`` (the
      volume); ``Name`` and ``InputFolderName`` (where the projections are).

    The orientation follows CIL's Nikon reader (Jørgensen et al. 2021): the
    TIFFs' first pixel is the detector's top right seen from the source, and
    angle 0 of this geometry is ``InitialAngle - 180`` degrees of the stage,
    so the volume comes out as CIL reconstructs it. A tilted rotation axis
    (``ObjectTilt``, ``ObjectRoll``, or ``CentreOfRotationTop`` differing from
    ``...Bottom``) is refused. ``.ang`` and ``_ctdata.txt`` angle files are not
    read.

    Raises
    ------
    ValueError
        Naming ``xtekct``: a missing or unparsable file, a missing or
        non-numeric key, a tilted axis.
    """
    from ..geometry import ConeGeometry, VolumeGeometry

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"xtekct: {str(path)!r} does not exist or is not a file")
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # keys keep their case
    try:
        text = p.read_text(errors="replace")
        if not text.lstrip().startswith("["):
            text = "[XTekCT]\n" + text
        parser.read_string(text)
    except (OSError, configparser.Error) as exc:
        raise ValueError(f"xtekct: cannot read {str(path)!r} as a Nikon XTek CT file: {exc}") from None
    section = next((s for s in parser.sections() if s.lower() == "xtekct"), None)
    if section is None:
        raise ValueError(f"xtekct: {str(path)!r} has no [XTekCT] section")
    params = dict(parser[section])
    missing = [k for k in XTEK_REQUIRED if k not in params]
    if missing:
        raise ValueError(f"xtekct: {str(path)!r} lacks {', '.join(missing)}")

    def number(key, default=None, *, positive=False, integer=False):
        if key not in params:
            return default
        try:
            value = float(params[key].strip())
        except ValueError:
            raise ValueError(f"xtekct: {key} is {params[key]!r} in {str(path)!r}, not a number") from None
        if not math.isfinite(value) or (positive and value <= 0) or (integer and value != int(value)):
            kind = "a positive integer" if integer else ("a positive number" if positive else "a finite number")
            raise ValueError(f"xtekct: {key} is {params[key]!r} in {str(path)!r}; expected {kind}")
        return int(value) if integer else value

    sod, sdd = number("SrcToObject", positive=True), number("SrcToDetector", positive=True)
    n_cols, n_rows = (
        number("DetectorPixelsX", positive=True, integer=True),
        number("DetectorPixelsY", positive=True, integer=True),
    )
    du, dv = number("DetectorPixelSizeX", positive=True), number("DetectorPixelSizeY", positive=True)
    n_views = number("Projections", positive=True, integer=True)
    step, first = number("AngularStep"), number("InitialAngle", 0.0)
    for key in ("ObjectTilt", "ObjectRoll"):
        if number(key, 0.0) != 0.0:
            raise ValueError(f"xtekct: {key} = {params[key]} (a tilted rotation axis) is not supported")
    top, bottom = number("CentreOfRotationTop", 0.0), number("CentreOfRotationBottom", 0.0)
    if abs(top - bottom) > 1e-6 * max(1.0, abs(top), abs(bottom)):
        raise ValueError(
            f"xtekct: CentreOfRotationTop {top} and CentreOfRotationBottom {bottom} differ "
            "(a tilted rotation axis), which is not supported"
        )
    axis = number("ObjectOffsetX", (top + bottom) / 2 * sod / sdd)  # at the object
    angles = np.radians(first - 180.0 + step * np.arange(n_views))
    # leveret's u runs against the TIFF columns and v against the rows (row 0 at the top): the
    # detector's offset along its columns is -u; a rotation axis shifted by a along u is the
    # source and the detector shifted by -a
    circle = ConeGeometry.circular(
        angles,
        sod,
        sdd,
        n_rows,
        n_cols,
        du,
        row_pixel_size=dv,
        det_offset=(-number("DetectorOffsetX", 0.0) + axis, number("DetectorOffsetY", 0.0)),
        source_offset=(axis, 0.0),
    )
    flip = np.array([[-1.0, 0.0, n_cols - 1.0], [0.0, -1.0, n_rows - 1.0], [0.0, 0.0, 1.0]])
    geometry = ConeGeometry(flip @ circle.matrices, n_rows, n_cols, pixel_size=(du, dv), angles=angles)
    shape = tuple(number(f"Voxels{a}", 0, integer=True) or 0 for a in "ZYX")
    if min(shape) < 1:  # no volume given: the detector's field at the axis
        shape = (n_rows, n_cols, n_cols)
    voxel = tuple(number(f"VoxelSize{a}", 0.0) or 0.0 for a in "ZYX")
    if min(voxel) <= 0:
        voxel = (dv * sod / sdd, du * sod / sdd, du * sod / sdd)
    volume = VolumeGeometry(shape, voxel)
    return XtekScan(geometry, volume, number("WhiteLevel", 0.0), _xtek_projections(p, params), params)


def _xtek_projections(path: Path, params: dict) -> list:
    folder = path.parent / params.get("InputFolderName", "").strip()
    try:
        files = tiff_files(folder)
    except (ValueError, OSError):
        return []
    name = params.get("Name", "").strip()
    named = [f for f in files if name and f.name.startswith(name + "_")]
    return sorted(named or files, key=lambda f: natural_key(f.name))
