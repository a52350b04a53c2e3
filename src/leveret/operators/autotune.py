"""What ``leveret tune`` measures on this GPU and caches in the tuning file
(:mod:`leveret.cuda.tuning`), for the operators' ``"auto"`` choices that
depend on the GPU:

- the cone transpose's cost model (``raytrace.TRANSPOSE_COST``): the atomic
  (band) transpose's time relative to the gather's, measured on two probe
  scans, one where each wins; ``Projector(transpose="auto")`` scales the
  band's predicted time by the measured correction
  (:func:`leveret.cuda.raytrace.tuned_atomic_scale`);
- the parallel-beam back-projection kernels, per problem class
  (``ParallelBackprojection.tune`` on simulated sinograms of common sizes).

The other ``"auto"`` choices (cone back-projection kernels, FDK's chunks, the
3D Radon stages) follow rules whose margins were measured over the sweep
(docs/performance.md) and hold on the GPUs measured; they need no tuning.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from ..cuda import seconds_per_run, tuning
from ..cuda.raytrace import TRANSPOSE_TUNING_KEY, transpose_times, transpose_work, view_parameters, voxel_z_range
from ..geometry import ConeGeometry, ParallelGeometry, VolumeGeometry
from .parallel import ParallelBackprojection
from .projector import Projector

# The probe scans of the transpose's calibration: a 256^3 grid, 180 views,
# source 1000 mm and detector 1500 mm from the axis, the detector over 4/3 of
# the grid with ``sampling`` pixels per voxel at the axis, all its rows
# (rows None: the gather wins) or (rows) that many (few rows against a tall
# volume: the band transpose wins).
TRANSPOSE_PROBES = ({"rows": None, "sampling": 0.75}, {"rows": 8, "sampling": 1.0})

# Parallel-beam problem classes tuned, most common first: (slices, image side,
# angles, precision); each is tuned on a simulated stack of that size.
PARALLEL_CLASSES = (
    (16, 2048, 2048, "float32"),
    (1, 2048, 2048, "float32"),
    (4, 2048, 2048, "float32"),
    (16, 1024, 1024, "float32"),
    (1, 1024, 1024, "float32"),
    (16, 2048, 2048, "float16"),
    (16, 4096, 4096, "float32"),
    (1, 4096, 4096, "float32"),
)


def transpose_probe(rows: int | None, sampling: float, n: int = 256, views: int = 180):
    """(ConeGeometry, VolumeGeometry) of one calibration scan (``TRANSPOSE_PROBES``)."""
    sid, sdd, extent = 1000.0, 1500.0, 512.0
    voxel = extent / n
    n_cols = round(4 * n * sampling / 3)
    angles = np.linspace(0.0, 2 * np.pi, views, endpoint=False)
    geometry = ConeGeometry.circular(
        angles, sid, sdd, n_cols if rows is None else rows, n_cols, voxel / sampling * sdd / sid
    )
    return geometry, VolumeGeometry((n, n, n), voxel)


def probe_work(probe: dict) -> dict[str, float]:
    """The transpose cost model's work counts (``raytrace.transpose_work``) of one probe
    (an entry of ``TRANSPOSE_PROBES``)."""
    geometry, volume = transpose_probe(probe["rows"], probe["sampling"])
    offset = np.array([volume.extent(a)[0] for a in "xyz"])
    scale = np.full(3, 1.0 / volume.spacing("x"))
    z_range = voxel_z_range(view_parameters(geometry)[1], geometry.n_rows, geometry.n_cols, volume.shape, offset, scale)
    return transpose_work(geometry.matrices, geometry.n_rows, geometry.n_cols, volume.shape, offset, scale, z_range)


def atomic_scale(measured: list[tuple[float, float]], predicted: list[tuple[float, float]]) -> float:
    """The band transpose's correction from probes' (voxel, atomic) seconds, measured
    and predicted (at scale 1): the geometric mean over the probes of the
    measured atomic / voxel ratio over the predicted one."""
    if not measured or len(measured) != len(predicted):
        raise ValueError("atomic_scale: expected one predicted pair per measured pair")
    logs = [math.log((ma / mv) / (pa / pv)) for (mv, ma), (pv, pa) in zip(measured, predicted)]
    return math.exp(sum(logs) / len(logs))


def tune_transpose(
    time_fn: Callable[[object, object, str], float] | None = None,
    *,
    gpu: str | None = None,
    store: bool = True,
    path=None,
) -> dict:
    """Measure the gather and the band transpose on ``TRANSPOSE_PROBES`` and cache
    :func:`atomic_scale` for this GPU. ``time_fn(geometry, volume, transpose)``
    returns seconds (None: the CUDA transpose's mean of 3 runs after a
    warm-up). Returns the cache entry's config with the measured and
    predicted seconds."""
    if time_fn is None:
        time_fn = _time_transpose
    if gpu is None:
        from ..cuda import gpu_name

        gpu = gpu_name()
    measured, predicted = [], []
    for probe in TRANSPOSE_PROBES:
        geometry, volume = transpose_probe(probe["rows"], probe["sampling"])
        p = transpose_times(probe_work(probe))
        predicted.append((p["gather"], p["scatter"]))
        measured.append((time_fn(geometry, volume, "gather"), time_fn(geometry, volume, "scatter")))
    scale = atomic_scale(measured, predicted)
    config = {"atomic_scale": round(scale, 4)}
    if store:
        tuning.store_entry(
            gpu, TRANSPOSE_TUNING_KEY, config, seconds=sum(sum(m) for m in measured), tried=len(measured), path=path
        )
    return {**config, "measured": measured, "predicted": predicted}


def _time_transpose(geometry, volume, transpose: str) -> float:
    """Mean seconds of the structured Joseph transpose ``transpose`` on CUDA."""
    import cupy

    A = Projector(geometry, volume, model="joseph", backend="cuda", transpose=transpose)
    y = cupy.ones(geometry.projection_shape, cupy.float32)
    out = cupy.empty(volume.shape, cupy.float32)
    return seconds_per_run(lambda: A.T(y, out=out))


def tune_parallel(classes=PARALLEL_CLASSES, *, budget_s: float = 60.0, progress=None) -> list[dict]:
    """``ParallelBackprojection.tune`` on a simulated stack of each class in
    turn (cached per GPU and problem class), starting no class after
    ``budget_s`` seconds or where the GPU lacks the memory. Returns one row
    per class: its key, the chosen kernel and its time, or why it was
    skipped, and the seconds elapsed since the start; ``progress(row)`` is
    called after each class."""
    import cupy

    rows, start = [], time.perf_counter()
    for n_slices, side, n_angles, precision in classes:
        row = {"slices": n_slices, "side": side, "angles": n_angles, "precision": precision}
        need = 4 * n_slices * (n_angles * side + 2 * side * side)  # sinograms, their filtered copy, images
        if time.perf_counter() - start > budget_s:
            row["skipped"] = f"past the {budget_s:g} s budget"
        elif need > cupy.cuda.Device().mem_info[0] // 2:
            row["skipped"] = "not enough free GPU memory"
        else:
            geometry = ParallelGeometry(np.linspace(0.0, np.pi, n_angles, endpoint=False), side, n_rows=n_slices)
            op = ParallelBackprojection(geometry, geometry.default_volume(), backend="cuda", precision=precision)
            sinos = cupy.random.default_rng(0).random((n_slices, n_angles, side), dtype=cupy.float32)
            best, results = op.tune(sinos)
            row.update(
                key=op.problem_key(n_slices), kernel=best, seconds=min(s for _, s in results), tried=len(results)
            )
            del sinos, op
            cupy.get_default_memory_pool().free_all_blocks()
        row["elapsed"] = time.perf_counter() - start
        rows.append(row)
        if progress is not None:
            progress(row)
    return rows
