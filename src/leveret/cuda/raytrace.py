"""Launcher of the GPU Siddon/Joseph pair behind ``Projector(backend="cuda")``.

Rays are rebuilt on the GPU from 12 float64 numbers per view (see
raytrace_common.cuh), with the same float64 operations as the CPU's ray
tables, so the GPU and CPU operators trace the same rays. The kernels, one
file per path, share raytrace_common.cuh:

- raytrace_general.cu: one thread per ray, every geometry;
- raytrace_siddon.cu: structured cone-beam Siddon (Thompson and Lionheart
  (2014): the rows of a detector column share its xy path), taken when
  :func:`structured_ratio` shows that it is valid;
- raytrace_joseph.cu: the same structure for Joseph in float32, with its
  transposes by atomics: the rows' scatter and the band transpose (lanes on
  the voxels a column's rows reach on each plane);
- raytrace_voxel.cu: structured Joseph's voxel-driven transpose;
- raytrace_layout.cu: copies between the volume and the structured kernels'
  z-fastest layout.
"""

from __future__ import annotations

import numpy as np

from ..geometry import ConeGeometry, ParallelGeometry, ParallelVecGeometry
from ._module import load_module
from .device_state import upload

# The kernels' compile-time constants, passed to every raytrace_*.cu file as
# -D options (leveret.cuda._module.file_defines); the .cu files #error
# without them, and the launch sizes below are computed from the same values.
KERNEL_CONSTANTS: dict[str, int] = {
    "LEVERET_JOSEPH_PAD_Z": 8,  # zero z border of structured Joseph's padded volume: >= 3, 8 starts z on a sector
    "LEVERET_JV_PATCH": 1,  # gather transpose: a warp's voxel columns, PATCH x PATCH
    "LEVERET_JV_WARPS_X": 1,  # gather transpose: a block's 8 warps, WARPS_X along x, 8 / WARPS_X along y
    "LEVERET_JV_MIN_BLOCKS": 3,  # gather transpose: blocks per multiprocessor the registers must allow
    "LEVERET_JV_HMAX": 7,  # gather transpose: rows per z voxel (either side) its padding covers
}

# raytrace_voxel.cu's second build: 2 x 2 voxel columns per warp (its 4 kz
# sums in registers allow 2 blocks per multiprocessor); taken where
# :func:`voxel_patch` says.
VOXEL_PATCH2_CONSTANTS: dict[str, int] = {**KERNEL_CONSTANTS, "LEVERET_JV_PATCH": 2, "LEVERET_JV_MIN_BLOCKS": 2}

BLOCK = 256  # threads per block, general path (one thread per ray)
STRUCTURED_BLOCK = 128  # threads (detector rows) per block, structured path
SHARED_DEFAULT = 48 * 1024  # dynamic shared memory a kernel gets without opting in
MAX_GRID_Y = 65535
JOSEPH_PAD_Z = KERNEL_CONSTANTS["LEVERET_JOSEPH_PAD_Z"]
DEFINES = tuple(f"{name}={value}" for name, value in KERNEL_CONSTANTS.items())  # every raytrace_*.cu
VOXEL_PATCH2_DEFINES = tuple(f"{name}={value}" for name, value in VOXEL_PATCH2_CONSTANTS.items())
EXTRA_BUILDS = {"raytrace_voxel": (VOXEL_PATCH2_DEFINES,)}  # files also built with other constants (_module)
VOXEL_TABLE_BYTES = 2 << 30  # at most this much for the gather transpose's per-view tables at a time
VIEW_GROUP = 16  # structured float32 kernels: views per column that run side by side (L2 reuse)
SIDDON_SPLIT_NZ = 512  # structured float32 Siddon's transpose: this many z slices or more run in two slabs,
SIDDON_QUARTER_NZ = 640  # ... this many or more in four or more slabs,
SIDDON_MAX_SLAB = 256  # ... of at most this many slices there,
SIDDON_HALF_GROUP = 1 << 18  # ... and half VIEW_GROUP views per group from this many slab voxels per view
TRANSPOSES = ("auto", "gather", "scatter")
VOXEL_KZ = (1, 4, 8, 12, 16)  # gather transpose: the z depths per lane raytrace_voxel.cu instantiates
VOXEL_KZ_SETUP = 4  # gather transpose: a lane's set-up per (view, column, plane), in z voxels' work


# Seconds per unit of work of structured Joseph's two transposes where both
# apply (:func:`voxel_applies`), fitted on an H200 to the 34 scans of
# docs/performance.md ("Which transpose", measured in one run): the voxel
# gather per row read (``voxel_row``) and per lane and candidate column
# set-up (``voxel_setup``); the band transpose (the atomic one there) per
# (view, column, plane) (``band_plane``: its set-up) and per voxel of a
# plane's band (``band_voxel``: the row window and two atomic adds). Only
# their ratios decide.
TRANSPOSE_COST = {"voxel_row": 2.30e-13, "voxel_setup": 2.10e-12, "band_plane": 4.15e-11, "band_voxel": 1.86e-12}


