"""One slab of an out-of-core job: which detector rows it needs
(:func:`slab_rows`), their preprocessing (:func:`preprocess_rows`) and its
reconstruction (:func:`reconstruct_slab`).

:func:`reconstruct_slab` is a plain function of (the detector rows a slab
needs, the scan geometry, the volume, the slab's slice range): it
preprocesses those rows (flat/dark, -log), reconstructs the slab with the
public :func:`leveret.fbp` (parallel beam; or an iterative method, slice by
slice: :mod:`leveret.execution.iterate`) or :func:`leveret.fdk` (cone
beam) and returns it. Its arguments are NumPy arrays and geometry objects,
so a distributed scheduler (dask, Ray, a batch queue) can run slabs
anywhere; :func:`slab_rows` says which rows to send.
"""
from __future__ import annotations

import sys
import time

import numpy as np

from ..geometry import ConeGeometry, ParallelGeometry, VolumeGeometry

# -- which rows a slab needs ---------------------------------------------------------------------

def slab_rows(geometry, volume: VolumeGeometry, region: tuple[int, int]):
    """Detector rows ``(r0, r1)`` that slices ``region = (k0, k1)`` of ``volume`` need.

    Parallel beam: the rows at the slices' heights, plus the next row for
    linear interpolation; cone beam: the rows the slab's voxels project to in
    any view, with a row of margin. None when the slab is off the detector
    (its slices are then zero).
    """
    k0, k1 = _region(region, volume)
    slab = volume.slab(k0, k1)
    if isinstance(geometry, ConeGeometry):
        from ..algorithms.fdk_weights import rows_seen
        return rows_seen(geometry, slab)
    if not isinstance(geometry, ParallelGeometry) or geometry.is_2d:
        raise ValueError(f"geometry: expected a 3D ParallelGeometry or a ConeGeometry, got {geometry!r}")
    r = geometry.project_rows(slab.coordinates("z"))
    r0 = max(0, int(np.floor(r.min() + 1e-9)))
    r1 = min(geometry.n_rows, int(np.floor(r.max() + 1e-9)) + 2)
    return (r0, r1) if r1 > r0 else None


def _region(region, volume: VolumeGeometry) -> tuple[int, int]:
    try:
        k0, k1 = (int(k) for k in region)
    except (TypeError, ValueError):
        raise ValueError(f"region: expected a slice range (k0, k1), got {region!r}") from None
    if volume.is_2d or not (0 <= k0 < k1 <= volume.nz):
        raise ValueError(f"region: expected 0 <= k0 < k1 <= {volume.nz if not volume.is_2d else 0} "
                         f"slices of a 3D volume, got {region!r}")
    return k0, k1


def preprocess_rows(raw, rows: tuple[int, int], *, flats=None, darks=None, log_transform: bool = False,
                    min_transmission: float = 1e-6, stripes: str | None = None,
                    stripe_size: int = 5) -> np.ndarray:
    """Detector rows ``raw`` (n_angles, r1 - r0, n_cols) as float32 line integrals
    (NumPy in, NumPy out; CuPy in, CuPy out, the flats and darks then CuPy too).

    With ``flats`` and ``darks`` (full detector images, ``(n_rows, n_cols)`` or
    stacks ``(k, n_rows, n_cols)``, averaged) the rows ``r0:r1`` of them
    normalise ``raw``, then ``-log`` is taken (:func:`leveret.preprocess.minus_log`,
    transmissions clipped at ``min_transmission``); ``log_transform`` alone
    takes ``-log`` of data that are already transmissions. Otherwise ``raw``
    are line integrals, only cast to float32. ``stripes`` (``"sort"`` or
    ``"mean"``, :func:`leveret.preprocess.remove_stripes` with ``stripe_size``)
    then suppresses stripes, sinogram by sinogram: each detector row on its
    own, so slabs give what the whole scan would.
    """
    from .._validate import array_module
    from ..preprocess import minus_log, normalize, remove_stripes

    r0, r1 = rows
    if (flats is None) != (darks is None):
        raise ValueError("flats: give flats and darks together, or neither")
    xp = array_module(raw)
    if flats is not None:
        f = xp.asarray(flats)[..., r0:r1, :]
        d = xp.asarray(darks)[..., r0:r1, :]
        data = normalize(raw, f, d, require_valid=False)   # the whole detector was checked at the start
        minus_log(data, min_transmission=min_transmission, out=data)
    else:
        # -log writes in place: onto a copy, since raw may be the caller's (or a piece retried after an OOM)
        data = xp.asarray(raw).astype(np.float32, copy=log_transform)
        if log_transform:
            minus_log(data, min_transmission=min_transmission, out=data)
    if stripes is not None:
        data = remove_stripes(data, method=stripes, size=stripe_size)
    return data


