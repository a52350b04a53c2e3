"""Filtered back-projection for laminography (a rotation axis tilted towards the beam).

The sample rotates about the world z axis; the beam crosses the sample's
plane (xy) at ``tilt`` from it (``ParallelVecGeometry.laminography``,
``ConeGeometry.laminography``).

**Parallel beam.** A view at angle t measures the plane of the Fourier
transform perpendicular to its rays ``r(t) = cos(tilt) d(t) + sin(tilt) ez``
(Fourier slice theorem). A frequency ``k`` lies on that plane for the two
angles where ``k . r(t) = 0`` if it lies at least ``tilt`` from the z axis,
and on none otherwise (the missing cone). Back-projecting over a full turn
therefore gives ``2 f^(k) / (cos(tilt) |k_u|)`` with ``k_u`` the frequency
along the detector's columns, so

    f = cos(tilt) / 2  sum_n  dt_n  B_n[ ramp_u(p_n) ]

is exact outside the missing cone (Helfen et al. 2007; Myagotin et al. 2013):
the ramp along detector rows (the columns' direction, perpendicular to the
rotation axis's projection), each view weighted by its angular step and by
``cos(tilt)``, then the plain back-projection along the rays (the affine
matrices of ``ParallelVecGeometry``, ``w = 1``). Here ``cos(tilt)`` is taken
per view and row as ``|n . ez|``, ``n`` the unit normal of the plane of
rays through the row, which it equals for the constructors' scans.

**Cone beam.** FDK (Feldkamp, Davis and Kress 1984) treats the rays through
one detector row as a fan in a tilted plane and reconstructs each voxel
with the fan-beam formula of that plane; the source's rotation about z by
``dt`` turns the plane's fan by ``dt |n . ez|``. FDK's cosine weight
``1 / sqrt(1 + tan_u^2 + tan_v^2)`` is the fan's cosine times
``cos(kappa_v) = 1 / sqrt(1 + tan_v^2)``, which is ``|n . ez|`` for a
circular scan; for a tilted axis the rows are weighted by
``|n . ez| sqrt(1 + tan_v^2)`` more (1 for the circular scan), and FDK's
full-scan weighting, ramp and distance weights do the rest. As ``sid``
grows this is the parallel formula above.

Both need a full turn (t and t + pi are different views when the axis is
tilted).
"""

from __future__ import annotations

import numpy as np

from .. import _validate as v
from ..filters import FILTERS, apply_filter, filter_response
from ..geometry import ConeGeometry, ParallelVecGeometry, VolumeGeometry
from ..geometry.volume import volume_3d
from ..operators.cone import ConeBackprojection
from ._coverage import check_views


def _rotation_angles(geometry) -> np.ndarray:
    """Each view's rotation angle t (unwrapped): the xy direction of its rays
    (parallel) or of its source about z (cone)."""
    if isinstance(geometry, ParallelVecGeometry):
        r = geometry.rays
        t = np.arctan2(-r[:, 0], r[:, 1])
    else:
        s = geometry.source_positions()
        t = np.arctan2(s[:, 0], -s[:, 1])
    return np.unwrap(t)


def angle_weights(geometry) -> np.ndarray:
    """Per-view quadrature weights (radians) over the turns the views cover:
    half the gap to each neighbour in angle, divided by the number of turns.

    Raises ValueError naming ``geometry`` when the views cover less than a
    full turn or the angles are not monotonic."""
    t = _rotation_angles(geometry)
    if t.size < 2:
        raise ValueError(f"geometry: laminography FBP needs views over a full turn, got {t.size} view")
    steps = np.diff(t)
    if not (np.all(steps > 0) or np.all(steps < 0)):
        raise ValueError(
            "geometry: laminography FBP needs the views in order of their rotation angle (monotonic, as acquired)"
        )
    t = np.abs(t - t[0])
    step = np.median(np.abs(steps))
    coverage = float(t[-1] + step)
    if coverage < 2 * np.pi - 1e-6:
        raise ValueError(
            f"geometry: laminography FBP needs views over a full turn (t and t + 180 degrees "
            f"are different views of a tilted axis), got {np.degrees(coverage):.4g} degrees"
        )
    return np.abs(np.gradient(t)) * (2 * np.pi / coverage)


def rows_seen(geometry, volume: VolumeGeometry):
    """Detector rows ``(start, stop)`` the volume's voxels project to in any
    view, with a row of margin for interpolation (None if none): with
    ``geometry.crop_rows(start, stop)`` and ``projections[:, start:stop]``,
    :func:`laminography_fbp` reconstructs a z-slab (``volume.slab``) as the
    whole call does (each row is weighted and filtered on its own)."""
    corners = np.array([[x, y, z] for x in volume.extent("x") for y in volume.extent("y") for z in volume.extent("z")])
    # u, v are ratios of linear functions with w > 0 (affine for parallel beam): extremes at corners
    row = geometry.project(corners)[1]
    start = max(0, int(np.floor(row.min())) - 1)
    stop = min(geometry.n_rows, int(np.ceil(row.max())) + 2)
    return (start, stop) if stop > start else None


def row_axis_cosines(geometry, matrices=None) -> np.ndarray:
    """``|n . ez|`` per view and detector row, (n_views, n_rows): ``n`` the unit
    normal of the plane of the row's rays (``P[1] - v P[2]`` of the matrix)."""
    P = geometry.matrices if matrices is None else matrices
    rows = np.arange(geometry.n_rows, dtype=np.float64)
    normal = P[:, None, 1, :3] - rows[None, :, None] * P[:, None, 2, :3]
    return np.abs(normal[..., 2]) / np.linalg.norm(normal, axis=-1)


