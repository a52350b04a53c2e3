"""Scan and volume geometries (CONVENTIONS.md is the contract)."""
from .parallel import ParallelGeometry
from .volume import VolumeGeometry

__all__ = ["ParallelGeometry", "VolumeGeometry"]
