"""leveret.fbp on the CPU: quantitative on analytic phantoms, conventions, chunking, bad input.

The phantoms' projections are computed in closed form (leveret.phantom), never
by leveret's own projector, so these tests check the whole chain against truth.
"""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.filters import FILTERS
from leveret.geometry import ParallelGeometry, VolumeGeometry
from leveret.preprocess import minus_log, normalize

# Relative 2-norm error of FBP (ram-lak, linear) against the rasterised modified
# Shepp-Logan phantom (4x4 supersampled), 256^2 from 720 angles: measured 0.119.
# Boundaries dominate it; the median absolute error is 0.006 (values 0..1).
SHEPP_LOGAN_256_REL_ERROR = 0.125
SHEPP_LOGAN_256_MEDIAN_ABS = 0.007
EPS32 = np.finfo(np.float32).eps


def half_circle(n):
    return np.linspace(0, np.pi, n, endpoint=False)


def radius_map(volume):
    x = volume.coordinates("x")[None, :] - 0.0
    y = volume.coordinates("y")[:, None]
    return np.hypot(x, y)


@pytest.fixture(scope="module")
def shepp_logan_256():
    g = ParallelGeometry(half_circle(720), 256, det_spacing=2 / 256)  # detector spans [-1, 1]
    ph = phantom.shepp_logan_ellipses(radius=1.0)
    truth = ph.rasterize(g.default_volume(), supersampling=4)
    return g, ph.project(g).astype(np.float32), truth


def test_shepp_logan_256_from_720_angles(shepp_logan_256):
    g, sino, truth = shepp_logan_256
    rec = leveret.fbp(sino, g, backend="cpu")
    assert rec.shape == (256, 256) and rec.dtype == np.float32
    err = np.linalg.norm(rec - truth) / np.linalg.norm(truth)
    assert err < SHEPP_LOGAN_256_REL_ERROR
    assert np.median(np.abs(rec - truth)) < SHEPP_LOGAN_256_MEDIAN_ABS


@pytest.mark.parametrize("filter_name", FILTERS)
def test_every_filter_keeps_a_disk_quantitative(filter_name):
    """A uniform disk of value 1 reconstructs to 1 away from its edge, and to 0 outside.
    Measured over the five filters: mean off by at most 4.8e-4, pixels by 1.7e-3,
    outside 2.2e-3; bounds 3x."""
    g = ParallelGeometry(half_circle(360), 128, det_spacing=0.05)
    rec = leveret.fbp(phantom.disk(2.0).project(g).astype(np.float32), g, filter=filter_name, backend="cpu")
    r = radius_map(g.default_volume())
    inside = rec[r < 1.6]
    assert abs(inside.mean() - 1) < 1.5e-3 and np.abs(inside - 1).max() < 5e-3
    assert np.abs(rec[(r > 2.4) & (r < 3.0)]).max() < 6e-3


@pytest.mark.parametrize(
    "n_cols,shape,voxel", [(64, (64, 64), 1.0), (65, (65, 65), 1.0), (64, (51, 77), 0.8), (97, (40, 41), 2.0)]
)
def test_disk_absolute_value_odd_even_and_voxel_sizes(n_cols, shape, voxel):
    g = ParallelGeometry(half_circle(300), n_cols, det_spacing=1.3)
    vol = VolumeGeometry(shape, voxel_size=voxel)
    radius = 0.3 * n_cols * 1.3
    rec = leveret.fbp(phantom.disk(radius, value=2.5).project(g).astype(np.float32), g, vol, backend="cpu")
    r = radius_map(vol)
    assert rec.shape == shape
    inside = rec[r < 0.8 * radius]
    assert abs(inside.mean() / 2.5 - 1) < 4e-3  # measured 3.4e-4 to 1.4e-3


