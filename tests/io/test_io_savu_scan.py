"""leveret.io on the real savu-image-test scan's original files."""

import numpy as np

from leveret.io import read_array
from conftest import N_COLS, N_PROJECTIONS, N_ROWS, savu_folder


def test_scan_shapes_dtypes_and_angles(savu_files):
    scan = savu_files
    assert scan.projections.shape == (N_PROJECTIONS, N_ROWS, N_COLS)
    assert scan.projections.dtype == np.uint16
    assert scan.dark.shape == scan.flat.shape == (N_ROWS, N_COLS)
    assert scan.dark.dtype == scan.flat.dtype == np.float32
    assert scan.angles.shape == (N_PROJECTIONS,)
    np.testing.assert_allclose(np.rad2deg(scan.angles[[0, -1]]), [-88.2, 91.8], atol=1e-3)
    np.testing.assert_allclose(np.rad2deg(np.diff(scan.angles)), 2.0, atol=1e-3)


def test_glob_matches_folder_in_natural_order(savu_files):
    scan = savu_files
    stack = read_array(savu_folder() / "projections" / "raw_*.tiff")
    np.testing.assert_array_equal(stack, scan.projections)
    # The folder order is the file order: spot check one projection.
    np.testing.assert_array_equal(scan.projections[37], read_array(savu_folder() / "projections" / "raw_00037.tiff"))
