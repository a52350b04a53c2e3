"""LiveReconstructor against leveret.fbp / leveret.fdk of the same frames.

Tolerances: the live slices sum the same float32 samples in another order
(batches, weight corrections); the largest difference measured on these
cases is 3e-7 of the slice's peak (parallel) and 8e-8 (cone). The bound
2e-6 leaves a margin of 6x; float16 storage measured 1.0e-4, bounded by 3e-4.
"""

import numpy as np
import pytest
from cases import parallel_phantom_scan

import leveret
from leveret.live import Frame, LiveReconstructor, orthogonal_slices
from leveret.phantom import shepp_logan_3d
from leveret.preprocess import minus_log, normalize

TOL = 2e-6
N, ROWS, VIEWS = 32, 8, 48


@pytest.fixture(scope="module")
def scan():
    return parallel_phantom_scan(N, ROWS, VIEWS)


def _voxel_point(vol, i, j, k):
    return (vol.coordinates("x")[i], vol.coordinates("y")[j], vol.coordinates("z")[k])


def _err(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_parallel_slices_equal_fbp_after_the_last_frame_in_any_order(scan):
    angles, g, proj = scan
    vol = g.default_volume()
    ref = leveret.fbp(proj, g, vol, backend="cpu")
    rec = LiveReconstructor(vol, g, backend="cpu")
    rec.watch_orthogonal(_voxel_point(vol, 10, 12, 3))
    order = np.random.default_rng(1).permutation(VIEWS)
    for batch in np.array_split(order, 9):  # uneven batches, shuffled angles
        rec.add(proj[batch], angles[batch])
    s = rec.slices()
    assert _err(s["xy"], ref[3]) < TOL  # all three through ParallelBackprojection
    assert _err(s["xz"], ref[:, 12, :]) < TOL
    assert _err(s["yz"], ref[:, :, 10]) < TOL
    # turned half a turn about z, the slices go through leveret.cpu.live_planes (the
    # plane kernel) and show the same planes mirrored
    rec.watch_orthogonal(_voxel_point(vol, 10, 12, 3), angles=(180, 0, 0))
    assert not any(sl.is_axial for sl in rec.watched)
    s = rec.slices()
    assert _err(s["xy"], ref[3][::-1, ::-1]) < TOL
    assert _err(s["xz"], ref[:, 12, ::-1]) < TOL
    assert _err(s["yz"], ref[:, ::-1, 10]) < TOL


def test_moved_slice_is_recomputed_from_all_frames_received(scan):
    angles, g, proj = scan
    vol = g.default_volume()
    received = np.arange(0, VIEWS, 2)[:17]  # part of the scan, every other angle
    ref = leveret.fbp(proj[received], g.replace(angles=angles[received]), vol, backend="cpu")
    rec = LiveReconstructor(vol, g, backend="cpu")
    for i in received:
        rec.add(proj[i], angles[i])
    rec.watch_orthogonal(_voxel_point(vol, 5, 20, 6))
    rec.watch_axial([vol.coordinates("z")[1]])
    s = rec.slices()
    assert _err(s["xy"], ref[6]) < TOL
    assert _err(s["xz"], ref[:, 20, :]) < TOL
    assert _err(s["yz"], ref[:, :, 5]) < TOL
    assert _err(s["z0"], ref[1]) < TOL


def test_half_scan_weights_follow_the_angles_received(scan):
    angles, g, proj = scan
    vol = g.default_volume()
    half = slice(0, VIEWS // 2)
    ref = leveret.fbp(proj[half], g.replace(angles=angles[half]), vol, backend="cpu")
    rec = LiveReconstructor(vol, g, backend="cpu")
    for i in range(VIEWS // 2):
        rec.add(proj[i], angles[i])
    assert _err(rec.slices()["xy"], ref[ROWS // 2]) < TOL
    # the weights are each view's share of what was received, not of a full scan
    full = LiveReconstructor(vol, g, backend="cpu")
    full.add(proj, angles)
    assert not np.allclose(rec.slices()["xy"], full.slices()["xy"] / 2, atol=1e-3)


def test_rotated_slice_matches_the_axial_operator(scan):
    angles, g, proj = scan
    vol = g.default_volume()
    rec = LiveReconstructor(vol, g, backend="cpu")
    rec.add(proj, angles)
    axial = rec.slices()["xy"]
    # 90 degrees about z: columns along +y, rows along -x, so image[j, i] = axial[i, nx-1-j]
    rec.watch_orthogonal(angles=(90, 0, 0))
    assert not rec.watched[0].is_axial
    assert _err(rec.slices()["xy"], axial[:, ::-1].T) < TOL


def test_missing_frames_are_reported_and_weights_stay_right(scan):
    angles, g, proj = scan
    vol = g.default_volume()
    keep = np.setdiff1d(np.arange(VIEWS), [7, 8, 30])
    ref = leveret.fbp(proj[keep], g.replace(angles=angles[keep]), vol, backend="cpu")
    rec = LiveReconstructor(vol, g, backend="cpu")
    rec.add_frames([Frame(proj[i], int(i), angle=angles[i]) for i in keep])
    assert rec.stats.missing == 3 and rec.missing_indices() == [7, 8, 30]
    assert _err(rec.slices()["xy"], ref[ROWS // 2]) < TOL


def test_bad_frames_are_rejected_counted_and_the_rest_go_on(scan):
    angles, g, proj = scan
    vol = g.default_volume()
    rec = LiveReconstructor(vol, g, planned=False, backend="cpu")
    frames = [
        Frame(proj[0], 0, angle=angles[0]),
        Frame(proj[1][:, :-1], 1, angle=angles[1]),  # wrong shape
        Frame(proj[2].astype(np.complex64), 2, angle=angles[2]),  # wrong dtype
        Frame(proj[3], 3, angle=None),  # no angle, none planned
        Frame(np.where(np.arange(N) == 7, np.nan, proj[5]).astype(np.float32), 5, angle=angles[5]),
        Frame(proj[4], 4, angle=angles[4]),
    ]
    assert rec.add_frames(frames) == 2
    assert rec.stats.rejected == 4 and rec.stats.received == 2
    assert any("shape" in r for r in rec.stats.rejected_reasons)
    assert any("dtype" in r for r in rec.stats.rejected_reasons)
    assert "no angle, none planned" in rec.stats.rejected_reasons
    assert "NaN or Inf values" in rec.stats.rejected_reasons  # one bad pixel: that frame, not the session
    ref = leveret.fbp(proj[[0, 4]], g.replace(angles=angles[[0, 4]]), vol, backend="cpu")
    assert _err(rec.slices()["xy"], ref[ROWS // 2]) < TOL


def test_flat_and_dark_fields_correct_raw_counts(scan):
    angles, g, proj = scan
    vol = g.default_volume()
    rng = np.random.default_rng(0)
    dark = rng.uniform(90, 110, (ROWS, N))
    flat = dark + rng.uniform(3e4, 4e4, (ROWS, N))
    counts = (dark + (flat - dark) * np.exp(-proj)).astype(np.float32)
    lines = minus_log(normalize(counts, flat, dark))
    ref = leveret.fbp(lines, g, vol, backend="cpu")
    rec = LiveReconstructor(vol, g, flat=flat, dark=dark, backend="cpu")
    rec.add(counts, angles)
    assert _err(rec.slices()["xy"], ref[ROWS // 2]) < TOL


def test_float16_storage_error_is_bounded(scan):
    angles, g, proj = scan
    vol = g.default_volume()
    ref = leveret.fbp(proj, g, vol, backend="cpu")
    rec = LiveReconstructor(vol, g, backend="cpu", storage="float16")
    rec.add(proj, angles)
    rec.watch_orthogonal(_voxel_point(vol, 9, 15, 2))  # recomputed from the stored fp16 views
    s = rec.slices()
    assert _err(s["xz"], ref[:, 15, :]) < 3e-4
    assert _err(s["xy"], ref[2]) < 3e-4


def test_cone_slices_equal_fdk_after_the_last_frame():
    n, views = 24, 40
    angles = np.linspace(0, 2 * np.pi, views, endpoint=False)
    g = leveret.ConeGeometry.circular(angles, 60.0, 120.0, n, n, 2.0)
    vol = leveret.VolumeGeometry((n, n, n), 1.0)
    proj = shepp_logan_3d(radius=10).project(g).astype(np.float32)
    ref = leveret.fdk(proj, g, vol, backend="cpu", short_scan=False)
    rec = LiveReconstructor(vol, g, backend="cpu")
    for batch in np.array_split(np.arange(views), 7):  # in scan order, as a detector sends them
        rec.add(proj[batch], matrices=g.matrices[batch])
    rec.watch_orthogonal(_voxel_point(vol, 10, 12, 7))
    s = rec.slices()
    assert _err(s["xy"], ref[7]) < TOL
    assert _err(s["xz"], ref[:, 12, :]) < TOL
    assert _err(s["yz"], ref[:, :, 10]) < TOL


def test_cone_slices_equal_fdk_with_frames_of_parallel_streams_interleaved():
    """Frames dealt over 3 streams arrive a few places out of scan order: each
    view's angle is unwrapped against the one before it, which holds for any
    order whose neighbours are less than half a turn apart."""
    n, views = 24, 40
    angles = np.linspace(0, 2 * np.pi, views, endpoint=False)
    g = leveret.ConeGeometry.circular(angles, 60.0, 120.0, n, n, 2.0)
    vol = leveret.VolumeGeometry((n, n, n), 1.0)
    proj = shepp_logan_3d(radius=10).project(g).astype(np.float32)
    ref = leveret.fdk(proj, g, vol, backend="cpu", short_scan=False)
    rng = np.random.default_rng(3)
    order = np.concatenate([rng.permutation(np.arange(b, min(b + 6, views))) for b in range(0, views, 6)])
    assert not np.all(np.diff(order) > 0)
    rec = LiveReconstructor(vol, g, planned=False, backend="cpu")
    for batch in np.array_split(order, 8):
        rec.add_frames([Frame(proj[i], int(i), matrix=g.matrices[i]) for i in batch])
    rec.watch_orthogonal(_voxel_point(vol, 10, 12, 7))
    s = rec.slices()
    assert rec.stats.received == views and rec.stats.missing == 0
    assert _err(s["xy"], ref[7]) < TOL
    assert _err(s["xz"], ref[:, 12, :]) < TOL


def test_cone_slices_over_two_turns_equal_one_turn():
    """Two turns measure every line four times: the slices (and leveret.fdk)
    weight them so that the result is the one-turn reconstruction."""
    n, views = 20, 32
    angles = np.linspace(0, 2 * np.pi, views, endpoint=False)
    g1 = leveret.ConeGeometry.circular(angles, 60.0, 120.0, n, n, 2.0)
    g2 = leveret.ConeGeometry.circular(np.concatenate([angles, angles + 2 * np.pi]), 60.0, 120.0, n, n, 2.0)
    vol = leveret.VolumeGeometry((n, n, n), 1.0)
    proj = shepp_logan_3d(radius=8).project(g1).astype(np.float32)
    proj2 = np.concatenate([proj, proj])
    one = leveret.fdk(proj, g1, vol, backend="cpu", short_scan=False)
    two = leveret.fdk(proj2, g2, vol, backend="cpu", short_scan=False)
    assert _err(two, one) < TOL
    rec = LiveReconstructor(vol, g2, backend="cpu")
    for batch in np.array_split(np.arange(2 * views), 9):
        rec.add(proj2[batch], matrices=g2.matrices[batch])
    rec.watch_orthogonal(_voxel_point(vol, 9, 11, 6))
    s = rec.slices()
    assert _err(s["xy"], one[6]) < TOL
    assert _err(s["xz"], one[:, 11, :]) < TOL


def test_a_cone_view_received_twice_in_one_batch_keeps_the_slices_finite():
    """Its angular step within the batch is 0: the weighting must not divide by it."""
    n, views = 16, 24
    angles = np.linspace(0, 2 * np.pi, views, endpoint=False)
    g = leveret.ConeGeometry.circular(angles, 60.0, 120.0, n, n, 2.0)
    vol = leveret.VolumeGeometry((n, n, n), 1.0)
    proj = shepp_logan_3d(radius=7).project(g).astype(np.float32)
    rec = LiveReconstructor(vol, g, backend="cpu")
    rec.add(proj[:12], matrices=g.matrices[:12])
    rec.add(proj[[12, 12, 13]], matrices=g.matrices[[12, 12, 13]], indices=[12, 30, 13])
    assert all(np.isfinite(image).all() for image in rec.slices().values())


def test_orthogonal_slices_through_voxel_centres_are_the_volume_grid():
    vol = leveret.VolumeGeometry((4, 6, 8), (2.0, 1.0, 0.5), center=(1.0, -2.0, 3.0))
    xy, xz, yz = orthogonal_slices(vol)
    pts = xz.points().reshape(4, 8, 3)
    assert np.allclose(pts[..., 0], vol.coordinates("x")[None, :])
    assert np.allclose(pts[..., 2], vol.coordinates("z")[:, None])
    assert xy.is_axial and not xz.is_axial and yz.shape == (4, 6)


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        (dict(geometry=(ROWS, N)), TypeError, "geometry"),
        (dict(geometry=leveret.ParallelGeometry([0.0], N)), ValueError, "geometry"),  # 2D
        (dict(geometry=leveret.ParallelGeometry([0.0, 1.0], N, ROWS, axis_shift=[0.0, 0.5])), ValueError, "geometry"),
        (dict(planned="yes"), TypeError, "planned"),
        (dict(storage="int8"), ValueError, "storage"),
        (dict(dark=np.zeros((ROWS, N))), ValueError, "dark"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, error, name):
    vol = leveret.VolumeGeometry((ROWS, N, N))
    args = dict(geometry=leveret.ParallelGeometry([0.0], N, ROWS), backend="cpu")
    args.update(kwargs)
    with pytest.raises(error, match=f"^{name}"):
        LiveReconstructor(vol, args.pop("geometry"), **args)


def test_add_names_the_bad_argument(scan):
    angles, g, proj = scan
    rec = LiveReconstructor(g.default_volume(), g, backend="cpu")
    with pytest.raises(ValueError, match="^projections"):
        rec.add(proj[:2, :, :-1], angles[:2])
    with pytest.raises(ValueError, match="^angles"):
        rec.add(proj[:2], angles[:3])
    with pytest.raises(ValueError, match="^matrices"):
        rec.add(proj[:2], matrices=np.zeros((2, 3, 4)))


def test_the_sinogram_holds_every_frame_received_in_arrival_order(scan):
    """Half a turn in the batches a live session makes: row k of the sinogram is
    frame k's middle detector row, exactly (each batch's rows are kept as
    copies, not as views of the reused batch buffer)."""
    angles, g, proj = scan
    rec = LiveReconstructor(g.default_volume(), g, backend="cpu", max_batch=10)
    frames = [Frame(proj[i], i, angle=angles[i]) for i in range(VIEWS)]
    for batch in np.array_split(np.arange(VIEWS), 5):  # uneven batches, as they arrive
        assert rec.add_frames([frames[i] for i in batch]) == batch.size
    np.testing.assert_array_equal(rec.sinogram(), proj[:, ROWS // 2, :])
    assert rec.sinogram(row=1).shape == (0, N)  # another row: kept from the next frame on
    rec.add_frames([Frame(proj[i], VIEWS + i, angle=angles[i] + np.pi) for i in range(3)])
    np.testing.assert_array_equal(rec.sinogram(row=1), proj[:3, 1, :])


def test_a_far_frame_index_costs_no_memory_or_time_per_batch(scan):
    """The received indices are kept as a set; the gaps are counted, not listed:
    a frame 10^6 ahead, then more batches, allocate kilobytes, not a list of
    10^6 missing indices per batch."""
    import tracemalloc

    angles, g, proj = scan
    rec = LiveReconstructor(g.default_volume(), g, backend="cpu")
    rec.add_frames([Frame(proj[0], 0, angle=angles[0])])
    rec.add_frames([Frame(proj[1], 1, angle=angles[1])])  # the work buffers exist from here on
    tracemalloc.start()
    try:
        rec.add_frames([Frame(proj[2], 10**6, angle=angles[2])])
        for i in range(3, 8):
            rec.add_frames([Frame(proj[i], i, angle=angles[i])])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes"
    assert rec.stats.missing == 10**6 - 7  # 2..999999 less the 5 that came
    assert rec.missing_indices(limit=3) == [2, 8, 9]
    assert rec.missing_indices(limit=0) == []


def test_a_frame_index_already_received_is_rejected_not_used_twice(scan):
    angles, g, proj = scan
    vol = g.default_volume()
    ref = leveret.fbp(proj[:4], g.replace(angles=angles[:4]), vol, backend="cpu")
    rec = LiveReconstructor(vol, g, backend="cpu")
    frames = [Frame(proj[i], i, angle=angles[i]) for i in range(4)]
    assert rec.add_frames(frames[:3] + [Frame(proj[5], 1, angle=angles[5])]) == 3  # twice in one batch
    assert rec.add_frames([frames[3], Frame(proj[6], 2, angle=angles[6])]) == 1  # and again later
    assert rec.n_views == 4 and rec.stats.rejected == 2
    assert rec.stats.rejected_reasons == {"index already received": 2}
    assert _err(rec.slices()["xy"], ref[ROWS // 2]) < TOL
    with pytest.raises(ValueError, match="^indices: frame 3 already received"):
        rec.add(proj[7], angles[7], indices=[3])


@pytest.mark.parametrize(
    "frame_fields, reason",
    [
        (dict(angle=10**400), "no finite angle"),
        (dict(angle="0.5"), "no finite angle"),
        (dict(angle=[0.1, 0.2]), "no finite angle"),
        (dict(index=-1), "bad index"),
        (dict(index=1.5), "bad index"),
        (dict(index=True), "bad index"),
    ],
)
def test_a_frame_with_a_bad_field_is_rejected_never_raised(scan, frame_fields, reason):
    angles, g, proj = scan
    rec = LiveReconstructor(g.default_volume(), g, backend="cpu")
    fields = dict(index=0, angle=angles[0])
    fields.update(frame_fields)
    assert rec.add_frames([Frame(proj[0], fields["index"], angle=fields["angle"])]) == 0
    assert rec.stats.rejected_reasons == {reason: 1}


def test_a_cone_frame_with_a_matrix_that_is_not_numbers_is_rejected():
    g = leveret.ConeGeometry.circular([0.0], 60.0, 120.0, 4, 8, 2.0)
    rec = LiveReconstructor(leveret.VolumeGeometry((4, 8, 8)), g, planned=False, backend="cpu")
    for m in ([[1, 2], [3]], "abc", [[10**400] * 4] * 3):
        assert rec.add_frames([Frame(np.zeros((4, 8), np.float32), 0, matrix=m)]) == 0
    assert rec.stats.rejected_reasons == {"no finite 3x4 matrix": 3}


def test_rejected_reasons_stay_few_however_many_shapes_come(scan):
    _, g, _ = scan
    rec = LiveReconstructor(g.default_volume(), g, backend="cpu")
    rec.add_frames([Frame(np.zeros((1, k), np.float32), k, angle=0.0) for k in range(1, 200)])
    assert rec.stats.rejected == 199
    assert len(rec.stats.rejected_reasons) <= LiveReconstructor.MAX_REASONS + 1
    assert sum(rec.stats.rejected_reasons.values()) == 199


def test_frames_without_an_angle_take_the_planned_one_and_their_own_wins(scan):
    """The geometry's angles are the planned scan: a frame without its own
    angle takes the one of its index (Frame or ``add`` without ``angles``);
    a frame with its own angle uses it, whatever the plan says."""
    angles, g, proj = scan
    vol = g.default_volume()
    ref = leveret.fbp(proj, g, vol, backend="cpu")
    point = _voxel_point(vol, 10, 12, 3)
    rec = LiveReconstructor(vol, g, backend="cpu")
    rec.add_frames([Frame(proj[i], i, angle=None if i % 2 else angles[i]) for i in range(VIEWS // 2)])
    rec.add(proj[VIEWS // 2 :])  # no angles: the planned ones of frames 24..47
    rec.watch_orthogonal(point, angles=(20, 0, 0))
    planned = rec.slices()
    # a plan 0.4 rad off: the frames' own angles win
    off = LiveReconstructor(vol, g.replace(angles=angles + 0.4), backend="cpu")
    off.add_frames([Frame(proj[i], i, angle=angles[i]) for i in range(VIEWS)])
    off.watch_orthogonal(point, angles=(20, 0, 0))
    own = off.slices()
    exact = LiveReconstructor(vol, g, backend="cpu")
    exact.add(proj, angles)
    exact.watch_orthogonal(point, angles=(20, 0, 0))
    expected = exact.slices()
    for name in ("xy", "xz", "yz"):
        assert _err(planned[name], expected[name]) < TOL, name
        assert _err(own[name], expected[name]) < TOL, name
    exact.watch_orthogonal(point)
    assert _err(exact.slices()["xy"], ref[3]) < TOL
    # and the plan does change a frame without an angle
    moved = LiveReconstructor(vol, g.replace(angles=angles + 0.4), backend="cpu")
    moved.add(proj)
    assert _err(moved.slices()["xy"], exact.slices()["xy"]) > 0.1


def test_a_frame_without_an_angle_where_none_is_planned_is_rejected(scan):
    angles, g, proj = scan
    short = g.replace(angles=angles[:10])  # plans frames 0..9 only
    rec = LiveReconstructor(g.default_volume(), short, backend="cpu")
    assert rec.add_frames([Frame(proj[i], i) for i in (3, 12)]) == 1
    assert rec.stats.rejected_reasons == {"no angle, none planned": 1}
    with pytest.raises(ValueError, match=r"^angles: none given and none planned for frame 11 \(the geometry plans 10"):
        rec.add(proj[:2], indices=[9, 11])
    assert rec.n_views == 1  # nothing of the refused call was added
    unplanned = LiveReconstructor(g.default_volume(), g, planned=False, backend="cpu")
    assert unplanned.add_frames([Frame(proj[0], 0)]) == 0
    with pytest.raises(ValueError, match=r"^angles: none given and none planned for frame 0 \(planned=False\)"):
        unplanned.add(proj[:1])
    with pytest.raises(ValueError, match="^matrices: parallel beam takes angles"):
        rec.add(proj[:1], matrices=np.zeros((1, 3, 4)), indices=[20])


def test_cone_frames_without_a_matrix_take_the_planned_one():
    n, views = 16, 24
    angles = np.linspace(0, 2 * np.pi, views, endpoint=False)
    g = leveret.ConeGeometry.circular(angles, 60.0, 120.0, n, n, 2.0)
    vol = leveret.VolumeGeometry((n, n, n), 1.0)
    proj = shepp_logan_3d(radius=7).project(g).astype(np.float32)
    ref = leveret.fdk(proj, g, vol, backend="cpu", short_scan=False)
    rec = LiveReconstructor(vol, g, backend="cpu")
    rec.add(proj[:10])  # planned matrices
    rec.add_frames([Frame(proj[i], i, matrix=None if i % 2 else g.matrices[i]) for i in range(10, views)])
    rec.watch_orthogonal(_voxel_point(vol, 6, 9, 5))
    s = rec.slices()
    assert _err(s["xy"], ref[5]) < TOL
    assert _err(s["xz"], ref[:, 9, :]) < TOL
    with pytest.raises(ValueError, match="^angles: cone beam takes matrices"):
        rec.add(proj[:1], np.zeros(1), indices=[30])


def test_the_geometry_detector_pitch_row_pitch_and_centre_are_the_frames():
    """A detector of pitch 0.8, rows 1.25 apart, its rotation axis 1.6 columns
    off the middle: the slices equal leveret.fbp with that geometry (the plane
    kernels read det_spacing, row_spacing and center from the geometry)."""
    angles = np.linspace(0, np.pi, 40, endpoint=False)
    g = leveret.ParallelGeometry(angles, N, ROWS, det_spacing=0.8, row_spacing=1.25, center=(N - 1) / 2 + 1.6)
    vol = leveret.VolumeGeometry((ROWS, N, N), (1.25, 0.8, 0.8))
    proj = shepp_logan_3d(radius=10).project(g).astype(np.float32)
    ref = leveret.fbp(proj, g, vol, backend="cpu")
    rec = LiveReconstructor(vol, g, backend="cpu")
    rec.add(proj)
    rec.watch_orthogonal(_voxel_point(vol, 11, 13, 2))
    s = rec.slices()
    assert _err(s["xy"], ref[2]) < TOL
    assert _err(s["xz"], ref[:, 13, :]) < TOL
    assert _err(s["yz"], ref[:, :, 11]) < TOL


def test_live_imports_no_private_name_of_another_package():
    """leveret.live uses other packages through their public names only (the
    project's shared argument checks, leveret._validate, excepted: every
    package uses them)."""
    import ast
    from pathlib import Path

    import leveret.live

    found = []
    for path in sorted(Path(leveret.live.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or (
                node.level < 2 and node.module != "leveret" and not (node.module or "").startswith("leveret.")
            ):
                continue
            for alias in node.names:
                parts = (node.module or "").split(".") + [alias.name]
                if any(part.startswith("_") for part in parts) and parts[-1] != "_validate":
                    found.append(f"{path.name}: {'.' * node.level}{node.module or ''} import {alias.name}")
    assert not found, found
