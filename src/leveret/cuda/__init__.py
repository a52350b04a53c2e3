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


def seconds_per_run(run, repeats: int = 3) -> float:
    """Mean GPU seconds of ``run()`` on the current stream: one call first
    (compiles, allocates), then ``repeats`` calls between two CUDA events."""
    import cupy

    run()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(repeats):
        run()
    stop.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) * 1e-3 / repeats


def gpu_free_bytes() -> int:
    """Free device memory plus what CuPy's pool holds but does not use."""
    import cupy

    free, _ = cupy.cuda.Device().mem_info
    pool = cupy.get_default_memory_pool()
    return free + pool.free_bytes()
