"""The rules of the structured transposes on CUDA, checked on the CPU.

``transpose="auto"``'s rule for structured Joseph: for each measured point of docs/performance.md's table ("Which
transpose") the cost model (:func:`leveret.cuda.raytrace.transpose_times` of
:func:`~leveret.cuda.raytrace.transpose_work`) picks the transpose that was
measured faster (or one measured within 10 % of it), and predicts the two
times' ratio to within less than the measured margin between them, or within
1.5x where they lie closer.
The voxel gather's z depth per lane: :func:`~leveret.cuda.raytrace.voxel_kz`
picks one measured within 2 % of the fastest. Structured Siddon's transpose in
z slabs: :func:`~leveret.cuda.raytrace.siddon_z_slab`'s slab depth and
:func:`~leveret.cuda.raytrace.siddon_view_group`'s views per group at that
depth are a pair measured within 2 % of the fastest. No GPU needed: the
rules read only the geometry."""

from __future__ import annotations

import math

import numpy as np
import pytest

from leveret.cuda.raytrace import (
    auto_transpose,
    siddon_view_group,
    siddon_z_slab,
    structured_ratio,
    transpose_times,
    transpose_work,
    view_parameters,
    voxel_applies,
    voxel_patch,
    voxel_z_range,
)
from leveret.geometry import ConeGeometry, VolumeGeometry

# The table's scans (bench/bench_sweep.py's cone points): an n^3 grid 512 mm
# wide, source 1000 mm and detector 1500 mm from the axis, the detector's field
# at the axis 4/3 of the grid with ``sampling`` pixels per voxel there, or
# (``rows``) a detector of that many rows.
SID, SDD, EXTENT, FIELD = 1000.0, 1500.0, 512.0, 4.0 / 3.0


def _scan(n, views, sampling, rows=None):
    voxel = EXTENT / n
    n_cols = round(FIELD * n * sampling)
    n_rows = round(FIELD * n * sampling) if rows is None else rows
    geometry = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, views, endpoint=False), SID, SDD, n_rows, n_cols, voxel / sampling * SDD / SID
    )
    return geometry, VolumeGeometry((n, n, n), voxel)


# (n, views, sampling, detector rows or None, measured ms: A, voxel gather, band transpose) on an H200, all in
# one run (docs/performance.md, "Which transpose"; tools/diagnostics/transpose_grid.py and transpose_rows.py
# measure them): the sweep's circular scans from 256^3 to 1024^3, and detectors of 8 to 256 rows.
TABLE = [
    (256, 180, 1.0, None, 5.22, 7.46, 7.64),
    (256, 180, 2.5, None, 27.09, 32.02, 19.96),
    (256, 360, 0.5, None, 3.71, 7.14, 7.66),
    (256, 360, 0.75, None, 6.44, 10.32, 11.38),
    (256, 360, 1.0, None, 10.31, 14.94, 15.3),
    (256, 360, 1.5, None, 20.88, 25.42, 23.35),
    (256, 360, 2.0, None, 35.13, 42.93, 31.75),
    (256, 360, 2.5, None, 53.7, 66.49, 40.9),
    (256, 720, 0.75, None, 12.72, 20.76, 22.77),
    (256, 1440, 1.0, None, 41.05, 64.79, 62.55),
    (512, 180, 0.75, None, 30.54, 34.69, 78.38),
    (512, 360, 0.75, None, 50.41, 67.99, 122.8),
    (512, 720, 0.5, None, 48.4, 78.78, 144.95),
    (512, 720, 0.75, None, 92.67, 137.66, 198.56),
    (512, 720, 1.0, None, 146.67, 209.68, 254.18),
    (512, 720, 1.5, None, 325.54, 371.45, 371.79),
    (512, 720, 2.0, None, 550.63, 598.82, 495.08),
    (512, 720, 2.5, None, 829.66, 920.98, 625.29),
    (512, 1440, 0.75, None, 180.29, 296.39, 370.27),
    (768, 720, 0.75, None, 348.67, 448.81, 1012.39),
    (1024, 720, 0.75, None, 1053.32, 1064.33, 2933.93),
    (1024, 1440, 0.75, None, 1670.58, 2140.38, 5118.1),
    (256, 360, 1.0, 8, 1.58, 11.05, 2.78),
    (256, 360, 1.0, 16, 1.6, 10.96, 2.69),
    (256, 360, 1.0, 24, 1.61, 11.24, 2.83),
    (256, 360, 1.0, 32, 1.78, 11.38, 3.36),
    (256, 360, 1.0, 64, 2.84, 11.44, 4.64),
    (256, 360, 1.0, 128, 4.66, 14.69, 7.99),
    (256, 360, 1.0, 170, 6.91, 14.62, 10.21),
    (256, 360, 1.0, 256, 8.5, 14.93, 14.12),
    (512, 720, 0.75, 24, 10.22, 65.54, 16.84),
    (512, 720, 0.75, 64, 15.7, 66.07, 32.86),
    (512, 720, 0.75, 128, 27.39, 78.88, 60.97),
    (512, 720, 0.75, 256, 54.25, 132.36, 121.25),
]


