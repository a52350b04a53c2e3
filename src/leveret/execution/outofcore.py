"""Out-of-core reconstruction: volumes larger than memory, slab by slab into a file.

One slab's work is :func:`leveret.execution.slab.reconstruct_slab`, a plain
function that a scheduler can run anywhere. :func:`reconstruct_to_file` is
the driver: it plans the slab size from
  the memory limits (:func:`plan`), reads the scan lazily
  (:func:`leveret.io.open_array`), reconstructs slab after slab straight into
  a :class:`leveret.io.SlabWriter` (TIFF folder, BigTIFF, HDF5, zarr or .npy),
  retries a slab with fewer slices when CUDA runs out of memory, and reports
  the peak host memory it measured. The slabs run in this process, or with
  ``client=`` on a Dask cluster (:mod:`leveret.execution.executors`: one plan, two
  executors); the output, its lock and its resume manifest stay with the
  driver either way.

A parallel-beam slab needs only the detector rows at its height; a cone-beam
slab needs the rows its voxels project to in any view (with a margin), which
:func:`leveret.algorithms.fdk_weights.rows_seen` computes from the matrices.
"""
from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field

import numpy as np

from ..algorithms.parallel_fbp import fbp_bytes_per_slice
from ..cuda import gpu_free_bytes
from ..geometry import ConeGeometry, ParallelGeometry, VolumeGeometry
from ..resources import format_bytes, host_available_bytes, peak_rss_bytes
from .memory import SlabPlan, plan_slabs
from .slab import slab_rows

log = logging.getLogger(__name__)

#: Share of the free host memory a run plans for when no cap is given.
HOST_FRACTION = 0.6
#: Share of the free GPU memory a run plans for when no cap is given.
GPU_FRACTION = 0.6


# -- memory estimates and the plan ---------------------------------------------------------------

