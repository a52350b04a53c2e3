"""Helical (spiral) cone-beam FDK: ``helical_fdk``.

A weighted FDK (Feldkamp-type) reconstruction whose redundancy weight is a
smoothed n-PI window (Tam-Danielsson for n = 1: Tam, Samarasekera and Sauer
1998, Danielsson et al. 1997; n-PI: Proksa et al. 2000), a weight on
detector pixels only:

* For a ray from the source at azimuth ``theta`` (about z) through pixel
  ``(u, v)``, let ``gamma`` be its fan angle (counter-clockwise from the
  direction to the axis) and ``g`` the height it gains between the source
  and the far side of the source cylinder (where it meets the helix's
  azimuth ``theta + pi + 2 gamma``). With ``h`` the pitch (rise per turn of
  increasing azimuth),

      zeta = g / h - gamma / pi

  is -1/2 and +1/2 where the ray meets the helix turns just below and above
  it, ``+-(k + 1/2)`` on the turns further out. Every voxel projects into
  the Tam-Danielsson window ``|zeta| <= 1/2`` exactly for the views of its
  pi-line interval, which measure each line through the voxel (in the
  fan-beam sense: each direction in the xy plane) once; into the n-PI
  window ``|zeta| <= n/2`` (n odd) for views that measure each line n times.
* The weight ``W(zeta)`` is ``1/n`` on ``|zeta| <= (n - e)/2``, 0 beyond
  ``(n + e)/2``, with a ``sin^2`` step of width ``e`` (``smoothing``)
  between, so that ``sum_m W(zeta - m) = 1``: the weights of a voxel's
  conjugate rays, whose ``zeta`` differ by 1 when the voxel sits midway
  along the line, sum to one. Elsewhere on the line the conjugates' ``zeta``
  differ by other amounts and the sum departs from one in the steps only
  (none for ``e = 0``, the sharp window, which is exact but samples a step
  on the detector's rows: its error is several times larger).
* Each view is weighted by ``W``, FDK's cosine weight and its angular step
  (each line once: no 1/2), ramp-filtered along detector rows at the
  isocentre's pitch (the rows, not the helix's tangent: an approximation
  of the order of the cone angle, as FDK's own), and back-projected with
  FDK's distance weight, z-slab by z-slab, each slab from the views whose
  window can see it (:func:`views_seen`) and the detector rows it projects to.

The weighting is :class:`leveret.algorithms.fdk_weights.FDKWeighting`'s (cosine
weights, ramp, the CUDA fused pass) with the window multiplied in first; the
back-projection is :class:`leveret.operators.ConeBackprojection`: no kernel
of its own. The largest pitch without gaps is the one whose Tam-Danielsson
window the detector just holds (``HelicalWindow.max_pitch``); ``leveret.fdk``
sends helical geometries here.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from .. import _validate as v
from ..filters import FILTERS
from ..geometry import ConeGeometry, VolumeGeometry
from ..geometry.volume import volume_3d
from ..geometry.helix import Helix, fit_helix
from ..operators.cone import ConeBackprojection
from ..cpu.cone_plan import DEPTH
from .fdk_weights import FDKWeighting, rows_seen

#: Slices per z-slab of :func:`helical_fdk` by default: four CUDA blocks deep.
#: Each slab builds texture objects for its views (some 12 us each) and plans
#: its passes, so thin slabs pay that often; thick ones back-project more views
#: each (1404 views a slab at 16 slices, 1922 at 64, 2614 at 128 on the
#: benchmark's scan, where 64 was the fastest: docs/performance.md).
SLAB_SLICES = 4 * DEPTH

#: Pixels per block when the window is computed (float64 temporaries of a few MiB each).
_BLOCK_PIXELS = 1 << 22


# -- the window --------------------------------------------------------------------
def window_weight(zeta, n_pi: int, smoothing: float, xp=np):
    """The smoothed n-PI window ``W(zeta)`` (module notes): ``1/n`` on
    ``|zeta| <= (n - e)/2``, 0 from ``(n + e)/2``, a ``sin^2`` step between;
    ``sum_m W(zeta - m) = 1`` for every ``zeta``."""
    a = xp.abs(zeta)
    e = float(smoothing)
    if e == 0.0:
        inside = xp.where(a < n_pi / 2, 1.0, xp.where(a == n_pi / 2, 0.5, 0.0))
    else:
        t = xp.clip((n_pi / 2 - a) / e + 0.5, 0.0, 1.0)
        inside = xp.sin(0.5 * np.pi * t) ** 2
    return inside / n_pi


#: "auto" window: edges at least EDGE_ROWS detector rows wide (thinner ones
#: sample a step: errors and pitch-periodic ripple grow quickly below 2 rows)
#: and at most EDGE_MAX (zeta units) where the rows allow (wider edges spread
#: the normalisation error of voxels off the middle of their lines), with the
#: largest odd n that leaves room for them (measured in docs/helical-laminography.md).
EDGE_ROWS = 2.0
EDGE_MAX = 0.5


def _choose_window(room: float, per_row: float, n_pi, smoothing) -> tuple[int, float]:
    """(n, e): the window's order and edge width (zeta units) for a detector
    holding ``|zeta| <= room``, ``per_row`` zeta per row; ValueError naming
    ``n_pi`` or ``smoothing`` where the given values do not fit."""
    thinnest = EDGE_ROWS * per_row
    if isinstance(n_pi, str):
        v.choice("n_pi", n_pi, ("auto",))
        # the largest odd n whose window and edges of EDGE_ROWS rows fit (at least 1)
        n_pi = max(1, int((2 * room - thinnest - 1) // 2) * 2 + 1)
    else:
        n_pi = v.positive_int("n_pi", n_pi)
        if n_pi % 2 == 0:
            raise ValueError(
                f"n_pi: expected an odd number (the n-PI windows of odd n measure every line n times), got {n_pi}"
            )
        if n_pi > 2 * room:
            raise ValueError(
                f"n_pi: the {n_pi}-PI window does not fit the detector at this pitch "
                f"(at most {max(1, int((2 * room - 1) // 2) * 2 + 1)})"
            )
    widest = min(float(n_pi), 2 * room - n_pi)
    if isinstance(smoothing, str):
        v.choice("smoothing", smoothing, ("auto",))
        return n_pi, min(widest, max(EDGE_MAX, thinnest))
    smoothing = v.finite_float("smoothing", smoothing)
    if smoothing < 0:
        raise ValueError(
            f"smoothing: expected a width >= 0 (a fraction of one window period) or 'auto', got {smoothing:g}"
        )
    if smoothing > widest + 1e-12:
        raise ValueError(
            f"smoothing: {smoothing:g} is wider than the detector holds for the {n_pi}-PI window "
            f"at this pitch (at most {widest:.4g}); use a smaller value or 'auto'"
        )
    return n_pi, smoothing


class HelicalWindow:
    """The window coordinate ``zeta`` of every pixel of a helical scan and its weight.

    Parameters
    ----------
    geometry : ConeGeometry
    helix : Helix
        ``fit_helix(geometry)``.
    smoothing, n_pi
        The window's edge width and order (:func:`helical_fdk`).

    Attributes
    ----------
    n_pi, smoothing : the window chosen.
    max_pitch : float
        The largest pitch (of this handedness) whose sharp window (n = 1) the
        detector holds in every view and column.
    room : float
        The largest ``|zeta|`` the detector holds in every column.

    Raises
    ------
    ValueError
        Naming ``geometry`` when the detector does not hold the sharp window
        in some view and column (the pitch leaves gaps), with the largest
        pitch that does not; naming ``smoothing`` or ``n_pi`` when they are
        out of range or wider than the detector holds.
    """

    def __init__(self, geometry: ConeGeometry, helix: Helix, smoothing="auto", n_pi="auto"):
        self.geometry, self.helix = geometry, helix
        self.sources = geometry.source_positions()
        self.minv = np.linalg.inv(geometry.matrices[:, :, :3])
        for a in (self.sources, self.minv):
            a.setflags(write=False)
        # zeta at the first and last row centre of every column and view: zeta is
        # linear in v along a column (exactly for rows parallel to z).
        cols = np.arange(geometry.n_cols, dtype=np.float64)
        edge_rows = np.array([0.0, geometry.n_rows - 1.0])
        gain, gamma = self._gain_and_fan(slice(None), edge_rows, cols, np)  # (n, 2, n_cols)
        self.max_fan = float(np.abs(gamma).max())
        h = helix.pitch
        hi, lo = np.maximum(gain[:, 0], gain[:, 1]), np.minimum(gain[:, 0], gain[:, 1])
        g_top, g_bottom = (hi, lo) if h > 0 else (lo, hi)  # where zeta = g / h - gamma / pi is largest / smallest
        z_top = g_top / h - gamma[:, 0] / np.pi
        z_bottom = g_bottom / h - gamma[:, 0] / np.pi
        # The largest |pitch| of this handedness whose sharp window fits every column:
        # |g_top| / |h| - gamma / pi >= 1/2 and -|g_bottom| / |h| - gamma / pi <= -1/2.
        with np.errstate(divide="ignore"):
            limits = np.concatenate(
                [
                    np.abs(g_top) / np.maximum(0.5 + gamma[:, 0] / np.pi, 0),
                    np.abs(g_bottom) / np.maximum(0.5 - gamma[:, 0] / np.pi, 0),
                ]
            )
        self.max_pitch = float(np.min(limits))
        room = float(min(z_top.min(), -z_bottom.max()))  # the window's half height the detector holds
        if room < 0.5:
            raise ValueError(
                f"geometry: the helix's pitch {abs(h):.6g} per turn leaves gaps: the detector's "
                f"{geometry.n_rows} rows do not cover the Tam-Danielsson window in every column (each "
                f"line through a voxel must be measured once); the largest pitch without gaps is "
                f"{self.max_pitch:.6g} for this detector, source radius and fan"
            )
        self.room = room
        # zeta per detector row (the largest over columns): edges are planned in rows.
        per_row = float(np.max(np.abs(z_top - z_bottom))) / max(1, geometry.n_rows - 1)
        self.n_pi, self.smoothing = _choose_window(room, per_row, n_pi, smoothing)

    def _gain_and_fan(self, views, rows, cols, xp):
        """(gain, gamma) of the rays through pixels ``rows`` x ``cols`` of ``views``:
        each (n, len(rows), len(cols)), on ``xp``, float64."""
        s = xp.asarray(self.sources[views])
        m = xp.asarray(self.minv[views])
        r = xp.asarray(rows, dtype=np.float64)[None, :, None]
        c = xp.asarray(cols, dtype=np.float64)[None, None, :]

        def component(i):
            return m[:, i, 0, None, None] * c + m[:, i, 1, None, None] * r + m[:, i, 2, None, None]

        dx, dy, dz = component(0), component(1), component(2)
        sx, sy = s[:, 0, None, None], s[:, 1, None, None]
        dxy2 = dx * dx + dy * dy
        along = -(sx * dx + sy * dy)  # the ray's xy direction against the source's position
        gain = 2 * along * dz / dxy2  # height gained to the far side of the source circle
        gamma = xp.arctan2(-sx * dy + sy * dx, along)
        return gain, gamma

    def zeta(self, views, rows, cols, xp=np):
        """``zeta`` (float64) of the rays through detector positions ``rows`` x
        ``cols`` (pixels, any numbers) of ``views``: ``(n, len(rows), len(cols))`` on ``xp``."""
        gain, gamma = self._gain_and_fan(views, rows, cols, xp)
        return gain / self.helix.pitch - gamma / np.pi

    def weights(self, views: slice, row0: int, n_rows: int, xp=np):
        """``W(zeta)`` (float64, (views, n_rows, n_cols)) on ``xp``, in blocks of views."""
        start, stop, _ = views.indices(self.geometry.n_views)
        out = xp.empty((stop - start, n_rows, self.geometry.n_cols), np.float64)
        step = max(1, _BLOCK_PIXELS // (n_rows * self.geometry.n_cols))
        cols = np.arange(self.geometry.n_cols, dtype=np.float64)
        for a in range(start, stop, step):
            b = min(stop, a + step)
            zeta = self.zeta(slice(a, b), np.arange(row0, row0 + n_rows, dtype=np.float64), cols, xp)
            out[a - start : b - start] = window_weight(zeta, self.n_pi, self.smoothing, xp)
        return out

    def reach(self, radius: float) -> float:
        """How far (in z) a voxel at most ``radius`` from the axis can lie from a
        source whose window (its non-zero part) sees it.

        ``|z - z_source| = |g| lambda / C`` along a ray through the voxel
        (``lambda`` its xy distance from the source, ``C`` the chord), with
        ``|g| <= |h| ((1 + e)/2 + max|gamma| / pi)`` in the window and
        ``lambda / C <= (R + r) / (2 R)`` for a point at ``r`` from the axis of
        a circle of radius ``R``.
        """
        R = self.helix.radius
        extent = abs(self.helix.pitch) * ((self.n_pi + self.smoothing) / 2 + self.max_fan / np.pi)
        return extent * (R + radius) / (2 * R)


def _volume_radius(volume: VolumeGeometry) -> float:
    """The largest distance from the z axis of any point of the volume's box."""
    (x0, x1), (y0, y1) = volume.extent("x"), volume.extent("y")
    return float(max(np.hypot(x, y) for x in (x0, x1) for y in (y0, y1)))


