"""``LiveReconstructor``: filtered back-projection into watched slices, frame by frame.

Every projection that arrives is corrected (flat/dark, -log), filtered once
(leveret.filters; FDK's cosine and pitch weights for cone beam) and kept;
the watched slices accumulate ``sum_n w_n B_n(q_n)`` with ``B_n`` the
back-projection of view n (leveret.operators for axial slices,
:mod:`leveret.live.planes` for slices at other orientations).

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

import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .. import _validate as v
from ..backends import resolve
from ..filters import FILTERS, apply_filter, filter_response
from ..geometry import ParallelGeometry, VolumeGeometry
from ..operators import ConeBackprojection, ParallelBackprojection
from ..preprocess import minus_log as _minus_log
from ..preprocess import normalize
from .planes import backproject_points, parallel_params
from .slices import Slice, axial_slices, orthogonal_slices

log = logging.getLogger("leveret.live")

BEAMS = ("parallel", "cone")
STORAGE = ("float32", "float16")
# Weight changes below this fraction of the largest weight are float64 noise
# (the same gaps recomputed): far below float32 rounding, not worth a pass.
_NEGLIGIBLE = 1e-12
SINOGRAM_ROWS = 4096   # frames of the detector-row sinogram kept for the viewer


@dataclass
class Frame:
    """One projection as a source delivers it.

    ``angle`` (radians, parallel beam) or ``matrix`` (3x4, cone beam);
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
    missing: list = field(default_factory=list)
    batches: int = 0
    last_lag: float = 0.0        # seconds from the newest frame's arrival to its slices being updated
    last_batch_seconds: float = 0.0


