"""Whole scans (projections, flats, darks, angles) from NeXus NXtomo and DXchange files."""

from __future__ import annotations

import contextlib
import numbers
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .._validate import choice
from ._common import LazyStack, split_dataset

# NXtomo image_key values.
PROJECTION, FLAT, DARK, INVALID = 0, 1, 2, 3

_ANGLE_UNITS = {
    "degree": np.pi / 180,
    "degrees": np.pi / 180,
    "deg": np.pi / 180,
    "radian": 1.0,
    "radians": 1.0,
    "rad": 1.0,
}

# Where NXtomo keeps each field, relative to its NXentry, most usual first.
_NX_DATA = ("data/data", "instrument/detector/data")
_NX_KEY = ("data/image_key", "instrument/detector/image_key")
_NX_ANGLE = ("data/rotation_angle", "sample/rotation_angle")


class _BadScan(ValueError):
    """A file that does not hold a valid scan; its message names ``path``."""


@contextlib.contextmanager
def _h5_errors(path: Path, what: str):
    """Turn h5py/numpy failures into a ValueError naming ``path``; ours pass unchanged."""
    try:
        yield
    except _BadScan:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise _BadScan(f"path: cannot read {str(path)!r} as {what}: {exc}") from exc


class FrameStack(LazyStack):
    """Lazy, read-only view of some frames of a 3D HDF5 dataset.

    Indexing reads only the frames asked for, opening the file for each
    access (so no file handle stays open): ``stack[k]`` is one image
    ``(n_rows, n_cols)``, ``stack[a:b]`` or ``stack[[i, j]]`` a stack, and
    ``stack[k, r0:r1, c0:c1]`` a region (read from the file through h5py when
    the image part of the key is ints and slices). ``np.asarray(stack)``
    reads everything. Indexing with ``...`` or ``None`` reads everything
    first, then indexes in memory.

    Attributes
    ----------
    shape : tuple of int
        ``(n_frames, n_rows, n_cols)``.
    dtype : numpy.dtype
        The stored dtype.
    path, dataset : str
        The file and the dataset's path in it.
    """

    def __init__(self, path: Path, dataset: str, frames: np.ndarray, frame_shape: tuple, dtype):
        self.path = str(path)
        self.dataset = dataset
        self._frames = np.asarray(frames, dtype=np.int64)
        self._frames.setflags(write=False)
        self.shape = (len(self._frames),) + tuple(frame_shape)
        self.dtype = np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def frame_indices(self) -> np.ndarray:
        """Index of each frame in the dataset (read-only)."""
        return self._frames

    def __repr__(self) -> str:
        return f"FrameStack({self.path!r}:{self.dataset}, shape={self.shape}, dtype={self.dtype})"

    def _frames_at(self, first, rest: tuple) -> np.ndarray:
        picked = self._frames[first]  # IndexError as NumPy gives it
        single = np.ndim(picked) == 0
        picked = np.atleast_1d(picked)
        native = all(
            isinstance(k, (numbers.Integral, slice))
            and not isinstance(k, bool)
            and (not isinstance(k, slice) or (k.step or 1) > 0)
            for k in rest
        )
        template = np.empty((0,) + self.shape[1:], self.dtype)[(slice(None),) + rest]
        out = np.empty((len(picked),) + template.shape[1:], self.dtype)
        import h5py

        from .hdf5 import needs_own_decoder, read_dataset

        with _h5_errors(Path(self.path), "an HDF5 file"):
            with h5py.File(self.path, "r") as f:
                ds = f[self.dataset]
                own = needs_own_decoder(ds)  # Blosc frames without hdf5plugin: decoded here
                for j, i in enumerate(picked):
                    if own:
                        out[j] = read_dataset(self.path, self.dataset, (slice(int(i), int(i) + 1),))[0][rest]
                    else:
                        out[j] = ds[(int(i),) + rest] if native else ds[int(i)][rest]
        return out[0] if single else out


class Scan(NamedTuple):
    """A tomography scan as stored in one file.

    Attributes
    ----------
    projections : FrameStack
        ``(n_projections, n_rows, n_cols)``, lazy: index it to read frames,
        ``np.asarray`` to read all (see :class:`FrameStack`).
    flats, darks : numpy.ndarray
        ``(n_flats, n_rows, n_cols)`` and ``(n_darks, n_rows, n_cols)``, read
        into memory, in the file's order; ``n`` is 0 when the file has none.
    angles : numpy.ndarray or None
        Rotation angle of each projection, radians, float64, read-only; None
        when the file stores none.
    metadata : dict
        ``path`` (str), ``layout`` (``"nxtomo"`` or ``"dxchange"``) and
        ``dataset`` (path of the projection dataset in the file); NXtomo adds
        ``entry`` and ``image_key`` (the key of every frame, as stored).
    """

    projections: FrameStack
    flats: np.ndarray
    darks: np.ndarray
    angles: np.ndarray | None
    metadata: dict