def check_coverage(window: HelicalWindow, volume: VolumeGeometry) -> None:
    """ValueError naming ``volume`` unless every voxel lies inside the source
    cylinder and every view its window needs was measured."""
    R = window.helix.radius
    r = _volume_radius(volume)
    if r >= R:
        raise ValueError(
            f"volume: its corners lie {r:.6g} from the z axis, outside the helix's radius "
            f"{R:.6g} (the source circle); choose a volume inside it"
        )
    reach = window.reach(r)
    z = window.helix.z
    lo, hi = float(z.min()) + reach, float(z.max()) - reach
    z0, z1 = volume.extent("z")
    if z0 < lo - 1e-9 * max(1.0, abs(lo)) or z1 > hi + 1e-9 * max(1.0, abs(hi)):
        raise ValueError(
            f"volume: its z range {z0:.6g}..{z1:.6g} is not covered by the helix: the sources "
            f"span {z.min():.6g}..{z.max():.6g}, and a voxel needs the views within {reach:.6g} "
            f"of its height, so the volume must lie within z {lo:.6g}..{hi:.6g}"
            if hi > lo
            else f"volume: no slice is covered by the helix: the sources span only "
            f"{z.min():.6g}..{z.max():.6g} and a voxel needs the views within {reach:.6g} of "
            f"its height; scan a longer helix"
        )


