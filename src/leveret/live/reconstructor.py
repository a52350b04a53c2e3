"""``LiveReconstructor``: filtered back-projection into watched slices, frame by frame.

Every projection that arrives is corrected (flat/dark, -log:
:mod:`leveret.live.correct`), filtered once (leveret.filters; FDK's cosine
and pitch weights for cone beam) and kept (:mod:`leveret.live.store`); the
watched slices accumulate ``sum_n w_n B_n(q_n)`` with ``B_n`` the
back-projection of view n (parallel beam: :func:`leveret.cpu.live_planes.backproject_plane`
and its CUDA twin in :mod:`leveret.cuda.live_planes`, the new views straight
from the filtered batch; cone beam: leveret.operators for axial slices, the
point kernels for others). On a GPU :mod:`leveret.live.gpu` runs the batch
on its streams.

The angular weights ``w_n`` are those of the views received so far, the
same rule as the offline reconstruction: ``ParallelGeometry.angular_weights``
(parallel beam: each view's share of the half circle, a missing wedge
credited as such) or FDK's angular steps (cone beam, full-scan weighting).
A new view changes the weights of its neighbours; the slices then receive
``(w_new - w_used) B_n(q_n)`` for those views in the same back-projection
call as the new views, so the slices always equal the offline
reconstruction of the frames received, to float32 rounding.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import scipy.fft

from .. import _validate as v
from ..backends import resolve
from ..cpu.live_planes import backproject_plane, backproject_points
from ..filters import FILTERS, apply_filter, filter_response
from ..geometry import ConeGeometry, ParallelGeometry, VolumeGeometry
from ..geometry.volume import volume_3d
from ..operators import ConeBackprojection
from .correct import Correction
from .pool import FramePool
from .slices import Slice, axial_slices, orthogonal_slices
from .store import ViewStore

log = logging.getLogger("leveret.live")

STORAGE = ("float32", "float16")
# Weight changes below this fraction of the largest weight are float64 noise
# (the same gaps recomputed): far below float32 rounding, not worth a pass.
_NEGLIGIBLE = 1e-12
SINOGRAM_ROWS = 4096  # frames of the detector-row sinogram kept for the viewer
MOVES = ("texture", "exact")


def _locked(method):
    """Run a LiveReconstructor method under its lock, on its GPU (class notes, "Threads")."""

    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock, self._on_device():
            return method(self, *args, **kwargs)

    return locked


@dataclass
class Frame:
    """One projection as a source delivers it.

    ``angle`` (radians, parallel beam) or ``matrix`` (3x4, cone beam), or
    None: the geometry's planned one for ``index`` (:class:`LiveReconstructor`);
    ``index`` is the frame's position in the scan (gaps are reported);
    ``arrived`` the ``time.perf_counter()`` when it reached us.
    """

    data: np.ndarray
    index: int
    angle: float | None = None
    matrix: np.ndarray | None = None
    arrived: float = field(default_factory=time.perf_counter)


@dataclass
class LiveStats:
    """Counters of a live reconstruction (read by the viewer and the benchmark)."""

    received: int = 0
    rejected: int = 0
    rejected_reasons: dict = field(default_factory=dict)
    missing: int = 0  # indices between the lowest and highest received that have not come
    batches: int = 0
    last_lag: float = 0.0  # seconds from the oldest frame's arrival to its batch being queued (GPU) or done
    last_batch_seconds: float = 0.0


class LiveReconstructor:
    """Reconstruct watched slices while projections arrive.

    Parameters
    ----------
    volume : VolumeGeometry (3D)
        The grid the slices are cut from (default slices, voxel sizes).
    geometry : ParallelGeometry (3D) or ConeGeometry
        The scan: its type sets the beam, its detector the frames' shape
        ``(n_rows, n_cols)``. Parallel beam: ``det_spacing``,
        ``row_spacing`` and ``center`` of every frame (one rotation-axis
        column: ``axis_shift`` is refused); each frame takes one angle
        (radians). Cone beam: each frame takes one 3x4 projection matrix
        (``leveret.ConeGeometry`` conventions). Its angles (matrices) are the
        planned scan (see ``planned`` and the Notes).
    planned : bool
        Whether the geometry's angles (matrices) are the planned scan: a frame
        without its own angle (matrix) takes the geometry's view of its index,
        if the geometry has that many views. False: the geometry gives the
        detector only, and a frame without its own angle (matrix) is rejected.
    flat, dark : ndarray, optional
        Flat and dark fields (one image or a stack, averaged). With ``flat``
        the frames are raw counts: normalised and -log taken; without, they
        are line integrals already (unless ``minus_log=True``: transmission).
    minus_log : bool, optional
        Take -log of the (normalised) frames; default: when ``flat`` is given.
    filter, cutoff, padding
        As for :func:`leveret.fbp`.
    storage : {"float32", "float16"}
        How the filtered projections are kept (for recomputing moved slices).
        "float16" halves the memory; a slice computed from it differs from
        the float32 one by about 1e-4 of the slice's largest value (each
        stored sample rounded to 11 significant bits; docs/live.md).
    backend : {"auto", "cuda", "cpu"}
        On "cuda" the frames are corrected, filtered and back-projected on
        the GPU (the current one when the reconstructor is made) and the
        filtered projections stay there.
    max_views : int, optional
        Views kept in GPU memory (default: as many as half the GPU's free
        memory holds); later ones are kept in pinned host memory, and a moved
        slice reads them back a block at a time. On the CPU: room for this
        many views is allocated (and touched) at once, later ones in blocks.
    filter_rows : int
        CPU: detector rows filtered per FFT call (the temporaries of a few
        MiB stay in cache; a whole batch at once is several times slower).
    move : {"texture", "exact"}
        GPU: how a moved slice at an orientation other than the volume's
        axes is recomputed from the stored views. "texture" fetches each
        view's bilinear sample through the texture unit (8-bit interpolation
        weights: about 1e-3 of the slice's largest value, docs/live.md);
        "exact" interpolates with float32 weights from the stored values
        (four loads per sample instead of one fetch). Slices along the
        volume's axes, and every update by new frames, are always exact.
        Ignored on the CPU (exact weights).
    max_batch : int
        The most frames filtered and back-projected together (on a GPU the
        size of the device batch buffers); larger calls are split.

    Notes
    -----
    The geometry's views are the scan as planned, not the frames received:
    the slices are always the reconstruction of the frames received so far
    (their angular weights follow those frames), whatever the geometry
    plans. A frame's own angle (matrix) wins over the planned one of its
    index; a frame without one takes the planned one (``planned=True``).

    Threads: any number of threads may call one reconstructor. The methods
    that add frames, move slices or read them (``add``, ``add_frames``,
    ``watch*``, ``slices``, ``sinogram``, ``synchronize``, ``ready_event``,
    ``gpu_seconds``) run one at a time under the reconstructor's lock, on
    its GPU (the current one when it was made), whatever the calling thread's
    current GPU; ``frame_buffer`` and the counters (``stats``, ``n_views``,
    ``missing_indices``, ``watched``) never wait for a batch. Frames added
    from several threads at once are added one batch after another, in the
    order the calls take the lock: the slices are then those of the frames
    received, to float32 rounding (sums in another order). Reconstructors
    share nothing but the compiled kernels, which hold no state: each has its
    own streams, buffers, FFT plans and tables, so several of them, in
    several threads, on one GPU or several, give what each gives alone.

    Frames for the GPU travel fastest from pinned host memory:
    :meth:`frame_buffer` hands out such buffers. Ownership: the caller
    fills a buffer and passes it (as ``Frame.data`` or in ``add``); once
    that call returns, the buffer belongs to the reconstructor again and is
    reused for a later frame, so the caller must not touch it after passing
    it. Any other array works too (uploaded from pageable memory, slower).

    Examples
    --------
    >>> import numpy as np, leveret
    >>> from leveret.live import LiveReconstructor
    >>> geometry = leveret.ParallelGeometry([0.0, np.pi / 2], 16, 4)
    >>> rec = LiveReconstructor(leveret.VolumeGeometry((4, 16, 16)), geometry, backend="cpu")
    >>> rec.add(np.ones((2, 4, 16)))        # the planned angles of frames 0 and 1
    >>> sorted(rec.slices())
    ['xy', 'xz', 'yz']
    """

    #: Distinct reasons kept in ``stats.rejected_reasons``; later ones are
    #: counted under "other reasons" (a stream of odd shapes stays a few keys).
    MAX_REASONS = 32
    #: Rejected frames logged one by one; after them, one line every LOG_EVERY.
    LOGGED = 20
    LOG_EVERY = 1000

    def __init__(
        self,
        volume: VolumeGeometry,
        geometry,
        *,
        planned: bool = True,
        flat=None,
        dark=None,
        minus_log: bool | None = None,
        filter: str = "ram-lak",
        cutoff: float = 1.0,
        padding: str = "zero",
        storage: str = "float32",
        backend: str = "auto",
        max_views: int | None = None,
        filter_rows: int = 1024,
        move: str = "texture",
        max_batch: int = 64,
    ):
        volume_3d(volume)
        self.volume = volume
        self.beam = _beam_of(geometry)
        self.geometry = geometry
        n_rows, n_cols = geometry.n_rows, geometry.n_cols
        self.detector_shape = (n_rows, n_cols)
        if not isinstance(planned, (bool, np.bool_)):
            raise TypeError(f"planned: expected True or False, got {planned!r}")
        self.planned = bool(planned)
        self.filter = v.choice("filter", filter, FILTERS)
        self.cutoff = float(cutoff)
        self.padding = padding
        self.storage = np.dtype(v.choice("storage", storage, STORAGE))
        self.backend = resolve(backend)
        self.filter_rows = v.positive_int("filter_rows", filter_rows)
        self.move = v.choice("move", move, MOVES)
        self.max_batch = v.positive_int("max_batch", max_batch)
        if max_views is not None:
            max_views = v.positive_int("max_views", max_views)
        if self.backend == "cuda":
            import cupy as xp

            self._device = xp.cuda.Device().id
        else:
            xp = np
            self._device = None
        self.xp = xp
        self._lock = threading.RLock()
        self._response = filter_response(
            n_cols, filter, cutoff=cutoff, det_spacing=geometry.det_spacing if self.beam == "parallel" else 1.0
        )
        self.minus_log = flat is not None if minus_log is None else bool(minus_log)
        if flat is not None:
            flat = _average("flat", flat, self.detector_shape)
            dark = None if dark is None else _average("dark", dark, self.detector_shape)
        elif dark is not None:
            raise ValueError("dark: a dark field needs a flat field (flat=...) too")
        self._correction = Correction(flat, dark, self.minus_log, self.detector_shape)
        view_bytes = n_rows * n_cols * self.storage.itemsize
        if xp is np:
            block = max_views or max(1, min(256, (64 << 20) // view_bytes))
            self._store = ViewStore(self.detector_shape, self.storage, np, block_views=block)
            self._gpu = None
            self._work = np.empty((0,) + self.detector_shape, np.float32)
            self._filtered = np.empty((0,) + self.detector_shape, np.float32)
            self._response32 = self._response.astype(np.float32)
            if max_views is not None:
                self._store.reserve(max_views)  # allocated and touched now, not during the scan
        else:
            from ..cuda import gpu_free_bytes
            from .gpu import GpuPipeline

            device_views = max_views if max_views is not None else int(0.5 * gpu_free_bytes()) // view_bytes
            block = max(1, min(64, device_views))
            self._store = ViewStore(
                self.detector_shape,
                self.storage,
                xp,
                block_views=block,
                device_views=device_views,
                pitched=self.beam == "parallel",
            )
            self._gpu = GpuPipeline(self.detector_shape, self._response, self._correction, self.max_batch)
        self._pool = (
            FramePool(self.detector_shape, self._gpu.allocate_pinned, register=self._gpu.register_host)
            if self._gpu
            else FramePool(self.detector_shape)
        )
        self._n = 0
        self._angles = np.empty(0)  # parallel beam, radians
        self._matrices = np.empty((0, 3, 4))  # cone beam, FDK-normalised
        self._turn = np.empty(0)  # cone beam: unwrapped rotation angle
        self._raw_last = 0.0
        self._w = np.empty(0)  # the weights in the slices now
        self._received: set[int] = set()  # frame indices used (each at most once)
        self._index_range: tuple[int, int] | None = None  # the lowest and highest of them
        self.stats = LiveStats()
        self._sinogram_row = n_rows // 2
        self._sinogram: deque = deque(maxlen=SINOGRAM_ROWS)
        self._watched: list[Slice] = []
        self._acc: dict[str, object] = {}
        self.watch(orthogonal_slices(volume))

    # -- what is watched -------------------------------------------------------------------------
    @property
    def watched(self) -> list[Slice]:
        return list(self._watched)

    @property
    def n_views(self) -> int:
        """Projections received (and kept) so far."""
        return self._n

    @_locked
    def watch(self, slices) -> None:
        """Watch these slices from now on (a list of :class:`Slice`, unique names).

        Slices already watched keep their sums; new or moved ones are computed
        from every projection received so far.
        """
        slices = list(slices)
        names = [s.name for s in slices]
        if len(set(names)) != len(names) or not all(isinstance(s, Slice) for s in slices):
            raise ValueError("slices: expected Slice objects with unique names")
        old = {s.name: s for s in self._watched}
        acc = {}
        with self._on_gpu():
            self._watch(slices, old, acc)
        self._watched, self._acc = slices, acc

    def _watch(self, slices, old, acc):
        for s in slices:
            if old.get(s.name) == s:
                acc[s.name] = self._acc[s.name]
            else:
                acc[s.name] = self.xp.zeros(s.shape, np.float32)
                if self._n:
                    views = np.arange(self._n)
                    self._backproject([s], {s.name: acc[s.name]}, views, self._w[views])

    @_locked
    def watch_orthogonal(self, point=None, angles=(0.0, 0.0, 0.0)) -> None:
        """Move the three orthogonal slices ("xy", "xz", "yz") through ``point``
        (x, y, z), rotated by ``angles`` (degrees, :func:`leveret.live.slices.rotation`);
        other watched slices stay."""
        keep = [s for s in self._watched if s.name not in ("xy", "xz", "yz")]
        self.watch(orthogonal_slices(self.volume, point, angles) + keep)

    @_locked
    def watch_axial(self, z) -> None:
        """Watch axial slices at heights ``z`` ("z0", "z1", ...) beside the orthogonal ones."""
        keep = [s for s in self._watched if s.name in ("xy", "xz", "yz")]
        self.watch(keep + axial_slices(self.volume, z))

    @_locked
    def slices(self) -> dict[str, np.ndarray]:
        """The watched slices now: name -> (height, width) float32 NumPy array."""
        self.synchronize()
        scale = self._turn_scale()
        out = {}
        for name, acc in self._acc.items():
            out[name] = acc.get() if self.xp is not np else acc.copy()
            if scale != 1.0:
                out[name] *= np.float32(scale)
        return out

    def _turn_scale(self) -> float:
        """Cone beam over more than one turn: each line is measured twice per
        turn, so the sums (kept with one-turn weights, which a new turn leaves
        as they are) are scaled on the way out, as leveret.fdk weights them."""
        if self.beam != "cone" or self._turn.size < 2:
            return 1.0
        from ..algorithms.fdk_weights import turn_scale

        return turn_scale(np.sort(self._turn))  # its step is a median gap between neighbours in angle

    @_locked
    def sinogram(self, row: int | None = None) -> np.ndarray:
        """Line integrals of one detector row (default the middle) of the last
        ``SINOGRAM_ROWS`` frames received, in arrival order: (n, n_cols) float32."""
        if row is not None and row != self._sinogram_row:
            r = v.positive_int("row", row + 1) - 1
            if r >= self.detector_shape[0]:
                raise ValueError(f"row: expected 0 <= row < {self.detector_shape[0]}, got {row}")
            self._sinogram_row = r
            self._sinogram.clear()  # rebuilt from now on; the earlier frames' raw rows are not kept
        if not self._sinogram:
            return np.zeros((0, self.detector_shape[1]), np.float32)
        return np.stack(self._sinogram)

    # -- adding projections -----------------------------------------------------------------------
    @property
    def frame_pool(self) -> FramePool:
        """The pool behind :meth:`frame_buffer` (``frame_pool.reserve(n, dtype)``
        allocates buffers ahead of a scan)."""
        return self._pool

    def frame_buffer(self, dtype=np.uint16) -> np.ndarray:
        """An empty (n_rows, n_cols) frame in pinned host memory on a GPU (plain
        memory on the CPU), to fill and pass to :meth:`add_frames` or :meth:`add`.
        It returns to the reconstructor when that call returns (class Notes)."""
        return self._pool.get(np.dtype(dtype))

    @_locked
    def synchronize(self) -> None:
        """Wait for the GPU work queued by earlier calls (a no-op on the CPU)."""
        if self._gpu is not None:
            self._gpu.synchronize()

    @_locked
    def ready_event(self):
        """A CUDA event that completes when the work queued so far is done (None on the CPU)."""
        return None if self._gpu is None else self._gpu.compute.record()

    @property
    @_locked
    def gpu_seconds(self) -> dict:
        """GPU time per stage summed over the batches so far (CUDA events):
        upload, correct, filter, backproject, store; empty on the CPU."""
        return {} if self._gpu is None else self._gpu.stage_seconds()

    @_locked
    def add(self, projections, angles=None, *, matrices=None, indices=None, arrived=None) -> None:
        """Correct, filter and back-project projections into the watched slices.

        Parameters
        ----------
        projections : ndarray (n_rows, n_cols) or (k, n_rows, n_cols)
            Raw counts (with flat/dark), transmission, or line integrals.
        angles : float or array (k,), optional
            Parallel beam: rotation angles in radians (default: the
            geometry's planned angles of ``indices``).
        matrices : array (3, 4) or (k, 3, 4), optional
            Cone beam: projection matrices (default: the geometry's planned
            matrices of ``indices``).
        indices : array of int (k,), optional
            The frames' positions in the scan (default: consecutive after the
            highest so far), each used once; gaps are counted in ``stats.missing``.
        arrived : float, optional
            ``time.perf_counter()`` of the oldest frame's arrival, for ``stats.last_lag``.
        """
        data = projections if hasattr(projections, "dtype") else np.asarray(projections)
        if data.ndim == 2:
            data = data[None]
        shape = (data.shape[0],) + self.detector_shape
        v.real_array("projections", data, shape, "(k, n_rows, n_cols)", "the detector shape")
        k = data.shape[0]
        if indices is None:
            start = 0 if self._index_range is None else self._index_range[1] + 1
            indices = np.arange(start, start + k)
        indices = np.atleast_1d(indices)
        if indices.ndim != 1 or indices.size != k or (k and indices.dtype.kind not in "iu"):
            raise ValueError(f"indices: expected {k} integer frame indices, got {np.shape(indices)}")
        indices = [int(i) for i in indices]
        if k and min(indices) < 0:
            raise ValueError(f"indices: expected indices >= 0, got {min(indices)}")
        seen = set()
        for i in indices:
            if i in self._received or i in seen:
                raise ValueError(f"indices: frame {i} already received (each index is used once)")
            seen.add(i)
        geometry = self._check_geometry(k, angles, matrices, indices)
        for b in range(0, k, self.max_batch):
            part = range(b, min(k, b + self.max_batch))
            self._add_batch(
                [data[i] for i in part],
                geometry[b : b + self.max_batch],
                indices[b : b + self.max_batch],
                arrived,
                strict=True,
            )
        self._pool.release_all([projections], self._uploaded())

    @_locked
    def add_frames(self, frames) -> int:
        """Add a batch of :class:`Frame` objects in one filter and back-projection
        call. Frames of the wrong shape, dtype, index or angle (matrix), without
        one where none is planned for their index, of an index already
        received (each index is used once), or with NaN or Inf values after
        correction, are rejected (logged, counted in ``stats``), the rest go
        on. Returns the number added."""
        frames = list(frames)
        good, batch = [], set()
        for f in frames:
            reason = self.check_frame(f)
            if reason is None and (f.index in self._received or f.index in batch):
                reason = "index already received"
            if reason is None:
                good.append(f)
                batch.add(f.index)
            else:
                self._reject(f.index, reason)
        added = 0
        for b in range(0, len(good), self.max_batch):
            part = good[b : b + self.max_batch]
            if self.beam == "parallel":
                geometry = np.array([self._planned_view(f.index) if f.angle is None else float(f.angle) for f in part])
            else:
                geometry = np.stack(
                    [
                        self._planned_view(f.index)
                        if f.matrix is None
                        else np.asarray(f.matrix, np.float64).reshape(3, 4)
                        for f in part
                    ]
                )
            added += self._add_batch(
                [f.data for f in part],
                geometry,
                [int(f.index) for f in part],
                min(f.arrived for f in part),
                strict=False,
            )
        self._pool.release_all([f.data for f in frames], self._uploaded())
        return added

    def check_frame(self, frame: Frame) -> str | None:
        """Why ``frame`` cannot be used (a short reason), or None; never raises.
        NaN and Inf values are found later, in the correction's own pass over
        the frame; an index already received is found by :meth:`add_frames`."""
        data = frame.data
        if not hasattr(data, "shape") or not hasattr(data, "dtype"):
            return f"not an array ({type(data).__name__})"
        if tuple(data.shape) != self.detector_shape:
            return f"shape {tuple(data.shape)}, expected {self.detector_shape}"
        if np.dtype(data.dtype).kind not in "fiu":
            return f"dtype {data.dtype}, expected real numbers"
        index = frame.index
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)) or index < 0:
            return "bad index"
        if (frame.angle if self.beam == "parallel" else frame.matrix) is None:
            if self._planned_view(index) is None:
                return f"no {'angle' if self.beam == 'parallel' else 'matrix'}, none planned"
            return None
        if self.beam == "parallel":
            if not _finite_number(frame.angle):
                return "no finite angle"
        else:
            try:
                m = np.asarray(frame.matrix, np.float64)
            except (TypeError, ValueError, OverflowError):
                m = None
            if m is None or m.size != 12 or not np.all(np.isfinite(m)):
                return "no finite 3x4 matrix"
        return None

    # -- internals -------------------------------------------------------------------------------
    def _uploaded(self):
        """The CUDA event after the uploads queued so far (None on the CPU)."""
        return None if self._gpu is None else self._gpu.upload_event

    def _planned_views(self) -> np.ndarray:
        """The geometry's angles (parallel beam) or matrices (cone beam)."""
        return self.geometry.angles if self.beam == "parallel" else self.geometry.matrices

    def _planned_view(self, index):
        """The geometry's angle (parallel) or matrix (cone) of frame ``index``,
        or None where none is planned (``planned=False``, or beyond its views)."""
        views = self._planned_views()
        if not self.planned or not 0 <= index < len(views):
            return None
        return float(views[index]) if self.beam == "parallel" else views[index]

    def _check_geometry(self, k, angles, matrices, indices):
        """The batch's angles (k,) or matrices (k, 3, 4): given, or planned for ``indices``."""
        given, other = ("angles", "matrices") if self.beam == "parallel" else ("matrices", "angles")
        if (matrices if self.beam == "parallel" else angles) is not None:
            raise ValueError(f"{other}: {self.beam} beam takes {given}, not {other}")
        if (angles if self.beam == "parallel" else matrices) is None:
            planned = [self._planned_view(i) for i in indices]
            missing = [i for i, g in zip(indices, planned) if g is None]
            if missing:
                plan = f"the geometry plans {len(self._planned_views())} views" if self.planned else "planned=False"
                raise ValueError(f"{given}: none given and none planned for frame {missing[0]} ({plan})")
            return np.array(planned, np.float64).reshape((k,) if self.beam == "parallel" else (k, 3, 4))
        if self.beam == "parallel":
            return v.finite_vector("angles", np.atleast_1d(np.asarray(angles, np.float64)), length=k)
        try:
            m = np.asarray(matrices, np.float64)
        except (TypeError, ValueError):
            m = np.empty(0)
        if m.size != 12 * k or not np.all(np.isfinite(m)):
            raise ValueError(f"matrices: expected {k} finite 3x4 matrices, got shape {np.shape(m)}")
        return m.reshape(k, 3, 4)

    def _reject(self, index, reason):
        self.stats.rejected += 1
        reasons = self.stats.rejected_reasons
        key = reason if reason in reasons or len(reasons) < self.MAX_REASONS else "other reasons"
        reasons[key] = reasons.get(key, 0) + 1
        n = self.stats.rejected
        if n <= self.LOGGED or n % self.LOG_EVERY == 0:
            log.warning("frame %s rejected: %s (%d rejected so far)", str(index)[:40], reason, n)

    def _on_device(self):
        """The reconstructor's GPU as the current one (a no-op on the CPU)."""
        if self._device is None:
            return contextlib.nullcontext()
        return self.xp.cuda.Device(self._device)

    def _on_gpu(self):
        """The compute stream's context on a GPU (CuPy calls inside run on it)."""
        return self._gpu.compute if self._gpu is not None else contextlib.nullcontext()

    def _add_batch(self, datas, geometry, indices, arrived, strict) -> int:
        """Correct, filter, back-project and store one batch; returns the frames used."""
        with self._on_gpu():
            return self._add_batch_here(datas, geometry, indices, arrived, strict)

    def _add_batch_here(self, datas, geometry, indices, arrived, strict) -> int:
        t0 = time.perf_counter()
        k = len(datas)
        if self._gpu is not None:
            lines, bad = self._gpu.ingest(datas, self._pool)
        else:
            if self._work.shape[0] < k:
                self._work = np.empty((k,) + self.detector_shape, np.float32)
            lines = self._work[:k]
            bad = np.array([self._correction.frame(d, lines[i]) for i, d in enumerate(datas)])
        if bad.any():
            if strict:
                raise ValueError("projections: expected finite values after correction")
            ok = np.flatnonzero(bad == 0)
            for i in np.flatnonzero(bad):
                self._reject(indices[i], "NaN or Inf values")
            if ok.size == 0:
                return 0
            lines = lines[ok] if self._gpu is None else lines[self.xp.asarray(ok)]
            geometry, indices = geometry[ok], [indices[i] for i in ok]
            k = ok.size
        cols = self.detector_shape[1]
        row = lines[:, self._sinogram_row, :cols]
        # copies: on the CPU ``lines`` is the batch buffer that the next batch overwrites
        row = row.get() if self._gpu is not None else row
        self._sinogram.extend(np.array(row, np.float32, copy=True))
        n0 = self._n
        if self.beam == "parallel":
            filtered = self._filter(lines)
            self._angles = np.concatenate([self._angles, geometry])
            weights = ParallelGeometry(self._angles, cols).angular_weights()
        else:
            filtered = self._cone_filter(lines[:, :, :cols], geometry)
            weights = self._cone_weights()
        self._n = n0 + k
        self._note_indices(indices)

        # The new views with their weights, and the old ones whose weight moved.
        old = np.concatenate([self._w, np.zeros(k)])
        delta = weights - old
        changed = np.abs(delta) > _NEGLIGIBLE * np.abs(weights).max()
        changed[n0:] = False
        before = np.flatnonzero(changed)
        if self.beam == "parallel":
            new = np.arange(n0, n0 + k)
            for s in self._watched:  # straight from the float32 filtered batch, before it is stored
                self._plane(s, self._acc[s.name], filtered, np.arange(k), delta[new], self._angles[new])
            self._backproject(self._watched, self._acc, before, delta[before])
            self._store_views(filtered)
        else:
            self._store_views(filtered)
            views = np.concatenate([before, np.arange(n0, n0 + k)])
            self._backproject(self._watched, self._acc, views, delta[views])
        self._w = weights
        if self._gpu is not None:
            self._gpu.end_batch()
        now = time.perf_counter()
        self.stats.received += k
        self.stats.batches += 1
        self.stats.last_batch_seconds = now - t0
        self.stats.last_lag = now - (t0 if arrived is None else arrived)
        return k

    def _filter(self, lines):
        """Filtered float32 views of the corrected batch: (k, n_rows, n_cols), any strides."""
        if self._gpu is not None:
            return self._gpu.filter(lines, self.padding)
        k = lines.shape[0]
        if self._filtered.shape[0] < k:
            self._filtered = np.empty(lines.shape, np.float32)
        out = self._filtered[:k]  # reused: a fresh array per batch would cost its page faults every time
        # a few MiB at a time: the FFT's padded and complex temporaries stay in cache
        step = max(1, self.filter_rows // self.detector_shape[0])
        n_pad = 2 * (self._response.size - 1)
        for a in range(0, k, step):
            if self.padding != "zero":
                out[a : a + step] = apply_filter(lines[a : a + step], self._response, padding=self.padding)
                continue
            spec = scipy.fft.rfft(lines[a : a + step], n=n_pad, axis=-1, workers=-1)
            spec *= self._response32
            out[a : a + step] = scipy.fft.irfft(spec, n=n_pad, axis=-1, workers=-1)[..., : self.detector_shape[1]]
        return out

    def _store_views(self, filtered):
        if self._gpu is not None:
            with self._gpu.stage("store"):
                self._store.append(filtered, self._gpu.store_copy if self._store.pitched else None)
            if self.beam == "parallel" and self.move == "texture":  # texture objects made once, not in a move
                for b in range(self._store.n_device_blocks):
                    self._gpu.add_textures(self._store.blocks[b], b * self._store.block_views)
        else:
            self._store.append(filtered)

    def _plane(self, s, out, q, views, coef, angles):
        """Parallel beam: out += sum_k coef[k] B(q[views[k]]) on slice s."""
        t = self.geometry
        if self._gpu is not None:
            self._gpu.plane(
                s, out, q, views, coef, angles, det_spacing=t.det_spacing, center=t.center, row_spacing=t.row_spacing
            )
        else:
            backproject_plane(
                q,
                views,
                coef,
                s.frame(),
                out,
                angles=angles,
                det_spacing=t.det_spacing,
                center=t.center,
                row_spacing=t.row_spacing,
            )

    def _cone_filter(self, lines, matrices):
        """FDK's cosine and pitch weighting and the row filter for these views,
        without their angular weight (that one follows the views received)."""
        from ..algorithms.fdk_weights import FDKWeighting, rotation_angles

        g = ConeGeometry(matrices, *self.detector_shape)
        weighting = FDKWeighting(
            g,
            filter=self.filter,
            cutoff=self.cutoff,
            padding=self.padding,
            short_scan=False,
            angle_weights=np.ones(g.n_views),
        )
        q = weighting(self.xp.ascontiguousarray(lines), slice(None))
        self._matrices = np.concatenate([self._matrices, weighting.frames["normalised"]])
        raw = rotation_angles(g)
        # unwrapped against the previous view, as np.unwrap does over a whole scan
        first = self._turn.size == 0
        start = raw[0] if first else self._turn[-1]
        seq = raw if first else np.concatenate([[self._raw_last], raw])
        steps = np.mod(np.diff(seq) + np.pi, 2 * np.pi) - np.pi
        turn = start + np.concatenate([[0.0], np.cumsum(steps)]) if first else start + np.cumsum(steps)
        self._raw_last = raw[-1]
        self._turn = np.concatenate([self._turn, turn])
        return q

    def _cone_weights(self):
        from ..algorithms.fdk_weights import angular_steps

        return 0.5 * angular_steps(self._turn)  # full-scan FDK: every line measured twice

    def _note_indices(self, indices):
        """Record a batch's indices (new ones, each once): O(1) per frame, the
        gaps counted from the range and the number received, never listed."""
        lo, hi = min(indices), max(indices)
        if self._index_range is not None:
            old_lo, old_hi = self._index_range
            if lo > old_hi + 1:
                log.warning("frame(s) %d..%d missing: the weights follow the frames received", old_hi + 1, lo - 1)
            lo, hi = min(lo, old_lo), max(hi, old_hi)
        self._index_range = (lo, hi)
        self._received.update(indices)
        self.stats.missing = hi - lo + 1 - len(self._received)

    def missing_indices(self, limit: int | None = None) -> list[int]:
        """The missing frame indices (gaps between the lowest and highest index
        received), ascending, at most ``limit`` of them. With a limit the work
        is at most the frames received plus ``limit`` steps, however large the
        gaps; without one, all ``stats.missing`` indices are listed.

        Never waits for a batch (class notes, "Threads"): it reads the
        received indices as the last batch left them (the set is updated by
        one call, which no reader sees half done).
        """
        out: list[int] = []
        if self.stats.missing == 0 or (limit is not None and limit <= 0):
            return out
        if limit is not None:
            # up from the lowest index: each step is a missing index (at most limit) or a received one
            i, hi = self._index_range
            while i < hi and len(out) < limit:
                if i not in self._received:
                    out.append(i)
                i += 1
            return out
        for prev, i in itertools.pairwise(sorted(self._received)):
            out.extend(range(prev + 1, i))
        return out

    def _backproject(self, slices, acc, views, coef):
        """acc[s] += sum_k coef[k] B_views[k](q) for each slice s, from the store,
        a block of views at a time (a move never copies the store)."""
        if views.size == 0 or not slices:
            return
        textured = []
        if self._gpu is not None and self.beam == "parallel" and self.move == "texture":
            # rotated slices: the views on the GPU through their texture objects, one launch per slice
            textured = [s for s in slices if not s.is_axial and s.v != (0.0, 0.0, 1.0)]
            near = views < self._store.n_device_blocks * self._store.block_views
            on_device = views[near]
            t = self.geometry
            for s in textured:
                self._gpu.plane_texture(
                    s,
                    acc[s.name],
                    on_device,
                    coef[near],
                    self._angles[on_device],
                    det_spacing=t.det_spacing,
                    center=t.center,
                    row_spacing=t.row_spacing,
                )
        for b, block, local, pos in self._store.runs(views):
            if self._gpu is not None and not self._store.on_device(b):
                block, local = self._gpu.upload_views(block, local), np.arange(local.size)
            for s in slices:
                if self.beam == "cone":
                    self._cone_views(s, acc[s.name], block, local, coef[pos], views[pos])
                elif s not in textured or not self._store.on_device(b):
                    self._plane(s, acc[s.name], block, local, coef[pos], self._angles[views[pos]])

    def _cone_views(self, s, out, block, local, coef, views):
        xp = self.xp
        if s.is_axial:
            q = block[xp.asarray(local) if xp is not np else local].astype(np.float32)
            q *= xp.asarray(coef, np.float32)[:, None, None]
            matrices = self._matrices[views]
            geometry = ConeGeometry(matrices, *self.detector_shape)
            image = s.image_volume()
            vol = VolumeGeometry((1,) + s.shape, (1.0,) + s.spacing, (s.origin[2],) + image.center)
            op = ConeBackprojection(geometry, vol, backend=self.backend, matrices=matrices)
            op(q, out.reshape((1,) + s.shape), accumulate=True)
            return
        if xp is np:
            backproject_points(
                block, local, coef, s.points(), out.reshape(-1), params=self._matrices[views], block=s.shape[1]
            )
        else:
            from ..cuda import live_planes

            live_planes.backproject_points(
                block, local, coef, xp.asarray(s.points(), np.float32), out.reshape(-1), params=self._matrices[views]
            )


def _beam_of(geometry) -> str:
    """ "parallel" or "cone" for a geometry the live reconstructor takes; a
    clear error for any other."""
    if isinstance(geometry, ConeGeometry):
        return "cone"
    if not isinstance(geometry, ParallelGeometry):
        raise TypeError(f"geometry: expected a ParallelGeometry or a ConeGeometry, got {type(geometry).__name__}")
    if geometry.is_2d:
        raise ValueError("geometry: expected a 3D ParallelGeometry (n_rows given), got a 2D one")
    if geometry.axis_shift is not None:
        raise ValueError(
            "geometry: live reconstruction takes one rotation-axis column (center), not a per-view axis_shift"
        )
    return "parallel"


def _finite_number(value) -> bool:
    """Whether ``value`` is one real, finite number (never raises)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _average(name, images, shape):
    arr = np.asarray(images, np.float64)
    if arr.shape == shape:
        return arr
    if arr.ndim == 3 and arr.shape[1:] == shape and arr.shape[0] > 0:
        return arr.mean(axis=0)
    raise ValueError(f"{name}: expected an image {shape} or a stack (k, {shape[0]}, {shape[1]}), got {arr.shape}")
