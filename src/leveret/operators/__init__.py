"""Linear operators over geometries; algorithms use these, never raw kernels."""

from .cone import ConeBackprojection
from .parallel import ParallelBackprojection, parallel_table
from .projector import Projector

__all__ = ["ConeBackprojection", "ParallelBackprojection", "parallel_table", "Projector"]
