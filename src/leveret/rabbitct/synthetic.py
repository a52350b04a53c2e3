"""A synthetic RabbitCT dataset: an analytic head, scanned and pre-processed as RabbitCT ships it.

The real RabbitCT file (a rabbit on a C-arm, Rohkohl et al. 2009) cannot be
redistributed here; :func:`make_dataset` builds a stand-in with the same
layout and meaning, at any size from a few views of a few pixels (tests) to
the real 496 views of 1248 x 960 pixels (benchmarks):

- **geometry** (:func:`make_geometry`): a short-scan circle about z with
  RabbitCT's distances (source-isocentre 750 mm, source-detector 1200 mm),
  step (0.4 deg, 496 views = 198.4 deg) and detector (1248 x 960 pixels of
  0.308 mm), plus small random per-view rigid motions of the source-detector
  assembly, so nothing downstream may assume a perfect circle. The matrices
  are normalised (w = 1 at the origin: :meth:`ConeGeometry.normalised`), so
  ``1 / w**2`` is FDK's distance weight, as RabbitCT scales its matrices.
- **object** (:func:`head_phantom`): the 3D Shepp-Logan head, 100 mm
  "radius", values in attenuation per mm with brain at water (~0.02 / mm).
- **projections**: exact line integrals of the head
  (:meth:`EllipsoidPhantom.project`, closed form, view by view), then
  pre-processed exactly as :func:`leveret.fdk` does it (its own weighting
  functions): cosine weights, angular step x Parker short-scan weights, 1 /
  (isocentre pitch), ramp filter along rows. RabbitCT's back-projection
  ``sum_n q_n(u, v) / w^2`` of these images *is* the FDK reconstruction in
  attenuation per mm.
- **references**: for each requested edge L, the float64 CPU back-projection
  of the shipped (float32) images over the 256 mm cube
  (:func:`reference_volume`), stored in the file's uint16 scored units
  (:func:`scored_reference`, i.e. :func:`hu_from_mu`).

Scored units (:data:`HU_SCALE`, :data:`HU_OFFSET`): ``1000 mu / mu_water``,
i.e. HU + 1000, with ``mu_water`` = :data:`MU_WATER` = 0.02 / mm: air 0,
water 1000, the head's skull 2000, the cap 4095 = 3095 HU. The offset is 0 so
that ``hu_from_mu`` is continuous at mu = 0 (it sends mu <= 0 to 0): with a
nonzero offset, float32 and float64 values of either sign around 0 (FDK's
ripple in the air) would score as errors of the size of the offset.
"""

from __future__ import annotations

import math
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import MutableMapping, Sequence

import numpy as np

from .. import _validate as v
from ..algorithms.fdk_weights import FDKWeighting
from ..backends import resolve
from ..filters import FILTERS
from ..geometry import ConeGeometry
from ..operators.cone import ConeBackprojection
from ..phantom import Ellipsoid, EllipsoidPhantom, shepp_logan_3d
from ..phantom._common import as_rng
from .fileformat import VOLUME_SIDE_MM, RabbitCTData, hu_from_mu
from .runner import data_geometry, volume_geometry

__all__ = [
    "HEAD_RADIUS_MM",
    "HU_OFFSET",
    "HU_SCALE",
    "MU_WATER",
    "RABBITCT_ARC_DEG",
    "RABBITCT_PIXEL_SIZE_MM",
    "default_pixel_size",
    "head_phantom",
    "make_dataset",
    "make_geometry",
    "reference_volume",
    "scored_reference",
]

