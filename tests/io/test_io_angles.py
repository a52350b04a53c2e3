"""read_angles: every accepted form, in radians."""

import numpy as np
import pytest

from leveret.io import read_angles


def test_spec_endpoint_excluded_and_included():
    np.testing.assert_allclose(read_angles("0:180:4"), np.deg2rad([0, 45, 90, 135]))
    np.testing.assert_allclose(read_angles("0:180:5:endpoint"), np.deg2rad([0, 45, 90, 135, 180]))
    np.testing.assert_allclose(read_angles("-1.5e0:.5:2", unit="radian"), [-1.5, -0.5])
    np.testing.assert_allclose(read_angles("0:6.2832:1", unit="rad"), [0.0])


def test_text_file_forms(tmp_path):
    (tmp_path / "lines.txt").write_text("0\n90\n\n180.0\n")
    (tmp_path / "row.txt").write_text("# angles in degrees\n0 90   180 # last\n")
    for name in ("lines.txt", "row.txt"):
        a = read_angles(tmp_path / name)
        assert a.dtype == np.float64
        np.testing.assert_allclose(a, [0, np.pi / 2, np.pi])
    np.testing.assert_allclose(read_angles(str(tmp_path / "row.txt"), unit="radians"), [0, 90, 180])


def test_npy_and_values(tmp_path):
    np.save(tmp_path / "a.npy", np.array([0.0, 0.5]))
    np.testing.assert_allclose(read_angles(tmp_path / "a.npy", unit="radian"), [0, 0.5])
    np.testing.assert_allclose(read_angles([0, 180]), [0, np.pi])
    out = read_angles(np.array([1.0, 2.0]), unit="radian")
    out[0] = 5  # a fresh writable array
    np.testing.assert_allclose(read_angles(range(3), unit="degrees"), np.deg2rad([0, 1, 2]))


@pytest.mark.parametrize(
    "value, match",
    [
        ("nothing_here.txt", r"neither an existing file nor"),
        ("0:180", r"neither an existing file nor"),
        ("0:180:0", r"count\): expected a positive integer"),
        ([0, np.nan], r"expected finite values"),
        ([[0, 1], [2, 3]], r"expected a 1D array"),
        ([], r"at least one value"),
    ],
)
def test_bad_values_name_argument(value, match):
    with pytest.raises(ValueError, match=r"^path_or_values.*" + match):
        read_angles(value)


def test_bad_files_and_unit(tmp_path):
    (tmp_path / "words.txt").write_text("0 ninety\n")
    with pytest.raises(ValueError, match=r"^path_or_values: .* not a list of numbers"):
        read_angles(tmp_path / "words.txt")
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match=r"^path_or_values: expected at least one"):
        read_angles(tmp_path / "empty.txt")
    np.save(tmp_path / "m.npy", np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"^path_or_values: .* expected 1D"):
        read_angles(tmp_path / "m.npy")
    with pytest.raises(ValueError, match=r"^unit: expected one of"):
        read_angles("0:1:2", unit="gradian")


DEGREE_NAMES = ("degree", "degrees", "deg", "DEG")
RADIAN_NAMES = ("radian", "radians", "rad", "Rad")


def is_degree(unit: str) -> bool:
    return unit.strip().lower().startswith("deg")


@pytest.mark.parametrize("unit", DEGREE_NAMES + RADIAN_NAMES)
def test_every_unit_name_means_its_unit(unit):
    """Each spelling against numpy's own conversion: 90 is a right angle in degrees, 90 radians
    in radians."""
    expected = np.radians([0.0, 90.0]) if is_degree(unit) else np.array([0.0, 90.0])
    np.testing.assert_allclose(read_angles([0, 90], unit=unit), expected, rtol=1e-15)
    np.testing.assert_allclose(read_angles("0:180:2", unit=unit), expected, rtol=1e-15)


@pytest.mark.parametrize("unit", DEGREE_NAMES + RADIAN_NAMES + (" Degrees ",))
def test_every_unit_name_in_a_scan_file_means_its_unit(tmp_path, unit):
    import h5py

    from leveret.io import read_scan

    with h5py.File(tmp_path / "s.h5", "w") as f:
        f["/exchange/data"] = np.zeros((2, 3, 4), np.uint16)
        f["/exchange/theta"] = np.array([0.0, 90.0])
        f["/exchange/theta"].attrs["units"] = unit
    np.testing.assert_allclose(
        read_scan(tmp_path / "s.h5").angles, np.radians([0.0, 90.0]) if is_degree(unit) else [0.0, 90.0], rtol=1e-15
    )
