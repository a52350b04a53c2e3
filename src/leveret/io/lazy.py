"""Lazy access to arrays on disk: read only the part a slab needs.

:func:`open_array` returns an object with ``shape``, ``dtype``, ``ndim`` and
NumPy-style indexing that reads from disk on indexing, for every format
:func:`leveret.io.read_array` knows. Out-of-core reconstruction reads the
detector rows of one slab, ``stack[:, r0:r1, :]``, through it.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

import numpy as np

from ._common import HDF5_EXTS, TIFF_EXTS, LazyStack, library_errors, natural_key, split_dataset, suffix, tiff_files


class TiffStack(LazyStack):
    """A folder (or glob) of 2D TIFF images as a lazy ``(n_images, n_rows, n_cols)`` stack.

    Uncompressed images are memory-mapped, so reading a band of rows reads
    only those rows; compressed ones are decoded whole, one at a time.
    """

    def __init__(self, files: list[Path], source: str):
        import tifffile

        self.files = list(files)
        self.source = source
        with library_errors(self.files[0], "a TIFF file"), tifffile.TiffFile(self.files[0]) as t:
            page = t.pages[0]
            shape, dtype = tuple(page.shape), np.dtype(page.dtype)
        if len(shape) != 2:
            raise ValueError(f"path: {source!r}: expected 2D images, but {self.files[0].name} has shape {shape}")
        self.shape = (len(self.files),) + shape
        self.dtype = dtype

    ndim = 3

    def __repr__(self) -> str:
        return f"TiffStack({self.source!r}, shape={self.shape}, dtype={self.dtype})"

    def _image(self, k: int, rest: tuple) -> np.ndarray:
        import tifffile

        f = self.files[k]
        with library_errors(f, "a TIFF file"):
            try:
                img = tifffile.memmap(f, mode="r")
            except ValueError:  # compressed or tiled: not mappable
                img = tifffile.imread(f)
        if img.shape != self.shape[1:] or img.dtype != self.dtype:
            raise ValueError(
                f"path: {self.source!r}: images differ: {self.files[0].name} is "
                f"{self.shape[1:]} {self.dtype}, {f.name} is {img.shape} {img.dtype}"
            )
        return np.array(img[rest])

    def _frames_at(self, first, rest: tuple) -> np.ndarray:
        picked = np.arange(self.shape[0])[first]
        if np.ndim(picked) == 0:
            return self._image(int(picked), rest)
        template = np.empty((0,) + self.shape[1:], self.dtype)[(slice(None),) + rest]
        out = np.empty((len(picked),) + template.shape[1:], self.dtype)
        for j, k in enumerate(picked):
            out[j] = self._image(int(k), rest)
        return out


class _H5Dataset(LazyStack):
    """A 3D (or any) HDF5 dataset, opened on each access so no handle stays open."""

    def __init__(self, path: Path, dataset: str):
        import h5py

        from .readers import missing_dataset

        self.path, self.dataset = path, dataset
        missing = None
        with library_errors(path, "an HDF5 file"), h5py.File(path, "r") as f:
            obj = f.get(dataset)
            if isinstance(obj, h5py.Dataset):
                self.shape, self.dtype = tuple(obj.shape), np.dtype(obj.dtype)
            else:
                missing = missing_dataset(f, path, dataset)
        if missing is not None:  # raised here, not wrapped as a file that cannot be read
            raise missing
        self.ndim = len(self.shape)

    def __array__(self, dtype=None, copy=None):
        out = self[()]
        return out if dtype is None else out.astype(dtype, copy=False)

    def __getitem__(self, key):
        import h5py

        from .hdf5 import needs_own_decoder, read_dataset

        with library_errors(self.path, "an HDF5 file"), h5py.File(self.path, "r") as f:
            ds = f[self.dataset]
            if needs_own_decoder(ds):  # a Blosc volume without hdf5plugin: decoded here
                return read_dataset(self.path, self.dataset, key)
            return np.asarray(ds[key])


def open_array(path: str | os.PathLike, *, dataset: str | None = None):
    """Open an array on disk without reading it.

    Same paths as :func:`leveret.io.read_array` (folder or glob of TIFFs,
    ``.tif``, ``.npy``, HDF5 with ``dataset``, ``.zarr``). Indexing reads from
    disk: ``.npy`` and uncompressed TIFFs are memory-mapped, HDF5 and zarr read
    the chunks asked for, folders of TIFFs the images asked for.

    Returns
    -------
    array-like
        With ``shape``, ``dtype``, ``ndim`` and indexing; ``np.asarray(a)``
        reads everything.

    Raises
    ------
    ValueError
        As :func:`leveret.io.read_array` does.
    """
    from .readers import _hdf5_default_dataset, read_array

    p, dataset = split_dataset(path, dataset)
    text = os.fspath(path)
    if not p.exists() and any(c in text for c in "*?["):
        files = sorted((f for f in glob.glob(text) if os.path.isfile(f)), key=natural_key)
        if not files:
            raise ValueError(f"path: the pattern {text!r} matches no file")
        return TiffStack([Path(f) for f in files], text)
    ext = suffix(p)
    if p.is_dir() and ext == ".zarr":
        from .readers import open_zarr

        return open_zarr(p)
    if p.is_dir():
        return TiffStack(tiff_files(p), str(p))
    if not p.exists():
        raise ValueError(f"path: no such file or folder: {str(p)!r}")
    if ext == ".npy":
        with library_errors(p, "a .npy file"):
            return np.load(p, mmap_mode="r", allow_pickle=False)
    if ext in HDF5_EXTS:
        return _H5Dataset(p, _hdf5_default_dataset(p, dataset))
    if ext in TIFF_EXTS:
        import tifffile

        with library_errors(p, "a TIFF file"):
            try:
                return tifffile.memmap(p, mode="r")
            except ValueError:
                pass
    return read_array(path, dataset=dataset)
