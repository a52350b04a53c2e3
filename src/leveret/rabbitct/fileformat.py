"""Reading and writing the RabbitCT dataset file (version 2, ``RabbitInput.rct``).

RabbitCT (Rohkohl et al., Med. Phys. 36(9), 2009) benchmarks cone-beam
back-projection: 496 pre-processed projections of 1248 x 960 pixels of a
rabbit, one 3x4 projection matrix per view, reconstructed into a cube of
256 mm side with L = 128, 256, 512 or 1024 voxels per edge and scored in
Hounsfield units (HU) against reference volumes stored in the same file.

File layout
-----------
Every number is little-endian; there is no padding and no alignment.
``n`` = projection count, ``W`` = detector width (columns, u), ``H`` =
detector height (rows, v).

=========================  ==========  ==========================================
byte offset                type        field
=========================  ==========  ==========================================
0                          uint32      format version, 2
4                          uint32      ``W``: image width, pixels per row (u)
8                          uint32      ``H``: image height, rows (v)
12                         uint32      ``n``: number of projections
16                         float32     HU scale (slope), see below
20                         float32     HU offset (intercept), see below
24 + i R                   12 float64  matrix of view i, column-major (below)
24 + i R + 96              W H float32 image of view i, row by row (below)
24 + n R                   uint16      reference volumes, L0^3, (2 L0)^3, ...
=========================  ==========  ==========================================

with the record size ``R = 96 + 4 W H`` bytes, so the file holds
``24 + n (96 + 4 W H) + 2 sum_L L^3`` bytes (:func:`rabbitct_file_size`).
For the real dataset (W, H, n) = (1248, 960, 496): 2 377 038 360 bytes up to
the references, plus 2 (128^3 + 256^3 + 512^3 + 1024^3) bytes of references.

- **Header** (24 bytes). This is the ``RabbitCtHeader`` struct of the public
  RabbitCTRunner sources, version 2.x: ``rct_version``, ``img_sz[2]``
  (width first), ``glb_numImg``, ``glb_HUScale[2]``. Version-1 files have no
  version field (a 20-byte header starting with the width, 1240 or 1248);
  they are refused with a message saying so.
- **Matrices.** The 12 doubles are P (3 rows, 4 columns) in column-major
  order: ``values[3 c + r] = P[r, c]``. This is how the reference kernel
  indexes them (``w = A[2] x + A[5] y + A[8] z + A[11]``,
  ``u = (A[0] x + A[3] y + A[6] z + A[9]) / w``,
  ``v = (A[1] x + A[4] y + A[7] z + A[10]) / w``); see
  :func:`matrix_to_rabbitct` and :func:`matrix_from_rabbitct`.
- **Images.** ``W H`` float32 values, row v = 0 first and u fastest inside a
  row (the kernel reads ``I[v W + u]``); in NumPy that is an array of shape
  ``(H, W) = (n_rows, n_cols)`` in C order, so the projection stack is
  ``(n, n_rows, n_cols)``. Note that the header stores (W, H), the reverse of
  the array shape.
- **Reference volumes.** uint16 cubes of edge L0, 2 L0, 4 L0, ... in that
  order, each C-ordered ``(z, y, x)`` with x fastest (the runner compares
  them element by element with ``f_L[k L^2 + j L + i]``). The real file
  starts at L0 = 128 and goes up to 1024; RabbitCTRunner reads them in turn
  up to the problem size. The file names no sizes: the reader finds them
  from the number of bytes left after the projections, which must be
  ``2 L0^3 (1 + 8 + ... + 8^(m-1))`` for exactly one (L0, m) (this decomposition
  is unique for every volume up to 2^42 voxels; the reader checks it anyway).
  Zero bytes left means no references.

Source of each part: the header fields and their order, the column-major
matrices, the image order, the record layout (matrix then image, per view)
and the reference volumes following the projections in doubling sizes are
from the public RabbitCTRunner sources (``rabbitctrunner.h`` /
``rabbitctrunner.cpp``, version 2.x, and the LolaBunny reference kernel).
The format's short description ("24-byte header: version 2, detector size,
projection count, HU scale; then per projection 12 doubles and the float
image; then the uint16 reference volumes") agrees; the public sources add
that "HU scale" is two float32 values, slope then offset. The sources assume
the host's byte order (x86: little-endian); little-endian is fixed here.

Geometry and values
-------------------
A matrix maps world coordinates in mm to detector pixels:
``(u w, v w, w) = P (x, y, z, 1)``, u along a row (column index), v down the
rows (row index), pixel centres at integers (the reference kernel
interpolates bilinearly from ``floor(u)``, ``floor(v)``, zero outside the
detector). Voxel ``[k, j, i]`` of an L^3 volume sits at
``(x, y, z) = O + R (i, j, k)`` mm with ``R = 256 / L`` and
``O = -R (L - 1) / 2``, so the volume is centred on the origin. The
benchmark's back-projection adds, per view, ``I(u, v) / w^2`` to each voxel;
the images are used as stored (RabbitCT distributes them pre-processed for
FDK, so only the back-projection is timed; the weighting and filtering were
not checked against the technical note here).

``hu_scale`` and ``hu_offset`` turn a reconstructed value ``mu`` (the sum
above) into the scored units: ``round(hu_scale * mu + hu_offset)`` for
``mu > 0``, 0 otherwise, capped at 4095, computed in float32 with round half
up (:func:`hu_from_mu`). The reference volumes are in those units (uint16,
0..4095).
"""