#: Linear attenuation of water, 1/mm (about 70 keV); the head's brain and the HU scale use it.
MU_WATER = 0.02
#: Scored units = HU + 1000 = 1000 mu / mu_water (see the module notes for the zero offset).
HU_SCALE = 1000.0 / MU_WATER
HU_OFFSET = 0.0
#: RabbitCT's detector pitch (mm) at 1248 x 960 pixels, and the arc of its 496 views of 0.4 deg.
RABBITCT_PIXEL_SIZE_MM = 0.308
RABBITCT_ARC_DEG = 496 * 0.4
_RABBITCT_DETECTOR = (960, 1248)  # (n_rows, n_cols)
#: Length scale of the default head (shepp_logan_3d's radius): skull semi-axes 69 x 92 x 81 mm.
HEAD_RADIUS_MM = 100.0
# Standard deviations of the per-view rigid motion at perturbation_scale = 1: a
# C-arm deviates from its circle by tenths of a millimetre and tenths of a
# milliradian (0.25 mrad moves the source by 0.19 mm at 750 mm); at 0.308 mm
# pixels the head's points land about 2 pixels (at most ~6) from the circle's.
_SHIFT_SD_MM = 0.25
_TILT_SD_RAD = 0.25e-3
# rng=None gives this seed: a benchmark dataset must be the same on every machine.
_DEFAULT_SEED = 20090901
# The cube's half diagonal in the xy plane: every source must stay farther out than this.
_CUBE_HALF_DIAGONAL_MM = VOLUME_SIDE_MM / 2 * math.sqrt(2)


# -- geometry ------------------------------------------------------------------------------


def default_pixel_size(n_rows: int, n_cols: int) -> float:
    """Square detector pitch (mm) giving at least RabbitCT's detector field.

    RabbitCT's detector is 1248 x 960 pixels of 0.308 mm: 384.4 x 295.7 mm.
    A detector of ``n_rows x n_cols`` gets the pitch that spans at least that
    field in both directions, ``max(384.4 / n_cols, 295.7 / n_rows)``: 0.308
    at the real size, coarser for the small detectors of tests, so the field
    of view (and the short scan's fan angle) stays the same.

    Notes
    -----
    At sid = 750 mm and sdd = 1200 mm this field sees a cylinder of radius
    118.5 mm about z, +-92 mm high at the axis: the head (:func:`head_phantom`)
    fits inside, but the corners of the 256 mm cube (181 mm from the axis) do
    not, as in RabbitCT. Its fan angle, 2 atan(192.2 / 1200) = 18.2 deg, is
    what the 198.4 deg arc adds to 180 deg: RabbitCT's scan is a minimal short
    scan for this detector. A detector covering the whole cube would need a
    pitch of 0.5625 mm (limited by the rows) and a 28 deg fan, more than the
    arc allows for Parker weighting.
    """
    n_rows = v.positive_int("n_rows", n_rows)
    n_cols = v.positive_int("n_cols", n_cols)
    rows, cols = _RABBITCT_DETECTOR
    return RABBITCT_PIXEL_SIZE_MM * max(cols / n_cols, rows / n_rows)


