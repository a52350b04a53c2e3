"""HDF5 volumes written at the page cache's speed, and HDF5 inputs read in parallel.

h5py serialises every call into the HDF5 library, and HDF5 compresses and
writes a dataset's bytes in the calling thread. So the work goes around HDF5:

- An uncompressed volume is a contiguous dataset whose space is allocated when
  the file is made, never filled (:func:`create_volume`): its bytes lie at
  one offset (:func:`contiguous_offset`), where slabs are written by plain
  parallel ``pwrite`` calls, as into a ``.npy``.
- A compressed volume is chunked. Its chunks are compressed by the caller's
  threads (:mod:`leveret.io.codecs`) and given to HDF5 with
  ``write_direct_chunk``, which places, indexes and writes each in one call
  of HDF5's own file driver: one thread writes a file's bytes about as fast
  as many, since the kernel takes buffered writes to one file one at a time.
- Inputs: :func:`dataset_layout` finds where a dataset's bytes lie (its
  contiguous offset, or its chunk table), so that bands of detector rows are
  read with ``preadv`` on many threads and decoded there
  (:mod:`leveret.io.bands`); :func:`read_box` decodes leveret's own filters
  (Blosc, deflate, shuffle) without any HDF5 plugin.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .codecs import decode_hdf5_chunk


# -- output datasets ---------------------------------------------------------------------------


def create_volume(group, name: str, shape, dtype, *, codec=None, chunks=None):
    """A dataset for a volume written around HDF5: contiguous with its space
    allocated now and never filled (``codec`` None), or chunked (``chunks``)
    with ``codec``'s filters in its pipeline, for ``write_direct_chunk``."""
    import h5py

    dtype = np.dtype(dtype)
    if codec is None:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)  # the bytes' place is fixed now...
        dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)  # ...and nothing is written there yet
        return group.create_dataset(name, shape=shape, dtype=dtype, dcpl=dcpl)
    chunk_bytes = int(np.prod(chunks)) * dtype.itemsize
    return group.create_dataset(
        name, shape=shape, dtype=dtype, chunks=tuple(chunks), **codec.hdf5_options(dtype.itemsize, chunk_bytes)
    )


def contiguous_offset(path, dataset: str) -> int | None:
    """Byte offset of a contiguous, allocated dataset's data in the file; None otherwise."""
    import h5py

    with h5py.File(path, "r") as f:
        ds = f[dataset]
        if ds.chunks is not None or ds.dtype.byteorder == ">":
            return None
        offset = ds.id.get_offset()
    return None if offset is None else int(offset)