def laminography_fbp(
    projections,
    geometry,
    volume: VolumeGeometry,
    *,
    filter: str = "ram-lak",
    cutoff: float = 1.0,
    padding: str = "zero",
    backend: str = "auto",
    interpolation: str = "linear",
    kernel: str = "auto",
    precision: str = "float32",
    chunk_views: int | None = None,
    progress: bool = False,
):
    """Filtered back-projection of a laminography scan (tilted rotation axis).

    Parameters
    ----------
    projections : ndarray (n_views, n_rows, n_cols)
        Line integrals; NumPy or CuPy.
    geometry : ParallelVecGeometry or ConeGeometry
        A full turn (or several) about the z axis, the detector's rows
        perpendicular to the rotation axis's projection
        (``ParallelVecGeometry.laminography``, ``ConeGeometry.laminography``;
        tilt 0 is the ordinary full-turn scan).
    volume : VolumeGeometry (3D)
    filter, cutoff, padding
        The ramp's apodisation (:func:`leveret.fbp`), applied along detector
        rows at the detector's column pitch (parallel beam) or at the
        isocentre (cone beam).
    backend : {"auto", "cuda", "cpu"}
    interpolation, kernel
        The back-projection's (:class:`leveret.operators.ConeBackprojection`).
    precision : {"float32", "float64"}
        "float64": CPU only.
    chunk_views : int, optional
        Views weighted, filtered and back-projected per call (default: about
        256 MB of them).
    progress : bool

    Returns
    -------
    ndarray (nz, ny, nx)
        Attenuation per length unit, exact (to discretisation) for the
        frequencies outside the missing cone of half-angle ``tilt`` about z;
        the cone's content is missing (docs/helical-laminography.md shows its
        artefacts and what the iterative methods recover). NumPy in, NumPy
        out; CuPy in, CuPy out.
    """
    from .fdk_weights import FDKWeighting

    if not isinstance(geometry, (ParallelVecGeometry, ConeGeometry)):
        raise TypeError(f"geometry: expected a ParallelVecGeometry or ConeGeometry, got {type(geometry).__name__}")
    projections = v.real_array("projections", projections, geometry.projection_shape, "(n_views, n_rows, n_cols)")
    v.choice("filter", filter, FILTERS)
    dtype = np.float64 if v.precision(precision, ("float32", "float64")) == "float64" else np.float32
    volume_3d(volume)
    check_views(geometry)
    weights = angle_weights(geometry)
    from ..backends import resolve

    backend = resolve(backend, projections)
    if backend == "cuda" and dtype == np.float64:
        raise ValueError("precision: 'float64' runs on the CPU backend only; use backend='cpu'")
    view_bytes = 12 * geometry.n_rows * geometry.n_cols * 4
    chunk_views = (
        max(1, int(256e6 // view_bytes)) if chunk_views is None else v.positive_int("chunk_views", chunk_views)
    )
    input_on_gpu = not isinstance(projections, np.ndarray)
    if input_on_gpu:
        v.check_finite_array("projections", projections)
    else:
        v.check_allocation("volume", volume.size * np.dtype(dtype).itemsize, "the reconstruction")

    if isinstance(geometry, ConeGeometry):
        # FDK's full-scan weights (half the step, over the turns) and ramp, times the rows' tilt factor.
        weighting = FDKWeighting(geometry, filter=filter, cutoff=cutoff, padding=padding, short_scan=False)
        frames = weighting.frames
        tan_v = (np.arange(geometry.n_rows)[None, :] - frames["v0"][:, None]) / frames["focal_v"][:, None]
        row_weights = row_axis_cosines(geometry, frames["normalised"]) * np.sqrt(1 + tan_v**2)
        op = ConeBackprojection(
            geometry, volume, backend=backend, interpolation=interpolation, matrices=frames["normalised"], kernel=kernel
        )

        def prepare(raw, views):
            raw *= _on(raw, row_weights[views, :, None])
            return weighting(raw, views)
    else:
        pitch = 1.0 / np.linalg.norm(geometry.matrices[:, 0, :3], axis=1)  # column pitch across the rays
        row_weights = 0.5 * (weights / pitch)[:, None] * row_axis_cosines(geometry)
        response = filter_response(geometry.n_cols, filter, cutoff=cutoff)
        op = ConeBackprojection(geometry, volume, backend=backend, interpolation=interpolation, kernel=kernel)

        def prepare(raw, views):
            raw *= _on(raw, row_weights[views, :, None])
            return apply_filter(raw, response, padding=padding)

    if backend == "cuda":
        import cupy as xp
    else:
        xp = np
    out = xp.zeros(volume.shape, dtype)
    from tqdm.auto import tqdm

    with tqdm(total=geometry.n_views, desc="laminography", unit="view", disable=not progress, leave=False) as bar:
        for a in range(0, geometry.n_views, chunk_views):
            views = slice(a, min(geometry.n_views, a + chunk_views))
            raw = xp.array(projections[views], dtype=dtype)  # a copy: the input stays as it was
            if not input_on_gpu:
                v.check_finite_array("projections", raw)
            op(xp.ascontiguousarray(prepare(raw, views), dtype=dtype), out, views=views, accumulate=True)
            bar.update(views.stop - views.start)
    if backend == "cuda" and not input_on_gpu:
        return out.get()
    return out


def _on(like, table: np.ndarray):
    """``table`` on ``like``'s device, in its dtype."""
    xp = v.array_module(like)
    return xp.asarray(table, dtype=like.dtype)
