"""Scans that cannot determine a volume, refused one way by every reconstruction function.

- **One direction.** Views that all look along one direction (parallel views at
  one angle modulo 180 degrees, a single view, cone views from one source
  position, 3D Radon directions that do not span space) say nothing about the
  object across that direction: any reconstruction of them is a smear, not
  the object. :func:`check_views` raises a ValueError naming ``geometry``.
- **A volume no ray reaches.** A volume that lies outside every view's
  detector comes back all zeros whatever the data (the data are zero outside
  the detector). :func:`check_reach` warns (a UserWarning naming ``volume``)
  and the reconstruction returns those zeros: a slab of a taller volume may
  lie beyond the detector on purpose.

The operators (``Projector``, the back-projections) stay permissive: projecting
one view is a legitimate operation, reconstructing from it is not.
"""

from __future__ import annotations

import functools

import numpy as np

#: Two directions closer than this (radians, or unit-vector distance) are one.
SAME_DIRECTION = 1e-6


def check_views(geometry) -> None:
    """Raise a ValueError naming ``geometry`` when its views cannot determine a volume.

    Parallel beam: fewer than two distinct angles modulo pi. Cone beam (and
    tilted parallel beam): all views from one source position (one ray
    direction). 3D Radon: directions that do not span 3D space (fewer than
    three, or all in one plane: nothing is known along that plane's normal).
    """
    problem = _views_problem(geometry)
    if problem is not None:
        raise ValueError(problem)


@functools.lru_cache(maxsize=16)
def _views_problem(geometry) -> str | None:
    """:func:`check_views`'s message, or None (per geometry: geometries hash by
    value, and a viewer or benchmark reconstructs the same scan again and again)."""
    from ..geometry import ConeGeometry, ParallelGeometry, ParallelVecGeometry, RadonGeometry

    if isinstance(geometry, ParallelGeometry):
        distinct = _distinct_angles(np.mod(geometry.angles, np.pi))
        if distinct < 2:
            angle = float(np.degrees(np.mod(geometry.angles[0], np.pi)))
            return (
                f"geometry: {_views(geometry.n_angles)} along one direction ({angle:.4g} degrees, "
                "modulo 180): they say nothing across it, so no volume is determined; a "
                "reconstruction needs views at two angles or more (modulo 180 degrees)"
            )
    elif isinstance(geometry, ConeGeometry):
        src = np.asarray(geometry.source_positions(), dtype=np.float64).reshape(-1, 3)
        scale = max(float(np.abs(src).max()), 1.0)
        if len(src) == 1 or float(np.ptp(src, axis=0).max()) <= 1e-9 * scale:
            views = "the single view has one" if len(src) == 1 else f"all {len(src)} views have the same"
            return (
                f"geometry: {views} source position: the scan sees the object from one direction "
                "only, so no volume is determined; check the angles or matrices"
            )
    elif isinstance(geometry, ParallelVecGeometry):
        rays = np.asarray(geometry.rays, dtype=np.float64).reshape(-1, 3)
        rays = rays / np.linalg.norm(rays, axis=1, keepdims=True)
        rays = rays * np.where(rays @ rays[0] < 0, -1.0, 1.0)[:, None]  # t and t + pi: one direction
        if float(np.ptp(rays, axis=0).max()) <= SAME_DIRECTION:
            return (
                f"geometry: {_views(len(rays))} along one ray direction: they say nothing "
                "across it, so no volume is determined; check the angles or vectors"
            )
    elif isinstance(geometry, RadonGeometry):
        rank = int(np.linalg.matrix_rank(np.asarray(geometry.directions, dtype=np.float64), tol=SAME_DIRECTION))
        if rank == 1:
            which = "the single direction" if geometry.n_dirs == 1 else f"all {geometry.n_dirs} directions (one line)"
            return (
                f"geometry: the plane integrals of {which} give the object's profile along one "
                "line only, so no volume is determined; a 3D Radon reconstruction needs directions "
                "that span space"
            )
        if rank == 2:
            return (
                f"geometry: the {geometry.n_dirs} directions lie in one plane: nothing is known "
                "along its normal, so no volume is determined; a 3D Radon reconstruction needs "
                "directions that span space"
            )
    return None