# -- one slab ------------------------------------------------------------------------------------

def reconstruct_slab(rows_data, geometry, volume: VolumeGeometry, region: tuple[int, int], *,
                     rows: tuple[int, int], flats=None, darks=None, log_transform: bool = False,
                     stripes: str | None = None, stripe_size: int = 5, backend: str = "auto",
                     slab_slices: int | None = None, stats: dict | None = None, **options):
    """Reconstruct slices ``region = (k0, k1)`` of ``volume`` from the detector rows they need.

    Parameters
    ----------
    rows_data : ndarray (n_angles, r1 - r0, n_cols)
        Detector rows ``rows = (r0, r1)`` of every projection, as stored
        (raw counts with ``flats``/``darks``, else line integrals), e.g.
        ``projections[:, r0:r1, :]`` with ``(r0, r1) = slab_rows(...)``.
        NumPy, or CuPy (then the flats and darks too, and the slab is
        reconstructed on that GPU and returned there).
    geometry : ParallelGeometry (3D) or ConeGeometry
        The whole scan (all detector rows).
    volume : VolumeGeometry (3D)
        The whole output volume; the slab is ``volume.slab(k0, k1)``.
    region : (int, int)
        Slices ``k0:k1`` to reconstruct.
    rows : (int, int)
        Which detector rows ``rows_data`` holds.
    flats, darks, log_transform, stripes, stripe_size
        Preprocessing, see :func:`preprocess_rows`.
    backend : {"auto", "cuda", "cpu"}
    slab_slices : int, optional
        Parallel beam: slices per FBP chunk (default: the whole slab).
    stats : dict, optional
        Gets ``"preprocess"`` and ``"reconstruct"``: seconds of each (for
        CuPy data, GPU time between events on the current stream).
    **options
        Passed to :func:`leveret.fbp` (``filter``, ``cutoff``, ``padding``,
        ``interpolation``, ``angle_weights``) or :func:`leveret.fdk`
        (``filter``, ``cutoff``, ``padding``, ``short_scan``, ``interpolation``).
        Parallel beam also takes ``method`` ("fbp", or "sirt", "cgls",
        "fista", "pdhg" with ``iterations``, ``tv``, ``nonnegative`` and
        ``precision``; :func:`leveret.execution.iterate.check`): each slice
        is then its own 2D problem (:mod:`leveret.execution.iterate`).

    Returns
    -------
    ndarray (k1 - k0, ny, nx) float32
        Attenuation per length unit; the same values as the slices
        ``k0:k1`` of a reconstruction of the whole volume. NumPy for NumPy
        rows, CuPy for CuPy rows.
    """
    from .._validate import array_module

    k0, k1 = _region(region, volume)
    clock = _Clock(array_module(rows_data) is not np)
    r0, r1 = (int(r) for r in rows)
    data = preprocess_rows(rows_data, (r0, r1), flats=flats, darks=darks, log_transform=log_transform,
                           stripes=stripes, stripe_size=stripe_size)
    clock.lap("preprocess")
    out = _reconstruct(data, geometry, volume, (k0, k1), (r0, r1), backend, slab_slices, options)
    clock.lap("reconstruct")
    if stats is not None:
        clock.report(stats)
    return out


