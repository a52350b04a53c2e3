"""Filtered back-projection for parallel-beam sinograms and projection stacks."""

from __future__ import annotations

import math

import numpy as np

from .. import _validate as v
from ..filters import FILTERS, apply_filter, filter_response
from ..geometry import ParallelGeometry, VolumeGeometry
from ..cuda.devices import for_backend as devices_for_backend
from ..cuda import gpu_free_bytes
from ..filters import padded_length
from ..resources import host_available_bytes
from ..operators import ParallelBackprojection
from ._coverage import check_reach, check_views


def fbp(
    projections,
    geometry: ParallelGeometry,
    volume: VolumeGeometry | None = None,
    *,
    filter: str = "ram-lak",
    interpolation: str = "linear",
    backend: str = "auto",
    cutoff: float = 1.0,
    padding: str = "zero",
    angle_weights="auto",
    precision: str = "float32",
    slab_slices: int | None = None,
    out=None,
    progress: bool = False,
    kernel: str = "auto",
    kernel_options: dict | None = None,
    roi=None,
    stats: dict | None = None,
    devices=None,
):
    """Filtered back-projection (FBP) of parallel-beam data.

    Parameters
    ----------
    projections : ndarray
        ``(n_angles, n_cols)`` sinogram or ``(n_angles, n_rows, n_cols)``
        stack of line integrals (value x length), NumPy or CuPy.
    geometry : ParallelGeometry
        Must match ``projections.shape``.
    volume : VolumeGeometry, optional
        Output grid; default ``geometry.default_volume()``. Slices of a 3D
        volume take the detector row at their height (linearly interpolated
        between rows when the grids are not aligned; zero off the detector).
    filter : {"ram-lak", "shepp-logan", "cosine", "hamming", "hann"}
    interpolation : {"linear", "nearest", "linear8"}
        Detector interpolation. On CUDA, "linear" runs the exact ALU kernel
        by default (exact float32 weights) and the texture unit's 8-bit
        weights where that kernel does not fit or another kernel is chosen
        (docs/accuracy.md, docs/performance.md); "linear8" asks for the 8-bit
        weights on either backend.
    backend : {"auto", "cuda", "cpu"}
    cutoff : float
        Frequency cutoff as a fraction of Nyquist, in (0, 1].
    padding : {"zero", "edge"}
        Detector extension for the filter (zero padding to >= 2x width).
    angle_weights : "auto", "uniform" or array (n_angles,)
        Angular quadrature in radians: "auto" folds the angles onto the half
        circle (``ParallelGeometry.angular_weights``), "uniform" is pi/n_angles.
    precision : {"float32", "float64", "float16"}
        "float32": float32 arithmetic. "float64": float64 (CPU backend only).
        "float16": float32 arithmetic, but the filtered sinograms are stored
        as fp16 for the back-projection (half2/half4 texels on CUDA, 2-4
        slices per texture fetch; the CPU emulates the rounding); see
        docs/accuracy.md for its error bound.
    slab_slices : int, optional
        Slices per chunk; default planned from free (GPU or host) memory.
    out : ndarray, optional
        Preallocated output of the volume's shape (NumPy, np.memmap or CuPy).
    progress : bool
        Show a progress bar over slices.
    kernel : {"auto", "texture", "texz", "alu", "hybrid"}
        CUDA back-projection kernel (``ParallelBackprojection``); "auto" takes
        the tuned choice for this GPU when there is one, else the measured
        fastest (``ParallelBackprojection.default_config``).
    kernel_options : dict, optional
        The kernel's parameters (``ParallelBackprojection``).
    roi : (y0, x0, height, width), optional
        Reconstruct only this rectangle of each slice, in pixels of the
        volume's (ny, nx) grid (``ParallelBackprojection``): the output is
        ``(height, width)`` or ``(nz, height, width)`` and equals that window
        of the full reconstruction; the back-projection's cost shrinks with it.
    stats : dict, optional
        Filled with the GPU pipeline's time split when NumPy data stream
        through the GPU in several chunks (``leveret.cuda.pipeline.STATS_KEYS``:
        ``wall``, ``setup``, ``load``, ``store``, ``h2d``, ``compute``,
        ``d2h`` in seconds, ``chunks``); left empty otherwise (CPU backend,
        CuPy input, one chunk). With ``devices``, the GPU times (``h2d``,
        ``compute``, ``d2h``), host times and chunk counts are summed over the
        GPUs, ``wall`` is the whole call's and ``busy`` the sum of the GPUs'
        pipeline walls (``leveret.cuda.pipeline.merge_stats``).
    devices : None, "all", list of int or leveret.cuda.devices.DeviceSet
        CUDA only: the GPUs to run on (:mod:`leveret.cuda.devices`); None: the
        current device. Slice chunks (planned from the smallest GPU's free
        memory) are dealt from one queue; each GPU streams its chunks through
        a pipeline of its own (streams, pinned buffers) in its own thread, so
        the transfers of different GPUs overlap each other and the kernels.
        The result is bit-identical to one GPU's with the same
        ``slab_slices`` (every slice is computed by the same kernels from
        the same chunk; the default plan can take smaller chunks where the
        smallest GPU has less free memory). A single chunk runs on the first
        GPU. CuPy input: the slices' rows are copied to each GPU and the
        slices back to the input's GPU.

    Returns
    -------
    ndarray
        ``(ny, nx)`` or ``(nz, ny, nx)`` (with ``roi``: ``height, width`` in
        place of ``ny, nx``) attenuation per length unit; NumPy in, NumPy out;
        CuPy in, CuPy out.
    """
    if not isinstance(geometry, ParallelGeometry):
        raise TypeError(f"geometry: expected a ParallelGeometry, got {type(geometry).__name__}")
    projections = _check_projections(projections, geometry)
    input_on_gpu = not isinstance(projections, np.ndarray)
    if input_on_gpu:  # cheap on the device; host input is checked chunk by chunk
        v.check_finite_array("projections", projections)
    volume = geometry.default_volume() if volume is None else volume
    if not isinstance(volume, VolumeGeometry):
        raise TypeError(f"volume: expected a VolumeGeometry or None, got {type(volume).__name__}")
    if volume.is_2d != geometry.is_2d:
        raise ValueError(
            f"volume: a {'2D' if geometry.is_2d else '3D'} geometry needs a "
            f"{'2D' if geometry.is_2d else '3D'} volume, got shape {volume.shape}"
        )
    check_views(geometry)
    check_reach(geometry, volume)
    v.choice("filter", filter, FILTERS)
    precision = v.precision(precision, ("float32", "float64", "float16"))
    dtype = np.float64 if precision == "float64" else np.float32
    v.check_magnitude("projections", projections, dtype)  # float64 data beyond float32's range
    op = ParallelBackprojection(
        geometry,
        volume,
        interpolation=interpolation,
        backend=backend,
        kernel=kernel,
        precision="float16" if precision == "float16" else "float32",
        kernel_options=kernel_options,
        roi=roi,
    )
    if not isinstance(projections, np.ndarray) and op.backend == "cpu":
        raise ValueError("backend: 'cpu' cannot take a CuPy array")
    if op.backend == "cuda" and dtype == np.float64:
        raise ValueError("precision: 'float64' runs on the CPU backend only; use backend='cpu'")
    devices = devices_for_backend(devices, op.backend)
    weights = _angle_weights(angle_weights, geometry)
    response = filter_response(geometry.n_cols, filter, cutoff=cutoff, det_spacing=geometry.det_spacing)

    stack = projections[:, None, :] if geometry.is_2d else projections  # (A, R, C)
    rows_lo, rows_frac = _slice_rows(geometry, volume)
    n_slices = volume.nz
    ny, nx = op.out_shape  # the ROI's, when one is set
    on_gpu = op.backend == "cuda"
    out_shape = (ny, nx) if volume.is_2d else (n_slices, ny, nx)
    out = _prepare_out(out, out_shape, dtype, cupy_out=input_on_gpu)
    job = _Job(
        stack,
        rows_lo,
        rows_frac,
        geometry,
        volume,
        op,
        weights,
        response,
        padding,
        dtype,
        out.reshape((n_slices, ny, nx)),
    )

    streamed = on_gpu and not input_on_gpu
    if slab_slices is None:
        per_slice = fbp_bytes_per_slice(
            geometry.n_angles, geometry.n_cols, ny, nx, np.dtype(dtype).itemsize, streamed=streamed
        )
        if devices is not None:
            available = devices.free_bytes()
        else:
            available = gpu_free_bytes() if on_gpu else host_available_bytes()
        slab_slices = plan_chunk(n_slices, per_slice, available)
        if streamed:  # many chunks, so transfers overlap compute
            slab_slices = min(slab_slices, max(2, -(-n_slices // 16)))
            # and at most ~512 MiB of projections per chunk: the pipeline's fill
            # and drain (one chunk's gather, copies and store, not hidden) stay
            # short, and so do the four pinned buffers' allocation
            per_chunk_in = geometry.n_angles * geometry.n_cols * np.dtype(dtype).itemsize
            slab_slices = max(1, min(slab_slices, (512 << 20) // max(1, per_chunk_in)))
    slab_slices = v.positive_int("slab_slices", slab_slices)
    chunks = [(k, min(n_slices, k + slab_slices)) for k in range(0, n_slices, slab_slices)]

    from tqdm.auto import tqdm

    with tqdm(total=n_slices, unit="slice", desc="fbp", disable=not progress, leave=False) as bar:
        if devices is not None and streamed and len(chunks) == 1:
            import cupy  # one chunk cannot be split: the first GPU runs it as one GPU would

            with cupy.cuda.Device(devices.ids[0]):
                job.one_chunk_from_host(chunks[0])
            bar.update(n_slices)
        elif devices is not None:
            if streamed:
                job.streamed_devices(devices, chunks, bar=bar, stats=stats)
            else:
                job.in_memory_devices(devices, chunks, bar=bar)
        elif not streamed:
            job.in_memory(chunks, check_finite=not input_on_gpu, bar=bar)
        elif len(chunks) == 1:
            job.one_chunk_from_host(chunks[0])
            bar.update(n_slices)
        else:
            _raise_if_bad(job.streamed(chunks, on_done=lambda c: bar.update(c[1] - c[0]), stats=stats))
    return out


class _Job:
    """One FBP call's data and the three ways of running it."""

    def __init__(self, stack, rows_lo, rows_frac, geometry, volume, op, weights, response, padding, dtype, out3):
        self.stack, self.rows_lo, self.rows_frac = stack, rows_lo, rows_frac
        self.geometry, self.volume, self.op = geometry, volume, op
        self.weights, self.response, self.padding = weights, response, padding
        self.dtype, self.out3 = dtype, out3

    def rows(self, chunk, angles=slice(None), out=None):
        """Detector rows of the slices in ``chunk``, projections ``angles``: (A, S, C)."""
        return _gather_rows(self.stack[angles], self.rows_lo, self.rows_frac, chunk, out=out, dtype=self.dtype)

    def filtered(self, rows, angles=slice(None)):
        """(A, S, C) rows -> weighted, filtered (S, A, C) sinograms."""
        return apply_filter(rows.transpose(1, 0, 2), self.response, weights=self.weights[angles], padding=self.padding)

    def in_memory(self, chunks, *, check_finite, bar):
        """CPU, or CuPy arrays on the GPU: chunk after chunk, straight into the output."""
        for k0, k1 in chunks:
            rows = self.rows((k0, k1))
            if check_finite:
                v.check_finite_array("projections", rows)
            self.op(self.filtered(rows), out=self.out3[k0:k1])
            bar.update(k1 - k0)

    def streamed(self, chunks, *, on_done, stats=None, largest=None) -> int:
        """NumPy in and out on the current GPU: ``chunks`` (a list, or an
        iterator over a queue shared with other GPUs' pipelines, then with
        ``largest`` the largest chunk) through the two-stream pipeline.
        Returns the count of non-finite inputs seen."""
        import cupy

        from ..cuda.pipeline import parallel_copy, stream_chunks

        g = self.geometry
        n_bad = cupy.zeros((), cupy.int64)  # non-finite inputs, read once at the end

        def compute(chunk, d_in, d_out):
            v.add_nonfinite_count(n_bad, d_in)
            self.op(self.filtered(d_in), out=d_out)

        stream_chunks(
            chunks,
            largest=largest,
            in_shape=lambda c: (g.n_angles, c[1] - c[0], g.n_cols),
            out_shape=lambda c: (c[1] - c[0],) + self.op.out_shape,
            load=lambda c, buf: self.rows(c, out=buf),
            compute=compute,
            store=lambda c, buf: parallel_copy(self.out3[c[0] : c[1]], buf),
            on_done=on_done,
            stats=stats,
        )
        return int(n_bad)

    def streamed_devices(self, devices, chunks, *, bar, stats=None):
        """NumPy in and out on several GPUs: each GPU runs :meth:`streamed`
        over the chunks it takes from a shared queue."""
        import threading
        import time

        from ..cuda.pipeline import copy_threads_for, merge_stats

        copy_threads_for(len(devices))
        bar_lock = threading.Lock()
        wall0 = time.perf_counter()

        def done(c):
            with bar_lock:
                bar.update(c[1] - c[0])

        def work(worker, ranges):
            split: dict = {}
            n_bad = self.streamed(ranges, on_done=done, stats=split, largest=max(chunks, key=lambda c: c[1] - c[0]))
            return n_bad, split

        results = devices.run_pipelines(chunks, work)
        _raise_if_bad(sum(n for n, _ in results))
        if stats is not None:
            stats.update(merge_stats([split for _, split in results], time.perf_counter() - wall0))

    def in_memory_devices(self, devices, chunks, *, bar):
        """CuPy in and out on several GPUs: each chunk's rows are gathered on
        the input's GPU, copied to the worker's, filtered and back-projected
        there, and the slices copied into the output."""
        import threading

        import cupy

        from ..cuda import devices as dv

        home = self.stack.device.id
        dv.settled(self.stack)
        bar_lock = threading.Lock()

        def compute(worker, k0, k1):
            with cupy.cuda.Device(home):
                rows = dv.settled(cupy.ascontiguousarray(self.rows((k0, k1))))
            res = cupy.empty((k1 - k0,) + self.op.out_shape, np.float32)
            self.op(self.filtered(dv.on_worker(rows, worker)), out=res)
            with bar_lock:
                bar.update(k1 - k0)
            return res

        dv.map_ranges(devices, chunks, compute, self.out3)

    def one_chunk_from_host(self, chunk, min_batch_bytes=2 << 20):
        """NumPy in and out, everything in one chunk (e.g. a single slice): the
        projections go up in angle batches on a copy stream, each filtered and
        back-projected (accumulating) while the next one travels."""
        import cupy

        from ..cuda import device_state

        g = self.geometry
        nbytes = g.n_angles * (chunk[1] - chunk[0]) * g.n_cols * 4
        n_batches = int(max(1, min(4, nbytes // min_batch_bytes, g.n_angles)))
        bounds = np.linspace(0, g.n_angles, n_batches + 1).astype(int)
        with device_state.lend_streams(1) as (copy_stream,):  # lent: its cached upload blocks serve the next call
            compute_stream = cupy.cuda.get_current_stream()
            n_bad = cupy.zeros((), cupy.int64)
            total = None
            uploaded = []  # alive until the end: the pool must not hand them out while in use
            for b0, b1 in zip(bounds[:-1], bounds[1:]):
                with copy_stream:  # pageable: the host waits for this copy, the GPU does not
                    d_in = cupy.asarray(self.rows(chunk, slice(b0, b1)))
                    arrived = copy_stream.record()
                uploaded.append(d_in)
                compute_stream.wait_event(arrived)
                v.add_nonfinite_count(n_bad, d_in)
                part = (
                    self.op
                    if n_batches == 1
                    else ParallelBackprojection(
                        _angle_subset(g, b0, b1),
                        self.volume,
                        interpolation=self.op.interpolation,
                        backend="cuda",
                        kernel=self.op.kernel,
                        precision=self.op.precision,
                        kernel_options=self.op.kernel_options,
                        roi=self.op.roi,
                    )
                )
                image = part(self.filtered(d_in, slice(b0, b1)))
                total = image if total is None else total.__iadd__(image)
            _raise_if_bad(int(n_bad))
            total.get(out=self.out3)


# -- helpers -----------------------------------------------------------------------------------


def _check_projections(projections, geometry: ParallelGeometry):
    layout = "(n_angles, n_cols)" if geometry.is_2d else "(n_angles, n_rows, n_cols)"
    return v.real_array("projections", projections, geometry.projection_shape, layout)


def _raise_if_bad(n_bad: int) -> None:
    if n_bad:
        raise ValueError(v.nonfinite_message("projections", n_bad))


def _angle_subset(geometry: ParallelGeometry, start: int, stop: int) -> ParallelGeometry:
    shift = None if geometry.axis_shift is None else geometry.axis_shift[start:stop]
    return geometry.replace(angles=geometry.angles[start:stop], axis_shift=shift)


def _angle_weights(angle_weights, geometry: ParallelGeometry) -> np.ndarray:
    if isinstance(angle_weights, str):
        mode = v.choice("angle_weights", angle_weights, ("auto", "uniform"))
        if mode == "uniform":
            return np.full(geometry.n_angles, np.pi / geometry.n_angles)
        return geometry.angular_weights()
    return v.finite_vector("angle_weights", angle_weights, length=geometry.n_angles)


def _slice_rows(geometry: ParallelGeometry, volume: VolumeGeometry):
    """Detector row below each volume slice, and the fraction towards the next row."""
    if geometry.is_2d:
        return np.zeros(1, int), np.zeros(1)
    r = geometry.project_rows(volume.coordinates("z"))
    lo = np.floor(r + 1e-9).astype(int)
    frac = r - lo
    frac[np.abs(frac) < 1e-9] = 0.0
    return lo, frac


def _gather_rows(stack, rows_lo, rows_frac, chunk, *, out=None, dtype=np.float32):
    """Rows for slices ``chunk`` as ``(A, S, C)``: the detector row of each slice,
    or the linear blend of the two rows around it; zero off the detector."""
    xp = v.array_module(stack)
    k0, k1 = chunk
    n_rows = stack.shape[1]
    lo, frac = rows_lo[k0:k1], rows_frac[k0:k1]
    shape = (stack.shape[0], k1 - k0, stack.shape[2])
    aligned = np.all(frac == 0) and lo[0] >= 0 and lo[-1] < n_rows and np.all(np.diff(lo) == 1)
    if aligned:
        src = stack[:, lo[0] : lo[-1] + 1, :]
        if out is None:
            return src.astype(dtype, copy=False)
        if xp is np:
            from ..cuda.pipeline import parallel_copy

            parallel_copy(out, src)
        else:
            out[...] = src
        return out
    if out is None:
        out = xp.zeros(shape, dtype=dtype)
    else:
        out[...] = 0
    for s, (r, f) in enumerate(zip(lo, frac)):
        for row, w in ((r, 1.0 - f), (r + 1, f)):
            if w != 0 and 0 <= row < n_rows:
                out[:, s, :] += w * stack[:, row, :]
    return out


def _prepare_out(out, shape: tuple, dtype, *, cupy_out: bool):
    if out is None:
        if cupy_out:
            import cupy

            return cupy.empty(shape, dtype=dtype)
        v.check_allocation("volume", math.prod(shape) * np.dtype(dtype).itemsize, "the reconstruction")
        return np.empty(shape, dtype=dtype)
    v.writable_output("out", out)
    if tuple(out.shape) != tuple(shape) or out.dtype != dtype:
        raise ValueError(
            f"out: expected shape {tuple(shape)} and dtype {np.dtype(dtype)}, got {tuple(out.shape)} {out.dtype}"
        )
    if type(out).__module__.startswith("cupy") != cupy_out:
        raise ValueError("out: must live where the input lives (NumPy for NumPy input, CuPy for CuPy input)")
    return out


# -- memory per slice ---------------------------------------------------------------------


def fbp_bytes_per_slice(
    n_angles: int, n_cols: int, ny: int, nx: int, itemsize: int = 4, *, streamed: bool = False
) -> int:
    """Peak working memory of one slice in an FBP chunk.

    Counts the raw rows, the padded real and complex FFT buffers, the filtered
    sinogram, its texture copy and the output slice; ``streamed`` doubles the
    input and output buffers (two chunks in flight).
    """
    n_pad = padded_length(n_cols)
    rows = n_angles * n_cols * itemsize
    fft = n_angles * n_pad * itemsize * 3  # padded input, spectrum (complex, half length), irfft out
    filtered = 3 * rows  # weighted copy, packed copy, texture
    image = ny * nx * itemsize
    return (2 if streamed else 1) * (rows + image) + fft + filtered


def plan_chunk(
    n_slices: int, bytes_per_slice: int, available: int, *, fraction: float = 0.6, max_slices: int | None = None
) -> int:
    """Largest chunk (in slices) whose working set fits in ``fraction`` of ``available``."""
    fit = int(available * fraction) // max(bytes_per_slice, 1)
    if fit < 1:
        raise MemoryError(
            f"one slice needs {bytes_per_slice / 2**20:.1f} MiB but only "
            f"{available * fraction / 2**20:.1f} MiB may be used"
        )
    chunk = min(n_slices, fit)
    if max_slices is not None:
        chunk = min(chunk, max_slices)
    return max(1, chunk)
