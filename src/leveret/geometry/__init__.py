"""Scan and volume geometries (docs/conventions.md is the contract)."""

from .cone import ConeGeometry
from .parallel import ParallelGeometry
from .parallel_vec import ParallelVecGeometry
from .radon import RadonGeometry
from .volume import VolumeGeometry, as_image_rows

__all__ = [
    "ConeGeometry",
    "ParallelGeometry",
    "ParallelVecGeometry",
    "RadonGeometry",
    "VolumeGeometry",
    "as_image_rows",
]