def _reconstruct(data, geometry, volume, region, rows, backend, slab_slices, options):
    from .._validate import array_module
    from ..algorithms import fbp, fdk

    k0, k1 = region
    r0, r1 = rows
    slab = volume.slab(k0, k1)
    expected = (geometry.n_angles if isinstance(geometry, ParallelGeometry) else geometry.n_views,
                r1 - r0, geometry.n_cols)
    if data.shape != expected:
        raise ValueError(f"rows_data: expected detector rows {r0}:{r1} of every projection, shape "
                         f"{expected}, got shape {data.shape}")
    method = options.pop("method", "fbp")
    iterative = _iterative(method, options) if method != "fbp" else None
    if isinstance(geometry, ConeGeometry):
        if iterative is not None:
            raise ValueError(f"method: {method!r} in cone beam needs the whole volume at once (its slabs are "
                             f"not independent); run leveret.{method} on a Projector of the whole volume")
        out = fdk(data, geometry.crop_rows(r0, r1), slab, backend=backend, **options)
        return array_module(out).asarray(out, dtype=np.float32)
    # Row r' of the cropped detector is row r0 + r' of the full one: its height
    # differs by `offset`, so the slab moves down by it in the cropped frame.
    n = r1 - r0
    offset = (r0 + (n - 1) / 2 - (geometry.n_rows - 1) / 2) * geometry.row_spacing
    sub = geometry.replace(n_rows=n)
    moved = VolumeGeometry(slab.shape, slab.voxel_size, (slab.center[0] - offset,) + tuple(slab.center[1:]))
    if iterative is not None:
        return _iterate_slices(data, sub, moved, backend, iterative, label=f"{k0}:{k1}")
    return fbp(data, sub, moved, backend=backend, slab_slices=slab_slices or slab.nz, **options)


def _iterative(method, options) -> dict:
    """The iterative method's arguments from ``options`` (taken out of it);
    only ``precision`` may be left, as the others are FBP's and FDK's."""
    from .iterate import check

    checked = check(method, options.pop("iterations", None), options.pop("tv", None),
                    options.pop("nonnegative", False))
    checked["precision"] = options.pop("precision", "float32")
    if options:
        name = min(options)
        raise ValueError(f"{name}: applies to fbp and fdk, not to the iterative method {method!r}")
    return checked


def _iterate_slices(data, geometry, volume, backend, iterative, *, label):
    """A parallel-beam slab as one 2D problem per slice (:func:`leveret.execution.iterate.slices`):
    each slice's sinogram is the detector row at its height, as FBP takes it."""
    from .._validate import array_module
    from ..algorithms.parallel_fbp import _gather_rows, _slice_rows
    from .iterate import slices

    lo, frac = _slice_rows(geometry, volume)
    sinograms = _gather_rows(data, lo, frac, (0, volume.nz))
    plane = VolumeGeometry(volume.shape[1:], volume.voxel_size[1:], tuple(volume.center[1:]))
    out = slices(sinograms, geometry.replace(n_rows=None), plane, backend=backend, label=label, **iterative)
    return array_module(out).asarray(out, dtype=np.float32)


class _Clock:
    """Seconds between laps: host time, or GPU time between CUDA events on the
    current stream (read once, at :meth:`report`, when the last one is done)."""

    def __init__(self, gpu: bool):
        self.gpu = gpu
        self.laps: list = [("", self._now())]

    def _now(self):
        if not self.gpu:
            return time.perf_counter()
        import cupy
        event = cupy.cuda.Event()
        event.record()
        return event

    def lap(self, name: str) -> None:
        self.laps.append((name, self._now()))

    def report(self, stats: dict) -> None:
        if self.gpu:
            import cupy
            self.laps[-1][1].synchronize()
        for (_, a), (name, b) in zip(self.laps, self.laps[1:]):
            seconds = cupy.cuda.get_elapsed_time(a, b) * 1e-3 if self.gpu else b - a
            stats[name] = stats.get(name, 0.0) + seconds


def is_gpu_out_of_memory(exc: BaseException) -> bool:
    """True for CuPy's ``cupy.cuda.memory.OutOfMemoryError`` (and its subclasses),
    recognised by name so that no CuPy import is needed."""
    return any(c.__name__ == "OutOfMemoryError" and c.__module__.startswith("cupy")
               for c in type(exc).__mro__)


def _free_gpu_pool() -> None:
    if "cupy" in sys.modules:
        try:
            sys.modules["cupy"].get_default_memory_pool().free_all_blocks()
        except Exception:   # no device, or CuPy half initialised: nothing to free
            pass
