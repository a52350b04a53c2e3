"""Preprocessing: flat/dark-field normalisation, the minus-log transform,
phase retrieval, centre-of-rotation estimation, 360-degree half-acquisition
stitching, zinger removal, stripe (ring) suppression, and the check of a
scan's data against its geometry.

Arrays are NumPy or CuPy (CuPy in, CuPy out); projections are
``(n_angles, n_rows, n_cols)`` or sinograms ``(n_angles, n_cols)`` as in
docs/conventions.md.
"""

from .center import PAIR_TOLERANCE, CenterEstimate, center_sweep, find_center
from .consistency import Finding, check_consistency
from .flatfield import (
    DEAD_PIXEL_TRANSMISSION,
    MAX_BAD_FLAT_SHARE,
    check_flats_darks,
    minus_log,
    normalize,
    sinogram_fields,
)
from .phase import phase_border, retrieve_phase, wavelength
from .stitch import (
    Center360,
    HalfAcquisition,
    HalfAcquisitionLayout,
    find_center_360,
    half_acquisition,
    half_acquisition_layout,
)
from .stripes import detect_stripes, remove_dead_stripes, remove_large_stripes, remove_stripes
from .zingers import remove_zingers

__all__ = [
    "Center360",
    "CenterEstimate",
    "DEAD_PIXEL_TRANSMISSION",
    "Finding",
    "HalfAcquisition",
    "HalfAcquisitionLayout",
    "MAX_BAD_FLAT_SHARE",
    "PAIR_TOLERANCE",
    "center_sweep",
    "check_consistency",
    "check_flats_darks",
    "detect_stripes",
    "find_center",
    "find_center_360",
    "half_acquisition",
    "half_acquisition_layout",
    "minus_log",
    "normalize",
    "phase_border",
    "remove_dead_stripes",
    "remove_large_stripes",
    "remove_stripes",
    "remove_zingers",
    "retrieve_phase",
    "sinogram_fields",
    "wavelength",
]