@pytest.mark.parametrize(
    "n, views, sampling, rows, t_a, t_voxel, t_atomic",
    TABLE,
    ids=[f"{r[0]}^3-{r[1]}v-{r[2]}px" + (f"-{r[3]}rows" if r[3] else "") for r in TABLE],
)
def test_auto_transpose_picks_the_faster_or_one_within_10_percent(n, views, sampling, rows, t_a, t_voxel, t_atomic):
    geometry, volume = _scan(n, views, sampling, rows)
    _, params = view_parameters(geometry)
    offset = np.array([volume.extent(a)[0] for a in "xyz"])
    scale = 1.0 / np.array([volume.spacing(a) for a in "xyz"])
    assert structured_ratio(params, geometry.n_rows, geometry.n_cols, 1.0 / scale) <= 1
    assert voxel_applies(params, geometry.n_cols, volume.shape, offset, scale)
    z_range = voxel_z_range(params, geometry.n_rows, geometry.n_cols, volume.shape, offset, scale)
    predicted = transpose_times(
        transpose_work(geometry.matrices, geometry.n_rows, geometry.n_cols, volume.shape, offset, scale, z_range)
    )
    picked = {"gather": t_voxel, "scatter": t_atomic}[auto_transpose(predicted)]
    assert picked <= 1.1 * min(t_voxel, t_atomic)  # the faster, or one within 10 % of it (three such rows)
    # the model's ratio atomic / voxel is off the measured one by less than the measured margin (no row
    # picked right by luck) or, where the two lie within 1.5x of each other, by less than 1.5x (at most
    # 1.35x, at 512^3 from 1440 views): a wrong pick there would cost at most that margin
    ratio = predicted["scatter"] / predicted["gather"]
    error, margin = abs(math.log(ratio / (t_atomic / t_voxel))), abs(math.log(t_atomic / t_voxel))
    assert error < max(margin, math.log(1.5)), (ratio, t_atomic / t_voxel)


# (n, views, sampling, A.T gather ms by z voxels per lane) on an H200
# (docs/performance.md, "Which transpose"; measured with transpose="gather" and
# each depth forced): the depths voxel_kz chooses between, each with the patch
# voxel_patch takes (8 and 4: 2 x 2 columns per warp; 12: 2 x 2 below 0.875
# detector columns per voxel, one column from there; 16: 2 x 2 below 0.625
# rows per voxel, one column from there). The 16-deep gather's odd row windows
# came later: at 512^3 from 720 views at 0.5, 0.75, 1 and 1.5 px/voxel, from
# 180 and 1440 views, and at 1024^3 its time here is from the run that compared
# them with the previous kernel; elsewhere it was 0.9-8.7 % slower than now.
KZ_TABLE = [
    (256, 360, 1.0, {16: 24.6, 12: 21.0, 8: 14.8}),
    (384, 720, 0.75, {16: 76.8, 12: 57.4, 8: 87.3, 4: 108.2}),
    (384, 720, 2.5, {16: 549.1, 12: 447.1, 8: 508.4}),
    (512, 720, 0.5, {16: 77.3, 12: 127.2, 8: 107.0}),
    (512, 180, 0.75, {16: 33.8, 12: 48.3, 8: 39.2, 4: 63.5}),
    (512, 720, 0.75, {16: 136.9, 12: 193.1, 8: 155.3, 4: 255.2}),
    (512, 1440, 0.75, {16: 294.6, 12: 406.1, 8: 324.2, 4: 518.8}),
    (512, 720, 1.0, {16: 207.9, 12: 333.3, 8: 228.6}),
    (512, 720, 1.5, {16: 369.0, 8: 381.5, 4: 546.7}),
    (512, 720, 2.0, {16: 650.2, 12: 890.2, 8: 596.4}),
    (512, 720, 2.5, {16: 1042.7, 8: 916.9, 4: 1117.7}),
    (640, 720, 0.75, {16: 413.9, 12: 307.0, 8: 358.9}),
    (768, 720, 0.75, {16: 603.7, 12: 446.7, 8: 517.7, 4: 856.3}),
    (768, 720, 1.5, {16: 1557.5, 12: 1288.1, 8: 1235.6}),
    (896, 720, 0.75, {16: 823.3, 12: 890.2, 8: 940.4}),
    (896, 720, 1.5, {16: 2150.8, 12: 2537.3, 8: 2221.8}),
    (1024, 720, 0.75, {16: 1060.5, 12: 1155.1, 8: 1225.2, 4: 2031.7}),
    (1024, 720, 1.5, {16: 2831.8, 12: 3363.0, 8: 2913.2}),
]


