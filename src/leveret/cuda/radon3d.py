"""Launcher for ``radon3d.cu``: 3D Radon back-projection (single- and two-stage) and forward transform.

All arrays are CuPy, C-contiguous, float32 or float64 (the kernel is chosen
by dtype); coefficient tables are NumPy ``(rows, 4)`` float64, as
:func:`leveret.cpu.radon3d.sample_table` makes them: voxel ``[b, j, i]``
reads its projection at sample ``u = i a + j b + b c + d``.
"""
from __future__ import annotations

import math

import numpy as np

from ._module import load_module

BLOCK = (32, 8)          # RADON_BX, RADON_BY in the .cu file
SHARED_BUDGET = 48 * 1024  # bytes of dynamic shared memory per block (the default limit)
MAX_BATCH = 64           # directions staged per batch at most


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


def batch_size(W: int, itemsize: int, n_dirs: int) -> int:
    """Directions per staged batch: as many as fit the shared-memory budget (<= MAX_BATCH)."""
    per_dir = 2 * itemsize * W + 4 * itemsize + 4 + 16  # pairs, coefficients, w0 (+ padding)
    db = min(MAX_BATCH, max(1, n_dirs), SHARED_BUDGET // per_dir)
    if db < 1:
        raise ValueError(f"volume: voxels too large for the sample spacing (a block's window "
                         f"of {W} samples does not fit in shared memory); use smaller voxels "
                         f"or a coarser sample spacing")
    return int(db)


def shared_bytes(W: int, DB: int, itemsize: int) -> int:
    coef = DB * 4 * itemsize
    w0 = ((DB * 4 + 15) // 16) * 16
    return coef + w0 + DB * W * 2 * itemsize


def backproject(proj, table: np.ndarray, out, *, proj_bstride: int = 0, table_bstride: int = 0,
                zpt: int = 4, accumulate: bool = False, table_dev=None, b_offset: int = 0):
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
    """
    import cupy

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
    W = window_length(table, zpt)
    itemsize = np.dtype(proj.dtype).itemsize
    DB = batch_size(W, itemsize, n_dirs)
    if table_dev is None:
        table_dev = cupy.asarray(table)
    kernel = load_module("radon3d").get_function(f"radon3d_bp_{tag}_z{zpt}")
    grid = (-(-nx // BLOCK[0]), -(-ny // BLOCK[1]), -(-nb // zpt))
    kernel(grid, BLOCK,
           (proj, np.int64(proj_bstride), table_dev, np.int32(table_bstride), out,
            np.int32(nx), np.int32(ny), np.int32(nb), np.int32(n_dirs), np.int32(n_samples),
            np.int32(W), np.int32(DB), np.int32(b_offset), np.int32(bool(accumulate))),
           shared_mem=shared_bytes(W, DB, itemsize))
    return out


def forward(vol, table: np.ndarray, out, *, k_per_block: int | None = None):
    """The transpose of the single-stage :func:`backproject`: ``out`` (n_dirs, n_samples) overwritten."""
    import cupy

    tag = _dtype_tag(vol.dtype)
    if out.dtype != vol.dtype:
        raise ValueError(f"out: expected dtype {vol.dtype}, got {out.dtype}")
    nz, ny, nx = vol.shape
    n_dirs, n_samples = out.shape
    itemsize = np.dtype(vol.dtype).itemsize
    if n_samples * itemsize > SHARED_BUDGET:
        raise ValueError(f"geometry: n_samples={n_samples} is too many for the GPU forward "
                         f"transform's shared histogram (at most {SHARED_BUDGET // itemsize} "
                         f"in {np.dtype(vol.dtype)}); use backend='cpu'")
    if k_per_block is None:
        # Enough blocks to fill the GPU (~4 per SM) with at least a few directions' worth.
        k_per_block = max(1, min(nz, -(-nz * n_dirs // 1024)))
    out[...] = 0
    kernel = load_module("radon3d").get_function(f"radon3d_fwd_{tag}")
    grid = (n_dirs, -(-nz // k_per_block))
    kernel(grid, (256,), (vol, cupy.asarray(np.ascontiguousarray(table, np.float64)), out,
                          np.int32(nx), np.int32(ny), np.int32(nz), np.int32(n_samples),
                          np.int32(k_per_block)),
           shared_mem=n_samples * itemsize)
    return out
