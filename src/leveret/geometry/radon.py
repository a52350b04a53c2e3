"""3D Radon (plane-integral) geometry, as in pulse EPR imaging: ``RadonGeometry``."""

from __future__ import annotations

import math

import numpy as np

from .. import _validate as v
from ._frozen import Frozen
from .volume import VolumeGeometry

#: Largest accepted deviation of a direction's length from 1.
UNIT_TOLERANCE = 1e-6
#: Directions closer than this (chord length on the unit sphere) are duplicates.
DUPLICATE_TOLERANCE = 1e-9


def unit_vectors(name: str, value) -> np.ndarray:
    """``value`` as a read-only ``(n, 3)`` float64 array of finite unit vectors.

    Non-unit vectors are refused rather than normalised: a plane
    ``{x . n = t}`` with ``|n| != 1`` is a different plane, so silently
    rescaling would move every sample.
    """
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected an (n, 3) array of unit vectors, got {type(value).__name__}") from None
    if arr.ndim == 1 and arr.shape == (3,):
        arr = arr.reshape(1, 3)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise ValueError(f"{name}: expected an (n, 3) array of unit vectors (x, y, z last), got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name}: expected at least one direction, got an empty array")
    v.check_finite_array(name, arr)
    norm = np.sqrt((arr * arr).sum(axis=1))
    err = np.abs(norm - 1.0)
    if err.max() > UNIT_TOLERANCE:
        q = int(np.argmax(err))
        raise ValueError(
            f"{name}: expected unit vectors (| |n| - 1 | <= {UNIT_TOLERANCE:g}), got |n| = {norm[q]:.9g} at index {q}"
        )
    arr.setflags(write=False)
    return arr


def _first_duplicate(points: np.ndarray, tol: float):
    """The first pair (i, j), i < j, of rows closer than ``tol``, or None."""
    from scipy.spatial import cKDTree

    pairs = cKDTree(points).query_pairs(tol, output_type="ndarray")
    if pairs.size == 0:
        return None
    pairs = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]
    return int(pairs[0, 0]), int(pairs[0, 1])


