"""The live back-projections' CPU mirror (leveret.cpu.live_planes), and the
live kernels loaded like every other kernel (leveret.cuda._module)."""

import numpy as np
import pytest

from leveret.cpu import live_planes as planes


def test_parallel_points_sample_the_detector_bilinearly_with_zero_outside():
    q = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    params = planes.parallel_params([0.0, np.pi / 2], [1.5, 1.5], 1.0)
    # point (x, y, z): column x + 1.5 at angle 0, y + 1.5 at 90 degrees; row z + 1
    points = np.array([[0.25, -1.0, 0.5], [10.0, 0.0, 0.0], [0.0, 0.0, 5.0]])
    out = np.zeros(3, np.float32)
    planes.backproject_points(
        q, np.array([0, 1]), np.array([1.0, 2.0]), points, out, params=params, row_scale=1.0, row_offset=1.0
    )

    # view 0 at (row 1.5, col 1.75); view 1 at (row 1.5, col 0.5)
    def bilinear(v, r, c):
        r0, c0 = int(np.floor(r)), int(np.floor(c))
        a, b = c - c0, r - r0
        return (
            (1 - a) * (1 - b) * v[r0, c0]
            + a * (1 - b) * v[r0, c0 + 1]
            + (1 - a) * b * v[r0 + 1, c0]
            + a * b * v[r0 + 1, c0 + 1]
        )

    expected0 = bilinear(q[0], 1.5, 1.75) + 2 * bilinear(q[1], 1.5, 0.5)
    assert out[0] == pytest.approx(expected0, rel=1e-6)
    # column 11.5 is off the detector at angle 0; at 90 degrees column 1.5, row 1
    assert out[1] == pytest.approx(2 * 0.5 * (q[1, 1, 1] + q[1, 1, 2]), rel=1e-6)
    assert out[2] == 0.0  # row 6: above the detector in every view


def test_plane_equals_the_point_back_projection_of_its_pixels():
    """The plane kernel (pixel positions from the slice's frame, fixed-point
    steps along axis-aligned rows) against the float64 point kernel on the
    slice's pixels, for an axial, a vertical and a rotated slice."""
    import leveret
    from leveret.live import orthogonal_slices

    rng = np.random.default_rng(3)
    n_cols, n_rows, n = 24, 10, 9
    q = rng.standard_normal((n, n_rows, n_cols)).astype(np.float32)
    angles = rng.uniform(0, np.pi, n)
    coef = rng.uniform(0.5, 1.5, n)
    views = np.array([4, 0, 7, 2])
    vol = leveret.VolumeGeometry((n_rows, n_cols, n_cols))
    center, det_spacing, row_spacing = 11.25, 1.1, 0.9
    for angles_deg in [(0, 0, 0), (23, -11, 7)]:
        for s in orthogonal_slices(vol, (0.7, -1.3, 0.4), angles_deg):
            out = np.zeros(s.shape, np.float32)
            planes.backproject_plane(
                q,
                views,
                coef[views],
                s.frame(),
                out,
                angles=angles[views],
                det_spacing=det_spacing,
                center=center,
                row_spacing=row_spacing,
            )
            ref = np.zeros(s.shape[0] * s.shape[1])
            planes.backproject_points(
                q,
                views,
                coef[views],
                s.points(),
                ref,
                params=planes.parallel_params(angles[views], np.full(views.size, center), det_spacing),
                row_scale=1 / row_spacing,
                row_offset=(n_rows - 1) / 2,
            )
            assert np.abs(ref).max() > 1.0
            np.testing.assert_allclose(
                out, ref.reshape(s.shape), rtol=0, atol=2e-5 * np.abs(ref).max(), err_msg=f"{s.name} {angles_deg}"
            )


def test_slice_frame_gives_each_pixels_world_position():
    from leveret.live import Slice

    s = Slice("t", (1.0, 2.0, 3.0), (0.6, 0.8, 0.0), (0.0, 0.0, 1.0), (3, 5), (0.5, 2.0))
    f = s.frame()
    j, i = np.mgrid[0:3, 0:5]
    positions = f[0] + i[..., None] * f[1] + j[..., None] * f[2]
    np.testing.assert_allclose(positions.reshape(-1, 3), s.points(), atol=1e-12)


@pytest.mark.parametrize("name", ["live_planes", "correct"])
def test_live_kernels_sit_with_the_kernels_and_take_their_launchers_constants(name):
    """The live .cu files are in leveret/cuda beside their launchers (found by
    kernel_files, so the NVRTC compile test covers them), built with the
    launcher's DEFINES, and refuse to compile without them."""
    import importlib

    from leveret.cuda._module import KERNEL_DIR, PACKAGE_DIR, file_defines, kernel_files

    files = kernel_files()
    assert KERNEL_DIR / f"{name}.cu" in files
    assert not list((PACKAGE_DIR / "live").glob("*.cu"))
    launcher = importlib.import_module(f"leveret.cuda.{name}")
    assert file_defines(KERNEL_DIR / f"{name}.cu") == launcher.DEFINES and launcher.DEFINES
    pytest.importorskip("cuda.bindings")
    from leveret.cuda._module import compile_report

    ok, log = compile_report(KERNEL_DIR / f"{name}.cu", "sm_90", defines=())
    assert not ok and f"leveret.cuda.{name}.DEFINES" in log
