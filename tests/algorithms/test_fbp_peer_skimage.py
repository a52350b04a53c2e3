"""leveret.fbp against an independent peer: scikit-image's ``iradon`` on the same sinogram.

The sinogram is the modified Shepp-Logan phantom's, in closed form
(leveret.phantom), so neither reconstruction sees the other's projector.

How the two conventions map (docs/conventions.md for leveret's):

- skimage's image rows run along y and its detector reads
  ``s = x cos(theta) - y sin(theta)`` (theta in degrees), where leveret reads
  ``s = x cos(t) + y sin(t)`` (t in radians): ``theta = -degrees(t)``.
- skimage's sinogram is ``(n_det, n_angles)``: leveret's transposed.
- skimage puts the axis at detector column ``n_det // 2`` and the image centre
  at pixel ``n // 2``: leveret's ``center=n_det // 2``, and for an even size a
  volume shifted by half a voxel (leveret centres pixels on ``(n - 1) / 2``).
- skimage counts lengths in pixels: a sinogram of line integrals in length
  units reconstructs to (value x pixel size), so its image is divided by it.
- skimage's "ramp" is leveret's "ram-lak" (both the spatial-domain Ram-Lak
  kernel, zero-padded to twice the detector rounded up to a power of two).
- skimage zeroes pixels beyond radius ``n // 2`` (``circle=True``) and reads
  zero beyond its detector's last sample: the images are compared inside the
  object (radius 0.9 of the phantom), away from the detector's ends.
"""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.geometry import ParallelGeometry, VolumeGeometry

iradon = pytest.importorskip("skimage.transform").iradon

RADIUS = 1.0  # the phantom's; the detector spans 2.2
N_ANGLES = 200  # uniform over the half circle (skimage's quadrature pi / n_angles)


def both(n, *, filter="ram-lak", skimage_filter="ramp", interpolation="linear", precision="float32"):
    """(leveret image, skimage image, interior mask) for an n x n image from n detector columns."""
    d = 2.2 * RADIUS / n
    t = np.linspace(0, np.pi, N_ANGLES, endpoint=False)
    half = 0.0 if n % 2 else 0.5 * d
    g = ParallelGeometry(t, n, det_spacing=d, center=n // 2)
    vol = VolumeGeometry((n, n), voxel_size=d, center=(-half, -half))
    sino = phantom.shepp_logan_ellipses(radius=RADIUS).project(g)  # float64
    if precision == "float64":
        ours = leveret.fbp(sino, g, vol, filter=filter, interpolation=interpolation, backend="cpu", precision="float64")
    else:
        ours = leveret.fbp(sino.astype(np.float32), g, vol, filter=filter, interpolation=interpolation, backend="cpu")
    peer = (
        iradon(
            sino.T,
            theta=-np.degrees(t),
            output_size=n,
            filter_name=skimage_filter,
            interpolation=interpolation,
            circle=True,
        )
        / d
    )
    x, y = vol.coordinates("x")[None, :], vol.coordinates("y")[:, None]
    return ours, peer, np.hypot(x, y) < 0.9 * RADIUS


def rmse_and_max(a, b, mask):
    diff = np.asarray(a, np.float64)[mask] - np.asarray(b, np.float64)[mask]
    return float(np.sqrt(np.mean(diff**2))), float(np.abs(diff).max())


@pytest.mark.parametrize("n", [127, 128])  # odd and even: the centre mapping
@pytest.mark.parametrize("interpolation", ["linear", "nearest"])
def test_ram_lak_in_float64_is_skimages_ramp_to_rounding(n, interpolation):
    """Same filter, padding, interpolation and quadrature: equal to float64
    rounding (measured RMSE 1.3e-15, max 8.3e-15 on values 0..1; bound 1e-12).
    A wrong sign of the angles, or a half-pixel shift of the centre, gives max
    errors of 0.8 to 0.9 (measured)."""
    ours, peer, inside = both(n, interpolation=interpolation, precision="float64")
    rmse, worst = rmse_and_max(ours, peer, inside)
    assert worst < 1e-12, (rmse, worst)


def test_ram_lak_in_float32_is_skimages_ramp_to_float32_rounding():
    """float32 filtering and back-projection against skimage's float64: measured
    RMSE 6e-8, max 4.4e-7 (values 0..1, 255 and 127 pixels); bounds 3e-7 and 2e-6."""
    ours, peer, inside = both(127)
    rmse, worst = rmse_and_max(ours, peer, inside)
    assert rmse < 3e-7 and worst < 2e-6, (rmse, worst)


# The apodised filters are discretised differently (skimage windows the padded
# frequency grid with np.hamming/np.hanning and its own cosine/sinc), so their
# images differ a little; measured max |difference| on 127^2 (values 0..1):
# shepp-logan 1.4e-5, cosine 3.4e-5, hamming 7.6e-4, hann 8.3e-4. Bound: 3x that.
APODISED = [
    ("shepp-logan", "shepp-logan", 4e-5),
    ("cosine", "cosine", 1e-4),
    ("hamming", "hamming", 2.5e-3),
    ("hann", "hann", 2.5e-3),
]


@pytest.mark.parametrize("ours_name,peer_name,bound", APODISED)
def test_apodised_filters_agree_with_skimages(ours_name, peer_name, bound):
    ours, peer, inside = both(127, filter=ours_name, skimage_filter=peer_name, precision="float64")
    rmse, worst = rmse_and_max(ours, peer, inside)
    assert worst < bound, (rmse, worst)
    # and they differ from ram-lak by far more: the filter name reached the filter
    ram_lak, _, _ = both(127, precision="float64")
    assert rmse_and_max(ours, ram_lak, inside)[1] > 10 * bound
