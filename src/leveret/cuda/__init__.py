"""CUDA kernels (``.cu`` files) and their CuPy launchers, side by side.

Nothing here imports CuPy at import time: the package works without a GPU.
"""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def device_properties(device: int) -> dict:
    """CUDA device ``device``'s properties (``cudaGetDeviceProperties``), asked
    once per process: the query takes about a millisecond, as long as a small
    back-projection, and the answer never changes."""
    import cupy
    return dict(cupy.cuda.runtime.getDeviceProperties(device))


def gpu_name(device: int | None = None) -> str:
    """The name of CUDA device ``device`` (None: the current one), the key of
    the tuning cache (:mod:`leveret.cuda.tuning`)."""
    import cupy
    name = device_properties(cupy.cuda.Device().id if device is None else device)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)
