"""Iterative reconstruction in out-of-core runs and the command line: the
methods' names and arguments (:func:`check`), the memory one run holds
(:func:`working_bytes`), one run (:func:`run`) and a parallel-beam slab as
independent 2D problems, one per slice (:func:`slices`).

In parallel beam every slice is its own 2D problem: its sinogram is the
detector row at its height (linearly interpolated between rows, as FBP
takes it), and SIRT, CGLS, FISTA or PDHG runs on it with a 2D
:class:`leveret.Projector`; FISTA's and PDHG's total variation is then 2D,
within the slice. So a slab's slices equal those of any other cut of the
volume, and the slab plan, a resume or a Dask cluster does not change the
result. A cone-beam volume has no such split: its iterative reconstruction
takes the whole volume and all projections at once.
"""

from __future__ import annotations

import logging
import math
from types import SimpleNamespace

import numpy as np

log = logging.getLogger(__name__)

#: What ``method=`` takes: "fbp" is the analytic method (FBP in parallel
#: beam, FDK in cone beam); the others iterate.
METHODS = ("fbp", "sirt", "cgls", "fista", "pdhg")
ITERATIVE = METHODS[1:]
#: The methods with a total-variation term (``tv``).
REGULARISED = ("fista", "pdhg")


def check(method: str = "fbp", iterations=None, tv=None, nonnegative: bool = False) -> dict:
    """The iterative method's arguments, checked: ``{}`` for "fbp", else
    ``{"method", "iterations", "tv", "nonnegative"}`` (``tv`` None for SIRT and CGLS).

    Raises ValueError naming the argument: an unknown method, ``iterations``
    missing or not positive for an iterative method or given for "fbp",
    ``tv`` missing, negative or not finite for FISTA and PDHG or given for
    another method, ``nonnegative`` with "fbp" or CGLS (unconstrained).
    """
    if method not in METHODS:
        raise ValueError(f"method: expected one of {', '.join(METHODS)}, got {method!r}")
    if method == "fbp":
        for name, value in (("iterations", iterations), ("tv", tv)):
            if value is not None:
                raise ValueError(
                    f"{name}: applies to the iterative methods ({', '.join(ITERATIVE)}), not to method='fbp'"
                )
        if nonnegative:
            raise ValueError("nonnegative: applies to sirt, fista and pdhg, not to fbp")
        return {}
    if iterations is None:
        raise ValueError(f"iterations: method {method!r} needs a number of iterations")
    if isinstance(iterations, bool) or not isinstance(iterations, (int, np.integer)) or iterations < 1:
        raise ValueError(f"iterations: expected a positive integer, got {iterations!r}")
    if method in REGULARISED:
        if tv is None:
            raise ValueError(
                f"tv: method {method!r} needs the weight of its total variation (>= 0; "
                "its scale is the data's, see docs/regularised.md)"
            )
        tv = float(tv)
        if not (math.isfinite(tv) and tv >= 0):
            raise ValueError(f"tv: expected a finite weight >= 0, got {tv:g}")
    elif tv is not None:
        raise ValueError(f"tv: only fista and pdhg have a total-variation term, not {method}")
    if nonnegative and method == "cgls":
        raise ValueError("nonnegative: cgls is unconstrained (a clip breaks its conjugacy); use sirt, fista or pdhg")
    return {"method": method, "iterations": int(iterations), "tv": tv, "nonnegative": bool(nonnegative)}


