"""The live reconstructor's GPU pipeline: uploads, correction, filter, back-projection.

Per batch, on two CUDA streams:

- copy stream: each frame uploaded by itself (no host stack) into one of
  two device batch buffers, asynchronously from pinned memory (frames from
  :meth:`LiveReconstructor.frame_buffer`); the next batch's uploads run while
  this batch computes;
- compute stream: one fused correction kernel (:mod:`leveret.cuda.correct`)
  into the zero-padded FFT input, with each frame's count of non-finite values (the
  one small device-to-host read of the batch), cuFFT filtering (two plans
  made once, FFT_FRAMES frames per call, so no batch size waits for a new
  plan), one plane kernel per watched slice reading the filtered float32
  views in place, and one kernel copying the views into the store (both
  :mod:`leveret.cuda.live_planes`).

CUDA events time each stage (``stage_seconds``). Everything here belongs to
one pipeline (one reconstructor): its streams, buffers, cuFFT plans, texture
objects and tables; the kernels' modules are shared and hold no state.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

import numpy as np

from ..cuda import live_planes
from .correct import GpuCorrection

STAGES = ("upload", "correct", "filter", "backproject", "store")
FFT_FRAMES = 8  # frames per cuFFT call: the plans' batch (their work areas stay small)


class GpuPipeline:
    def __init__(self, shape, response, correction, max_batch: int):
        import cupy

        self.cupy = cupy
        self.shape = tuple(shape)
        self.max_batch = int(max_batch)
        self.n_pad = 2 * (response.size - 1)
        self.response = cupy.asarray(response, np.float32)
        self.correction = GpuCorrection(correction)
        self.copy = cupy.cuda.Stream(non_blocking=False)
        self.compute = cupy.cuda.Stream(non_blocking=False)
        self._inputs: dict = {}  # dtype -> two device batch buffers
        self._input_free = [None, None]  # event: the correction that read buffer b is done
        self._flip = 0
        from cupy.cuda import cufft

        self.fft_frames = min(FFT_FRAMES, self.max_batch)
        frames = -(-self.max_batch // self.fft_frames) * self.fft_frames
        rows = self.fft_frames * shape[0]
        self._cufft = cufft
        self._forward = cufft.Plan1d(self.n_pad, cufft.CUFFT_R2C, rows)
        self._inverse = cufft.Plan1d(self.n_pad, cufft.CUFFT_C2R, rows)
        self._spectrum = cupy.empty((rows, self.n_pad // 2 + 1), np.complex64)
        self.response = self.response / self.n_pad  # cuFFT's inverse is unnormalised
        # zeroed once: the rows of a partly used FFT call are transformed too (and ignored)
        self.padded = cupy.zeros((frames, shape[0], self.n_pad), np.float32)
        self.filtered = cupy.empty((frames, shape[0], self.n_pad), np.float32)
        self.counts = cupy.zeros(self.max_batch, np.int32)
        self.counts_host = self.allocate_pinned((self.max_batch,), np.int32)
        self.upload_event = None
        self._events: list = []  # (stage, start, end) of the batches not yet summed
        self._seconds = defaultdict(float)
        self._textures: dict = {}  # store block address -> texture objects of its views
        self.handles = cupy.zeros(0, np.uint64)  # texture object of each device view, by view number
        self._geometry: dict = {}  # slice -> device geometry array
        # the tables and zeroed buffers are complete before this pipeline's streams read them
        cupy.cuda.get_current_stream().synchronize()

    @staticmethod
    def allocate_pinned(shape, dtype):
        from ..cuda.pipeline import empty_pinned

        return empty_pinned(shape, dtype)

    @staticmethod
    def register_host(array):
        from ..cuda.pipeline import register_host

        return register_host(array)

    # -- timing ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def stage(self, name, stream=None):
        stream = self.compute if stream is None else stream
        start = stream.record()
        with stream:
            yield
        self._events.append((name, start, stream.record()))

    def end_batch(self):
        done = [e for e in self._events if e[2].done]
        for name, start, end in done:
            self._seconds[name] += self.cupy.cuda.get_elapsed_time(start, end) / 1e3
        self._events = [e for e in self._events if not e[2].done]

    def stage_seconds(self) -> dict:
        self.synchronize()
        self.end_batch()
        return {name: self._seconds.get(name, 0.0) for name in STAGES}

    def synchronize(self):
        self.copy.synchronize()
        self.compute.synchronize()

    # -- ingest ---------------------------------------------------------------------------------
    def ingest(self, datas, pool):
        """Upload and correct a batch: ((k, n_rows, n_pad) float32 corrected and
        zero-padded lines on the device, (k,) counts of non-finite values)."""
        cupy = self.cupy
        k = len(datas)
        if k > self.max_batch:
            raise ValueError(f"projections: at most {self.max_batch} frames per batch (max_batch), got {k}")
        device = [isinstance(d, cupy.ndarray) for d in datas]
        raw = all(np.dtype(d.dtype) == np.uint16 for d in datas)
        dtype = np.dtype(np.uint16 if raw else np.float32)
        if dtype not in self._inputs:
            self._inputs[dtype] = [cupy.empty((self.max_batch,) + self.shape, dtype) for _ in range(2)]
        b = self._flip
        self._flip ^= 1
        buf = self._inputs[dtype][b]
        if self._input_free[b] is not None:
            self.copy.wait_event(self._input_free[b])  # the correction that read it two batches ago
        with self.stage("upload", self.copy):
            for i, d in enumerate(datas):
                if device[i]:
                    buf[i] = d  # already on the GPU: a device copy on the copy stream
                    continue
                d = np.asarray(d)
                if d.dtype != dtype or not d.flags.c_contiguous:
                    d = np.ascontiguousarray(d, dtype)
                buf[i].set(d, stream=self.copy)  # asynchronous from pinned memory
        self.upload_event = self.copy.record()
        self.compute.wait_event(self.upload_event)
        with self.stage("correct"):
            self.correction.batch(buf[:k], self.padded, self.counts)
            self._input_free[b] = self.compute.record()
            self.counts[:k].get(stream=self.compute, out=self.counts_host[:k])
        self.compute.synchronize()  # the one wait of the batch: which frames are usable
        return self.padded[:k], self.counts_host[:k].copy()

    def filter(self, lines, padding):
        """Filtered float32 views (k, n_rows, n_cols): the first n_cols of the padded rows."""
        k = lines.shape[0]
        n_cols = self.shape[1]
        with self.stage("filter"):
            if padding != "zero":
                from ..filters import apply_filter

                return apply_filter(lines[..., :n_cols], self.response.get() * self.n_pad, padding=padding)
            if lines.data.ptr != self.padded.data.ptr:  # the usable frames of a batch with rejected ones
                self.padded[:k] = lines
            step = self.fft_frames
            for a in range(0, k, step):
                self._forward.fft(
                    self.padded[a : a + step].reshape(-1, self.n_pad), self._spectrum, self._cufft.CUFFT_FORWARD
                )
                self._spectrum *= self.response
                self._inverse.fft(
                    self._spectrum, self.filtered[a : a + step].reshape(-1, self.n_pad), self._cufft.CUFFT_INVERSE
                )
        return self.filtered[:k, :, :n_cols]

    def store_copy(self, dst, src):
        """dst[...] = src for (k, n_rows, n_cols) views: float32 (any pitch) into a store block slice."""
        live_planes.store_views(dst, src)

    def upload_views(self, block, local):
        """Views of a host (spilled) store block on the device, a block at a time."""
        with self.compute:
            if local.size and np.all(np.diff(local) == 1):  # a run of pinned views: one async upload
                part = block[int(local[0]) : int(local[-1]) + 1]
                out = self.cupy.empty(part.shape, part.dtype)
                out.set(part, stream=self.compute)
                return out
            return self.cupy.asarray(np.ascontiguousarray(block[local]))

    # -- back-projection ------------------------------------------------------------------------
    def _table_of(self, s, det_spacing, center, row_spacing):
        """Slice ``s``'s table for the plane kernels, on the device (made once per slice)."""
        key = (s, det_spacing, center, row_spacing, self.shape[0])
        g = self._geometry.get(key)
        if g is None:
            table = live_planes.plane_table(s.frame(), center, row_spacing, self.shape[0])
            g = self._geometry[key] = self.cupy.asarray(table)
        return g

    def plane(self, s, out, q, views, coef, angles, *, det_spacing, center, row_spacing):
        """out += sum_k coef[k] B(q[views[k]]) on slice s with exact float32 weights (one launch)."""
        views = np.asarray(views, np.int32)
        if views.size == 0:
            return
        with self.stage("backproject"):
            table = self._table_of(s, det_spacing, center, row_spacing)
            params = self.cupy.asarray(live_planes.plane_params(angles, coef, det_spacing))
            live_planes.backproject_plane(q, self.cupy.asarray(views), params, table, out)

    def plane_texture(self, s, out, views, coef, angles, *, det_spacing, center, row_spacing):
        """out += sum_k coef[k] B(view k) on slice s through the texture objects of
        the device views ``views`` (see :meth:`add_textures`), one launch."""
        if len(views) == 0:
            return
        with self.stage("backproject"):
            table = self._table_of(s, det_spacing, center, row_spacing)
            params = self.cupy.asarray(live_planes.plane_params(angles, coef, det_spacing))
            handles = self.handles[self.cupy.asarray(np.asarray(views, np.int64))]
            live_planes.backproject_plane_texture(handles, params, table, out)

    def add_textures(self, block, first_view):
        """Texture objects for every view of a pitched device store block (once per
        block), recorded in ``handles`` at the view numbers first_view, first_view + 1, ..."""
        from cupy.cuda import runtime, texture

        key = block.data.ptr
        if key in self._textures:
            return
        n, rows, cols = block.shape
        desc = texture.ChannelFormatDescriptor(8 * block.dtype.itemsize, 0, 0, 0, runtime.cudaChannelFormatKindFloat)
        sampler = texture.TextureDescriptor(
            (runtime.cudaAddressModeBorder,) * 2,
            runtime.cudaFilterModeLinear,
            runtime.cudaReadModeElementType,
            borderColors=(0.0, 0.0, 0.0, 0.0),
            normalizedCoords=0,
        )
        objects = [
            texture.TextureObject(
                texture.ResourceDescriptor(
                    runtime.cudaResourceTypePitch2D,
                    arr=block[v],
                    chDesc=desc,
                    width=cols,
                    height=rows,
                    pitchInBytes=block.strides[1],
                ),
                sampler,
            )
            for v in range(n)
        ]
        self._textures[key] = objects
        if self.handles.size < first_view + n:
            grown = self.cupy.zeros(max(2 * self.handles.size, first_view + n), np.uint64)
            grown[: self.handles.size] = self.handles
            self.handles = grown
        self.handles[first_view : first_view + n] = self.cupy.asarray(np.array([o.ptr for o in objects], np.uint64))
