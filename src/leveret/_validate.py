"""Argument checks shared by every module.

Each check raises a ValueError (a TypeError for what is not numbers at all)
whose message starts with the argument's name and says what was expected and
what came, as docs/conventions.md asks.
"""

from __future__ import annotations

import functools
import numbers
from typing import Sequence

import numpy as np


def positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name}: expected a positive integer, got {value}")
    return int(value)


def finite_float(name: str, value) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a finite number, got {value!r}") from None
    if not np.isfinite(out):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    return out


#: Positive lengths and factors are squared and inverted (filters, ray
#: weights): beyond this range that underflows to 0 or overflows float64.
POSITIVE_RANGE = (1e-150, 1e150)


def positive_float(name: str, value) -> float:
    out = finite_float(name, value)
    if out <= 0:
        raise ValueError(f"{name}: expected a positive number, got {value!r}")
    lo, hi = POSITIVE_RANGE
    if not lo <= out <= hi:
        raise ValueError(
            f"{name}: expected a positive number between {lo:g} and {hi:g} (it is squared and inverted), got {value!r}"
        )
    return out


def per_axis(name: str, value, ndim: int, *, positive: bool) -> tuple[float, ...]:
    """A scalar or a sequence of ``ndim`` numbers, as a tuple of floats."""
    check = positive_float if positive else finite_float
    if np.ndim(value) == 0:
        return (check(name, value),) * ndim
    seq = list(np.asarray(value, dtype=object).ravel())
    if len(seq) != ndim:
        raise ValueError(
            f"{name}: expected a scalar or {ndim} values (one per axis, array order), got {len(seq)} values"
        )
    return tuple(check(f"{name}[{i}]", v) for i, v in enumerate(seq))


def finite_vector(name: str, value, *, length: int | None = None, allow_empty: bool = False) -> np.ndarray:
    """A read-only float64 1D array of finite values."""
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a 1D array of numbers, got {type(value).__name__}") from None
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1D array, got shape {arr.shape}")
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name}: expected at least one value, got an empty array")
    if length is not None and arr.size != length:
        raise ValueError(f"{name}: expected {length} values, got {arr.size}")
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ValueError(f"{name}: expected finite values, got {arr[bad][0]} at index {int(np.flatnonzero(bad)[0])}")
    arr.setflags(write=False)
    return arr


def shape_tuple(name: str, value, ndims: Sequence[int]) -> tuple[int, ...]:
    if np.ndim(value) == 0:
        raise ValueError(f"{name}: expected a tuple of {' or '.join(map(str, ndims))} sizes, got {value!r}")
    seq = tuple(value)
    if len(seq) not in ndims:
        raise ValueError(f"{name}: expected {' or '.join(map(str, ndims))} sizes, got {len(seq)}: {seq!r}")
    return tuple(positive_int(f"{name}[{i}]", v) for i, v in enumerate(seq))


#: Largest magnitude accepted per working precision: a reconstruction sums
#: filter taps and rays (thousands to millions of terms) of the input, so
#: larger values overflow (float32's largest is 3.4e38) into Inf and NaN.
MAX_MAGNITUDE = {2: 1e30, 4: 1e30, 8: 1e290}


def numeric_dtype(name: str, arr) -> None:
    """Raise naming ``name`` unless ``arr`` holds real numbers: TypeError for
    objects, strings and records; ValueError for complex numbers (whose
    imaginary part would be dropped without a word)."""
    dtype = getattr(arr, "dtype", None)
    dtype = np.dtype(dtype if dtype is not None else np.asarray(arr).dtype)
    if dtype.kind == "c":
        raise ValueError(
            f"{name}: expected real numbers, got complex dtype {dtype}; pass .real or abs() if that is what you mean"
        )
    if dtype.kind not in "biuf":
        raise TypeError(f"{name}: expected an array of real numbers, got dtype {dtype}")


