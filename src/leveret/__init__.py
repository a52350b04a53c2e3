"""leveret: fast, quantitative tomographic reconstruction on GPUs and CPUs.

NumPy in, NumPy out; CuPy in, CuPy out. Conventions (frame, array orders,
units) are those of CONVENTIONS.md, summarised in docs/conventions.md.
"""
from . import io, phantom, rabbitct
from .algorithms import fbp, fdk
from .backends import cuda_available
from .geometry import ConeGeometry, ParallelGeometry, VolumeGeometry
from .operators import ConeBackprojection, ParallelBackprojection

__version__ = "0.1.0"

__all__ = ["fbp", "fdk", "ParallelGeometry", "ConeGeometry", "VolumeGeometry",
           "ParallelBackprojection", "ConeBackprojection", "cuda_available", "io", "phantom",
           "rabbitct", "__version__"]