from __future__ import annotations

import math
import os
import struct
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .. import _validate as v
from ..geometry.cone import matrix_from_rabbitct, matrix_to_rabbitct
from ..io.atomic import atomic_output

__all__ = [
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "MATRIX_SIZE",
    "VOLUME_SIDE_MM",
    "RabbitCTData",
    "hu_from_mu",
    "matrix_from_rabbitct",
    "matrix_to_rabbitct",
    "mu_from_hu",
    "rabbitct_file_size",
    "read_rabbitct",
    "write_rabbitct",
]

FORMAT_VERSION = 2
#: version, width, height, count (uint32), HU scale, HU offset (float32)
_HEADER = struct.Struct("<4I2f")
HEADER_SIZE = _HEADER.size  # 24
MATRIX_SIZE = 12 * 8  # bytes per matrix record
VOLUME_SIDE_MM = 256.0  # edge of the reconstructed cube; voxel size 256 / L mm
# Widths of version-1 datasets, which start with the width instead of a version.
_VERSION1_WIDTHS = (1240, 1248)
# Largest value the scorer keeps (12-bit data).
_HU_MAX = 4095.0

_MATRIX_DTYPE = np.dtype("<f8")
_IMAGE_DTYPE = np.dtype("<f4")
_REFERENCE_DTYPE = np.dtype("<u2")


# -- matrices ------------------------------------------------------------------------------

# -- HU ------------------------------------------------------------------------------------


def hu_from_mu(mu, hu_scale: float, hu_offset: float) -> np.ndarray:
    """Reconstructed values in RabbitCT's scored units, as RabbitCTRunner computes them.

    ``floor(hu_scale * mu + hu_offset + 0.5)`` where ``mu > 0``, 0 elsewhere
    (NaN included), then capped at 4095; all in float32 like the runner.
    There is no lower cap: the result can be negative where the linear map is.

    Parameters
    ----------
    mu : array_like
        Reconstructed values (the back-projection sum, any shape).
    hu_scale, hu_offset : float
        Slope and intercept from the file header (``RabbitCTData.hu_scale``,
        ``RabbitCTData.hu_offset``). Both are required: this is not the
        ``1000 (mu - mu_water) / mu_water`` definition.

    Returns
    -------
    ndarray, float32, shape of ``mu``
        Whole numbers, comparable with the uint16 reference volumes.
    """
    s = np.float32(v.finite_float("hu_scale", hu_scale))
    o = np.float32(v.finite_float("hu_offset", hu_offset))
    mu = np.asarray(mu)
    out = np.empty(mu.shape, dtype=np.float32)
    if mu.ndim == 0:
        out[...] = _hu_block(mu, s, o)
        return out
    # One slab at a time: a 1024^3 volume would need several 4 GiB temporaries.
    for k in range(mu.shape[0]):
        out[k] = _hu_block(mu[k], s, o)
    return out