def make_geometry(
    *,
    n_views: int = 496,
    n_rows: int = 960,
    n_cols: int = 1248,
    pixel_size: float | None = None,
    sid: float = 750.0,
    sdd: float = 1200.0,
    step_deg: float | None = None,
    perturbation_scale: float = 1.0,
    rng=None,
) -> ConeGeometry:
    """RabbitCT-like short-scan geometry with small random per-view deviations.

    Parameters
    ----------
    n_views, n_rows, n_cols : int
        Projection count and detector size (RabbitCT: 496, 960, 1248).
    pixel_size : float or None
        Square detector pitch, mm. None: :func:`default_pixel_size` (0.308 mm
        at the real size).
    sid, sdd : float
        Source-isocentre and source-detector distances, mm. ``sid`` must
        exceed the cube's half diagonal (181 mm) so every voxel is in front
        of every source.
    step_deg : float or None
        Angular step, degrees. None: RabbitCT's 198.4 deg arc over ``n_views``
        (0.4 deg at 496 views), so a short scan at any view count.
    perturbation_scale : float
        Size of the per-view rigid motion of the source-detector assembly
        (``ConeGeometry.circular(perturbation=...)``), independent normal
        draws: shifts along x, y, z with standard deviation 0.25 mm x scale,
        rotations about x, y, z with 0.25 mrad x scale. 0: a perfect circle.
    rng : numpy.random.Generator, int or None
        Source of the perturbations. None: a fixed seed, so the default
        dataset is the same everywhere.

    Returns
    -------
    ConeGeometry
        Normalised (w = 1 at the world origin), angles ``step * n``
        (radians) recorded, ``pixel_size`` recorded.
    """
    n_views = v.positive_int("n_views", n_views)
    n_rows = v.positive_int("n_rows", n_rows)
    n_cols = v.positive_int("n_cols", n_cols)
    pitch = default_pixel_size(n_rows, n_cols) if pixel_size is None else v.positive_float("pixel_size", pixel_size)
    sid = v.positive_float("sid", sid)
    if sid <= _CUBE_HALF_DIAGONAL_MM:
        raise ValueError(
            f"sid: expected more than {_CUBE_HALF_DIAGONAL_MM:.1f} mm (the 256 mm cube's "
            f"half diagonal), so the volume is in front of every source; got {sid:g}"
        )
    sdd = v.positive_float("sdd", sdd)
    step = RABBITCT_ARC_DEG / n_views if step_deg is None else v.positive_float("step_deg", step_deg)
    scale = v.finite_float("perturbation_scale", perturbation_scale)
    if scale < 0:
        raise ValueError(f"perturbation_scale: expected a value >= 0, got {perturbation_scale!r}")
    gen = as_rng(_DEFAULT_SEED if rng is None else rng)
    perturbation = None
    if scale > 0:
        perturbation = np.hstack(
            [gen.normal(0.0, _SHIFT_SD_MM * scale, (n_views, 3)), gen.normal(0.0, _TILT_SD_RAD * scale, (n_views, 3))]
        )
    angles = np.radians(step * np.arange(n_views))
    geometry = ConeGeometry.circular(angles, sid, sdd, n_rows, n_cols, pitch, perturbation=perturbation)
    # circular() already normalises; say so here, since the file's matrices depend on it.
    return geometry.normalised()


# -- the object ------------------------------------------------------------------------------


def head_phantom(radius: float = HEAD_RADIUS_MM, mu_water: float = MU_WATER) -> EllipsoidPhantom:
    """The 3D Shepp-Logan head in attenuation per mm.

    :func:`leveret.phantom.shepp_logan_3d` with the original (not Toft's
    modified) values, times ``mu_water``: the original table is in units of
    water, so brain (1.02) is 20 HU, the ventricles (1.00) water, the small
    features 30-40 HU and the skull (2.0) 1000 HU, a plausible head.

    Parameters
    ----------
    radius : float
        Length scale, mm; the skull's semi-axes are (0.69, 0.92, 0.81) x
        radius. The default 100 mm fits well inside the 256 mm cube and inside
        the field of view of RabbitCT's detector (:func:`default_pixel_size`).
    mu_water : float
        Attenuation of water, 1/mm.

    Returns
    -------
    EllipsoidPhantom
        Ten ellipsoids centred on z = 0.
    """
    mu = v.positive_float("mu_water", mu_water)
    head = shepp_logan_3d(radius, modified=False)
    return EllipsoidPhantom(Ellipsoid(e.value * mu, e.semi_axes, e.center, e.rotation) for e in head)


# -- pre-processing -------------------------------------------------------------------------

# -- the dataset -----------------------------------------------------------------------------