def views_seen(window: HelicalWindow, volume: VolumeGeometry):
    """The views ``(start, stop)`` whose window can reach a voxel of ``volume``
    (a slab): those whose source lies within :meth:`HelicalWindow.reach` of
    its z range, and one more on each side (so that these views alone cover
    the slab: :func:`check_coverage` of ``crop_views(start, stop)`` passes);
    None if none. A contiguous range, the sources' heights being monotonic."""
    reach = window.reach(_volume_radius(volume))
    z0, z1 = volume.extent("z")
    inside = np.flatnonzero((window.helix.z >= z0 - reach) & (window.helix.z <= z1 + reach))
    if inside.size == 0:
        return None
    return max(0, int(inside[0]) - 1), min(window.geometry.n_views, int(inside[-1]) + 2)


class HelicalSlab(NamedTuple):
    """One z-slab of a helical reconstruction and what it needs (:func:`plan_slabs`)."""

    z: tuple[int, int]
    """Its slices ``(k0, k1)`` of the volume."""
    views: tuple[int, int] | None
    """The views ``(n0, n1)`` whose window reaches it (None: none)."""
    rows: tuple[int, int] | None
    """The detector rows ``(r0, r1)`` its voxels project to in those views (None: none: the slab is zero)."""


def plan_slabs(
    geometry: ConeGeometry, volume: VolumeGeometry, slab_slices: int = SLAB_SLICES, *, smoothing="auto", n_pi="auto"
) -> list[HelicalSlab]:
    """The z-slabs of a helical reconstruction, each with the views and rows it needs.

    What an out-of-core driver reads per slab: ``projections[n0:n1, r0:r1]``
    for :func:`fdk_slab`. Raises as :func:`helical_fdk` does for a geometry
    that is not a helix, a pitch with gaps, or a volume the helix does not
    cover.
    """
    window = _window(geometry, smoothing, n_pi)
    volume_3d(volume)
    check_coverage(window, volume)
    return list(_plan(window, volume, v.positive_int("slab_slices", slab_slices)))


