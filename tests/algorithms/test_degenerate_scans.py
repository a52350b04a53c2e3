"""Scans whose views cannot determine a volume are refused one way by every reconstruction
function (a ValueError naming ``geometry`` that says why); a volume no ray reaches comes back
all zeros with a UserWarning naming ``volume``; radon3d_fbp checks ``oversampling``.

The operators stay permissive: projecting one view is legitimate, reconstructing from it is not."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret.geometry import ConeGeometry, ParallelGeometry, ParallelVecGeometry, RadonGeometry, VolumeGeometry

ONE_DIRECTION = (
    r"^geometry: .* along one direction \((?:17.19|0) degrees, modulo 180\): they say nothing across "
    r"it, so no volume is determined"
)


@pytest.mark.parametrize(
    "angles",
    [np.zeros(90), [0.3], [0.3, 0.3 + np.pi], [0.3, 0.3 - 3 * np.pi]],
    ids=["90 views at one angle", "a single view", "two views half a turn apart", "two views 1.5 turns apart"],
)
@pytest.mark.parametrize("n_rows", [None, 4])
def test_fbp_refuses_views_along_one_direction(angles, n_rows):
    g = ParallelGeometry(angles, 32, n_rows=n_rows)
    with pytest.raises(ValueError, match=ONE_DIRECTION):
        leveret.fbp(np.ones(g.projection_shape, np.float32), g, backend="cpu")


def test_fbp_takes_two_directions():
    g = ParallelGeometry([0.0, np.pi / 2], 32)
    assert np.isfinite(leveret.fbp(np.ones((2, 32), np.float32), g, backend="cpu")).all()


@pytest.mark.parametrize("angles", [np.zeros(20), [0.2]], ids=["20 views at one angle", "a single view"])
def test_fdk_refuses_views_from_one_source_position(angles):
    g = ConeGeometry.circular(angles, sid=100, sdd=150, n_rows=16, n_cols=16, pixel_size=1.0)
    with pytest.raises(
        ValueError,
        match=r"^geometry: (all 20 views have the same|the single view has one) source "
        r"position: the scan sees the object from one direction only, so no "
        r"volume is determined",
    ):
        leveret.fdk(np.ones(g.projection_shape, np.float32), g, VolumeGeometry((8, 8, 8)), backend="cpu")


def test_laminography_fbp_refuses_views_along_one_ray_direction():
    g = ParallelVecGeometry.laminography(np.zeros(12), 0.5, 8, 16, 1.0)
    with pytest.raises(ValueError, match=r"^geometry: all 12 views look along one ray direction"):
        leveret.laminography_fbp(np.ones(g.projection_shape, np.float32), g, VolumeGeometry((8, 8, 8)), backend="cpu")


@pytest.mark.parametrize(
    "directions,match",
    [
        (
            [[0, 0, 1.0]],
            r"^geometry: the plane integrals of the single direction give the object's profile along "
            r"one line only",
        ),
        ([[0, 0, 1.0], [0, 0, -1.0]], r"^geometry: the plane integrals of all 2 directions \(one line\)"),
        (
            [[0, 0, 1.0], [1.0, 0, 0]],
            r"^geometry: the 2 directions lie in one plane: nothing is known along its normal",
        ),
        (
            [[np.cos(a), np.sin(a), 0.0] for a in np.linspace(0, np.pi, 30, endpoint=False)],
            r"^geometry: the 30 directions lie in one plane",
        ),
    ],
    ids=["one", "one line", "two", "a great circle"],
)
def test_radon3d_fbp_refuses_directions_that_do_not_span_space(directions, match):
    g = RadonGeometry(np.array(directions), 16)
    with pytest.raises(ValueError, match=match):
        leveret.radon3d_fbp(np.ones(g.projection_shape, np.float32), g, VolumeGeometry((8, 8, 8)), backend="cpu")


@pytest.mark.parametrize("method", ["sirt", "cgls", "os_sart"])
def test_iterative_methods_refuse_views_along_one_direction(method):
    g = ParallelGeometry(np.full(30, 0.3), 32)
    projector = leveret.Projector(g, VolumeGeometry((32, 32)), backend="cpu")
    assert projector(np.ones((32, 32), np.float32)).shape == (30, 32)  # the operator works
    with pytest.raises(ValueError, match=ONE_DIRECTION):
        getattr(leveret, method)(np.ones((30, 32), np.float32), projector, 2)


def test_a_volume_no_ray_reaches_is_zeros_with_a_warning():
    g = ParallelGeometry(np.linspace(0, np.pi, 30, endpoint=False), 32, n_rows=4)
    with pytest.warns(
        UserWarning,
        match=r"^volume: no ray of the scan reaches it \(x -8\.\.8, y -8\.\.8, z 98\.\.102 "
        r"lies above or below every detector row\), so it comes back all zeros",
    ):
        out = leveret.fbp(
            np.ones(g.projection_shape, np.float32), g, VolumeGeometry((4, 16, 16), center=(100, 0, 0)), backend="cpu"
        )
    assert not out.any()
    cone = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 20, endpoint=False), sid=100, sdd=150, n_rows=16, n_cols=16, pixel_size=1.0
    )
    with pytest.warns(UserWarning, match=r"^volume: no ray .* lies beside the detector in every view"):
        out = leveret.fdk(
            np.ones(cone.projection_shape, np.float32),
            cone,
            VolumeGeometry((4, 4, 4), center=(60, 0, 0)),
            backend="cpu",
        )
    assert not out.any()
    # directions within 20 degrees of z: a volume 100 up has its planes beyond t = 94
    theta, phi = np.meshgrid(np.radians([5, 10, 15, 20]), np.linspace(0, 2 * np.pi, 12, endpoint=False))
    radon = RadonGeometry.from_angles(theta.ravel(), phi.ravel(), 16)
    with pytest.warns(UserWarning, match=r"^volume: no ray .* beyond the sampled planes in every direction"):
        out = leveret.radon3d_fbp(
            np.ones(radon.projection_shape, np.float32),
            radon,
            VolumeGeometry((4, 4, 4), center=(100, 0, 0)),
            backend="cpu",
        )
    assert not out.any()


def test_a_volume_a_ray_reaches_gives_no_warning(recwarn):
    g = ParallelGeometry(np.linspace(0, np.pi, 30, endpoint=False), 32, n_rows=4)
    leveret.fbp(
        np.ones(g.projection_shape, np.float32), g, VolumeGeometry((4, 16, 16), center=(3.5, 0, 500)), backend="cpu"
    )  # far out in x, but the views along x see it; its top slice meets the top row
    assert not [w for w in recwarn if "volume" in str(w.message)]


@pytest.mark.parametrize(
    "value,error", [(0, ValueError), (-3, ValueError), ("x", TypeError), (2.5, TypeError), (True, TypeError)]
)
@pytest.mark.parametrize("method", ["single-stage", "two-stage"])
def test_radon3d_fbp_checks_oversampling(value, error, method):
    g = RadonGeometry.grid(6, 8, 16)
    with pytest.raises(error, match="^oversampling: expected a positive integer, got"):
        leveret.radon3d_fbp(
            np.ones(g.projection_shape, np.float32),
            g,
            VolumeGeometry((8, 8, 8)),
            backend="cpu",
            method=method,
            oversampling=value,
        )
