"""Reading and writing projections, volumes and angles.

Formats: folders (or glob patterns) of 2D TIFFs, single and multi-page TIFF,
``.npy`` and HDF5 datasets. Every writer is atomic: an output exists complete
or not at all. Readers return NumPy arrays in their stored dtype; stacks are
``(n_images, n_rows, n_cols)`` as in docs/conventions.md.

- :func:`read_array` / :func:`write_array`: arrays, dispatched on the path.
- :func:`read_raw`: headerless binary, memory-mapped, of a given dtype/shape/offset.
- :func:`read_scan`: projections (lazy), flats, darks and angles from NeXus
  NXtomo or DXchange files, as a :class:`Scan`.
- :func:`read_angles`: angles in radians from text, ``.npy`` or ``start:stop:count``.
- :func:`open_array`: the same paths, lazily (memory-mapped or read per index).
- :class:`SlabWriter`: volumes written slab by slab (TIFF folder, BigTIFF,
  HDF5, zarr, ``.npy``), atomic, resumable and locked against a second
  writer (:class:`OutputBusyError`); a full disk raises
  :class:`OutputSpaceError`; :func:`read_metadata` reads back what it stored.
- :func:`atomic_output`: the all-or-nothing rename, for any other output.
- :func:`input_fingerprint`: what identifies an input file or folder for a resume.
- :func:`read_matrices`, :func:`read_xtekct`: cone-beam geometries from files
  (3x4 matrices row by row; Nikon XTek CT parameter files).
- :mod:`.bands`, :mod:`.hdf5`, :mod:`.codecs`, :mod:`.quantize`: bands of rows
  read on many threads; HDF5 written around h5py's lock; chunk codecs;
  outputs stored as float16 or integers over a range.
"""

from .angles import read_angles
from .atomic import OutputBusyError, OutputLock, OutputSpaceError, atomic_output
from .lazy import TiffStack, open_array
from .readers import read_array, read_metadata, read_raw
from .scanners import XtekScan, read_matrices, read_xtekct
from .scans import FrameStack, Scan, read_scan
from .slabs import SlabWriter, input_fingerprint, output_format, write_slabs
from .writers import write_array

__all__ = [
    "FrameStack",
    "OutputBusyError",
    "OutputLock",
    "OutputSpaceError",
    "Scan",
    "SlabWriter",
    "TiffStack",
    "XtekScan",
    "atomic_output",
    "input_fingerprint",
    "open_array",
    "output_format",
    "read_angles",
    "read_array",
    "read_matrices",
    "read_metadata",
    "read_raw",
    "read_scan",
    "read_xtekct",
    "write_array",
    "write_slabs",
]