def slab_plan(
    geometry: ConeGeometry, volume: VolumeGeometry, region: tuple[int, int], *, smoothing="auto", n_pi="auto"
) -> HelicalSlab:
    """The :class:`HelicalSlab` of slices ``region = (k0, k1)`` of ``volume``:
    :func:`plan_slabs`'s entry for any slice range (an out-of-core driver's
    slabs, which a resumed run or a retry in halves need not align with
    ``plan_slabs``'s). Coverage is not checked here (:func:`plan_slabs` or
    :func:`covered_z` do that for the whole volume)."""
    window = _window(geometry, smoothing, n_pi)
    k0, k1 = (int(k) for k in region)
    if not 0 <= k0 < k1 <= volume.nz:
        raise ValueError(f"region: expected 0 <= k0 < k1 <= {volume.nz}, got {region!r}")
    return _slab(window, volume, k0, k1)


def _window(geometry, smoothing, n_pi) -> HelicalWindow:
    if not isinstance(geometry, ConeGeometry):
        raise TypeError(f"geometry: expected a ConeGeometry, got {type(geometry).__name__}")
    return _cached_window(geometry, smoothing, n_pi)


@functools.lru_cache(maxsize=4)
def _cached_window(geometry, smoothing, n_pi) -> HelicalWindow:
    # per geometry (geometries hash by value; the window's arrays are read-only):
    # an out-of-core run asks for it once per slab
    helix = fit_helix(geometry)
    if helix is None:
        raise ValueError(
            "geometry: expected a helical scan (sources rising along a helix about the z axis), "
            "got a trajectory that is not one; use leveret.fdk for circular scans"
        )
    return HelicalWindow(geometry, helix, smoothing, n_pi)