def test_small_ball_reconstructs_at_its_voxel():
    """Conventions end to end: an off-centre ball lands at the voxel docs/conventions.md names."""
    g = ParallelGeometry(
        half_circle(180),
        64,
        n_rows=16,
        det_spacing=0.5,
        row_spacing=0.5,
        center=33.0,
        axis_shift=np.linspace(-0.5, 0.5, 180),
    )
    center = (3.0, -5.0, 1.5)  # x, y, z
    ph = phantom.ball(2.0, center=center)
    vol = g.default_volume()
    rec = leveret.fbp(ph.project(g).astype(np.float32), g, vol, backend="cpu")
    k, j, i = np.nonzero(rec > 0.5)
    centroid = (vol.coordinates("x")[i].mean(), vol.coordinates("y")[j].mean(), vol.coordinates("z")[k].mean())
    np.testing.assert_allclose(centroid, center, atol=0.05)  # a tenth of a voxel
    inner = phantom.ball(1.0, center=center).rasterize(vol) > 0  # away from the blurred edge
    assert abs(rec[inner].mean() - 1) < 2e-3  # measured 5.6e-4


@pytest.mark.parametrize("center,shift", [(40.0, None), (27.5, "wobble")])
def test_off_centre_axis_and_per_view_shift(center, shift):
    n_angles = 400
    axis_shift = 1.5 * np.sin(np.linspace(0, 6, n_angles)) if shift else None
    g = ParallelGeometry(half_circle(n_angles), 80, det_spacing=0.025, center=center, axis_shift=axis_shift)
    ph = phantom.shepp_logan_ellipses(radius=0.7)
    vol = VolumeGeometry((96, 96), voxel_size=1.6 / 96)
    rec = leveret.fbp(ph.project(g).astype(np.float32), g, vol, backend="cpu")
    truth = ph.rasterize(vol, supersampling=3)
    assert np.median(np.abs(rec - truth)) < 0.02
    # Ignoring the axis shift puts edges in the wrong place: the test can fail.
    wrong = leveret.fbp(
        ph.project(g).astype(np.float32), g.replace(center=(80 - 1) / 2, axis_shift=None), vol, backend="cpu"
    )
    assert np.linalg.norm(wrong - truth) > 1.5 * np.linalg.norm(rec - truth)


def test_3d_ellipsoids_chunked_equals_unchunked_and_double_agrees():
    g = ParallelGeometry(half_circle(120), 48, n_rows=11, det_spacing=0.05, row_spacing=0.08)
    ph = phantom.shepp_logan_3d(radius=1.0)
    proj = ph.project(g).astype(np.float32)
    full = leveret.fbp(proj, g, backend="cpu")
    # Slices are independent: chunking changes nothing (measured bit-identical; bound 2 eps).
    for chunk in (1, 4):
        np.testing.assert_allclose(
            leveret.fbp(proj, g, backend="cpu", slab_slices=chunk), full, rtol=0, atol=2 * EPS32 * np.abs(full).max()
        )
    double = leveret.fbp(proj.astype(np.float64), g, backend="cpu", precision="float64")
    assert double.dtype == np.float64
    assert np.linalg.norm(double - full) / np.linalg.norm(double) < 1e-6  # float32: measured 1.7e-7