def working_bytes(method: str, volume_shape, projection_shape, *, backend: str, itemsize: int = 4) -> int:
    """Bytes one run of ``method`` holds on ``backend`` (on the GPU for
    "cuda", else in host memory): the method's arrays, the data's working
    copy and the result included, and the projector's work space.

    FISTA and PDHG: :func:`leveret.algorithms.regularised.memory_bytes`,
    and on the CPU the float64 chunks of their sums (two chunks of at most
    ``CHUNK`` values). SIRT: 3 volumes (the iterate, the column weights, the
    update) and 3 projection sets (the data, the residual, the row weights);
    CGLS: 4 volumes (the iterate, the search direction, ``A^T r``, the step's
    temporary) and 3 projection sets (the data, the residual, ``A p``); both
    plus, on the CPU, the residual in float64 for its norm.
    The projector: on the CPU its ray tables (48 bytes per projection value)
    and one private volume per thread for ``A.T``; on CUDA one volume and one
    projection set (the structured paths' copies).
    """
    from ..algorithms.regularised import CHUNK, memory_bytes

    n_vol, n_proj = math.prod(volume_shape), math.prod(projection_shape)
    on_host = backend != "cuda"
    if method in REGULARISED:
        shapes = SimpleNamespace(
            volume=SimpleNamespace(shape=tuple(volume_shape)),
            projection_shape=tuple(projection_shape),
            dtype=np.dtype(f"f{itemsize}"),
        )
        arrays = memory_bytes(method, shapes) + on_host * 2 * 8 * min(max(n_vol, n_proj), CHUNK)
    elif method in ("sirt", "cgls"):
        arrays = itemsize * ((3 if method == "sirt" else 4) * n_vol + 3 * n_proj) + on_host * 8 * n_proj
    else:
        raise ValueError(f"method: expected one of {', '.join(ITERATIVE)}, got {method!r}")
    if backend == "cuda":
        operator = itemsize * (n_vol + n_proj)
    else:
        import numba

        operator = 48 * n_proj + numba.get_num_threads() * itemsize * n_vol
    return int(arrays + operator)


def run(
    projections,
    projector,
    method: str,
    *,
    iterations: int,
    tv=None,
    nonnegative: bool = False,
    progress: bool = False,
    stats: dict | None = None,
):
    """One run of ``method`` on ``projector``: :func:`leveret.sirt`,
    :func:`leveret.cgls`, :func:`leveret.fista` or :func:`leveret.pdhg`
    with their defaults otherwise. ``stats`` (FISTA, PDHG) is filled as they do."""
    from ..algorithms import cgls, fista, pdhg, sirt

    if method == "sirt":
        return sirt(projections, projector, iterations, nonnegative=nonnegative, progress=progress)
    if method == "cgls":
        return cgls(projections, projector, iterations, progress=progress)
    if method in REGULARISED:
        fn = fista if method == "fista" else pdhg
        return fn(projections, projector, iterations, tv=tv, nonnegative=nonnegative, progress=progress, stats=stats)
    raise ValueError(f"method: expected one of {', '.join(ITERATIVE)}, got {method!r}")


def slices(
    sinograms,
    geometry,
    volume,
    *,
    method: str,
    iterations: int,
    tv=None,
    nonnegative: bool = False,
    backend: str = "auto",
    precision: str = "float32",
    label: str = "",
):
    """Each slice's own 2D problem: ``sinograms`` (n_angles, n_slices, n_cols),
    one per slice, to slices (n_slices, ny, nx) float32.

    ``geometry`` is the 2D :class:`~leveret.ParallelGeometry` of one sinogram
    and ``volume`` the 2D grid of one slice; one :class:`leveret.Projector`
    serves every slice (its norm, for FISTA and PDHG, is estimated once).
    NumPy in, NumPy out; CuPy in, CuPy out. FISTA's and PDHG's final
    objectives, summed over the slices (the objective of the slab), go to
    the log at INFO.
    """
    from .._validate import array_module
    from ..operators import Projector

    xp = array_module(sinograms)
    projector = Projector(geometry, volume, backend=backend, precision=precision)
    n_slices = sinograms.shape[1]
    out = xp.empty((n_slices,) + tuple(volume.shape), np.float32)
    objective = 0.0
    for s in range(n_slices):
        stats = {} if method in REGULARISED else None
        sinogram = xp.ascontiguousarray(sinograms[:, s, :])
        out[s] = run(sinogram, projector, method, iterations=iterations, tv=tv, nonnegative=nonnegative, stats=stats)
        if stats:
            objective += stats["objective"][-1]
    if method in REGULARISED:
        log.info(
            "%s: slices %s, objective %.6g (the sum over the slices) after %d iteration(s)",
            method,
            label or f"0:{n_slices}",
            objective,
            iterations,
        )
    return out
