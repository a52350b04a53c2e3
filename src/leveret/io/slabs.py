"""Slab-by-slab volume writers that are atomic and resumable.

A volume ``(nz, ny, nx)`` too large for memory is written a z-slab at a time
while a reconstruction proceeds. :class:`SlabWriter` keeps every write under
a hidden *partial* folder beside the output,
``.<name>.partial/``, which holds

- the payload, in the output's format (``data.npy``, ``data.tif``,
  ``data.h5``, ``data.zarr/`` or ``slices/`` for one TIFF per slice), and
- ``manifest.json``: the volume's shape and dtype, the format, a hash of the
  job's parameters, a fingerprint of its input, the slices written so far
  and, for each slab, what it was made from (a checksum of the input rows it
  used, :func:`rows_checksum`), updated (atomically) only after a slab's
  data are flushed to disk. Each piece's way to the disk starts as it is
  written (:func:`leveret.io.atomic.start_writeback`; a compressed HDF5
  file's chunks from one thread, gathered while the disk is behind,
  :class:`leveret.io.atomic.WritebackFollower`) and the flushing is
  waited for in the background, in batches (one thread, ``leveret-sync``), so
  that writing never waits for the disk and the disk never idles: a slab
  counts as written once it is on disk and recorded, and
  :meth:`SlabWriter.finish` waits for the last ones.

One writer at a time: a lock file ``.<name>.lock`` (:class:`OutputLock`)
is held from the start to :meth:`SlabWriter.finish` or
:meth:`SlabWriter.abort`; a second writer of the same output fails at once
with :class:`OutputBusyError`. Space is checked before anything is written
(uncompressed formats are preallocated, so a full disk shows up at the
start), data are written with ordinary file I/O (never through a memory
map, whose write to a full disk kills the process with SIGBUS), and a
full disk or file size limit met later raises :class:`OutputSpaceError`.

A slab is written on a pool of threads (``threads``). Uncompressed bytes go
to their place with parallel ``pwrite`` calls (``.npy``, BigTIFF, and HDF5,
whose uncompressed volume is a contiguous dataset allocated at the start);
compressed chunks are compressed on the threads (:mod:`leveret.io.codecs`)
and written as zarr chunk files, or given to HDF5 as direct chunks, which
HDF5 writes in order in the calling thread (one file takes buffered writes
one at a time whoever makes them); a TIFF folder's slices are written a file
per thread. Several threads may call :meth:`SlabWriter.write` at once with
different slabs.

:meth:`SlabWriter.finish` renames the complete payload onto the output path
and removes the partial folder, so the output path holds either nothing or a
complete volume. A run that stops (crash, Ctrl-C) leaves the partial folder
only when it was opened with ``resume=True``; a new writer opened with
``resume=True`` and the same parameters then continues with the slices the
manifest does not list. Different parameters (another centre, filter, ...)
are refused, so a resumed volume never mixes two jobs; :meth:`SlabWriter.sources`
gives the caller what the finished slabs were made from, to check against
the input before continuing.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

import numpy as np

from . import atomic
from ._common import HDF5_EXTS, TIFF_EXTS, split_dataset, suffix
from .atomic import (
    OutputLock,
    OutputSpaceError,
    WritebackFollower,
    _commit,
    _fsync_path,
    _remove,
    check_space,
    check_writable,
    free_bytes,
    is_space_error,
    register_cleanup,
    space_errno,
    start_writeback,
    unregister_cleanup,
)
from .marks import SOFTWARE

log = logging.getLogger(__name__)

FORMATS = ("npy", "bigtiff", "tiff-stack", "hdf5", "zarr")
MANIFEST = "manifest.json"
MANIFEST_VERSION = 3  # 3: the slabs' sources
_PAYLOAD = {"npy": "data.npy", "bigtiff": "data.tif", "tiff-stack": "slices", "hdf5": "data.h5", "zarr": "data.zarr"}
DEFAULT_DATASET = "/data"
#: Compressions each format takes; the first is the default.
COMPRESSIONS = {
    "hdf5": ("lz4", "zstd", "gzip", "lzf", None),
    "zarr": ("lz4", "zstd", None),
    "tiff-stack": (None, "zlib"),
    "npy": (None,),
    "bigtiff": (None,),
}
#: Bytes of a default chunk (HDF5, zarr): rows of one slice, so that a chunk is
#: contiguous in a slab and no chunk is shared by two slabs. Large, as HDF5 takes
#: its chunks one at a time in one thread.
CHUNK_BYTES = 16 << 20
#: Bytes of uncompressed data one thread writes per call.
PIECE_BYTES = 8 << 20


def output_format(path: str | os.PathLike) -> str:
    """Format an output path names: ``.npy``, ``.tif``/``.tiff`` (one BigTIFF),
    ``.h5``/``.hdf5``/``.hdf``/``.nxs``, ``.zarr``, or a folder (a path ending
    in ``/`` or without extension: one TIFF per slice)."""
    text = os.fspath(path)
    p = Path(text)
    if text.endswith(("/", os.sep)) or p.suffix == "":
        return "tiff-stack"
    ext = suffix(p)
    if ext == ".npy":
        return "npy"
    if ext in TIFF_EXTS:
        return "bigtiff"
    if ext in HDF5_EXTS:
        return "hdf5"
    if ext == ".zarr":
        return "zarr"
    raise ValueError(
        f"output: unknown extension {p.suffix!r} of {text!r}; expected .npy, .tif, .tiff, "
        ".h5, .hdf5, .hdf, .nxs, .zarr or a folder (a path ending in '/')"
    )


def parameters_hash(params: dict | None) -> str:
    """SHA-256 of the job's parameters as canonical JSON (keys sorted).

    Arrays are hashed by content, so a changed angle list or flat field
    counts as a different job; each on a thread of its own, read in place
    (a pair of 2048^2 flat and dark fields takes a fifth of a second on one
    core without SHA instructions)."""

    def plain(obj):
        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, (Path, os.PathLike)):
            return os.fspath(obj)
        return repr(obj)

    arrays: list[np.ndarray] = []

    def collect(obj):
        if isinstance(obj, np.ndarray):
            arrays.append(obj)
            return None
        return plain(obj)

    json.dumps(params or {}, default=collect)  # finds the arrays
    with ThreadPoolExecutor(max(1, min(len(arrays), os.cpu_count() or 1))) as pool:
        digests = dict(zip(map(id, arrays), pool.map(_array_digest, arrays)))

    def default(obj):
        if isinstance(obj, np.ndarray):
            return {"array": digests[id(obj)], "shape": list(obj.shape), "dtype": str(obj.dtype)}
        return plain(obj)

    text = json.dumps(params or {}, sort_keys=True, default=default)
    return hashlib.sha256(text.encode()).hexdigest()


def _array_digest(a: np.ndarray) -> str:
    """SHA-256 of an array's bytes in C order (those of ``a.tobytes()``), without a copy of a contiguous one."""
    flat = np.ascontiguousarray(a).reshape(-1)
    return hashlib.sha256(flat.tobytes() if flat.dtype.hasobject else flat.view(np.uint8)).hexdigest()