def test_progress_counts_every_slice_once_and_leaves_the_values(monkeypatch):
    """progress=True: the bar's total is the slice count, it advances chunk by
    chunk to exactly that count, and the volume is the one without a bar."""
    import tqdm.auto

    bars = []

    class Recording(tqdm.auto.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.shown = not self.disable  # close() disables every bar
            self.steps = []
            bars.append(self)

        def update(self, n=1):
            self.steps.append(n)
            return super().update(n)

    monkeypatch.setattr(tqdm.auto, "tqdm", Recording)
    g = ParallelGeometry(half_circle(60), 24, n_rows=11, det_spacing=0.1)
    proj = phantom.shepp_logan_3d(radius=1.0).project(g).astype(np.float32)
    quiet = leveret.fbp(proj, g, backend="cpu", slab_slices=4)
    assert [b.shown for b in bars] == [False]
    shown = leveret.fbp(proj, g, backend="cpu", slab_slices=4, progress=True)
    bar = bars[-1]
    assert bar.shown and bar.total == 11 and bar.steps == [4, 4, 3] and bar.n == 11
    np.testing.assert_array_equal(shown, quiet)


def test_volume_slices_between_detector_rows():
    """Slices not on detector rows take the blend of the rows around them."""
    g = ParallelGeometry(half_circle(90), 32, n_rows=8)
    proj = np.broadcast_to(np.linspace(0, 7, 8)[None, :, None], (90, 8, 32)).astype(np.float32)
    on_rows = leveret.fbp(proj, g, VolumeGeometry((8, 32, 32)), backend="cpu")
    halfway = leveret.fbp(proj, g, VolumeGeometry((7, 32, 32)), backend="cpu")  # z between rows
    # float32 rounding: measured 3.9 eps of the largest value; bound 8 eps
    np.testing.assert_allclose(
        halfway, 0.5 * (on_rows[:-1] + on_rows[1:]), rtol=0, atol=8 * EPS32 * np.abs(on_rows).max()
    )
    with pytest.warns(UserWarning, match="^volume: no ray of the scan reaches it .* above or below every detector row"):
        beyond = leveret.fbp(proj, g, VolumeGeometry((3, 32, 32), center=(10.0, 0, 0)), backend="cpu")
    assert np.all(beyond == 0)


def test_numpy_input_types_and_out(shepp_logan_256):
    g, sino, _ = shepp_logan_256
    ref = leveret.fbp(sino, g, backend="cpu")
    out = np.full((256, 256), np.nan, np.float32)  # poisoned: every pixel must be written
    assert leveret.fbp(sino.astype(np.float64), g, backend="cpu", out=out) is out
    # float64 input computes in float32, as float32 input does (measured bit-identical; bound 2 eps)
    np.testing.assert_allclose(out, ref, rtol=0, atol=2 * EPS32 * np.abs(ref).max())


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda s, g: leveret.fbp(s[:, :-1], g, backend="cpu"), r"projections: expected shape \(n_angles, n_cols\)"),
        (lambda s, g: leveret.fbp(s[:-1], g, backend="cpu"), r"projections: expected shape .*\(10, 16\).*\(9, 16\)"),
        (lambda s, g: leveret.fbp(np.where(s > 0.5, np.nan, s), g, backend="cpu"), "projections: expected finite"),
        (lambda s, g: leveret.fbp(s, g, VolumeGeometry((3, 4, 4)), backend="cpu"), "volume: a 2D geometry needs"),
        (lambda s, g: leveret.fbp(s, g, filter="ramp", backend="cpu"), "filter"),
        (lambda s, g: leveret.fbp(s, g, interpolation="cubic", backend="cpu"), "interpolation"),
        (lambda s, g: leveret.fbp(s, g, backend="gpu"), "backend"),
        (lambda s, g: leveret.fbp(s, g, angle_weights=np.ones(3), backend="cpu"), "angle_weights"),
        (lambda s, g: leveret.fbp(s, g, slab_slices=0), "slab_slices"),
        (lambda s, g: leveret.fbp(s.astype(complex), g, backend="cpu"), "projections: expected real"),
        (lambda s, g: leveret.fbp(s, g, out=np.empty((3, 3), np.float32), backend="cpu"), "out"),
    ],
)
def test_bad_input_names_the_argument(call, match):
    g = ParallelGeometry(half_circle(10), 16)
    sino = np.random.default_rng(0).random((10, 16)).astype(np.float32)
    with pytest.raises(ValueError, match=match):
        call(sino, g)


def test_geometry_of_wrong_type_is_a_type_error():
    sino = np.zeros((10, 16), np.float32)
    with pytest.raises(TypeError, match="geometry"):
        leveret.fbp(sino, "parallel", backend="cpu")


def test_cuda_without_gpu_is_a_clear_error():
    if leveret.cuda_available():
        pytest.skip("a GPU is present: the error cannot happen here")
    g = ParallelGeometry(half_circle(10), 16)
    with pytest.raises(RuntimeError, match="backend='cuda' needs a CUDA GPU"):
        leveret.fbp(np.zeros((10, 16), np.float32), g, backend="cuda")


def negative_share(image):
    """Share of the image's absolute mass that is negative: a misplaced axis
    back-projects each edge into a crescent with a negative side."""
    image = np.asarray(image, np.float64)
    return -image[image < 0].sum() / np.abs(image).sum()


