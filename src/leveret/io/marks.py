"""What an output may replace: never an input, and with ``overwrite`` only an
output leveret can tell it wrote, in the same format.

Every volume leveret writes carries a mark, :data:`SOFTWARE` (``"leveret"``):

- HDF5: the file's root attribute ``software``;
- zarr: the array's attribute ``software``;
- TIFF, one file or each slice of a folder: the Software tag (305);
- a folder of slices holds nothing but ``slice_NNNNN.tif`` files, each marked;
- ``.npy`` has no place for a mark: any NPY file counts as one of that format.

Outputs written before the mark existed are recognised where their metadata
said ``software = "leveret"`` (the volumes of :func:`leveret.execution.outofcore.reconstruct_to_file`).

:func:`replace_refusal` says why an existing path must not be replaced (None
if it may be); :func:`check_not_input` refuses an output that is an input,
lies inside an input folder or holds an input, by real path and by file
identity (a hard link to the input is the input).
"""

from __future__ import annotations

import glob
import json
import os
import re
from pathlib import Path
from collections.abc import Iterable

#: The mark: HDF5/zarr attribute ``software``, TIFF Software tag.
SOFTWARE = "leveret"

#: Output kinds :func:`replace_refusal` knows; None is "a file of any kind" (never a folder).
KINDS = ("npy", "tiff", "tiff-stack", "hdf5", "zarr")

_SLICE = re.compile(r"slice_\d{5,}\.tif")
_WHAT = {
    "npy": "a .npy file",
    "tiff": "a TIFF file leveret wrote",
    "tiff-stack": "a folder of slices leveret wrote",
    "hdf5": "an HDF5 file leveret wrote",
    "zarr": "a zarr array leveret wrote",
    None: "a file",
}


def replace_refusal(path: str | os.PathLike, kind: str | None = None) -> str | None:
    """Why ``path`` must not be replaced by an output of ``kind``, or None if it may.

    Parameters
    ----------
    path : str or os.PathLike
        The existing output (nothing there: None).
    kind : {"npy", "tiff", "tiff-stack", "hdf5", "zarr"} or None
        The new output's format; None for any other file (a PNG, a JSON file),
        which replaces a file but never a folder.

    Returns
    -------
    str or None
        A reason such as ``"it is a folder, not an HDF5 file leveret wrote"``.
    """
    if kind not in KINDS and kind is not None:
        raise ValueError(f"kind: expected one of {KINDS} or None, got {kind!r}")
    p = Path(os.fspath(path))
    if not p.exists():
        return None
    if kind == "tiff-stack" or kind == "zarr":
        if not p.is_dir():
            return f"it is a file, not {_WHAT[kind]}"
        return _folder_refusal(p) if kind == "tiff-stack" else _zarr_refusal(p)
    if p.is_dir():
        return f"it is a folder, not {_WHAT[kind]}"
    if not p.is_file():
        return "it is not a regular file"
    if kind == "npy":
        return _npy_refusal(p)
    if kind == "tiff":
        return _tiff_refusal(p)
    if kind == "hdf5":
        return _hdf5_refusal(p)
    return None


def _npy_refusal(p: Path) -> str | None:
    import numpy as np

    fmt = np.lib.format
    try:
        with open(p, "rb") as fh:
            version = fmt.read_magic(fh)
            header = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(version)
            if header is not None:  # a later version: its magic string is enough
                header(fh)
    except (OSError, ValueError, SyntaxError):
        return "it is not a .npy file"
    return None


def _tiff_software(p: Path) -> str | None:
    """The TIFF's Software tag (or ``software`` in its JSON description); ValueError if no TIFF."""
    import tifffile

    try:
        with tifffile.TiffFile(p) as tif:
            page = tif.pages[0]
            software = page.software
            try:
                described = json.loads(page.description or "{}").get("software")
            except (ValueError, AttributeError):
                described = None
    except Exception as exc:  # anything tifffile cannot parse is not a TIFF
        raise ValueError(str(exc)) from None
    return SOFTWARE if SOFTWARE in (software, described) else (software or None)


def _tiff_refusal(p: Path) -> str | None:
    try:
        software = _tiff_software(p)
    except ValueError:
        return "it is not a TIFF file"
    if software != SOFTWARE:
        return f"it is a TIFF file leveret did not write (its Software tag is {software!r})"
    return None


