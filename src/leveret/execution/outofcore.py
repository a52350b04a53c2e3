"""Out-of-core reconstruction: volumes larger than memory, slab by slab into a file.

One slab's work is :func:`leveret.execution.slab.reconstruct_slab`, a plain
function that a scheduler can run anywhere. :func:`reconstruct_to_file` is
the driver: it plans the slab size from
  the memory limits (:func:`plan`), reads the scan lazily
  (:func:`leveret.io.open_array`), reconstructs the slabs straight into
  a :class:`leveret.io.SlabWriter` (TIFF folder, BigTIFF, HDF5, zarr or .npy),
  retries a slab with fewer slices when CUDA runs out of memory, and reports
  the peak host memory it measured. The slabs run in this process through the
  staged pipeline of :mod:`leveret.execution.pipeline` (reading, uploading,
  reconstructing, downloading, compressing and writing overlapped, on one GPU
  or several), or with ``client=`` on a Dask cluster
  (:mod:`leveret.execution.executors`); the output, its lock and its resume
  manifest stay with the driver either way.

A parallel-beam slab needs only the detector rows at its height; a cone-beam
or laminography slab needs the rows its voxels project to in any view (with
a margin), which :func:`leveret.algorithms.fdk_weights.rows_seen` computes
from the matrices; a helical slab only the views whose window reaches it, and
the rows it projects to in those (:func:`leveret.execution.slab.slab_band`).
"""

from __future__ import annotations

import logging
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..algorithms.parallel_fbp import fbp_bytes_per_slice
from ..cuda import gpu_free_bytes
from ..geometry import ConeGeometry, ParallelGeometry, ParallelVecGeometry, VolumeGeometry
from ..geometry.volume import volume_3d
from ..resources import format_bytes, host_available_bytes, peak_rss_bytes
from .memory import SlabPlan, plan_slabs
from .slab import is_helical, slab_band

log = logging.getLogger(__name__)

#: Share of the free host memory a run plans for when no cap is given.
HOST_FRACTION = 0.6
#: Share of the free GPU memory a run plans for when no cap is given.
GPU_FRACTION = 0.6


# -- memory estimates and the plan ---------------------------------------------------------------


def _rows_for(geometry, volume: VolumeGeometry, slices: int, border: int = 0) -> int:
    """Most detector rows any slab of ``slices`` slices needs (with ``border`` rows each side)."""
    if isinstance(geometry, ParallelGeometry):
        per = volume.spacing("z") / geometry.row_spacing
        return min(geometry.n_rows, math.ceil(slices * per) + 2 + 2 * int(border))
    return _band_for(geometry, volume, slices)[1]


