"""VolumeGeometry and ParallelGeometry: docs/conventions.md, immutability, validation, plots."""

from __future__ import annotations

import numpy as np
import pytest

from leveret.geometry import ParallelGeometry, VolumeGeometry


def test_volume_voxel_centres_follow_conventions():
    vol = VolumeGeometry((3, 4, 5), voxel_size=(2.0, 0.5, 1.5), center=(1.0, -2.0, 3.0))
    np.testing.assert_allclose(vol.coordinates("x"), 3.0 + (np.arange(5) - 2.0) * 1.5)
    np.testing.assert_allclose(vol.coordinates("y"), -2.0 + (np.arange(4) - 1.5) * 0.5)
    np.testing.assert_allclose(vol.coordinates("z"), 1.0 + (np.arange(3) - 1.0) * 2.0)
    assert vol.extent("x") == (3.0 - 3.75, 3.0 + 3.75)
    assert (vol.nz, vol.ny, vol.nx) == (3, 4, 5)
    slab = vol.slab(1, 3)
    np.testing.assert_allclose(slab.coordinates("z"), vol.coordinates("z")[1:3])
    np.testing.assert_allclose(slab.coordinates("x"), vol.coordinates("x"))


def test_volume_2d_and_scalars():
    vol = VolumeGeometry((4, 6), voxel_size=0.25)
    assert vol.is_2d and vol.voxel_size == (0.25, 0.25) and vol.center == (0.0, 0.0)
    with pytest.raises(ValueError, match="axis"):
        vol.coordinates("z")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"shape": (0, 4)}, "shape"),
        ({"shape": (4,)}, "shape"),
        ({"shape": (4, 4), "voxel_size": -1}, "voxel_size"),
        ({"shape": (4, 4), "voxel_size": (1, 2, 3)}, "voxel_size"),
        ({"shape": (4, 4), "center": np.nan}, "center"),
    ],
)
def test_volume_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        VolumeGeometry(**kwargs)


def test_geometries_are_immutable_and_comparable():
    vol = VolumeGeometry((4, 4))
    with pytest.raises(AttributeError):
        vol.shape = (5, 5)
    g = ParallelGeometry([0.0, 1.0], 8)
    with pytest.raises(AttributeError):
        g.n_cols = 3
    with pytest.raises(ValueError):
        g.angles[0] = 2.0  # read-only array
    assert g == ParallelGeometry([0.0, 1.0], 8) and hash(g) == hash(ParallelGeometry([0.0, 1.0], 8))
    assert g.replace(center=2.0).center == 2.0 and g.center == 3.5
    assert "ParallelGeometry(2 angles" in repr(g) and "VolumeGeometry(shape=(4, 4)" in repr(vol)


@pytest.mark.parametrize("det_spacing,center", [(1.0, None), (0.5, 10.25), (2.0, 3.0)])
def test_point_projects_where_conventions_say(det_spacing, center):
    angles = np.array([0.0, 0.3, np.pi / 2, 2.0, np.pi, 4.5])
    g = ParallelGeometry(
        angles, 32, n_rows=9, det_spacing=det_spacing, row_spacing=0.7, center=center, axis_shift=np.linspace(-1, 1, 6)
    )
    x, y, z = 1.5, -2.25, 1.4
    c0 = (32 - 1) / 2 if center is None else center
    expected = (x * np.cos(angles) + y * np.sin(angles)) / det_spacing + c0 + np.linspace(-1, 1, 6)
    np.testing.assert_allclose(g.project_columns(x, y), expected)
    np.testing.assert_allclose(g.project_rows(z), z / 0.7 + 4.0)
    # The ray through the point runs along d(t) = (-sin t, cos t, 0): moving along it
    # changes nothing on the detector.
    np.testing.assert_allclose(g.project_columns(x - 3 * np.sin(angles[1]), y + 3 * np.cos(angles[1]))[1], expected[1])
    assert g.projection_shape == (6, 9, 32)


def test_parallel_defaults_and_validation():
    g = ParallelGeometry(np.linspace(0, np.pi, 10, endpoint=False), 11)
    assert g.is_2d and g.center == 5.0 and g.projection_shape == (10, 11)
    assert g.default_volume() == VolumeGeometry((11, 11), 1.0)
    g3 = ParallelGeometry([0.0], 11, n_rows=3, det_spacing=0.5, row_spacing=2.0)
    assert g3.default_volume() == VolumeGeometry((3, 11, 11), (2.0, 0.5, 0.5))
    with pytest.raises(ValueError, match="angles: expected at least one"):
        ParallelGeometry([], 8)
    with pytest.raises(ValueError, match="angles: expected finite"):
        ParallelGeometry([0.0, np.inf], 8)
    with pytest.raises(ValueError, match="center: expected a column position on the detector"):
        ParallelGeometry([0.0], 8, center=9.0)
    with pytest.raises(ValueError, match="axis_shift: expected 2 values, got 3"):
        ParallelGeometry([0.0, 1.0], 8, axis_shift=[0, 0, 0])
    with pytest.raises(ValueError, match="n_cols"):
        ParallelGeometry([0.0], 0)
    with pytest.raises(ValueError, match="det_spacing"):
        ParallelGeometry([0.0], 8, det_spacing=0)


@pytest.mark.parametrize(
    "angles,expected",
    [
        (np.linspace(0, np.pi, 90, endpoint=False), np.full(90, np.pi / 90)),
        (np.linspace(0, 2 * np.pi, 90, endpoint=False), np.full(90, np.pi / 90)),  # even, pairs coincide
        (np.linspace(0, 2 * np.pi, 91, endpoint=False), np.full(91, np.pi / 91)),  # odd, interleaved
    ],
)
def test_angular_weights_uniform_scans(angles, expected):
    np.testing.assert_allclose(ParallelGeometry(angles, 8).angular_weights(), expected, rtol=1e-9)


def test_angular_weights_endpoints_and_wedge():
    # 91 views from -88.2 to 91.8 degrees: first and last are the same line.
    angles = np.radians(np.arange(91) * 2.0 - 88.2)
    w = ParallelGeometry(angles, 8).angular_weights()
    np.testing.assert_allclose(w.sum(), np.pi)
    np.testing.assert_allclose(w[[0, -1]], np.radians(1.0))
    np.testing.assert_allclose(w[1:-1], np.radians(2.0))
    # A 120-degree scan: the missing wedge does not inflate the end views.
    limited = ParallelGeometry(np.radians(np.arange(60) * 2.0), 8).angular_weights()
    np.testing.assert_allclose(limited, np.radians(2.0))


def test_plot_draws_rays_detector_and_volume(tmp_path):
    g = ParallelGeometry(np.linspace(0, np.pi, 30, endpoint=False), 16, det_spacing=0.5)
    ax = g.plot(VolumeGeometry((10, 12), 0.6))
    assert len(ax.lines) > 10 and len(ax.patches) == 1
    ax.figure.savefig(tmp_path / "geometry.png")
    assert (tmp_path / "geometry.png").stat().st_size > 1000
