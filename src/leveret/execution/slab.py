"""One slab of an out-of-core job: which detector rows (and, for a helical
scan, which views) it needs (:func:`slab_rows`, :func:`slab_band`), their
preprocessing (:func:`preprocess_rows`) and its reconstruction
(:func:`reconstruct_slab`).

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

import functools
import sys
import time

import numpy as np

from ..geometry import ConeGeometry, ParallelGeometry, ParallelVecGeometry, VolumeGeometry

# -- which rows a slab needs ---------------------------------------------------------------------


def slab_rows(geometry, volume: VolumeGeometry, region: tuple[int, int], *, border: int = 0):
    """Detector rows ``(r0, r1)`` that slices ``region = (k0, k1)`` of ``volume`` need.

    Parallel beam: the rows at the slices' heights, plus the next row for
    linear interpolation; cone beam and laminography: the rows the slab's
    voxels project to in any view (a helical scan: in the views that see it,
    :func:`slab_band`), with a row of margin. ``border`` more rows on each
    side (clipped at the detector's edges) for a step that filters across
    rows (:func:`border_rows`). None when the slab is off the detector (its
    slices are then zero).
    """
    band = slab_band(geometry, volume, region, border=border)
    return None if band is None else band[1]


def slab_band(geometry, volume: VolumeGeometry, region: tuple[int, int], *, border: int = 0):
    """``(views, rows)``: the projections ``(n0, n1)`` and detector rows
    ``(r0, r1)`` that slices ``region = (k0, k1)`` of ``volume`` need
    (``border``: as :func:`slab_rows`); None when the slab is off the
    detector (its slices are then zero).

    Every view, except for a helical scan, whose slab needs only the views
    whose window reaches it (:func:`leveret.algorithms.helical.slab_plan`).
    """
    k0, k1 = _region(region, volume)
    slab = volume.slab(k0, k1)
    if isinstance(geometry, ConeGeometry):
        if is_helical(geometry):
            from ..algorithms.helical import slab_plan

            planned = slab_plan(geometry, volume, (k0, k1))
            return None if planned.rows is None else (planned.views, planned.rows)
        from ..algorithms.fdk_weights import rows_seen

        rows = rows_seen(geometry, slab)
    elif isinstance(geometry, ParallelVecGeometry):
        from ..algorithms.laminography import rows_seen

        rows = rows_seen(geometry, slab)
    elif not isinstance(geometry, ParallelGeometry):
        raise TypeError(
            f"geometry: expected a 3D ParallelGeometry, a ConeGeometry or a ParallelVecGeometry, "
            f"got {type(geometry).__name__}"
        )
    elif geometry.is_2d:
        raise ValueError(
            f"geometry: expected a 3D ParallelGeometry, a ConeGeometry or a ParallelVecGeometry, got {geometry!r}"
        )
    else:
        r = geometry.project_rows(slab.coordinates("z"))
        r0 = max(0, int(np.floor(r.min() + 1e-9)))
        r1 = min(geometry.n_rows, int(np.floor(r.max() + 1e-9)) + 2)
        rows = (r0, r1) if r1 > r0 else None
    if rows is not None and border:
        rows = max(0, rows[0] - int(border)), min(geometry.n_rows, rows[1] + int(border))
    return None if rows is None else ((0, n_views(geometry)), rows)


def n_views(geometry) -> int:
    """The number of projections of a scan geometry."""
    return geometry.n_angles if isinstance(geometry, ParallelGeometry) else geometry.n_views


@functools.lru_cache(maxsize=8)
def _helical(geometry) -> bool:
    from ..algorithms.helical import is_helical as fits

    return fits(geometry)


def is_helical(geometry) -> bool:
    """Whether ``geometry`` is a helical scan (as :func:`leveret.fdk` decides;
    cached per geometry: every slab asks)."""
    return isinstance(geometry, ConeGeometry) and _helical(geometry)


def border_rows(phase: dict | None) -> int:
    """Detector rows of context a slab needs on each side for the phase
    retrieval ``phase`` (the keyword arguments of
    :func:`leveret.preprocess.retrieve_phase`; None: none):
    :func:`leveret.preprocess.phase_border`."""
    if phase is None:
        return 0
    from ..preprocess import phase_border

    return phase_border(**{k: phase[k] for k in ("energy", "distance", "pixel_size", "delta_beta")})


def check_phase(phase) -> dict | None:
    """``phase`` (a dict of :func:`leveret.preprocess.retrieve_phase`'s keyword
    arguments: ``energy``, ``distance``, ``pixel_size``, ``delta_beta``,
    optionally ``method`` and ``width``) checked, or None."""
    if phase is None:
        return None
    if not isinstance(phase, dict):
        raise TypeError(f"phase: expected a dict of retrieve_phase's arguments, got {type(phase).__name__}")
    needed = ("energy", "distance", "pixel_size", "delta_beta")
    missing = [k for k in needed if phase.get(k) is None]
    unknown = sorted(set(phase) - set(needed) - {"method", "width"})
    if missing or unknown:
        raise ValueError(
            "phase: expected energy, distance, pixel_size and delta_beta (and optionally method, "
            "width); " + (f"missing {', '.join(missing)}" if missing else f"unknown {', '.join(unknown)}")
        )
    from .._validate import choice

    choice("method", phase.get("method", "paganin"), ("paganin", "generalized"))
    border_rows(phase)  # each value in its physical range
    return dict(phase)


def stitched_geometry(geometry, half_acquisition):
    """The geometry of the data :func:`leveret.preprocess.half_acquisition` makes of
    a 360-degree scan ``geometry`` with the rotation axis at column
    ``half_acquisition`` (:func:`leveret.preprocess.half_acquisition_layout`);
    ``geometry`` itself for None."""
    if half_acquisition is None:
        return geometry
    from ..preprocess import half_acquisition_layout

    if not isinstance(geometry, ParallelGeometry):
        raise TypeError(f"half_acquisition: stitches parallel-beam scans; got a {type(geometry).__name__}")
    if geometry.axis_shift is not None:
        raise ValueError("half_acquisition: takes a geometry without axis_shift (one axis for every view)")
    try:
        layout = half_acquisition_layout(geometry.angles, geometry.n_cols, half_acquisition)
    except ValueError as exc:
        raise ValueError(f"half_acquisition: {str(exc).partition(': ')[2]}") from None
    return geometry.replace(angles=layout.angles, n_cols=layout.width, center=layout.center)


def _region(region, volume: VolumeGeometry) -> tuple[int, int]:
    try:
        k0, k1 = (int(k) for k in region)
    except (TypeError, ValueError):
        raise ValueError(f"region: expected a slice range (k0, k1), got {region!r}") from None
    if volume.is_2d or not (0 <= k0 < k1 <= volume.nz):
        raise ValueError(
            f"region: expected 0 <= k0 < k1 <= {volume.nz if not volume.is_2d else 0} "
            f"slices of a 3D volume, got {region!r}"
        )
    return k0, k1


def preprocess_rows(
    raw,
    rows: tuple[int, int],
    *,
    flats=None,
    darks=None,
    log_transform: bool = False,
    min_transmission: float = 1e-6,
    stripes: str | None = None,
    stripe_size: int = 5,
    stripe_options: dict | None = None,
    phase: dict | None = None,
    keep: tuple[int, int] | None = None,
) -> np.ndarray:
    """Detector rows ``raw`` (n_angles, r1 - r0, n_cols) as float32 line integrals
    (NumPy in, NumPy out; CuPy in, CuPy out, the flats and darks then CuPy too).

    With ``flats`` and ``darks`` (full detector images, ``(n_rows, n_cols)`` or
    stacks ``(k, n_rows, n_cols)``, averaged) the rows ``r0:r1`` of them
    normalise ``raw``, then ``-log`` is taken (:func:`leveret.preprocess.minus_log`,
    transmissions clipped at ``min_transmission``); ``log_transform`` alone
    takes ``-log`` of data that are already transmissions. Otherwise ``raw``
    are line integrals, only cast to float32. On the GPU, flat/dark and
    ``-log`` of uint16 or float32 counts are one kernel (:mod:`leveret.cuda.correct`).

    ``phase`` (a dict of :func:`leveret.preprocess.retrieve_phase`'s keyword
    arguments: ``energy``, ``distance``, ``pixel_size``, ``delta_beta``,
    optionally ``method``, ``width``) retrieves the phase from the
    transmissions instead of ``-log`` (it returns line integrals itself);
    it needs transmissions (``flats`` and ``darks``, or ``log_transform``).
    Each projection is filtered over its rows, so ``raw`` should hold
    :func:`border_rows` rows of context each side of the rows wanted; ``keep
    = (k0, k1)`` (absolute detector rows, within ``rows``) returns only those.

    ``stripes`` (``"sort"``, ``"mean"``, ``"all"`` or ``"wavelet-fft"``,
    :func:`leveret.preprocess.remove_stripes` with ``size=stripe_size`` and
    ``stripe_options``, e.g. ``snr``, ``large_size``, ``wavelet``,
    ``level``, ``sigma``) then suppresses stripes, sinogram by sinogram:
    each detector row on its own, so slabs give what the whole scan would.
    ``raw`` is never written to.
    """
    from .._validate import array_module
    from ..preprocess import minus_log, normalize, remove_stripes, retrieve_phase

    r0, r1 = rows
    if (flats is None) != (darks is None):
        raise ValueError("flats: give flats and darks together, or neither")
    xp = array_module(raw)
    if flats is not None:
        f = xp.asarray(flats)[..., r0:r1, :]
        d = xp.asarray(darks)[..., r0:r1, :]
        if xp is not np and phase is None and np.dtype(raw.dtype) in (np.uint16, np.float32):
            data = _line_integrals_gpu(raw, f, d, min_transmission)  # flat/dark and -log in one pass
            transmission = False
        else:
            data = normalize(raw, f, d, require_valid=False)  # the whole detector was checked at the start
            transmission = True
    else:
        data = xp.asarray(raw)
        transmission = log_transform
        # -log and the phase retrieval write in place: into a copy, never into the caller's rows (the
        # input itself, or rows that the pieces of a slab retried in halves share)
        data = data.astype(np.float32, copy=transmission)
    if phase is not None:
        if not transmission:
            raise ValueError(
                "phase: phase retrieval takes transmissions: give flats and darks, or "
                "log_transform=True for data that are transmissions already"
            )
        retrieve_phase(data, min_transmission=min_transmission, out=data, **phase)
    elif transmission:
        minus_log(data, min_transmission=min_transmission, out=data)
    if keep is not None and tuple(keep) != (r0, r1):
        k0, k1 = (int(k) for k in keep)
        if not r0 <= k0 < k1 <= r1:
            raise ValueError(f"keep: expected rows within {r0}:{r1}, got {k0}:{k1}")
        data = xp.ascontiguousarray(data[:, k0 - r0 : k1 - r0])
    if stripes is not None:
        data = remove_stripes(data, method=stripes, size=stripe_size, **(stripe_options or {}))
    return data


def _line_integrals_gpu(raw, flats, darks, min_transmission: float):
    """``minus_log(normalize(raw, flats, darks))`` of CuPy counts (uint16 or float32)
    in one kernel (:mod:`leveret.cuda.correct`): the same float32 operations in the
    same order, one pass over the rows instead of seven and no wait on the host."""
    import cupy

    from .._validate import positive_float
    from ..cuda.correct import correct
    from ..preprocess._common import average_fields

    shape = raw.shape[1:]
    dark = average_fields("darks", darks, shape, cupy)
    denom = average_fields("flats", flats, shape, cupy) - dark  # <= 0 or NaN: a dead pixel, as normalize has it
    out = cupy.empty(raw.shape, cupy.float32)
    counts = cupy.empty(raw.shape[0], cupy.int32)  # non-finite results: fbp's own check finds them
    correct(
        cupy.ascontiguousarray(raw),
        cupy.ascontiguousarray(dark),
        denom,
        out,
        counts,
        normalize=True,
        minus_log=True,
        min_transmission=positive_float("min_transmission", min_transmission),
    )
    return out


# -- one slab ------------------------------------------------------------------------------------


def reconstruct_slab(
    rows_data,
    geometry,
    volume: VolumeGeometry,
    region: tuple[int, int],
    *,
    rows: tuple[int, int],
    flats=None,
    darks=None,
    log_transform: bool = False,
    stripes: str | None = None,
    stripe_size: int = 5,
    stripe_options: dict | None = None,
    phase: dict | None = None,
    half_acquisition: float | None = None,
    backend: str = "auto",
    slab_slices: int | None = None,
    stats: dict | None = None,
    views=None,
    **options,
):
    """Reconstruct slices ``region = (k0, k1)`` of ``volume`` from the detector rows they need.

    Parameters
    ----------
    rows_data : ndarray (n1 - n0, r1 - r0, n_cols)
        Detector rows ``rows = (r0, r1)`` of projections ``views = (n0, n1)``,
        as stored (raw counts with ``flats``/``darks``, else line integrals),
        e.g. ``projections[n0:n1, r0:r1, :]`` with ``((n0, n1), (r0, r1)) =
        slab_band(...)``.
        NumPy, or CuPy (then the flats and darks too, and the slab is
        reconstructed on that GPU and returned there).
    geometry : ParallelGeometry (3D), ConeGeometry or ParallelVecGeometry
        The whole scan (all views and detector rows).
    volume : VolumeGeometry (3D)
        The whole output volume; the slab is ``volume.slab(k0, k1)``.
    region : (int, int)
        Slices ``k0:k1`` to reconstruct.
    rows : (int, int)
        Which detector rows ``rows_data`` holds.
    flats, darks, log_transform, stripes, stripe_size, stripe_options, phase
        Preprocessing, see :func:`preprocess_rows`. With ``phase``,
        ``rows_data`` may hold :func:`border_rows` rows of context each side
        of the slab's own (``slab_rows(..., border=border_rows(phase))``):
        they are filtered with the rest and dropped after.
    half_acquisition : float, optional
        A 360-degree scan with the rotation axis at this column, near one
        edge of the detector: each row's sinogram is stitched
        (:func:`leveret.preprocess.half_acquisition`) and reconstructed with
        the stitched geometry (:func:`stitched_geometry`); ``volume`` is in
        that geometry's frame (its ``default_volume()`` covers the whole field).
    views : (int, int), optional
        Which projections ``rows_data`` holds (default: all). Fewer only for
        a helical scan: at least the views :func:`slab_band` names.
    backend : {"auto", "cuda", "cpu"}
    slab_slices : int, optional
        Parallel beam: slices per FBP chunk (default: the whole slab).
    stats : dict, optional
        Gets ``"preprocess"`` and ``"reconstruct"``: seconds of each (for
        CuPy data, GPU time between events on the current stream).
    **options
        Passed to :func:`leveret.fbp` (``filter``, ``cutoff``, ``padding``,
        ``interpolation``, ``angle_weights``), :func:`leveret.fdk`
        (``filter``, ``cutoff``, ``padding``, ``short_scan``, ``interpolation``),
        :func:`leveret.algorithms.helical.fdk_slab` or :func:`leveret.laminography_fbp`,
        and ``method``: "fbp" (the default: :func:`leveret.fbp` for a
        ``ParallelGeometry``, :func:`leveret.fdk` for a ``ConeGeometry``, the
        slab of :func:`leveret.helical_fdk` for a helix,
        :func:`leveret.laminography_fbp` for a ``ParallelVecGeometry``);
        "laminography": :func:`leveret.laminography_fbp` of a cone-beam
        laminography scan (``ConeGeometry.laminography``); in parallel beam
        "sirt", "cgls", "fista", "pdhg" with ``iterations``, ``tv``,
        ``nonnegative`` and ``precision`` (:func:`leveret.execution.iterate.check`):
        each slice is then its own 2D problem (:mod:`leveret.execution.iterate`).

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
    _check_rows(rows_data, geometry, (r0, r1), _views(views, geometry))
    keep = None
    if phase is not None:  # the slab's own rows, once the filter across rows is done
        own = slab_rows(geometry, volume, (k0, k1))
        keep = (max(r0, own[0]), min(r1, own[1])) if own is not None else (r0, r1)
    data = preprocess_rows(
        rows_data,
        (r0, r1),
        flats=flats,
        darks=darks,
        log_transform=log_transform,
        stripes=stripes,
        stripe_size=stripe_size,
        stripe_options=stripe_options,
        phase=phase,
        keep=keep,
    )
    if keep is not None:
        r0, r1 = keep
    target = geometry
    if half_acquisition is not None:
        from ..preprocess import half_acquisition as stitch

        target = stitched_geometry(geometry, half_acquisition)
        data = stitch(data, geometry.angles, half_acquisition).projections
    clock.lap("preprocess")
    # stitched data hold every view of the stitched geometry (a helix, the only scan read in part, is never stitched)
    out = _reconstruct(
        data,
        target,
        volume,
        (k0, k1),
        (r0, r1),
        backend,
        slab_slices,
        options,
        _views(None if half_acquisition is not None else views, target),
    )
    clock.lap("reconstruct")
    if stats is not None:
        clock.report(stats)
    return out


def _views(views, geometry) -> tuple[int, int]:
    total = n_views(geometry)
    if views is None:
        return 0, total
    try:
        n0, n1 = (int(n) for n in views)
    except (TypeError, ValueError):
        raise ValueError(f"views: expected a range of projections (n0, n1), got {views!r}") from None
    if not 0 <= n0 < n1 <= total:
        raise ValueError(f"views: expected 0 <= n0 < n1 <= {total}, got {views!r}")
    return n0, n1


def _reconstruct(data, geometry, volume, region, rows, backend, slab_slices, options, views):
    from .._validate import array_module
    from ..algorithms import fbp, fdk, laminography_fbp

    k0, k1 = region
    r0, r1 = rows
    n0, n1 = views
    slab = volume.slab(k0, k1)
    _check_rows(data, geometry, rows, views)  # the preprocessed rows: kept, or stitched for ``geometry``
    method = options.pop("method", "fbp")
    from .iterate import METHODS

    if method not in METHODS + ("laminography",):
        raise ValueError(f"method: expected one of {', '.join(METHODS + ('laminography',))}, got {method!r}")
    iterative = _iterative(method, options) if method not in ("fbp", "laminography") else None
    helical = is_helical(geometry)
    if (n0, n1) != (0, n_views(geometry)) and not helical:
        raise ValueError(f"views: a slab of this scan needs every projection, got {n0}:{n1}")
    tilted = method == "laminography" or isinstance(geometry, ParallelVecGeometry)
    if iterative is not None and (helical or tilted):
        raise ValueError(
            f"method: {method!r} slab by slab is for parallel beam; this scan's slabs are not "
            f"independent: run leveret.{method} on a Projector of the whole volume"
        )
    if helical:
        from ..algorithms.helical import HelicalSlab, fdk_slab

        out = fdk_slab(data, geometry, volume, HelicalSlab((k0, k1), (n0, n1), (r0, r1)), backend=backend, **options)
        return array_module(out).asarray(out, dtype=np.float32)
    if tilted:
        out = laminography_fbp(data, geometry.crop_rows(r0, r1), slab, backend=backend, **options)
        return array_module(out).asarray(out, dtype=np.float32)
    if isinstance(geometry, ConeGeometry):
        if iterative is not None:
            raise ValueError(
                f"method: {method!r} in cone beam needs the whole volume at once (its slabs are "
                f"not independent); run leveret.{method} on a Projector of the whole volume"
            )
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

    checked = check(method, options.pop("iterations", None), options.pop("tv", None), options.pop("nonnegative", False))
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


def _check_rows(data, geometry, rows, views) -> None:
    r0, r1 = rows
    n0, n1 = views
    expected = (n1 - n0, r1 - r0, geometry.n_cols)
    if tuple(data.shape) != expected:
        raise ValueError(
            f"rows_data: expected detector rows {r0}:{r1} of projections {n0}:{n1}, shape "
            f"{expected}, got shape {tuple(data.shape)}"
        )


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
    return any(c.__name__ == "OutOfMemoryError" and c.__module__.startswith("cupy") for c in type(exc).__mro__)


def _free_gpu_pool() -> None:
    if "cupy" in sys.modules:
        try:
            sys.modules["cupy"].get_default_memory_pool().free_all_blocks()
        except Exception:  # no device, or CuPy half initialised: nothing to free
            pass
