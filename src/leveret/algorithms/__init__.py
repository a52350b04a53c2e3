"""Reconstruction algorithms, built on operators and filters only."""
from .fdk import fdk
from .parallel_fbp import fbp

__all__ = ["fbp", "fdk"]