@pytest.mark.parametrize("n, views, sampling, times", KZ_TABLE, ids=[f"{r[0]}^3-{r[1]}v-{r[2]}px" for r in KZ_TABLE])
def test_voxel_kz_picks_a_measured_fastest(n, views, sampling, times):
    """The gather's z depth per lane, from the slices and the columns per
    voxel (:func:`~leveret.cuda.raytrace.voxel_kz` through transpose_work),
    is one measured within 2 % of the fastest."""
    geometry, volume = _scan(n, views, sampling)
    offset = np.array([volume.extent(a)[0] for a in "xyz"])
    scale = 1.0 / np.array([volume.spacing(a) for a in "xyz"])
    kz = transpose_work(geometry.matrices, geometry.n_rows, geometry.n_cols, volume.shape, offset, scale)["kz"]
    assert kz in times and times[kz] <= 1.02 * min(times.values()), (kz, times)


# (n, views, sampling, A.T gather ms at 12 z voxels per lane by voxel columns
# per side of a warp's patch) on an H200, the scans of KZ_TABLE where the rule
# takes 12 (docs/performance.md, "Which transpose").
PATCH12_TABLE = [
    (384, 720, 0.75, {1: 65.8, 2: 56.9}),
    (384, 720, 2.5, {1: 447.5, 2: 489.2}),
    (640, 720, 0.75, {1: 356.4, 2: 307.0}),
    (768, 720, 0.75, {1: 515.7, 2: 446.2}),
]


# The same at 16 z voxels per lane, where the rule takes 16 (one run, one
# H200, before the odd row windows; docs/performance.md, "Which transpose").
PATCH16_TABLE = [
    (512, 720, 0.5, {1: 93.6, 2: 85.6}),
    (512, 720, 0.75, {1: 138.3, 2: 159.7}),
    (512, 180, 0.75, {1: 34.6, 2: 38.5}),
    (1024, 720, 0.75, {1: 1070.2, 2: 1147.2}),
]


@pytest.mark.parametrize(
    "kz, n, views, sampling, times",
    [(12, *r) for r in PATCH12_TABLE] + [(16, *r) for r in PATCH16_TABLE],
    ids=[f"kz12-{r[0]}^3-{r[1]}v-{r[2]}px" for r in PATCH12_TABLE]
    + [f"kz16-{r[0]}^3-{r[1]}v-{r[2]}px" for r in PATCH16_TABLE],
)
def test_voxel_patch_picks_the_measured_faster(kz, n, views, sampling, times):
    """Where the rule takes 12 or 16 z voxels per lane, the patch
    (:func:`~leveret.cuda.raytrace.voxel_patch` of the columns and rows per
    voxel) is the one measured faster: 2 x 2 with the narrow row windows of a
    sparser detector, one column with the wide ones of a denser."""
    geometry, volume = _scan(n, views, sampling)
    offset = np.array([volume.extent(a)[0] for a in "xyz"])
    scale = 1.0 / np.array([volume.spacing(a) for a in "xyz"])
    work = transpose_work(geometry.matrices, geometry.n_rows, geometry.n_cols, volume.shape, offset, scale)
    assert work["kz"] == kz
    assert voxel_patch(kz, work["cols_per_voxel"], work["rows_per_voxel"]) == min(times, key=times.get)


def test_auto_transpose_without_voxel_is_atomic():
    """Where the gather does not apply (no prediction) the rule takes the scatter."""
    assert auto_transpose(None) == "scatter"
    assert auto_transpose({"gather": 2.0, "scatter": 1.0}) == "scatter"
    assert auto_transpose({"gather": 1.0, "scatter": 1.0}) == "gather"


