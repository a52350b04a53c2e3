"""Readers: one function per format behind :func:`read_array`."""

from __future__ import annotations

import glob
import numbers
import os
from pathlib import Path
from typing import Callable

import numpy as np

from ._common import HDF5_EXTS, TIFF_EXTS, library_errors, natural_key, split_dataset, suffix, tiff_files


def read_array(path: str | os.PathLike, *, dataset: str | None = None) -> np.ndarray:
    """Read an image, a stack of images or an array from disk into memory.

    What ``path`` is decides the reader:

    - a folder: every ``*.tif``/``*.tiff`` in it (hidden files skipped), sorted
      naturally (``raw_2`` before ``raw_10``), each a 2D image, stacked along
      axis 0 into ``(n_images, n_rows, n_cols)``;
    - a glob pattern (``"scan/raw_*.tiff"``): the matching TIFF files, likewise;
    - ``.tif``/``.tiff``: one TIFF, a multi-page one giving ``(n_pages, n_rows, n_cols)``;
    - ``.npy``: a NumPy array (no pickles);
    - a ``.zarr`` folder: a zarr array (v2 or v3);
    - ``.h5``/``.hdf5``/``.hdf``/``.nxs``: the HDF5 dataset ``dataset``, also
      given inline as ``"file.h5:/entry/data"``. Without one, ``/data`` is used
      if present (what :func:`write_array` writes), else the file's only dataset.

    Parameters
    ----------
    path : str or os.PathLike
        File, folder, glob pattern or ``"file.h5:/dataset"``.
    dataset : str, optional
        Path of the dataset inside an HDF5 file.

    Returns
    -------
    numpy.ndarray
        The data in its stored dtype and shape (C order; for images, rows then
        columns, i.e. ``(n_rows, n_cols)`` with columns fastest).

    Raises
    ------
    ValueError
        Naming ``path`` or ``dataset``: a missing file, an unknown extension,
        an empty folder or pattern, images of differing shapes or dtypes in a
        stack, a missing dataset, or a file its reader cannot parse.
    TypeError
        Naming ``path`` when it is not a str or os.PathLike, ``dataset`` when
        it is not a str.
    """
    p, dataset = split_dataset(path, dataset)
    text = os.fspath(path)
    if not p.exists() and any(c in text for c in "*?["):
        _no_dataset(dataset, "a glob pattern")
        files = sorted((f for f in glob.glob(text) if os.path.isfile(f)), key=natural_key)
        if not files:
            raise ValueError(f"path: the pattern {text!r} matches no file")
        return read_tiff_stack([Path(f) for f in files], text)
    if p.is_dir() and suffix(p) == ".zarr":
        _no_dataset(dataset, "a zarr store")
        return read_zarr(p)
    if p.is_dir():
        _no_dataset(dataset, "a folder")
        return read_tiff_stack(tiff_files(p), str(p))
    if not p.exists():
        raise ValueError(f"path: no such file or folder: {str(p)!r}")
    reader = _READERS.get(suffix(p))
    if reader is None:
        raise ValueError(
            f"path: unknown extension {p.suffix!r} of {str(p)!r}; expected a folder, a glob "
            f"pattern or one of {', '.join(sorted(_READERS))}"
        )
    if suffix(p) not in HDF5_EXTS:
        _no_dataset(dataset, f"a {p.suffix} file")
    return reader(p, dataset)


def _no_dataset(dataset: str | None, what: str) -> None:
    if dataset is not None:
        raise ValueError(f"dataset: only HDF5 files have datasets, but path is {what} (dataset={dataset!r})")


def read_npy(path: Path, dataset: str | None = None) -> np.ndarray:
    with library_errors(path, "a .npy file"):
        return np.load(path, allow_pickle=False)


def read_tiff(path: Path, dataset: str | None = None) -> np.ndarray:
    import tifffile

    with library_errors(path, "a TIFF file"):
        image = tifffile.imread(path)
    if image.size == 0:  # a header whose first page offset points nowhere: no image, not an empty one
        raise ValueError(f"path: cannot read {str(path)!r} as a TIFF file: it holds no image data")
    return image


def read_tiff_stack(files: list[Path], source: str) -> np.ndarray:
    """Stack 2D TIFF images along axis 0; all must share shape and dtype."""
    first = read_tiff(files[0])
    if first.ndim != 2:
        raise ValueError(f"path: {source!r}: expected 2D images, but {files[0].name} has shape {first.shape}")
    # Preallocate rather than np.stack a list: halves peak memory on big scans.
    out = np.empty((len(files),) + first.shape, dtype=first.dtype)
    out[0] = first
    for i, f in enumerate(files[1:], start=1):
        img = read_tiff(f)
        if img.shape != first.shape or img.dtype != first.dtype:
            raise ValueError(
                f"path: {source!r}: images differ: {files[0].name} is {first.shape} {first.dtype}, "
                f"{f.name} is {img.shape} {img.dtype}"
            )
        out[i] = img
    return out