def check_finite_array(name: str, arr) -> None:
    """Raise naming ``name`` if ``arr`` (NumPy or CuPy) is not real numbers
    (:func:`numeric_dtype`), holds NaN or Inf, or holds values so large that
    sums of them overflow its precision (:data:`MAX_MAGNITUDE`)."""
    numeric_dtype(name, arr)
    if arr.dtype.kind not in "f" or arr.size == 0:
        return  # integers are finite, and far below the limits
    xp = array_module(arr)
    limit = MAX_MAGNITUDE.get(arr.dtype.itemsize, 1e30)
    if xp is not np and count_outside(arr, limit) == 0:
        return  # one pass and one wait on the device; the message below needs more
    # min and max propagate NaN and show Inf: two reductions, no temporary array.
    lo, hi = float(xp.min(arr)), float(xp.max(arr))
    if not (np.isfinite(lo) and np.isfinite(hi)):
        n_nan = int(xp.isnan(arr).sum())
        n_inf = int(xp.isinf(arr).sum())
        what = ", ".join(f"{n} {kind}" for n, kind in ((n_nan, "NaN"), (n_inf, "Inf")) if n)
        raise ValueError(
            f"{name}: expected finite values, got {what} value(s)"
            + (
                f" (values beyond {arr.dtype}'s range, {float(np.finfo(arr.dtype).max):.3g}, "
                "also become Inf when converted)"
                if n_inf
                else ""
            )
        )
    big = max(-lo, hi)
    if big > limit:
        raise ValueError(
            f"{name}: values up to {big:.3g} are too large: sums of them overflow "
            f"{arr.dtype} (accepted up to {limit:.3g}); rescale the data"
        )


def check_magnitude(name: str, arr, dtype) -> None:
    """Raise naming ``name`` if ``arr`` has values too large for computing in
    ``dtype`` (e.g. float64 data of 1e300 for a float32 reconstruction)."""
    numeric_dtype(name, arr)
    if arr.dtype.kind != "f" or arr.size == 0 or np.dtype(dtype).itemsize >= arr.dtype.itemsize:
        return
    xp = array_module(arr)
    lo, hi = float(xp.min(arr)), float(xp.max(arr))
    limit = MAX_MAGNITUDE.get(np.dtype(dtype).itemsize, 1e30)
    if np.isfinite(lo) and np.isfinite(hi) and max(-lo, hi) > limit:
        raise ValueError(
            f"{name}: values up to {max(-lo, hi):.3g} do not fit the {np.dtype(dtype)} "
            f"computation (accepted up to {limit:.3g}); rescale the data"
        )


def writable_output(name: str, out) -> None:
    """Raise naming ``name`` if ``out`` (NumPy) cannot be written into."""
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        raise ValueError(f"{name}: expected a writable array, got a read-only one")


def check_allocation(
    name: str,
    nbytes: int,
    what: str = "the result",
    hint: str = "use a smaller volume or the out-of-core path (leveret.execution.reconstruct_to_file, 'leveret recon')",
) -> None:
    """Raise naming ``name`` if ``nbytes`` exceed the memory this process may
    use now (available memory, or a container's limit), instead of NumPy's
    MemoryError after a long wait or the kernel's out-of-memory kill."""
    from .resources import format_bytes, host_available_bytes

    available = host_available_bytes()
    if int(nbytes) > available:
        raise ValueError(
            f"{name}: {what} would take {format_bytes(int(nbytes))} but only "
            f"{format_bytes(available)} of memory are available; {hint}"
        )


def add_nonfinite_count(counter, arr) -> None:
    """``counter += number of NaN/Inf in arr``, and of values beyond the
    float32 limit of :data:`MAX_MAGNITUDE` (sums of them overflow), on the
    GPU without a host synchronisation (read ``counter`` once at the end and
    report it with :func:`nonfinite_message`): one fused reduction that reads
    ``arr`` once."""
    counter += _count_outside_on_device(arr, MAX_MAGNITUDE[4])