# (grid (nz, ny, nx), views, scan, {(z_slab, views per group): measured ms of
# float32 structured Siddon's A.T}) on an H200, two runs (the sweep's scans at
# 0.75 px/voxel, half-angle 18.8 degrees unless given; docs/performance.md,
# "Structured Siddon's transpose in z slabs"). From the first: 512^3 with 4
# views per group, from 1440 views and at 15 degrees, 256^3, the 256 x 1024^2
# grid, and at 768^3 and 1024^3 one slab and slabs of 512; the rest from the
# second, but 512^3 from 360 views: 16 per group from a third run (alternated
# with the previous kernel), 8 from the sweep's (bench_sweep.json).
SIDDON_LAUNCHES = [
    (
        (512, 512, 512),
        180,
        0.75,
        {(256, 4): 68.48, (256, 8): 55.93, (256, 16): 56.84, (171, 8): 55.43, (171, 16): 55.34},
    ),
    (
        (512, 512, 512),
        720,
        0.75,
        {
            (512, 16): 197.83,
            (256, 8): 197.83,
            (256, 16): 187.36,
            (171, 8): 209.59,
            (171, 16): 205.27,
            (128, 8): 208.16,
            (128, 16): 203.61,
        },
    ),
    ((512, 512, 512), 360, 0.75, {(256, 8): 104.17, (256, 16): 96.7}),
    ((512, 512, 512), 1440, 0.75, {(256, 8): 393.37, (256, 16): 377.08}),
    ((512, 512, 512), 720, "15 degrees", {(512, 16): 189.03, (256, 8): 189.72, (256, 16): 178.58}),
    ((256, 256, 256), 720, 0.75, {(256, 8): 24.41, (256, 16): 24.32, (128, 16): 25.19}),
    (
        (640, 640, 640),
        720,
        0.75,
        {
            (640, 8): 524.63,
            (640, 16): 502.98,
            (320, 8): 420.46,
            (320, 16): 386.01,
            (214, 8): 411.56,
            (214, 16): 397.68,
            (160, 8): 402.3,
            (160, 16): 392.91,
        },
    ),
    (
        (768, 768, 768),
        180,
        0.75,
        {
            (768, 8): 318.58,
            (384, 4): 281.43,
            (384, 8): 268.94,
            (384, 16): 287.93,
            (256, 4): 259.72,
            (256, 8): 241.01,
            (256, 16): 266.86,
            (192, 4): 241.19,
            (192, 8): 217.39,
            (192, 16): 243.6,
        },
    ),
    (
        (768, 768, 768),
        720,
        0.75,
        {
            (768, 8): 1028.86,
            (512, 8): 844.89,
            (384, 8): 807.7,
            (384, 16): 781.45,
            (256, 8): 720.36,
            (256, 16): 697.95,
            (192, 8): 708.87,
            (192, 16): 692.98,
            (154, 8): 747.19,
            (154, 16): 735.8,
        },
    ),
    (
        (896, 896, 896),
        720,
        0.75,
        {
            (448, 8): 1424.66,
            (448, 16): 1472.39,
            (299, 8): 1293.14,
            (299, 16): 1317.84,
            (224, 8): 1168.19,
            (224, 16): 1167.12,
        },
    ),
    (
        (1024, 1024, 1024),
        180,
        0.75,
        {
            (1024, 8): 816.34,
            (512, 4): 726.31,
            (512, 8): 733.37,
            (512, 16): 766.68,
            (342, 4): 700.75,
            (342, 8): 709.38,
            (342, 16): 757.89,
            (256, 4): 641.54,
            (256, 8): 649.55,
            (256, 16): 710.82,
            (205, 4): 647.21,
            (205, 8): 658.79,
            (205, 16): 725.94,
        },
    ),
    (
        (1024, 1024, 1024),
        360,
        0.75,
        {
            (512, 4): 1350.01,
            (512, 8): 1325.83,
            (512, 16): 1412.82,
            (342, 8): 1236.57,
            (342, 16): 1358.29,
            (256, 8): 1082.36,
            (256, 16): 1229.76,
        },
    ),
    (
        (1024, 1024, 1024),
        720,
        0.75,
        {
            (1024, 8): 2824.49,
            (512, 8): 2305.0,
            (512, 16): 2465.53,
            (384, 8): 2006.97,
            (384, 16): 2193.71,
            (342, 8): 2071.68,
            (342, 16): 2264.12,
            (256, 8): 1828.83,
            (256, 16): 1965.19,
            (205, 8): 1968.8,
            (205, 16): 2041.55,
        },
    ),
    ((1024, 1024, 1024), 1440, 0.75, {(342, 8): 3575.33, (342, 16): 3568.29, (256, 8): 3490.4, (256, 16): 3474.9}),
    ((256, 1024, 1024), 720, 0.75, {(256, 8): 411.11, (256, 16): 418.88, (128, 16): 443.03}),
]


@pytest.mark.parametrize(
    "grid, views, scan, times",
    SIDDON_LAUNCHES,
    ids=[f"{'x'.join(map(str, r[0]))}-{r[1]}v-{r[2]}" for r in SIDDON_LAUNCHES],
)
def test_siddon_slab_and_view_group_pick_a_measured_fastest(grid, views, scan, times):
    """Structured Siddon's transpose launches: the z slab depth
    (:func:`~leveret.cuda.raytrace.siddon_z_slab`) and the views per group at
    that depth (:func:`~leveret.cuda.raytrace.siddon_view_group`) the rules
    take are a pair measured within 2 % of the fastest pair."""
    slab = siddon_z_slab(grid)
    group = siddon_view_group(grid, views, slab)
    assert (slab, group) in times, ((slab, group), sorted(times))
    assert times[slab, group] <= 1.02 * min(times.values()), ((slab, group), times)