@functools.lru_cache(maxsize=8)
def _plan(window: HelicalWindow, volume: VolumeGeometry, slab_slices: int) -> tuple[HelicalSlab, ...]:
    # per window, volume and slab size: repeated calls (a benchmark, a viewer) plan once
    return tuple(_slab(window, volume, k0, min(volume.nz, k0 + slab_slices)) for k0 in range(0, volume.nz, slab_slices))


def _slab(window: HelicalWindow, volume: VolumeGeometry, k0: int, k1: int) -> HelicalSlab:
    slab = volume.slab(k0, k1)
    seen = views_seen(window, slab)
    rows = None if seen is None else rows_seen(window.geometry.normalised().crop_views(*seen), slab)
    return HelicalSlab((k0, k1), seen, rows)


# -- the weighting ----------------------------------------------------------------------
class HelicalWeighting(FDKWeighting):
    """FDK's weighting and ramp for a helical scan: the window ``W``, the cosine
    weight and the angular step / isocentre pitch (each line once), then the
    ramp along rows. ``weighting(raw, views, row0)`` as :class:`FDKWeighting`."""

    def __init__(
        self, geometry, window: HelicalWindow, *, filter: str = "ram-lak", cutoff: float = 1.0, padding: str = "zero"
    ):
        super().__init__(geometry, filter=filter, cutoff=cutoff, padding=padding, short_scan=False)
        self.window = window
        frames = self.frames
        # Each view's share of the (monotonic) angle range: half the gap to each neighbour.
        steps = np.abs(np.gradient(frames["angle"])) if geometry.n_views > 1 else np.array([2 * np.pi])
        per_column = np.repeat((steps / frames["pitch"])[:, None], geometry.n_cols, axis=1)
        per_column.setflags(write=False)
        self.per_column = per_column

    def __call__(self, raw, views: slice, row0: int = 0):
        xp = v.array_module(raw)
        raw *= self.window.weights(views, row0, raw.shape[1], xp).astype(raw.dtype)
        return super().__call__(raw, views, row0)


