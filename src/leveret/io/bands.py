"""Bands of detector rows read on many threads, straight into the caller's buffer.

An out-of-core slab needs rows ``r0:r1`` of every projection: thousands of
short runs of bytes spread over the input. One thread reading them (h5py,
which serialises every call, or a NumPy copy from a memory map) reaches a
fraction of what the page cache gives to 16; :func:`read_band` finds where
each projection's rows lie in the file and reads them with ``preadv`` on a
pool of threads, into ``out`` (a pinned staging buffer, say) without an
intermediate copy:

- an HDF5 dataset (:class:`leveret.io.FrameStack` of a scan file, or a lazily
  opened dataset): contiguous, straight from its offset; chunked, each chunk
  read and decoded (deflate, shuffle, Blosc) on a thread, only the rows of
  uncompressed chunks that span whole projection rows;
- a memory-mapped ``.npy`` or raw file, and a folder of uncompressed TIFFs:
  from each file's data offset;
- anything else (zarr, compressed TIFFs, arrays in memory): its own indexing,
  ``out[...] = source[:, r0:r1, :]``.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref

import numpy as np

#: Bytes a thread reads at least per task (several projections' rows when they are short).
MIN_TASK_BYTES = 4 << 20


def read_band(source, rows: tuple[int, int], out: np.ndarray, *, pool=None, views=None) -> np.ndarray:
    """``out[...] = source[n0:n1, r0:r1, :]``, read on ``pool``'s threads where the
    bytes' places in the file are known.

    Parameters
    ----------
    source : array-like (n_angles, n_rows, n_cols)
        A lazy input (:func:`leveret.io.open_array`, a scan's projections), a
        memory map or any array with NumPy slicing.
    rows : (r0, r1)
    out : ndarray (n1 - n0, r1 - r0, n_cols), C-contiguous, of ``source``'s dtype
    pool : concurrent.futures.Executor, optional
        Threads for the reads (None: this thread only).
    views : (n0, n1), optional
        The projections to read (default: all; a helical slab needs only the
        views that see it).

    Returns
    -------
    ``out``
    """
    r0, r1 = (int(r) for r in rows)
    shape = tuple(source.shape)
    n0, n1 = (0, shape[0]) if views is None else (int(n) for n in views)
    if not 0 <= n0 < n1 <= shape[0]:
        raise ValueError(f"views: expected 0 <= n0 < n1 <= {shape[0]}, got {views!r}")
    expected = (n1 - n0, r1 - r0, shape[2])
    if out.shape != expected or not out.flags.c_contiguous or out.dtype != np.dtype(source.dtype):
        raise ValueError(
            f"out: expected a C-contiguous {np.dtype(source.dtype)} array of shape {expected}, "
            f"got {out.dtype} {out.shape}"
        )
    places = _places_of(source)
    if places is None:
        out[...] = np.asarray(source[n0:n1, r0:r1, :])
        return out
    if (n0, n1) != (0, shape[0]):
        places = places.views(n0, n1)
    places.read(r0, r1, out, pool)
    return out


_places: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # source -> its places, found once


def _places_of(source):
    """``source``'s places (:func:`_file_places`), found once per source."""
    try:
        return _places[source]
    except (KeyError, TypeError):  # TypeError: not weakly referable (never cached)
        places = _file_places(source)
        try:
            _places[source] = places
        except TypeError:
            pass
        return places


def read_rows(source, rows: tuple[int, int], *, views=None, threads: int | None = None) -> np.ndarray:
    """Rows ``r0:r1`` of projections ``n0:n1`` of ``source`` as a new array,
    read on ``threads`` threads (default: one per core) where the bytes' places
    are known (:func:`read_band`). A lazy stack's own slicing,
    ``source[:, r0:r1, :]``, reads one projection after another: for a scan
    whose projections are single chunks, that reads each chunk whole, seconds
    for a few rows of thousands of projections.

    Parameters
    ----------
    source : array-like (n_angles, n_rows, n_cols)
        As for :func:`read_band` (not a GPU array).
    rows : (r0, r1)
    views : (n0, n1), optional
        The projections to read (default: all).
    threads : int, optional
        Reading threads.

    Returns
    -------
    ndarray (n1 - n0, r1 - r0, n_cols), of ``source``'s dtype
    """
    from concurrent.futures import ThreadPoolExecutor

    r0, r1 = (int(r) for r in rows)
    n0, n1 = (None, None) if views is None else (int(n) for n in views)
    if _places_of(source) is None:  # its own indexing reads the rows only
        return np.asarray(source[n0:n1, r0:r1, :])
    shape = tuple(source.shape)
    n0, n1 = (0, shape[0]) if views is None else (n0, n1)
    out = np.empty((n1 - n0, r1 - r0, shape[2]), np.dtype(source.dtype))
    with ThreadPoolExecutor(threads or os.cpu_count() or 1, thread_name_prefix="leveret-rows") as pool:
        return read_band(source, (r0, r1), out, pool=pool, views=None if views is None else (n0, n1))


def _file_places(source):
    """How to read ``source``'s bytes directly: a :class:`_Frames` or :class:`_Chunks`, or None."""
    from .lazy import TiffStack, _H5Dataset
    from .scans import FrameStack

    try:
        if isinstance(source, FrameStack):
            return _hdf5_places(source.path, source.dataset, source.frame_indices)
        if isinstance(source, _H5Dataset) and len(source.shape) == 3:
            return _hdf5_places(source.path, source.dataset, np.arange(source.shape[0]))
        if isinstance(source, TiffStack):
            return _tiff_places(source)
        if (
            isinstance(source, np.memmap)
            and source.filename is not None
            and isinstance(source.base, mmap.mmap)
            and source.flags.c_contiguous
            and source.ndim == 3
            and source.dtype.byteorder != ">"
        ):
            n, r, c = source.shape
            frame = r * c * source.dtype.itemsize
            return _Frames(
                [source.filename],
                [source.offset + i * frame for i in range(n)],
                source.shape,
                source.dtype,
                file_of=None,
            )
    except (OSError, ValueError, KeyError):  # not readable directly after all: its own indexing
        return None
    return None


def _hdf5_places(path, dataset: str, frames: np.ndarray):
    from .hdf5 import dataset_layout

    layout = dataset_layout(path, dataset)
    if layout is None or len(layout.shape) != 3:
        return None
    frames = np.asarray(frames, np.int64)
    shape = (len(frames),) + tuple(layout.shape[1:])
    if layout.chunks is None:
        frame = int(np.prod(layout.shape[1:])) * layout.dtype.itemsize
        return _Frames(
            [layout.path], [layout.offset + int(f) * frame for f in frames], shape, layout.dtype, file_of=None
        )
    return _Chunks(layout, frames, shape)


def _tiff_places(stack):
    """Each TIFF's data offset, for a stack of uncompressed single-image TIFFs
    stored contiguously; None if any is compressed, tiled or differs."""
    import tifffile

    offsets = []
    for f in stack.files:
        with tifffile.TiffFile(f) as t:
            page = t.pages[0]
            if (
                len(t.pages) != 1
                or page.compression != 1
                or not page.is_contiguous
                or tuple(page.shape) != tuple(stack.shape[1:])
                or np.dtype(page.dtype) != stack.dtype
                or t.byteorder == ">"
                or not page.dataoffsets
            ):
                return None
            offsets.append(int(page.dataoffsets[0]))
    return _Frames(
        [str(f) for f in stack.files], offsets, stack.shape, stack.dtype, file_of=list(range(len(stack.files)))
    )


def _tasks(n_items: int, item_bytes: int, pool) -> list[tuple[int, int]]:
    """Ranges of items, each at least ``MIN_TASK_BYTES``, at most a few per thread."""
    threads = getattr(pool, "_max_workers", 1) if pool is not None else 1
    per = max(1, MIN_TASK_BYTES // max(1, item_bytes), -(-n_items // (4 * threads)))
    return [(a, min(n_items, a + per)) for a in range(0, n_items, per)]


def _run(pool, tasks, fn) -> None:
    if pool is None:
        for task in tasks:
            fn(*task)
        return
    futures = [pool.submit(fn, *task) for task in tasks]
    try:
        for future in futures:
            future.result()
    finally:  # never leave a read writing into a buffer the caller reuses
        for future in futures:
            future.cancel()
        for future in futures:
            if not future.cancelled():
                future.exception()


class _Frames:
    """Projections stored one after another, each C-ordered at a known byte
    offset (in one file, or one file each): rows ``r0:r1`` of projection i
    are ``(r1 - r0) * n_cols`` items at ``offsets[i] + r0 * n_cols * itemsize``."""

    def __init__(self, files, offsets, shape, dtype, *, file_of):
        self.files, self.offsets = [os.fspath(f) for f in files], list(offsets)
        self.shape, self.dtype, self.file_of = tuple(shape), np.dtype(dtype), file_of

    def views(self, n0: int, n1: int) -> _Frames:
        """The places of projections ``n0:n1`` only."""
        return _Frames(
            self.files,
            self.offsets[n0:n1],
            (n1 - n0,) + self.shape[1:],
            self.dtype,
            file_of=None if self.file_of is None else self.file_of[n0:n1],
        )

    def read(self, r0: int, r1: int, out: np.ndarray, pool) -> None:
        row = self.shape[2] * self.dtype.itemsize
        n, band = len(self.offsets), (r1 - r0) * row
        which = [0] * n if self.file_of is None else self.file_of
        positions = [offset + r0 * row for offset in self.offsets]
        _read_runs(self.files, which, positions, range(0, n * band, band), [band] * n, out, pool)


def _read_runs(files, which, positions, targets, sizes, out: np.ndarray, pool) -> None:
    """Read run i, ``sizes[i]`` bytes at byte ``positions[i]`` of file
    ``files[which[i]]``, into byte ``targets[i]`` of ``out`` (C-contiguous), on
    ``pool``'s threads. Each run is one ``preadv`` into a slice of one
    memoryview: no NumPy object per run, whose making holds the GIL that the
    other readers wait for (a band of a few rows is thousands of short runs)."""
    buffer = memoryview(out.reshape(-1).view(np.uint8))
    lock = threading.Lock()
    fds: dict = {}

    def fd_of(k):
        with lock:
            if k not in fds:
                fds[k] = os.open(files[k], os.O_RDONLY)
            return fds[k]

    def part(a, b):
        last = fd = None
        for i in range(a, b):
            if which[i] != last:  # runs of one file follow one another: its descriptor looked up once
                last, fd = which[i], fd_of(which[i])
            at, n = targets[i], sizes[i]
            got = os.preadv(fd, [buffer[at : at + n]], positions[i])
            if got != n:
                raise OSError(f"{files[which[i]]}: expected {n} bytes at {positions[i]}, the file ends after {got}")

    try:
        _run(pool, _tasks(len(positions), max(1, out.nbytes // max(1, len(positions))), pool), part)
    finally:
        for fd in fds.values():
            os.close(fd)


class _Chunks:
    """A chunked HDF5 dataset: the chunks the band meets, each read (and
    decoded) by a thread; an uncompressed chunk whose rows span the whole
    projection width gives just the band's rows."""

    def __init__(self, layout, frames, shape):
        self.layout, self.frames, self.shape = layout, np.asarray(frames, np.int64), tuple(shape)
        self._starts: dict = {}  # row origin -> byte offset of each frame's chunk there (-1: never written)

    def views(self, n0: int, n1: int) -> _Chunks:
        """The places of projections ``n0:n1`` only."""
        return _Chunks(self.layout, self.frames[n0:n1], (n1 - n0,) + self.shape[1:])

    def read(self, r0: int, r1: int, out: np.ndarray, pool) -> None:
        from .hdf5 import read_chunk

        lay = self.layout
        cf, cr, cc = lay.chunks
        item = lay.dtype.itemsize
        row_origins = range(r0 // cr * cr, r1, cr)
        if not lay.filters and cc == lay.shape[2]:
            self._read_direct(r0, r1, out, pool, row_origins)
            return
        # output position j -> dataset frame f; group by chunk along the frame axis
        by_chunk: dict = {}
        for j, f in enumerate(self.frames):
            by_chunk.setdefault(int(f) // cf * cf, []).append((j, int(f)))
        # several chunks per task when they are small: a task's overhead is the thread's, not the disk's
        per_chunk = cf * (min(cr, r1 - r0)) * lay.shape[2] * item
        groups = _tasks(len(by_chunk), per_chunk, pool)
        firsts = sorted(by_chunk)
        tasks = [(firsts[a:b], ro) for a, b in groups for ro in row_origins]
        fd = os.open(lay.path, os.O_RDONLY)

        def part(f0, ro):
            lo, hi = max(ro, r0), min(ro + cr, r1)
            for c0 in range(0, lay.shape[2], cc):
                found = lay.table.get((f0, ro, c0))
                c1 = min(c0 + cc, lay.shape[2])
                if found is None:  # never written: the fill value, zero
                    for j, _ in by_chunk[f0]:
                        out[j, lo - r0 : hi - r0, c0:c1] = 0
                    continue
                chunk = read_chunk(fd, lay, (f0, ro, c0))
                for j, f in by_chunk[f0]:
                    out[j, lo - r0 : hi - r0, c0:c1] = chunk[f - f0, lo - ro : hi - ro, : c1 - c0]

        def group(f0s, ro):
            for f0 in f0s:
                part(f0, ro)

        try:
            _run(pool, tasks, group)
        finally:
            os.close(fd)

    def _read_direct(self, r0, r1, out, pool, row_origins) -> None:
        """Uncompressed chunks as wide as a projection: the band's rows of each
        frame read as stored, one run per frame and chunk of rows (their places
        worked out with NumPy: thousands of frames a band)."""
        lay = self.layout
        cf, cr, cc = lay.chunks
        row = cc * lay.dtype.itemsize
        firsts = self.frames // cf * cf
        j = np.arange(len(self.frames))
        positions, targets, sizes = [], [], []
        for ro in row_origins:
            lo, hi = max(ro, r0), min(ro + cr, r1)
            if ro not in self._starts:
                self._starts[ro] = np.array([lay.table.get((int(f0), ro, 0), (-1,))[0] for f0 in firsts], np.int64)
            starts = self._starts[ro]
            missing = starts < 0
            out[missing, lo - r0 : hi - r0] = 0  # never written: the fill value, zero
            at = ~missing
            positions.append(starts[at] + ((self.frames[at] - firsts[at]) * cr + lo - ro) * row)
            targets.append((j[at] * (r1 - r0) + lo - r0) * row)
            sizes.append(np.full(int(at.sum()), (hi - lo) * row, np.int64))
        positions, targets, sizes = (np.concatenate(a).tolist() for a in (positions, targets, sizes))
        _read_runs([lay.path], [0] * len(positions), positions, targets, sizes, out, pool)
