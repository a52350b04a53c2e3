"""Which way up: leveret's slices next to scikit-image's of the same sinogram and angles.

leveret's row j of a slice lies at y = (j - (ny-1)/2) dy, so row 0 is the smallest y;
scikit-image's ``iradon`` (like ASTRA and tomopy) puts the largest y in row 0. The arrays
are each other upside down (``leveret.geometry.as_image_rows`` converts), and leveret's
pictures draw y upwards, so that a sample looks the same in ``leveret preview`` as in
``plt.imshow`` of scikit-image's slice. Checked on the drawn pixels: where an off-centre
disk lands in each picture."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.geometry import ParallelGeometry, VolumeGeometry, as_image_rows

iradon = pytest.importorskip("skimage.transform").iradon

N = 65  # odd: both put the axis on the middle pixel
ANGLES = np.linspace(0, np.pi, 180, endpoint=False)
DISK = dict(radius=6.0, center=(10.0, 20.0))  # right of and above the axis (y up)


def skimage_slice(sinogram):
    """scikit-image's reconstruction from the same sinogram and the same angles (in degrees)."""
    return iradon(sinogram.T, theta=np.degrees(ANGLES), output_size=N, filter_name="ramp", circle=True)


def test_as_image_rows_turns_leverets_slice_into_scikit_images():
    g = ParallelGeometry(ANGLES, N)
    sinogram = phantom.disk(**DISK).project(g)
    ours = leveret.fbp(sinogram, g, backend="cpu", precision="float64")
    peer = skimage_slice(sinogram)
    x, y = g.default_volume().coordinates("x"), g.default_volume().coordinates("y")
    inside = np.hypot(x[None, :], y[::-1, None]) < 0.45 * N  # skimage zeroes beyond its circle
    # the same filter, padding and interpolation: equal to float64 rounding (measured 1.9e-15)
    np.testing.assert_allclose(as_image_rows(ours)[inside], peer[inside], rtol=0, atol=1e-12)
    assert np.abs(ours - peer)[inside].max() > 0.5  # not without the conversion
    assert as_image_rows(as_image_rows(ours)) is not None and np.shares_memory(as_image_rows(ours), ours)
    volume = np.stack([ours, 2 * ours])
    np.testing.assert_array_equal(as_image_rows(volume)[1], 2 * as_image_rows(ours))
    with pytest.raises(ValueError, match=r"^array: expected a slice \(ny, nx\) or a volume"):
        as_image_rows(np.ones(3))


def disk_position(fig, ax) -> tuple[float, float]:
    """Where the brightest pixels of ``ax`` are drawn, as fractions of its box from the left
    and from the top."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    rgba = np.asarray(canvas.buffer_rgba())[..., :3].astype(float).mean(axis=-1)
    height = rgba.shape[0]
    box = ax.get_window_extent()
    top, bottom = int(round(height - box.y1)), int(round(height - box.y0))
    left, right = int(round(box.x0)), int(round(box.x1))
    panel = rgba[top:bottom, left:right]
    rows, cols = np.nonzero(panel >= np.percentile(panel, 99.5))
    return cols.mean() / panel.shape[1], rows.mean() / panel.shape[0]


def test_preview_draws_a_slice_the_way_scikit_image_shows_its_own(tmp_path):
    from matplotlib.figure import Figure

    from leveret.cli.preview import _slices_figure

    g = ParallelGeometry(ANGLES, N, n_rows=3)
    sinogram = phantom.disk(**DISK).project(g.replace(n_rows=None))
    volume = leveret.fbp(np.repeat(sinogram[:, None, :], 3, axis=1).astype(np.float32), g, backend="cpu")
    fig = _slices_figure(volume, g.default_volume(), "orientation")
    ours = disk_position(fig, fig.axes[0])
    peer_fig = Figure(figsize=(4.6, 4.6))
    peer_ax = peer_fig.subplots()
    peer_ax.imshow(skimage_slice(sinogram), cmap="gray")  # as a scikit-image user draws it
    peer = disk_position(peer_fig, peer_ax)
    # the disk at x = 10, y = 20 of a 65-pixel field: right of the middle and above it in both
    assert ours[0] > 0.6 and ours[1] < 0.3, ours
    np.testing.assert_allclose(ours, peer, atol=0.03)
    assert fig.axes[0].get_ylabel().startswith("y (upwards")


def test_the_demo_draws_its_slices_with_y_upwards():
    from leveret.cli.demo import _figure, _real_figure

    scan = leveret.datasets.savu_scan()
    lines = scan.line_integrals()[:, 60:63]
    volume = np.zeros((3, 160, 160), np.float32)
    fig = _real_figure(lines, volume, volume[1], scan.center, scan.geometry)
    assert [ax.images[0].origin for ax in fig.axes[1:3]] == ["lower", "lower"]
    truth = np.zeros((4, 8, 8))
    fig = _figure(truth, truth, VolumeGeometry((4, 8, 8)), "t")
    origins = [ax.images[0].origin for ax in fig.axes if ax.images]
    assert origins == ["lower"] * 3 + ["upper"] * 3  # axial y upwards; coronal z downwards (rows)
