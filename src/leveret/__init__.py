"""leveret: fast, quantitative tomographic reconstruction on GPUs and CPUs.

NumPy in, NumPy out; CuPy in, CuPy out. The conventions (frame, array
orders, angles, units) are those of docs/conventions.md.
"""

from .execution import signals as _signals

if _signals.is_command():  # a Ctrl-C while the command starts: one line, no traceback
    _signals.quiet_start()

from . import execution, io, phantom, rabbitct  # noqa: E402
from .algorithms import (
    cgls,
    fbp,
    fdk,
    fista,
    helical_fdk,
    laminography_fbp,
    os_sart,
    pdhg,  # noqa: E402
    radon3d_fbp,
    radon3d_forward,
    sirt,
)
from .backends import cuda_available
from .cuda.devices import DeviceSet
from .geometry import ConeGeometry, ParallelGeometry, ParallelVecGeometry, RadonGeometry, VolumeGeometry
from .operators import ConeBackprojection, ParallelBackprojection, Projector
from . import datasets  # small real scans for examples and tests

__version__ = "0.1.0"

__all__ = [
    "fbp",
    "fdk",
    "helical_fdk",
    "laminography_fbp",
    "radon3d_fbp",
    "radon3d_forward",
    "sirt",
    "os_sart",
    "cgls",
    "fista",
    "pdhg",
    "ParallelGeometry",
    "ParallelVecGeometry",
    "ConeGeometry",
    "RadonGeometry",
    "VolumeGeometry",
    "ParallelBackprojection",
    "ConeBackprojection",
    "Projector",
    "DeviceSet",
    "cuda_available",
    "datasets",
    "execution",
    "io",
    "phantom",
    "rabbitct",
    "__version__",
]
