"""The point back-projection of leveret.live.planes on the CPU, and its .cu compiling for sm_90."""
from pathlib import Path

import numpy as np
import pytest

from leveret.live import planes


def test_parallel_points_sample_the_detector_bilinearly_with_zero_outside():
    q = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    params = planes.parallel_params([0.0, np.pi / 2], [1.5, 1.5], 1.0)
    # point (x, y, z): column x + 1.5 at angle 0, y + 1.5 at 90 degrees; row z + 1
    points = np.array([[0.25, -1.0, 0.5], [10.0, 0.0, 0.0], [0.0, 0.0, 5.0]])
    out = np.zeros(3, np.float32)
    planes.backproject_points(q, np.array([0, 1]), np.array([1.0, 2.0]), points, out,
                              params=params, row_scale=1.0, row_offset=1.0)
    # view 0 at (row 1.5, col 1.75); view 1 at (row 1.5, col 0.5)
    def bilinear(v, r, c):
        r0, c0 = int(np.floor(r)), int(np.floor(c))
        a, b = c - c0, r - r0
        return ((1 - a) * (1 - b) * v[r0, c0] + a * (1 - b) * v[r0, c0 + 1]
                + (1 - a) * b * v[r0 + 1, c0] + a * b * v[r0 + 1, c0 + 1])
    expected0 = bilinear(q[0], 1.5, 1.75) + 2 * bilinear(q[1], 1.5, 0.5)
    assert out[0] == pytest.approx(expected0, rel=1e-6)
    # column 11.5 is off the detector at angle 0; at 90 degrees column 1.5, row 1
    assert out[1] == pytest.approx(2 * 0.5 * (q[1, 1, 1] + q[1, 1, 2]), rel=1e-6)
    assert out[2] == 0.0   # row 6: above the detector in every view


def test_planes_cu_compiles_for_sm_90():
    pytest.importorskip("cuda.bindings")
    from leveret.cuda._module import compile_report
    ok, log = compile_report(Path(planes.__file__).with_name("planes.cu"), "sm_90")
    assert ok, log
    assert "spill stores" in log and "0 bytes spill stores" in log