def read_hdf5(path: Path, dataset: str | None = None) -> np.ndarray:
    import h5py

    from .hdf5 import needs_own_decoder, read_dataset

    with library_errors(path, "an HDF5 file"):
        f = h5py.File(path, "r")
    with f:
        if dataset is None:
            names: list[str] = []
            f.visititems(lambda name, obj: names.append("/" + name) if isinstance(obj, h5py.Dataset) else None)
            if "/data" in names:
                dataset = "/data"
            elif len(names) == 1:
                dataset = names[0]
            else:
                raise ValueError(
                    f"dataset: {str(path)!r} holds {len(names)} datasets and no '/data'; name one "
                    f"(dataset= or 'file.h5:/inner/path'); found {_listing(names)}"
                )
        obj = f.get(dataset)
        if not isinstance(obj, h5py.Dataset):
            raise missing_dataset(f, path, dataset)
        with library_errors(path, "an HDF5 file"):
            if needs_own_decoder(obj):  # a Blosc volume without hdf5plugin: decoded here
                return read_dataset(path, dataset)
            return np.asarray(obj[()])


def missing_dataset(f, path, dataset: str) -> ValueError:
    """The error for a ``dataset`` path that names no dataset in the open HDF5 file ``f``: what
    is there instead, the closest dataset path, and the datasets the file holds with their shapes."""
    import difflib

    import h5py

    obj = f.get(dataset)
    found = "a group" if isinstance(obj, h5py.Group) else "nothing"
    shapes: dict[str, str] = {}

    def visit(name, o):  # returns None: visititems stops at the first other value
        if isinstance(o, h5py.Dataset):
            shapes["/" + name] = f"{o.shape} {o.dtype}"

    f.visititems(visit)
    close = difflib.get_close_matches("/" + str(dataset).lstrip("/"), list(shapes), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    listing = _listing([f"{name!r} {shape}" for name, shape in shapes.items()])
    return ValueError(
        f"dataset: expected a dataset at {dataset!r} in {str(path)!r}, found {found}{hint} (datasets there: {listing})"
    )


def _hdf5_default_dataset(path: Path, dataset: str | None) -> str | None:
    """``dataset``, or the one to read when none is named: ``/data`` if present,
    else the file's only dataset (ValueError naming ``dataset`` otherwise)."""
    import h5py

    if dataset is not None:
        return dataset
    with library_errors(path, "an HDF5 file"):
        f = h5py.File(path, "r")
    with f:
        names: list[str] = []
        f.visititems(lambda name, obj: names.append("/" + name) if isinstance(obj, h5py.Dataset) else None)
    if "/data" in names:
        return "/data"
    if len(names) == 1:
        return names[0]
    raise ValueError(
        f"dataset: {str(path)!r} holds {len(names)} datasets and no '/data'; name one "
        f"(dataset= or 'file.h5:/inner/path'); found {_listing(names)}"
    )


def open_zarr(path: Path):
    """The zarr array stored at ``path`` (lazy; ValueError naming ``path`` if it is none)."""
    try:
        import zarr
    except ImportError:
        raise ValueError(
            f"path: {str(path)!r} is a zarr store, but zarr is not installed (pip install 'leveret[io]')"
        ) from None
    try:
        arr = zarr.open_array(str(path), mode="r")
    except Exception as exc:  # zarr raises its own error types for bad stores
        raise ValueError(f"path: cannot read {str(path)!r} as a zarr array: {exc}") from exc
    return arr


def read_zarr(path: Path, dataset: str | None = None) -> np.ndarray:
    arr = open_zarr(path)
    try:
        return np.asarray(arr[...])
    except Exception as exc:
        raise ValueError(f"path: cannot read {str(path)!r} as a zarr array: {exc}") from exc


def read_metadata(path: str | os.PathLike, *, dataset: str | None = None) -> dict:
    """Metadata stored with a volume by leveret's writers.

    HDF5: the dataset's attributes (JSON strings decoded); zarr: the array's
    attributes; TIFF (one file, or the first slice of a folder): the JSON
    description; ``.npy``: none (an empty dict).

    Raises
    ------
    ValueError
        Naming ``path`` or ``dataset``, as :func:`read_array`.
    """
    import json

    p, dataset = split_dataset(path, dataset)
    if not p.exists():
        raise ValueError(f"path: no such file or folder: {str(p)!r}")
    ext = suffix(p)
    if p.is_dir() and ext == ".zarr":
        return dict(open_zarr(p).attrs)
    if ext in HDF5_EXTS:
        import h5py

        dataset = _hdf5_default_dataset(p, dataset)
        with library_errors(p, "an HDF5 file"), h5py.File(p, "r") as f:
            out = {}
            for k, val in f[dataset].attrs.items():
                if isinstance(val, bytes):
                    val = val.decode()
                if isinstance(val, str):
                    try:
                        val = json.loads(val)
                    except ValueError:
                        pass
                out[k] = (
                    val.tolist()
                    if isinstance(val, np.ndarray)
                    else (val.item() if isinstance(val, np.generic) else val)
                )
            return out
    if p.is_dir():
        p = tiff_files(p)[0]
        ext = suffix(p)
    if ext in TIFF_EXTS:
        import tifffile

        with library_errors(p, "a TIFF file"), tifffile.TiffFile(p) as t:
            text = t.pages[0].description or ""
        try:
            meta = json.loads(text)
        except ValueError:
            return {}
        if isinstance(meta, dict):
            meta.pop("shape", None)
            meta.pop("slice", None)
            return meta
        return {}
    return {}


def read_raw(path: str | os.PathLike, *, dtype, shape, offset: int = 0, order: str = "C") -> np.memmap:
    """Memory-map a headerless binary file as an array of known dtype and shape.

    Nothing is read up front: the returned read-only :class:`numpy.memmap`
    pages data in as it is indexed, so ``read_raw(...)[k]`` touches one image
    of a large stack only. Bytes after the array (a trailer) are ignored.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    dtype : str or numpy.dtype
        Element type, with its byte order where it matters: ``"<u2"`` (little
        endian uint16), ``">f4"`` (big endian float32), ``"uint8"``; a plain
        ``"uint16"`` means the machine's byte order.
    shape : int or tuple of int
        Array shape, every size positive; for a stack of images
        ``(n_images, n_rows, n_cols)``.
    offset : int
        Bytes to skip at the start of the file (a header), 0 or more.
    order : {"C", "F"}
        Memory order of the stored data: ``"C"`` when the last axis varies
        fastest (columns of a row-major image), ``"F"`` when the first does.

    Returns
    -------
    numpy.memmap
        Read-only view of ``shape`` and ``dtype``; ``np.array(result)`` copies
        it into memory.

    Raises
    ------
    ValueError
        Naming ``path`` (missing, not a file, or shorter than
        ``offset + prod(shape) * itemsize`` bytes: expected and found sizes
        are given), ``dtype`` (not a NumPy dtype, or one without a fixed size
        such as ``object`` or ``"U"``), ``shape``, ``offset`` or ``order``.
    TypeError
        Naming ``path`` when it is not a str or os.PathLike.
    """
    try:
        text = os.fspath(path)
    except TypeError:
        text = None
    if not isinstance(text, str):
        raise TypeError(f"path: expected a non-empty str or os.PathLike path, got {type(path).__name__}")
    if not text:
        raise ValueError(f"path: expected a non-empty str or os.PathLike path, got {path!r}")
    p = Path(text)
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"dtype: expected a NumPy dtype such as '<u2' or 'float32', got {dtype!r} ({exc})") from None
    if dt.hasobject or dt.itemsize == 0:
        raise ValueError(f"dtype: expected a fixed-size, non-object dtype, got {dt!r}")
    shape = _raw_shape(shape)
    if isinstance(offset, bool) or not isinstance(offset, numbers.Integral) or offset < 0:
        raise ValueError(f"offset: expected an integer number of bytes, 0 or more, got {offset!r}")
    if order not in ("C", "F"):
        raise ValueError(f"order: expected 'C' or 'F', got {order!r}")
    if not p.is_file():
        what = "is not a file" if p.exists() else "does not exist"
        raise ValueError(f"path: {text!r} {what}")
    needed = int(offset) + int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    found = p.stat().st_size
    if found < needed:
        raise ValueError(
            f"path: {text!r} is too short (truncated?): shape {shape} of {dt} at offset {int(offset)} "
            f"needs {needed} bytes, the file has {found}"
        )
    with library_errors(p, "raw binary"):
        return np.memmap(p, dtype=dt, mode="r", offset=int(offset), shape=shape, order=order)


def _raw_shape(shape) -> tuple[int, ...]:
    seq = (shape,) if np.ndim(shape) == 0 and not isinstance(shape, (str, bytes)) else shape
    try:
        seq = tuple(seq)
    except TypeError:
        raise ValueError(f"shape: expected a positive int or a tuple of them, got {shape!r}") from None
    if not seq or any(isinstance(n, bool) or not isinstance(n, numbers.Integral) or n <= 0 for n in seq):
        raise ValueError(f"shape: expected a positive int or a non-empty tuple of them, got {shape!r}")
    return tuple(int(n) for n in seq)


def _listing(names: list[str], limit: int = 10) -> str:
    if not names:
        return "none"
    more = f" ... ({len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


# Extension -> reader(path, dataset). New formats (zarr, NeXus-aware, lazy
# chunked readers) plug in here.
_READERS: dict[str, Callable[[Path, str | None], np.ndarray]] = {
    ".npy": read_npy,
    ".zarr": read_zarr,
    **{ext: read_tiff for ext in TIFF_EXTS},
    **{ext: read_hdf5 for ext in HDF5_EXTS},
}
