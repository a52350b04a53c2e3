"""Reconstruction algorithms, built on operators and filters only."""
from .parallel_fbp import fbp

__all__ = ["fbp"]