# -- the reconstruction ---------------------------------------------------------------------
def helical_fdk(
    projections,
    geometry: ConeGeometry,
    volume: VolumeGeometry,
    *,
    filter: str = "ram-lak",
    cutoff: float = 1.0,
    padding: str = "zero",
    smoothing="auto",
    n_pi="auto",
    backend: str = "auto",
    interpolation: str = "linear",
    kernel: str = "auto",
    precision: str = "float32",
    gpu_memory: int | None = None,
    slab_slices: int | None = None,
    chunk_views: int | None = None,
    progress: bool = False,
    stats: dict | None = None,
):
    """Helical cone-beam reconstruction: FDK with a smoothed n-PI (Tam-Danielsson) window.

    Parameters
    ----------
    projections : ndarray (n_views, n_rows, n_cols)
        Line integrals; NumPy or CuPy.
    geometry : ConeGeometry
        A helical scan (``ConeGeometry.helical``, or any matrices whose
        sources follow a helix: :func:`leveret.geometry.helix.fit_helix`),
        detector rows parallel to the z axis. Any number of turns, either
        handedness, either direction of rotation.
    volume : VolumeGeometry (3D)
        Must lie inside the source cylinder and within the z range the
        helix covers (ValueError naming ``volume`` otherwise, with that
        range: :func:`covered_z`).
    filter, cutoff, padding
        The ramp's apodisation, as for :func:`leveret.fdk`.
    smoothing : float or "auto"
        Width of the window's edges in units of ``zeta`` (module notes), at
        most ``n_pi``; 0 is the sharp window. "auto": ``EDGE_MAX`` (0.5), or
        ``EDGE_ROWS`` (2) detector rows where that is wider, as far as the
        detector holds.
    n_pi : odd int or "auto"
        The window's order n: every line through a voxel measured n times
        (n-PI window; Proksa et al. 2000). "auto": the largest that fits the
        detector with "auto" edges (1 near the largest pitch, more at low
        pitch).
    backend : {"auto", "cuda", "cpu"}
    interpolation, kernel
        The back-projection's (:class:`leveret.operators.ConeBackprojection`).
    precision : {"float32", "float64"}
        "float64": CPU only.
    gpu_memory : int, optional
        CUDA: bytes of GPU memory the call may use (default: what is free).
        The filtered views stay on the GPU where they fit beside a slab;
        otherwise they are kept in host memory and each slab uploads the
        views and rows it needs. CuPy input stays on its GPU.
    slab_slices : int, optional
        Slices per z-slab (default ``SLAB_SLICES``, 64); each slab is
        back-projected from the views that see it only (:func:`views_seen`)
        and the detector rows it projects to.
    chunk_views : int, optional
        Views weighted and filtered at a time, and back-projected per call
        (default: about 256 MB of filtering at a time; a slab's views in one
        back-projection call).
    progress : bool
        Progress bars.
    stats : dict, optional
        Filled with ``filter`` and ``backproject`` seconds, ``slabs``,
        ``views_per_slab`` (the mean views back-projected into a slab),
        ``n_pi``, ``smoothing`` and ``max_pitch`` (the largest pitch of this
        handedness without gaps).

    Returns
    -------
    ndarray (nz, ny, nx)
        Attenuation per length unit; NumPy in, NumPy out; CuPy in, CuPy out.

    Raises
    ------
    ValueError
        ``geometry`` not a helix, or a pitch that leaves gaps (the message
        gives the largest pitch without gaps); ``volume`` outside what the
        helix covers; ``smoothing`` or ``n_pi`` out of range; bad
        ``projections``.

    Notes
    -----
    Accuracy and speed are measured in docs/helical-laminography.md. Near
    the largest pitch the window's edges get thinner than a few rows and the
    error grows (the sharp window samples a step).
    """
    import time

    window = _window(geometry, smoothing, n_pi)
    projections = v.real_array("projections", projections, geometry.projection_shape, "(n_views, n_rows, n_cols)")
    v.choice("filter", filter, FILTERS)
    dtype = np.float64 if v.precision(precision, ("float32", "float64")) == "float64" else np.float32
    volume_3d(volume)
    check_coverage(window, volume)

    from ..backends import resolve

    backend = resolve(backend, projections)
    if backend == "cuda" and dtype == np.float64:
        raise ValueError("precision: 'float64' runs on the CPU backend only; use backend='cpu'")
    slab_slices = SLAB_SLICES if slab_slices is None else v.positive_int("slab_slices", slab_slices)
    if chunk_views is not None:
        chunk_views = v.positive_int("chunk_views", chunk_views)
    input_on_gpu = not isinstance(projections, np.ndarray)
    if input_on_gpu:
        v.check_finite_array("projections", projections)
    else:
        v.check_allocation("volume", volume.size * np.dtype(dtype).itemsize, "the reconstruction")
    plan = _plan(window, volume, slab_slices)
    on_device = backend == "cuda" and (input_on_gpu or _fits_on_gpu(geometry, volume, plan, gpu_memory))
    if not on_device:
        v.check_allocation(
            "projections", int(np.prod(geometry.projection_shape)) * np.dtype(dtype).itemsize, "the filtered views"
        )
    xp = _array_module(backend)

    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    weighting = HelicalWeighting(geometry, window, filter=filter, cutoff=cutoff, padding=padding)
    filtered = (xp if on_device else np).empty(geometry.projection_shape, dtype)
    with tqdm(total=geometry.n_views, desc="helical filter", unit="view", disable=not progress, leave=False) as bar:
        for views in _chunks(0, geometry.n_views, _filter_views(geometry, dtype, chunk_views)):
            raw = xp.array(projections[views], dtype=dtype)  # a copy: the input stays as it was
            if not input_on_gpu:
                v.check_finite_array("projections", raw)
            part = weighting(raw, views)
            filtered[views] = part if (on_device or xp is np) else part.get()
            bar.update(views.stop - views.start)
    _synchronize(xp)
    t1 = time.perf_counter()

    out = (xp if input_on_gpu else np).zeros(volume.shape, dtype)
    with tqdm(total=volume.nz, desc="helical slabs", unit="slice", disable=not progress, leave=False) as bar:
        for slab in plan:
            if slab.rows is not None:  # else no window sees the slab's voxels on the detector: zero
                (n0, n1), (r0, r1) = slab.views, slab.rows
                res = _backproject(
                    filtered[n0:n1, r0:r1], window.geometry, volume, slab, xp, dtype, interpolation, kernel, chunk_views
                )
                out[slab.z[0] : slab.z[1]] = res if (xp is np or input_on_gpu) else res.get()
            bar.update(slab.z[1] - slab.z[0])
    _synchronize(xp)
    if stats is not None:
        done = [slab.views for slab in plan if slab.rows is not None]
        stats.update(
            filter=t1 - t0,
            backproject=time.perf_counter() - t1,
            slabs=len(done),
            views_per_slab=float(np.mean([b - a for a, b in done])) if done else 0.0,
            n_pi=window.n_pi,
            smoothing=window.smoothing,
            max_pitch=window.max_pitch,
        )
    return out