def make_dataset(
    *,
    n_views: int = 496,
    n_rows: int = 960,
    n_cols: int = 1248,
    pixel_size: float | None = None,
    sid: float = 750.0,
    sdd: float = 1200.0,
    step_deg: float | None = None,
    perturbation_scale: float = 1.0,
    phantom: EllipsoidPhantom | None = None,
    reference_sizes: Sequence[int] = (),
    hu_scale: float = HU_SCALE,
    hu_offset: float = HU_OFFSET,
    rng=None,
    progress: bool = False,
    backend: str = "auto",
    filter: str = "ram-lak",
    cache: MutableMapping[int, np.ndarray] | None = None,
    workers: int | None = None,
) -> RabbitCTData:
    """A RabbitCT dataset of an analytic head, pre-processed as RabbitCT ships its images.

    Parameters
    ----------
    n_views, n_rows, n_cols, pixel_size, sid, sdd, step_deg, perturbation_scale, rng
        The scan, see :func:`make_geometry` (defaults: RabbitCT's, with
        0.25 mm / 0.25 mrad per-view deviations from a fixed seed).
    phantom : EllipsoidPhantom or None
        The object, attenuation per mm; None: :func:`head_phantom`. A warning
        is issued when its shadow reaches the detector border (truncated
        projections).
    reference_sizes : sequence of int
        Edges L of the reference volumes to compute and store, e.g.
        ``(128, 256)``; as the file needs, L0, 2 L0, 4 L0, ...
    hu_scale, hu_offset : float
        The file's scored units, ``hu_scale * mu + hu_offset``
        (:func:`hu_from_mu`); default HU + 1000 (module notes). Every scored
        value must fit the uint16 references: ``hu_scale > 0`` and
        ``hu_offset >= -0.5``.
    progress : bool
        tqdm bars for the projections and the references.
    backend : {"auto", "cuda", "cpu"}
        Where the weighting and ramp filtering run (float64 either way). The
        line integrals always run on the CPU (threads, view by view) and the
        references on the CPU in float64 (:func:`reference_volume`).
    filter : str
        Ramp window, as for :func:`leveret.fdk` (default "ram-lak").
    cache : mutable mapping {int: ndarray} or None
        Receives the float64 reference volumes ``{L: (L, L, L)}`` (the file
        keeps only their uint16 form); pass them on as
        ``run_benchmark(data, L, reference=cache[L])``.
    workers : int or None
        Threads for the line integrals (None: all cores, at most 32).

    Returns
    -------
    RabbitCTData
        ``matrices`` (n_views, 3, 4) normalised; ``projections``
        (n_views, n_rows, n_cols) float32 in memory, filtered; ``hu_scale``,
        ``hu_offset``; ``references`` {L: (L, L, L) uint16}.

    Notes
    -----
    Cost at the real size: 594 M rays through 10 ellipsoids, about 1.4 s a
    view on one core, 45 s for all on 16 cores; then each reference, L^3 x 496
    float64 voxel updates: 5 s (L = 128), 17 s (256), 104 s (512) on 16 cores,
    about 8 times as long again for 1024. Memory: the float32 projections
    (2.4 GB), a few views in flight, and the float64 references (8 L^3 bytes).
    """
    geometry = make_geometry(
        n_views=n_views,
        n_rows=n_rows,
        n_cols=n_cols,
        pixel_size=pixel_size,
        sid=sid,
        sdd=sdd,
        step_deg=step_deg,
        perturbation_scale=perturbation_scale,
        rng=rng,
    )
    if phantom is None:
        phantom = head_phantom()
    elif not isinstance(phantom, EllipsoidPhantom):
        raise TypeError(f"phantom: expected an EllipsoidPhantom, got {type(phantom).__name__}")
    hu_scale = v.finite_float("hu_scale", hu_scale)
    hu_offset = v.finite_float("hu_offset", hu_offset)
    if hu_scale <= 0:
        raise ValueError(
            f"hu_scale: expected a positive slope (the uint16 references cannot hold negative scores), got {hu_scale!r}"
        )
    if hu_offset < -0.5:
        raise ValueError(
            f"hu_offset: expected >= -0.5 (so every mu > 0 scores >= 0 and fits the uint16 "
            f"references), got {hu_offset!r}"
        )
    sizes = _reference_sizes(reference_sizes)
    v.choice("filter", filter, FILTERS)
    if cache is not None and not isinstance(cache, MutableMapping):
        raise TypeError(f"cache: expected a mutable mapping (e.g. a dict) or None, got {type(cache).__name__}")
    if workers is None:
        workers = min(32, os.cpu_count() or 1)
    workers = v.positive_int("workers", workers)

    projections = _shipped_projections(phantom, geometry, resolve(backend), filter, workers, progress)
    data = RabbitCTData(geometry.matrices, projections, hu_scale=hu_scale, hu_offset=hu_offset)
    references = {}
    for L in sizes:
        mu = reference_volume(data, L, progress=progress)
        if cache is not None:
            cache[L] = mu
        references[L] = scored_reference(mu, data.hu_scale, data.hu_offset)
    return RabbitCTData(
        data.matrices, projections, hu_scale=data.hu_scale, hu_offset=data.hu_offset, references=references
    )