class RadonGeometry(Frozen):
    """Plane integrals of a 3D object along many directions (3D Radon transform).

    Parameters
    ----------
    directions : array_like, (n_dirs, 3)
        Unit normals ``n = (sin th cos ph, sin th sin ph, cos th)`` in world
        (x, y, z) order, any order, no two equal (nor antipodal when
        ``hemisphere`` is True). Lengths must be 1 within 1e-6.
    n_samples : int
        Samples per projection.
    spacing : float
        Sample pitch along ``t``, in the length unit of the volume.
    hemisphere : bool
        Whether the directions stand for the whole sphere through
        ``p(t, -n) = p(-t, n)``. False (default): they cover the sphere
        themselves and :meth:`direction_weights` sums to 4 pi. True: each
        direction also stands for its antipode, the weights sum to 2 pi, and
        the reconstruction counts each projection twice.

    Notes
    -----
    Sample ``k`` sits at ``t = (k - (n_samples - 1)/2) spacing`` and holds
    ``p(t, n)``, the integral of f over the plane ``{x . n = t}`` (value x
    area, i.e. value x length^2). Projections are ``(n_dirs, n_samples)``.
    """

    __slots__ = ("directions", "n_samples", "spacing", "hemisphere")
    _fields = __slots__

    def __init__(self, directions, n_samples, spacing=1.0, hemisphere=False):
        directions = unit_vectors("directions", directions)
        n_samples = v.positive_int("n_samples", n_samples)
        spacing = v.positive_float("spacing", spacing)
        if not isinstance(hemisphere, (bool, np.bool_)):
            raise ValueError(f"hemisphere: expected True or False, got {hemisphere!r}")
        hemisphere = bool(hemisphere)
        # Duplicates would share one Voronoi cell (the quadrature is undefined)
        # and usually mean a bug in the caller's direction list. On a
        # hemisphere, n and -n are the same plane family, so they clash too.
        pts = np.concatenate([directions, -directions]) if hemisphere else directions
        pair = _first_duplicate(pts, DUPLICATE_TOLERANCE)
        if pair is not None:
            n = directions.shape[0]
            i, j = pair[0] % n, pair[1] % n
            what = "antipodal" if pair[1] >= n > pair[0] else "duplicate"
            raise ValueError(
                f"directions: expected distinct directions"
                f"{' (no antipodal pairs with hemisphere=True)' if hemisphere else ''}, "
                f"got {what} directions at indices {min(i, j)} and {max(i, j)}: "
                f"{tuple(float(x) for x in directions[i])}"
            )
        for name, value in zip(self._fields, (directions, n_samples, spacing, hemisphere)):
            self._set(name, value)

    # -- constructors ------------------------------------------------------------
    @classmethod
    def from_angles(cls, theta, phi, n_samples, spacing=1.0, hemisphere=False) -> "RadonGeometry":
        """Directions from polar angles ``theta`` and azimuths ``phi`` (radians, same length)."""
        theta = v.finite_vector("theta", theta)
        phi = v.finite_vector("phi", phi, length=theta.size)
        st = np.sin(theta)
        return cls(
            np.stack([st * np.cos(phi), st * np.sin(phi), np.cos(theta)], axis=1), n_samples, spacing, hemisphere
        )

    @classmethod
    def uniform(cls, n_dirs, n_samples, spacing=1.0, hemisphere=False) -> "RadonGeometry":
        """``n_dirs`` directions of equal solid angle (a Fibonacci spiral).

        Construction: direction ``q`` has ``cos th = 1 - (q + 1/2) h`` with
        ``h = 2 / n_dirs`` (sphere) or ``1 / n_dirs`` (hemisphere ``z > 0``),
        and ``ph = q * pi (3 - sqrt 5)`` (the golden angle). Since
        ``d(solid angle) = d(cos th) d ph``, equal steps in ``cos th`` give each
        direction a band of equal area, ``4 pi / n_dirs`` (``2 pi / n_dirs``),
        and the golden-angle turn spreads the azimuths so that the Voronoi
        cells are nearly equal (within 7 %): the uniform solid-angle
        sampling of EPR imaging, for any count. On a hemisphere the spiral
        and its mirror image (the antipodes) do not interleave at the
        equator, so there the cells vary by up to 25 %;
        :meth:`direction_weights` measures them.
        """
        n = v.positive_int("n_dirs", n_dirs)
        h = (1.0 if hemisphere else 2.0) / n
        q = np.arange(n)
        cos_t = 1.0 - (q + 0.5) * h
        sin_t = np.sqrt(np.maximum(1.0 - cos_t * cos_t, 0.0))
        ph = np.mod(q * math.pi * (3.0 - math.sqrt(5.0)), 2.0 * math.pi)
        return cls(np.stack([sin_t * np.cos(ph), sin_t * np.sin(ph), cos_t], axis=1), n_samples, spacing, hemisphere)

    @classmethod
    def grid(cls, n_theta, n_phi, n_samples, spacing=1.0, hemisphere=False) -> "RadonGeometry":
        """An equal linear-angle grid: ``n_theta`` polar by ``n_phi`` azimuthal angles.

        ``th_i = (i + 1/2) T / n_theta`` with ``T = pi`` (sphere) or ``pi/2``
        (hemisphere ``z > 0``), ``ph_j = 2 pi j / n_phi``; cell centres, so
        no direction sits on a pole (a pole would repeat ``n_phi`` times).
        Directions are ordered theta-major: ``q = i * n_phi + j``.
        """
        n_theta = v.positive_int("n_theta", n_theta)
        n_phi = v.positive_int("n_phi", n_phi)
        top = math.pi / 2 if hemisphere else math.pi
        th = (np.arange(n_theta) + 0.5) * top / n_theta
        ph = 2.0 * math.pi * np.arange(n_phi) / n_phi
        th, ph = np.meshgrid(th, ph, indexing="ij")
        return cls.from_angles(th.ravel(), ph.ravel(), n_samples, spacing, hemisphere)

    # -- shapes ---------------------------------------------------------------------
    @property
    def n_dirs(self) -> int:
        return self.directions.shape[0]

    @property
    def projection_shape(self) -> tuple[int, int]:
        """``(n_dirs, n_samples)``."""
        return (self.n_dirs, self.n_samples)

    @property
    def total_solid_angle(self) -> float:
        """4 pi, or 2 pi when the directions stand for a hemisphere."""
        return (2.0 if self.hemisphere else 4.0) * math.pi

    def angles(self) -> tuple[np.ndarray, np.ndarray]:
        """``(theta, phi)`` of every direction, radians; theta in [0, pi], phi in (-pi, pi]."""
        d = self.directions
        return np.arccos(np.clip(d[:, 2], -1.0, 1.0)), np.arctan2(d[:, 1], d[:, 0])

    def sample_positions(self) -> np.ndarray:
        """``t`` of every sample, length units: ``(k - (n_samples-1)/2) spacing``."""
        return (np.arange(self.n_samples) - (self.n_samples - 1) / 2) * self.spacing

    def project_samples(self, points) -> np.ndarray:
        """Sample coordinate (samples, centres at integers) of world points.

        ``points`` is ``(..., 3)`` in (x, y, z) order; returns
        ``(n_dirs,) + points.shape[:-1]``.
        """
        p = np.asarray(points, dtype=np.float64)
        if p.ndim == 0 or p.shape[-1] != 3:
            raise ValueError(f"points: expected shape (..., 3), got {p.shape}")
        t = np.tensordot(self.directions, p, axes=([1], [p.ndim - 1]))
        return t / self.spacing + (self.n_samples - 1) / 2

    def default_volume(self) -> VolumeGeometry:
        """The cube the samples cover: ``n`` voxels of ``spacing`` a side, centred
        on the origin, with ``n = floor(n_samples / sqrt 3)`` so that every
        voxel centre projects inside the sample range in every direction."""
        n = max(1, int(math.floor(self.n_samples / math.sqrt(3.0))))
        return VolumeGeometry((n, n, n), self.spacing)

    # -- quadrature -------------------------------------------------------------------
    def direction_weights(self) -> np.ndarray:
        """Solid-angle quadrature weights (steradians), one per direction.

        Each direction gets the area of its spherical Voronoi cell
        (``scipy.spatial.SphericalVoronoi``): the part of the sphere closer
        to it than to any other direction. With ``hemisphere=True`` the cells
        are those of the directions together with their antipodes (a set
        symmetric under ``n -> -n``, so a direction's cell and its antipode's
        have the same area), and each direction gets its own cell. The
        weights therefore sum to :attr:`total_solid_angle`: 4 pi, or 2 pi on a
        hemisphere. Sets too small or too flat for a Voronoi diagram (fewer
        than 4 points on the sphere, or all on one great circle) get equal
        weights.
        """
        from scipy.spatial import SphericalVoronoi

        d = self.directions
        pts = np.concatenate([d, -d]) if self.hemisphere else d
        n = self.n_dirs
        if pts.shape[0] < 4 or np.linalg.matrix_rank(pts, tol=1e-9) < 3:
            return np.full(n, self.total_solid_angle / n)
        try:
            areas = SphericalVoronoi(pts, radius=1.0, center=np.zeros(3)).calculate_areas()
        except (ValueError, RuntimeError):  # Qhull refuses degenerate sets
            return np.full(n, self.total_solid_angle / n)
        w = areas[:n]
        # Voronoi areas sum to 4 pi up to rounding; make the sum exact.
        return w * (self.total_solid_angle / w.sum())

    # -- presentation -------------------------------------------------------------------
    def __repr__(self) -> str:
        th, _ = self.angles()
        half = "hemisphere" if self.hemisphere else "sphere"
        lo, hi = self.sample_positions()[[0, -1]]
        return (
            f"RadonGeometry({self.n_dirs} directions on the {half}, theta "
            f"{np.degrees(th.min()):g} to {np.degrees(th.max()):g} deg, "
            f"n_samples={self.n_samples}, spacing={self.spacing:g}, t in [{lo:g}, {hi:g}])"
        )
