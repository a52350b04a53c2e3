"""Parameter tables of the Shepp-Logan head phantoms.

All lengths are for a head whose outer ellipse has semi-axes 0.69 by 0.92,
i.e. a phantom that fits in the square (cube) [-1, 1] along every axis; the
builders in :mod:`leveret.phantom.ellipses` and :mod:`.ellipsoids` multiply
them by ``radius``. Angles are in degrees, counter-clockwise (seen from +z)
from the +x axis, and rotate the ellipse about its own centre. ``y`` points
up, towards the "top of the head": an image shown with
``imshow(..., origin="lower")`` looks like the familiar picture.

References
----------
L. A. Shepp and B. F. Logan, "The Fourier reconstruction of a head section",
IEEE Trans. Nucl. Sci. 21 (1974) 21-43.
A. C. Kak and M. Slaney, *Principles of Computerized Tomographic Imaging*,
IEEE Press 1988, Table 3.1.
P. Toft, *The Radon Transform: Theory and Implementation*, PhD thesis,
DTU 1996, pp. 199-200 (the higher-contrast "modified" intensities, also used
by Matlab's ``phantom('Modified Shepp-Logan')``).
"""

from __future__ import annotations

# Kak & Slaney list ellipses 3 and 4 as (0.31, 0.11) at 72 degrees and
# (0.41, 0.16) at 108 degrees; swapping the axes and subtracting 90 degrees
# gives the same ellipses, written here as Matlab and ODL write them.
#
# Toft's -0.2 of the two large dark ellipses is written _DARK = -(1 - 0.8), 4e-17
# from -0.2, so that 1 + (-0.8) + _DARK is exactly 0 in floating point: the
# modified phantom rasterises to values in [0, 1], not to -5.6e-17 there.
_DARK = -(1.0 + -0.8)

# columns: value (Shepp-Logan), value (Toft's modified), a, b, x0, y0, angle [deg]
SHEPP_LOGAN_2D: tuple[tuple[float, ...], ...] = (
    (2.00, 1.0, 0.6900, 0.9200, 0.00, 0.0000, 0.0),  # skull (outer)
    (-0.98, -0.8, 0.6624, 0.8740, 0.00, -0.0184, 0.0),  # brain (inside skull)
    (-0.02, _DARK, 0.1100, 0.3100, 0.22, 0.0000, -18.0),
    (-0.02, _DARK, 0.1600, 0.4100, -0.22, 0.0000, 18.0),
    (0.01, 0.1, 0.2100, 0.2500, 0.00, 0.3500, 0.0),
    (0.01, 0.1, 0.0460, 0.0460, 0.00, 0.1000, 0.0),
    (0.01, 0.1, 0.0460, 0.0460, 0.00, -0.1000, 0.0),
    (0.01, 0.1, 0.0460, 0.0230, -0.08, -0.6050, 0.0),
    (0.01, 0.1, 0.0230, 0.0230, 0.00, -0.6060, 0.0),
    (0.01, 0.1, 0.0230, 0.0460, 0.06, -0.6050, 0.0),
)

# The 3D head as ODL builds it: the 2D ellipses above, unchanged in x and y,
# given the z semi-axes of Schabel's phantom3d (the 3D table of Kak & Slaney
# as spread by Matlab Central and tomopy), all centred on z = 0 and rotated
# about z only. Its z = 0 section is therefore exactly the 2D phantom, which
# lets 2D and 3D code check each other.
#
# columns: value (Shepp-Logan), value (modified), a, b, c, x0, y0, z0, phi [deg]
SHEPP_LOGAN_3D: tuple[tuple[float, ...], ...] = (
    (2.00, 1.0, 0.6900, 0.9200, 0.810, 0.00, 0.0000, 0.0, 0.0),
    (-0.98, -0.8, 0.6624, 0.8740, 0.780, 0.00, -0.0184, 0.0, 0.0),
    (-0.02, _DARK, 0.1100, 0.3100, 0.220, 0.22, 0.0000, 0.0, -18.0),
    (-0.02, _DARK, 0.1600, 0.4100, 0.280, -0.22, 0.0000, 0.0, 18.0),
    (0.01, 0.1, 0.2100, 0.2500, 0.410, 0.00, 0.3500, 0.0, 0.0),
    (0.01, 0.1, 0.0460, 0.0460, 0.050, 0.00, 0.1000, 0.0, 0.0),
    (0.01, 0.1, 0.0460, 0.0460, 0.050, 0.00, -0.1000, 0.0, 0.0),
    (0.01, 0.1, 0.0460, 0.0230, 0.050, -0.08, -0.6050, 0.0, 0.0),
    (0.01, 0.1, 0.0230, 0.0230, 0.020, 0.00, -0.6060, 0.0, 0.0),
    (0.01, 0.1, 0.0230, 0.0460, 0.020, 0.06, -0.6050, 0.0, 0.0),
)