# -- input datasets ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where an HDF5 dataset's bytes lie in its file.

    ``offset``: a contiguous dataset's first byte (``chunks`` None). Chunked:
    ``chunks`` (the chunk shape), ``table`` (chunk origin -> (byte offset,
    stored size, filter mask)), ``filters`` (the pipeline, ``[(id, options)]``).
    """

    path: str
    shape: tuple
    dtype: np.dtype
    offset: int | None = None
    chunks: tuple | None = None
    table: dict | None = None
    filters: tuple = ()


_layouts: dict = {}
_layouts_lock = threading.Lock()


def dataset_layout(path, dataset: str) -> Layout | None:
    """:class:`Layout` of ``dataset`` in ``path`` (cached while the file is
    unchanged), or None where its bytes cannot be read directly: compact or
    virtual storage, external files, big-endian or non-numeric values,
    chunks not allocated."""
    import h5py

    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), dataset, st.st_mtime_ns, st.st_size)
    with _layouts_lock:
        if key in _layouts:
            return _layouts[key]
    layout = None
    with h5py.File(p, "r") as f:
        ds = f[dataset]
        dtype = np.dtype(ds.dtype)
        plist = ds.id.get_create_plist()
        plain = dtype.kind in "biuf" and dtype.byteorder != ">" and plist.get_external_count() == 0
        kind = plist.get_layout()
        if plain and kind == h5py.h5d.CONTIGUOUS:
            offset = ds.id.get_offset()
            if offset is not None:
                layout = Layout(str(p), tuple(ds.shape), dtype, offset=int(offset))
        elif plain and kind == h5py.h5d.CHUNKED:
            filters = tuple(
                (plist.get_filter(i)[0], tuple(plist.get_filter(i)[2])) for i in range(plist.get_nfilters())
            )
            table: dict = {}

            def add(info):
                table[tuple(info.chunk_offset)] = (int(info.byte_offset), int(info.size), int(info.filter_mask))

            if hasattr(ds.id, "chunk_iter"):
                ds.id.chunk_iter(add)
            else:  # HDF5 before 1.12.3: one call per chunk
                for i in range(ds.id.get_num_chunks()):
                    add(ds.id.get_chunk_info(i))
            layout = Layout(str(p), tuple(ds.shape), dtype, chunks=tuple(ds.chunks), table=table, filters=filters)
    with _layouts_lock:
        if len(_layouts) > 64:
            _layouts.clear()
        _layouts[key] = layout
    return layout


def read_chunk(fd: int, layout: Layout, origin: tuple) -> np.ndarray | None:
    """The chunk at ``origin`` (its first element's index), decoded; None for
    a chunk never written (the dataset's fill value, zero, there)."""
    found = layout.table.get(tuple(origin))
    if found is None:
        return None
    offset, size, mask = found
    raw = bytearray(size)
    if os.preadv(fd, [raw], offset) != size:
        raise OSError(f"{layout.path}: a chunk at byte {offset} ends past the file's end")
    return decode_hdf5_chunk(
        bytes(raw) if layout.filters else raw, list(layout.filters), mask, layout.dtype, layout.chunks
    )


def read_box(layout: Layout, box: tuple[slice, ...], out: np.ndarray | None = None, pool=None) -> np.ndarray:
    """The values of a chunked dataset in ``box`` (one slice with step 1 per
    axis), decoded here: the chunks it meets are read and decoded on ``pool``
    (a ``concurrent.futures`` executor; None: in this thread)."""
    starts = [s.start for s in box]
    stops = [s.stop for s in box]
    shape = tuple(b - a for a, b in zip(starts, stops))
    if out is None:
        out = np.zeros(shape, layout.dtype)
    ranges = [range(a // c * c, b, c) for a, b, c in zip(starts, stops, layout.chunks)]
    origins = (
        [tuple(o) for o in np.stack(np.meshgrid(*ranges, indexing="ij"), -1).reshape(-1, len(shape))]
        if all(ranges)
        else []
    )

    def one(fd, origin):
        chunk = read_chunk(fd, layout, origin)
        src, dst = [], []
        for o, c, a, b, n in zip(origin, layout.chunks, starts, stops, layout.shape):
            lo, hi = max(o, a), min(o + c, b, n)
            src.append(slice(lo - o, hi - o))
            dst.append(slice(lo - a, hi - a))
        if chunk is None:
            out[tuple(dst)] = 0
        else:
            out[tuple(dst)] = chunk[tuple(src)]

    fd = os.open(layout.path, os.O_RDONLY)
    try:
        if pool is None:
            for origin in origins:
                one(fd, origin)
        else:
            for future in [pool.submit(one, fd, origin) for origin in origins]:
                future.result()
    finally:
        os.close(fd)
    return out


_plugins_tried = False


def needs_own_decoder(dataset) -> bool:
    """True for an h5py dataset whose filters HDF5 cannot apply here (a Blosc
    output read without hdf5plugin) but :func:`read_box` can. hdf5plugin,
    where installed, is imported first (it registers the filters with HDF5)."""
    global _plugins_tried
    import h5py

    from .codecs import H5_BLOSC

    plist = dataset.id.get_create_plist()
    ids = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
    if H5_BLOSC not in ids:
        return False
    if not _plugins_tried and not h5py.h5z.filter_avail(H5_BLOSC):
        _plugins_tried = True
        try:
            import hdf5plugin  # noqa: F401  (registers Blosc and the other plugins' filters)
        except ImportError:
            pass
    return not h5py.h5z.filter_avail(H5_BLOSC)


def read_dataset(path, dataset: str, key=()) -> np.ndarray:
    """``f[dataset][key]`` for a dataset :func:`needs_own_decoder`: the box the
    key spans is decoded here, then indexed."""
    layout = dataset_layout(path, dataset)
    if layout is None or layout.chunks is None:
        raise ValueError(f"dataset: {dataset!r} in {str(path)!r} cannot be decoded without its HDF5 filter plugin")
    full = tuple(slice(0, n) for n in layout.shape)
    key = key if isinstance(key, tuple) else (key,)
    if all(isinstance(k, slice) and k.step in (None, 1) for k in key) and len(key) <= len(full):
        box = tuple(slice(*k.indices(n)[:2]) for k, n in zip(key, layout.shape)) + full[len(key) :]
        if all(b.stop > b.start for b in box):
            return read_box(layout, box)
    return read_box(layout, full)[key]