def _hdf5_refusal(p: Path) -> str | None:
    import h5py

    if not h5py.is_hdf5(p):
        return "it is not an HDF5 file"
    try:
        with h5py.File(p, "r") as f:
            if _text(f.attrs.get("software")) == SOFTWARE:
                return None
            found = []
            f.visititems(
                lambda name, obj: (
                    found.append(name)
                    if isinstance(obj, h5py.Dataset) and _text(obj.attrs.get("software")) == SOFTWARE
                    else None
                )
            )
    except Exception as exc:  # damaged, or locked by another writer
        return f"it is an HDF5 file that cannot be read ({exc})"
    return None if found else "it is an HDF5 file leveret did not write (no software = 'leveret' attribute)"


def _text(value) -> str | None:
    return value.decode(errors="replace") if isinstance(value, bytes) else value if isinstance(value, str) else None


def _zarr_refusal(p: Path) -> str | None:
    others = sorted(e.name for e in p.iterdir() if e.name not in ("zarr.json", "c"))
    if others:
        return f"it holds files other than a zarr array's ({_listing(others)})"
    try:
        meta = json.loads((p / "zarr.json").read_text())
    except (OSError, ValueError):
        return "it is a folder without a zarr array's zarr.json, not a zarr array leveret wrote"
    if meta.get("node_type") != "array" or (meta.get("attributes") or {}).get("software") != SOFTWARE:
        return "it is a zarr store leveret did not write (no software = 'leveret' attribute)"
    return None


def _folder_refusal(p: Path) -> str | None:
    entries = sorted(e.name for e in p.iterdir())
    others = [name for name in entries if not _SLICE.fullmatch(name) or not (p / name).is_file()]
    if others:
        return f"it holds files other than leveret's slice_NNNNN.tif ({_listing(others)})"
    for name in entries:
        try:
            software = _tiff_software(p / name)
        except ValueError:
            return f"its {name!r} is not a TIFF file"
        if software != SOFTWARE:
            return f"its slice {name!r} was not written by leveret (its Software tag is {software!r})"
    return None


def _listing(names: list[str], most: int = 3) -> str:
    shown = ", ".join(repr(n) for n in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


# -- never an input ----------------------------------------------------------------------------


def input_paths(source: str | os.PathLike) -> list[Path]:
    """The files or folders an input names: ``file.h5:/dataset`` is the file, a
    glob its matches, a path itself (nothing where none exists)."""
    from ._common import split_dataset

    text = os.fspath(source)
    try:
        p, _ = split_dataset(text, None)
    except ValueError:
        p = Path(text)
    if p.exists() or p.is_symlink():
        return [p]
    if any(c in text for c in "*?["):
        return [Path(f) for f in sorted(glob.glob(text))]
    return []


def check_not_input(
    output: str | os.PathLike,
    inputs: Iterable[tuple[str, str | os.PathLike | None]],
    *,
    flag: str = "output",
    inside: bool = True,
) -> None:
    """Raise ValueError, naming ``flag``, if ``output`` is one of ``inputs``, holds
    one (an output folder above it) or, with ``inside``, lies inside an input folder.

    Parameters
    ----------
    output : str or os.PathLike
        The output path (it need not exist).
    inputs : iterable of (what, path)
        Each input with the words that name it in a message (``"the input"``,
        ``"--flat"``); paths as :func:`input_paths` reads them, None skipped.
    flag : str
        The output's name in the message.
    inside : bool
        Also refuse an output inside an input folder (a volume written into
        a folder of projections becomes part of that input).
    """
    out = Path(os.fspath(output))
    out_real = Path(os.path.realpath(out))
    try:
        out_stat = os.stat(out)
    except OSError:
        out_stat = None
    for what, source in inputs:
        if source is None:
            continue
        for p in input_paths(source):
            real = Path(os.path.realpath(p))
            same = real == out_real
            if not same and out_stat is not None:
                try:
                    st = os.stat(p)
                    same = (st.st_dev, st.st_ino) == (out_stat.st_dev, out_stat.st_ino)
                except OSError:
                    pass
            if same:
                kind = "folder" if real.is_dir() else "file"
                raise ValueError(
                    f"{flag}: {os.fspath(output)!r} is the same {kind} as {what} {str(p)!r}; "
                    "leveret never writes over its input: give another path"
                )
            if inside and real.is_dir() and _under(out_real, real):
                raise ValueError(
                    f"{flag}: {os.fspath(output)!r} is inside the folder of {what} {str(p)!r}; "
                    "leveret never writes into its input: give another path"
                )
            if _under(real, out_real):
                raise ValueError(
                    f"{flag}: {os.fspath(output)!r} holds {what} {str(p)!r}; leveret never "
                    "replaces its input: give another path"
                )


def _under(path: Path, folder: Path) -> bool:
    """``path`` lies strictly inside ``folder`` (both real paths)."""
    return path != folder and folder in path.parents
