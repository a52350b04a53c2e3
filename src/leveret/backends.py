"""Which backends exist here, and which one a call gets.

``backend="auto"`` means CUDA when CuPy finds a GPU, else the CPU. Asking for
"cuda" where there is none raises a RuntimeError: never a silent fallback.
"""

from __future__ import annotations

import functools

from . import _validate as v

BACKENDS = ("auto", "cuda", "cpu")


@functools.lru_cache(maxsize=1)
def cuda_status() -> tuple[bool, str]:
    """(available, reason): whether CuPy can run kernels on a GPU here."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install
        return False, f"CuPy is not importable ({type(exc).__name__}: {exc}); install leveret[cuda]"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return False, f"CuPy finds no usable CUDA driver/GPU ({exc})"
    if n == 0:
        return False, "CuPy finds no GPU"
    return True, f"{n} GPU(s)"


def cuda_available() -> bool:
    return cuda_status()[0]


def resolve(backend: str, *arrays) -> str:
    """The backend a call runs on: "cuda" or "cpu".

    CuPy arrays among ``arrays`` make "auto" pick CUDA; a CuPy array with
    ``backend="cpu"`` is an error (the data would have to leave the GPU).
    """
    backend = v.choice("backend", backend, BACKENDS)
    on_gpu = any(type(a).__module__.startswith("cupy") for a in arrays if a is not None)
    if backend == "cpu":
        if on_gpu:
            raise ValueError(
                "backend: 'cpu' was asked for but the input is a CuPy (GPU) array; "
                "pass a NumPy array (cupy.asnumpy) or use backend='cuda'"
            )
        return "cpu"
    if backend == "cuda" or on_gpu:
        ok, reason = cuda_status()
        if not ok:
            raise CudaUnavailable(f"backend='cuda' needs a CUDA GPU: {reason}")
        return "cuda"
    return "cuda" if cuda_available() else "cpu"


class CudaUnavailable(RuntimeError):
    """``backend="cuda"`` was asked for where CuPy finds no usable GPU (the
    message says why): the machine's set-up, not a failure of the call."""


def describe() -> list[dict]:
    """One dict per backend found, for ``leveret info``."""
    import numba
    import numpy as np

    out = [{"backend": "cpu", "threads": numba.get_num_threads(), "numba": numba.__version__, "numpy": np.__version__}]
    ok, reason = cuda_status()
    if not ok:
        out.append({"backend": "cuda", "available": False, "reason": reason})
        return out
    import cupy

    rt = cupy.cuda.runtime
    for dev in range(rt.getDeviceCount()):
        props = rt.getDeviceProperties(dev)
        with cupy.cuda.Device(dev):
            free, total = cupy.cuda.Device(dev).mem_info
        out.append(
            {
                "backend": "cuda",
                "device": dev,
                "available": True,
                "name": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
                "compute_capability": f"{props['major']}.{props['minor']}",
                "multiprocessors": props["multiProcessorCount"],
                "memory_total_gib": round(total / 2**30, 2),
                "memory_free_gib": round(free / 2**30, 2),
                "cupy": cupy.__version__,
                "cuda_runtime": rt.runtimeGetVersion(),
                "cuda_driver": rt.driverGetVersion(),
            }
        )
    return out