def transpose_work(
    matrices: np.ndarray, n_rows: int, n_cols: int, grid3, offset, scale, z_range: tuple[int, int] | None = None
) -> dict[str, float]:
    """Work counts of structured Joseph's transposes on a cone geometry.

    At the grid's centre, per view: ``s``, detector columns per voxel across
    the ray (``|grad_xy u|`` times the voxel size) and ``h``, rows per voxel
    along z; medians over the views. The band transpose sets up every
    (view, column, plane) of the dominant axis (``band_plane = n_views n_cols
    max(nx, ny)``) and visits a band of ``min(nz, n_rows / h + 2)`` z voxels on
    each (``band_voxel``). The
    gather visits every voxel column for every view and z tile of ``32 kz``
    lanes (:func:`voxel_kz`); per lane about ``2 s + 2`` candidate columns
    (``voxel_setup``) of which ``2 s`` pass within a voxel and read
    ``2 floor(h) + 2`` rows for each of the ``kz`` voxels (``voxel_row``;
    the kernel reads one where rows lie two or more voxels apart, and the
    16-deep build ``floor(2 h) + 1``, which the model, fitted before them,
    does not count: an upper bound there);
    ``kz``, the gather's z voxels per lane (:func:`voxel_kz` of the slices,
    ``s`` and ``h``). ``z_range``: the slices the gather visits
    (:func:`voxel_z_range`; None: all).
    """
    P = np.asarray(matrices, np.float64).reshape(-1, 3, 4)
    nz, ny, nx = (int(n) for n in grid3)
    offset, scale = np.asarray(offset, float), np.asarray(scale, float)
    size = 1.0 / scale
    centre = np.append(offset + 0.5 * np.array([nx, ny, nz]) * size, 1.0)
    q = P @ centre  # (n, 3): (u w, v w, w)
    u, v = q[:, 0] / q[:, 2], q[:, 1] / q[:, 2]
    du = [(P[:, 0, a] - u * P[:, 2, a]) / q[:, 2] for a in range(3)]  # d u / d world x, y, z
    dv = (P[:, 1, 2] - v * P[:, 2, 2]) / q[:, 2]
    cols_per_voxel = float(np.median(np.hypot(du[0], du[1]))) * float(min(size[0], size[1]))
    rows_per_voxel = float(np.median(np.abs(dv))) * float(size[2])
    n_views = P.shape[0]
    nz_gather = voxel_z_slices(nz, z_range)[1]
    kz = voxel_kz(nz_gather, cols_per_voxel, rows_per_voxel)
    lanes = n_views * nx * ny * (-(-nz_gather // (32 * kz))) * 32.0
    planes = float(n_views * n_cols * max(nx, ny))
    band = min(float(nz), n_rows / rows_per_voxel + 2.0) if rows_per_voxel > 0 else float(nz)
    return {
        "band_plane": planes,
        "band_voxel": planes * band,
        "kz": kz,
        "voxel_row": lanes * kz * 2 * cols_per_voxel * (2 * np.floor(rows_per_voxel) + 2),
        "voxel_setup": lanes * (2 * cols_per_voxel + 2),
        "cols_per_voxel": cols_per_voxel,
        "rows_per_voxel": rows_per_voxel,
    }


def transpose_times(work: dict[str, float], atomic_scale: float = 1.0) -> dict[str, float]:
    """Predicted seconds of the two transposes from :func:`transpose_work`'s
    counts (``TRANSPOSE_COST``), the atomic (band) one's scaled by
    ``atomic_scale``: this GPU's measured correction relative to the gather
    (:func:`tuned_atomic_scale`; 1 where nothing was measured)."""
    c = TRANSPOSE_COST
    return {
        "gather": c["voxel_row"] * work["voxel_row"] + c["voxel_setup"] * work["voxel_setup"],
        "scatter": atomic_scale * (c["band_plane"] * work["band_plane"] + c["band_voxel"] * work["band_voxel"]),
    }


TRANSPOSE_TUNING_KEY = "cone/transpose-band"  # the tuning cache's entry of :func:`tuned_atomic_scale`


def tuned_atomic_scale(gpu: str) -> float:
    """The atomic (band) transpose's cost relative to the model's on GPU
    ``gpu``, as ``leveret tune`` measured it (:func:`leveret.operators.autotune.tune_transpose`); 1 where
    nothing was measured."""
    from . import tuning

    config = tuning.lookup(gpu, TRANSPOSE_TUNING_KEY)
    return 1.0 if config is None else float(config["atomic_scale"])


def voxel_applies(params: np.ndarray, n_cols: int, grid3, offset, scale) -> bool:
    """Whether structured Joseph's gather transpose can run on this cone
    geometry: fewer than ``JV_HMAX + 1`` rows per z voxel
    (:func:`voxel_rows_per_voxel`; ``inf`` with a source inside the grid) and
    row coordinates within its fixed point (:func:`voxel_row_extent`)."""
    h = voxel_rows_per_voxel(params, n_cols, grid3, offset, scale)
    return bool(h < voxel_constants()["hmax"] + 1 and voxel_row_extent(params, n_cols, grid3, offset, scale) < 2.0**30)


def joseph_padded_nz(nz: int) -> int:
    """z length of structured Joseph's zero-bordered volume (:meth:`CudaRaytracer._padded`):
    ``JOSEPH_PAD_Z`` zero slices below the volume and at least as many above, rounded up to a
    multiple of 8 (raytrace_common.cuh: joseph_padded_nz)."""
    return -(-(int(nz) + 2 * JOSEPH_PAD_Z) // 8) * 8


def band_shared_bytes(nx: int, ny: int, n_rows: int) -> int:
    """Shared memory of structured Joseph's band transpose
    (raytrace_joseph.cu: structured_joseph_adjoint_band): a 48-byte ``JBand``
    per plane and a column's rows with their zero padding."""
    c = voxel_constants()
    return 48 * max(int(nx), int(ny)) + 4 * (int(n_rows) + c["pad_lo"] + c["pad_hi"])


def auto_transpose(predicted: dict[str, float] | None) -> str:
    """``transpose="auto"``'s choice: "gather" where it applies (``predicted``
    not None: :func:`transpose_times` of a structured Joseph geometry where
    :func:`voxel_applies`) and is predicted no slower than "scatter", else
    "scatter"."""
    return "gather" if predicted is not None and predicted["gather"] <= predicted["scatter"] else "scatter"


# Detector columns per voxel from which the gather transpose's lanes read
# wider row windows (the detector oversamples): the step of voxel_patch's
# choice at 12 z voxels.
VOXEL_DENSE_COLS = 0.875
# Detector columns per voxel from which 2 x 2 columns save the most (each
# row's z interpolation serves two columns, and there are many rows): the
# step of voxel_patch2_work's share, between the scans measured at 1.5 and 2.
VOXEL_WIDE_COLS = 1.75
# Detector rows per voxel (at the grid's centre) below which most of the
# gather transpose's lanes read one row per column (rows two or more voxels
# apart): voxel_patch's choice at 16 z voxels, between the sparsest scan
# measured faster with 2 x 2 columns there (0.5) and the next (0.75).
VOXEL_SPARSE_ROWS = 0.625


def voxel_patch(kz: int, cols_per_voxel: float = 1.0, rows_per_voxel: float = 1.0) -> int:
    """Voxel columns per side of a warp's patch for lanes of ``kz`` z voxels
    at ``cols_per_voxel`` detector columns and ``rows_per_voxel`` rows per
    voxel: 2 (four columns sharing each candidate column's set-up,
    VOXEL_PATCH2_CONSTANTS) up to kz 8, at kz 12 below ``VOXEL_DENSE_COLS``
    and at kz 16 below ``VOXEL_SPARSE_ROWS``; else 1. 4 x 12 and 4 x 16 sums
    fill the registers (one and two 4-byte values spill), so the 2 x 2 columns win
    only where the row windows are narrow. Measured on an H200
    (docs/performance.md, "Which transpose"): at 12, 13-14 % faster with the
    one- and two-row windows of sparser detectors (384 to 768 slices, 0.75
    columns per voxel), 9 % slower at 2.5; at 16, 9 % faster at 0.5 rows per
    voxel and 7-15 % slower from 0.75 on."""
    if kz <= 8:
        return 2
    if kz <= 12:
        return 2 if cols_per_voxel < VOXEL_DENSE_COLS else 1
    return 2 if rows_per_voxel < VOXEL_SPARSE_ROWS else 1


def voxel_patch2_work(cols_per_voxel: float) -> float:
    """A lane's work with 2 x 2 voxel columns per warp relative to one column
    per warp (:func:`voxel_patch`), at ``cols_per_voxel`` detector columns
    per voxel: the four columns share their set-up, and each row's z
    interpolation serves two, so the share is smaller where more columns
    cross a voxel. Fitted to 18 scans on an H200 (docs/performance.md,
    "Which transpose"): 0.82-0.87 from 0.75 to 1.5 columns per voxel,
    0.73-0.76 at 2 and 2.5; the step lies between."""
    return 0.85 if cols_per_voxel < VOXEL_WIDE_COLS else 0.75


def voxel_kz(nz: int, cols_per_voxel: float = 1.0, rows_per_voxel: float = 1.0) -> int:
    """The gather transpose's z voxels per lane (``VOXEL_KZ``) for ``nz`` slices
    and ``cols_per_voxel`` detector columns and ``rows_per_voxel`` rows per
    voxel (``transpose_work``'s):
    a warp covers z tiles of ``32 kz`` voxels, and each tile repeats the
    lane's set-up per (view, column, plane), worth about ``VOXEL_KZ_SETUP``
    voxels of row work; the depth with the least work per lane,
    ``tiles (kz + VOXEL_KZ_SETUP)``, counting the idle lanes beyond ``nz``,
    times :func:`voxel_patch2_work` where the depth runs 2 x 2 columns (the
    largest depth on a tie). 256 slices: 8 (one tile, no idle lane); 384: 12;
    512, 896 and 1024: 16 below ``VOXEL_WIDE_COLS``, 8 from there; 640 and
    768: 12 below ``VOXEL_DENSE_COLS``, 8 from there."""

    def work(kz):
        share = voxel_patch2_work(cols_per_voxel) if voxel_patch(kz, cols_per_voxel, rows_per_voxel) == 2 else 1.0
        return -(-int(nz) // (32 * kz)) * (kz + VOXEL_KZ_SETUP) * share

    return min(VOXEL_KZ[::-1], key=work)


def siddon_z_slab(grid3) -> int:
    """z slices per launch of structured float32 Siddon's transpose: one slab
    below ``SIDDON_SPLIT_NZ`` slices, two equal slabs below
    ``SIDDON_QUARTER_NZ``, from there the fewest equal slabs, at least four,
    of at most ``SIDDON_MAX_SLAB`` slices. The atomic adds of the blocks
    running at once then land in a part of the volume that stays in L2; each
    launch repeats the blocks' xy set-up, and the rows whose rays cross a slab
    face run in both. Measured on an H200 (docs/performance.md, "Structured
    Siddon's transpose in z slabs"): from 640 to 1024 slices four slabs are
    within 2 % of the fastest depth tried (10-21 % less time than two at 768
    and 1024 slices), at 512 two are (four: 9 % more), at 256 one. Beyond 1024
    slices (not measured) the slabs keep the depth they have at 1024."""
    nz = int(grid3[0])
    if nz < SIDDON_SPLIT_NZ:
        return nz
    slabs = 2 if nz < SIDDON_QUARTER_NZ else max(4, -(-nz // SIDDON_MAX_SLAB))
    return -(-nz // slabs)


def siddon_view_group(grid3, n_views: int, z_slab: int | None = None) -> int:
    """Views per detector column that run side by side in structured float32
    Siddon's transpose: half ``VIEW_GROUP`` where the slab's voxels (the
    grid's nx ny times its slab depth ``z_slab``, default
    :func:`siddon_z_slab`) per view reach ``SIDDON_HALF_GROUP``, else
    ``VIEW_GROUP``. The group's views add into the slab together; on large
    slabs from few views the group's rays, further apart in angle, share
    fewer voxels in L2. Measured on an H200 over 15 scans
    (docs/performance.md, "Structured Siddon's transpose in z slabs"): 8
    views take 2-12 % less time at 512^3, 768^3 and 1024^3 from 180 views, at
    1024^3 from 360 and 720 and on 256 x 1024^2 from 720; 16 take 2-7 % less
    at 512^3 from 360 (two runs), 720 and 1440 views and at 640^3 and 768^3
    from 720; the two are within 0.4 % at 896^3 from 720 and 1024^3 from 1440."""
    nz, ny, nx = (int(n) for n in grid3)
    slab = min(nz, siddon_z_slab(grid3) if z_slab is None else int(z_slab))
    return VIEW_GROUP // 2 if nx * ny * slab >= SIDDON_HALF_GROUP * int(n_views) else VIEW_GROUP


def voxel_constants(constants: dict[str, int] = KERNEL_CONSTANTS) -> dict[str, int]:
    """The gather transpose's launch constants from ``constants``: patch (a
    warp's voxel columns per side), warps (per block along x and y), hmax
    (rows per voxel on either side) and the padding rows below and above the
    detector (raytrace_voxel.cu: JV_PAD_LO, JV_PAD_HI)."""
    hmax, wx = constants["LEVERET_JV_HMAX"], constants["LEVERET_JV_WARPS_X"]
    return {
        "patch": constants["LEVERET_JV_PATCH"],
        "warps": (wx, 8 // wx),
        "hmax": hmax,
        "pad_lo": 2 * hmax + 2,
        "pad_hi": 2 * hmax + 3,
    }


def _reach_box(grid3, offset, scale) -> tuple[np.ndarray, np.ndarray]:
    """World (x, y) corners of the grid's xy box widened by one voxel: what a
    Joseph sample can reach (one voxel beyond its plane position)."""
    nz, ny, nx = (int(n) for n in grid3)
    offset, scale = np.asarray(offset, float), np.asarray(scale, float)
    return offset[:2] - 1.0 / scale[:2], offset[:2] + (np.array([nx, ny]) + 1.0) / scale[:2]


def _reach_distances(params: np.ndarray, grid3, offset, scale) -> tuple[np.ndarray, np.ndarray]:
    """Per view, the smallest and largest horizontal distance ``tau`` from the
    source to the box of :func:`_reach_box` (the smallest 0 where the source
    lies inside it): every sample of structured Joseph lies between them."""
    lo, hi = _reach_box(grid3, offset, scale)
    src = params[:, :2]
    gap = np.maximum(np.maximum(lo - src, src - hi), 0.0)
    far = np.maximum(np.abs(src - lo), np.abs(src - hi))
    return np.hypot(gap[:, 0], gap[:, 1]), np.hypot(far[:, 0], far[:, 1])


def _column_qxy(params: np.ndarray, columns) -> np.ndarray:
    """``|q_xy(u)|`` per view and detector column ``u`` in ``columns``: the
    length of the xy part of ``M^-1 (u, 0, 1)`` (raytrace_common.cuh: column_line)."""
    Minv = params[:, 3:].reshape(-1, 3, 3)
    u = np.asarray(columns, np.float64)
    return np.hypot(Minv[:, 0, 0, None] * u + Minv[:, 0, 2, None], Minv[:, 1, 0, None] * u + Minv[:, 1, 2, None])


def voxel_row_extent(params: np.ndarray, n_cols: int, grid3, offset, scale) -> float:
    """A bound on the row coordinates ``|t| = |(k - zA) / zS|`` the voxel
    transpose forms (in rows, any voxel, view, column and plane it reaches):
    ``h (nz + |pz| + tau_max max|Mz0|)``, with ``tau_max`` the largest horizontal
    distance from a source to the grid's xy box widened by one voxel, ``Mz0``
    the z slope per unit tau of row 0 of every column and ``h`` from
    :func:`voxel_rows_per_voxel`. The kernel needs it below 2^30 (its 32.32
    fixed point then cannot overflow), which any real scan is by far. ``nz``
    counts the idle lanes of the last z tile too (up to ``32 max(VOXEL_KZ)``
    beyond the volume)."""
    nz = int(grid3[0]) + 32 * max(VOXEL_KZ)
    offset, scale = np.asarray(offset, float), np.asarray(scale, float)
    h = voxel_rows_per_voxel(params, n_cols, grid3, offset, scale)
    tau_max = _reach_distances(params, grid3, offset, scale)[1]
    u = np.arange(n_cols, dtype=np.float64)
    Minv = params[:, 3:].reshape(-1, 3, 3)
    mz0 = np.abs(Minv[:, 2, 0, None] * u + Minv[:, 2, 2, None]) / _column_qxy(params, u) * scale[2]
    pz = np.abs((params[:, 2] - offset[2]) * scale[2]) + 1.0
    with np.errstate(invalid="ignore", over="ignore"):
        return float(h * (nz + pz.max() + (tau_max * mz0.max(axis=1)).max()))


def voxel_z_range(params: np.ndarray, n_rows: int, n_cols: int, grid3, offset, scale) -> tuple[int, int]:
    """The z slices ``[k_lo, k_hi)`` any sample of structured Joseph can weight
    (a detector of few rows against a tall volume reaches a band of them):
    row ``r`` of column ``u`` is at z index ``pz + tau (Mz0(u) + r Mz1(u))``
    (voxel-centre units) a horizontal distance ``tau`` from the source, affine
    in ``r`` and in ``tau``, so its extremes over the rows lie at the first and
    last row and, over the samples, at the nearest and farthest ``tau`` of the
    grid's xy box widened by one voxel (:func:`_reach_box`); a sample weights
    the two z voxels around it, padded by one more. The gather transpose visits
    only these slices (the rest of ``A.T`` is zero)."""
    nz = int(grid3[0])
    offset, scale = np.asarray(offset, float), np.asarray(scale, float)
    taus = [tau[:, None] for tau in _reach_distances(params, grid3, offset, scale)]
    u = np.arange(n_cols, dtype=np.float64)
    Minv = params[:, 3:].reshape(-1, 3, 3)
    qxy = _column_qxy(params, u)
    pz = ((params[:, 2] - offset[2]) * scale[2] - 0.5)[:, None]
    z_min, z_max = np.inf, -np.inf
    for r in (0.0, n_rows - 1.0):
        mz = (Minv[:, 2, 0, None] * u + Minv[:, 2, 1, None] * r + Minv[:, 2, 2, None]) / qxy * scale[2]
        for tau in taus:
            z = pz + tau * mz
            z_min, z_max = min(z_min, float(z.min())), max(z_max, float(z.max()))
    if not (np.isfinite(z_min) and np.isfinite(z_max)):
        return 0, nz
    return int(np.clip(np.floor(z_min) - 1, 0, nz)), int(np.clip(np.ceil(z_max) + 3, 0, nz))


def voxel_z_slices(nz: int, z_range: tuple[int, int] | None) -> tuple[int, int]:
    """(first slice, slices) the gather transpose's z tiles cover for the slices
    ``z_range`` (:func:`voxel_z_range`; None: all ``nz``): from a multiple of 32
    (a warp's lanes are 32 consecutive slices) to the range's end."""
    k_lo, k_hi = (0, nz) if z_range is None else z_range
    k_base = (k_lo // 32) * 32
    return k_base, max(k_hi - k_base, 1)


def voxel_view_floats(params: np.ndarray) -> np.ndarray:
    """(n_views, 8) float32 per view for the gather transpose's column_of_f:
    source x, y and the view parameters 8, 5, 3, 6 (M^-1's entries (1, 2),
    (0, 2), (0, 0), (1, 0)), as raytrace_voxel.cu's column_of_f reads them; two zeros."""
    out = np.zeros((params.shape[0], 8), np.float32)
    out[:, :6] = params[:, [0, 1, 8, 5, 3, 6]]
    return out


def voxel_rows_per_voxel(params: np.ndarray, n_cols: int, grid3, offset, scale) -> float:
    """The most detector rows per z voxel any (view, column, plane) of structured
    Joseph can have where it reaches the volume, ``h = 1 / |zS|`` with ``zS`` the
    z-index change per row: ``tau |M^-1[2, 1]| scale_z / |q_xy(u)|``, smallest at
    the smallest horizontal distance ``tau`` from the source to the grid's xy box
    widened by one voxel (a sample reaches one voxel beyond its plane position)
    and the largest ``|q_xy|`` (an end column: ``|q_xy|`` is convex in ``u``).
    ``inf`` where a source lies inside that box. The gather transpose needs
    ``h < JV_HMAX + 1``."""
    tau = _reach_distances(params, grid3, offset, scale)[0]
    Minv = params[:, 3:].reshape(-1, 3, 3)
    zs = tau * np.abs(Minv[:, 2, 1]) * float(scale[2]) / _column_qxy(params, (0.0, n_cols - 1.0)).max(axis=1)
    return float(np.inf) if np.any(zs <= 0) else float(1.0 / zs.min())


def view_parameters(geometry) -> tuple[int, np.ndarray]:
    """(kind, params): 0 for parallel, 1 for cone, 2 for parallel_vec, and
    (n_views, 12) float64 per-view numbers.

    parallel: ``cos t, sin t, centre`` (column pixels, axis shift included);
    cone: source ``(x, y, z)`` then ``M^-1`` row major, ``M = P[:, :3]``, the
    same inverse ``ConeGeometry.ray_directions`` uses; parallel_vec
    (``ParallelVecGeometry``): pixel (0, 0)'s centre, the column and row
    steps and the unit ray, the numbers ``leveret.operators.projector.vec_rays``
    builds the CPU's rays from.
    """
    if isinstance(geometry, ParallelVecGeometry):
        params = np.hstack([geometry.pixel00(), geometry.u, geometry.v, geometry.rays])
        return 2, np.ascontiguousarray(params)
    if isinstance(geometry, ParallelGeometry):
        t = geometry.angles
        params = np.zeros((t.size, 12))
        params[:, 0] = np.cos(t)
        params[:, 1] = np.sin(t)
        params[:, 2] = geometry.centers()
        return 0, params
    if isinstance(geometry, ConeGeometry):
        P = geometry.matrices if geometry.matrices.ndim == 3 else geometry.matrices[None]
        params = np.zeros((P.shape[0], 12))
        params[:, :3] = geometry.source_positions()
        params[:, 3:] = np.linalg.inv(P[:, :, :3]).reshape(-1, 9)
        return 1, params
    raise TypeError(
        f"geometry: expected a ParallelGeometry, ParallelVecGeometry or ConeGeometry, got {type(geometry).__name__}"
    )


def shared_limit() -> int:
    """The most dynamic shared memory a block may opt in to on the current GPU
    (227 KiB on Hopper): structured Siddon at 1024^2 columns needs 48.04 KiB."""
    import cupy

    from . import device_properties

    return int(device_properties(cupy.cuda.Device().id).get("sharedMemPerBlockOptin", SHARED_DEFAULT))


def _opted_in(kernel, shared: int):
    """``kernel``, allowed ``shared`` bytes of dynamic shared memory."""
    if shared > SHARED_DEFAULT:
        kernel.max_dynamic_shared_size_bytes = shared
    return kernel


def structured_ratio(params: np.ndarray, n_rows: int, n_cols: int, spacing_xyz) -> float:
    """How far a cone geometry is from the assumptions of the structured path
    (Thompson and Lionheart (2014)); the structured
    path is valid when the result is <= 1.

    Two conditions, per view: (a) every detector row of a column has the same
    xy ray direction, i.e. ``M^-1``'s v column has no xy part (circular scans
    without detector tilt); returned as ``inf`` when it fails. (b) within one
    xy voxel step a ray crosses at most one z face: the longest horizontal
    run inside one xy voxel, ``min(vx / |ex|, vy / |ey|)``, times the slope
    ``|dz| / |dxy|`` is at most one z voxel. The slope is extreme at the
    first or last row (it is monotonic in v on a flat detector), so those
    rows of every column are checked. Returns the largest ratio.
    """
    vx, vy, vz = spacing_xyz
    Minv = params[:, 3:].reshape(-1, 3, 3)
    scale = np.abs(Minv).max(axis=(1, 2))
    if np.any(np.abs(Minv[:, :2, 1]) > 1e-12 * scale[:, None]):
        return float("inf")
    u = np.arange(n_cols, dtype=np.float64)
    worst = 0.0
    for v in (0.0, float(n_rows - 1)):
        q = Minv[:, :, 0, None] * u + Minv[:, :, 1, None] * v + Minv[:, :, 2, None]  # (n, 3, n_cols)
        qxy = np.hypot(q[:, 0], q[:, 1])
        if np.any(qxy == 0):
            return float("inf")
        ex, ey = np.abs(q[:, 0]) / qxy, np.abs(q[:, 1]) / qxy
        with np.errstate(divide="ignore"):
            run = np.minimum(np.where(ex > 0, vx / ex, np.inf), np.where(ey > 0, vy / ey, np.inf))
        worst = max(worst, float(np.max(run * np.abs(q[:, 2]) / qxy / vz)))
    return worst


def structured_float32_bound(
    params: np.ndarray, n_rows: int, n_cols: int, grid3, spacing_xyz, max_abs_volume: float, max_abs_projection: float
) -> float:
    """Bound on ``|A32 x - A64 x|`` (absolute, per ray) of the structured path's
    float32 march against the float64 operator (raytrace_siddon.cu, ``structured_fast``).

    ``2 eps_t L N_b max|x| + 16 u max|Ax|`` with ``u = 2^-24``, ``T`` the
    longest xy chord of the grid (world length), ``eps_t = 2 u T`` (how far a
    boundary between two voxels can move along the ray's horizontal length),
    ``L`` the largest 3D length per unit horizontal length of a ray, and
    ``N_b = nx + ny + nz + 2`` boundaries per ray; the last term is the
    float32 partial sums. Not covered: a near-horizontal row whose ray runs
    within ``u (1/2 + 2 T |dz/dxy|)`` z voxels of a z face (float32 may put it
    on the other side, as float64 may at 2^-53).
    """
    nz, ny, nx = (int(n) for n in grid3)
    vx, vy, _ = spacing_xyz
    u = 2.0**-24
    T = float(np.hypot(nx * vx, ny * vy))
    Minv = params[:, 3:].reshape(-1, 3, 3)
    cols = np.arange(n_cols, dtype=np.float64)
    L = 1.0
    for v in (0.0, float(n_rows - 1)):
        q = Minv[:, :, 0, None] * cols + Minv[:, :, 1, None] * v + Minv[:, :, 2, None]
        L = max(L, float(np.max(np.sqrt(1.0 + (q[:, 2] / np.hypot(q[:, 0], q[:, 1])) ** 2))))
    return 2.0 * (2.0 * u * T) * L * (nx + ny + nz + 2) * max_abs_volume + 16.0 * u * max_abs_projection


def joseph_float32_bound(grid3, spacing_xyz, max_abs_volume: float, max_abs_projection: float) -> float:
    """Bound on ``|A32 x - A64 x|`` (absolute, per ray) of the float32 Joseph
    march against the float64 operator (raytrace_general.cu, ``joseph_fast``):
    ``w n_m (4 (eps_u + eps_v) + 12 u) max|x| + 16 u max|Ax|`` with
    ``u = 2^-24``, ``eps = u (1 + n_m)`` (index error of a sample), ``n_m``
    the planes along the dominant axis and ``w <= sqrt(3)`` times its voxel
    size; taken here over the three axes (whichever is dominant)."""
    u = 2.0**-24
    nz, ny, nx = (int(n) for n in grid3)
    worst = 0.0
    for n_m, size in zip((nx, ny, nz), spacing_xyz):
        eps = u * (1 + n_m)
        worst = max(worst, np.sqrt(3.0) * size * n_m * (8 * eps + 12 * u))
    return worst * max_abs_volume + 16 * u * max_abs_projection


class CudaRaytracer:
    """The GPU kernels of one projector: ``forward`` and ``adjoint`` on CuPy arrays.

    Parameters
    ----------
    geometry : ParallelGeometry, ParallelVecGeometry or ConeGeometry
    grid3 : (nz, ny, nx) of the volume as the kernels see it (2D: nz = 1)
    offset, scale : (3,) float64, world low corner and 1 / voxel size, (x, y, z)
    model : "siddon" or "joseph"
    dtype : float32 or float64
    structured : "auto" (when valid), True (required: ValueError if not valid) or False
    transpose : {"auto", "gather", "scatter"}
        How the transpose runs. "scatter": adding into the volume with
        atomicAdd (every path): the forward's traversal, ray by ray, except
        for structured Joseph where the gather transpose applies (and the
        column's bands fit in shared memory: ``band``), where each voxel of
        a column's band on a plane sums its rows first
        (raytrace_joseph.cu: structured_joseph_adjoint_band). "gather": each voxel
        gathers the forward's weights (raytrace_voxel.cu: no atomics,
        deterministic); structured Joseph only, where detector rows are at
        least an eighth of a voxel apart in z and the sources lie outside the
        grid (ValueError elsewhere). "auto": :func:`auto_transpose`, "gather"
        where it applies and the cost model (:func:`transpose_times`, kept in
        ``predicted``) predicts it no slower, else "scatter".
    views_per_batch : int or None
        Views per launch of the gather transpose; None: as many as fit in
        ``VOXEL_TABLE_BYTES`` of tables (and a quarter of the free GPU memory).
    voxel_patch : {None, 1, 2}
        The gather transpose's voxel columns per side of a warp's patch; None:
        :func:`voxel_patch` of the z depth per lane and the detector's columns
        and rows per voxel.
    z_slab : int or None
        z slices per launch of structured float32 Siddon's transpose (its
        atomic adds go slab by slab, so the blocks running at once add into a
        part of the volume that stays in L2); None: :func:`siddon_z_slab`.
    view_group : int or None
        Views per detector column that run side by side in structured
        float32 Siddon's transpose; None: :func:`siddon_view_group`.
    """

    def __init__(
        self,
        geometry,
        grid3,
        offset,
        scale,
        model: str,
        dtype,
        structured="auto",
        transpose: str = "auto",
        views_per_batch: int | None = None,
        voxel_patch: int | None = None,
        z_slab: int | None = None,
        view_group: int | None = None,
    ):

        from .. import _validate as v

        transpose = v.choice("transpose", transpose, TRANSPOSES)
        self.views_per_batch = None if views_per_batch is None else v.positive_int("views_per_batch", views_per_batch)
        if voxel_patch not in (None, 1, 2):
            raise ValueError(f"voxel_patch: expected None, 1 or 2, got {voxel_patch!r}")
        self.voxel_patch = voxel_patch
        self.z_slab = siddon_z_slab(grid3) if z_slab is None else v.positive_int("z_slab", z_slab)
        self.kind, params = view_parameters(geometry)
        self.view_group = (
            siddon_view_group(grid3, params.shape[0], self.z_slab)
            if view_group is None
            else v.positive_int("view_group", view_group)
        )
        self.is2d = int(isinstance(geometry, ParallelGeometry) and geometry.is_2d)
        shape = tuple(geometry.projection_shape)
        self.n_rows, self.n_cols = (1, shape[1]) if self.is2d else (shape[1], shape[2])
        self.grid3 = tuple(int(n) for n in grid3)
        self.model = model
        self.dtype = np.dtype(dtype)
        self.params_host = params
        self.params = upload(params)  # complete: other threads' streams read it
        g = np.zeros(8)
        g[0] = getattr(geometry, "det_spacing", 1.0)
        g[1] = getattr(geometry, "row_spacing", 1.0)
        g[2:5] = offset
        g[5:8] = scale
        self.g_host = g
        self.g = upload(g)
        nz, ny, nx = self.grid3
        if model == "siddon":
            shared = 8 * (2 * nx + 2 * ny + 4) + 4 * (nx + ny + 1)
            if self.dtype == np.float32:
                shared += 4 * (nx + ny + 2)  # the float32 copy of the merged crossings (structured_fast)
        else:
            shared = 16 * max(nx, ny)  # structured_joseph: one JPlane per plane
        self.shared_bytes = shared
        # Structured Joseph exists in float32 only (raytrace_joseph.cu).
        has_kernel = model == "siddon" or self.dtype == np.float32
        self.ratio = (
            structured_ratio(params, self.n_rows, self.n_cols, 1.0 / np.asarray(scale))
            if self.kind == 1 and has_kernel
            else float("inf")
        )
        limit = shared_limit()
        valid = self.ratio <= 1.0 and shared <= limit
        if model == "joseph":  # 32-bit element offsets into the padded volume
            valid = valid and (ny + 2) * (nx + 2) * joseph_padded_nz(nz) < 2**31
        if structured is True and not valid:
            raise ValueError(
                f"structured: the structured path does not apply here (max |dz|/|dxy| "
                f"ratio {self.ratio:.3g} must be <= 1, the geometry must be cone-beam "
                f"without detector tilt, Siddon or float32 Joseph, shared memory "
                f"{shared} <= {limit} bytes)"
            )
        self.structured = valid if structured == "auto" else bool(structured)
        # The gather transpose reads rows up to JV_HMAX + 1 from a voxel (its
        # padding) and steps row coordinates in 32.32 fixed point.
        voxel_ok = (
            self.structured and model == "joseph" and voxel_applies(params, self.n_cols, self.grid3, offset, scale)
        )
        if transpose == "gather" and not voxel_ok:
            raise ValueError(
                "transpose: 'gather' applies to structured Joseph (cone beam without detector tilt, "
                "precision float32) with detector rows at least an eighth of a voxel apart in z and the "
                "sources outside the grid; use 'auto' or 'scatter' here"
            )
        # The scatter transpose driven by columns (structured_joseph_adjoint_band) needs the voxel
        # transpose's row spacing and a column's bands and rows in shared memory; else the scatter.
        self.band_shared = band_shared_bytes(nx, ny, self.n_rows)
        self.band = voxel_ok and self.band_shared <= limit
        self.predicted = None  # the cost model's seconds of both transposes, where both apply
        self.voxel_z = (0, nz)  # the slices the gather transpose visits (voxel_z_range, where it applies)
        self.voxel_kz = voxel_kz(nz)  # the gather transpose's z voxels per lane (from the geometry where it applies)
        self.voxel_sampling = (1.0, 1.0)  # and the detector columns and rows per voxel that choose its patch
        if voxel_ok:
            P = geometry.matrices if geometry.matrices.ndim == 3 else geometry.matrices[None]
            from . import gpu_name

            self.voxel_z = voxel_z_range(params, self.n_rows, self.n_cols, self.grid3, offset, scale)
            work = transpose_work(P, self.n_rows, self.n_cols, self.grid3, offset, scale, self.voxel_z)
            self.predicted = transpose_times(work, tuned_atomic_scale(gpu_name()))
            self.voxel_kz = work["kz"]
            self.voxel_sampling = (work["cols_per_voxel"], work["rows_per_voxel"])
        if transpose == "auto":
            transpose = auto_transpose(self.predicted)
        self.transpose = transpose
        self._voxel_floats = None  # the gather transpose's per-view float32 numbers on the GPU, made at first use
        self._voxel_batch = None  # the gather transpose's views per launch, set at first use

    @property
    def _suffix(self) -> str:
        return "f32" if self.dtype == np.float32 else "f64"

    def _general_kernel(self, direction: str):
        """The general path's kernel: float32 Joseph marches in float32
        (``joseph_fast``, bound in raytrace_general.cu), everything else in float64."""
        module = load_module("raytrace_general")
        if self.model == "joseph" and self.dtype == np.float32:
            return module.get_function(f"joseph_{direction}_fast")
        return module.get_function(f"{self.model}_{direction}_{self._suffix}")

    def subset(self, views: np.ndarray) -> "CudaRaytracer":
        """The kernels of some views, with their numbers on the current device
        (which may differ from this one's: the several-GPU path)."""
        sub = object.__new__(CudaRaytracer)
        sub.__dict__.update(self.__dict__)
        sub.params_host = self.params_host[views]
        sub.params = upload(sub.params_host)
        sub.g = upload(self.g_host)
        sub._voxel_floats = None
        sub._voxel_batch = None
        return sub

    def _scalars(self):
        nz, ny, nx = self.grid3
        return np.int32(nx), np.int32(ny), np.int32(nz)

    def _structured(self, name: str, volT, proj):
        """Launch a structured Siddon kernel: one block per (column, view).
        float32 runs the float32 march (``structured_fast`` in
        raytrace_siddon.cu, error bound there) in view groups
        (:meth:`_grouped`), its transpose z slab by z slab (``z_slab``) in
        groups of ``view_group``;
        float64 the float64 one, in passes of at most
        65535 views (the grid's y limit)."""
        if self.dtype == np.float32 and name.endswith("adjoint"):
            nz = self.grid3[0]
            for z0 in range(0, nz, self.z_slab):
                self._grouped(
                    "raytrace_siddon",
                    f"{name}_fast",
                    volT,
                    proj,
                    group=self.view_group,
                    slab=(np.int32(z0), np.int32(min(nz, z0 + self.z_slab))),
                )
            return
        if self.dtype == np.float32:
            self._grouped("raytrace_siddon", f"{name}_fast", volT, proj)
            return
        nx, ny, nz = self._scalars()
        kernel = _opted_in(load_module("raytrace_siddon").get_function(f"{name}_{self._suffix}"), self.shared_bytes)
        n_views = self.params_host.shape[0]
        for v0 in range(0, n_views, MAX_GRID_Y):
            v1 = min(n_views, v0 + MAX_GRID_Y)
            kernel(
                (self.n_cols, v1 - v0),
                (STRUCTURED_BLOCK,),
                (
                    volT,
                    proj[v0:v1],
                    nx,
                    ny,
                    nz,
                    self.params[v0:v1],
                    self.g,
                    np.int32(self.n_rows),
                    np.int32(self.n_cols),
                ),
                shared_mem=self.shared_bytes,
            )

    def _grouped(
        self, module: str, name: str, vol, proj, group: int = VIEW_GROUP, slab: tuple = (), shared: int | None = None
    ):
        """Launch a structured float32 kernel with blocks (column, view) in
        groups of ``group`` views per column (raytrace_common.cuh: grouped_block);
        ``slab``: the z slab (z0, z1) Siddon's transpose adds into; ``shared``:
        the kernel's shared memory (None: ``shared_bytes``)."""
        nx, ny, nz = self._scalars()
        shared = self.shared_bytes if shared is None else shared
        kernel = _opted_in(load_module(module).get_function(name), shared)
        n_views = self.params_host.shape[0]
        group = min(group, n_views)
        step = MAX_GRID_Y * group
        for v0 in range(0, n_views, step):
            v1 = min(n_views, v0 + step)
            kernel(
                (self.n_cols * group, -(-(v1 - v0) // group)),
                (STRUCTURED_BLOCK,),
                (
                    vol,
                    proj[v0:v1],
                    nx,
                    ny,
                    nz,
                    self.params[v0:v1],
                    self.g,
                    np.int32(v1 - v0),
                    np.int32(self.n_rows),
                    np.int32(self.n_cols),
                    np.int32(group),
                    *slab,
                ),
                shared_mem=shared,
            )

    def _padded(self):
        """Structured Joseph's zero-bordered z-fastest volume (ny + 2, nx + 2, :func:`joseph_padded_nz`)."""
        import cupy

        nz, ny, nx = self.grid3
        return cupy.zeros((ny + 2, nx + 2, joseph_padded_nz(nz)), np.float32)

    def _joseph_voxel(self, proj, out):
        """Structured Joseph's transpose, voxel-driven (raytrace_voxel.cu:
        joseph_voxel_gather): per batch of views the per-column numbers and the
        values y w in (view, column, row) order, then one pass over the
        z-fastest volume; finally the copy back to (nz, ny, nx)."""
        import cupy

        nx, ny, nz = self._scalars()
        c = voxel_constants()
        rows_p = self.n_rows + c["pad_lo"] + c["pad_hi"]
        n_views = self.params_host.shape[0]
        if self._voxel_batch is None:  # once: reading the free memory waits for the device
            per_view = 4 * self.n_cols * rows_p + 8 * 8 * self.n_cols
            free = cupy.cuda.Device().mem_info[0]
            batch = int(max(1, min(n_views, MAX_GRID_Y, min(VOXEL_TABLE_BYTES, free // 4) // per_view)))
            self._voxel_batch = batch if self.views_per_batch is None else min(batch, self.views_per_batch)
        batch = self._voxel_batch
        kz = self.voxel_kz
        patch = voxel_patch(kz, *self.voxel_sampling) if self.voxel_patch is None else self.voxel_patch
        module = load_module("raytrace_voxel", DEFINES if patch == 1 else VOXEL_PATCH2_DEFINES)
        c = voxel_constants(KERNEL_CONSTANTS if patch == 1 else VOXEL_PATCH2_CONSTANTS)
        bx, by = (w * c["patch"] for w in c["warps"])  # voxel columns per block (8 warps)
        k_base, slices = voxel_z_slices(int(nz), self.voxel_z)  # the slices some ray reaches
        grid = (-(-int(nx) // bx), -(-int(ny) // by), -(-slices // (32 * kz)))
        values = cupy.empty(batch * self.n_cols * rows_p, np.float32)
        cols = cupy.empty(batch * self.n_cols * 8, np.float64)
        flags = cupy.empty(batch, np.int32)
        covered = k_base == 0 and grid[2] * 32 * kz >= int(nz)
        volT = (cupy.empty if covered else cupy.zeros)((int(ny), int(nx), int(nz)), np.float32)
        if self._voxel_floats is None:  # once: a pageable upload per call would wait for the stream
            self._voxel_floats = upload(voxel_view_floats(self.params_host))
        vf = self._voxel_floats
        for v0 in range(0, n_views, batch):
            v1 = min(n_views, v0 + batch)
            nv = np.int32(v1 - v0)
            par = self.params[v0:v1]
            n = (v1 - v0) * self.n_cols
            flags.fill(0)
            module.get_function("joseph_voxel_columns")(
                (-(-n // BLOCK),), (BLOCK,), (cols, flags, par, self.g, nx, ny, nv, np.int32(self.n_cols))
            )
            module.get_function("joseph_voxel_values")(
                (-(-self.n_cols // 32), -(-rows_p // 32), int(nv)),
                (32, 8),
                (values, proj[v0:v1], nx, ny, nz, par, self.g, nv, np.int32(self.n_rows), np.int32(self.n_cols)),
            )
            module.get_function(f"joseph_voxel_gather_kz{kz}")(
                grid,
                (256,),
                (
                    volT,
                    values,
                    cols,
                    flags,
                    vf[v0:v1],
                    self.g,
                    nx,
                    ny,
                    nz,
                    nv,
                    np.int32(self.n_rows),
                    np.int32(self.n_cols),
                    np.int32(v0 > 0),
                    np.int32(k_base),
                ),
            )
        return self._zfast(False, volT, out)

    def _zfast(self, to: bool, src, dst, padded: bool = False):
        """Copy between the volume (nz, ny, nx) and the structured kernels' z-fastest
        layout (ny, nx, nz) with the tiled kernels of raytrace_layout.cu (``to``:
        into the z-fastest one); both arrays C-contiguous of the working dtype.
        ``padded``: structured Joseph's zero-bordered layout (:meth:`_padded`),
        whose border is left as it is."""
        nx, ny, nz = self._scalars()
        if int(ny) > MAX_GRID_Y:  # the grid's z extent; not a size anyone projects
            inner = dst if to else src
            if padded:
                inner = inner[1:-1, 1:-1, JOSEPH_PAD_Z : JOSEPH_PAD_Z + int(nz)]
            if to:
                inner[...] = src.transpose(1, 2, 0)
            else:
                dst[...] = inner.transpose(2, 0, 1)
            return dst
        name = f"{'to' if to else 'from'}_{'zpad_f32' if padded else 'zfast_' + self._suffix}"
        load_module("raytrace_layout").get_function(name)(
            (-(-int(nx) // 32), -(-int(nz) // 32), int(ny)), (32, 8, 1), (src, dst, nx, ny, nz)
        )
        return dst

    def laid_out(self, vol):
        """``vol`` (nz, ny, nx) as :meth:`forward`'s kernels read it: the
        structured paths' z-fastest copy (zero-bordered for Joseph), else
        ``vol`` itself. Views dealt to one GPU in several blocks share one."""
        import cupy

        nx, ny, nz = self._scalars()
        if self.structured and self.model == "joseph":
            return self._zfast(True, vol, self._padded(), padded=True)
        if self.structured:
            return self._zfast(True, vol, cupy.empty((int(ny), int(nx), int(nz)), self.dtype))  # z fastest
        return vol

    def forward(self, vol, out, *, laid_out=None):
        """``out`` (n_views, n_rows, n_cols) = A ``vol`` (nz, ny, nx); both C-contiguous CuPy arrays.
        ``laid_out``: :meth:`laid_out` of ``vol``, when the caller has it already."""
        n_views = self.params_host.shape[0]
        nx, ny, nz = self._scalars()
        if self.structured:
            src = self.laid_out(vol) if laid_out is None else laid_out
            if self.model == "joseph":
                self._grouped("raytrace_joseph", "structured_joseph_forward_fast", src, out)
            else:
                self._structured("structured_siddon_forward", src, out)
            return out
        n = n_views * self.n_rows * self.n_cols
        self._general_kernel("forward")(
            (-(-n // BLOCK),),
            (BLOCK,),
            (
                vol,
                out,
                nx,
                ny,
                nz,
                self.params,
                self.g,
                np.int32(n_views),
                np.int32(self.n_rows),
                np.int32(self.n_cols),
                np.int32(self.kind),
                np.int32(self.is2d),
            ),
        )
        return out

    def adjoint(self, proj, out):
        """``out`` (nz, ny, nx) = A^T ``proj``; ``out`` is overwritten."""
        import cupy

        n_views = self.params_host.shape[0]
        nx, ny, nz = self._scalars()
        if self.structured and self.model == "joseph" and self.transpose == "gather":
            return self._joseph_voxel(proj, out)
        if self.structured and self.model == "joseph":
            volP = self._padded()
            if self.band:
                self._grouped("raytrace_joseph", "structured_joseph_adjoint_band", volP, proj, shared=self.band_shared)
            else:
                self._grouped("raytrace_joseph", "structured_joseph_adjoint_fast", volP, proj)
            self._zfast(False, volP, out, padded=True)
            return out
        if self.structured:
            volT = cupy.zeros((int(ny), int(nx), int(nz)), self.dtype)
            self._structured("structured_siddon_adjoint", volT, proj)
            self._zfast(False, volT, out)
            return out
        out.fill(0)
        n = n_views * self.n_rows * self.n_cols
        self._general_kernel("adjoint")(
            (-(-n // BLOCK),),
            (BLOCK,),
            (
                out,
                proj,
                nx,
                ny,
                nz,
                self.params,
                self.g,
                np.int32(n_views),
                np.int32(self.n_rows),
                np.int32(self.n_cols),
                np.int32(self.kind),
                np.int32(self.is2d),
            ),
        )
        return out
