"""Writers: one function per format behind :func:`write_array`, all atomic."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np

from ._common import TIFF_EXTS, split_dataset, suffix
from .atomic import atomic_output
from .marks import SOFTWARE

# Classic TIFF stores 32-bit offsets and many readers treat them as signed:
# switch to BigTIFF a little below 2 GiB, leaving room for IFDs and metadata.
BIGTIFF_THRESHOLD = 2**31 - 2**25

DEFAULT_DATASET = "/data"


def write_array(path: str | os.PathLike, array, *, dataset: str | None = None, overwrite: bool = False) -> Path:
    """Write an array atomically, in the format its path names.

    - ``.npy``: NumPy format;
    - ``.tif``/``.tiff``: one TIFF, multi-page for 3D arrays (page = ``array[k]``),
      BigTIFF when the data exceed about 2 GiB;
    - a path ending in ``/`` or without extension: a folder of 2D TIFFs
      ``slice_00000.tif``, ``slice_00001.tif``, ... one per ``array[k]``;
    - ``.h5``/``.hdf5``/``.hdf``: an HDF5 file holding the single dataset
      ``dataset`` (default ``"/data"``; also ``"file.h5:/inner/path"``).
      The whole file is written anew: other datasets of an existing file are
      not kept.

    TIFF and HDF5 outputs carry leveret's mark (:mod:`leveret.io.marks`), so
    that ``overwrite`` can tell them from files it must not delete.

    The output appears complete or not at all: it is written under a hidden
    temporary name in the same folder, fsynced and renamed into place (see
    :func:`atomic_output`); any failure removes the temporary.

    Parameters
    ----------
    path : str or os.PathLike
        Output path; its folder must exist.
    array : array_like
        Numeric or boolean data (a CuPy array is copied to the host). TIFF
        files take 2D or 3D arrays, folders of slices 3D ones.
    dataset : str, optional
        HDF5 dataset path.
    overwrite : bool
        Replace an existing output of the same format that leveret wrote
        (any ``.npy`` file); otherwise an existing ``path`` is an error.

    Returns
    -------
    pathlib.Path
        The written file or folder.

    Raises
    ------
    ValueError
        Naming ``path`` (existing output, missing folder, unknown extension),
        ``array`` (unsupported dtype or number of dimensions) or ``dataset``.
    """
    p, dataset = split_dataset(path, dataset)
    text = os.fspath(path)
    # Checked on the text: pathlib drops a trailing "/".
    as_folder = text.endswith(("/", os.sep)) or p.suffix == ""
    kind = "folder" if as_folder else suffix(p)
    writer = _WRITERS.get(kind)
    if writer is None:
        raise ValueError(
            f"path: unknown extension {p.suffix!r} of {text!r}; expected one of "
            f"{', '.join(sorted(k for k in _WRITERS if k != 'folder'))}, or a folder "
            "(a path ending in '/' or without extension)"
        )
    if dataset is not None and writer is not write_hdf5:
        raise ValueError(f"dataset: only HDF5 files have datasets, but path is {text!r}")
    array = _host_array(array)
    _check_ndim(writer, array)
    with atomic_output(p, overwrite=overwrite, kind=_KINDS[writer]) as tmp:
        writer(tmp, array, dataset)
    return p


def _host_array(array) -> np.ndarray:
    if type(array).__module__.startswith("cupy"):
        array = array.get()
    array = np.asarray(array)
    if array.dtype.kind not in "biufc":
        raise ValueError(f"array: expected numeric or boolean data, got dtype {array.dtype}")
    return array


def _check_ndim(writer, array: np.ndarray) -> None:
    allowed = {write_tiff: (2, 3), write_tiff_folder: (3,)}.get(writer)
    if allowed and array.ndim not in allowed:
        what = "a TIFF file" if writer is write_tiff else "a folder of TIFF slices"
        raise ValueError(f"array: {what} takes {' or '.join(map(str, allowed))}D arrays, got shape {array.shape}")


def write_npy(tmp: Path, array: np.ndarray, dataset: str | None = None) -> None:
    # A file object, not a name: np.save would append ".npy" to the temporary name.
    with open(tmp, "xb") as f:
        np.save(f, array, allow_pickle=False)


def write_tiff(tmp: Path, array: np.ndarray, dataset: str | None = None) -> None:
    import tifffile

    # minisblack: a 3D array is pages of grey images, never read as RGB.
    tifffile.imwrite(tmp, array, photometric="minisblack", software=SOFTWARE, bigtiff=array.nbytes > BIGTIFF_THRESHOLD)


def write_tiff_folder(tmp: Path, array: np.ndarray, dataset: str | None = None) -> None:
    import tifffile

    tmp.mkdir()
    width = max(5, len(str(len(array) - 1)))
    for k, image in enumerate(array):
        tifffile.imwrite(
            tmp / f"slice_{k:0{width}d}.tif",
            image,
            photometric="minisblack",
            software=SOFTWARE,
            bigtiff=image.nbytes > BIGTIFF_THRESHOLD,
        )


def write_hdf5(tmp: Path, array: np.ndarray, dataset: str | None = None) -> None:
    import h5py

    with h5py.File(tmp, "w-") as f:
        f.attrs["software"] = SOFTWARE
        f.create_dataset(dataset or DEFAULT_DATASET, data=array)


# Each writer's output kind, for what overwrite may replace (leveret.io.marks).
_KINDS = {write_npy: "npy", write_tiff: "tiff", write_tiff_folder: "tiff-stack", write_hdf5: "hdf5"}

# Kind (extension, or "folder") -> writer(temporary path, array, dataset).
_WRITERS: dict[str, Callable[[Path, np.ndarray, str | None], None]] = {
    ".npy": write_npy,
    **{ext: write_tiff for ext in TIFF_EXTS},
    ".h5": write_hdf5,
    ".hdf5": write_hdf5,
    ".hdf": write_hdf5,
    "folder": write_tiff_folder,
}
