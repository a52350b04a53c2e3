"""Scan and volume geometries (CONVENTIONS.md is the contract)."""
from .cone import ConeGeometry
from .parallel import ParallelGeometry
from .volume import VolumeGeometry

__all__ = ["ConeGeometry", "ParallelGeometry", "VolumeGeometry"]
