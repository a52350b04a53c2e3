"""Run the RabbitCT benchmark: time the back-projection, score it in HU.

:func:`run_benchmark` does what RabbitCTRunner does for one problem size L:
back-project the data's pre-processed images into the L^3 cube of 256 mm with
the matrices as given (:class:`leveret.operators.ConeBackprojection`), time
it, and compare the result with a reference in HU. It reports RabbitCT's
numbers (:class:`RabbitCTResult`): total time, time per projection, GUPS
(giga voxel updates per second, ``L^3 n_views / time / 1e9``), MSE and RMSE
in HU, PSNR, the maximum absolute error and the error histogram.

Scoring (:func:`hu_errors`)
---------------------------
- **Against the file's uint16 reference**, the result is quantised as
  RabbitCTRunner does it (:func:`hu_from_mu`: ``floor(hu_scale mu +
  hu_offset + 0.5)``, 0 for mu <= 0, capped at 4095) and compared with the
  integers: this *is* RabbitCT's score. Its floor is the rounding: a result
  within 1e-6 of the reference still scores 1 HU wherever the two straddle a
  half-integer.
- **Against a float reference** (e.g. :func:`leveret.rabbitct.reference_volume`,
  float64), both sides go through the linear map only, ``hu_scale mu +
  hu_offset`` (no rounding, no clipping), in float64: this measures the
  arithmetic itself, well below one HU (Zinsser and Keck (2013) report
  0.021 HU this way, against a floating-point reference). ``compare=`` overrides either choice.
- **PSNR** = ``10 log10(4095^2 / MSE)`` dB: RabbitCTRunner's definition, the
  peak being the top of the 12-bit scored range (0..4095), whatever the
  comparison; infinite for identical volumes.
- **What to expect.** The CPU back-projection ("linear") differs from a
  float64 reference by float32 rounding (1e-4 HU). The CUDA kernel
  interpolates with the texture unit's 8-bit weights: on the full synthetic
  dataset (:func:`make_dataset` defaults) about 0.1 HU RMSE against a float
  reference, unbiased, and ``interpolation="linear32"`` (exact float32
  weights) about 0.006 HU (docs/accuracy.md has the measured values);
  ``interpolation="linear8"`` reproduces the texture unit's arithmetic on
  the CPU.
- **Histogram** of ``|error|`` in HU, RabbitCTRunner's 11 bins by default
  (:data:`HISTOGRAM_EDGES`): [0, 1), [1, 2), ..., [9, 10), [10, inf).

Timing
------
Like RabbitCTRunner, only the back-projection is timed: images are read into
host memory (a memory-mapped file is read in full) before the clock starts,
and one untimed warm-up view is back-projected first (JIT compilation, CUDA
module and texture set-up). On CUDA two timings are taken: with the data
already on the device (CuPy images in, CuPy volume out; the stream is
synchronised before the clock stops), and, with ``include_transfers``, from
NumPy images in host memory to a NumPy volume (pageable upload of all
images, back-projection, download of the volume). RabbitCTRunner times the
upload (per image, inside its loop) but not the final download; the two
numbers here bracket it. Each timing is the minimum over ``repeats`` runs
(the least disturbed one); all runs are kept.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _validate as v
from ..geometry import ConeGeometry, VolumeGeometry
from ..operators.cone import ConeBackprojection
from .fileformat import VOLUME_SIDE_MM, RabbitCTData, hu_from_mu

__all__ = [
    "HISTOGRAM_EDGES",
    "PSNR_PEAK_HU",
    "RabbitCTResult",
    "data_geometry",
    "hu_errors",
    "run_benchmark",
    "volume_geometry",
]

#: Bin edges (HU) of the |error| histogram, RabbitCTRunner's: [k, k + 1) for k < 10, then [10, inf).
HISTOGRAM_EDGES = np.array([*range(11), np.inf], dtype=np.float64)
HISTOGRAM_EDGES.setflags(write=False)
#: Peak of the PSNR: the largest scored value, 4095 (12-bit data), as RabbitCTRunner uses.
PSNR_PEAK_HU = 4095.0
_COMPARISONS = ("auto", "quantised", "float")
_SLAB_VOXELS = 1 << 22  # voxels per slab when scoring: temporaries stay small at 1024^3


# -- the benchmark's grids -------------------------------------------------------------------


def volume_geometry(size: int) -> VolumeGeometry:
    """RabbitCT's L^3 volume: the 256 mm cube centred at the origin.

    Voxel ``[k, j, i]`` sits at ``O + R (i, j, k)`` mm with ``R = 256 / L``
    and ``O = -R (L - 1) / 2`` (RabbitCTRunner's ``O_Index``), i.e.
    ``VolumeGeometry((L, L, L), voxel_size=R, center=0)``.
    """
    size = v.positive_int("size", size)
    return VolumeGeometry((size,) * 3, voxel_size=VOLUME_SIDE_MM / size, center=0.0)


def data_geometry(data: RabbitCTData) -> ConeGeometry:
    """The data's projection matrices as a :class:`ConeGeometry`, unscaled (as RabbitCT uses them)."""
    if not isinstance(data, RabbitCTData):
        raise TypeError(f"data: expected a RabbitCTData, got {type(data).__name__}")
    n_rows, n_cols = data.detector_shape
    return ConeGeometry(data.matrices, n_rows, n_cols)


# -- metrics ---------------------------------------------------------------------------------


class _ErrorStats:
    """Running sums for :func:`hu_errors`, fed slab by slab (float64 throughout)."""

    def __init__(self, edges: np.ndarray):
        self.edges = edges
        self.n = 0
        self.sum = 0.0
        self.sum_sq = 0.0
        self.max_abs = 0.0
        self.counts = np.zeros(edges.size - 1, dtype=np.int64)

    def add(self, result_hu: np.ndarray, reference_hu: np.ndarray) -> None:
        err = np.asarray(result_hu, dtype=np.float64) - np.asarray(reference_hu, dtype=np.float64)
        err = err.ravel()
        if err.size == 0:
            return
        mag = np.abs(err)
        self.n += err.size
        self.sum += float(err.sum())
        self.sum_sq += float(np.dot(err, err))
        self.max_abs = max(self.max_abs, float(mag.max()))
        self.counts += np.histogram(mag, bins=self.edges)[0]

    def result(self) -> dict[str, Any]:
        mse = self.sum_sq / self.n
        return {
            "n_voxels": self.n,
            "mse_hu2": mse,
            "rmse_hu": float(np.sqrt(mse)),
            "psnr_db": float("inf") if mse == 0 else float(10.0 * np.log10(PSNR_PEAK_HU**2 / mse)),
            "max_abs_error_hu": self.max_abs,
            "mean_error_hu": self.sum / self.n,
            "histogram": self.counts.copy(),
            "bin_edges_hu": self.edges.copy(),
        }


def _edges(bins) -> np.ndarray:
    if bins is None:
        return np.array(HISTOGRAM_EDGES)
    try:
        edges = np.array(bins, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"bins: expected increasing bin edges (HU), got {type(bins).__name__}") from None
    if edges.ndim != 1 or edges.size < 2 or np.isnan(edges).any() or np.any(np.diff(edges) <= 0):
        raise ValueError(f"bins: expected at least two increasing bin edges (HU), got {bins!r}")
    return edges


def _check_volume_array(name: str, arr) -> np.ndarray:
    if not isinstance(arr, np.ndarray):
        if type(arr).__module__.startswith("cupy"):
            raise ValueError(f"{name}: expected a NumPy array, got a CuPy array (use .get())")
        try:
            arr = np.asarray(arr)
        except Exception:
            raise TypeError(f"{name}: expected an array of numbers, got {type(arr).__name__}") from None
    if arr.dtype.kind not in "fiu":
        raise ValueError(f"{name}: expected real numbers, got dtype {arr.dtype}")
    if arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty array, got shape {arr.shape}")
    return arr


def _slabs(shape: tuple[int, ...]):
    """Index ranges along axis 0 holding about _SLAB_VOXELS each."""
    if len(shape) == 0:
        yield Ellipsis
        return
    per = max(1, int(np.prod(shape[1:], dtype=np.int64)))
    step = max(1, _SLAB_VOXELS // per)
    for a in range(0, shape[0], step):
        yield slice(a, min(shape[0], a + step))


def hu_errors(result_hu, reference_hu, *, bins=None) -> dict[str, Any]:
    """RabbitCT's error measures between two volumes already in HU (or scored units).

    Parameters
    ----------
    result_hu, reference_hu : array_like, same shape
        Values in HU (any real dtype: uint16 references, float32 quantised
        results, float64 linear HU); compared element by element in float64.
        Large (memory-mapped) volumes are read slab by slab along axis 0.
    bins : array_like or None
        Increasing edges (HU) of the ``|error|`` histogram; the last bin is
        closed (``np.histogram``). None: :data:`HISTOGRAM_EDGES`,
        RabbitCTRunner's [0, 1), [1, 2), ..., [9, 10), [10, inf).

    Returns
    -------
    dict
        ``n_voxels``; ``mse_hu2`` = mean(err^2) (HU^2) with err = result -
        reference; ``rmse_hu`` = sqrt(mse) (HU); ``psnr_db`` = 10 log10(4095^2
        / mse) (dB, inf when mse = 0; peak :data:`PSNR_PEAK_HU`);
        ``max_abs_error_hu``; ``mean_error_hu`` (the bias); ``histogram``
        (int64 counts of ``|err|``, one per bin; ``|err|`` beyond the last
        edge is not counted); ``bin_edges_hu``.

    Raises
    ------
    ValueError
        Naming the argument: not real numbers, empty, different shapes,
        NaN/Inf values, bad ``bins``.
    """
    a = _check_volume_array("result_hu", result_hu)
    b = _check_volume_array("reference_hu", reference_hu)
    if a.shape != b.shape:
        raise ValueError(f"reference_hu: expected the shape of result_hu {a.shape}, got {b.shape}")
    stats = _ErrorStats(_edges(bins))
    for s in _slabs(a.shape):
        x, y = a[s], b[s]
        for name, part in (("result_hu", x), ("reference_hu", y)):
            if part.dtype.kind == "f" and not np.isfinite(part).all():
                raise ValueError(f"{name}: expected finite values, got NaN/Inf")
        stats.add(x, y)
    return stats.result()


# -- the result ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RabbitCTResult:
    """What one RabbitCT run measured.

    Attributes
    ----------
    size : int
        Volume edge L (voxel size 256 / L mm).
    n_views : int
        Projections back-projected.
    detector_shape : (int, int)
        ``(n_rows, n_cols)`` of each image.
    backend, device : str
        "cpu" or "cuda", and what ran it (CPU threads or GPU name).
    compute_times_s : tuple of float
        One per repeat, seconds. CPU: the back-projection. CUDA: with the
        images already on the device and the volume left there.
    transfer_times_s : tuple of float or None
        CUDA with ``include_transfers``: NumPy images in host memory to a
        NumPy volume (upload, back-projection, download). None otherwise.
    comparison : {"quantised", "float"}
        How HU were compared (module notes).
    reference : str
        What the result was compared with.
    interpolation : str
        "linear" or "linear8" (:class:`ConeBackprojection`).
    errors : dict
        :func:`hu_errors` of the result against the reference.
    """

    size: int
    n_views: int
    detector_shape: tuple[int, int]
    backend: str
    device: str
    compute_times_s: tuple[float, ...]
    transfer_times_s: tuple[float, ...] | None
    comparison: str
    reference: str
    interpolation: str
    errors: dict = dataclasses.field(repr=False)

    # -- timings ---------------------------------------------------------------------
    @property
    def voxel_updates(self) -> int:
        """``L^3 n_views``: what GUPS counts."""
        return self.size**3 * self.n_views

    @property
    def includes_transfers(self) -> bool:
        """Whether :attr:`time_s` includes host-device transfers."""
        return self.transfer_times_s is not None

    @property
    def time_s(self) -> float:
        """RabbitCT's total time, s: with transfers when measured, else the compute time (minimum over repeats)."""
        return min(self.transfer_times_s) if self.transfer_times_s is not None else self.compute_time_s

    @property
    def compute_time_s(self) -> float:
        """Back-projection alone (CUDA: data on the device), s, minimum over repeats."""
        return min(self.compute_times_s)

    @property
    def time_per_projection_s(self) -> float:
        """:attr:`time_s` / n_views, s (RabbitCT's "average" time)."""
        return self.time_s / self.n_views

    @property
    def gups(self) -> float:
        """Giga voxel updates per second: ``L^3 n_views / time_s / 1e9``."""
        return self.voxel_updates / self.time_s / 1e9

    @property
    def compute_gups(self) -> float:
        """GUPS of :attr:`compute_time_s`."""
        return self.voxel_updates / self.compute_time_s / 1e9

    # -- quality -----------------------------------------------------------------------
    @property
    def mse_hu2(self) -> float:
        return self.errors["mse_hu2"]

    @property
    def rmse_hu(self) -> float:
        return self.errors["rmse_hu"]

    @property
    def psnr_db(self) -> float:
        return self.errors["psnr_db"]

    @property
    def max_abs_error_hu(self) -> float:
        return self.errors["max_abs_error_hu"]

    # -- output ------------------------------------------------------------------------
    def table(self) -> str:
        """A plain-text report, RabbitCTRunner's numbers first."""
        n_rows, n_cols = self.detector_shape
        lines = [
            f"RabbitCT  L = {self.size} (voxel {VOLUME_SIDE_MM / self.size:g} mm), {self.n_views} projections "
            f"of {n_cols} x {n_rows}, backend {self.backend} ({self.device}), {self.interpolation}",
            f"  {'timing':<28}{'total [s]':>12}{'per proj. [ms]':>16}{'GUPS':>10}",
        ]
        rows = []
        if self.transfer_times_s is not None:
            rows.append(("with host transfers", min(self.transfer_times_s)))
        rows.append(("data on the device" if self.backend == "cuda" else "back-projection", self.compute_time_s))
        for label, t in rows:
            lines.append(f"  {label:<28}{t:>12.4f}{1e3 * t / self.n_views:>16.4f}{self.voxel_updates / t / 1e9:>10.3f}")
        e = self.errors
        psnr = "inf" if np.isinf(e["psnr_db"]) else f"{e['psnr_db']:.2f}"
        lines += [
            f"  quality against {self.reference} ({self.comparison} HU):",
            f"    RMSE {e['rmse_hu']:.4g} HU   MSE {e['mse_hu2']:.4g} HU^2   PSNR {psnr} dB "
            f"(peak {PSNR_PEAK_HU:g})   max |error| {e['max_abs_error_hu']:.4g} HU   "
            f"mean error {e['mean_error_hu']:.3g} HU",
            "    |error| histogram [HU]: "
            + "  ".join(
                f"{_bin_label(lo, hi)} {int(c)}"
                for lo, hi, c in zip(e["bin_edges_hu"][:-1], e["bin_edges_hu"][1:], e["histogram"])
            ),
        ]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (lists, floats; an infinite PSNR or edge becomes None)."""

        def plain(x):
            if isinstance(x, np.ndarray):
                return [plain(y) for y in x.tolist()]
            if isinstance(x, (float, np.floating)):
                return None if not np.isfinite(x) else float(x)
            if isinstance(x, np.integer):
                return int(x)
            return x

        return {
            "size": self.size,
            "voxel_size_mm": VOLUME_SIDE_MM / self.size,
            "n_views": self.n_views,
            "detector_shape": list(self.detector_shape),
            "backend": self.backend,
            "device": self.device,
            "time_s": self.time_s,
            "time_per_projection_s": self.time_per_projection_s,
            "gups": self.gups,
            "includes_transfers": self.includes_transfers,
            "compute_time_s": self.compute_time_s,
            "compute_gups": self.compute_gups,
            "compute_times_s": list(self.compute_times_s),
            "transfer_times_s": None if self.transfer_times_s is None else list(self.transfer_times_s),
            "comparison": self.comparison,
            "reference": self.reference,
            "interpolation": self.interpolation,
            "psnr_peak_hu": PSNR_PEAK_HU,
            "errors": {k: plain(x) for k, x in self.errors.items()},
        }


def _bin_label(lo: float, hi: float) -> str:
    return f"[{lo:g},{hi:g})" if np.isfinite(hi) else f">={lo:g}"


# -- the run ---------------------------------------------------------------------------------


def run_benchmark(
    data: RabbitCTData,
    size: int,
    *,
    backend: str = "auto",
    include_transfers: bool = True,
    repeats: int = 1,
    reference=None,
    compare: str = "auto",
    interpolation: str = "linear",
) -> RabbitCTResult:
    """Reconstruct the L = ``size`` volume by RabbitCT's back-projection, time it and score it.

    Parameters
    ----------
    data : RabbitCTData
        Pre-processed images (n_views, n_rows, n_cols) and matrices, e.g.
        from :func:`read_rabbitct` or :func:`make_dataset`. The matrices are
        used as given (``sum_n q_n(u, v) / w^2``).
    size : int
        Volume edge L; voxel size 256 / L mm, the cube centred at the origin
        (:func:`volume_geometry`).
    backend : {"auto", "cuda", "cpu"}
        Where to back-project (:class:`ConeBackprojection`).
    include_transfers : bool
        On CUDA, also time the run from NumPy images in host memory to a
        NumPy volume; that is then the headline :attr:`RabbitCTResult.time_s`.
        No effect on the CPU.
    repeats : int
        Timed runs per measurement; the minimum is reported.
    reference : ndarray (size, size, size) or None
        uint16 scored units (like the file's) or a float volume in
        attenuation per mm (e.g. :func:`reference_volume`, float64). None:
        the data's reference of this size.
    compare : {"auto", "quantised", "float"}
        "auto": quantised against a uint16 reference, float against a float
        one (module notes). "quantised": both through :func:`hu_from_mu`
        (the reference only if it is a float volume). "float": both through
        the linear map ``hu_scale mu + hu_offset`` (a uint16 reference is
        taken as it is).
    interpolation : {"linear", "linear8", "linear32"}
        As for :class:`ConeBackprojection`: "linear" is exact bilinear on the
        CPU and the texture unit (8-bit weights) on CUDA; "linear8" makes the
        CPU compute what the CUDA kernel computes, to score the GPU's
        arithmetic without a GPU.

    Returns
    -------
    RabbitCTResult

    Raises
    ------
    ValueError
        Naming the argument: ``data`` not a RabbitCTData; ``size`` not a
        positive integer or, without ``reference``, not among the data's
        reference sizes; ``reference`` of the wrong shape or type;
        ``repeats``, ``include_transfers``, ``compare``, ``interpolation`` or
        ``backend`` invalid. RuntimeError: ``backend="cuda"`` without a GPU.
    """
    if not isinstance(data, RabbitCTData):
        raise TypeError(f"data: expected a RabbitCTData, got {type(data).__name__}")
    size = v.positive_int("size", size)
    repeats = v.positive_int("repeats", repeats)
    if not isinstance(include_transfers, (bool, np.bool_)):
        raise ValueError(f"include_transfers: expected True or False, got {include_transfers!r}")
    compare = v.choice("compare", compare, _COMPARISONS)
    ref, ref_is_float, ref_label = _resolve_reference(data, size, reference)
    if compare == "auto":
        compare = "float" if ref_is_float else "quantised"

    op = ConeBackprojection(data_geometry(data), volume_geometry(size), backend=backend, interpolation=interpolation)
    images = _host_images(data)
    if op.backend == "cuda":
        out, compute, transfer, device = _time_cuda(op, images, size, repeats, include_transfers)
    else:
        out, compute, device = _time_cpu(op, images, size, repeats)
        transfer = None

    errors = _score(out, ref, ref_is_float, compare, data.hu_scale, data.hu_offset)
    return RabbitCTResult(
        size=size,
        n_views=data.n_views,
        detector_shape=data.detector_shape,
        backend=op.backend,
        device=device,
        compute_times_s=compute,
        transfer_times_s=transfer,
        comparison=compare,
        reference=ref_label,
        interpolation=op.interpolation,
        errors=errors,
    )


def _resolve_reference(data: RabbitCTData, size: int, reference):
    """(volume, is_float, label) after checking shape and type."""
    if reference is None:
        if size not in data.references:
            raise ValueError(
                f"size: the data hold no reference volume of edge {size} (they hold "
                f"{list(data.reference_sizes) or 'none'}); pass reference=... (e.g. "
                f"leveret.rabbitct.reference_volume(data, {size}))"
            )
        return data.references[size], False, f"the data's uint16 reference {size}^3"
    if not isinstance(reference, np.ndarray):
        raise TypeError(
            f"reference: expected a NumPy array (size, size, size), uint16 or float, got {type(reference).__name__}"
        )
    if reference.shape != (size,) * 3:
        raise ValueError(f"reference: expected shape {(size,) * 3} for size={size}, got {reference.shape}")
    if reference.dtype == np.uint16:
        return reference, False, f"a uint16 reference {size}^3"
    if reference.dtype.kind == "f":
        return reference, True, f"a {reference.dtype} reference {size}^3"
    raise ValueError(
        f"reference: expected uint16 scored units or a float volume (attenuation per mm), got dtype {reference.dtype}"
    )


def _host_images(data: RabbitCTData) -> np.ndarray:
    """All images as one C-contiguous float32 array in memory (read before any clock starts)."""
    p = data.projections
    if isinstance(p, np.ndarray):
        return np.ascontiguousarray(p, dtype=np.float32)
    return np.stack([np.asarray(p[i], dtype=np.float32) for i in range(data.n_views)])


def _time_cpu(op: ConeBackprojection, images: np.ndarray, size: int, repeats: int):
    import numba

    out = np.zeros((size,) * 3, dtype=np.float32)
    op(images[:1], out, views=slice(0, 1))  # warm-up: JIT compilation or cache load
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        op(images, out)
        times.append(time.perf_counter() - t0)
    emulation = ", CUDA texture emulation" if op.interpolation == "linear8" else ""
    return out, tuple(times), f"CPU, {numba.get_num_threads()} threads{emulation}"


def _time_cuda(op: ConeBackprojection, images: np.ndarray, size: int, repeats: int, include_transfers: bool):
    import cupy

    stream = cupy.cuda.get_current_stream()
    d_out = cupy.zeros((size,) * 3, dtype=cupy.float32)
    op(cupy.asarray(images[:1]), d_out, views=slice(0, 1))  # warm-up: module, constants, textures
    stream.synchronize()

    d_images = cupy.asarray(images)
    stream.synchronize()
    compute = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        op(d_images, d_out)
        stream.synchronize()  # kernels are asynchronous: stop the clock when they are done
        compute.append(time.perf_counter() - t0)
    del d_images

    out = None
    transfer = None
    if include_transfers:
        transfer = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            d = cupy.asarray(images)  # pageable host memory -> device
            op(d, d_out)
            out = d_out.get()  # waits for the kernels, then device -> host
            transfer.append(time.perf_counter() - t0)
            del d
        transfer = tuple(transfer)
    if out is None:
        out = d_out.get()
    dev = cupy.cuda.Device()
    name = cupy.cuda.runtime.getDeviceProperties(dev.id)["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    return out, tuple(compute), transfer, f"{name} (GPU {dev.id})"


def _score(
    out: np.ndarray, ref: np.ndarray, ref_is_float: bool, compare: str, hu_scale: float, hu_offset: float
) -> dict[str, Any]:
    """hu_errors of the result against the reference, converted slab by slab (volumes up to 1024^3)."""
    scale, offset = np.float64(hu_scale), np.float64(hu_offset)

    def result_hu(x):
        if compare == "quantised":
            return hu_from_mu(x, hu_scale, hu_offset)
        return scale * x.astype(np.float64) + offset

    def reference_hu(x):
        if not ref_is_float:
            return x  # already scored units (uint16)
        if compare == "quantised":
            return hu_from_mu(x, hu_scale, hu_offset)
        return scale * x.astype(np.float64) + offset

    stats = _ErrorStats(np.array(HISTOGRAM_EDGES))
    for s in _slabs(out.shape):
        x, r = out[s], ref[s]
        if not np.isfinite(x).all():
            # hu_from_mu would score NaN as 0 and hide it; a benchmark must not.
            raise RuntimeError("run_benchmark: the back-projection produced NaN/Inf values")
        if ref_is_float and not np.isfinite(r).all():
            raise ValueError("reference: expected finite values, got NaN/Inf")
        stats.add(result_hu(x), reference_hu(r))
    return stats.result()