def test_real_scan_reconstructs_where_the_data_put_it(savu_scan):
    """flat/dark, -log, centre 86: a finite image whose dense region sits where the
    projections' first moments put it (a reference that needs no reconstruction:
    the centroid of every projection is x_c cos t + y_c sin t + the axis column)."""
    scan = savu_scan
    p = minus_log(normalize(scan.projections, scan.flat, scan.dark))
    g = ParallelGeometry(scan.angles, 160, n_rows=135, center=86.0)
    rows = slice(40, 100)
    vol = VolumeGeometry((60, 160, 160), center=(g.row_positions()[rows].mean(), 0.0, 0.0))
    rec = leveret.fbp(p, g, vol, backend="cpu")
    assert rec.shape == (60, 160, 160) and np.isfinite(rec).all()

    # Reference: the dense sample's centroid from the data alone. The upper half of
    # each projection's peak is the sample; its centroid in detector columns,
    # c(t) = x cos t + y sin t + axis, is fitted by least squares over all angles.
    sino = p[:, rows, :].sum(axis=1).astype(np.float64)
    w = np.clip(sino - 0.5 * sino.max(axis=1, keepdims=True), 0, None)
    c_bar = (w * np.arange(g.n_cols)).sum(axis=1) / w.sum(axis=1)
    design = np.stack([np.cos(g.angles), np.sin(g.angles), np.ones(g.n_angles)], axis=1)
    (*ref_xy, axis), residual, *_ = np.linalg.lstsq(design, c_bar, rcond=None)
    assert np.sqrt(residual[0] / g.n_angles) < 0.2  # a clean sinusoid (measured 0.06 pixel)
    assert abs(axis - g.center) < 0.3  # the data's own axis (measured 85.90)

    img = rec.sum(axis=0)
    j, i = np.nonzero(img > 0.5 * img.max())
    rec_xy = np.array([vol.coordinates("x")[i].mean(), vol.coordinates("y")[j].mean()])
    assert np.hypot(*ref_xy) > 10  # off-axis: a mirrored image would fail
    np.testing.assert_allclose(rec_xy, ref_xy, atol=1.0)  # pixels (measured: 0.2)
    # A misplaced axis (the detector middle 79.5, or as far on the other side) draws
    # crescents with negative sides: measured negative shares 0.0036 at 86, 0.030 at
    # 79.5 and 0.033 at 92.5 (8x); asserted 4x.
    right = negative_share(rec)
    for wrong_center in (79.5, 92.5):
        wrong = leveret.fbp(p, g.replace(center=wrong_center), vol, backend="cpu")
        assert 4 * right < negative_share(wrong), wrong_center


# A ROI's pixels are the full image's up to float32 rounding of the pixel coordinates:
# measured up to 1.4 eps of the image's largest value (200 random sinograms); bound 4 eps.
ROI_ATOL = 4 * EPS32


def test_roi_is_the_window_of_the_full_reconstruction(rng):
    g = ParallelGeometry(np.linspace(0, np.pi, 120, endpoint=False), 64, n_rows=3)
    vol = VolumeGeometry((3, 60, 70), voxel_size=(1.0, 0.9, 0.8))
    proj = rng.standard_normal(g.projection_shape).astype(np.float32)
    full = leveret.fbp(proj, g, vol, backend="cpu")
    roi = (5, 9, 31, 20)
    part = leveret.fbp(proj, g, vol, backend="cpu", roi=roi)
    assert part.shape == (3, 31, 20)
    np.testing.assert_allclose(part, full[:, 5:36, 9:29], rtol=0, atol=ROI_ATOL * np.abs(full).max())
    g2 = ParallelGeometry(g.angles, 64)
    sino = proj[:, 1]
    full2 = leveret.fbp(sino, g2, VolumeGeometry((60, 70)), backend="cpu")
    part2 = leveret.fbp(sino, g2, VolumeGeometry((60, 70)), backend="cpu", roi=roi)
    assert part2.shape == (31, 20)
    np.testing.assert_allclose(part2, full2[5:36, 9:29], rtol=0, atol=ROI_ATOL * np.abs(full2).max())
    with pytest.raises(ValueError, match="roi"):
        leveret.fbp(sino, g2, VolumeGeometry((60, 70)), backend="cpu", roi=(50, 0, 20, 5))
    with pytest.raises(ValueError, match="out"):
        leveret.fbp(sino, g2, VolumeGeometry((60, 70)), backend="cpu", roi=roi, out=np.empty((60, 70), np.float32))