def _reference_sizes(sizes) -> tuple[int, ...]:
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
        raise TypeError(f"reference_sizes: expected a sequence of volume edges, got {sizes!r}")
    out = sorted({v.positive_int(f"reference_sizes[{i}]", L) for i, L in enumerate(sizes)})
    for a, b in zip(out, out[1:]):
        if b != 2 * a:
            # The file stores no sizes: only L0, 2 L0, 4 L0, ... can be read back.
            raise ValueError(
                f"reference_sizes: expected L0, 2 L0, 4 L0, ... (the file does not store the sizes), got {tuple(out)}"
            )
    return tuple(out)


def _shipped_projections(
    phantom: EllipsoidPhantom, geometry: ConeGeometry, backend: str, filter: str, workers: int, progress: bool
) -> np.ndarray:
    """Exact line integrals, view by view on ``workers`` threads, weighted and filtered in chunks."""
    n, n_rows, n_cols = geometry.projection_shape
    if backend == "cuda":
        import cupy as xp
    else:
        xp = np
    weighting = FDKWeighting(geometry, filter=filter)
    out = np.empty((n, n_rows, n_cols), dtype=np.float32)
    chunk = 2 * workers  # views in flight: the pool computes chunk c+1 while chunk c is filtered
    chunks = [slice(a, min(n, a + chunk)) for a in range(0, n, chunk)]
    truncated = []

    def line_integrals(view: int) -> np.ndarray:
        one_view = ConeGeometry(geometry.matrices[view : view + 1], n_rows, n_cols)
        return phantom.project(one_view)[0]

    from tqdm.auto import tqdm

    with (
        ThreadPoolExecutor(workers, thread_name_prefix="leveret-rabbit") as pool,
        tqdm(total=n, desc="projections", unit="view", disable=not progress, leave=False) as bar,
    ):
        pending = [pool.submit(line_integrals, i) for i in range(chunks[0].start, chunks[0].stop)]
        for c, views in enumerate(chunks):
            raw = np.stack([f.result() for f in pending])
            if c + 1 < len(chunks):
                nxt = chunks[c + 1]
                pending = [pool.submit(line_integrals, i) for i in range(nxt.start, nxt.stop)]
            # Off the shadow the chord formula gives exactly 0: anything on the border is truncation.
            border = np.maximum(
                np.abs(raw[:, [0, -1], :]).max(axis=(1, 2)), np.abs(raw[:, :, [0, -1]]).max(axis=(1, 2))
            )
            truncated.extend(views.start + np.flatnonzero(border > 0))
            filtered = weighting(xp.asarray(raw), views)
            out[views] = filtered.get() if xp is not np else filtered
            bar.update(views.stop - views.start)
    if truncated:
        warnings.warn(
            f"phantom: its shadow reaches the detector border in {len(truncated)} of {n} views "
            f"(first: view {truncated[0]}); the projections are truncated",
            RuntimeWarning,
            stacklevel=3,
        )
    return out


# -- references -------------------------------------------------------------------------------