def nonfinite_message(name: str, n_bad: int) -> str:
    """The error for ``n_bad`` values counted by :func:`add_nonfinite_count`."""
    return (
        f"{name}: expected finite values of magnitude up to {MAX_MAGNITUDE[4]:.0e}, got {n_bad} NaN, Inf "
        "or larger value(s)"
    )


def count_outside(arr, limit: float) -> int:
    """How many values of ``arr`` (NumPy or CuPy, float) are NaN, Inf or
    beyond ``limit`` in magnitude: on a GPU one pass of a CuPy reduction
    kernel (no array-sized temporary for contiguous input), one wait."""
    if array_module(arr) is np:
        a = np.abs(arr)
        return int(arr.size - np.count_nonzero(a <= limit))  # NaN compares False
    if arr.size == 0:
        return 0
    return int(_count_outside_on_device(arr, limit))


def _count_outside_on_device(arr, limit: float):
    """:func:`count_outside` of a CuPy array as a 0-d int64 CuPy array (no wait)."""
    return reduce_on_device(_outside_kernel(), (arr,), (np.float64(limit),))


def reduce_on_device(kernel, arrays, params=(), *, combine: str = "sum"):
    """A ``cupy.ReductionKernel`` (inputs ``arrays`` then ``params``) over every
    element of the same-sized CuPy ``arrays``, as a 0-d CuPy array (no wait).
    CuPy reduces to one value in one block (one SM: some 5 GB/s): the rows of
    a 2D view are reduced instead (a block each, every SM busy), then their
    results and the tail's are combined ("sum" or "max", as the kernel's)."""
    import cupy

    flats = [a.ravel() for a in arrays]
    size = flats[0].size
    rows = min(REDUCE_ROWS, size)
    body = size - size % rows
    parts = kernel(*(f[:body].reshape(rows, -1) for f in flats), *params, axis=1)
    total = parts.sum() if combine == "sum" else parts.max()
    if body < size:
        tail = kernel(*(f[body:] for f in flats), *params, axis=None)
        total = total + tail if combine == "sum" else cupy.maximum(total, tail)
    return total


#: Rows of the 2D view :func:`reduce_on_device` reduces.
REDUCE_ROWS = 4096


@functools.lru_cache(maxsize=1)
def _outside_kernel():
    import cupy

    bad = "(isfinite((double)x) && fabs((double)x) <= limit) ? 0 : 1"
    return cupy.ReductionKernel("T x, float64 limit", "int64 y", bad, "a + b", "y = a", "0", "leveret_count_outside")


def array_module(arr):
    """numpy or cupy, whichever owns ``arr``."""
    mod = type(arr).__module__
    if mod.startswith("cupy"):
        import cupy

        return cupy
    return np


def choice(name: str, value, options: Sequence[str]) -> str:
    if not isinstance(value, str) or value.lower() not in options:
        raise ValueError(f"{name}: expected one of {', '.join(map(repr, options))}, got {value!r}")
    return value.lower()


def real_array(name: str, arr, shape, layout: str, source: str = "the geometry"):
    """``arr`` (NumPy, CuPy, or anything np.asarray takes) of ``shape`` and a real
    dtype; ``layout`` names the axes, e.g. "(n_angles, n_rows, n_cols)"."""
    if not hasattr(arr, "shape") or not hasattr(arr, "dtype"):
        arr = np.asarray(arr)
    if tuple(arr.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {layout} = {tuple(shape)} from {source}, got {tuple(arr.shape)}")
    numeric_dtype(name, arr)
    return arr


# -- the one precision vocabulary (NumPy dtype names) --------------------------------------------


def precision(value, options: Sequence[str], name: str = "precision") -> str:
    """``value`` as one of ``options`` (NumPy dtype names: "float32",
    "float64", "float16"; a NumPy dtype is taken by its name)."""
    if not isinstance(value, str):
        try:
            value = np.dtype(value).name
        except TypeError:
            pass
    return choice(name, value, options)
