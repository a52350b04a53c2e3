"""Reconstruction algorithms, built on operators and filters only."""

from .fdk import fdk
from .helical import helical_fdk
from .iterative import cgls, os_sart, sirt
from .laminography import laminography_fbp
from .parallel_fbp import fbp
from .radon3d import radon3d_fbp, radon3d_forward
from .regularised import fista, operator_norm, pdhg

__all__ = [
    "fbp",
    "fdk",
    "helical_fdk",
    "laminography_fbp",
    "sirt",
    "os_sart",
    "cgls",
    "fista",
    "pdhg",
    "operator_norm",
    "radon3d_fbp",
    "radon3d_forward",
]