def read_scan(path: str | os.PathLike, *, layout: str = "auto", entry: str | None = None) -> Scan:
    """Read projections, flats, darks and angles from an NXtomo or DXchange file.

    Layouts:

    - ``"nxtomo"`` (NeXus NXtomo): in an NXentry (e.g. ``/entry``), the frames
      ``data/data`` (or ``instrument/detector/data``), ``(n_frames, n_rows,
      n_cols)``; ``image_key`` beside them (or in ``instrument/detector``),
      one per frame: 0 projection, 1 flat, 2 dark, 3 invalid (skipped), in any
      order (flats may come before, between and after the projections);
      ``rotation_angle`` in ``data`` or ``sample``, one per frame, in the unit
      of its ``units`` attribute (degrees when it has none).
    - ``"dxchange"``: ``/exchange/data`` (projections), ``/exchange/data_white``
      (flats), ``/exchange/data_dark`` (darks), ``/exchange/theta`` (one angle
      per projection, degrees unless its ``units`` attribute says otherwise);
      all but ``data`` optional.
    - ``"auto"``: whichever of the two the file's structure fits.

    Projections stay on disk (a lazy :class:`FrameStack`); flats and darks,
    usually few, are read into memory.

    Parameters
    ----------
    path : str or os.PathLike
        HDF5/NeXus file.
    layout : {"auto", "nxtomo", "dxchange"}
        The file's layout.
    entry : str, optional
        The NXentry to read (``"/entry"``) when the file holds several NXtomo
        entries; NXtomo only.

    Returns
    -------
    Scan

    Raises
    ------
    ValueError
        Naming ``path``: a missing or unreadable file, neither layout fits (or
        both do, with ``layout="auto"``), missing datasets, frames that are
        not 3D, ``image_key``/``rotation_angle``/``theta`` lengths that disagree
        with the frames, unknown image keys or angle units, no projections, or
        flats/darks whose image size differs from the projections'. Naming
        ``layout`` or ``entry`` when those are invalid.
    """
    import h5py

    layout = choice("layout", layout, ("auto", "nxtomo", "dxchange"))
    if entry is not None and (not isinstance(entry, str) or layout == "dxchange"):
        raise ValueError(
            f"entry: expected the path of an NXtomo entry (a str, for layout 'nxtomo' "
            f"or 'auto'), got {entry!r} with layout {layout!r}"
        )
    p, inline = split_dataset(path, None)
    if inline is not None:
        raise ValueError(f"path: read_scan takes a file, not a dataset path: {os.fspath(path)!r}")
    if not p.is_file():
        raise _BadScan(f"path: no such file: {str(p)!r}")
    with _h5_errors(p, "an HDF5 file"):
        f = h5py.File(p, "r")
    with f, _h5_errors(p, "a scan"):
        entries = _nxtomo_entries(f, entry)
        is_dx = isinstance(f.get("/exchange/data"), h5py.Dataset)
        if layout == "auto":
            if entries and is_dx:
                raise _BadScan(
                    f"path: {str(p)!r} fits both the NXtomo and the DXchange layout; "
                    "pass layout='nxtomo' or layout='dxchange'"
                )
            if not entries and not is_dx:
                raise _BadScan(
                    f"path: {str(p)!r} fits neither layout: no NXentry with "
                    f"{' or '.join(_NX_DATA)} (NXtomo) and no /exchange/data (DXchange)"
                )
            layout = "nxtomo" if entries else "dxchange"
        if layout == "dxchange":
            return _read_dxchange(p, f)
        if not entries:
            where = repr(entry) if entry is not None else "any top-level group"
            raise _BadScan(f"path: {str(p)!r}: no NXtomo frames ({' or '.join(_NX_DATA)}) in {where}")
        if len(entries) > 1:
            raise _BadScan(
                f"path: {str(p)!r} holds several NXtomo entries ({', '.join(entries)}); choose one with entry="
            )
        return _read_nxtomo(p, f, entries[0])


def _nxtomo_entries(f, entry: str | None) -> list[str]:
    import h5py

    names = [entry] if entry is not None else ["/" + k for k in f]
    out = []
    for name in names:
        g = f.get(name)
        if isinstance(g, h5py.Group) and _find(g, _NX_DATA) is not None:
            out.append(g.name)
    return sorted(out)


def _find(group, candidates):
    import h5py

    for rel in candidates:
        obj = group.get(rel)
        if isinstance(obj, h5py.Dataset):
            return obj
    return None


def _frames_dataset(p: Path, ds) -> tuple[int, ...]:
    if ds.ndim != 3:
        raise _BadScan(
            f"path: {str(p)!r}: expected frames (n_frames, n_rows, n_cols) at {ds.name}, got shape {ds.shape}"
        )
    if not np.issubdtype(ds.dtype, np.number) and ds.dtype != np.bool_:
        raise _BadScan(f"path: {str(p)!r}: expected numbers at {ds.name}, got dtype {ds.dtype}")
    return ds.shape