def fdk_slab(
    projections,
    geometry: ConeGeometry,
    volume: VolumeGeometry,
    slab: HelicalSlab,
    *,
    filter: str = "ram-lak",
    cutoff: float = 1.0,
    padding: str = "zero",
    smoothing="auto",
    n_pi="auto",
    backend: str = "auto",
    interpolation: str = "linear",
    kernel: str = "auto",
    chunk_views: int | None = None,
    precision: str = "float32",
):
    """One z-slab of :func:`helical_fdk` from the views and rows it needs only.

    Parameters
    ----------
    projections : ndarray (n1 - n0, r1 - r0, n_cols)
        ``projections[n0:n1, r0:r1]`` of the whole scan, with ``(n0, n1)``
        ``slab.views`` and ``(r0, r1)`` ``slab.rows`` (:func:`plan_slabs`);
        NumPy or CuPy.
    geometry, volume : the whole scan and the whole volume.
    slab : HelicalSlab
        From ``plan_slabs(geometry, volume, ...)`` with the same ``smoothing``
        and ``n_pi``.
    filter, cutoff, padding, smoothing, n_pi, backend, interpolation, kernel, chunk_views
        As for :func:`helical_fdk`.
    precision : {"float32"}
        A slab is computed in float32 (the whole call's "float64" is not offered).

    Returns
    -------
    ndarray (k1 - k0, ny, nx) float32
        Slices ``slab.z`` of ``helical_fdk(all projections, geometry, volume)``
        to float32 rounding: each view's rows are weighted and filtered as
        there (a row's filtering does not depend on the others). NumPy in,
        NumPy out; CuPy in, CuPy out.
    """
    window = _window(geometry, smoothing, n_pi)
    if v.precision(precision, ("float32", "float64")) != "float32":
        raise ValueError(
            f"precision: a helical slab is computed in float32, got {precision!r}; use "
            "helical_fdk(..., precision='float64') for the whole volume"
        )
    if not isinstance(slab, HelicalSlab):
        raise TypeError(f"slab: expected a HelicalSlab from plan_slabs, got {type(slab).__name__}")
    k0, k1 = slab.z
    if slab.rows is None:
        return (np if isinstance(projections, np.ndarray) else _array_module("cuda")).zeros(
            (k1 - k0, volume.ny, volume.nx), np.float32
        )
    (n0, n1), (r0, r1) = slab.views, slab.rows
    projections = v.real_array(
        "projections",
        projections,
        (n1 - n0, r1 - r0, geometry.n_cols),
        "(views, rows, n_cols) of the slab's views and rows",
    )
    from ..backends import resolve

    backend = resolve(backend, projections)
    xp = _array_module(backend)
    input_on_gpu = not isinstance(projections, np.ndarray)
    weighting = HelicalWeighting(geometry, window, filter=filter, cutoff=cutoff, padding=padding)
    filtered = xp.empty(projections.shape, np.float32)
    for views in _chunks(0, n1 - n0, _filter_views(geometry, np.float32, chunk_views)):
        raw = xp.array(projections[views], dtype=np.float32)
        v.check_finite_array("projections", raw)
        filtered[views] = weighting(raw, slice(n0 + views.start, n0 + views.stop), r0)
    res = _backproject(filtered, geometry, volume, slab, xp, np.float32, interpolation, kernel, chunk_views)
    return res if (xp is np or input_on_gpu) else res.get()