def input_fingerprint(source: str | os.PathLike, *, blocks: int = 8, block_size: int = 1 << 16) -> dict:
    """What identifies an input file or folder for ``resume``: sizes, modification
    times and a SHA-256 of ``blocks`` blocks sampled across the data.

    ``source`` may carry an HDF5 dataset (``"scan.h5:/exchange/data"``) or be a
    glob (``"proj/*.tif"``); a folder counts all the files under it. Reading
    a few blocks costs milliseconds even for terabytes, and catches data
    rewritten in place with the same size and a restored modification time.
    """
    import glob as _glob

    text = os.fspath(source)
    p, _ = split_dataset(text, None)
    if p.is_dir():
        # hidden files are not data (the folder reader skips them; an output's own .partial/.lock may sit here)
        files = sorted(
            f for f in p.rglob("*") if f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts)
        )
    elif p.exists():
        files = [p]
    else:
        files = sorted(Path(f) for f in _glob.glob(text) if Path(f).is_file())
    if not files:
        return {"source": text, "files": 0}
    digest = hashlib.sha256()
    total = 0
    listing = hashlib.sha256()
    for f in files:
        st = f.stat()
        total += st.st_size
        listing.update(f"{f.relative_to(p) if p.is_dir() else f.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    # Blocks at evenly spaced offsets of the concatenated files.
    sizes = np.array([f.stat().st_size for f in files], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    for offset in np.unique(np.linspace(0, max(total - block_size, 0), blocks).astype(np.int64)):
        i = int(np.searchsorted(starts, offset, side="right") - 1)
        with open(files[i], "rb") as fh:
            fh.seek(int(offset - starts[i]))
            digest.update(fh.read(block_size))
    return {
        "source": text,
        "files": len(files),
        "bytes": int(total),
        "listing": listing.hexdigest(),
        "sample": digest.hexdigest(),
    }


def made_from(raw, rows, views=None, *, pool=None) -> dict:
    """What a slab was made from, recorded with it (:meth:`SlabWriter.sources`)
    for a resumed run to check: its detector ``rows`` (r0, r1), its ``views``
    (n0, n1) where not all of them, and :func:`rows_checksum` of ``raw``,
    those rows as read."""
    out = {"rows": [int(rows[0]), int(rows[1])], "crc32": rows_checksum(raw, pool=pool)}
    if views is not None:
        out["views"] = [int(views[0]), int(views[1])]
    return out


def rows_checksum(rows, *, pool=None) -> int:
    """CRC-32 of detector rows ``(n_angles, k, n_cols)`` as stored: their dtype and
    shape, then each projection's rows in turn (one projection's rows at a time,
    never a copy of the whole band).

    What a finished slab of an out-of-core run was made from, so that a resumed
    run can tell whether any value of it changed since. CRC-32 catches every
    change of up to 32 consecutive bits (one value) and misses a larger one
    with probability 2**-32; it runs at about 2.2 GB/s on one core. With
    ``pool`` (an executor) and C-contiguous ``rows``, blocks of projections are
    checksummed on its threads and the CRCs combined: the same value.
    """
    import zlib

    a = np.asarray(rows)
    crc = zlib.crc32(f"{a.dtype.str} {a.shape}".encode())
    threads = getattr(pool, "_max_workers", 1) if pool is not None else 1
    if threads > 1 and a.flags.c_contiguous and a.nbytes >= (16 << 20) and len(a) > 1:
        bounds = np.linspace(0, len(a), min(threads, len(a)) + 1).astype(int)
        blocks = [a[i:j].reshape(-1) for i, j in zip(bounds[:-1], bounds[1:])]
        for block, part in zip(blocks, [pool.submit(zlib.crc32, b) for b in blocks]):
            crc = crc32_combine(crc, part.result(), block.nbytes)
        return crc
    for image in a:
        crc = zlib.crc32(np.ascontiguousarray(image), crc)
    return crc


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of ``A + B`` from ``crc1`` of A, ``crc2`` of B (from 0) and
    ``len2`` = len(B) bytes, as zlib's ``crc32_combine`` (which Python's zlib
    does not offer): crc1 passed through ``len2`` zero bytes, then xor crc2."""
    return _gf2_times(_zeros_operator(int(len2)), crc1) ^ crc2 if len2 > 0 else crc1


def _gf2_times(matrix, vector: int) -> int:
    total, i = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[i]
        vector >>= 1
        i += 1
    return total


@functools.lru_cache(maxsize=64)
def _zeros_operator(length: int) -> tuple:
    """The GF(2) matrix that advances a CRC-32 over ``length`` zero bytes (zlib's method)."""

    def square(m):
        return tuple(_gf2_times(m, m[n]) for n in range(32))

    odd = (0xEDB88320,) + tuple(1 << n for n in range(31))  # one zero bit
    op = tuple(1 << n for n in range(32))  # identity
    power = square(square(square(odd)))  # one zero byte (8 bits)
    while length:
        if length & 1:
            op = tuple(_gf2_times(power, op[n]) for n in range(32))
        length >>= 1
        if length:
            power = square(power)
    return op


def _fingerprint_difference(old: dict | None, new: dict | None) -> str:
    old, new = old or {}, new or {}
    for key, what in (
        ("source", "path"),
        ("files", "number of files"),
        ("bytes", "size"),
        ("listing", "file sizes or modification times"),
        ("sample", "content"),
        ("array", "content"),
    ):
        if old.get(key) != new.get(key):
            return what
    return "fingerprint"


def _json_safe(metadata: dict | None) -> dict:
    """Metadata as JSON values (tuples become lists; NumPy scalars and arrays plain)."""
    return json.loads(
        json.dumps(metadata or {}, default=lambda o: o.tolist() if isinstance(o, (np.ndarray, np.generic)) else str(o))
    )


def partial_metadata(path, dataset: str | None = None) -> dict | None:
    """The metadata a partial output of ``path`` was started with (its
    manifest's), or None when there is none: what a resumed run must store
    again (an automatic value range, say)."""
    p, _ = split_dataset(path, dataset)
    try:
        manifest = json.loads((p.with_name(f".{p.name}.partial") / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    meta = manifest.get("metadata")
    return meta if isinstance(meta, dict) else None


def volume_metadata(volume, dtype=np.float32, value_range=None, **extra) -> dict:
    """The metadata written with every reconstructed volume: its grid, axes and
    units, the software, ``extra`` (input, beam, method, ...), and how its
    stored values map back to attenuation (:func:`leveret.io.quantize.value_metadata`)."""
    from .quantize import value_metadata

    return {
        "voxel_size": list(volume.voxel_size),
        "center": list(volume.center),
        "axes": "zyx",
        "values": "attenuation per length unit",
        "software": SOFTWARE,
        **extra,
        **value_metadata(dtype, value_range),
    }


class SlabWriter:
    """Write a 3D volume slab by slab into one output, atomically and resumably.

    Parameters
    ----------
    path : str or os.PathLike
        Final output; its format follows :func:`output_format`. For HDF5 the
        dataset may be given inline (``"rec.h5:/entry/volume"``).
    shape : (nz, ny, nx)
        Volume shape; slabs are ranges of z slices (axis 0).
    dtype : numpy dtype
        Stored dtype (default float32).
    params : dict, optional
        The job's parameters (anything JSON-able, NumPy arrays allowed): a
        resumed run must give the same ones.
    fingerprint : dict, optional
        What identifies the job's input (:func:`input_fingerprint` of a file,
        or any JSON-able dict): a resumed run whose input differs is refused
        with a message saying what changed.
    metadata : dict, optional
        Stored with the volume: HDF5 and zarr attributes, TIFF JSON
        description (read back by :func:`leveret.io.read_metadata`); ``.npy``
        has no place for it.
    resume : bool
        Continue from a partial output of the same job if one exists, and
        keep the partial output when the run stops early. Without it an old
        partial output is discarded, and so is this one on failure.
    overwrite : bool
        Replace an existing output at ``path`` when finishing: only an output
        of the same format that leveret wrote (any ``.npy`` file; see
        :mod:`leveret.io.marks`), anything else is refused at the start. Every
        output carries that mark (HDF5 and zarr attribute ``software``, TIFF
        Software tag ``"leveret"``).
    dataset : str, optional
        HDF5 dataset path (default ``/data``).
    compression : str or None
        HDF5: ``"lz4"`` (default) or ``"zstd"`` (Blosc with bit shuffle, the
        registered HDF5 Blosc filter: readers need hdf5plugin, leveret's own
        do not), ``"gzip"`` (deflate level 4 with byte shuffle, readable
        everywhere), ``"lzf"`` (written by HDF5 in one thread) or None (a
        contiguous dataset); zarr: ``"lz4"`` (default), ``"zstd"`` or None;
        TIFF slices: None (default) or ``"zlib"``. ``.npy`` and the single
        BigTIFF are uncompressed. Uncompressed outputs are preallocated at
        the start. See :mod:`leveret.io.codecs`.
    chunks : tuple, optional
        HDF5/zarr chunk shape; default one slice deep, the whole width and
        as many rows as make about ``CHUNK_BYTES`` (contiguous in a slab), so
        that no chunk is shared by two slabs (a slab interrupted mid-write
        never damages a finished one). An uncompressed HDF5 output is
        contiguous unless ``chunks`` is given.
    threads : int, optional
        Threads that compress and write each slab (default: one per core).
    sync : bool
        Flush the data to disk (default): a slab is recorded as written once
        it is on disk, and :meth:`finish` renames the output into place once
        all of it is, so that a power cut never leaves a complete-looking but
        partly written volume. False: the data count as written once in the
        page cache (as most tools treat them), for outputs that are scratch or
        are read at once; nothing is flushed (neither the data nor the
        manifest nor the rename), so a run is bound by the page cache, not
        the disk; after a power cut a resumed run may find slices recorded
        but lost.

    Examples
    --------
    >>> with SlabWriter("rec.zarr", (64, 256, 256), params=job) as w:   # doctest: +SKIP
    ...     for k0, k1 in w.todo(8):
    ...         w.write(k0, reconstruct(k0, k1))
    ...     w.finish()
    """

    def __init__(
        self,
        path,
        shape,
        dtype=np.float32,
        *,
        params: dict | None = None,
        metadata: dict | None = None,
        resume: bool = False,
        overwrite: bool = False,
        dataset: str | None = None,
        compression="default",
        chunks=None,
        fingerprint: dict | None = None,
        threads: int | None = None,
        sync: bool = True,
    ):
        p, dataset = split_dataset(path, dataset)
        self.format = output_format(p if dataset is not None else path)
        if dataset is not None and self.format != "hdf5":
            raise ValueError(f"dataset: only HDF5 outputs have datasets, but path is {os.fspath(path)!r}")
        self.path = p
        self.dataset = dataset or DEFAULT_DATASET
        shape = tuple(int(n) for n in shape)  # Python ints: sizes never overflow
        if len(shape) != 3 or min(shape) < 1:
            raise ValueError(f"shape: expected a 3D volume shape (nz, ny, nx) of positive sizes, got {shape}")
        self.shape = shape
        self.dtype = np.dtype(dtype)
        if self.dtype.kind not in "biuf":
            raise ValueError(f"dtype: expected a numeric dtype, got {self.dtype}")
        self.metadata = _json_safe(metadata)
        self.resume = bool(resume)
        self.overwrite = bool(overwrite)
        self.compression = self._compression(compression)
        self._codec = None
        if self.compression in ("lz4", "zstd", "gzip"):
            from .codecs import ChunkCodec

            self._codec = ChunkCodec(self.compression)
        # an uncompressed HDF5 volume is contiguous (written like a .npy) unless chunks are asked for
        self.contiguous = self.format == "hdf5" and self.compression is None and chunks is None
        self.chunks = self._chunks(chunks)
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1
        ):
            raise ValueError(f"threads: expected a positive number of threads, got {threads!r}")
        self.threads = int(threads) if threads is not None else max(1, os.cpu_count() or 1)
        self.sync = bool(sync)
        self.params_hash = parameters_hash(params)
        self.fingerprint = _json_safe(fingerprint) if fingerprint is not None else None
        check_writable(self.path, self.overwrite, self.kind)  # fail before any work
        self.partial = self.path.with_name(f".{self.path.name}.partial")
        self.payload = self.partial / _PAYLOAD[self.format]
        self._done = np.zeros(shape[0], bool)
        self._sources: list[tuple[int, int, object]] = []  # (k0, k1, what slab k0:k1 was made from)
        self._finished = False
        self._aborted = False
        self._offset = 0  # .npy/BigTIFF/contiguous HDF5: where the pixel data start in the file
        # write() and abort() run in different threads when the CLI is
        # interrupted: abort waits for the slabs being written, and no slab is
        # written after it. _active counts the write() calls under way.
        self._io = threading.Condition()
        self._active = 0
        self._record_lock = threading.Lock()  # one manifest save at a time
        self._pool = None  # the writing threads, made at the first slab
        self._h5 = None  # the open h5py.File of a chunked HDF5 payload
        self._follower = None  # its WritebackFollower when the output syncs
        self._h5_lock = threading.Lock()
        # Slabs written but not yet on disk, (k0, k1, source, paths to flush), and the
        # thread that flushes and records them (there while there are some).
        self._unsynced: list[tuple[int, int, object, list[Path]]] = []
        self._flushing = threading.Condition()
        self._syncer: threading.Thread | None = None
        self._sync_error: BaseException | None = None
        #: Seconds the writing threads spent compressing and writing (summed over
        #: them), the bytes compressed and the bytes written to the payload, and
        #: the seconds the background thread spent flushing them to disk.
        self.busy = {"compress": 0.0, "compress_bytes": 0, "write": 0.0, "stored_bytes": 0, "sync": 0.0}
        self._busy_lock = threading.Lock()
        self._created = False  # set once _open makes a new partial output
        self._lock = OutputLock(self.path)
        # Registered before the lock file and the partial output exist, so that an
        # interrupt handled in another thread (the command's) removes whatever this
        # start makes; holding _io, the start ends before that clean-up (abort) looks.
        register_cleanup(id(self), self.abort)
        try:
            with self._io:
                try:
                    if self._aborted:
                        raise RuntimeError(f"the writing of {str(self.path)!r} was stopped before it began")
                    self._lock.acquire()  # before touching the partial output
                    self._open()
                except BaseException:
                    if self._created:  # nothing of value in it; a taken-over one is kept
                        _remove(self.partial)
                    self._lock.release()
                    raise
        except BaseException as exc:
            unregister_cleanup(id(self))
            if is_space_error(exc) and not isinstance(exc, OutputSpaceError):
                raise self._space_error(exc) from exc
            raise

    # -- set-up ------------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        """The output's kind for :func:`leveret.io.marks.replace_refusal` (what overwrite may replace)."""
        return {"bigtiff": "tiff"}.get(self.format, self.format)

    def _compression(self, compression):
        allowed = COMPRESSIONS[self.format]
        if compression == "default":
            return allowed[0]
        if compression not in allowed:
            raise ValueError(f"compression: expected one of {allowed} for a {self.format} output, got {compression!r}")
        return compression

    def _chunks(self, chunks):
        if chunks is None:
            rows = CHUNK_BYTES // (self.shape[2] * self.dtype.itemsize)
            return (1, max(1, min(self.shape[1], rows)), self.shape[2])
        chunks = tuple(int(c) for c in chunks)
        if len(chunks) != 3 or min(chunks) < 1:
            raise ValueError(f"chunks: expected 3 positive sizes, got {chunks}")
        return tuple(min(c, n) for c, n in zip(chunks, self.shape))

    def _manifest(self) -> dict:
        runs = _runs(self._done)
        return {
            "version": MANIFEST_VERSION,
            "format": self.format,
            "shape": list(self.shape),
            "dtype": self.dtype.str,
            "dataset": self.dataset,
            "params_hash": self.params_hash,
            "input": self.fingerprint,
            "offset": self._offset,
            "metadata": self.metadata,
            "done": [[int(a), int(b)] for a, b in runs],
            "sources": [[k0, k1, source] for k0, k1, source in self._sources],
        }

    @property
    def slice_bytes(self) -> int:
        return self.shape[1] * self.shape[2] * self.dtype.itemsize

    def _open(self) -> None:
        if self.partial.exists():
            if self.resume and self._load_manifest():
                log.info(
                    "resuming %s: %d of %d slices already written", self.path, int(self._done.sum()), self.shape[0]
                )
                if self.format not in ("npy", "bigtiff"):  # those two were preallocated
                    self._check_space(int((~self._done).sum()) * self.slice_bytes)
                return
            _remove(self.partial)
        self._check_space(self.shape[0] * self.slice_bytes)
        self.partial.mkdir()
        self._created = True
        self._create_payload()
        self._save_manifest()

    def _check_space(self, needed: int) -> None:
        """Refuse a start that cannot fit; compressed outputs usually need less,
        so for them a shortfall is only a warning."""
        if self.compression is None:
            check_space(self.path, needed)
        elif needed > free_bytes(self.partial.parent):
            from ..resources import format_bytes

            log.warning(
                "%s: the uncompressed volume (%s) exceeds the free space (%s); it fits only if "
                "compression saves enough",
                self.path,
                format_bytes(needed),
                format_bytes(free_bytes(self.partial.parent)),
            )

    def _check_room(self, nbytes: int) -> None:
        """Raise ENOSPC/EFBIG before a write that would not fit. For HDF5 only:
        the HDF5 library, failing to extend a file, leaves objects whose clean-up
        crashes the process later."""
        needed = nbytes + (1 << 20)  # chunk index and metadata
        if needed > free_bytes(self.partial):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        try:
            import resource

            limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        except (ImportError, OSError, ValueError):
            return
        if limit != resource.RLIM_INFINITY and self.payload.stat().st_size + needed > limit:
            raise OSError(errno.EFBIG, f"{os.strerror(errno.EFBIG)} (the file size limit is {limit} bytes)")

    def _space_error(self, exc: BaseException) -> OutputSpaceError:
        from ..resources import format_bytes

        left = int((~self._done).sum()) * self.slice_bytes
        try:
            free = format_bytes(free_bytes(self.path.parent))
        except OSError:
            free = "unknown"
        kept = "the partial output is kept for --resume" if self.resume else "the partial output was removed"
        return OutputSpaceError(
            space_errno(exc),
            f"output: writing {str(self.path)!r} failed: {exc}; "
            f"{format_bytes(left)} still to write, {free} free; {kept}",
        )

    def _load_manifest(self) -> bool:
        """Take over the partial output if it is this job's; False to start afresh."""
        try:
            m = json.loads((self.partial / MANIFEST).read_text())
        except (OSError, ValueError) as exc:
            log.warning("partial output %s has no readable manifest (%s): starting afresh", self.partial, exc)
            return False
        mine = self._manifest()
        for key in ("version", "format", "shape", "dtype", "dataset"):
            if m.get(key) != mine[key]:
                raise ValueError(
                    f"resume: the partial output {str(self.partial)!r} has {key} {m.get(key)!r}, this job {mine[key]!r}"
                )
        if self.fingerprint is not None and m.get("input") != self.fingerprint:
            raise ValueError(
                f"resume: the input changed since the partial output {str(self.partial)!r} was written "
                f"(its {_fingerprint_difference(m.get('input'), self.fingerprint)} differs); run without "
                "--resume to start afresh, or restore the input"
            )
        if m.get("params_hash") != self.params_hash:
            raise ValueError(
                f"resume: the partial output {str(self.partial)!r} belongs to a job with different "
                "parameters (input, geometry, filter, ...); run without resume to start afresh"
            )
        self._offset = int(m.get("offset") or 0)
        if not self.payload.exists() or not self._payload_readable():
            log.warning("partial output %s lost its data: starting afresh", self.partial)
            self._offset = 0
            return False
        for a, b in m.get("done", []):
            self._done[int(a) : int(b)] = True
        self._sources = [(int(k0), int(k1), source) for k0, k1, source in m.get("sources", [])]
        return True

    def _payload_readable(self) -> bool:
        try:
            if self.format == "hdf5":
                import h5py

                with h5py.File(self.payload, "r") as f:
                    return tuple(f[self.dataset].shape) == self.shape
            if self.format == "zarr":
                import zarr

                return tuple(zarr.open_array(str(self.payload), mode="r").shape) == self.shape
            if self.format in ("npy", "bigtiff"):
                size = self._offset + self.shape[0] * self.slice_bytes
                return self._offset > 0 and self.payload.stat().st_size >= size
        except Exception:  # a file damaged by the interruption: any library error
            return False
        return True

    def _save_manifest(self) -> None:
        tmp = self.partial / (MANIFEST + ".tmp")
        try:
            with open(tmp, "w") as f:
                json.dump(self._manifest(), f)
                if self.sync:  # else no flush: on ext4 it would wait for the volume's dirty data (the journal)
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, self.partial / MANIFEST)
        except BaseException:
            _remove(tmp)  # the manifest before this save stays the record
            raise

    def _create_payload(self) -> None:
        if self.format == "npy":
            with open(self.payload, "wb") as fh:
                np.lib.format.write_array_header_2_0(
                    fh, {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": self.shape}
                )
                self._offset = fh.tell()
            self._preallocate()
        elif self.format == "bigtiff":
            import tifffile

            offset, nbytes = tifffile.imwrite(
                self.payload,
                shape=self.shape,
                dtype=self.dtype,
                bigtiff=True,
                photometric="minisblack",
                metadata=self.metadata or {},
                software=SOFTWARE,
                returnoffset=True,
                contiguous=True,
            )
            self._offset = int(offset)
            self._preallocate()
        elif self.format == "tiff-stack":
            self.payload.mkdir()
        elif self.format == "hdf5":
            import h5py

            from .hdf5 import contiguous_offset, create_volume

            with h5py.File(self.payload, "w-") as f:
                f.attrs["software"] = SOFTWARE
                if self.compression == "lzf":
                    ds = f.create_dataset(
                        self.dataset,
                        shape=self.shape,
                        dtype=self.dtype,
                        chunks=self.chunks,
                        compression="lzf",
                        shuffle=True,
                    )
                else:
                    ds = create_volume(
                        f,
                        self.dataset,
                        self.shape,
                        self.dtype,
                        codec=self._codec,
                        chunks=None if self.contiguous else self.chunks,
                    )
                for k, val in self.metadata.items():
                    ds.attrs[k] = val if _h5_plain(val) else json.dumps(val)
            if self.contiguous:
                self._offset = contiguous_offset(self.payload, self.dataset)
                self._preallocate()
        elif self.format == "zarr":
            import zarr

            compressors = None if self._codec is None else self._codec.zarr_compressors(self.dtype.itemsize)
            zarr.create_array(
                store=str(self.payload),
                shape=self.shape,
                chunks=self.chunks,
                dtype=self.dtype,
                compressors=compressors,
                zarr_format=3,
                attributes={**self.metadata, "software": SOFTWARE},
                fill_value=0,
            )

    def _preallocate(self) -> None:
        """Reserve the pixel data's blocks now, so that a disk too small fails
        here, at once, rather than after hours of reconstruction. In pieces on
        the writing threads: a file system that allocates memory for it (tmpfs)
        zeroes every page, which one thread does at a fraction of the rate."""
        size = self._offset + self.shape[0] * self.slice_bytes
        fd = os.open(self.payload, os.O_RDWR)
        try:
            if hasattr(os, "posix_fallocate"):
                step = max(PIECE_BYTES, -(-size // self.threads))
                try:
                    if os.fstat(fd).st_size < size:  # never shorter: a BigTIFF's page list may follow
                        os.ftruncate(fd, size)
                    _all(
                        self._threads(),
                        [(os.posix_fallocate, fd, a, min(step, size - a)) for a in range(0, size, step)],
                    )
                except OSError as exc:
                    if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # not supported by this file system
                        raise
            elif os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
        finally:
            os.close(fd)

    def _threads(self):
        """The pool that compresses and writes (made at the first slab, ended by finish or abort)."""
        with self._h5_lock:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="leveret-io")
            return self._pool

    def _count(self, what: str, seconds: float, nbytes: int = 0) -> None:
        with self._busy_lock:
            self.busy[what] += seconds
            if what != "sync":
                self.busy["compress_bytes" if what == "compress" else "stored_bytes"] += int(nbytes)

    def _write_at(self, fd: int, buffer, offset: int) -> None:
        """:func:`leveret.io.atomic.write_at`, counted in :attr:`busy`."""
        t = time.perf_counter()
        atomic.write_at(fd, buffer, offset)
        self._count("write", time.perf_counter() - t, memoryview(buffer).nbytes)

    def _write_piece(self, fd: int, buffer, offset: int) -> None:
        """One piece of a slab (or one zarr chunk file) at ``offset``, its way to
        the disk started at once when the output syncs: the flush then waits
        for less."""
        self._write_at(fd, buffer, offset)
        if self.sync:
            start_writeback(fd, offset, memoryview(buffer).nbytes)

    def _pwrite(self, k0: int, data: np.ndarray) -> list[Path]:
        """Write slices at ``k0`` into the .npy/BigTIFF/contiguous HDF5 pixel data
        with plain writes, in pieces on the pool's threads; the file to flush."""
        buf = memoryview(np.ascontiguousarray(data)).cast("B")
        pos = self._offset + k0 * self.slice_bytes
        fd = os.open(self.payload, os.O_WRONLY)
        try:
            step = max(PIECE_BYTES, -(-len(buf) // self.threads))
            pieces = [(buf[a : a + step], pos + a) for a in range(0, len(buf), step)]
            _all(self._threads(), [(self._write_piece, fd, piece, at) for piece, at in pieces])
        finally:
            os.close(fd)
        return [self.payload]

    def _chunk_origins(self, k0: int, k1: int) -> list[tuple[int, int, int]]:
        _, cy, cx = self.chunks
        return [
            (k, y, x) for k in range(k0, k1) for y in range(0, self.shape[1], cy) for x in range(0, self.shape[2], cx)
        ]

    def _chunk(self, data: np.ndarray, k0: int, origin) -> np.ndarray:
        """The chunk at ``origin`` cut from slab ``data`` (starting at slice ``k0``),
        zero-padded to the full chunk shape at the volume's edges (as stored)."""
        k, y, x = origin
        _, cy, cx = self.chunks
        part = data[k - k0 : k - k0 + 1, y : y + cy, x : x + cx]
        if part.shape[1:] == (cy, cx):
            return part
        full = np.zeros((1, cy, cx), self.dtype)
        full[:, : part.shape[1], : part.shape[2]] = part
        return full

    def _encoded(self, data, k0, origin):
        chunk = self._chunk(data, k0, origin)
        if self._codec is None:
            return origin, np.ascontiguousarray(chunk)
        t = time.perf_counter()
        stored = self._codec.encode(chunk)
        self._count("compress", time.perf_counter() - t, chunk.nbytes)
        return origin, stored

    def _hdf5_file(self):
        """The chunked HDF5 payload, opened once (HDF5's own file driver: it
        writes each chunk with one call, no Python in between)."""
        with self._h5_lock:
            if self._h5 is None:
                import h5py

                self._h5 = h5py.File(self.payload, "r+")
                if self.sync:  # the chunks' way to disk, started from one thread
                    self._follower = WritebackFollower(self._h5.id.get_vfd_handle())
            return self._h5

    def _close_hdf5(self) -> None:
        """Close the chunked HDF5 payload (its last metadata go to the file)."""
        with self._h5_lock:
            f, self._h5 = self._h5, None
            follower, self._follower = self._follower, None
        if follower is not None:  # before the file closes: it starts the writeback of the file's descriptor
            follower.close()
        if f is not None:
            f.close()

    def _write_hdf5_chunks(self, k0: int, k1: int, data: np.ndarray) -> list[Path]:
        """Compress the slab's chunks on the pool and give each to HDF5 as a
        direct chunk as it is ready, in order, noted to the file's
        :class:`~leveret.io.atomic.WritebackFollower` when the output syncs (its
        writeback starts from that thread as soon as it is free); then write
        HDF5's chunk index."""
        from collections import deque

        self._check_room(data.nbytes)
        pool = self._threads()
        ds = self._hdf5_file()[self.dataset]
        follower = self._follower
        # a window of chunks compressed ahead, given to HDF5 in order (chunks lie in the file in order)
        origins = deque(self._chunk_origins(k0, k1))
        encoding: deque = deque()
        started: list = []
        try:
            while origins or encoding:
                while origins and len(encoding) < 2 * self.threads:
                    encoding.append(pool.submit(self._encoded, data, k0, origins.popleft()))
                    started.append(encoding[-1])
                origin, stored = encoding.popleft().result()
                t = time.perf_counter()
                ds.id.write_direct_chunk(origin, stored)
                self._count("write", time.perf_counter() - t, len(stored))
                if follower is not None:
                    where = ds.id.get_chunk_info_by_coord(origin)
                    follower.wrote(where.byte_offset, where.size)
            t = time.perf_counter()
            ds.file.flush()  # the chunk index
            self._count("write", time.perf_counter() - t)
        except BaseException:
            _cancel(started)
            raise
        return [self.payload]

    def _write_zarr_chunks(self, k0: int, k1: int, data: np.ndarray) -> list[Path]:
        """Each chunk compressed and written as its zarr v3 chunk file
        (``c/<z>/<y>/<x>``, chunk indices) on the pool; the files and folders
        to flush."""
        _, cy, cx = self.chunks
        root = self.payload / "c"
        origins = self._chunk_origins(k0, k1)
        rows = sorted({root / str(k) / str(y // cy) for k, y, _ in origins})
        for folder in rows:
            folder.mkdir(parents=True, exist_ok=True)
        files = [root / str(k) / str(y // cy) / str(x // cx) for k, y, x in origins]

        def one(origin, path):
            _, stored = self._encoded(data, k0, origin)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            try:
                self._write_piece(fd, stored, 0)  # its writeback started: the files are flushed one by one
            finally:
                os.close(fd)

        _all(self._threads(), [(one, origin, path) for origin, path in zip(origins, files)])
        return files + rows + sorted({f.parent for f in rows}) + [root, self.payload]

    def _write_tiff_slices(self, k0: int, k1: int, data: np.ndarray) -> list[Path]:
        import tifffile

        files = [self.payload / self.slice_name(k) for k in range(k0, k1)]

        def one(k, f):
            t = time.perf_counter()
            with open(f, "wb") as fh:
                tifffile.imwrite(
                    fh,
                    data[k - k0],
                    photometric="minisblack",
                    compression=self.compression,
                    description=json.dumps({"slice": k, **self.metadata}),
                    metadata=None,
                    software=SOFTWARE,
                )
                if self.sync:  # the folder's files are flushed one by one: the disk starts on this one now
                    fh.flush()  # tifffile's last bytes into the file, so that the writeback sees them
                    start_writeback(fh.fileno())
            self._count("write", time.perf_counter() - t, f.stat().st_size)

        _all(self._threads(), [(one, k, f) for k, f in zip(range(k0, k1), files)])
        return files + [self.payload]

    # -- progress ----------------------------------------------------------------------------
    @property
    def done(self) -> np.ndarray:
        """Boolean mask (nz,) of the slices written and recorded (read-only copy)."""
        return self._done.copy()

    @property
    def complete(self) -> bool:
        return bool(self._done.all())

    def sources(self) -> list[tuple[int, int, object]]:
        """``(k0, k1, source)`` for each slab written with a ``source`` (:meth:`write`,
        :meth:`record`), those of the interrupted run a resumed writer took over
        included: what the finished slabs were made from, to be checked against
        the input before a resumed run continues."""
        return [(k0, k1, source) for k0, k1, source in self._sources if self._done[k0:k1].all()]

    def todo(self, slab_slices: int) -> list[tuple[int, int]]:
        """Slabs ``(k0, k1)`` of at most ``slab_slices`` slices covering every
        slice not yet written, in order."""
        slab_slices = int(slab_slices)
        if slab_slices < 1:
            raise ValueError(f"slab_slices: expected a positive number of slices, got {slab_slices}")
        out = []
        for a, b in _runs(~self._done):
            out += [(k, min(b, k + slab_slices)) for k in range(a, b, slab_slices)]
        return out

    # -- writing -----------------------------------------------------------------------------
    def write(self, start: int, data, *, source=None) -> None:
        """Write ``data`` (k, ny, nx) at slices ``start:start+k``. Once they are
        flushed to disk (in the background, :meth:`synced`) the slices are
        recorded as done, with ``source`` (JSON-able, e.g. a checksum of the
        input the slab was made from) if given: :meth:`sources`. Several
        threads may write different slabs at once."""
        if self._finished:
            raise ValueError("write: the output is already finished")
        if type(data).__module__.startswith("cupy"):
            data = data.get()
        data = np.asarray(data)
        if data.ndim == 2:
            data = data[None]
        k0, k1 = int(start), int(start) + data.shape[0]
        if data.ndim != 3 or data.shape[1:] != self.shape[1:] or not (0 <= k0 < k1 <= self.shape[0]):
            raise ValueError(
                f"data: expected slices (k, {self.shape[1]}, {self.shape[2]}) within "
                f"0..{self.shape[0]} at start={start}, got shape {data.shape}"
            )
        data = data.astype(self.dtype, copy=False)
        try:
            with self._writing("write"):
                self._raise_sync_error()
                self._unsync(k0, k1, source, self._write(k0, k1, data))
        except Exception as exc:
            if is_space_error(exc):
                raise self._out_of_space(exc) from exc
            raise

    @contextlib.contextmanager
    def _writing(self, what: str):
        """One write (or record) under way: refused once aborted; abort and
        finish wait for every one to end."""
        with self._io:
            if self._aborted:
                raise RuntimeError(f"{what}: the output {str(self.path)!r} was aborted")
            self._active += 1
        try:
            yield
        finally:
            with self._io:
                self._active -= 1
                self._io.notify_all()

    def _quiet(self) -> None:
        """Wait (holding ``_io``) until no write is under way."""
        while self._active:
            self._io.wait()

    def _record(self, slabs: list[tuple[int, int, object]]) -> None:
        """Mark each slab ``(k0, k1, source)`` done (made from ``source``) and save
        the manifest once; if the save fails they count as not written, as the
        manifest on disk says."""
        with self._record_lock:
            before, sources = self._done.copy(), list(self._sources)
            for k0, k1, source in slabs:
                self._done[k0:k1] = True
                if source is not None:
                    self._sources = [s for s in self._sources if s[1] <= k0 or s[0] >= k1]  # rewritten slices
                    self._sources.append((k0, k1, _json_safe({"source": source})["source"]))
            try:
                self._save_manifest()
            except BaseException:
                self._done, self._sources = before, sources
                raise

    # -- flushing in the background ------------------------------------------------------------
    def _unsync(self, k0: int, k1: int, source, paths: list[Path]) -> None:
        """Hand a written slab to the thread that flushes it to disk and records it."""
        with self._flushing:
            self._unsynced.append((k0, k1, source, paths))
            if self._syncer is None:
                self._syncer = threading.Thread(target=self._sync_loop, name="leveret-sync", daemon=True)
                self._syncer.start()

    def _sync_loop(self) -> None:
        """Flush every slab written so far with one flush of each file they touched,
        then record them with one manifest save; again while slabs come, then end."""
        while True:
            with self._flushing:
                if not self._unsynced:
                    self._syncer = None
                    self._flushing.notify_all()
                    return
                batch, self._unsynced = self._unsynced, []
            try:
                if self._sync_error is None and (self.resume or not self._aborted):
                    if self.sync:  # files before the folders naming them, as each slab lists them
                        t = time.perf_counter()
                        for path in dict.fromkeys(p for *_, paths in batch for p in paths):
                            _fsync_path(path)
                        self._count("sync", time.perf_counter() - t)
                    if self.resume or not self._aborted:  # again: an abort may have come during the flush
                        self._record([(k0, k1, source) for k0, k1, source, _ in batch])
            except BaseException as exc:  # raised by the next write() or by finish()
                self._sync_error = exc

    def synced(self) -> None:
        """Wait until every slab written so far is on disk and recorded (:attr:`done`);
        raise the failure that stopped that, if one did (a full disk as
        :class:`OutputSpaceError`)."""
        with self._flushing:
            while self._syncer is not None:
                self._flushing.wait()
        try:
            self._raise_sync_error()
        except Exception as exc:
            if is_space_error(exc) and not isinstance(exc, OutputSpaceError):
                raise self._out_of_space(exc) from exc
            raise

    def _raise_sync_error(self) -> None:
        if self._sync_error is not None:
            raise self._sync_error

    def _stop_syncer(self) -> None:
        """Wait for the flushing thread to end: with ``resume``, once every slab
        written is recorded (a resumed run goes on from there); without, after
        the batch it is flushing (the rest would be removed with the output)."""
        with self._flushing:
            if not self.resume:
                self._unsynced.clear()
            syncer = self._syncer
        if syncer is not None and syncer is not threading.current_thread():
            syncer.join()

    def _out_of_space(self, exc: BaseException) -> OutputSpaceError:
        """The error for a full disk met while writing (data or manifest); the
        partial output is removed now (once the other slabs being written have
        stopped) unless kept for ``resume``."""
        error = self._space_error(exc)
        if not self.resume:  # as the message says: gone now, not at the caller's abort()
            with self._io:
                self._aborted = True
                self._quiet()
                self._close_handles()
                if self._lock.held:
                    _remove(self.partial)
                self._lock.release()
        return error

    def _write(self, k0: int, k1: int, data: np.ndarray) -> list[Path]:
        """Write slices ``k0:k1``; the files and folders to flush to disk."""
        if self.format in ("npy", "bigtiff") or self.contiguous:
            return self._pwrite(k0, data)
        if self.format == "tiff-stack":
            return self._write_tiff_slices(k0, k1, data)
        if self.format == "hdf5" and self.compression == "lzf":  # no encoder here: HDF5 writes it
            self._check_room(data.nbytes)
            ds = self._hdf5_file()[self.dataset]
            ds[k0:k1] = data
            ds.file.flush()
            return [self.payload]
        if self.format == "hdf5":
            return self._write_hdf5_chunks(k0, k1, data)
        return self._write_zarr_chunks(k0, k1, data)

    def _close_handles(self) -> None:
        """End the writing threads and close an open HDF5 payload (errors after
        an abort are of no interest: the payload is kept or removed as it is)."""
        try:
            self._stop_syncer()
            self._close_hdf5()
        finally:
            pool, self._pool = self._pool, None
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    def region_store(self) -> Path | None:
        """The partial zarr store, into which other processes (Dask workers)
        may write whole slabs with :func:`write_region` while this writer
        holds the lock; :meth:`record` then records them. None for the other
        formats, which have one writer: this one."""
        if self.format != "zarr" or self.chunks[0] != 1:
            return None
        return self.payload

    def record(self, start: int, stop: int, *, source=None) -> None:
        """Record slices ``start:stop``, written into :meth:`region_store` by
        another process, as done (the manifest is updated on disk), with
        ``source`` as :meth:`write` does."""
        if self.region_store() is None:
            raise ValueError(f"record: a {self.format} output is written through write() only")
        k0, k1 = int(start), int(stop)
        if not 0 <= k0 < k1 <= self.shape[0]:
            raise ValueError(f"start: expected 0 <= start < stop <= {self.shape[0]}, got {start}:{stop}")
        try:
            with self._writing("record"):
                self._record([(k0, k1, source)])
        except Exception as exc:
            if is_space_error(exc):
                raise self._out_of_space(exc) from exc
            raise

    def slice_name(self, k: int) -> str:
        """File name of slice ``k`` in a TIFF-folder output (``slice_00000.tif``, ...)."""
        width = max(5, len(str(self.shape[0] - 1)))
        return f"slice_{k:0{width}d}.tif"

    def finish(self) -> Path:
        """Rename the complete payload onto ``path`` and remove the partial folder.

        Raises ValueError if some slices were never written."""
        if self._finished:
            return self.path
        self.synced()
        if not self.complete:
            missing = _runs(~self._done)
            raise ValueError(f"finish: slices {missing} of {self.path} were never written")
        with self._io:
            if self._aborted:  # the run was stopped (and the lock released): commit nothing
                raise RuntimeError(f"finish: the writing of {self.path} was aborted")
            self._quiet()
            try:
                self._close_handles()
            except Exception as exc:
                if is_space_error(exc):
                    raise self._space_error(exc) from exc
                raise
            if self.sync:
                _fsync_path(self.payload)
                if self.payload.is_dir():
                    for f in self.payload.rglob("*"):
                        if f.is_file():
                            _fsync_path(f)
            _commit(self.payload, self.path, self.overwrite, self.kind)
            if self.sync:
                _fsync_path(self.path.parent)
            _remove(self.partial)
            self._finished = True
            self._lock.release()
        unregister_cleanup(id(self))
        return self.path

    def abort(self) -> None:
        """Stop writing: keep the partial output for a resumed run if
        ``resume``, else remove it. Waits for the slabs being written (from
        other threads) to end and, with ``resume``, to be recorded; nothing is
        written afterwards."""
        self._aborted = True  # first: a write waiting for the lock must not start
        with self._io:
            self._quiet()
            with contextlib.suppress(Exception):
                self._close_handles()
            # Only while holding the lock: once released, the partial folder
            # may already be another writer's.
            if not self._finished and not self.resume and self._lock.held:
                _remove(self.partial)
            self._lock.release()
        unregister_cleanup(id(self))

    def __enter__(self) -> "SlabWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None or not self._finished:
            self.abort()

    def __repr__(self) -> str:
        return (
            f"SlabWriter({str(self.path)!r}, {self.format}, shape={self.shape}, {self.dtype}, "
            f"{int(self._done.sum())}/{self.shape[0]} slices written)"
        )


def write_region(store, start: int, data: np.ndarray) -> None:
    """Write slices ``data`` (k, ny, nx) at ``start`` into the zarr array at
    ``store`` and flush them to disk. The store must exist (a partial output
    removed meanwhile is an error, not recreated); with chunks one slice deep,
    two slabs never share a chunk, so processes may write slabs concurrently."""
    import zarr

    start = int(start)
    zarr.open_array(str(store), mode="r+")[start : start + data.shape[0]] = data
    store = Path(store)
    chunks = store / "c"  # zarr v3's chunk keys: c/<z>/<y>/<x>, one z per slice here
    folders = [chunks / str(k) for k in range(start, start + data.shape[0])] if chunks.is_dir() else [store]
    for folder in folders:  # the chunk files themselves, then the entries naming them
        if not folder.exists():  # an all-zero slice: zarr writes no chunk for it
            continue
        for f in sorted(folder.rglob("*"), reverse=True):
            _fsync_path(f)
        _fsync_path(folder)
    _fsync_path(store)


def _all(pool, calls) -> None:
    """Run ``calls`` (``(fn, *args)`` tuples) on ``pool`` and wait for them. On
    the first failure the calls not started are cancelled, and the failure is
    raised once the running ones have ended (nothing still writes)."""
    from concurrent.futures import FIRST_EXCEPTION, wait

    futures = [pool.submit(*call) for call in calls]
    _, pending = wait(futures, return_when=FIRST_EXCEPTION)
    if pending:
        _cancel(pending)
    for future in futures:
        if not future.cancelled():
            future.result()


def _cancel(futures) -> None:
    """Cancel ``futures`` not started and wait for the running ones."""
    from concurrent.futures import wait

    for future in futures:
        future.cancel()
    wait(futures)


def _h5_plain(val) -> bool:
    if isinstance(val, (bool, int, float, str)):
        return True
    if isinstance(val, list) and val and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in val):
        return True
    return False


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Ranges [a, b) where ``mask`` is True."""
    m = np.concatenate([[False], np.asarray(mask, bool), [False]])
    edges = np.flatnonzero(m[1:] != m[:-1])
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


def write_slabs(path, slabs: Iterable[tuple[int, np.ndarray]], shape, dtype=np.float32, **kwargs) -> Path:
    """Write ``(start, data)`` slabs through a :class:`SlabWriter` and finish it."""
    with SlabWriter(path, shape, dtype, **kwargs) as w:
        for start, data in slabs:
            w.write(start, data)
        return w.finish()
