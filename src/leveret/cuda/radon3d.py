"""Launcher for ``radon3d.cu``: 3D Radon back-projection (single- and two-stage) and forward transform.

All arrays are CuPy, C-contiguous, float32 or float64 (the kernel is chosen
by dtype); coefficient tables are NumPy ``(rows, 4)`` float64, as
:func:`leveret.cpu.radon3d.sample_table` makes them: voxel ``[b, j, i]``
reads its projection at sample ``u = i a + j b + b c + d``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._module import load_module

BLOCK = (32, 8)  # threads per block (x, y) of the back-projection kernels
SHARED_BUDGET = 48 * 1024  # bytes of dynamic shared memory per block (the default limit)
MAX_BATCH = 64  # directions staged per batch at most
#: The -D options ``radon3d.cu`` needs (it has no defaults of its own).
DEFINES = (f"RADON_BX={BLOCK[0]}", f"RADON_BY={BLOCK[1]}")


def _dtype_tag(dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return "f32"
    if dtype == np.float64:
        return "f64"
    raise ValueError(f"expected float32 or float64 arrays, got {dtype}")


def window_length(table: np.ndarray, zpt: int) -> int:
    """Samples a block's tile can reach for any direction of ``table``, plus margins.

    The tile spans 31 steps in i, 7 in j and ``zpt - 1`` in b; one sample of
    margin below (so the float32 coordinate stays >= 1/2), the interpolation
    partner and two more above.
    """
    t = np.abs(np.asarray(table, np.float64))
    extent = t[:, 0] * (BLOCK[0] - 1) + t[:, 1] * (BLOCK[1] - 1) + t[:, 2] * (zpt - 1)
    return int(math.ceil(float(extent.max()))) + 4


#: Widest float32 window the shared-memory kernel accepts. Its float32 window
#: coordinate u in [1, W - 2] carries about ulp(W) / 2 of rounding, and the
#: result's error grows with it: the NumPy mirror of the kernel
#: (tests/algorithms/test_radon3d_kernel_mirror.py) measured 1.7e-6 of the
#: largest value at W = 36, 5.4e-6 at 132, 1.0e-5 at 259 and 4.3e-5 at 1066
#: on random projections. Below 128 every coordinate has ulp <= 7.6e-6 and
#: the 1e-5 bound holds; wider windows (voxels several times coarser than the
#: sample pitch) take the global-memory kernel, whose coordinates are float64.
MAX_WINDOW_F32 = 128

PATHS = ("auto", "shared", "global")


def batch_size(W: int, itemsize: int, n_dirs: int) -> int:
    """Directions per staged batch: as many as fit the shared-memory budget (<= MAX_BATCH).

    0 when not even one direction's window fits (the global-memory kernel's case).
    """
    per_dir = 2 * itemsize * W + 4 * itemsize + 4 + 16  # pairs, coefficients, w0 (+ padding)
    return int(min(MAX_BATCH, max(1, n_dirs), SHARED_BUDGET // per_dir))


def shared_bytes(W: int, DB: int, itemsize: int) -> int:
    coef = DB * 4 * itemsize
    w0 = ((DB * 4 + 15) // 16) * 16
    return coef + w0 + DB * W * 2 * itemsize


@dataclass(frozen=True)
class BackprojectPlan:
    """How :func:`backproject` runs: ``path`` "shared" (windows staged in shared
    memory, W samples per direction, DB directions per batch, ``shared_bytes``
    per block) or "global" (samples read from global memory; W, DB and
    shared_bytes are then 0), and why."""

    path: str
    W: int
    DB: int
    shared_bytes: int
    reason: str


def plan_backprojection(table: np.ndarray, zpt: int, dtype, n_dirs: int, path: str = "auto") -> BackprojectPlan:
    """Choose the back-projection kernel for a coefficient table (no GPU needed).

    "auto" stages windows in shared memory when one direction's window fits
    the budget (:data:`SHARED_BUDGET`) and, in float32, is at most
    :data:`MAX_WINDOW_F32` samples wide; otherwise the global-memory kernel.
    "shared" insists on the shared kernel (ValueError if the window does not
    fit) and "global" on the global one (tests and benchmarks).
    """
    if path not in PATHS:
        raise ValueError(f"path: expected one of {PATHS}, got {path!r}")
    itemsize = np.dtype(dtype).itemsize
    _dtype_tag(dtype)
    if path == "global":
        return BackprojectPlan("global", 0, 0, 0, "asked for")
    W = window_length(table, zpt)
    DB = batch_size(W, itemsize, n_dirs)
    if DB < 1:
        if path == "shared":
            raise ValueError(
                f"path: 'shared' was asked for, but a block's window of {W} samples "
                f"({np.dtype(dtype).name}) does not fit in {SHARED_BUDGET} bytes of "
                f"shared memory; use path='auto' or 'global'"
            )
        return BackprojectPlan("global", 0, 0, 0, f"a window of {W} samples does not fit in shared memory")
    if path == "auto" and itemsize == 4 and W > MAX_WINDOW_F32:
        return BackprojectPlan(
            "global",
            0,
            0,
            0,
            f"a float32 window of {W} > {MAX_WINDOW_F32} samples would lose precision in its float32 coordinates",
        )
    return BackprojectPlan(
        "shared", W, DB, shared_bytes(W, DB, itemsize), "asked for" if path == "shared" else "the window fits"
    )


def backproject_grid(out_shape, zpt: int) -> tuple[int, int, int]:
    """Launch grid of both back-projection kernels for an output ``(nb, ny, nx)``:
    one 32 x 8 block per (i, j) tile and ``zpt`` b values."""
    nb, ny, nx = out_shape
    return (-(-nx // BLOCK[0]), -(-ny // BLOCK[1]), -(-nb // zpt))


def forward_k_per_block(nz: int, n_dirs: int) -> int:
    """z slices per block of the forward kernels: enough blocks to fill the GPU
    (~4 per SM) with at least a few directions' worth."""
    return max(1, min(nz, -(-nz * n_dirs // 1024)))


def plan_forward(n_samples: int, dtype, path: str = "auto") -> str:
    """ "shared" (a histogram of the n_samples in shared memory per block) or
    "global" (atomics straight into the output) for :func:`forward`."""
    if path not in PATHS:
        raise ValueError(f"path: expected one of {PATHS}, got {path!r}")
    _dtype_tag(dtype)
    fits = n_samples * np.dtype(dtype).itemsize <= SHARED_BUDGET
    if path == "shared" and not fits:
        raise ValueError(
            f"path: 'shared' was asked for, but a histogram of n_samples={n_samples} "
            f"{np.dtype(dtype).name} values does not fit in {SHARED_BUDGET} bytes "
            f"of shared memory; use path='auto' or 'global'"
        )
    if path == "auto":
        return "shared" if fits else "global"
    return path


def backproject(
    proj,
    table: np.ndarray,
    out,
    *,
    proj_bstride: int = 0,
    table_bstride: int = 0,
    zpt: int = 4,
    accumulate: bool = False,
    table_dev=None,
    b_offset: int = 0,
    path: str = "auto",
):
    """``out[b, j, i] (+)= sum_q interp(proj_b[q], i a + j b + b c + d)`` (see radon3d.cu).

    Parameters
    ----------
    proj : cupy array
        Filtered projections, ``n_dirs`` rows of ``n_samples`` per b block
        (``(n_dirs, n_samples)`` with ``proj_bstride = 0``).
    table : numpy (n_rows, 4) float64
        Coefficients; rows ``b * table_bstride + q``.
    out : cupy (nb, ny, nx), same dtype as ``proj``; overwritten unless ``accumulate``.
    proj_bstride, table_bstride : int
        Elements (rows) between the projections (table rows) of consecutive b;
        nonzero strides need ``zpt = 1``.
    zpt : {1, 4}
        b (z) values per thread.
    table_dev : cupy array, optional
        ``table`` already on the device (saves an upload per call).
    b_offset : int
        Added to b in the coordinate (not in the output index): a slab of a
        volume that starts at z index ``b_offset``.
    path : {"auto", "shared", "global"}
        The kernel, as :func:`plan_backprojection` chooses it.
    """
    if zpt not in (1, 4):
        raise ValueError(f"zpt: expected 1 or 4, got {zpt}")
    if (proj_bstride or table_bstride) and zpt != 1:
        raise ValueError("zpt: per-b projections or tables need zpt=1")
    if proj.dtype != out.dtype:
        raise ValueError(f"out: expected dtype {proj.dtype}, got {out.dtype}")
    if not (proj.flags.c_contiguous and out.flags.c_contiguous):
        raise ValueError("proj, out: expected C-contiguous arrays")
    tag = _dtype_tag(proj.dtype)
    nb, ny, nx = out.shape
    n_samples = proj.shape[-1]
    n_dirs = proj.shape[-2] if proj.ndim >= 2 else 1
    table = np.ascontiguousarray(table, np.float64)
    plan = plan_backprojection(table, zpt, proj.dtype, n_dirs, path)

    import cupy

    if table_dev is None:
        table_dev = cupy.asarray(table)
    grid = backproject_grid(out.shape, zpt)
    head = (
        proj,
        np.int64(proj_bstride),
        table_dev,
        np.int32(table_bstride),
        out,
        np.int32(nx),
        np.int32(ny),
        np.int32(nb),
        np.int32(n_dirs),
        np.int32(n_samples),
    )
    tail = (np.int32(b_offset), np.int32(bool(accumulate)))
    module = load_module("radon3d")
    if plan.path == "global":
        kernel = module.get_function(f"radon3d_bp_global_{tag}_z{zpt}")
        kernel(grid, BLOCK, head + tail)
    else:
        kernel = module.get_function(f"radon3d_bp_{tag}_z{zpt}")
        kernel(grid, BLOCK, head + (np.int32(plan.W), np.int32(plan.DB)) + tail, shared_mem=plan.shared_bytes)
    return out


def forward(vol, table: np.ndarray, out, *, k_per_block: int | None = None, path: str = "auto"):
    """The transpose of the single-stage :func:`backproject`: ``out`` (n_dirs, n_samples) overwritten.

    ``path`` as :func:`plan_forward` chooses it: per-block shared histograms
    while ``n_samples`` fit the shared-memory budget, else global atomics.
    """
    tag = _dtype_tag(vol.dtype)
    if out.dtype != vol.dtype:
        raise ValueError(f"out: expected dtype {vol.dtype}, got {out.dtype}")
    nz, ny, nx = vol.shape
    n_dirs, n_samples = out.shape
    itemsize = np.dtype(vol.dtype).itemsize
    use = plan_forward(n_samples, vol.dtype, path)

    import cupy

    if k_per_block is None:
        k_per_block = forward_k_per_block(nz, n_dirs)
    out[...] = 0
    name = f"radon3d_fwd_{tag}" if use == "shared" else f"radon3d_fwd_global_{tag}"
    kernel = load_module("radon3d").get_function(name)
    grid = (n_dirs, -(-nz // k_per_block))
    kernel(
        grid,
        (256,),
        (
            vol,
            cupy.asarray(np.ascontiguousarray(table, np.float64)),
            out,
            np.int32(nx),
            np.int32(ny),
            np.int32(nz),
            np.int32(n_samples),
            np.int32(k_per_block),
        ),
        shared_mem=n_samples * itemsize if use == "shared" else 0,
    )
    return out