def _backproject(filtered, geometry, volume, slab: HelicalSlab, xp, dtype, interpolation, kernel, chunk_views):
    """The slab's volume from its filtered views and rows (``filtered``, host or device)."""
    (k0, k1), (n0, n1), (r0, r1) = slab.z, slab.views, slab.rows
    sub = volume.slab(k0, k1)
    op = ConeBackprojection(
        geometry.normalised().crop_views(n0, n1).crop_rows(r0, r1),
        sub,
        backend="cuda" if xp is not np else "cpu",
        interpolation=interpolation,
        kernel=kernel,
    )
    res = xp.zeros(sub.shape, dtype)
    for views in _chunks(0, n1 - n0, n1 - n0 if chunk_views is None else chunk_views):
        block = xp.ascontiguousarray(xp.asarray(filtered[views]))
        op(block, res, views=views, accumulate=True)
    return res


def _chunks(start: int, stop: int, step: int) -> list[slice]:
    return [slice(a, min(stop, a + step)) for a in range(start, stop, step)]


def _filter_views(geometry, dtype, chunk_views) -> int:
    """Views weighted and filtered at a time: ``chunk_views``, else about
    256 MB of the filter's work (12 copies of a view)."""
    if chunk_views is not None:
        return chunk_views
    return max(1, int(256e6 // (12 * geometry.n_rows * geometry.n_cols * np.dtype(dtype).itemsize)))


def _array_module(backend: str):
    if backend == "cuda":
        import cupy

        return cupy
    return np


def _synchronize(xp) -> None:
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


def _fits_on_gpu(geometry, volume: VolumeGeometry, plan, gpu_memory) -> bool:
    """Whether the filtered views fit on the current GPU (within ``gpu_memory``)
    beside the largest slab, its views' rows (twice: the copy and its
    texture) and the filtering's work (12 copies of a chunk's views)."""
    import cupy

    free = cupy.cuda.runtime.memGetInfo()[0] + cupy.get_default_memory_pool().free_bytes()
    budget = free if gpu_memory is None else min(free, v.positive_int("gpu_memory", gpu_memory))
    view = geometry.n_cols * 4
    slab = max(
        (
            (k1 - k0) * volume.ny * volume.nx * 4 + 2 * (s[1] - s[0]) * (r[1] - r[0]) * view
            for (k0, k1), s, r in plan
            if r is not None
        ),
        default=0,
    )
    filtering = 256e6
    return geometry.n_views * geometry.n_rows * view + slab + filtering <= 0.9 * budget


def covered_z(
    geometry: ConeGeometry, volume: VolumeGeometry | None = None, *, smoothing="auto", n_pi="auto"
) -> tuple[float, float]:
    """The z range ``(z_lo, z_hi)`` a helical scan reconstructs for a volume's
    xy extent (default: a line along the axis): every voxel in it has all
    the views its window needs. ValueError naming ``geometry`` if it is not
    a helix or its pitch leaves gaps."""
    window = _window(geometry, smoothing, n_pi)
    reach = window.reach(0.0 if volume is None else _volume_radius(volume))
    return float(window.helix.z.min()) + reach, float(window.helix.z.max()) - reach


def fdk_route(projections, geometry, volume, *, short_scan, devices, gpu_memory, **settings):
    """``leveret.fdk`` of a helical geometry: :func:`helical_fdk` with fdk's
    arguments (``short_scan`` must stay "auto": the window decides what each
    view weighs; one device)."""
    if not (isinstance(short_scan, str) and short_scan == "auto"):
        raise ValueError(
            f"short_scan: a helical scan's weights follow from its pitch; leave it 'auto', got {short_scan!r}"
        )
    if devices is not None:
        raise ValueError("devices: helical scans run on one GPU; use devices=None")
    return helical_fdk(projections, geometry, volume, gpu_memory=gpu_memory, **settings)


def is_helical(geometry) -> bool:
    """Whether ``leveret.fdk`` treats ``geometry`` as a helical scan (``fit_helix``)."""
    return isinstance(geometry, ConeGeometry) and fit_helix(geometry) is not None