def _angles(p: Path, ds, n: int) -> np.ndarray:
    units = ds.attrs.get("units", "degree")
    if isinstance(units, bytes):
        units = units.decode("utf-8", "replace")
    units = str(np.asarray(units).ravel()[0]) if np.ndim(units) else str(units)
    scale = _ANGLE_UNITS.get(units.strip().lower())
    if scale is None:
        raise _BadScan(
            f"path: {str(p)!r}: unknown units {units!r} of {ds.name}; expected one of {', '.join(sorted(_ANGLE_UNITS))}"
        )
    values = np.asarray(ds[()], dtype=np.float64).ravel() if ds.size else np.empty(0)
    if values.size != n:
        raise _BadScan(f"path: {str(p)!r}: {ds.name} holds {values.size} angles for {n} frames")
    if not np.isfinite(values).all():
        raise _BadScan(f"path: {str(p)!r}: {ds.name} holds NaN or Inf")
    return values * scale


def _read_nxtomo(p: Path, f, entry: str) -> Scan:
    g = f[entry]
    data = _find(g, _NX_DATA)
    n, rows, cols = _frames_dataset(p, data)
    key_ds = _find(g, _NX_KEY)
    if key_ds is None:
        raise _BadScan(f"path: {str(p)!r}: NXtomo entry {entry} has no image_key (looked for {', '.join(_NX_KEY)})")
    keys = np.asarray(key_ds[()]).ravel()
    if keys.size != n:
        raise _BadScan(f"path: {str(p)!r}: {key_ds.name} has {keys.size} values but {data.name} has {n} frames")
    if not np.issubdtype(keys.dtype, np.number) or not np.isin(keys, (PROJECTION, FLAT, DARK, INVALID)).all():
        bad = keys[~np.isin(keys, (PROJECTION, FLAT, DARK, INVALID))] if keys.dtype.kind in "iufb" else keys
        raise _BadScan(
            f"path: {str(p)!r}: {key_ds.name} holds {np.asarray(bad[0]).item()!r}; "
            "expected 0 (projection), 1 (flat), 2 (dark) or 3 (invalid)"
        )
    keys = keys.astype(np.int64)
    proj = np.flatnonzero(keys == PROJECTION)
    if proj.size == 0:
        raise _BadScan(f"path: {str(p)!r}: no projections in {data.name} (no image_key 0 among {n} frames)")
    angle_ds = _find(g, _NX_ANGLE)
    angles = None if angle_ds is None else _angles(p, angle_ds, n)[proj]
    return _scan(
        p,
        data,
        proj,
        np.flatnonzero(keys == FLAT),
        np.flatnonzero(keys == DARK),
        angles,
        {"layout": "nxtomo", "entry": entry, "image_key": keys},
    )


def _read_dxchange(p: Path, f) -> Scan:
    import h5py

    data = f.get("/exchange/data")
    if not isinstance(data, h5py.Dataset):
        raise _BadScan(f"path: {str(p)!r}: no /exchange/data (DXchange projections)")
    n, rows, cols = _frames_dataset(p, data)
    if n == 0:
        raise _BadScan(f"path: {str(p)!r}: no projections in /exchange/data (0 frames)")
    stacks = []
    for name in ("/exchange/data_white", "/exchange/data_dark"):
        ds = f.get(name)
        if ds is None:
            stacks.append(np.empty((0, rows, cols), data.dtype))
            continue
        if not isinstance(ds, h5py.Dataset):
            raise _BadScan(f"path: {str(p)!r}: expected a dataset at {name}, found a group")
        shape = (1,) + ds.shape if ds.ndim == 2 else ds.shape  # one 2D frame is allowed
        if ds.ndim != 2:
            _frames_dataset(p, ds)
        if shape[1:] != (rows, cols):
            raise _BadScan(f"path: {str(p)!r}: {name} frames are {shape[1:]}, the projections {(rows, cols)}")
        stacks.append(np.asarray(ds[()]).reshape(shape))
    theta = f.get("/exchange/theta")
    angles = None if theta is None else _angles(p, theta, n)
    scan = _scan(p, data, np.arange(n), None, None, angles, {"layout": "dxchange"})
    return scan._replace(flats=stacks[0], darks=stacks[1])


def _scan(p: Path, data, proj, flats, darks, angles, metadata) -> Scan:
    frame_shape = data.shape[1:]

    def eager(idx):
        if idx is None:
            return None
        return FrameStack(p, data.name, idx, frame_shape, data.dtype)[:]

    if angles is not None:
        angles.setflags(write=False)
    return Scan(
        projections=FrameStack(p, data.name, proj, frame_shape, data.dtype),
        flats=eager(flats),
        darks=eager(darks),
        angles=angles,
        metadata={"path": str(p), "dataset": data.name, **metadata},
    )
