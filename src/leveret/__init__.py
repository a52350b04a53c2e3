"""leveret: fast, quantitative tomographic reconstruction on GPUs and CPUs.

NumPy in, NumPy out; CuPy in, CuPy out. Conventions (frame, array orders,
units) are those of CONVENTIONS.md, summarised in docs/conventions.md.
"""
from . import io, phantom
from .algorithms import fbp
from .backends import cuda_available
from .geometry import ParallelGeometry, VolumeGeometry
from .operators import ParallelBackprojection

__version__ = "0.1.0"

__all__ = ["fbp", "ParallelGeometry", "VolumeGeometry", "ParallelBackprojection",
           "cuda_available", "io", "phantom", "__version__"]
