"""Helpers shared by the readers and writers: path parsing, error wrapping, TIFF
folders and the lazy stacks' indexing."""

from __future__ import annotations

import contextlib
import os
import re
import struct
import tokenize
from pathlib import Path
from typing import Iterator

import numpy as np

TIFF_EXTS = (".tif", ".tiff")
HDF5_EXTS = (".h5", ".hdf5", ".hdf", ".nxs")

# "scan.h5:/entry/data": split at the first HDF5 extension followed by ":" so
# that a Windows drive letter ("C:\\scan.h5") is never mistaken for one.
_INLINE_DATASET = re.compile(r"^(.+?\.(?:h5|hdf5|hdf|nxs)):(.*)$", re.IGNORECASE)


def split_dataset(path: str | os.PathLike, dataset: str | None) -> tuple[Path, str | None]:
    """Split ``"file.h5:/inner/path"`` into (file, dataset).

    ``dataset`` given both inline and as a keyword is an error, even when the
    two agree, so that a typo in one of them cannot pass unnoticed.
    """
    try:
        text = os.fspath(path)
    except TypeError:
        text = None
    if not isinstance(text, str):
        raise TypeError(f"path: expected a str or os.PathLike path, got {type(path).__name__}")
    if not text:
        raise ValueError("path: expected a path, got an empty string")
    m = _INLINE_DATASET.match(text)
    if m and not os.path.exists(text):
        if dataset is not None:
            raise ValueError(
                f"dataset: given both inline in path ({m.group(2)!r}) and as dataset={dataset!r}; give one"
            )
        return Path(m.group(1)), (m.group(2) or None)
    if dataset is not None and not isinstance(dataset, str):
        raise TypeError(f"dataset: expected a str (an HDF5 path such as '/entry/data'), got {dataset!r}")
    return Path(text), dataset


def suffix(path: Path) -> str:
    return path.suffix.lower()


def natural_key(name: str) -> tuple:
    """Sort key under which "raw_2" comes before "raw_10"."""
    parts = re.split(r"(\d+)", name)
    # Even indices are text and odd ones digits, so tuples compare pairwise
    # str-with-str and int-with-int; the raw name breaks ties ("a01" vs "a1").
    key = tuple(int(p) if i % 2 else p.lower() for i, p in enumerate(parts))
    return key, name


@contextlib.contextmanager
def library_errors(path: Path, what: str) -> Iterator[None]:
    """Turn tifffile/h5py/numpy failures on a bad file into a ValueError naming ``path``."""
    try:
        yield
    except (OSError, ValueError, KeyError, EOFError, SyntaxError, tokenize.TokenError, struct.error) as exc:
        # EOFError, SyntaxError, TokenError: NumPy parsing a damaged .npy header;
        # struct.error: tifffile unpacking a truncated header.
        raise ValueError(f"path: cannot read {str(path)!r} as {what}: {exc}") from exc


class LazyStack:
    """What the lazy array-likes share (TiffStack, FrameStack, HDF5 datasets):
    ``len`` and ``np.asarray`` read through ``self[:]``; ``shape`` set by the
    subclass. Indexing: an index with Ellipsis or None reads everything and
    indexes that; otherwise the subclass's ``_frames_at(first, rest)`` reads
    the frames ``first`` picks, indexed by ``rest`` (at most two indices)."""

    def __getitem__(self, key) -> np.ndarray:
        key = key if isinstance(key, tuple) else (key,)
        if any(k is Ellipsis or k is None for k in key):
            return self[:][key]
        if len(key) > 3:
            raise IndexError(f"too many indices for a 3D stack: {len(key)}")
        return self._frames_at(key[0], key[1:])

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        out = self[:]
        return out if dtype is None else out.astype(dtype, copy=False)


def tiff_files(folder: Path) -> list[Path]:
    """The TIFF images of a folder (hidden files left out), in natural order;
    ValueError naming ``path`` if there is none."""
    files = sorted(
        (f for f in folder.iterdir() if suffix(f) in TIFF_EXTS and not f.name.startswith(".") and f.is_file()),
        key=lambda f: natural_key(f.name),
    )
    if not files:
        raise ValueError(f"path: the folder {str(folder)!r} holds no .tif/.tiff file")
    return files