class LiveReconstructor:
    """Reconstruct watched slices while projections arrive.

    Parameters
    ----------
    volume : VolumeGeometry (3D)
        The grid the slices are cut from (default slices, voxel sizes).
    detector_shape : (n_rows, n_cols)
    beam : {"parallel", "cone"}
        Parallel beam takes one angle (radians) per frame; cone beam one 3x4
        projection matrix per frame (``leveret.ConeGeometry`` conventions).
    det_spacing, row_spacing, center : float
        Parallel beam: detector pitch, row pitch and rotation-axis column
        (default the detector's middle), as in ``ParallelGeometry``.
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
        On "cuda" the filtered projections stay on the GPU.
    max_views : int, optional
        Views to reserve room for at once (else the store grows by doubling).
    filter_rows : int
        CPU: detector rows filtered per FFT call (the temporaries of a few
        MiB stay in cache; a whole batch at once is several times slower).

    Examples
    --------
    >>> import numpy as np, leveret
    >>> from leveret.live import LiveReconstructor
    >>> vol = leveret.VolumeGeometry((4, 16, 16))
    >>> rec = LiveReconstructor(vol, (4, 16), backend="cpu")
    >>> rec.add(np.ones((2, 4, 16)), angles=[0.0, np.pi / 2])
    >>> sorted(rec.slices())
    ['xy', 'xz', 'yz']
    """

    def __init__(self, volume: VolumeGeometry, detector_shape, *, beam: str = "parallel",
                 det_spacing: float = 1.0, row_spacing: float = 1.0, center: float | None = None,
                 flat=None, dark=None, minus_log: bool | None = None, filter: str = "ram-lak",
                 cutoff: float = 1.0, padding: str = "zero", storage: str = "float32",
                 backend: str = "auto", max_views: int | None = None, filter_rows: int = 1024):
        if not isinstance(volume, VolumeGeometry) or volume.is_2d:
            raise ValueError(f"volume: expected a 3D VolumeGeometry, got {volume!r}")
        try:
            n_rows, n_cols = (int(s) for s in detector_shape)
        except (TypeError, ValueError):
            raise ValueError(f"detector_shape: expected (n_rows, n_cols), got {detector_shape!r}") from None
        self.volume = volume
        self.detector_shape = (v.positive_int("n_rows", n_rows), v.positive_int("n_cols", n_cols))
        self.beam = v.choice("beam", beam, BEAMS)
        # the template geometry checks spacing and centre once
        self._template = ParallelGeometry([0.0], n_cols, n_rows, det_spacing, row_spacing, center)
        self.filter = v.choice("filter", filter, FILTERS)
        self.cutoff = float(cutoff)
        self.padding = padding
        self.storage = np.dtype(v.choice("storage", storage, STORAGE))
        self.backend = resolve(backend)
        self.filter_rows = v.positive_int("filter_rows", filter_rows)
        if self.backend == "cuda":
            import cupy as xp
        else:
            xp = np
        self.xp = xp
        self._response = filter_response(n_cols, filter, cutoff=cutoff,
                                         det_spacing=det_spacing if self.beam == "parallel" else 1.0)
        self.minus_log = flat is not None if minus_log is None else bool(minus_log)
        self._flat = self._dark = None
        if flat is not None:
            self._flat = xp.asarray(_average("flat", flat, self.detector_shape), np.float32)
            self._dark = (xp.zeros_like(self._flat) if dark is None
                          else xp.asarray(_average("dark", dark, self.detector_shape), np.float32))
        elif dark is not None:
            raise ValueError("dark: a dark field needs a flat field (flat=...) too")
        capacity = 16 if max_views is None else v.positive_int("max_views", max_views)
        self._q = xp.empty((capacity,) + self.detector_shape, self.storage)
        self._n = 0
        self._angles = np.empty(0)            # parallel beam, radians
        self._matrices = np.empty((0, 3, 4))   # cone beam, FDK-normalised
        self._turn = np.empty(0)               # cone beam: unwrapped rotation angle
        self._raw_last = 0.0
        self._w = np.empty(0)                  # the weights in the slices now
        self._indices: list[int] = []
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
        for s in slices:
            if old.get(s.name) == s:
                acc[s.name] = self._acc[s.name]
            else:
                acc[s.name] = self.xp.zeros(s.shape, np.float32)
                if self._n:
                    views = np.arange(self._n)
                    self._backproject([s], {s.name: acc[s.name]}, views, self._w[views])
        self._watched, self._acc = slices, acc

    def watch_orthogonal(self, point=None, angles=(0.0, 0.0, 0.0)) -> None:
        """Move the three orthogonal slices ("xy", "xz", "yz") through ``point``
        (x, y, z), rotated by ``angles`` (degrees, :func:`leveret.live.slices.rotation`);
        other watched slices stay."""
        keep = [s for s in self._watched if s.name not in ("xy", "xz", "yz")]
        self.watch(orthogonal_slices(self.volume, point, angles) + keep)

    def watch_axial(self, z) -> None:
        """Watch axial slices at heights ``z`` ("z0", "z1", ...) beside the orthogonal ones."""
        keep = [s for s in self._watched if s.name in ("xy", "xz", "yz")]
        self.watch(keep + axial_slices(self.volume, z))

    def slices(self) -> dict[str, np.ndarray]:
        """The watched slices now: name -> (height, width) float32 NumPy array."""
        out = {}
        for name, acc in self._acc.items():
            out[name] = acc.get() if self.xp is not np else acc.copy()
        return out

    def sinogram(self, row: int | None = None) -> np.ndarray:
        """Line integrals of one detector row (default the middle) of the last
        ``SINOGRAM_ROWS`` frames received, in arrival order: (n, n_cols) float32."""
        if row is not None and row != self._sinogram_row:
            r = v.positive_int("row", row + 1) - 1
            if r >= self.detector_shape[0]:
                raise ValueError(f"row: expected 0 <= row < {self.detector_shape[0]}, got {row}")
            self._sinogram_row = r
            self._sinogram.clear()   # rebuilt from now on; the earlier frames' raw rows are not kept
        if not self._sinogram:
            return np.zeros((0, self.detector_shape[1]), np.float32)
        return np.stack(self._sinogram)

    # -- adding projections -----------------------------------------------------------------------
    def add(self, projections, angles=None, *, matrices=None, indices=None, arrived=None) -> None:
        """Correct, filter and back-project projections into the watched slices.

        Parameters
        ----------
        projections : ndarray (n_rows, n_cols) or (k, n_rows, n_cols)
            Raw counts (with flat/dark), transmission, or line integrals.
        angles : float or array (k,)
            Parallel beam: rotation angles in radians.
        matrices : array (3, 4) or (k, 3, 4)
            Cone beam: projection matrices.
        indices : array of int (k,), optional
            The frames' positions in the scan (default: consecutive); gaps are
            reported in ``stats.missing``.
        arrived : float, optional
            ``time.perf_counter()`` of the oldest frame's arrival, for ``stats.last_lag``.
        """
        xp = self.xp
        data = projections if hasattr(projections, "dtype") else np.asarray(projections)
        if data.ndim == 2:
            data = data[None]
        shape = (data.shape[0],) + self.detector_shape
        v.real_array("projections", data, shape, "(k, n_rows, n_cols)", "the detector shape")
        k = data.shape[0]
        if self.beam == "parallel":
            if matrices is not None:
                raise ValueError("matrices: parallel beam takes angles, not projection matrices")
            if angles is None:
                raise ValueError("angles: parallel beam needs one angle per projection")
            new_angles = v.finite_vector("angles", np.atleast_1d(np.asarray(angles, np.float64)), length=k)
        else:
            if angles is not None:
                raise ValueError("angles: cone beam takes projection matrices, not angles")
            if matrices is None:
                raise ValueError("matrices: cone beam needs one 3x4 matrix per projection")
            m = np.asarray(matrices, np.float64).reshape(-1, 3, 4)
            if m.shape[0] != k or not np.all(np.isfinite(m)):
                raise ValueError(f"matrices: expected {k} finite 3x4 matrices, got shape {np.shape(matrices)}")
        if indices is None:
            start = (max(self._indices) + 1) if self._indices else 0
            indices = np.arange(start, start + k)
        indices = [int(i) for i in np.atleast_1d(indices)]
        if len(indices) != k:
            raise ValueError(f"indices: expected {k} frame indices, got {len(indices)}")
        t0 = time.perf_counter()

        lines = self._correct(xp.asarray(data))
        self._sinogram.extend(np.asarray(lines[:, self._sinogram_row].get() if xp is not np
                                         else lines[:, self._sinogram_row], np.float32))
        if self.beam == "parallel":
            self._reserve(k)
            # a few MiB at a time: the FFT's padded and complex temporaries stay in cache
            step = max(1, self.filter_rows // self.detector_shape[0]) if xp is np else k
            for a in range(0, k, step):
                b = min(k, a + step)
                self._q[self._n + a:self._n + b] = apply_filter(lines[a:b], self._response, padding=self.padding)
            self._angles = np.concatenate([self._angles, new_angles])
            weights = ParallelGeometry(self._angles, self.detector_shape[1]).angular_weights()
        else:
            q = self._cone_filter(lines, m)
            weights = self._cone_weights()
            self._reserve(k)
            self._q[self._n:self._n + k] = q.astype(self.storage, copy=False)
        n0, self._n = self._n, self._n + k
        self._note_indices(indices)

        # The new views with their weights, and the old ones whose weight moved.
        old = np.concatenate([self._w, np.zeros(k)])
        delta = weights - old
        changed = np.abs(delta) > _NEGLIGIBLE * np.abs(weights).max()
        changed[n0:] = True
        views = np.flatnonzero(changed)
        self._backproject(self._watched, self._acc, views, delta[views])
        self._w = weights
        if xp is not np:
            xp.cuda.get_current_stream().synchronize()
        now = time.perf_counter()
        self.stats.received += k
        self.stats.batches += 1
        self.stats.last_batch_seconds = now - t0
        self.stats.last_lag = now - (t0 if arrived is None else arrived)

    def add_frames(self, frames) -> int:
        """Add a batch of :class:`Frame` objects in one filter and back-projection
        call. Frames of the wrong shape, dtype or angle are rejected (logged,
        counted in ``stats``), the rest go on. Returns the number added."""
        good = []
        for f in frames:
            reason = self.check_frame(f)
            if reason is None:
                good.append(f)
                continue
            self.stats.rejected += 1
            self.stats.rejected_reasons[reason] = self.stats.rejected_reasons.get(reason, 0) + 1
            log.warning("frame %s rejected: %s", f.index, reason)
        if not good:
            return 0
        data = np.stack([np.asarray(f.data) for f in good])   # one upload for the batch on the GPU
        arrived = min(f.arrived for f in good)
        if self.beam == "parallel":
            self.add(data, [f.angle for f in good], indices=[f.index for f in good], arrived=arrived)
        else:
            self.add(data, matrices=[f.matrix for f in good], indices=[f.index for f in good], arrived=arrived)
        return len(good)

    def check_frame(self, frame: Frame) -> str | None:
        """Why ``frame`` cannot be used (a short reason), or None."""
        data = frame.data
        if not hasattr(data, "shape") or not hasattr(data, "dtype"):
            return f"not an array ({type(data).__name__})"
        if tuple(data.shape) != self.detector_shape:
            return f"shape {tuple(data.shape)}, expected {self.detector_shape}"
        if np.dtype(data.dtype).kind not in "fiu":
            return f"dtype {data.dtype}, expected real numbers"
        if np.dtype(data.dtype).kind == "f" and not math.isfinite(float(data.sum(dtype=np.float64))):
            return "NaN or Inf values"     # one sum: finite frames pass at the cost of one pass
        if self.beam == "parallel":
            if frame.angle is None or not math.isfinite(float(frame.angle)):
                return "no finite angle"
        else:
            m = None if frame.matrix is None else np.asarray(frame.matrix, np.float64)
            if m is None or m.size != 12 or not np.all(np.isfinite(m)):
                return "no finite 3x4 matrix"
        return None

    # -- internals -------------------------------------------------------------------------------
    def _correct(self, data):
        xp = self.xp
        if self._flat is not None:
            lines = normalize(data, self._flat, self._dark)
        else:
            lines = data.astype(np.float32, copy=True)
        if self.minus_log:
            _minus_log(lines, out=lines)
        if not bool(xp.all(xp.isfinite(lines))):
            raise ValueError("projections: expected finite values after correction")
        return lines

    def _cone_filter(self, lines, matrices):
        """FDK's cosine and pitch weighting and the row filter for these views,
        without their angular weight (that one follows the views received)."""
        from ..algorithms.fdk import FDKWeighting, view_frames
        from ..geometry import ConeGeometry

        g = ConeGeometry(matrices, *self.detector_shape)
        frames = view_frames(g)
        weighting = FDKWeighting(g, filter=self.filter, cutoff=self.cutoff, padding=self.padding,
                                 short_scan=False)
        # Its per-column weights are angular step / pitch; the step follows the views received,
        # so only 1/pitch is applied here (a view received twice has a step of 0 in this batch).
        weighting.per_column = np.repeat((1.0 / frames["pitch"])[:, None], g.n_cols, axis=1)
        q = weighting(lines, slice(None))
        self._matrices = np.concatenate([self._matrices, frames["normalised"]])
        source = g.source_positions()
        raw = np.arctan2(source[:, 0], -source[:, 1])
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
        from ..algorithms.fdk import _steps
        return 0.5 * _steps(self._turn)   # full-scan FDK: every line measured twice

    def _reserve(self, k):
        """Room for k more views in the store."""
        xp = self.xp
        if self._n + k > self._q.shape[0]:
            bigger = xp.empty((max(2 * self._q.shape[0], self._n + k),) + self.detector_shape, self.storage)
            bigger[:self._n] = self._q[:self._n]
            self._q = bigger

    def _note_indices(self, indices):
        seen = set(self._indices)
        for i in indices:
            if i in seen:
                log.warning("frame %d received twice: both are used", i)
        self._indices.extend(indices)
        # the gaps among the indices received so far
        have = set(self._indices)
        top = max(self._indices)
        missing = [i for i in range(min(self._indices), top) if i not in have]
        new_missing = sorted(set(missing) - set(self.stats.missing))
        if new_missing and max(new_missing) < min(indices):
            log.warning("frame(s) %s missing: the weights follow the frames received", new_missing[:10])
        self.stats.missing = missing

    def _backproject(self, slices, acc, views, coef):
        """acc[s] += sum_k coef[k] B_views[k](q) for each slice s."""
        if views.size == 0 or not slices:
            return
        if self.beam == "parallel":
            on_grid = [s for s in slices if _line_layout(s) is not None]
            self._parallel_lines(on_grid, acc, views, coef)
            row_scale = 1.0 / self._template.row_spacing
            row_offset = (self.detector_shape[0] - 1) / 2
            params = parallel_params(self._angles[views], np.full(views.size, self._template.center),
                                     self._template.det_spacing)
        else:
            on_grid = [s for s in slices if s.is_axial]
            self._cone_axial(on_grid, acc, views, coef)
            row_scale = row_offset = None
            params = self._matrices[views]
        for s in slices:
            if s in on_grid:
                continue
            points = self.xp.asarray(s.points(), np.float64 if self.xp is np else np.float32)
            out = acc[s.name].reshape(-1)
            backproject_points(self._q, views, coef, points, out, params=params,
                               row_scale=row_scale, row_offset=row_offset, block=s.shape[1])

    def _views_float32(self, views, coef):
        """The stored views, weighted, as float32 (views, n_rows, n_cols)."""
        xp = self.xp
        q = self._q[xp.asarray(views)] if xp is not np else self._q[views]
        return q.astype(np.float32) * xp.asarray(coef, np.float32)[:, None, None]

    def _parallel_lines(self, slices, acc, views, coef):
        """Slices made of horizontal lines along x or y (axial slices, and the
        unrotated xz and yz slices) through ParallelBackprojection: each line
        is one image row back-projected from the detector row at its height."""
        if not slices:
            return
        t = self._template
        angles = self._angles[views]
        geometries = {swap: ParallelGeometry(np.pi / 2 - angles if swap else angles, t.n_cols, None,
                                             t.det_spacing, t.row_spacing, t.center) for swap in (False, True)}
        sinograms: dict = {}   # xz and yz take the same detector rows: gathered once
        for s in slices:
            heights, image, swap = _line_layout(s)
            rows = heights / t.row_spacing + (t.n_rows - 1) / 2
            key = rows.tobytes()
            if key not in sinograms:
                sinograms[key] = self._weighted_rows(views, coef, rows)   # (lines, views, n_cols)
            op = ParallelBackprojection(geometries[swap], image, backend=self.backend)
            # (1, h, w) for an axial slice, (h, 1, w) or (h, w, 1) for lines along x or y
            acc[s.name] += op(sinograms[key]).reshape(s.shape)

    def _weighted_rows(self, views, coef, rows):
        """``coef[k] * q[views[k]]`` at the fractional detector rows ``rows``,
        linearly between rows as leveret.fbp takes them (zero off the
        detector), as float32 sinograms (len(rows), len(views), n_cols)."""
        xp = self.xp
        n_rows = self.detector_shape[0]
        if views.size and np.all(np.diff(views) == 1):   # the usual case: the newest views, no gather copy
            src = self._q[int(views[0]):int(views[-1]) + 1]
        else:
            src = self._q[xp.asarray(views)] if xp is not np else self._q[views]
        c = xp.asarray(coef, np.float32)[None, :, None]
        lo = np.floor(rows + 1e-9).astype(int)
        frac = rows - lo
        frac[np.abs(frac) < 1e-9] = 0.0
        out = xp.empty((rows.size, views.size, src.shape[2]), np.float32)
        if np.all(frac == 0) and lo[0] >= 0 and lo[-1] < n_rows and np.all(np.diff(lo) == 1):
            xp.multiply(src[:, lo[0]:lo[-1] + 1].transpose(1, 0, 2), c, out=out)
            return out
        out[...] = 0
        for i, (r, f) in enumerate(zip(lo, frac)):
            for row, w in ((r, 1.0 - f), (r + 1, f)):
                if w != 0 and 0 <= row < n_rows:
                    out[i] += np.float32(w) * src[:, row, :] * c[0]
        return out

    def _cone_axial(self, slices, acc, views, coef):
        if not slices:
            return
        from ..geometry import ConeGeometry

        q = self._views_float32(views, coef)
        matrices = self._matrices[views]
        geometry = ConeGeometry(matrices, *self.detector_shape)
        for s in slices:
            image = s.image_volume()
            vol = VolumeGeometry((1,) + s.shape, (1.0,) + s.spacing, (s.origin[2],) + image.center)
            op = ConeBackprojection(geometry, vol, backend=self.backend, matrices=matrices)
            out = acc[s.name].reshape((1,) + s.shape)
            op(q, out, accumulate=True)


def _line_layout(s: Slice):
    """For an axial slice, or one whose rows are lines along +x or +y at fixed
    heights: (the heights, the 2D image grid of one line, whether x and y are
    swapped); None otherwise. A line along +y is back-projected as a line
    along +x with x and y swapped and angles pi/2 - theta (the same detector
    coordinate x cos t + y sin t): one image row, not a column of single
    pixels, which the operator would take one pixel per task."""
    ex, ey, ez = (1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)
    h, w = s.shape
    dv, du = s.spacing
    x0, y0, z0 = s.origin
    if s.u == ex and s.v == ey:    # axial: one "line" of h x w pixels at height z0
        return np.array([z0]), VolumeGeometry((h, w), (dv, du), center=(y0, x0)), False
    if s.v != ez:
        return None
    heights = z0 + (np.arange(h) - (h - 1) / 2) * dv
    if s.u == ex:
        return heights, VolumeGeometry((1, w), (1.0, du), center=(y0, x0)), False
    if s.u == ey:
        return heights, VolumeGeometry((1, w), (1.0, du), center=(x0, y0)), True
    return None


def _average(name, images, shape):
    arr = np.asarray(images, np.float64)
    if arr.shape == shape:
        return arr
    if arr.ndim == 3 and arr.shape[1:] == shape and arr.shape[0] > 0:
        return arr.mean(axis=0)
    raise ValueError(f"{name}: expected an image {shape} or a stack (k, {shape[0]}, {shape[1]}), got {arr.shape}")
