"""Linear operators over geometries; algorithms use these, never raw kernels."""
from .parallel import ParallelBackprojection, parallel_table

__all__ = ["ParallelBackprojection", "parallel_table"]
