"""Analytic phantoms with exact (closed-form) line integrals.

Ground truth for the tests of the whole library: projections here are
computed in closed form, never by a numerical projector. 2D phantoms are sums
of ellipses (:class:`EllipsePhantom`), 3D ones sums of ellipsoids
(:class:`EllipsoidPhantom`); both rasterise onto a
:class:`~leveret.geometry.VolumeGeometry` and project exactly for a
:class:`~leveret.geometry.ParallelGeometry`. Any other geometry can use
:meth:`EllipsoidPhantom.line_integrals` (lines given by points and
directions). All lengths are world units (docs/conventions.md).
"""

from .ellipses import Ellipse, EllipsePhantom, disk, random_ellipses, shepp_logan_ellipses
from .ellipsoids import (
    Ellipsoid,
    EllipsoidPhantom,
    ball,
    euler_rotation,
    random_ellipsoids,
    shepp_logan,
    shepp_logan_3d,
)

__all__ = [
    "Ellipse",
    "EllipsePhantom",
    "Ellipsoid",
    "EllipsoidPhantom",
    "ball",
    "disk",
    "euler_rotation",
    "random_ellipses",
    "random_ellipsoids",
    "shepp_logan",
    "shepp_logan_3d",
    "shepp_logan_ellipses",
]