def reference_volume(
    data: RabbitCTData,
    size: int,
    *,
    backend: str = "cpu",
    cache: MutableMapping[int, np.ndarray] | None = None,
    progress: bool = False,
) -> np.ndarray:
    """The benchmark's float64 reference: RabbitCT's back-projection of the data, exactly.

    ``out[k, j, i] = sum_n q_n(u, v) / w^2`` with the data's matrices as
    given, RabbitCT's floor-based bilinear interpolation (zero off the
    detector) and the float32 images read as float64, in float64 arithmetic
    (:class:`leveret.operators.ConeBackprojection` on the CPU). Voxel
    ``[k, j, i]`` sits at ``O + R (i, j, k)`` mm with ``R = 256 / size``,
    ``O = -R (size - 1) / 2`` (:func:`leveret.rabbitct.volume_geometry`).

    Parameters
    ----------
    data : RabbitCTData
        Matrices and pre-processed images (any file, not only synthetic ones).
    size : int
        Volume edge L (voxels).
    backend : {"cpu"}
        Only the CPU back-projection works in float64; anything else is an
        error (the CUDA kernel is float32 with 8-bit interpolation weights,
        which is what the reference is there to measure).
    cache : mutable mapping {int: ndarray} or None
        Looked up first (``cache[size]``) and filled after computing. One
        cache per dataset: entries are keyed by size only.
    progress : bool
        tqdm bar over view chunks.

    Returns
    -------
    ndarray, float64, (size, size, size), read-only
        Attenuation per mm, C order (z, y, x), x fastest.
    """
    if not isinstance(data, RabbitCTData):
        raise TypeError(f"data: expected a RabbitCTData, got {type(data).__name__}")
    size = v.positive_int("size", size)
    if not isinstance(backend, str) or backend.lower() != "cpu":
        raise ValueError(
            f"backend: expected 'cpu' (the float64 reference needs the CPU "
            f"back-projection; CUDA runs float32), got {backend!r}"
        )
    if cache is not None:
        if not isinstance(cache, MutableMapping):
            raise TypeError(f"cache: expected a mutable mapping (e.g. a dict) or None, got {type(cache).__name__}")
        if size in cache:
            return cache[size]
    op = ConeBackprojection(data_geometry(data), volume_geometry(size), backend="cpu")
    out = np.zeros((size,) * 3, dtype=np.float64)
    n = data.n_views
    chunk = max(1, min(n, int(128e6 // (8 * np.prod(data.detector_shape)))))  # ~128 MB of float64 views
    from tqdm.auto import tqdm

    for a in tqdm(range(0, n, chunk), desc=f"reference {size}^3", unit="chunk", disable=not progress, leave=False):
        views = slice(a, min(n, a + chunk))
        images = np.asarray(
            data.projections[views]
            if isinstance(data.projections, np.ndarray)
            else np.stack([np.asarray(data.projections[i]) for i in range(a, views.stop)]),
            dtype=np.float64,
        )
        op(images, out, views=views, accumulate=True)
    out.setflags(write=False)  # it may be shared through the cache
    if cache is not None:
        cache[size] = out
    return out


def scored_reference(mu, hu_scale: float, hu_offset: float) -> np.ndarray:
    """A reference volume in the file's units: :func:`hu_from_mu` as uint16.

    Parameters
    ----------
    mu : array_like
        Reconstructed values, attenuation per mm (e.g. :func:`reference_volume`).
    hu_scale, hu_offset : float
        The file header's slope and intercept.

    Returns
    -------
    ndarray, uint16, shape of ``mu``
        ``hu_from_mu(mu)`` exactly (whole numbers in 0..4095).

    Raises
    ------
    ValueError
        Naming ``hu_offset`` when some value scores below 0, which uint16
        cannot hold (a negative offset).
    """
    hu = hu_from_mu(mu, hu_scale, hu_offset)
    if hu.size and float(hu.min()) < 0:
        raise ValueError(
            f"hu_offset: scores down to {float(hu.min()):g}, which the uint16 reference "
            f"cannot hold; use hu_offset >= -0.5 (got {hu_offset!r})"
        )
    return hu.astype(np.uint16)
