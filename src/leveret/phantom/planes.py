"""Exact plane integrals of ellipsoid phantoms (the 3D Radon transform).

Ground truth for :class:`~leveret.geometry.RadonGeometry`: each value is the
integral of the phantom over the plane ``{x . n = t}`` in closed form
(value x area), never a numerical projection.

For an ellipsoid ``|D^-1 R^T (x - c)| <= 1`` with ``D = diag(a, b, c)``, the
substitution ``x = c + R D u`` maps it to the unit ball (Jacobian ``abc``) and
the plane to ``{w . u = t - n . c}`` with ``w = D R^T n``. The unit ball's
section at distance ``s`` from its centre is a disk of area ``pi (1 - s^2)``,
and the delta function of the plane scales by ``1/|w|``, so

    p(t, n) = value * (abc / |w|) * pi * (1 - s^2),   s = (t - n . c) / |w|,

for ``|s| < 1`` and 0 otherwise. A ball of radius R gives ``pi (R^2 - t^2)``.
"""

from __future__ import annotations

import math

import numpy as np

from ..geometry.radon import RadonGeometry, unit_vectors
from . import _common as common


def ellipsoid_plane_integrals(ellipsoid, directions: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Plane integrals of one :class:`~leveret.phantom.Ellipsoid`; unchecked.

    ``directions`` is ``(..., 3)`` unit vectors and ``t`` broadcasts against
    ``directions[..., 0]``; returns that broadcast shape, float64.
    """
    a, b, c = ellipsoid.semi_axes
    w = (directions @ ellipsoid.rotation) * np.array([a, b, c])  # D R^T n, row-wise
    rho = np.sqrt((w * w).sum(axis=-1))
    s = (t - directions @ np.asarray(ellipsoid.center)) / rho
    return ellipsoid.value * (a * b * c / rho) * math.pi * np.maximum(1.0 - s * s, 0.0)


def plane_integrals(phantom, directions, t) -> np.ndarray:
    """Exact integrals of an ellipsoid phantom over the planes ``{x . n = t}``.

    Parameters
    ----------
    phantom : EllipsoidPhantom
    directions : array_like, (..., 3)
        Unit normals ``n`` in (x, y, z) order (length 1 within 1e-6).
    t : array_like
        Signed plane offsets from the origin, length units; broadcasts
        against ``directions[..., 0]``.

    Returns
    -------
    numpy.ndarray
        float64 of the broadcast shape: value x area (value x length^2).
    """
    d = common.finite_array("directions", directions)
    if d.ndim == 0 or d.shape[-1] != 3:
        raise ValueError(f"directions: expected an array of shape (..., 3) (x, y, z last), got shape {d.shape}")
    unit_vectors("directions", d.reshape(-1, 3))  # the checks; the array stays as given
    t = common.finite_array("t", t)
    try:
        shape = np.broadcast_shapes(d.shape[:-1], t.shape)
    except ValueError:
        raise ValueError(
            f"directions, t: expected shapes that broadcast, got {d.shape} (directions, (..., 3)) and {t.shape}"
        ) from None
    out = np.zeros(shape)
    for e in phantom.ellipsoids:
        out += ellipsoid_plane_integrals(e, d, t)
    return out


def project_radon(phantom, geometry: RadonGeometry) -> np.ndarray:
    """Exact projections ``(n_dirs, n_samples)`` float64 of an ellipsoid phantom.

    Sample ``[q, k]`` is the plane integral at ``n = geometry.directions[q]``
    and ``t = (k - (n_samples-1)/2) spacing``: the value at the sample centre.
    """
    if not isinstance(geometry, RadonGeometry):
        raise TypeError(f"geometry: expected a RadonGeometry, got {type(geometry).__name__}")
    common.check_projection_memory(geometry, copies=4)
    return plane_integrals(phantom, geometry.directions[:, None, :], geometry.sample_positions()[None, :])
