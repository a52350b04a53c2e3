"""FDK: filtered back-projection for cone-beam scans given as projection matrices."""

from __future__ import annotations

import contextlib
import functools
import threading

import numpy as np

from .. import _validate as v
from ..cuda.devices import for_backend as devices_for_backend
from ..filters import FILTERS
from ..geometry import VolumeGeometry
from ..geometry.volume import volume_3d
from ..operators.cone import RAY_MIN_VIEWS, ConeBackprojection
from ..cuda.pipeline import STAGING_BUFFERS, STAGING_BYTES, SlabDownload, Staging, ranges
from ._coverage import check_reach, check_views
from .fdk_weights import FDKWeighting, rows_seen


def fdk(
    projections,
    geometry,
    volume: VolumeGeometry,
    *,
    filter: str = "ram-lak",
    short_scan="auto",
    backend: str = "auto",
    cutoff: float = 1.0,
    padding: str = "zero",
    interpolation: str = "linear",
    precision: str = "float32",
    gpu_memory: int | None = None,
    slab_slices: int | None = None,
    progress: bool = False,
    stats: dict | None = None,
    kernel: str = "auto",
    chunk_views: int | None = None,
    devices=None,
):
    """Feldkamp-Davis-Kress reconstruction of a (near-)circular cone-beam scan.

    Parameters
    ----------
    projections : ndarray (n_views, n_rows, n_cols)
        Line integrals (value x length); NumPy or CuPy.
    geometry : ConeGeometry
        One projection matrix per view. The trajectory is taken to circle the
        z axis (the isocentre is the world origin); per-view deviations are
        honoured exactly by the back-projection.
    volume : VolumeGeometry (3D)
    filter, cutoff, padding
        As for :func:`leveret.fbp`; the ramp is applied along detector rows
        at the isocentre's scale (pixel pitch x sid / sdd).
    short_scan : "auto", bool
        Parker weights for scans covering less than a full circle ("auto":
        when the views span less than 2 pi); False weights every view by its
        angular step only (right for full scans).
    backend : {"auto", "cuda", "cpu"}
    interpolation : {"linear", "linear8"}
        See :class:`leveret.operators.ConeBackprojection`.
    precision : {"float32", "float64"}
        Arithmetic and output precision ("float64": CPU only).
    gpu_memory : int, optional
        Bytes of GPU memory the call may hold on each GPU at its peak
        (default: what is free), shared by the GPU's workers: arrays,
        textures and cuFFT work areas together (``MemoryBudget`` in
        :mod:`leveret.cuda.device_state`; CuPy input and output are the
        caller's and not counted). A budget too small for one slab is a
        ValueError before any work. A volume that does not fit is
        reconstructed in z-slabs, each from the detector rows it sees
        (docs/multigpu.md, "FDK in slabs").
    slab_slices : int, optional
        Slices per slab, overriding the plan (on either backend).
    kernel : str
        The CUDA back-projection kernel (``ConeBackprojection``'s ``kernel``;
        "auto" picks per call from the views in it and the voxel size).
    chunk_views : int, optional
        Views weighted, filtered and back-projected per call, overriding the
        plan (which takes as many as GPU memory allows, at most 1/16 of the
        views from NumPy input, so that transfers overlap compute).
    progress : bool
        A progress bar per stage.
    stats : dict, optional
        Filled with the GPU pipeline's time split when NumPy projections
        stream through the GPU (``leveret.cuda.pipeline.STATS_KEYS``, seconds;
        ``chunks``); on several workers (``devices``, or a volume in slabs on
        one GPU) summed over them, ``wall`` the call's and ``busy`` the sum
        of the workers' walls, with ``backproject``, ``wait`` and
        ``download``. Left empty on the CPU and from CuPy input.
    devices : None, "all", list of int or leveret.cuda.devices.DeviceSet
        CUDA: the GPUs to run on (None: the current one). Each takes a range
        of z slices, filtering the rows it sees once; bit-identical to one
        GPU with the same ``chunk_views`` and slabs (docs/multigpu.md).

    Returns
    -------
    ndarray (nz, ny, nx): attenuation per length unit.

    Notes
    -----
    Each view n is weighted by the cosine of the ray's angle to the central
    ray, by its angular step (halved on full scans, where every line is
    measured twice; Parker-weighted on short scans), filtered along rows with
    the band-limited ramp at the isocentre's pixel pitch, and back-projected
    with the matrix scaled so that w is the voxel's depth along the central
    ray over the source-isocentre distance: 1/w^2 is then FDK's distance
    weight.
    """
    from ..geometry import ConeGeometry

    if not isinstance(geometry, ConeGeometry):
        raise TypeError(f"geometry: expected a ConeGeometry, got {type(geometry).__name__}")
    from .helical import fdk_route, is_helical

    if is_helical(geometry):  # sources on a helix: the window-weighted FDK of algorithms/helical.py
        return fdk_route(
            projections,
            geometry,
            volume,
            short_scan=short_scan,
            devices=devices,
            gpu_memory=gpu_memory,
            filter=filter,
            cutoff=cutoff,
            padding=padding,
            backend=backend,
            interpolation=interpolation,
            kernel=kernel,
            precision=precision,
            slab_slices=slab_slices,
            chunk_views=chunk_views,
            progress=progress,
            stats=stats,
        )
    projections = v.real_array("projections", projections, geometry.projection_shape, "(n_views, n_rows, n_cols)")
    check_views(geometry)
    if not isinstance(projections, np.ndarray):  # host input is checked chunk by chunk
        v.check_finite_array("projections", projections)
    v.choice("filter", filter, FILTERS)
    dtype = np.float64 if v.precision(precision, ("float32", "float64")) == "float64" else np.float32

    from ..backends import resolve

    backend = resolve(backend, projections)
    input_on_gpu = not isinstance(projections, np.ndarray)
    if backend == "cuda" and dtype == np.float64:
        raise ValueError("precision: 'float64' runs on the CPU backend only; use backend='cpu'")
    volume_3d(volume)
    check_reach(geometry, volume)
    if not input_on_gpu:
        v.check_allocation("volume", volume.size * np.dtype(dtype).itemsize, "the reconstruction")
    settings = dict(
        filter=filter,
        cutoff=cutoff,
        padding=padding,
        short_scan=short_scan,
        interpolation=interpolation,
        kernel=kernel,
        backend=backend,
        dtype=dtype,
        stats=stats,
    )
    devices = devices_for_backend(devices, backend)
    cap = None if gpu_memory is None else v.positive_int("gpu_memory", gpu_memory)
    if backend != "cuda":
        cap = None
    # The plans fill the pool's share of the budget with arrays; textures and cuFFT have theirs.
    array_memory = None if cap is None else _pool_share(cap)
    slabs, planned_views = _plan_slabs(
        geometry,
        volume,
        backend,
        _worker_cap(array_memory, devices),
        slab_slices,
        budget=None if devices is None else devices.free_bytes(),
    )
    if devices is None and backend == "cuda" and not input_on_gpu and slabs != [(0, volume.nz)]:
        # One GPU, NumPy in, a volume in slabs: two workers sharing the GPU, so
        # that one worker's download runs beside the other's kernels (measured
        # 1.05-2.3x faster than slab after slab, docs/performance.md, "Streamed
        # FDK"), unless half the memory is too little for a slab.
        import cupy

        from ..cuda.devices import DeviceSet

        pair = DeviceSet([cupy.cuda.Device().id] * 2, shared=True)
        try:
            slabs, planned_views = _plan_slabs(
                geometry, volume, backend, _worker_cap(array_memory, pair), slab_slices, budget=pair.free_bytes()
            )
            devices = pair
        except ValueError:
            pass
    settings["chunk_views"] = planned_views
    if chunk_views is not None:
        settings["chunk_views"] = v.positive_int("chunk_views", chunk_views)
    settings["fixed_chunks"] = chunk_views is not None
    budgets = {}
    if cap is not None:
        import cupy

        from ..cuda.device_state import MemoryBudget

        ids = [cupy.cuda.Device().id] if devices is None else sorted(set(devices.ids))
        workers = 1 if devices is None else max(map(devices.ids.count, devices.ids))
        # textures in use at once: half of their share (the budget's cache keeps the other half)
        settings["texture_bytes"] = cap // TEXTURE_SHARE // 2 // workers
        _check_texture_room(settings, geometry)
        budgets = {d: MemoryBudget(d, cap, cap // TEXTURE_SHARE) for d in ids}
    try:
        return _dispatch(
            projections, geometry, volume, devices, slabs, budgets, array_memory, slab_slices, progress, settings
        )
    finally:
        for budget in budgets.values():
            budget.close()


def _dispatch(projections, geometry, volume, devices, slabs, budgets, array_memory, slab_slices, progress, settings):
    """Run the FDK plan: one device or several, the volume whole or in slabs,
    under the memory budgets (GPU id -> ``MemoryBudget``) where there are."""
    stats, backend = settings["stats"], settings["backend"]
    here = budgets.get(_current_device()) if budgets else None
    if devices is None:
        if slabs != [(0, volume.nz)]:
            return _fdk_slabs(projections, geometry, volume, slabs, progress=progress, budget=here, **settings)
        result = None
        if not isinstance(projections, np.ndarray) and backend == "cuda":  # the caller's, beside the budget
            import cupy

            result = cupy.zeros(volume.shape, settings["dtype"])
        with here.active() if here is not None else contextlib.nullcontext():
            return _reconstruct(projections, geometry, volume, progress=progress, result=result, **settings)
    plan = plan_devices(geometry, volume, devices, settings["chunk_views"], array_memory, slab_slices)
    if plan is not None:
        return _fdk_devices_filter_once(
            devices, plan, projections, geometry, volume, progress=progress, budgets=budgets, **settings
        )
    if slab_slices is None and len(slabs) < len(devices):  # every GPU gets a slab (as _plan_slabs cuts)
        step = -(-volume.nz // len(devices))
        slabs = ranges(volume.nz, step)
    y_parts = 1
    if slab_slices is None and backend == "cuda":
        slabs, y_parts = _slabs_in_boxes(
            geometry,
            volume,
            slabs,
            settings["chunk_views"],
            len(devices),
            _gpu_budget(_worker_cap(array_memory, devices), devices.free_bytes()),
        )
    filtering: dict = {}  # the filtering pass's time split, added to the slabs' below
    with here.active() if here is not None else contextlib.nullcontext():
        seen = _FilteredOnHost.make(
            projections,
            geometry,
            volume,
            progress=progress,
            stats=filtering,
            **{k: x for k, x in settings.items() if k != "stats"},
        )
    if seen is not None:  # the slabs upload rows of the filtered views
        projections, settings["weighted"] = seen, True
    out = _fdk_devices(
        devices, projections, geometry, volume, slabs, y_parts, progress=progress, budgets=budgets, **settings
    )
    if stats is not None:
        from ..cuda.pipeline import add_stats

        add_stats(stats, filtering)
    return out


#: A GPU memory budget sets this fraction (1 / TEXTURE_SHARE) aside for textures.
TEXTURE_SHARE = 8
#: Bytes of a budget's pool the plans leave for the small arrays they do not
#: count (tables, counters) and the pool's rounding of every block to 512 bytes.
PLAN_SLACK = 1 << 20


def _pool_share(cap: int) -> int:
    """Bytes of a GPU budget of ``cap`` bytes that the plans fill with arrays
    (the rest: textures, cuFFT's own memory (``MemoryBudget``) and
    ``PLAN_SLACK``); ValueError naming ``gpu_memory`` where nothing is left."""
    from ..cuda.device_state import MemoryBudget

    share = cap - cap // TEXTURE_SHARE - MemoryBudget.CUFFT_RESERVE - PLAN_SLACK
    if share < 1:
        raise ValueError(
            f"gpu_memory: {cap} bytes leave nothing for arrays beside an eighth for textures "
            f"and {(MemoryBudget.CUFFT_RESERVE + PLAN_SLACK) >> 20} MiB for cuFFT's plans and "
            f"small tables; give at least {(MemoryBudget.CUFFT_RESERVE + PLAN_SLACK) * 8 // 7 + 8} "
            f"bytes and a slab's worth more"
        )
    return share


def _current_device() -> int:
    import cupy

    return cupy.cuda.Device().id


def _texture_views(settings: dict, geometry, rows: int) -> int | None:
    """Views of ``rows`` detector rows whose texture fits a worker's share of
    the budget's texture bytes (None: no budget)."""
    share = settings.get("texture_bytes")
    if share is None:
        return None
    return max(1, share // (rows * geometry.n_cols * 4))


def _check_texture_room(settings: dict, geometry) -> None:
    """A budget's texture share holds one view; given view chunks fit it."""
    fit = settings["texture_bytes"] // (geometry.n_rows * geometry.n_cols * 4)
    if fit < 1:
        raise ValueError(
            f"gpu_memory: too small for one view's texture ({geometry.n_rows} x "
            f"{geometry.n_cols}: {geometry.n_rows * geometry.n_cols * 4 / 2**20:.1f} MiB, of an "
            f"eighth of the budget shared by the GPU's workers)"
        )
    if settings["fixed_chunks"] and settings["chunk_views"] > fit:
        raise ValueError(
            f"chunk_views: {settings['chunk_views']} views take more texture memory than "
            f"gpu_memory leaves for them ({settings['texture_bytes'] / 2**20:.1f} MiB a "
            f"worker): at most {fit}"
        )
    settings["chunk_views"] = min(settings["chunk_views"], fit)


def _worker_cap(array_memory, devices):
    """``array_memory`` (bytes of a GPU budget for arrays) per worker: a GPU's workers share it."""
    if devices is None or array_memory is None:
        return array_memory
    return array_memory // max(map(devices.ids.count, devices.ids))


def _fdk_slabs(projections, geometry, volume, slabs, *, progress, budget=None, **settings):
    """FDK on one device, z-slab after z-slab, each from the rows it sees (the
    CPU; a GPU with CuPy input, or with a cap too small for two workers);
    each slab's work under ``budget`` (a ``MemoryBudget``) where one is given."""
    dtype = settings["dtype"]
    input_on_gpu = not isinstance(projections, np.ndarray)

    if input_on_gpu:
        import cupy

        out = cupy.empty(volume.shape, dtype)
    else:
        out = np.empty(volume.shape, dtype)
    from tqdm.auto import tqdm

    for k0, k1 in tqdm(slabs, desc="fdk slabs", unit="slab", disable=not progress, leave=False):
        slab = volume.slab(k0, k1)
        rows = rows_seen(geometry, slab)
        if rows is None:
            out[k0:k1] = 0  # the slab projects off the detector in every view
            continue
        with budget.active() if budget is not None else contextlib.nullcontext():
            part = _reconstruct(
                projections[:, rows[0] : rows[1]], geometry.crop_rows(*rows), slab, progress=False, **settings
            )
        out[k0:k1] = part
        del part  # back to the budget's pool before the next slab
    return out


class DevicePart:
    """One GPU's share of an FDK call on several GPUs (:func:`plan_devices`).

    Attributes
    ----------
    device : int
        The GPU id.
    workers : int
        How many workers of the device set run on it.
    z : (int, int)
        Its contiguous range of z slices.
    rows : (int, int) or None
        The detector rows that range sees (``rows_seen``); None: none.
    slabs : list of (int, int)
        ``z`` in slabs of whole 16-slice blocks, at least one per worker.
    """

    def __init__(self, device, workers, z, rows, slabs):
        self.device, self.workers, self.z, self.rows, self.slabs = device, workers, z, rows, slabs

    @property
    def filtered_rows(self) -> int:
        """Detector rows this GPU weights and filters, per view."""
        return 0 if self.rows is None else self.rows[1] - self.rows[0]

    def __repr__(self) -> str:
        return (
            f"DevicePart(device={self.device}, workers={self.workers}, z={self.z}, rows={self.rows}, "
            f"slabs={self.slabs})"
        )


def plan_devices(
    geometry, volume: VolumeGeometry, devices, chunk_views: int, array_memory=None, slab_slices=None, free_bytes=None
) -> list[DevicePart] | None:
    """How ``fdk(..., devices=...)`` shares a volume among GPUs when every
    GPU can hold the filtered views (else None: each slab then filters the
    rows it sees itself, ``_fdk_devices``).

    Each GPU (an id listed more than once counts once) takes a contiguous
    z range and weights and filters the detector rows that range sees once,
    for every view, into a buffer of the views' size; its workers then
    back-project its slabs from that buffer. Neighbouring ranges see some
    rows in common, and each of their GPUs filters those; within a GPU
    nothing is filtered twice, however many slabs or workers it has.
    ``free_bytes(device)``: the memory a GPU may use (default: what is free
    on it, at most ``array_memory``).
    """
    from ..cuda import devices as dv
    from ..cpu.cone_plan import DEPTH

    ids = list(dict.fromkeys(devices.ids))
    if free_bytes is None:
        free_bytes = _device_free_bytes
    view_bytes = _view_bytes(geometry)
    buffer_bytes = geometry.n_views * geometry.n_rows * geometry.n_cols * 4
    slice_bytes = volume.ny * volume.nx * 4
    parts = []
    for device, z in zip(ids, dv.aligned_blocks(volume.nz, len(ids), DEPTH)):
        workers = devices.ids.count(device)
        budget = free_bytes(device)
        if array_memory is not None:
            budget = min(budget, int(array_memory))
        per_worker = (budget - buffer_bytes) // workers - min(chunk_views, geometry.n_views) * view_bytes
        if per_worker < DEPTH * slice_bytes:
            return None
        share = -(-(z[1] - z[0]) // workers)  # a slab per worker, rounded up to blocks
        step = min(-(-share // DEPTH), per_worker // slice_bytes // DEPTH) * DEPTH
        if slab_slices is not None:
            step = min(step, max(DEPTH, slab_slices // DEPTH * DEPTH))
        slabs = [(k, min(z[1], k + step)) for k in range(z[0], z[1], step)]
        parts.append(DevicePart(device, workers, z, rows_seen(geometry, volume.slab(*z)), slabs))
    return parts


def _device_free_bytes(device: int) -> int:
    import cupy

    from ..cuda import gpu_free_bytes

    with cupy.cuda.Device(device):
        return gpu_free_bytes()


def _fdk_devices_filter_once(
    devices,
    plan,
    projections,
    geometry,
    volume,
    *,
    progress,
    stats,
    filter,
    cutoff,
    padding,
    short_scan,
    interpolation,
    kernel,
    backend,
    dtype,
    chunk_views,
    fixed_chunks,
    texture_bytes=None,
    budgets=None,
):
    """FDK on several GPUs as :func:`plan_devices` shares it.

    Each worker takes a slab of its GPU's range, then view chunks from its
    GPU's queue: it uploads a chunk's rows (the rows its GPU's range sees),
    weights and filters them into the GPU's buffer of filtered views, and
    back-projects into its slab every chunk that is ready (filtered by it or
    by another worker of its GPU), in chunk order. With the queue empty it
    finishes its slab from the remaining chunks, then back-projects further
    slabs from the complete buffer. Bit-identical to one GPU with the same
    view chunks: each row is weighted and filtered as a one-GPU call does
    it, and each slab is the whole volume's back-projection (``slices``),
    chunk after chunk in the same order."""
    import time

    import cupy

    from ..cuda import devices as dv
    from ..cuda.pipeline import copy_threads_for, merge_stats, parallel_copy, stream_chunks

    input_on_gpu = not isinstance(projections, np.ndarray)
    if input_on_gpu:
        with cupy.cuda.Device(projections.device.id):  # the input is complete before other streams read it
            cupy.cuda.get_current_stream().synchronize()
            out = cupy.zeros(volume.shape, dtype)
    else:
        copy_threads_for(len(devices))
        out = np.zeros(volume.shape, dtype)
    weighting = FDKWeighting(geometry, filter=filter, cutoff=cutoff, padding=padding, short_scan=short_scan)
    op = ConeBackprojection(
        geometry,
        volume,
        backend=backend,
        interpolation=interpolation,
        matrices=weighting.frames["normalised"],
        kernel=kernel,
    )
    # the view chunks of a one-GPU call (_reconstruct)
    chunks = _view_chunks(geometry.n_views, chunk_views, from_host=not input_on_gpu and not fixed_chunks)
    n_chunks = len(chunks)
    # Chunks filtered by the time a slab takes them (every chunk, for a worker's
    # later slabs) are back-projected several per call: a call reads and writes
    # the slab once. Given view chunks are kept, for a one-GPU call's sums. The
    # GPU's workers share its texture cache, a call's and a chunk's each.
    call_views = 0
    if not fixed_chunks:
        call_views = min(
            _call_views(geometry, chunk_views, geometry.n_rows),
            op.cached_views(share=2 * max(map(devices.ids.count, devices.ids))),
        )
        if texture_bytes is not None:
            call_views = min(call_views, _texture_views({"texture_bytes": texture_bytes}, geometry, geometry.n_rows))
    by_device = {part.device: part for part in plan}
    state = {
        part.device: {
            "views": dv.work_queue([(j, j + 1) for j in range(n_chunks)]),
            "slabs": dv.work_queue(part.slabs),
            "lock": threading.Lock(),
            "buffer": None,
            "ready": [threading.Event() for _ in range(n_chunks)],
            "events": [None] * n_chunks,
        }
        for part in plan
    }
    bar_lock = threading.Lock()
    wall0 = time.perf_counter()

    def buffer_of(device):
        """The GPU's filtered views, full detector height (rows no slab of it sees stay zero)."""
        st = state[device]
        with st["lock"]:
            if st["buffer"] is None:
                st["buffer"] = cupy.zeros(geometry.projection_shape, np.float32)
                cupy.cuda.get_current_stream().synchronize()  # zeroed before another worker's stream writes
            return st["buffer"]

    def Slab(k0, k1):
        # NumPy output: downloaded as a one-GPU call does it, in pieces behind the last chunk's kernels
        return _DeviceSlab(k0, k1, volume, op.slab_alignment, None if input_on_gpu else out[k0:k1])

    def add_ready(worker, slab, st, buffer, stop, times, wait: bool) -> None:
        """Back-project into ``slab`` the chunks from ``slab.next`` on that are
        filtered (``wait``: waiting for the others' chunks), in chunk order;
        consecutive filtered chunks of up to ``call_views`` views in one call."""
        stream = cupy.cuda.get_current_stream()
        while slab.next < n_chunks and not stop.is_set():
            j = slab.next
            if not st["ready"][j].is_set():
                if not wait:
                    return
                t0 = time.perf_counter()
                while not st["ready"][j].wait(0.1):
                    if stop.is_set():
                        return
                times["wait"] += time.perf_counter() - t0
            end = j + 1
            while end < n_chunks and st["ready"][end].is_set() and chunks[end].stop - chunks[j].start <= call_views:
                end += 1
            for i in range(j, end):
                stream.wait_event(st["events"][i])
            c = slice(chunks[j].start, chunks[end - 1].stop)
            last = end == n_chunks and slab.download is not None
            t0 = time.perf_counter()
            for a, b in slab.download.slabs if last else [(0, slab.k1 - slab.k0)]:
                op(buffer[c], slab.alias, views=c, accumulate=True, slices=(slab.k0 + a, slab.k0 + b))
                if last:
                    slab.download.queue((a, b))
            times["backproject"] += time.perf_counter() - t0
            slab.next = end

    def finish(slab, times) -> None:
        t0 = time.perf_counter()
        cupy.cuda.get_current_stream().synchronize()
        try:
            if slab.download is None:
                dv.copy_to(out[slab.k0 : slab.k1], slab.res)
            else:
                slab.download.finish()
        finally:
            if slab.download is not None:
                slab.download.close()
            slab.res = slab.alias = slab.download = None  # the slab's device memory back to the pool now
        times["download"] += time.perf_counter() - t0
        with bar_lock:
            bar.update(slab.k1 - slab.k0)

    def body(worker, stop):
        part = by_device.get(worker.device)
        if part is None or part.rows is None:  # no range here, or it projects off the detector: zeros
            return 0, {}
        st = state[part.device]
        r0, r1 = part.rows
        buffer = buffer_of(worker.device)
        times = {"wait": 0.0, "backproject": 0.0, "download": 0.0}
        split: dict = {}
        t_start = time.perf_counter()
        first = dv.take(st["slabs"])
        slab = None if first is None else Slab(*first)
        n_bad = cupy.zeros((), cupy.int64)

        def taken():
            while not stop.is_set() and (item := dv.take(st["views"])) is not None:
                yield item[0]

        def compute(j, d_in, _):
            """Weight and filter chunk ``j``'s rows into the buffer, then add the ready chunks."""
            c = chunks[j]
            v.add_nonfinite_count(n_bad, d_in)
            buffer[c, r0:r1] = weighting(d_in, c, r0)
            st["events"][j] = cupy.cuda.get_current_stream().record()
            st["ready"][j].set()
            if slab is not None:
                add_ready(worker, slab, st, buffer, stop, times, wait=False)

        def complete(slab):
            """Add the remaining chunks and download; a failure stops the slab's download threads."""
            try:
                add_ready(worker, slab, st, buffer, stop, times, wait=True)
            except BaseException:
                if slab.download is not None:
                    slab.download.close()
                raise
            finish(slab, times)

        try:
            if input_on_gpu:
                for j in taken():  # a float32 copy, as a one-GPU call takes it: the input stays as it was
                    part = dv.to_device(dv.contiguous(projections[chunks[j], r0:r1]), worker.device)
                    compute(j, part.astype(np.float32), None)
            else:
                size = lambda j: (chunks[j].stop - chunks[j].start, r1 - r0, geometry.n_cols)  # noqa: E731
                stream_chunks(
                    taken(),
                    largest=max(range(n_chunks), key=lambda j: size(j)[0]),
                    in_shape=size,
                    out_shape=None,
                    load=lambda j, buf: parallel_copy(buf, projections[chunks[j], r0:r1]),
                    compute=compute,
                    stats=split,
                )
        except BaseException:
            if slab is not None and slab.download is not None:
                slab.download.close()
            raise
        if slab is not None:
            complete(slab)
        while not stop.is_set() and (more := dv.take(st["slabs"])) is not None:  # every chunk filtered by now
            dv.run_shrinking(worker, more, lambda w, k0, k1: complete(Slab(k0, k1)), stop, op.slab_alignment)
        split.pop("wall", None)
        split.update(times, wall=time.perf_counter() - t_start)
        return int(n_bad), split

    from tqdm.auto import tqdm

    try:
        with tqdm(total=volume.nz, desc="fdk slices", unit="slice", disable=not progress, leave=False) as bar:
            results = devices.run_each(body, budgets=budgets)
    finally:
        state.clear()  # the GPUs' filtered views: freed now, not whenever a reference cycle is collected
    n_bad = sum(n for n, _ in results)
    if n_bad:
        raise ValueError(v.nonfinite_message("projections", n_bad))
    if stats is not None:
        stats.update(merge_stats([split for _, split in results if split], time.perf_counter() - wall0))
    return out


class _DeviceSlab:
    """A slab being back-projected by one worker of ``_fdk_devices_filter_once``:
    chunks ``next ..`` still to add; ``host_out``: where its NumPy result goes
    (None: the output is a device array). A module-level class: one defined
    in the function would close over the output, and a class is freed only by
    the cyclic garbage collector, keeping a whole volume alive until then."""

    def __init__(self, k0, k1, volume, alignment: int, host_out):
        import cupy

        from ..operators.cone import slab_alias

        self.k0, self.k1, self.next = k0, k1, 0
        self.res = cupy.zeros((k1 - k0, volume.ny, volume.nx), np.float32)
        self.alias = slab_alias(self.res, k0, volume.shape)
        self.download = None if host_out is None else SlabDownload(self.res, alignment, host_out=host_out)


def _fdk_devices(
    devices, projections, geometry, volume, slabs, y_parts=1, *, progress, stats, budgets=None, **settings
):
    """FDK with the z-slabs dealt to several GPUs (or workers sharing one),
    where a GPU cannot hold the filtered views: each slab takes the detector
    rows it sees, filtered once into host memory (:class:`_FilteredOnHost`)
    or filtering them itself (CuPy input, too little host memory). A slab is
    back-projected in ``y_parts`` boxes along y, one after the other
    (:func:`_slabs_in_boxes`), each from the rows it sees."""
    import time

    import cupy

    from ..cuda import devices as dv
    from ..cuda.pipeline import copy_threads_for, merge_stats

    input_on_gpu = not isinstance(projections, (np.ndarray, _FilteredOnHost))
    if not input_on_gpu:
        copy_threads_for(len(devices))
    dtype = settings["dtype"]
    if input_on_gpu:
        with cupy.cuda.Device(projections.device.id):  # the input is complete before other streams read it
            cupy.cuda.get_current_stream().synchronize()
        out = cupy.zeros(volume.shape, dtype)
    else:
        out = np.zeros(volume.shape, dtype)
    step = -(-volume.ny // y_parts)
    parts = ranges(volume.ny, step)

    def chunk_elements(rows) -> int:
        """The largest view chunk's elements for a box seeing ``rows``, as _reconstruct cuts them."""
        s = _slab_settings(settings, geometry, rows)
        c = _view_chunks(geometry.n_views, s["chunk_views"], from_host=not s.get("weighted") and not s["fixed_chunks"])
        return (c[0].stop - c[0].start) * (rows[1] - rows[0]) * geometry.n_cols

    @functools.lru_cache(maxsize=None)  # every box's, once (a slab halved for memory adds its halves' boxes)
    def box_rows(k0, k1, j0, j1):
        return rows_seen(geometry, _box(volume, k0, k1, j0, j1))

    # every box's input buffers of one size: the pinned memory pool then hands the same two back to each
    seen_rows = [box_rows(k0, k1, j0, j1) for k0, k1 in slabs for j0, j1 in parts]
    in_elements = max((chunk_elements(r) for r in seen_rows if r is not None), default=0)
    splits: list = []
    lock = threading.Lock()
    wall0 = time.perf_counter()
    staging = None
    if not input_on_gpu:  # room for a box per worker: a worker's next box starts while its last is copied out
        from ..resources import host_available_bytes

        box_bytes = max(k1 - k0 for k0, k1 in slabs) * step * volume.nx * np.dtype(dtype).itemsize
        staging = Staging(
            max(STAGING_BUFFERS * STAGING_BYTES, min(len(devices) * box_bytes, host_available_bytes() // 16))
        )

    def work(worker, k0, k1):
        for j0, j1 in parts:
            box = _box(volume, k0, k1, j0, j1)
            rows = box_rows(k0, k1, j0, j1)
            if rows is not None:  # else the box projects off the detector in every view: zero
                seen = projections[:, rows[0] : rows[1]]
                if input_on_gpu:
                    seen = dv.to_device(dv.contiguous(seen), worker.device)
                split: dict = {}
                part = _reconstruct(
                    seen,
                    geometry.crop_rows(*rows),
                    box,
                    progress=False,
                    stats=split,
                    host_out=None if input_on_gpu else out[k0:k1, j0:j1],
                    staging=staging,
                    in_elements=in_elements,
                    **_slab_settings(settings, geometry, rows),
                )
                if input_on_gpu:
                    cupy.cuda.get_current_stream().synchronize()
                    for k in range(k0, k1):  # a box's slice is one contiguous block of the volume's
                        dv.copy_to(out[k, j0:j1], part[k - k0])
                with lock:
                    splits.append(split)
            with lock:
                bar.update((k1 - k0) * (j1 - j0) / volume.ny)

    from tqdm.auto import tqdm

    try:
        with tqdm(total=volume.nz, desc="fdk slices", unit="slice", disable=not progress, leave=False) as bar:
            devices.run(slabs, work, budgets=budgets)
            if staging is not None:
                staging.drain()
    finally:
        if staging is not None:
            staging.close()
    if stats is not None and splits:
        stats.update(merge_stats(splits, time.perf_counter() - wall0))
    return out


def _box(volume: VolumeGeometry, k0: int, k1: int, j0: int, j1: int) -> VolumeGeometry:
    """Slices ``k0:k1``, y rows ``j0:j1`` of ``volume`` (every x), same voxels."""
    slab = volume.slab(k0, k1)
    if (j0, j1) == (0, volume.ny):
        return slab
    y = volume.coordinates("y")
    return VolumeGeometry(
        (k1 - k0, j1 - j0, volume.nx), volume.voxel_size, (slab.center[0], (y[j0] + y[j1 - 1]) / 2, volume.center[2])
    )


def _slabs_in_boxes(geometry, volume: VolumeGeometry, slabs, chunk_views: int, n_workers: int, budget: int):
    """z-slabs of whole DEPTH-slice blocks and how many boxes along y each is
    back-projected in, for slabs planned thinner than DEPTH slices: the CUDA
    kernels compute DEPTH slices per thread, so a thinner slab pays for
    DEPTH (a 12-slice slab wastes a quarter of its work). Where ``budget``
    bytes hold a box of DEPTH slices and half (a third, a quarter) of the y
    range beside the chunk reserve of :func:`_plan_slabs`, the slabs become
    DEPTH thick (or a multiple), at least one per worker, each in that many
    boxes; every box uploads the rows it sees. Returns (slabs, y_parts);
    the slabs unchanged and 1 otherwise."""
    from ..cpu.cone_plan import DEPTH

    thickness = max(k1 - k0 for k0, k1 in slabs)
    if thickness >= DEPTH or volume.nz < DEPTH:
        return slabs, 1
    free = budget - chunk_views * _view_bytes(geometry)  # the chunk reserve, as _plan_slabs keeps it
    for y_parts in range(2, min(4, volume.ny) + 1):
        blocks = free // (-(-volume.ny // y_parts) * volume.nx * 4) // DEPTH  # DEPTH-slice blocks a box holds
        if blocks >= 1:
            per_worker = -(-volume.nz // (n_workers * DEPTH))  # blocks, at least a slab per worker
            step = DEPTH * min(blocks, per_worker)
            return ranges(volume.nz, step), y_parts
    return slabs, 1


def _slab_settings(settings: dict, geometry, rows) -> dict:
    """A slab's settings: fed filtered views (``weighted``), a chunk of views
    needs device memory only for its rows and their texture, not for every
    detector row and the FFT's temporaries, so the plan's reserve per chunk
    (``_plan_slabs``: 12 copies of a view) holds 4 n_rows / (rows seen)
    times as many views: fewer, larger back-projection calls."""
    if not settings.get("weighted") or settings["fixed_chunks"]:
        return settings
    views = _call_views(geometry, settings["chunk_views"], rows[1] - rows[0])
    return dict(settings, chunk_views=min(views, _texture_views(settings, geometry, rows[1] - rows[0]) or views))


def _call_views(geometry, chunk_views: int, rows: int) -> int:
    """Views of filtered rows (``rows`` of each) that one back-projection call
    may take within the plan's reserve for a chunk of ``chunk_views`` views
    (``_view_bytes``: 12 copies of a view): the call needs the rows and their
    texture, or the ray kernels' copies, about 3 copies of them."""
    views = chunk_views * 4 * geometry.n_rows // max(1, rows)
    return max(1, min(geometry.n_views, views))


# FDK from host arrays on the GPU streams the views in this many chunks, so
# that gathering a chunk into pinned memory, its upload and the GPU's work on
# the previous one overlap (a chunk of RabbitCT's 496 views: 31, 148 MB).
HOST_CHUNKS = 16


def _view_chunks(n_views: int, chunk_views: int, *, from_host: bool) -> list[slice]:
    """The views in chunks of ``chunk_views``; ``from_host``: at most
    1/HOST_CHUNKS of them each, so that transfers overlap the GPU's work."""
    if from_host:
        chunk_views = min(chunk_views, max(1, -(-n_views // HOST_CHUNKS)))
    return [slice(a, b) for a, b in ranges(n_views, chunk_views)]


def _view_bytes(geometry) -> int:
    """GPU memory a plan keeps per view of a chunk: its input, the FFT's
    temporaries and its texture, 12 float32 copies of a view."""
    return 12 * geometry.n_rows * geometry.n_cols * 4


def _gpu_budget(array_memory, budget=None) -> int:
    """Bytes of GPU memory a plan may use: ``budget`` (default the current
    GPU's free memory), at most ``array_memory`` (a budget's share for arrays)."""
    if budget is None:
        from ..cuda import gpu_free_bytes

        budget = gpu_free_bytes()
    if array_memory is not None:
        budget = min(budget, array_memory)
    return budget


def _plan_slabs(geometry, volume, backend, array_memory, slab_slices, budget=None):
    """z-slabs [(k0, k1)] and views per chunk such that a slab of the volume and
    the working buffers of one chunk of views fit the GPU budget (``budget``
    bytes, default the current GPU's free memory)."""
    view_bytes = _view_bytes(geometry)
    chunk_views = max(1, int(256e6 // view_bytes))  # CPU: a few hundred MB at a time
    if slab_slices is not None:
        slab_slices = v.positive_int("slab_slices", slab_slices)
    if backend == "cuda":
        budget = _gpu_budget(array_memory, budget)
        # The back-projection reads and writes the volume once per call: chunks
        # of RAY_MIN_VIEWS views, where memory allows, run "ray-hybrid" (faster
        # than kernel B on smaller chunks: docs/performance.md). From host
        # arrays the chunks stay small (HOST_CHUNKS), and so kernel B:
        # streaming is the limit there.
        chunk_views = max(1, min(max(RAY_MIN_VIEWS, -(-geometry.n_views // 16)), budget // 4 // view_bytes))
    if backend == "cuda":
        slice_bytes = volume.ny * volume.nx * 4
        fit = (budget - chunk_views * view_bytes) // slice_bytes
        need = f"one slice {slice_bytes / 2**20:.2f} MiB plus {view_bytes / 2**20:.2f} MiB per view"
        if slab_slices is None and fit < 1:
            name = "volume" if array_memory is None else "gpu_memory"
            raise ValueError(
                f"{name}: {volume.shape} cannot be reconstructed within {budget / 2**20:.2f} MiB "
                f"of GPU memory for arrays even in slabs ({need})"
            )
        if slab_slices is not None and array_memory is not None and slab_slices > fit:
            raise ValueError(
                f"slab_slices: {slab_slices} slices do not fit the {budget / 2**20:.2f} MiB "
                f"gpu_memory leaves for arrays ({need}): at most {max(fit, 0)}"
            )
        slab_slices = fit if slab_slices is None else slab_slices
    elif slab_slices is None:
        slab_slices = volume.nz
    slab_slices = min(slab_slices, volume.nz)
    n_slabs = -(-volume.nz // slab_slices)
    slab_slices = -(-volume.nz // n_slabs)  # equal slabs: the memory pool reuses one block
    return ranges(volume.nz, slab_slices), chunk_views


def _reconstruct(
    projections,
    geometry,
    volume,
    *,
    filter,
    cutoff,
    padding,
    short_scan,
    interpolation,
    kernel,
    backend,
    dtype,
    chunk_views,
    fixed_chunks,
    progress,
    stats=None,
    host_out=None,
    staging=None,
    weighted: bool = False,
    in_elements: int = 0,
    texture_bytes=None,
    result=None,
):
    """FDK of one volume (or slab) from the projections it needs.

    ``host_out``: the NumPy array that NumPy input's result is downloaded
    into (default a new one). ``staging``: a :class:`leveret.cuda.pipeline.Staging`
    shared with other calls' downloads; the call then returns before the copies into
    ``host_out`` are done (the staging's ``drain`` waits for them).
    ``weighted``: the NumPy projections are weighted and filtered already
    (:class:`_FilteredOnHost`), and checked for non-finite values.
    ``in_elements``: the least size of the pipeline's input buffers
    (``stream_chunks``). ``texture_bytes``: the texture memory a call may
    take (a budget's share; None: no limit). ``result``: a zeroed device
    array to accumulate into (CuPy input; default a new one)."""
    filtered = FDKWeighting(geometry, filter=filter, cutoff=cutoff, padding=padding, short_scan=short_scan)
    op = ConeBackprojection(
        geometry,
        volume,
        backend=backend,
        interpolation=interpolation,
        matrices=filtered.frames["normalised"],
        kernel=kernel,
    )
    on_gpu = op.backend == "cuda"
    input_on_gpu = not isinstance(projections, np.ndarray)
    if on_gpu:
        import cupy as xp
    else:
        xp = np
    out = xp.zeros(volume.shape, dtype=dtype) if result is None else result
    if texture_bytes is not None and not fixed_chunks:
        chunk_views = min(chunk_views, _texture_views({"texture_bytes": texture_bytes}, geometry, geometry.n_rows))
    # filtering overlaps the transfers
    chunks = _view_chunks(
        geometry.n_views, chunk_views, from_host=on_gpu and not input_on_gpu and not fixed_chunks and not weighted
    )
    from tqdm.auto import tqdm

    with tqdm(total=geometry.n_views, desc="fdk", unit="view", disable=not progress, leave=False) as bar:
        if on_gpu and not input_on_gpu:
            from ..cuda.pipeline import add_stats, is_pinned, parallel_copy, stream_chunks

            n_bad = xp.zeros((), xp.int64)
            split: dict = {}
            download = SlabDownload(out, op.slab_alignment, host_out=host_out, staging=staging)

            def compute(views, d_in, _):
                if weighted:
                    filtered_views = d_in
                else:
                    v.add_nonfinite_count(n_bad, d_in)
                    filtered_views = filtered(d_in, views)
                if views.stop < geometry.n_views:
                    op(filtered_views, out, views=views, accumulate=True)
                    return
                for slab in download.slabs:  # the last views: finish and download slab by slab
                    op(filtered_views, out, views=views, accumulate=True, slices=slab)
                    download.queue(slab)

            # filtered views in pinned memory go up from where they lie: no gather into the pipeline's buffers
            if weighted and is_pinned(projections):
                moves = {"source": lambda c: projections[c]}
            else:
                moves = {"load": lambda c, buf: parallel_copy(buf, projections[c])}
            try:
                stream_chunks(
                    chunks,
                    in_shape=lambda c: (c.stop - c.start,) + geometry.projection_shape[1:],
                    out_shape=None,
                    compute=compute,
                    on_done=lambda c: bar.update(c.stop - c.start),
                    stats=split,
                    in_elements=in_elements,
                    **moves,
                )
                result = download.finish()
                if stats is not None:
                    add_stats(stats, split)
            finally:
                download.close()  # after an error: the page touches and copies not yet started are dropped
            if int(n_bad):
                raise ValueError(v.nonfinite_message("projections", int(n_bad)))
            return result
        for views in chunks:
            raw = xp.array(projections[views], dtype=dtype)  # a copy: the input stays as it was
            if not input_on_gpu:
                v.check_finite_array("projections", raw)
            op(filtered(raw, views), out, views=views, accumulate=True)
            bar.update(views.stop - views.start)
    return out


class _FilteredOnHost:
    """NumPy projections weighted and filtered once on the GPU, kept in host
    memory for the slabs of a volume larger than the GPU (or than
    ``gpu_memory``): each slab then uploads the rows it sees of the
    filtered views instead of weighting and filtering those rows again (a
    slab's rows overlap its neighbours', so per-slab filtering repeats most
    rows several times). Only the detector rows the whole volume sees are
    kept: ``array`` holds rows ``row0 ..`` and is sliced as the projections
    are (``[:, r0:r1]`` in detector rows). The weighting of a row does not
    depend on the rows around it, so a slab's result is the same, to the
    FFT's rounding, as when it filters its own rows. ``array`` lies in
    pinned memory where the host has room to lock it (a quarter of its
    available memory): the filtering downloads into it, and the slabs upload
    their rows from it, with no copy through the pipeline's buffers."""

    def __init__(self, array: np.ndarray, row0: int):
        self.array, self.row0 = array, row0

    def __getitem__(self, key):
        views, rows = key
        return self.array[views, rows.start - self.row0 : rows.stop - self.row0]

    @classmethod
    def make(
        cls,
        projections,
        geometry,
        volume,
        *,
        filter,
        cutoff,
        padding,
        short_scan,
        backend,
        dtype,
        chunk_views,
        fixed_chunks,
        progress,
        stats: dict,
        **_,
    ) -> "_FilteredOnHost | None":
        """The filtered views of NumPy ``projections`` on the CUDA backend, or
        None (CuPy input, the CPU backend, no row seen, or too little host
        memory for the filtered rows beside the volume: each slab then filters
        its own rows). Non-finite input raises ValueError."""
        if backend != "cuda" or not isinstance(projections, np.ndarray):
            return None
        rows = rows_seen(geometry, volume)
        if rows is None:
            return None
        from ..resources import host_available_bytes

        r0, r1 = rows
        shape = (geometry.n_views, r1 - r0, geometry.n_cols)
        if 4 * (int(np.prod(shape)) + volume.size) > host_available_bytes():
            return None
        import cupy
        from tqdm.auto import tqdm

        from ..cuda.pipeline import parallel_copy, pinned_array, stream_chunks

        weighting = FDKWeighting(geometry, filter=filter, cutoff=cutoff, padding=padding, short_scan=short_scan)
        out = None
        if 4 * int(np.prod(shape)) <= host_available_bytes() // 4:  # locked pages leave the rest room
            out = pinned_array(shape, np.float32)
        if out is None:
            out = np.empty(shape, np.float32)
            moves = {"store": lambda c, buf: parallel_copy(out[c], buf)}
        else:
            moves = {"target": lambda c: out[c]}
        chunks = _view_chunks(geometry.n_views, chunk_views, from_host=not fixed_chunks)
        n_bad = cupy.zeros((), cupy.int64)

        def compute(views, d_in, d_out):
            v.add_nonfinite_count(n_bad, d_in)
            d_out[...] = weighting(d_in, views, r0)

        split: dict = {}
        size = lambda c: (c.stop - c.start,) + shape[1:]  # noqa: E731
        with tqdm(total=geometry.n_views, desc="fdk filter", unit="view", disable=not progress, leave=False) as bar:
            stream_chunks(
                chunks,
                in_shape=size,
                out_shape=size,
                load=lambda c, buf: parallel_copy(buf, projections[c, r0:r1]),
                compute=compute,
                on_done=lambda c: bar.update(c.stop - c.start),
                stats=split,
                **moves,
            )
        if int(n_bad):
            raise ValueError(v.nonfinite_message("projections", int(n_bad)))
        stats.update(split)
        return cls(out, r0)