def _hu_block(mu, s, o):
    mu = np.asarray(mu, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        hu = np.floor(s * mu + o + np.float32(0.5))
        hu = np.where(mu > 0, hu, np.float32(0.0))
    return np.minimum(hu, np.float32(_HU_MAX))


def mu_from_hu(hu, hu_scale: float, hu_offset: float) -> np.ndarray:
    """Invert the linear part of :func:`hu_from_mu`: ``(hu - hu_offset) / hu_scale``.

    The rounding, the zero for ``mu <= 0`` and the cap at 4095 are not
    invertible: 0 and 4095 mark values that were cut.

    Parameters
    ----------
    hu : array_like
        Values in the scored units (e.g. a reference volume).
    hu_scale, hu_offset : float
        Slope (nonzero) and intercept from the file header.

    Returns
    -------
    ndarray, float64, shape of ``hu``
        Reconstructed-value units.
    """
    s = v.finite_float("hu_scale", hu_scale)
    if s == 0:
        raise ValueError("hu_scale: expected a nonzero slope to invert, got 0")
    o = v.finite_float("hu_offset", hu_offset)
    return (np.asarray(hu, dtype=np.float64) - o) / s


# -- the data ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class RabbitCTData:
    """The content of a RabbitCT file (immutable).

    Parameters
    ----------
    matrices : array_like, shape (n, 3, 4)
        One projection matrix per view, mapping world (x, y, z, 1) in mm to
        detector (u w, v w, w) in pixels. Stored as a read-only float64 copy.
    projections : ndarray (n, n_rows, n_cols) or sequence of n (n_rows, n_cols) arrays
        float32 images, rows = v, columns = u, C order (u fastest). Kept as
        given (not copied), so a memory map stays one; :func:`read_rabbitct`
        returns read-only ``np.memmap`` views by default. A sequence (e.g. a
        lazy one) lets :func:`write_rabbitct` stream views one at a time; its
        images are checked as they are written.
    hu_scale, hu_offset : float
        Slope and intercept of the scored units: ``hu_scale * mu + hu_offset``
        (see :func:`hu_from_mu`). Rounded to float32 on construction, as the
        file stores them, so what is written reads back equal.
    references : mapping {int: ndarray (L, L, L) uint16}, optional
        Reference volumes in scored units, C order (z, y, x), x fastest. The
        sizes must be L0, 2 L0, 4 L0, ... (the file does not name them). Kept
        as given (not copied) in a read-only mapping sorted by size.
    version : int
        Format version; only 2 exists here.

    Raises
    ------
    ValueError
        Naming the field: wrong shape or dtype, non-finite values, sizes that
        do not double, an unknown version.
    """

    matrices: np.ndarray
    projections: np.ndarray | Sequence[np.ndarray]
    hu_scale: float = 1.0
    hu_offset: float = 0.0
    references: Mapping[int, np.ndarray] = field(default_factory=dict)
    version: int = FORMAT_VERSION

    def __post_init__(self):
        set_ = object.__setattr__  # frozen: normalised fields are set once, here
        set_(self, "matrices", _check_matrices(self.matrices))
        n = self.matrices.shape[0]
        set_(self, "projections", _check_projections(self.projections, n))
        for name in ("hu_scale", "hu_offset"):
            set_(self, name, _float32_value(name, getattr(self, name)))
        set_(self, "references", _check_references(self.references))
        if isinstance(self.version, bool) or self.version != FORMAT_VERSION:
            raise ValueError(
                f"version: expected {FORMAT_VERSION} (the only RabbitCT file version supported), got {self.version!r}"
            )
        set_(self, "version", FORMAT_VERSION)

    @property
    def n_views(self) -> int:
        """Number of projections."""
        return self.matrices.shape[0]

    @property
    def detector_shape(self) -> tuple[int, int]:
        """``(n_rows, n_cols)`` = (H, W) of each image (the header stores W first)."""
        if isinstance(self.projections, np.ndarray):
            return tuple(int(s) for s in self.projections.shape[1:])
        return tuple(int(s) for s in np.shape(self.projections[0]))

    @property
    def reference_sizes(self) -> tuple[int, ...]:
        """Edges L of the reference volumes, ascending."""
        return tuple(self.references)

    def __repr__(self) -> str:
        n_rows, n_cols = self.detector_shape
        return (
            f"RabbitCTData(version={self.version}, n_views={self.n_views}, "
            f"detector_shape=({n_rows}, {n_cols}), hu_scale={self.hu_scale!r}, "
            f"hu_offset={self.hu_offset!r}, reference_sizes={self.reference_sizes})"
        )


def _check_matrices(matrices) -> np.ndarray:
    arr = np.asarray(matrices)
    if arr.dtype.kind not in "fiu" or not np.can_cast(arr.dtype, np.float64, "safe"):
        raise ValueError(f"matrices: expected real numbers (stored as float64), got dtype {arr.dtype}")
    if arr.ndim != 3 or arr.shape[1:] != (3, 4) or arr.shape[0] == 0:
        raise ValueError(f"matrices: expected shape (n_views, 3, 4) with n_views >= 1, got {arr.shape}")
    arr = np.array(arr, dtype=np.float64)  # a copy: the field must not change under us
    v.check_finite_array("matrices", arr)
    arr.setflags(write=False)
    return arr


def _check_image_dtype(name: str, dtype: np.dtype) -> None:
    # float32 only (any byte order) or integers float32 holds exactly: the file
    # stores float32, and a silent float64 -> float32 rounding would break the
    # bit-exact round trip; the caller casts if the rounding is intended.
    if dtype.kind not in "fiu" or not np.can_cast(dtype, np.float32, "safe"):
        raise ValueError(
            f"{name}: expected float32 images (the file stores float32), got dtype "
            f"{dtype}; cast with .astype(np.float32) if the rounding is intended"
        )


def _check_projections(projections, n: int):
    if isinstance(projections, np.ndarray):
        if projections.ndim != 3 or projections.shape[0] != n or 0 in projections.shape:
            raise ValueError(
                f"projections: expected shape (n_views={n}, n_rows, n_cols) with "
                f"n_rows, n_cols >= 1, got {projections.shape}"
            )
        _check_image_dtype("projections", projections.dtype)
        return projections
    if isinstance(projections, (str, bytes)) or not isinstance(projections, Sequence):
        raise TypeError(
            f"projections: expected an array (n_views, n_rows, n_cols) or a sequence "
            f"of n_views 2D images, got {type(projections).__name__}"
        )
    if len(projections) != n:
        raise ValueError(f"projections: expected {n} images (one per matrix), got {len(projections)}")
    first = np.shape(projections[0])
    if len(first) != 2 or 0 in first:
        raise ValueError(f"projections[0]: expected a 2D image (n_rows, n_cols), got shape {first}")
    return projections


def _float32_value(name: str, value) -> float:
    x = v.finite_float(name, value)
    with np.errstate(over="ignore"):
        x32 = np.float32(x)
    if not np.isfinite(x32):
        raise ValueError(f"{name}: expected a value float32 can hold (the file stores float32), got {value!r}")
    return float(x32)


def _check_references(references) -> Mapping[int, np.ndarray]:
    if references is None:
        references = {}
    if not isinstance(references, Mapping):
        raise TypeError(
            f"references: expected a mapping {{size: (L, L, L) uint16 array}}, got {type(references).__name__}"
        )
    out = {}
    for size in sorted(references):
        name = f"references[{size!r}]"
        L = v.positive_int(f"references key {size!r}", size)
        vol = references[size]
        if not isinstance(vol, np.ndarray):
            vol = np.asarray(vol)
        if vol.shape != (L, L, L):
            raise ValueError(f"{name}: expected shape {(L, L, L)}, got {vol.shape}")
        if vol.dtype.kind != "u" or not np.can_cast(vol.dtype, np.uint16, "safe"):
            raise ValueError(f"{name}: expected uint16 values (the file stores uint16), got dtype {vol.dtype}")
        out[L] = vol
    sizes = list(out)
    for a, b in zip(sizes, sizes[1:]):
        if b != 2 * a:
            # The file does not store the sizes: only a doubling run can be read back.
            raise ValueError(
                f"references: expected sizes L0, 2 L0, 4 L0, ... (the file does not store them), got {sizes}"
            )
    return types.MappingProxyType(out)


# -- sizes ---------------------------------------------------------------------------------


def _record_size(n_rows: int, n_cols: int) -> int:
    return MATRIX_SIZE + _IMAGE_DTYPE.itemsize * n_rows * n_cols


def rabbitct_file_size(n_views: int, n_rows: int, n_cols: int, reference_sizes: Sequence[int] = ()) -> int:
    """Bytes of a version-2 RabbitCT file: ``24 + n (96 + 4 H W) + 2 sum L^3``.

    Parameters
    ----------
    n_views, n_rows, n_cols : int
        Projection count and image shape (H = n_rows, W = n_cols).
    reference_sizes : sequence of int
        Edges L of the reference volumes.
    """
    n = v.positive_int("n_views", n_views)
    h = v.positive_int("n_rows", n_rows)
    w = v.positive_int("n_cols", n_cols)
    refs = sum(v.positive_int("reference_sizes[]", L) ** 3 for L in reference_sizes)
    return HEADER_SIZE + n * _record_size(h, w) + _REFERENCE_DTYPE.itemsize * refs


def _icbrt(x: int) -> int | None:
    """The integer cube root of x, or None if x is not a cube."""
    r = round(x ** (1.0 / 3.0))
    for c in (r - 1, r, r + 1):
        if c > 0 and c**3 == x:
            return c
    return None


def _reference_runs(n_bytes: int) -> list[tuple[int, ...]]:
    """Every run (L0, 2 L0, ..., 2^(m-1) L0) of uint16 cubes filling ``n_bytes`` exactly."""
    if n_bytes == 0:
        return [()]
    if n_bytes % _REFERENCE_DTYPE.itemsize:
        return []
    voxels = n_bytes // _REFERENCE_DTYPE.itemsize
    runs = []
    m = 1
    while (8**m - 1) // 7 <= voxels:
        a = (8**m - 1) // 7  # 1 + 8 + ... + 8^(m-1)
        if voxels % a == 0:
            L0 = _icbrt(voxels // a)
            if L0 is not None:
                runs.append(tuple(L0 << k for k in range(m)))
        m += 1
    return runs


# -- reading -------------------------------------------------------------------------------


def read_rabbitct(path: str | os.PathLike, *, mmap: bool = True, load_references: bool = True) -> RabbitCTData:
    """Read a version-2 RabbitCT file (layout in the module docstring).

    Parameters
    ----------
    path : str or os.PathLike
        The ``.rct`` file.
    mmap : bool
        Memory-map the projections and reference volumes (read-only
        ``np.memmap`` views; nothing is read until used, so a 2.4 GB file
        opens at once). With False, everything is read into memory. The
        matrices (96 bytes a view) are always read into a float64 array.
    load_references : bool
        Return the reference volumes; with False ``references`` is empty
        (the bytes are still checked to be whole volumes).

    Returns
    -------
    RabbitCTData
        ``matrices`` (n, 3, 4) float64, ``projections`` (n, H, W) float32
        (rows = v, u fastest), ``hu_scale``, ``hu_offset``, ``references``
        {L: (L, L, L) uint16}, ``version`` 2.

    Raises
    ------
    ValueError
        Naming ``path``: no such file; a header that is short, of another
        version (version-1 files included) or with a zero detector size or
        projection count; a file shorter than its header's counts need
        (truncated); trailing bytes that are not whole reference volumes;
        non-finite matrices or HU scale.
    """
    p = Path(os.fspath(path))
    where = f"path: {str(p)!r}"
    if not p.is_file():
        raise ValueError(f"{where}: no such file")
    size = p.stat().st_size
    if size < HEADER_SIZE:
        raise ValueError(
            f"{where}: expected at least a {HEADER_SIZE}-byte RabbitCT header, found a file of {size} bytes"
        )
    with open(p, "rb") as f:
        version, width, height, n, hu_scale, hu_offset = _HEADER.unpack(f.read(HEADER_SIZE))
        if version != FORMAT_VERSION:
            hint = ""
            if version in _VERSION1_WIDTHS:
                hint = (
                    " (this looks like a version-1 dataset, whose 20-byte header starts with "
                    "the image width; get the version-2 file)"
                )
            raise ValueError(
                f"{where}: expected RabbitCT format version {FORMAT_VERSION} in bytes 0-3, found {version}{hint}"
            )
        if width == 0 or height == 0:
            raise ValueError(
                f"{where}: expected a nonzero detector size, found width {width} x height {height} in the header"
            )
        if n == 0:
            raise ValueError(f"{where}: expected at least one projection, found a count of 0 in the header")
        if not (math.isfinite(hu_scale) and math.isfinite(hu_offset)):
            raise ValueError(f"{where}: expected finite HU scale and offset, found {hu_scale} and {hu_offset}")
        record = _record_size(height, width)
        projections_end = HEADER_SIZE + n * record
        if size < projections_end:
            raise ValueError(
                f"{where}: truncated: expected at least {projections_end} bytes for {n} projections of "
                f"{height} x {width} pixels ({record} bytes each after the {HEADER_SIZE}-byte header), "
                f"found {size} bytes"
            )
        tail = size - projections_end
        runs = _reference_runs(tail)
        if len(runs) != 1:
            what = "several" if runs else "no"
            raise ValueError(
                f"{where}: expected the {tail} bytes after the projections to be uint16 reference "
                f"volumes of edges L0, 2 L0, 4 L0, ... (2 L^3 bytes each) or nothing, but {what} such "
                f"run fits: truncated or trailing data"
            )
        sizes = runs[0]

        if mmap:
            records = np.memmap(p, dtype=_record_dtype(height, width), mode="r", offset=HEADER_SIZE, shape=(n,))
            raw = np.array(records["matrix"])
            projections = records["image"]  # (n, H, W), a memmap view, nothing read
        else:
            raw = np.empty((n, 12), dtype=_MATRIX_DTYPE)
            projections = np.empty((n, height, width), dtype=_IMAGE_DTYPE)
            for i in range(n):
                _read_exactly(f, raw[i], where)
                _read_exactly(f, projections[i], where)
            projections.setflags(write=False)

        bad = ~np.isfinite(raw).all(axis=1)
        if bad.any():
            raise ValueError(
                f"{where}: expected finite projection matrices, found NaN/Inf in the matrix "
                f"of view {int(np.flatnonzero(bad)[0])} ({int(bad.sum())} view(s))"
            )
        matrices = matrix_from_rabbitct(raw.astype(np.float64))

        references = {}
        if load_references:
            offset = projections_end
            for L in sizes:
                if mmap:
                    references[L] = np.memmap(p, dtype=_REFERENCE_DTYPE, mode="r", offset=offset, shape=(L, L, L))
                else:
                    f.seek(offset)
                    vol = np.empty((L, L, L), dtype=_REFERENCE_DTYPE)
                    _read_exactly(f, vol, where)
                    vol.setflags(write=False)
                    references[L] = vol
                offset += _REFERENCE_DTYPE.itemsize * L**3

    return RabbitCTData(
        matrices=matrices,
        projections=projections,
        hu_scale=hu_scale,
        hu_offset=hu_offset,
        references=references,
        version=version,
    )


def _record_dtype(height: int, width: int) -> np.dtype:
    # One view's record: packed, no alignment padding (itemsize 96 + 4 H W).
    return np.dtype([("matrix", _MATRIX_DTYPE, (12,)), ("image", _IMAGE_DTYPE, (height, width))])


def _read_exactly(f, out: np.ndarray, where: str) -> None:
    """Fill the C-contiguous ``out`` from ``f``; the file may have shrunk since it was sized."""
    buf = out.reshape(-1).view(np.uint8)
    got = f.readinto(buf)
    if got != buf.nbytes:
        raise ValueError(
            f"{where}: truncated while reading: expected {buf.nbytes} bytes at offset "
            f"{f.tell() - (got or 0)}, found {got or 0}"
        )


# -- writing -------------------------------------------------------------------------------


def write_rabbitct(path: str | os.PathLike, data: RabbitCTData, *, overwrite: bool = False) -> Path:
    """Write a version-2 RabbitCT file (layout in the module docstring), atomically.

    The file is written under a hidden temporary name in the same folder and
    renamed onto ``path`` once complete (:func:`leveret.io.atomic_output`);
    any failure, including an image of the wrong shape met halfway, removes
    the temporary and leaves ``path`` as it was. Views are written one at a
    time and reference volumes one slice at a time, so memory stays at about
    one image (memory-mapped input is paged in as it is written).

    Parameters
    ----------
    path : str or os.PathLike
        Output file; its folder must exist.
    data : RabbitCTData
        What to write. Every image must have the shape of the first
        (``detector_shape``) and a float32-exact dtype.
    overwrite : bool
        Replace an existing ``path``; otherwise an existing ``path`` is an
        error raised before anything is written.

    Returns
    -------
    pathlib.Path
        The written file.

    Raises
    ------
    ValueError
        Naming ``path`` (exists, missing folder), ``data`` (not a
        RabbitCTData) or ``data.projections[i]`` (wrong shape or dtype).
    """
    if not isinstance(data, RabbitCTData):
        raise TypeError(f"data: expected a RabbitCTData, got {type(data).__name__}")
    p = Path(os.fspath(path))
    n = data.n_views
    n_rows, n_cols = data.detector_shape
    header = _HEADER.pack(data.version, n_cols, n_rows, n, data.hu_scale, data.hu_offset)
    raw = matrix_to_rabbitct(data.matrices).astype(_MATRIX_DTYPE)
    with atomic_output(p, overwrite=overwrite) as tmp:
        with open(tmp, "wb") as f:
            f.write(header)
            for i in range(n):
                image = _image_bytes(data.projections[i], i, (n_rows, n_cols))
                f.write(raw[i].view(np.uint8))
                f.write(image)
            for L, vol in data.references.items():
                for k in range(L):
                    f.write(np.ascontiguousarray(vol[k], dtype=_REFERENCE_DTYPE).reshape(-1).view(np.uint8))
            expected = rabbitct_file_size(n, n_rows, n_cols, data.reference_sizes)
            if f.tell() != expected:  # cannot happen unless an array changed under us
                raise RuntimeError(f"write_rabbitct: wrote {f.tell()} bytes, expected {expected}")
    return p


def _image_bytes(image, i: int, shape: tuple[int, int]) -> np.ndarray:
    """View ``i`` as little-endian float32 bytes, after checking its shape and dtype."""
    arr = np.asarray(image)
    name = f"data.projections[{i}]"
    if arr.shape != shape:
        raise ValueError(f"{name}: expected an image of shape {shape} (n_rows, n_cols, as the first), got {arr.shape}")
    _check_image_dtype(name, arr.dtype)
    return np.ascontiguousarray(arr, dtype=_IMAGE_DTYPE).reshape(-1).view(np.uint8)