def _band_for(geometry, volume: VolumeGeometry, slices: int, border: int = 0) -> tuple[int, int]:
    """(views, rows): most projections and detector rows any slab of ``slices``
    slices needs (parallel beam: with ``border`` rows each side)."""
    if isinstance(geometry, ParallelGeometry):
        return geometry.n_angles, _rows_for(geometry, volume, slices, border)
    # Cone and laminography: the slab's rows through the worst (most magnified)
    # slab (a helical one: and its views); check the two ends and the middle of the volume.
    views = rows = 0
    for k0 in {0, max(0, (volume.nz - slices) // 2), max(0, volume.nz - slices)}:
        band = slab_band(geometry, volume, (k0, min(volume.nz, k0 + slices)))
        if band is not None:
            views, rows = max(views, band[0][1] - band[0][0]), max(rows, band[1][1] - band[1][0])
    return max(views, 1), max(rows, 1)


def _steps_bytes(geometry, volume: VolumeGeometry, slices: int, border: int, stitched) -> int:
    """Bytes phase retrieval (``border`` > 0: its padded FFT buffers and its
    output) and half-acquisition stitching (``stitched``: the two views it
    blends and the stitched rows) hold beyond the line integrals of one slab."""
    from ..preprocess._common import next_fast_len
    from ..preprocess.phase import CHUNK_VALUES

    if not border and stitched is None:
        return 0
    n_angles = geometry.n_angles
    out = 0
    if border:
        rows = _rows_for(geometry, volume, slices, border)
        shape = [next_fast_len(n + 2 * min(border, n)) for n in (rows, geometry.n_cols)]
        per_view = shape[0] * (shape[1] // 2 + 1)
        views = min(n_angles, max(1, CHUNK_VALUES // per_view))
        # the float32 buffer and its inverse transform, the complex64 transform and product
        out += views * (2 * shape[0] * shape[1] * 4 + 2 * per_view * 8)
    if stitched is not None:
        rows = _rows_for(geometry, volume, slices)
        out += stitched.n_angles * rows * (2 * geometry.n_cols + 2 * stitched.n_cols) * 4
    return int(out)


def host_bytes(
    geometry,
    volume: VolumeGeometry,
    slices: int,
    *,
    input_itemsize: int = 4,
    preprocess: bool = False,
    resident: int = 0,
    stripes: bool = False,
    overlap: bool = False,
    backend: str = "cpu",
    gpus: int = 1,
    output_itemsize: int = 4,
    method: str = "fbp",
    border: int = 0,
    stitched=None,
) -> int:
    """Estimated peak host memory (bytes) of an out-of-core run at ``slices`` per slab.

    Counts the data the run holds, not the interpreter and libraries: the
    rows read (stored dtype), their float32 line integrals, the FBP/FDK
    working set of the slab (padded FFT buffers, filtered sinograms, the
    output slab) and one more output slab for the writer's encoding, plus
    ``resident`` bytes held throughout (flats and darks). Stripe removal
    ("sort") holds two int64 orderings and two float32 copies of the rows.
    ``overlap``: this process's staged pipeline
    (:mod:`leveret.execution.pipeline`), which holds the raw rows and the
    output slabs of :func:`leveret.execution.pipeline.in_flight` at once (of
    ``output_itemsize`` bytes per voxel); on the CUDA ``backend`` its
    ``gpus`` x ``WORKERS_PER_GPU`` workers preprocess and reconstruct on the
    GPUs, so the host holds neither line integrals nor working sets.
    ``method``: "fbp", or a parallel-beam iterative method (its working set,
    :func:`iterative_bytes`, instead of FBP's).
    ``border``: rows of context read each side of a slab's own for phase
    retrieval (and its FFT buffers); ``stitched``: the ParallelGeometry of a
    half-acquisition scan's stitched data (:func:`leveret.execution.slab.stitched_geometry`),
    which the reconstruction's working set is sized for.
    """
    n_angles, rows = _band_for(geometry, volume, slices, border)
    band = n_angles * rows * geometry.n_cols
    raw = band * input_itemsize
    lines = band * 4 if (preprocess or input_itemsize != 4) else 0
    lines += _steps_bytes(geometry, volume, slices, border, stitched)
    image = volume.ny * volume.nx * 4
    if isinstance(geometry, ParallelGeometry) and method != "fbp":
        work = iterative_bytes(stitched or geometry, volume, slices, method, backend)
    elif isinstance(geometry, ParallelGeometry):
        fbp_geometry = stitched or geometry
        work = slices * fbp_bytes_per_slice(fbp_geometry.n_angles, fbp_geometry.n_cols, volume.ny, volume.nx, 4)
        work += band * 1  # the finiteness check's boolean mask
    else:
        view_bytes = 12 * rows * geometry.n_cols * 4
        chunk_views = min(n_angles, max(1, int(256e6 // view_bytes)))
        work = chunk_views * view_bytes + slices * image
    flats = 2 * rows * geometry.n_cols * 4 if preprocess else 0
    lines += band * 24 if stripes else 0
    if not overlap:
        return int(raw + lines + work + slices * image + flats + resident)
    from .pipeline import WORKERS_PER_GPU, in_flight

    on_gpu = backend == "cuda"
    raws, outs = in_flight(gpus * WORKERS_PER_GPU if on_gpu else 1, backend)
    held = raws * raw + outs * slices * volume.ny * volume.nx * output_itemsize
    if on_gpu:
        return int(held + 2 * geometry.n_rows * geometry.n_cols * 4 + resident)  # the averaged flat and dark
    # one worker on the CPU: its line integrals and working set (its float32 slab is among the outputs)
    return int(held + lines + work + (slices * image if output_itemsize != 4 else 0) + flats + resident)


def iterative_bytes(geometry, volume: VolumeGeometry, slices: int, method: str, backend: str) -> int:
    """Working set (bytes) of a parallel-beam slab of ``slices`` slices by an
    iterative ``method``: the slices' sinograms and the output slab, and one
    slice's run at a time (:func:`leveret.execution.iterate.working_bytes`)."""
    from .iterate import working_bytes

    per_slice = (geometry.n_angles * geometry.n_cols + volume.ny * volume.nx) * 4
    return int(
        slices * per_slice
        + working_bytes(method, (volume.ny, volume.nx), (geometry.n_angles, geometry.n_cols), backend=backend)
    )


def gpu_bytes(
    geometry, volume: VolumeGeometry, slices: int, method: str = "fbp", *, border: int = 0, stitched=None
) -> int:
    """Estimated peak GPU memory (bytes) of one slab of ``slices`` slices
    (``method``: "fbp" or a parallel-beam iterative method; ``border``,
    ``stitched``: as :func:`host_bytes`; the line integrals of the rows read
    count then too)."""
    if isinstance(geometry, ParallelGeometry) and method != "fbp":
        return int(
            _steps_bytes(geometry, volume, slices, border, stitched)
            + iterative_bytes(stitched or geometry, volume, slices, method, "cuda")
        )
    if isinstance(geometry, ParallelGeometry):
        fbp_geometry = stitched or geometry
        steps = _steps_bytes(geometry, volume, slices, border, stitched)
        if steps:
            steps += geometry.n_angles * _rows_for(geometry, volume, slices, border) * geometry.n_cols * 4
        return int(
            steps
            + slices
            * fbp_bytes_per_slice(fbp_geometry.n_angles, fbp_geometry.n_cols, volume.ny, volume.nx, 4, streamed=True)
        )
    n_views, rows = _band_for(geometry, volume, slices)
    view_bytes = 12 * rows * geometry.n_cols * 4
    chunk_views = min(n_views, max(1, int(256e6 // view_bytes)))
    return int(chunk_views * view_bytes + 2 * slices * volume.ny * volume.nx * 4)


def plan(
    geometry,
    volume: VolumeGeometry | None = None,
    *,
    backend: str = "auto",
    host_memory: int | None = None,
    gpu_memory: int | None = None,
    input_itemsize: int = 4,
    preprocess: bool = False,
    resident: int = 0,
    max_slices: int | None = None,
    stripes: bool = False,
    overlap: bool = False,
    gpus: int = 1,
    output_itemsize: int = 4,
    method: str = "fbp",
    border: int = 0,
    stitched=None,
) -> SlabPlan:
    """The slab size for an out-of-core run: the largest whose estimated host
    and GPU peaks fit the limits.

    Parameters
    ----------
    geometry : ParallelGeometry (3D), ConeGeometry or ParallelVecGeometry
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
        The run goes through this process's staged pipeline
        (:mod:`leveret.execution.pipeline`): the host holds the slabs it has
        in flight, each GPU's memory is shared by its ``WORKERS_PER_GPU``
        workers, and without ``max_slices`` the volume is cut into about
        ``TARGET_SLABS`` slabs (:func:`leveret.execution.pipeline.pipeline_slab`)
        so that every stage is busy.
    gpus : int
        GPUs the pipeline runs on (``overlap``).
    output_itemsize : int
        Bytes per stored voxel (2 for float16 or uint16 outputs).
    method : str
        "fbp", or the iterative method of a parallel-beam run
        (:mod:`leveret.execution.iterate`), whose working set is counted.
    border : int
        Detector rows of context read each side of a slab's own rows (phase
        retrieval: :func:`leveret.execution.slab.border_rows`); their FFT
        buffers count too.
    stitched : ParallelGeometry, optional
        A half-acquisition scan: the geometry of its stitched data
        (:func:`leveret.execution.slab.stitched_geometry`), which ``volume``
        (default: its ``default_volume()``) and the reconstruction's working
        set are sized for.

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

    volume = _volume(stitched or geometry, volume)
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
    return _plan(
        geometry,
        volume,
        backend,
        host_limit,
        gpu_limit,
        input_itemsize=input_itemsize,
        preprocess=preprocess,
        resident=resident,
        max_slices=max_slices,
        stripes=stripes,
        overlap=overlap,
        gpus=gpus,
        output_itemsize=output_itemsize,
        method=method,
        border=border,
        stitched=stitched,
    )


def _plan(
    geometry,
    volume,
    backend: str,
    host_limit: int,
    gpu_limit: int | None,
    *,
    input_itemsize: int,
    preprocess: bool,
    resident: int,
    max_slices: int | None,
    stripes: bool,
    overlap: bool = False,
    gpus: int = 1,
    output_itemsize: int = 4,
    method: str = "fbp",
    border: int = 0,
    stitched=None,
) -> SlabPlan:
    """The plan for limits already known and a backend already resolved
    (here, or on the Dask workers)."""
    import dataclasses

    from .pipeline import WORKERS_PER_GPU, pipeline_slab

    if method not in ("fbp", "laminography") and not isinstance(geometry, ParallelGeometry):
        raise ValueError(
            f"method: {method!r} runs slab by slab in parallel beam only; a cone-beam volume's "
            "slabs are not independent"
        )
    # the pipeline's workers of one GPU each hold a slab there: its raw rows, working set and output
    share = WORKERS_PER_GPU if overlap and backend == "cuda" else 1

    steps = dict(border=border, stitched=stitched)

    def gpu(s):
        if share == 1:
            return gpu_bytes(geometry, volume, s, method, **steps)
        n_views, rows = _band_for(geometry, volume, s, border)
        raw = n_views * rows * geometry.n_cols * input_itemsize
        return share * (
            gpu_bytes(geometry, volume, s, method, **steps) + raw + s * volume.ny * volume.nx * output_itemsize
        )

    the_plan = plan_slabs(
        volume.nz,
        lambda s: host_bytes(
            geometry,
            volume,
            s,
            input_itemsize=input_itemsize,
            preprocess=preprocess,
            resident=resident,
            stripes=stripes,
            overlap=overlap,
            backend=backend,
            gpus=gpus,
            output_itemsize=output_itemsize,
            method=method,
            **steps,
        ),
        gpu if backend == "cuda" else None,
        host_limit=int(host_limit),
        gpu_limit=None if gpu_limit is None else int(gpu_limit),
        volume_bytes=volume.size * output_itemsize,
        backend=backend,
        max_slices=max_slices,
    )
    if not overlap or max_slices is not None:
        return the_plan
    size = pipeline_slab(volume.nz, the_plan.slab_slices)
    if size == the_plan.slab_slices:
        return the_plan
    host = host_bytes(
        geometry,
        volume,
        size,
        input_itemsize=input_itemsize,
        preprocess=preprocess,
        resident=resident,
        stripes=stripes,
        overlap=True,
        backend=backend,
        gpus=gpus,
        output_itemsize=output_itemsize,
        method=method,
        **steps,
    )
    on_gpu = gpu(size) if backend == "cuda" else 0
    shown = {c[0] for c in the_plan.candidates}
    extra = () if size in shown else ((size, int(host), int(on_gpu)),)
    return dataclasses.replace(
        the_plan,
        slab_slices=size,
        host_bytes=int(host),
        gpu_bytes=int(on_gpu),
        candidates=tuple(sorted(the_plan.candidates + extra)),
    )


def _volume(geometry, volume):
    if not isinstance(geometry, (ParallelGeometry, ConeGeometry, ParallelVecGeometry)):
        raise TypeError(
            f"geometry: expected a ParallelGeometry, a ConeGeometry or a ParallelVecGeometry, "
            f"got {type(geometry).__name__}"
        )
    if isinstance(geometry, ParallelGeometry) and geometry.is_2d:
        raise ValueError("geometry: out-of-core reconstruction takes a 3D ParallelGeometry (n_rows given)")
    if volume is None:
        if isinstance(geometry, ParallelGeometry):
            volume = geometry.default_volume()
        else:
            raise ValueError("volume: a cone-beam or laminography reconstruction needs a VolumeGeometry")
    volume_3d(volume)
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
        Seconds each stage was busy, in pipeline order (``"read"``,
        ``"preprocess"``, ``"upload"``, ``"reconstruct"``, ``"download"``,
        ``"compress"``, ``"write"``, ``"sync"``; those that ran): they overlap, so the
        busiest bounds the run (:attr:`stages` has their shares). With a Dask
        client the workers read and reconstruct (and write a zarr output):
        only the writes done here are counted.
    stages : dict
        Per stage (this process's pipeline): ``seconds``, ``bytes``, ``rate``
        (GB/s of its bytes) and ``busy`` (share of the wall time its lanes
        were working); see :meth:`leveret.execution.pipeline.StageTimes.report`.
    value_range : (float, float) or None
        The range an integer output dtype was stored over.
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
    stages: dict = field(default_factory=dict)
    value_range: tuple | None = None

    @property
    def bound(self) -> str | None:
        """The stage that was busy the largest share of the run (None without a split)."""
        return max(self.stages, key=lambda s: self.stages[s]["busy"]) if self.stages else None

    def summary(self) -> str:
        traced = "" if self.peak_traced is None else f", traced peak {format_bytes(self.peak_traced)}"
        return (
            f"wrote {self.path}: {self.slabs_done} slab(s) of up to {self.slab_slices} slice(s) in "
            f"{self.seconds:.2f} s; planned host peak {format_bytes(self.plan.host_bytes)}, "
            f"process peak RSS {format_bytes(self.peak_rss)}{traced}"
            + (f"; {self.slices_resumed} slice(s) resumed" if self.slices_resumed else "")
            + ("; busy " + ", ".join(f"{k} {v:.2f} s" for k, v in self.busy.items()) if self.busy else "")
            + (f" (bound by {self.bound})" if self.bound else "")
            + (f"; {self.retries} GPU out-of-memory retr{'y' if self.retries == 1 else 'ies'}" if self.retries else "")
        )


def reconstruct_to_file(
    projections,
    geometry,
    output,
    *,
    volume: VolumeGeometry | None = None,
    flats=None,
    darks=None,
    log_transform: bool = False,
    stripes: str | None = None,
    stripe_size: int = 5,
    stripe_options: dict | None = None,
    phase: dict | None = None,
    half_acquisition: float | None = None,
    backend: str = "auto",
    host_memory: int | None = None,
    gpu_memory: int | None = None,
    slab_slices: int | None = None,
    resume: bool = False,
    overwrite: bool = False,
    dataset: str | None = None,
    compression="default",
    metadata: dict | None = None,
    params: dict | None = None,
    progress: bool = False,
    on_plan=None,
    client=None,
    retries: int = 2,
    output_dtype="float32",
    output_range=None,
    io_threads: int | None = None,
    sync: bool = True,
    **options,
) -> OutOfCoreResult:
    """Reconstruct a scan slab by slab straight into a file, within a memory cap.

    Parameters
    ----------
    projections : path or array-like (n_angles, n_rows, n_cols)
        A path for :func:`leveret.io.open_array` (read lazily, only the rows
        each slab needs), or an array-like with NumPy slicing (``np.memmap``,
        :class:`leveret.io.FrameStack`, an h5py or zarr dataset, an ndarray).
    geometry : ParallelGeometry (3D), ConeGeometry or ParallelVecGeometry
    output : str or os.PathLike
        ``.h5``/``.zarr``/``.tif``/``.npy`` or a folder ``dir/`` (one TIFF per
        slice); see :class:`leveret.io.SlabWriter`.
    volume : VolumeGeometry, optional
        Default ``geometry.default_volume()`` (parallel beam only; with
        ``half_acquisition``, the stitched geometry's).
    flats, darks, log_transform, stripes, stripe_size, stripe_options
        Preprocessing of the raw rows, see :func:`preprocess_rows`.
    phase : dict, optional
        Parallel beam: phase retrieval of each projection's transmission
        (:func:`leveret.preprocess.retrieve_phase`'s keyword arguments
        ``energy``, ``distance``, ``pixel_size``, ``delta_beta``, optionally
        ``method``, ``width``) in place of ``-log``; needs ``flats`` and
        ``darks`` or ``log_transform``. Each slab reads
        :func:`leveret.execution.slab.border_rows` rows more on each side
        (clipped at the detector's edges), filters them with its own and
        drops them, so that it matches the retrieval of whole projections
        to the filter's tail beyond the border (``BORDER_TOLERANCE``).
    half_acquisition : float, optional
        Parallel beam: a 360-degree scan with the rotation axis at this
        detector column near one edge: each slab's sinograms are stitched
        (:func:`leveret.preprocess.half_acquisition`, after the other steps)
        and reconstructed with the stitched geometry
        (:func:`leveret.execution.slab.stitched_geometry`), whose
        ``default_volume()`` is the default volume.
    backend : {"auto", "cuda", "cpu"}
        With ``client``, resolved on the workers.
    host_memory, gpu_memory : int, optional
        Caps in bytes for the plan (default: a share of what is free; with
        ``client``, per worker thread: of the smallest worker's memory limit
        and free GPU memory).
    slab_slices : int, optional
        Upper bound on slices per slab (the plan may choose fewer). Default:
        the plan's, cut for this process's pipeline into about
        ``TARGET_SLABS`` slabs (:func:`plan` with ``overlap``), the first and
        the last in smaller pieces (:func:`leveret.execution.pipeline.graded`).
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
        HDF5 dataset path; compression (see :class:`leveret.io.SlabWriter`:
        Blosc lz4 by default for HDF5 and zarr, on every core).
    output_dtype : {"float32", "float16", "uint16", "uint8"}
        What the volume is stored as (:mod:`leveret.io.quantize`): half or a
        quarter of the bytes. float16 clips beyond +-65504; the integer types
        map ``output_range`` onto their whole range, clipping outside it.
    output_range : (lo, hi), "auto" or None
        The value range of an integer ``output_dtype`` (None: "auto", the
        0.01 and 99.99 percentiles of a middle slab reconstructed first,
        widened by 10 % of their span each side; a resumed run takes the
        range its partial output was started with). Stored in the metadata
        (``value_range``, ``scale_factor``, ``add_offset``).
    io_threads : int, optional
        Threads that read each slab's rows and that compress and write each
        slab (default: one per core).
    sync : bool
        Flush the volume to disk before it counts as written (default); False
        leaves it in the page cache (see :class:`leveret.io.SlabWriter`).
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
        Passed to :func:`reconstruct_slab` (filter, cutoff, interpolation,
        ``method="laminography"`` for a cone-beam laminography scan, ...).

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
    from .executors import DaskExecutor
    from .signals import handling

    executor = None if client is None else DaskExecutor(client, retries=retries)
    with handling():
        return _reconstruct_to_file(
            projections,
            geometry,
            output,
            volume=volume,
            flats=flats,
            darks=darks,
            log_transform=log_transform,
            stripes=stripes,
            stripe_size=stripe_size,
            stripe_options=stripe_options,
            phase=phase,
            half_acquisition=half_acquisition,
            backend=backend,
            host_memory=host_memory,
            gpu_memory=gpu_memory,
            slab_slices=slab_slices,
            resume=resume,
            overwrite=overwrite,
            dataset=dataset,
            compression=compression,
            metadata=metadata,
            params=params,
            progress=progress,
            on_plan=on_plan,
            executor=executor,
            output_dtype=output_dtype,
            output_range=output_range,
            io_threads=io_threads,
            sync=sync,
            **options,
        )


def _reconstruct_to_file(
    projections,
    geometry,
    output,
    *,
    volume,
    flats,
    darks,
    log_transform,
    stripes,
    stripe_size,
    stripe_options,
    phase,
    half_acquisition,
    backend,
    host_memory,
    gpu_memory,
    slab_slices,
    resume,
    overwrite,
    dataset,
    compression,
    metadata,
    params,
    progress,
    on_plan,
    executor,
    output_dtype,
    output_range,
    io_threads,
    sync,
    **options,
) -> OutOfCoreResult:
    import tracemalloc

    from ..io import SlabWriter, open_array
    from ..io._common import split_dataset
    from ..io.marks import check_not_input
    from ..io.quantize import output_dtype as checked_dtype
    from .pipeline import preprocess_extras
    from .slab import border_rows, check_phase, stitched_geometry

    t0 = time.perf_counter()
    if (phase is not None or half_acquisition is not None) and not isinstance(geometry, ParallelGeometry):
        raise ValueError(
            f"{'phase' if phase is not None else 'half_acquisition'}: parallel-beam scans only; "
            f"got a {type(geometry).__name__}"
        )
    if stripe_options is not None and not isinstance(stripe_options, dict):
        raise TypeError(
            f"stripe_options: expected a dict of remove_stripes' arguments, got {type(stripe_options).__name__}"
        )
    phase = check_phase(phase)
    if phase is not None and flats is None and not log_transform:
        raise ValueError(
            "phase: phase retrieval takes transmissions: give flats and darks, or "
            "log_transform=True for data that are transmissions already"
        )
    stitched = stitched_geometry(geometry, half_acquisition) if half_acquisition is not None else None
    volume = _volume(stitched or geometry, volume)
    if isinstance(projections, (str, os.PathLike)):
        source = os.fspath(projections)
        check_not_input(split_dataset(output, None)[0], [("projections", source)], flag="output")
        projections = open_array(projections, dataset=None)
        params = {"input": source, **(params or {})}
    shape = tuple(getattr(projections, "shape", ()))
    if shape != geometry.projection_shape:
        raise ValueError(
            f"projections: expected shape {geometry.projection_shape} (n_angles, n_rows, "
            f"n_cols) to match the geometry, got {shape}"
        )
    if (flats is None) != (darks is None):
        raise ValueError("flats: give flats and darks together, or neither")
    dtype = np.dtype(getattr(projections, "dtype", np.float32))
    if dtype.kind not in "biuf":
        raise ValueError(
            f"projections: expected real numbers, got dtype {dtype}"
            + ("; take .real or abs() first if that is what you mean" if dtype.kind == "c" else "")
        )
    stored = checked_dtype(output_dtype)
    if output_range is not None and not (isinstance(output_range, str) and output_range == "auto"):
        from ..io.quantize import check_range

        if stored.kind != "u":
            raise ValueError(f"output_range: a value range applies to uint8 and uint16 outputs, not {stored.name}")
        output_range = check_range(output_range)
    if io_threads is not None and (
        isinstance(io_threads, bool) or not isinstance(io_threads, (int, np.integer)) or io_threads < 1
    ):
        raise ValueError(f"io_threads: expected a positive number of threads, got {io_threads!r}")
    resident = 0
    fields = (None, None)  # the flat and the dark averaged, once: what every slab is normalised with
    if flats is not None:
        from ..preprocess import check_flats_darks

        flats, darks = np.asarray(flats), np.asarray(darks)  # the job's, as given (a resumed run's hash)
        fields = check_flats_darks(flats, darks, geometry.projection_shape[1:], averaged=True)
        resident = flats.nbytes + darks.nbytes + fields[0].nbytes + fields[1].nbytes
    itemsize = np.dtype(getattr(projections, "dtype", np.float32)).itemsize
    if slab_slices is not None and (not isinstance(slab_slices, (int, np.integer)) or slab_slices < 1):
        raise ValueError(f"slab_slices: expected a positive number of slices, got {slab_slices!r}")
    devices = options.pop("devices", None) if executor is None else None
    plan_args = dict(
        input_itemsize=itemsize,
        preprocess=flats is not None or log_transform,
        resident=resident,
        max_slices=slab_slices,
        stripes=stripes is not None,
        output_itemsize=stored.itemsize,
        method=options.get("method", "fbp"),
        border=border_rows(phase),
        stitched=stitched,
    )
    if executor is not None and is_helical(geometry):
        raise ValueError(
            "client: a helical scan runs in this process's pipeline (each slab reads only the "
            "views that see it); leave client=None"
        )
    if executor is not None:  # Dask: sized for the smallest worker, on the backend the workers have
        capacity = executor.capacity(backend)
        the_plan = _plan(
            geometry,
            volume,
            capacity["backend"],
            host_memory if host_memory is not None else int(HOST_FRACTION * capacity["host"]),
            gpu_memory if gpu_memory is not None or capacity["gpu"] is None else int(GPU_FRACTION * capacity["gpu"]),
            **plan_args,
        )
    else:
        from ..backends import resolve
        from ..cuda.devices import for_backend

        devices = for_backend(devices, resolve(backend))
        the_plan = plan(
            geometry,
            volume,
            backend=backend,
            host_memory=host_memory,
            gpu_memory=gpu_memory,
            overlap=True,
            gpus=1 if devices is None else len(devices),
            **plan_args,
        )
    if on_plan is not None:
        on_plan(the_plan)
    log.debug("%s", the_plan.describe())
    extras = preprocess_extras(stripe_options, phase, None if half_acquisition is None else float(half_acquisition))
    preprocessing = dict(
        flats=fields[0],
        darks=fields[1],
        log_transform=log_transform,
        stripes=stripes,
        stripe_size=stripe_size,
        **extras,
    )
    value_range = sample = None
    # the input's fingerprint (a few reads) is taken while the range's slices are reconstructed
    fingerprinting = ThreadPoolExecutor(1, thread_name_prefix="leveret-fingerprint")
    fingerprint = fingerprinting.submit(_fingerprint, projections, (params or {}).get("input"))
    fingerprinting.shutdown(wait=False)
    if stored.kind == "u":
        value_range = _given_range(output_range, output, dataset, resume)
        if value_range is None:
            sample = _sample(
                projections,
                geometry,
                volume,
                the_plan,
                stored,
                preprocessing=preprocessing,
                options=options,
                io_threads=io_threads,
                checksum=resume,
            )
            value_range = sample.value_range
    # which GPUs ran it does not change the result: a resumed run may use others
    job = {
        "geometry": _describe(geometry),
        "volume": _describe(volume),
        "options": {k: val for k, val in options.items() if k != "devices"},
        "log_transform": log_transform,
        "flats": flats,
        "darks": darks,
        "stripes": stripes,
        "stripe_size": stripe_size,
        **extras,
        **(params or {}),
    }
    if stored != np.float32:  # float32 runs keep the parameters (and resume) of earlier versions
        job["output"] = {"dtype": stored.name, "range": output_range if output_range is not None else "auto"}
    fingerprint = fingerprint.result()
    from ..io.slabs import volume_metadata

    meta = volume_metadata(volume, stored, value_range, **(metadata or {}))

    size = the_plan.slab_slices
    retries = slabs_done = 0
    traced = tracemalloc.is_tracing()
    stages: dict = {}
    busy: dict = {}
    with SlabWriter(
        output,
        volume.shape,
        stored,
        params=job,
        metadata=meta,
        resume=resume,
        overwrite=overwrite,
        dataset=dataset,
        compression=compression,
        fingerprint=fingerprint,
        threads=io_threads,
        sync=sync,
    ) as writer:
        resumed = int(writer.done.sum())
        if resumed:
            check_sources(writer, projections)
        # the slices sampled for the range are the run's own: written, not reconstructed again
        built = []
        if sample is not None and sample.slices is not None and not writer.done[slice(*sample.region)].any():
            built = [sample]
        if executor is None:
            done, retries, size, stages = _run_pipeline(
                projections,
                geometry,
                volume,
                writer,
                the_plan,
                devices,
                preprocessing,
                options,
                value_range,
                size,
                io_threads,
                resume,
                progress,
                built,
            )
            slabs_done = done
            busy = {stage: part["seconds"] for stage, part in stages.items()}
        else:
            slabs_done, retries, size, writing = _run_executor(
                executor,
                projections,
                geometry,
                volume,
                writer,
                the_plan,
                preprocessing,
                options,
                value_range,
                size,
                progress,
                resumed,
                built,
            )
            busy = {"write": writing}
        path = writer.finish()
    return OutOfCoreResult(
        path=path,
        plan=the_plan,
        slab_slices=size,
        slabs_done=slabs_done,
        slices_resumed=resumed,
        retries=retries,
        seconds=time.perf_counter() - t0,
        peak_rss=peak_rss_bytes(),
        peak_traced=tracemalloc.get_traced_memory()[1] if traced else None,
        busy=busy,
        stages=stages,
        value_range=value_range,
    )


def _given_range(output_range, output, dataset, resume) -> tuple | None:
    """The value range of an integer output given as (lo, hi), or the one a resumed
    run's partial output was started with; None when it is to be sampled."""
    from ..io.slabs import partial_metadata

    if output_range is not None and not isinstance(output_range, str):
        return output_range
    if resume:
        started = partial_metadata(output, dataset) or {}
        if started.get("value_range") is not None:
            return tuple(float(v) for v in started["value_range"])
    return None


def _sample(projections, geometry, volume, the_plan, stored, *, preprocessing, options, io_threads, checksum):
    """An integer output's value range from the first slices of a middle slab,
    reconstructed before the others (:func:`leveret.execution.pipeline.sample_range`)."""
    from .pipeline import sample_range

    size = the_plan.slab_slices
    n = min(size, 8, volume.nz)
    k0 = min(volume.nz // 2 // size * size, volume.nz - n)  # where a slab of the plan starts
    t = time.perf_counter()
    sample = sample_range(
        projections,
        geometry,
        volume,
        (k0, k0 + n),
        backend=the_plan.backend,
        output_dtype=stored,
        options={k: v for k, v in options.items() if k != "devices"},
        read_threads=io_threads,
        checksum=checksum,
        **preprocessing,
    )
    lo, hi = sample.value_range
    log.info("output range: %.6g to %.6g (from slices %d:%d, in %.2f s)", lo, hi, k0, k0 + n, time.perf_counter() - t)
    return sample


def _run_pipeline(
    projections,
    geometry,
    volume,
    writer,
    the_plan,
    devices,
    preprocessing,
    options,
    value_range,
    size,
    io_threads,
    resume,
    progress,
    built,
):
    """The slabs through this process's staged pipeline, after those ``built``
    (:class:`leveret.execution.pipeline.RangeSample`): (slabs done, retries,
    smallest slab, split)."""
    from ..io.atomic import register_cleanup, unregister_cleanup
    from .pipeline import Pipeline

    pipeline = Pipeline(
        projections,
        geometry,
        volume,
        writer,
        backend=the_plan.backend,
        devices=devices,
        options=options,
        value_range=value_range,
        slab_slices=size,
        read_threads=io_threads or max(1, os.cpu_count() or 1),
        checksum=resume,
        progress=progress,
        **preprocessing,
    )
    # Registered before any slab starts, so that an interrupted command stops the
    # stages before it removes (or keeps) the partial output.
    register_cleanup(id(pipeline), pipeline.cancel)
    try:
        stages = pipeline.run(_leave_out(writer.todo(size), built), built)
    finally:
        pipeline.cancel()
        unregister_cleanup(id(pipeline))
    return pipeline.slabs_done, pipeline.retries, min(size, pipeline.smallest), stages


def _leave_out(regions, built) -> list[tuple[int, int]]:
    """``regions`` (slice ranges) without the slices of the slabs ``built``."""
    for sample in built:
        a, b = sample.region
        regions = [(x, y) for k0, k1 in regions for x, y in ((k0, min(k1, a)), (max(k0, b), k1)) if x < y]
    return regions


def _run_executor(
    executor,
    projections,
    geometry,
    volume,
    writer,
    the_plan,
    preprocessing,
    options,
    value_range,
    size,
    progress,
    resumed,
    built,
):
    """The slabs on a Dask cluster, written here as they come, after those
    ``built`` (:class:`leveret.execution.pipeline.RangeSample`): (slabs done,
    retries, smallest slab, write seconds)."""
    from tqdm.auto import tqdm

    from ..io.atomic import register_cleanup, unregister_cleanup
    from .executors import OutOfMemoryOnDevice
    from .pipeline import on_terminal

    retries = slabs_done = 0
    writing = 0.0
    # Registered before the slabs, so that an interrupted command cancels the
    # queued slabs before it removes (or keeps) the partial output.
    register_cleanup(id(executor), executor.cancel)
    try:
        executor.start(
            projections,
            geometry,
            volume,
            store=writer.region_store(),
            backend=the_plan.backend,
            output_dtype=writer.dtype.name,
            value_range=value_range,
            **preprocessing,
            **options,
        )
        with tqdm(
            total=volume.nz,
            initial=resumed,
            unit="slice",
            desc="reconstruct",
            disable=not progress,
            leave=not on_terminal(),
            dynamic_ncols=True,
        ) as bar:
            for region in _leave_out(writer.todo(size), built):
                executor.submit(region)
            for sample in built:
                t_write = time.perf_counter()
                writer.write(sample.region[0], sample.slices, source=sample.made_from)
                writing += time.perf_counter() - t_write
                slabs_done += 1
                bar.update(sample.slices.shape[0])
            for (k0, k1), slab in executor.completed():
                if isinstance(slab, OutOfMemoryOnDevice):
                    if k1 - k0 == 1:
                        raise MemoryError(f"memory: the GPU ran out of memory even for one slice ({slab.message})")
                    size = min(size, max(1, (k1 - k0) // 2))
                    retries += 1
                    log.warning("CUDA out of memory on slices %d:%d; retrying with %d slice(s) per slab", k0, k1, size)
                    for k in reversed(range(k0, k1, size)):  # the halves go first, in order
                        executor.submit((k, min(k1, k + size)), first=True)
                    continue
                t_write = time.perf_counter()
                made_from = executor.made_from((k0, k1))
                if isinstance(slab, tuple):  # written into the store by its worker
                    writer.record(k0, k1, source=made_from)
                else:
                    writer.write(k0, slab, source=made_from)
                writing += time.perf_counter() - t_write
                del slab
                slabs_done += 1
                bar.update(k1 - k0)
    except BaseException:
        executor.cancel()  # before the writer aborts: no task writes into what it removes
        raise
    finally:
        executor.cancel()
        unregister_cleanup(id(executor))
    return slabs_done, retries, size, writing


def check_sources(writer, projections) -> None:
    """Raise ValueError if the input rows any finished slab of a resumed ``writer``
    was made from changed since (:func:`leveret.execution.executors.rows_source`).

    Reads those rows again, one slab's at a time: for a run resumed after a
    fraction f of a volume was written, f of the input (CRC-32 at about
    2.2 GB/s on one core, or the disk's reading speed where that is slower).
    """
    from ..io.slabs import rows_checksum

    for k0, k1, made_from in writer.sources():
        if not made_from:  # a slab off the detector: made from nothing
            continue
        r0, r1 = made_from["rows"]
        n0, n1 = made_from.get("views", (0, projections.shape[0]))
        if rows_checksum(np.asarray(projections[n0:n1, r0:r1, :])) != made_from["crc32"]:
            raise ValueError(
                f"resume: the input changed since the partial output {str(writer.partial)!r} was written "
                f"(detector rows {r0}:{r1}, from which slices {k0}:{k1} were made, differ); run without "
                "--resume to start afresh, or restore the input"
            )


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
        except (OSError, ValueError):  # not a path after all: the samples alone
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
