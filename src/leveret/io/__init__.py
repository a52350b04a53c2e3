"""Reading and writing projections, volumes and angles.

Formats: folders (or glob patterns) of 2D TIFFs, single and multi-page TIFF,
``.npy`` and HDF5 datasets. Every writer is atomic: an output exists complete
or not at all. Readers return NumPy arrays in their stored dtype; stacks are
``(n_images, n_rows, n_cols)`` as in CONVENTIONS.md.

- :func:`read_array` / :func:`write_array`: arrays, dispatched on the path.
- :func:`read_angles`: angles in radians from text, ``.npy`` or ``start:stop:count``.
- :func:`atomic_output`: the all-or-nothing rename, for any other output.
"""
from .angles import read_angles
from .atomic import atomic_output
from .readers import read_array
from .writers import write_array

__all__ = ["atomic_output", "read_angles", "read_array", "write_array"]
