"""Helical and laminography geometries: ConeGeometry.helical / .laminography,
ParallelVecGeometry, fit_helix, ASTRA vectors, validation, plots."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from leveret.geometry import ConeGeometry, ParallelGeometry, ParallelVecGeometry, VolumeGeometry
from leveret.geometry.helix import fit_helix

SID, SDD, NR, NC, DU, DV = 500.0, 800.0, 30, 40, 1.5, 1.25
C0, R0 = (NC - 1) / 2, (NR - 1) / 2
TOL = 1e-10


def helical(angles, pitch, **kwargs) -> ConeGeometry:
    return ConeGeometry.helical(angles, pitch, SID, SDD, NR, NC, DU, row_pixel_size=DV, **kwargs)


def turns(n_turns, per_turn=36, direction=1.0):
    return direction * np.arange(int(n_turns * per_turn)) * 2 * np.pi / per_turn


def astra_cone_project(vectors, n_rows, n_cols, X):
    """ASTRA's CConeVecProjectionGeometry3D::projectPoint (corner d - n_rows/2 v - n_cols/2 u,
    pixel centres half a step inside)."""
    cols, rows = [], []
    for src, d, u, v in vectors.reshape(-1, 4, 3):
        corner = d - 0.5 * n_rows * v - 0.5 * n_cols * u
        a, b, _ = np.linalg.solve(np.stack([u, v, -(X - src)], axis=1), src - corner)
        cols.append(a - 0.5)
        rows.append(b - 0.5)
    return np.array(cols), np.array(rows)


def astra_parallel_project(vectors, n_rows, n_cols, X):
    """ASTRA's CParallelVecProjectionGeometry3D::projectPoint: the point moved
    along the ray onto the detector plane, measured from the corner."""
    cols, rows = [], []
    for ray, d, u, v in vectors.reshape(-1, 4, 3):
        corner = d - 0.5 * n_rows * v - 0.5 * n_cols * u
        a, b, _ = np.linalg.solve(np.stack([u, v, -ray], axis=1), X - corner)
        cols.append(a - 0.5)
        rows.append(b - 0.5)
    return np.array(cols), np.array(rows)


# -- helical ---------------------------------------------------------------------------------
@pytest.mark.parametrize("pitch", [24.0, -24.0])
@pytest.mark.parametrize("direction", [1.0, -1.0])
def test_helix_is_the_circle_raised_by_the_pitch(rng, pitch, direction):
    t = turns(2.5, direction=direction) + 0.3
    g = helical(t, pitch, z_center=7.0)
    z = 7.0 + pitch * (t - (t.min() + t.max()) / 2) / (2 * np.pi)
    np.testing.assert_allclose(
        g.source_positions(), np.stack([SID * np.sin(t), -SID * np.cos(t), z], axis=1), atol=1e-9
    )
    # each view is the circular view of the object moved down by z(t)
    circle = ConeGeometry.circular(t, SID, SDD, NR, NC, DU, row_pixel_size=DV)
    X = rng.uniform(-40, 40, (20, 3))
    u, v, _ = g.project(X)
    for n in range(0, t.size, 7):
        uc, vc, _ = circle.project(X - np.array([0.0, 0.0, z[n]]))
        np.testing.assert_allclose(u[n], uc[n], atol=TOL)
        np.testing.assert_allclose(v[n], vc[n], atol=TOL)
    h = fit_helix(g)
    assert h.pitch == pytest.approx(pitch, rel=1e-12)
    assert h.radius == pytest.approx(SID, rel=1e-12)
    assert h.orientation == direction and h.rise == pytest.approx(pitch * direction, rel=1e-12)
    np.testing.assert_allclose(h.z, z, atol=1e-9)
    assert f"helix radius 500, pitch {pitch:.4g} per turn" in repr(g)


def test_fit_helix_refuses_planar_and_wobbling_trajectories(rng):
    t = turns(1)
    assert fit_helix(ConeGeometry.circular(t, SID, SDD, NR, NC, DU)) is None
    assert fit_helix(ConeGeometry.laminography(t, 0.4, SID, SDD, NR, NC, DU)) is None
    # z wobble of a fifth of a row at the isocentre: not a helix
    row = DU * SID / SDD
    wobble = ConeGeometry.circular(
        t,
        SID,
        SDD,
        NR,
        NC,
        DU,
        perturbation=np.hstack(
            [np.zeros((t.size, 2)), rng.uniform(-0.1, 0.1, (t.size, 1)) * row, np.zeros((t.size, 3))]
        ),
    )
    assert fit_helix(wobble) is None
    # back and forth: the azimuth is not monotonic
    assert fit_helix(helical(np.concatenate([t, t[::-1] + 0.01]), 20.0)) is None
    # the smallest rise that counts: half a row over the scan
    assert fit_helix(helical(t, 0.6 * row * 2 * np.pi / np.ptp(t))) is not None
    assert fit_helix(helical(t, 0.4 * row * 2 * np.pi / np.ptp(t))) is None


def test_helical_astra_vectors_round_trip(rng):
    g = helical(turns(1.5, 12), 30.0)
    vec = g.to_astra_vectors()
    back = ConeGeometry.from_astra_vectors(vec, NR, NC)
    X = rng.uniform(-40, 40, (10, 3))
    u, v, _ = g.project(X)
    ub, vb, _ = back.project(X)
    np.testing.assert_allclose(ub, u, atol=TOL)
    np.testing.assert_allclose(vb, v, atol=TOL)
    for n in range(0, g.n_views, 5):
        col, row = astra_cone_project(vec[n], NR, NC, X[3])
        assert col[0] == pytest.approx(u[n, 3], abs=TOL) and row[0] == pytest.approx(v[n, 3], abs=TOL)
    assert fit_helix(back).pitch == pytest.approx(30.0, rel=1e-12)


def test_crop_views_keeps_matrices_and_angles():
    g = helical(turns(1), 10.0)
    c = g.crop_views(5, 9)
    np.testing.assert_array_equal(c.matrices, g.matrices[5:9])
    np.testing.assert_array_equal(c.angles, g.angles[5:9])
    with pytest.raises(ValueError, match="crop_views"):
        g.crop_views(3, 3)


def test_derived_geometries_equal_the_checked_constructor():
    """crop_views, crop_rows and normalised skip the matrices' checks: what they
    build must be what the constructor builds from the same arguments, frozen."""
    g = helical(turns(1), 10.0)
    m = g.normalised().matrices
    rows = m.copy()
    rows[:, 1, :] -= 3 * rows[:, 2, :]
    for derived, expected in [
        (g.normalised(), g.replace(matrices=g.matrices / g.matrices[:, 2, 3, None, None])),
        (g.crop_views(2, 7), g.replace(matrices=g.matrices[2:7], angles=g.angles[2:7])),
        (g.normalised().crop_rows(3, NR), g.replace(matrices=rows, n_rows=NR - 3)),
    ]:
        assert type(derived) is ConeGeometry and derived == expected and hash(derived) == hash(expected)
        assert not derived.matrices.flags.writeable and derived.matrices.dtype == np.float64
        with pytest.raises(AttributeError, match="immutable"):
            derived.n_rows = 1


def test_helical_validation():
    with pytest.raises(ValueError, match="pitch: expected a non-zero"):
        helical(turns(1), 0.0)
    with pytest.raises(ValueError, match="pitch"):
        helical(turns(1), float("nan"))
    with pytest.raises(ValueError, match="z_center"):
        helical(turns(1), 1.0, z_center="up")


# -- cone-beam laminography ------------------------------------------------------------------
def test_cone_laminography_frame():
    t = turns(1, 24)
    tilt = np.radians(35)
    g = ConeGeometry.laminography(t, tilt, SID, SDD, NR, NC, DU, row_pixel_size=DV)
    np.testing.assert_array_equal(
        ConeGeometry.laminography(t, 0.0, SID, SDD, NR, NC, DU, row_pixel_size=DV).matrices,
        ConeGeometry.circular(t, SID, SDD, NR, NC, DU, row_pixel_size=DV).matrices,
    )
    src = g.source_positions()
    np.testing.assert_allclose(src[:, 2], -SID * np.sin(tilt), atol=1e-9)  # below the sample
    np.testing.assert_allclose(np.hypot(src[:, 0], src[:, 1]), SID * np.cos(tilt), atol=1e-9)
    u, v, w = g.project(np.zeros(3))
    np.testing.assert_allclose(u, C0, atol=TOL)
    np.testing.assert_allclose(v, R0, atol=TOL)
    # the rotation axis projects onto the central column, rising rows going up it
    u, v, _ = g.project(np.array([[0, 0, -30.0], [0, 0, 30.0]]))
    np.testing.assert_allclose(u, C0, atol=TOL)
    assert np.all(v[:, 1] > v[:, 0])
    np.testing.assert_allclose(g.source_detector_distance(), SDD, rtol=1e-12)


def test_cone_laminography_approaches_the_parallel_one(rng):
    t = turns(1, 12)
    tilt = 0.6
    par = ParallelVecGeometry.laminography(t, tilt, NR, NC, DU, row_pixel_size=DV)
    X = rng.uniform(-20, 20, (15, 3))
    up, vp = par.project(X)
    far = 1e7
    cone = ConeGeometry.laminography(t, tilt, far, far, NR, NC, DU, row_pixel_size=DV)
    uc, vc, _ = cone.project(X)
    np.testing.assert_allclose(uc, up, atol=1e-4)
    np.testing.assert_allclose(vc, vp, atol=1e-4)


@pytest.mark.parametrize("tilt", [-0.1, np.pi / 2, 2.0, float("nan"), "steep"])
def test_tilt_out_of_range_names_tilt(tilt):
    with pytest.raises(ValueError, match="^tilt: expected"):
        ConeGeometry.laminography(turns(1), tilt, SID, SDD, NR, NC, DU)
    with pytest.raises(ValueError, match="^tilt: expected"):
        ParallelVecGeometry.laminography(turns(1), tilt, NR, NC, DU)


# -- ParallelVecGeometry -----------------------------------------------------------------------
def test_from_parallel_projects_as_parallel_geometry(rng):
    pg = ParallelGeometry(np.linspace(0, np.pi, 9), NC, NR, DU, DV, center=17.3, axis_shift=rng.normal(0, 0.5, 9))
    g = ParallelVecGeometry.from_parallel(pg)
    X = rng.uniform(-20, 20, (30, 3))
    u, v = g.project(X)
    np.testing.assert_allclose(u, pg.project_columns(X[:, 0], X[:, 1]), atol=TOL)
    np.testing.assert_allclose(v, np.broadcast_to(pg.project_rows(X[:, 2]), v.shape), atol=TOL)
    with pytest.raises(ValueError, match="geometry: expected a 3D ParallelGeometry"):
        ParallelVecGeometry.from_parallel(ParallelGeometry(pg.angles, NC))


def test_laminography_projects_as_documented(rng):
    t = turns(1, 10)
    tilt = np.radians(40)
    g = ParallelVecGeometry.laminography(t, tilt, NR, NC, DU, row_pixel_size=DV, center=15.0, row_center=12.0)
    X = rng.uniform(-20, 20, (25, 3))
    u, v = g.project(X)
    d = np.stack([-np.sin(t), np.cos(t), 0 * t], 1)
    e = np.stack([np.cos(t), np.sin(t), 0 * t], 1)
    up = np.cos(tilt) * np.array([0, 0, 1.0]) - np.sin(tilt) * d
    np.testing.assert_allclose(u, 15.0 + e @ X.T / DU, atol=TOL)
    np.testing.assert_allclose(v, 12.0 + up @ X.T / DV, atol=TOL)
    np.testing.assert_allclose(g.axis_cosines(), np.cos(tilt), atol=1e-14)
    np.testing.assert_allclose(g.rays[:, 2], np.sin(tilt), atol=1e-14)
    P = g.matrices
    np.testing.assert_array_equal(P[:, 2], np.tile([0, 0, 0, 1.0], (t.size, 1)))
    # a point moved along the ray stays on its pixel
    u2, v2 = g.project(X[4] + 37.0 * g.rays)  # point n moved along view n's ray
    np.testing.assert_allclose(np.diagonal(u2), u[:, 4], atol=TOL)
    np.testing.assert_allclose(np.diagonal(v2), v[:, 4], atol=TOL)
    # pixel rays pass through the pixel centres
    origins, directions = g.pixel_rays(views=slice(2, 4))
    uu, vv = g.project(origins[1])
    np.testing.assert_allclose(uu[3], np.broadcast_to(np.arange(NC), (NR, NC)), atol=1e-9)
    np.testing.assert_allclose(vv[3], np.broadcast_to(np.arange(NR)[:, None], (NR, NC)), atol=1e-9)
    np.testing.assert_allclose(directions[:, 0, 0], g.rays[2:4])


def test_parallel_vec_crop_rows_renumbers_the_rows(rng):
    g = ParallelVecGeometry.laminography(turns(1, 8), 0.5, NR, NC, DU, row_pixel_size=DV, center=20.5)
    c = g.crop_rows(7, 19)
    assert c.n_rows == 12
    X = rng.uniform(-20, 20, (9, 3))
    (u, v), (uc, vc) = g.project(X), c.project(X)
    np.testing.assert_allclose(uc, u, atol=TOL)
    np.testing.assert_allclose(vc, v - 7, atol=TOL)
    with pytest.raises(ValueError, match="crop_rows"):
        g.crop_rows(5, 5)


def test_parallel_vec_astra_round_trip_and_formula(rng):
    g = ParallelVecGeometry.laminography(turns(1, 8), 0.5, NR, NC, DU, row_pixel_size=DV, center=20.5)
    vec = g.to_astra_vectors()
    back = ParallelVecGeometry.from_astra_vectors(vec, NR, NC)
    assert back == g.replace(angles=None)
    X = rng.uniform(-20, 20, (5, 3))
    u, v = g.project(X)
    for n in range(g.n_views):
        col, row = astra_parallel_project(vec[n], NR, NC, X[2])
        assert col[0] == pytest.approx(u[n, 2], abs=TOL) and row[0] == pytest.approx(v[n, 2], abs=TOL)


@pytest.mark.parametrize(
    "vectors,match",
    [
        (np.zeros((2, 11)), "vectors: expected shape"),
        (np.full((1, 12), np.nan), "vectors: expected finite"),
        (np.array([[1.0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]]), r"vectors\[0\]: expected a ray direction off"),
    ],
)
def test_parallel_vec_validation(vectors, match):
    with pytest.raises(ValueError, match=match):
        ParallelVecGeometry(vectors, NR, NC)


def test_parallel_vec_vectors_that_are_not_numbers_are_a_type_error():
    with pytest.raises(TypeError, match="vectors: expected numbers"):
        ParallelVecGeometry([["a"] * 12], NR, NC)


def test_parallel_vec_is_an_immutable_value_that_pickles_and_plots(tmp_path):
    from mpl_toolkits.mplot3d import Axes3D

    g = ParallelVecGeometry.laminography(turns(1, 12), 0.3, NR, NC, DU)
    assert g == ParallelVecGeometry.laminography(turns(1, 12), 0.3, NR, NC, DU) and hash(g) == hash(g.replace())
    with pytest.raises(AttributeError):
        g.n_rows = 3
    with pytest.raises(ValueError):
        g.vectors[0, 0] = 1.0
    assert pickle.loads(pickle.dumps(g)) == g
    assert "17.19 deg out of the xy plane" in repr(g) and "12 views" in repr(g)
    ax = g.plot(VolumeGeometry((6, 30, 30), 1.0), n_views=3)
    assert isinstance(ax, Axes3D) and len(ax.collections) >= 7
    ax.figure.savefig(tmp_path / "lamino.png", dpi=50)
    assert (tmp_path / "lamino.png").stat().st_size > 1000


def test_helix_plot_draws_the_trajectory_and_the_axis(tmp_path):
    g = helical(turns(3), 40.0)
    ax = g.plot(VolumeGeometry((30, 30, 30), 2.0), n_views=4)
    trajectory = [line for line in ax.lines if line.get_label() == "source trajectory"][0]
    z = np.asarray(trajectory.get_data_3d()[2])
    assert np.ptp(z) == pytest.approx(40.0 * np.ptp(g.angles) / (2 * np.pi))
    assert any(line.get_label() == "rotation axis (z)" for line in ax.lines)
    ax.figure.savefig(tmp_path / "helix.png", dpi=50)