def _views(n: int) -> str:
    return "the single view looks" if n == 1 else f"all {n} views look"


def _distinct_angles(folded: np.ndarray) -> int:
    """How many angles modulo pi differ (0 and pi - tiny are one)."""
    f = np.sort(folded)
    gaps = np.diff(np.concatenate([f, [f[0] + np.pi]]))
    return max(1, int(np.count_nonzero(gaps > SAME_DIRECTION)))


def check_reach(geometry, volume) -> None:
    """Warn (a UserWarning naming ``volume``) when no view's detector sees any of it.

    Parallel beam: the volume's corners project, in every view, beside the
    detector's columns, or its slices lie above or below every detector row.
    Cone beam: its corners project beside the detector in every view (only
    checked where every corner lies in front of the source). 3D Radon: in
    every direction its planes lie beyond the sampled range.
    """
    where = _unreached_where(geometry, volume)
    if where is not None:
        _unreached(volume, where)


@functools.lru_cache(maxsize=16)
def _unreached_where(geometry, volume) -> str | None:
    """Where :func:`check_reach`'s volume lies beside the scan, or None (per
    geometry and volume, as :func:`_views_problem`)."""
    from ..geometry import ConeGeometry, ParallelGeometry, RadonGeometry

    corners = _corners(volume)
    if isinstance(geometry, ParallelGeometry):
        x, y = corners[:, 0], corners[:, 1]
        cols = geometry.project_columns(x, y)  # (n_angles, n_corners)
        seen = (cols.max(axis=1) >= -0.5) & (cols.min(axis=1) <= geometry.n_cols - 0.5)
        rows_ok = True
        if not geometry.is_2d:
            rows = geometry.project_rows(corners[:, 2])
            rows_ok = rows.max() >= -0.5 and rows.min() <= geometry.n_rows - 0.5
        if not (seen.any() and rows_ok):
            return "columns" if not seen.any() else "rows"
    elif isinstance(geometry, ConeGeometry):
        u, v, w = geometry.project(corners)
        if not (w > 0).all():
            return None  # behind the source: the back-projection's own check says so
        seen = (
            (u.max(axis=1) >= -0.5)
            & (u.min(axis=1) <= geometry.n_cols - 0.5)
            & (v.max(axis=1) >= -0.5)
            & (v.min(axis=1) <= geometry.n_rows - 0.5)
        )
        if not seen.any():
            return "detector"
    elif isinstance(geometry, RadonGeometry):
        t = corners @ np.asarray(geometry.directions, dtype=np.float64).T  # (n_corners, n_dirs)
        half = geometry.n_samples / 2 * geometry.spacing
        if not ((t.max(axis=0) >= -half) & (t.min(axis=0) <= half)).any():
            return "samples"
    return None


def _corners(volume) -> np.ndarray:
    """The volume's 4 (2D) or 8 (3D) outer corners, (x, y, z) (z = 0 in 2D)."""
    zs = (0.0,) if volume.is_2d else volume.extent("z")
    return np.array([[x, y, z] for x in volume.extent("x") for y in volume.extent("y") for z in zs])


def _unreached(volume, where: str) -> None:
    import warnings

    axes = "xy" if volume.is_2d else "xyz"
    ext = ", ".join("{} {:.4g}..{:.4g}".format(a, *volume.extent(a)) for a in axes)
    beside = {
        "columns": "beside the detector's columns in every view",
        "rows": "above or below every detector row",
        "detector": "beside the detector in every view",
        "samples": "beyond the sampled planes in every direction",
    }[where]
    # stacklevel: this function, check_reach, the reconstruction function, its caller
    warnings.warn(
        f"volume: no ray of the scan reaches it ({ext} lies {beside}), so it comes back all zeros; "
        "check its center and voxel_size against the geometry's units",
        UserWarning,
        stacklevel=4,
    )