def _rows_for(geometry, volume: VolumeGeometry, slices: int) -> int:
    """Most detector rows any slab of ``slices`` slices needs."""
    if isinstance(geometry, ParallelGeometry):
        per = volume.spacing("z") / geometry.row_spacing
        return min(geometry.n_rows, int(math.ceil(slices * per)) + 2)
    # Cone: the slab's rows through the worst (most magnified) slab; check the
    # two ends and the middle of the volume.
    worst = 0
    for k0 in {0, max(0, (volume.nz - slices) // 2), max(0, volume.nz - slices)}:
        rows = slab_rows(geometry, volume, (k0, min(volume.nz, k0 + slices)))
        worst = max(worst, 0 if rows is None else rows[1] - rows[0])
    return max(worst, 1)


def host_bytes(geometry, volume: VolumeGeometry, slices: int, *, input_itemsize: int = 4,
               preprocess: bool = False, resident: int = 0, stripes: bool = False,
               overlap: bool = False) -> int:
    """Estimated peak host memory (bytes) of an out-of-core run at ``slices`` per slab.

    Counts the data the run holds, not the interpreter and libraries: the
    rows read (stored dtype), their float32 line integrals, the FBP/FDK
    working set of the slab (padded FFT buffers, filtered sinograms, the
    output slab) and one more output slab for the writer's encoding, plus
    ``resident`` bytes held throughout (flats and darks). Stripe removal
    ("sort") holds two int64 orderings and two float32 copies of the rows.
    ``overlap``: the next slab's rows are read and the last slab written
    while one is reconstructed (this process's pipeline,
    :class:`leveret.execution.executors.LocalExecutor`): one more slab's rows and one
    more output slab.
    """
    n_angles = geometry.n_angles if isinstance(geometry, ParallelGeometry) else geometry.n_views
    rows = _rows_for(geometry, volume, slices)
    band = n_angles * rows * geometry.n_cols
    raw = band * input_itemsize
    lines = band * 4 if (preprocess or input_itemsize != 4) else 0
    image = volume.ny * volume.nx * 4
    if isinstance(geometry, ParallelGeometry):
        work = slices * fbp_bytes_per_slice(n_angles, geometry.n_cols, volume.ny, volume.nx, 4)
        work += band * 1        # the finiteness check's boolean mask
    else:
        view_bytes = 12 * rows * geometry.n_cols * 4
        chunk_views = min(n_angles, max(1, int(256e6 // view_bytes)))
        work = chunk_views * view_bytes + slices * image
    flats = 2 * rows * geometry.n_cols * 4 if preprocess else 0
    lines += band * 24 if stripes else 0
    ahead = raw + slices * image if overlap else 0
    return int(raw + lines + work + slices * image + flats + resident + ahead)


def gpu_bytes(geometry, volume: VolumeGeometry, slices: int) -> int:
    """Estimated peak GPU memory (bytes) of one slab of ``slices`` slices."""
    if isinstance(geometry, ParallelGeometry):
        return int(slices * fbp_bytes_per_slice(geometry.n_angles, geometry.n_cols, volume.ny, volume.nx,
                                                4, streamed=True))
    rows = _rows_for(geometry, volume, slices)
    view_bytes = 12 * rows * geometry.n_cols * 4
    chunk_views = min(geometry.n_views, max(1, int(256e6 // view_bytes)))
    return int(chunk_views * view_bytes + 2 * slices * volume.ny * volume.nx * 4)


def plan(geometry, volume: VolumeGeometry | None = None, *, backend: str = "auto",
         host_memory: int | None = None, gpu_memory: int | None = None, input_itemsize: int = 4,
         preprocess: bool = False, resident: int = 0, max_slices: int | None = None,
         stripes: bool = False, overlap: bool = False) -> SlabPlan:
    """The slab size for an out-of-core run: the largest whose estimated host
    and GPU peaks fit the limits.

    Parameters
    ----------
    geometry : ParallelGeometry (3D) or ConeGeometry
    volume : VolumeGeometry, optional
        Default ``geometry.default_volume()`` (parallel beam).
    backend : {"auto", "cuda", "cpu"}
    host_memory : int, optional
        Host bytes the run may use; default ``HOST_FRACTION`` of what is available.
    gpu_memory : int, optional
        GPU bytes the run may use; default ``GPU_FRACTION`` of what is free.
    input_itemsize : int
        Bytes per stored input value (2 for uint16 counts).
    preprocess : bool
        Flat/dark normalisation is done (float32 copies of the rows).
    resident : int
        Bytes held for the whole run (flats and darks).
    max_slices : int, optional
        Upper bound on the slab (e.g. a user's ``--slab-slices``).
    stripes : bool
        Stripe removal is done (its sorting buffers).
    overlap : bool
        Reading, reconstructing and writing overlap (a run in this process):
        two slabs' rows and outputs are held at once.

    Returns
    -------
    SlabPlan
        ``print(plan.describe())`` prints it.

    Raises
    ------
    MemoryError
        Not even one slice fits.
    """
    from ..backends import resolve

    volume = _volume(geometry, volume)
    backend = resolve(backend)
    if host_memory is None:
        host_limit = int(HOST_FRACTION * host_available_bytes())
    else:
        host_limit = int(host_memory)
        if host_limit <= 0:
            raise ValueError(f"host_memory: expected a positive number of bytes, got {host_memory!r}")
    gpu_limit = None
    if backend == "cuda":
        gpu_limit = int(gpu_memory) if gpu_memory is not None else int(GPU_FRACTION * gpu_free_bytes())
    return _plan(geometry, volume, backend, host_limit, gpu_limit, input_itemsize=input_itemsize,
                 preprocess=preprocess, resident=resident, max_slices=max_slices, stripes=stripes,
                 overlap=overlap)


def _plan(geometry, volume, backend: str, host_limit: int, gpu_limit: int | None, *, input_itemsize: int,
          preprocess: bool, resident: int, max_slices: int | None, stripes: bool,
          overlap: bool = False) -> SlabPlan:
    """The plan for limits already known and a backend already resolved
    (here, or on the Dask workers)."""
    return plan_slabs(
        volume.nz,
        lambda s: host_bytes(geometry, volume, s, input_itemsize=input_itemsize, preprocess=preprocess,
                             resident=resident, stripes=stripes, overlap=overlap),
        (lambda s: gpu_bytes(geometry, volume, s)) if backend == "cuda" else None,
        host_limit=int(host_limit), gpu_limit=None if gpu_limit is None else int(gpu_limit),
        volume_bytes=volume.size * 4, backend=backend, max_slices=max_slices)


def _volume(geometry, volume):
    if not isinstance(geometry, (ParallelGeometry, ConeGeometry)):
        raise ValueError(f"geometry: expected a ParallelGeometry or a ConeGeometry, got {type(geometry).__name__}")
    if isinstance(geometry, ParallelGeometry) and geometry.is_2d:
        raise ValueError("geometry: out-of-core reconstruction takes a 3D ParallelGeometry (n_rows given)")
    if volume is None:
        if isinstance(geometry, ParallelGeometry):
            volume = geometry.default_volume()
        else:
            raise ValueError("volume: a cone-beam reconstruction needs a VolumeGeometry")
    if not isinstance(volume, VolumeGeometry) or volume.is_2d:
        raise ValueError(f"volume: expected a 3D VolumeGeometry, got {volume!r}")
    return volume


# -- the driver ----------------------------------------------------------------------------------

@dataclass
class OutOfCoreResult:
    """What :func:`reconstruct_to_file` did.

    Attributes
    ----------
    path : pathlib.Path
        The finished output.
    plan : SlabPlan
        The plan it started with.
    slab_slices : int
        Slices per slab at the end (smaller than planned after a GPU
        out-of-memory retry).
    slabs_done : int
        Slabs reconstructed by this call (a resumed run skips finished ones).
    slices_resumed : int
        Slices found already written in a partial output.
    retries : int
        Slabs retried with fewer slices after CUDA ran out of memory.
    seconds : float
        Wall time.
    peak_rss : int
        Peak resident memory of the process (bytes; interpreter and libraries
        included), as the OS reports it.
    peak_traced : int or None
        Peak memory traced by :mod:`tracemalloc` during the run (bytes), when
        tracing was on (NumPy allocations are traced); None otherwise.
    busy : dict
        Seconds each stage was busy in this process: ``"read"`` (the rows),
        ``"reconstruct"`` and ``"write"``; they overlap, so the largest bounds
        the run. With a Dask client the workers read and reconstruct (and
        write a zarr output): only the writes done here are counted.
    """

    path: object
    plan: SlabPlan
    slab_slices: int
    slabs_done: int
    slices_resumed: int
    retries: int
    seconds: float
    peak_rss: int
    peak_traced: int | None
    busy: dict = field(default_factory=dict)

    def summary(self) -> str:
        traced = "" if self.peak_traced is None else f", traced peak {format_bytes(self.peak_traced)}"
        return (f"wrote {self.path}: {self.slabs_done} slab(s) of up to {self.slab_slices} slice(s) in "
                f"{self.seconds:.2f} s; planned host peak {format_bytes(self.plan.host_bytes)}, "
                f"process peak RSS {format_bytes(self.peak_rss)}{traced}"
                + (f"; {self.slices_resumed} slice(s) resumed" if self.slices_resumed else "")
                + ("; busy " + ", ".join(f"{k} {v:.2f} s" for k, v in self.busy.items()) if self.busy else "")
                + (f"; {self.retries} GPU out-of-memory retr{'y' if self.retries == 1 else 'ies'}"
                   if self.retries else ""))


def reconstruct_to_file(projections, geometry, output, *, volume: VolumeGeometry | None = None,
                        flats=None, darks=None, log_transform: bool = False, stripes: str | None = None,
                        stripe_size: int = 5, backend: str = "auto",
                        host_memory: int | None = None, gpu_memory: int | None = None,
                        slab_slices: int | None = None, resume: bool = False, overwrite: bool = False,
                        dataset: str | None = None, compression="default", metadata: dict | None = None,
                        params: dict | None = None, progress: bool = False, on_plan=None,
                        client=None, retries: int = 2, **options) -> OutOfCoreResult:
    """Reconstruct a scan slab by slab straight into a file, within a memory cap.

    Parameters
    ----------
    projections : path or array-like (n_angles, n_rows, n_cols)
        A path for :func:`leveret.io.open_array` (read lazily, only the rows
        each slab needs), or an array-like with NumPy slicing (``np.memmap``,
        :class:`leveret.io.FrameStack`, an h5py or zarr dataset, an ndarray).
    geometry : ParallelGeometry (3D) or ConeGeometry
    output : str or os.PathLike
        ``.h5``/``.zarr``/``.tif``/``.npy`` or a folder ``dir/`` (one TIFF per
        slice); see :class:`leveret.io.SlabWriter`.
    volume : VolumeGeometry, optional
        Default ``geometry.default_volume()`` (parallel beam only).
    flats, darks, log_transform, stripes, stripe_size
        Preprocessing of the raw rows, see :func:`preprocess_rows`.
    backend : {"auto", "cuda", "cpu"}
        With ``client``, resolved on the workers.
    host_memory, gpu_memory : int, optional
        Caps in bytes for the plan (default: a share of what is free; with
        ``client``, per worker thread: of the smallest worker's memory limit
        and free GPU memory).
    slab_slices : int, optional
        Upper bound on slices per slab (the plan may choose fewer).
    resume : bool
        Continue a partial output of the same job, and keep this one's if
        the run stops early (see :class:`leveret.io.SlabWriter`). A run on a
        Dask cluster and one in this process continue each other's outputs.
        Each slab's input rows are checksummed as they are read, and a
        resumed run reads the finished slabs' rows again and refuses to
        continue if any value changed (:func:`check_sources`).
    overwrite : bool
        Replace an existing output of the same format that leveret wrote
        (:class:`leveret.io.SlabWriter`). An output that is the input file
        ``projections`` names (or a folder holding it) is refused either way.
    dataset, compression
        HDF5 dataset path; compression (see :class:`leveret.io.SlabWriter`).
    metadata : dict, optional
        Extra metadata stored with the volume (voxel size, origin and units
        are always stored).
    params : dict, optional
        Extra job parameters identifying the job for ``resume`` (for example
        the input's path); geometry, volume, options and the flats/darks are
        always included. When ``params["input"]`` (or ``projections``) is a
        path, the input's fingerprint (sizes, modification times, sampled
        blocks, :func:`leveret.io.slabs.input_fingerprint`) is recorded too,
        so that resuming after the input changed is refused; samples of the
        projections' values are always part of it.
    progress : bool
        Progress bar over slices (ETA and throughput).
    on_plan : callable, optional
        Called with the :class:`SlabPlan` before any work (the CLI prints it).
    client : distributed.Client, optional
        Run the slabs on this Dask cluster (:class:`leveret.execution.executors.DaskExecutor`)
        instead of in this process. The workers read their rows from the
        input themselves (a file input must be at the same path on every
        worker) and write a zarr output's slabs straight into it; other
        formats are written by this process as slabs finish. The plan, the
        lock, the partial output and the resume manifest stay here.
    retries : int
        With ``client``: times a slab that raised is run again (a slab whose
        worker died is always run again).
    **options
        Passed to :func:`reconstruct_slab` (filter, cutoff, interpolation, ...).

    Returns
    -------
    OutOfCoreResult

    Notes
    -----
    Called from the main thread, SIGTERM and SIGHUP raise
    :class:`leveret.execution.signals.Interrupted` (a KeyboardInterrupt) for the
    call's duration, so the partial output is removed (kept with
    ``resume``) however the run is stopped; slabs queued on a Dask cluster
    are cancelled.

    Examples
    --------
    >>> from distributed import Client                                  # doctest: +SKIP
    >>> with Client("tcp://scheduler:8786") as client:                  # doctest: +SKIP
    ...     reconstruct_to_file("scan.h5", g, "rec.zarr", client=client)
    """
    from .executors import DaskExecutor, LocalExecutor
    from .signals import handling

    executor = LocalExecutor() if client is None else DaskExecutor(client, retries=retries)
    with handling():
        return _reconstruct_to_file(projections, geometry, output, volume=volume, flats=flats, darks=darks,
                                    log_transform=log_transform, stripes=stripes, stripe_size=stripe_size,
                                    backend=backend, host_memory=host_memory, gpu_memory=gpu_memory,
                                    slab_slices=slab_slices, resume=resume, overwrite=overwrite,
                                    dataset=dataset, compression=compression, metadata=metadata,
                                    params=params, progress=progress, on_plan=on_plan, executor=executor,
                                    **options)


def _reconstruct_to_file(projections, geometry, output, *, volume, flats, darks, log_transform, stripes,
                         stripe_size, backend, host_memory, gpu_memory, slab_slices, resume, overwrite,
                         dataset, compression, metadata, params, progress, on_plan, executor,
                         **options) -> OutOfCoreResult:
    import tracemalloc

    from ..io import SlabWriter, open_array
    from ..io._common import split_dataset
    from ..io.atomic import register_cleanup, unregister_cleanup
    from ..io.marks import check_not_input
    from .executors import OutOfMemoryOnDevice

    t0 = time.perf_counter()
    volume = _volume(geometry, volume)
    if isinstance(projections, (str, os.PathLike)):
        source = os.fspath(projections)
        check_not_input(split_dataset(output, None)[0], [("projections", source)], flag="output")
        projections = open_array(projections, dataset=None)
        params = {"input": source, **(params or {})}
    shape = tuple(getattr(projections, "shape", ()))
    if shape != geometry.projection_shape:
        raise ValueError(f"projections: expected shape {geometry.projection_shape} (n_angles, n_rows, "
                         f"n_cols) to match the geometry, got {shape}")
    if (flats is None) != (darks is None):
        raise ValueError("flats: give flats and darks together, or neither")
    dtype = np.dtype(getattr(projections, "dtype", np.float32))
    if dtype.kind not in "biuf":
        raise ValueError(f"projections: expected real numbers, got dtype {dtype}"
                         + ("; take .real or abs() first if that is what you mean" if dtype.kind == "c" else ""))
    resident = 0
    if flats is not None:
        from ..preprocess import check_flats_darks
        flats, darks = check_flats_darks(flats, darks, geometry.projection_shape[1:])
        resident = flats.nbytes + darks.nbytes
    itemsize = np.dtype(getattr(projections, "dtype", np.float32)).itemsize
    if slab_slices is not None and (not isinstance(slab_slices, (int, np.integer)) or slab_slices < 1):
        raise ValueError(f"slab_slices: expected a positive number of slices, got {slab_slices!r}")
    plan_args = dict(input_itemsize=itemsize, preprocess=flats is not None or log_transform,
                     resident=resident, max_slices=slab_slices, stripes=stripes is not None)
    if executor.name == "dask":      # sized for the smallest worker, on the backend the workers have
        capacity = executor.capacity(backend)
        the_plan = _plan(geometry, volume, capacity["backend"],
                         host_memory if host_memory is not None else int(HOST_FRACTION * capacity["host"]),
                         gpu_memory if gpu_memory is not None or capacity["gpu"] is None
                         else int(GPU_FRACTION * capacity["gpu"]), **plan_args)
    else:
        the_plan = plan(geometry, volume, backend=backend, host_memory=host_memory, gpu_memory=gpu_memory,
                        overlap=True, **plan_args)
    if on_plan is not None:
        on_plan(the_plan)
    log.debug("%s", the_plan.describe())
    # which GPUs ran it does not change the result: a resumed run may use others
    job = {"geometry": _describe(geometry), "volume": _describe(volume),
           "options": {k: val for k, val in options.items() if k != "devices"},
           "log_transform": log_transform, "flats": flats, "darks": darks, "stripes": stripes,
           "stripe_size": stripe_size, **(params or {})}
    fingerprint = _fingerprint(projections, (params or {}).get("input"))
    meta = {"voxel_size": list(volume.voxel_size), "center": list(volume.center), "axes": "zyx",
            "values": "attenuation per length unit", "software": "leveret", **(metadata or {})}

    from tqdm.auto import tqdm

    size = the_plan.slab_slices
    retries = slabs_done = 0
    writing = 0.0
    traced = tracemalloc.is_tracing()
    # Registered before the writer, so that an interrupted command cancels the
    # queued slabs before it removes (or keeps) the partial output.
    register_cleanup(id(executor), executor.cancel)
    try:
        with SlabWriter(output, volume.shape, np.float32, params=job, metadata=meta, resume=resume,
                        overwrite=overwrite, dataset=dataset, compression=compression,
                        fingerprint=fingerprint) as writer:
            try:
                resumed = int(writer.done.sum())
                if resumed:
                    check_sources(writer, projections)
                executor.start(projections, geometry, volume,
                               store=writer.region_store() if executor.name == "dask" else None,
                               flats=flats, darks=darks, log_transform=log_transform, stripes=stripes,
                               stripe_size=stripe_size, backend=the_plan.backend, **options)
                with tqdm(total=volume.nz, initial=resumed, unit="slice", desc="reconstruct",
                          disable=not progress, leave=False, dynamic_ncols=True) as bar:
                    for region in writer.todo(size):
                        executor.submit(region)
                    for (k0, k1), slab in executor.completed():
                        if isinstance(slab, OutOfMemoryOnDevice):
                            if k1 - k0 == 1:
                                raise MemoryError(f"memory: the GPU ran out of memory even for one slice "
                                                  f"({slab.message})")
                            size = min(size, max(1, (k1 - k0) // 2))
                            retries += 1
                            log.warning("CUDA out of memory on slices %d:%d; retrying with %d slice(s) per slab",
                                        k0, k1, size)
                            for k in reversed(range(k0, k1, size)):   # the halves go first, in order
                                executor.submit((k, min(k1, k + size)), first=True)
                            continue
                        t_write = time.perf_counter()
                        made_from = executor.made_from((k0, k1))
                        if isinstance(slab, tuple):      # written into the store by its worker
                            writer.record(k0, k1, source=made_from)
                        else:
                            writer.write(k0, slab, source=made_from)
                        writing += time.perf_counter() - t_write
                        del slab
                        slabs_done += 1
                        bar.update(k1 - k0)
            except BaseException:
                executor.cancel()    # before the writer aborts: no task writes into what it removes
                raise
            path = writer.finish()
    finally:
        executor.cancel()
        unregister_cleanup(id(executor))
    return OutOfCoreResult(path=path, plan=the_plan, slab_slices=size, slabs_done=slabs_done,
                           slices_resumed=resumed, retries=retries, seconds=time.perf_counter() - t0,
                           peak_rss=peak_rss_bytes(),
                           peak_traced=tracemalloc.get_traced_memory()[1] if traced else None,
                           busy={**getattr(executor, "seconds", {}), "write": writing})


def check_sources(writer, projections) -> None:
    """Raise ValueError if the input rows any finished slab of a resumed ``writer``
    was made from changed since (:func:`leveret.execution.executors.rows_source`).

    Reads those rows again, one slab's at a time: for a run resumed after a
    fraction f of a volume was written, f of the input (CRC-32 at about
    2.2 GB/s on one core, or the disk's reading speed where that is slower).
    """
    from ..io.slabs import rows_checksum

    for k0, k1, made_from in writer.sources():
        if not made_from:       # a slab off the detector: made from nothing
            continue
        r0, r1 = made_from["rows"]
        if rows_checksum(np.asarray(projections[:, r0:r1, :])) != made_from["crc32"]:
            raise ValueError(
                f"resume: the input changed since the partial output {str(writer.partial)!r} was written "
                f"(detector rows {r0}:{r1}, from which slices {k0}:{k1} were made, differ); run without "
                "--resume to start afresh, or restore the input")


def _fingerprint(projections, source) -> dict:
    """The input's fingerprint for resume: the file's (if ``source`` is a
    path) and a hash of a few sampled detector rows of ``projections``."""
    from ..io._common import split_dataset
    from ..io.slabs import input_fingerprint

    out = {}
    if isinstance(source, (str, os.PathLike)):
        try:
            path, _ = split_dataset(source, None)
            if path.exists() or any(c in os.fspath(source) for c in "*?["):
                out = input_fingerprint(source)
        except (OSError, ValueError):   # not a path after all: the samples alone
            out = {}
    import hashlib
    n_angles, n_rows = projections.shape[:2]
    digest = hashlib.sha256()
    for a in sorted({0, n_angles // 2, n_angles - 1}):
        for r in sorted({0, n_rows // 2, n_rows - 1}):
            digest.update(np.ascontiguousarray(np.asarray(projections[a, r, :])).tobytes())
    out["array"] = digest.hexdigest()
    return out


def _describe(obj) -> dict:
    """A geometry's fields as plain values (for the job's parameters hash)."""
    fields = getattr(obj, "_fields", None) or ()
    return {"type": type(obj).__name__, **{f: getattr(obj, f) for f in fields}}
