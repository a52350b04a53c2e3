"""CPU kernels (Numba, multi-threaded): the reference every GPU kernel is checked against."""

from __future__ import annotations

import functools
import threading

# Numba's "workqueue" threading layer (the fallback where neither TBB nor
# OpenMP is available, or chosen with NUMBA_THREADING_LAYER) aborts the
# process when two Python threads run parallel kernels at once; with it,
# calls into the kernels take turns.
_SERIAL = threading.Lock()


def _layer_is_threadsafe() -> bool:
    import numba

    try:
        return numba.threading_layer() != "workqueue"
    except ValueError:  # no parallel kernel ran yet: what would be chosen?
        requested = str(numba.config.THREADING_LAYER).lower()
        if requested == "workqueue":
            return False
        if requested in ("tbb", "omp", "safe", "threadsafe"):
            return True
        for pool in ("tbbpool", "omppool"):
            try:
                __import__(f"numba.np.ufunc.{pool}")
                return True
            except ImportError:
                pass
        return False


def serialized(kernel):
    """Decorator for a function that launches Numba parallel kernels: calls
    from several threads run one at a time when the threading layer is not
    thread-safe, and concurrently otherwise."""

    @functools.wraps(kernel)
    def wrapper(*args, **kwargs):
        if _layer_is_threadsafe():
            return kernel(*args, **kwargs)
        with _SERIAL:
            return kernel(*args, **kwargs)

    return wrapper
