"""ConeGeometry: docs/conventions.md "Cone beam", decomposition, RabbitCT / ASTRA / TIGRE
conversions (each checked against an independent transcription of the other
tool's formula), validation, plots."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from leveret.geometry import ConeGeometry, ParallelGeometry, VolumeGeometry

SID, SDD, NR, NC, DU, DV = 500.0, 800.0, 30, 40, 1.5, 1.25
C0, R0 = (NC - 1) / 2, (NR - 1) / 2
# Geometry is float64 arithmetic on pixel coordinates and lengths up to ~1600: rounding
# reaches ~1e-12 (measured max 1.1e-12 over random scans); bound 1e-11.
TOL = 1e-11


def circular(angles, **kwargs) -> ConeGeometry:
    return ConeGeometry.circular(angles, SID, SDD, NR, NC, DU, row_pixel_size=DV, **kwargs)


def messy(rng, n=7) -> ConeGeometry:
    """A scan far from a perfect circle: every knob turned, per view."""
    angles = np.sort(rng.uniform(0, 2 * np.pi, n))
    return ConeGeometry.circular(
        angles,
        SID + rng.normal(0, 5, n),
        SDD + rng.normal(0, 5, n),
        NR,
        NC,
        DU,
        row_pixel_size=DV,
        det_offset=rng.normal(0, 4, (n, 2)),
        det_tilt=rng.normal(0, 0.05, (n, 3)),
        source_offset=rng.normal(0, 3, (n, 2)),
        perturbation=np.hstack([rng.normal(0, 2, (n, 3)), rng.normal(0, 0.02, (n, 3))]),
    )


def random_points(rng, k=50, r=40.0):
    return rng.uniform(-r, r, (k, 3))


def assert_same_projection(g1, g2, points, atol=TOL):
    u1, v1, _ = g1.project(points)
    u2, v2, _ = g2.project(points)
    np.testing.assert_allclose(u1, u2, rtol=0, atol=atol)
    np.testing.assert_allclose(v1, v2, rtol=0, atol=atol)


# -- the circular convention ------------------------------------------------------------
def test_origin_projects_to_detector_centre_with_unit_w():
    t = np.linspace(0, 2 * np.pi, 13)
    u, v, w = circular(t).project([0.0, 0.0, 0.0])
    np.testing.assert_allclose(u, C0, atol=TOL)
    np.testing.assert_allclose(v, R0, atol=TOL)
    np.testing.assert_allclose(w, 1.0, atol=1e-12)


def test_magnification_on_the_plane_through_the_axis():
    t = np.array([0.0, 0.4, 2.0, -2.5])
    g = circular(t)
    s, z = np.array([-20.0, 3.0, 17.0]), np.array([-9.0, 0.0, 11.0])
    e = np.stack([np.cos(t), np.sin(t), 0 * t], -1)
    pts = s[None, :, None] * e[:, None, :] + z[None, :, None] * np.array([0, 0, 1.0])
    for n in range(t.size):  # each view's own plane
        u, v, w = g.project(pts[n])
        np.testing.assert_allclose(u[n], C0 + s * SDD / (SID * DU), atol=TOL)
        np.testing.assert_allclose(v[n], R0 + z * SDD / (SID * DV), atol=TOL)
        np.testing.assert_allclose(w[n], 1.0, atol=1e-12)
    # the brief's example: a point on the x axis at t = 0
    u, v, _ = circular([0.0]).project([10.0, 0.0, 0.0])
    assert u[0] == pytest.approx(C0 + 10.0 * SDD / (SID * DU)) and v[0] == pytest.approx(R0)
    np.testing.assert_allclose(g.magnification(np.zeros(3)), SDD / SID)


def test_rows_grow_with_z_and_w_is_depth_over_sid():
    g = circular([0.3])
    _, v, _ = g.project([[0, 0, -5.0], [0, 0, 0], [0, 0, 5.0]])
    assert v[0, 0] < v[0, 1] < v[0, 2]
    # w = depth / sid: a point 100 further along the ray direction d(t)
    d = np.array([-np.sin(0.3), np.cos(0.3), 0])
    _, _, w = g.project(100 * d)
    assert w[0] == pytest.approx((SID + 100) / SID)
    np.testing.assert_allclose(g.depth(100 * d), SID + 100)


def test_source_positions_distances_and_principal_point():
    t = np.linspace(0, 2 * np.pi, 9, endpoint=False)
    g = circular(t)
    np.testing.assert_allclose(g.source_positions(), np.stack([SID * np.sin(t), -SID * np.cos(t), 0 * t], -1), atol=TOL)
    np.testing.assert_allclose(g.source_detector_distance(), SDD)
    np.testing.assert_allclose(g.principal_point(), np.tile([C0, R0], (t.size, 1)), atol=TOL)
    assert g.pixel_size == (DU, DV) and np.array_equal(g.angles, t)


def test_large_sid_approaches_the_parallel_geometry(rng):
    t = np.linspace(0, np.pi, 7)
    sid = 1e8
    sdd = sid + 300.0
    g = ConeGeometry.circular(t, sid, sdd, NR, NC, DU, row_pixel_size=DV)
    par = ParallelGeometry(t, NC, NR, det_spacing=DU * sid / sdd, row_spacing=DV * sid / sdd)
    r = 20.0
    pts = random_points(rng, 30, r)
    u, v, _ = g.project(pts)
    # What remains is perspective: a point at depth d off the axis plane lands s d / sid
    # further out, |s|, |d| <= r sqrt 2: at most 2 r^2 / (sid pixel) = 6.4e-6 pixel
    # (measured 3.8e-6).
    perspective = 2 * r**2 / (sid * min(par.det_spacing, par.row_spacing))
    np.testing.assert_allclose(u, par.project_columns(pts[:, 0], pts[:, 1]), rtol=0, atol=perspective)
    np.testing.assert_allclose(v, np.broadcast_to(par.project_rows(pts[:, 2]), v.shape), rtol=0, atol=perspective)


def test_detector_offset_moves_the_principal_ray():
    g = circular([0.0, 1.0], det_offset=(3.0, -2.0))
    np.testing.assert_allclose(g.principal_point(), [[C0 - 3.0 / DU, R0 + 2.0 / DV]] * 2, atol=TOL)
    u, v, _ = g.project(np.zeros(3))  # the origin is on the principal ray
    np.testing.assert_allclose(u, C0 - 3.0 / DU, atol=TOL)
    np.testing.assert_allclose(v, R0 + 2.0 / DV, atol=TOL)


def _plane_points(t, s, z):
    """Points s e(t) + z ez and where their rays meet the untilted detector (y0, z0)."""
    e = np.array([np.cos(t), np.sin(t), 0.0])
    return s * e + z * np.array([0, 0, 1.0]), s * SDD / SID, z * SDD / SID


def test_detector_roll_rotates_the_pixel_grid_in_plane():
    t, a = 0.7, 0.2
    g = circular([t], det_tilt=(a, 0.0, 0.0))
    for s, z in [(10.0, 0.0), (0.0, 7.0), (-6.0, 4.0)]:
        X, y0, z0 = _plane_points(t, s, z)
        u, v, _ = g.project(X)
        assert u[0] == pytest.approx(C0 + (y0 * np.cos(a) + z0 * np.sin(a)) / DU, abs=TOL)
        assert v[0] == pytest.approx(R0 + (-y0 * np.sin(a) + z0 * np.cos(a)) / DV, abs=TOL)


def test_detector_tilts_about_u_and_v():
    t, b, c = -0.4, 0.15, 0.1
    plain, about_u, about_v = circular([t]), circular([t], det_tilt=(0, b, 0)), circular([t], det_tilt=(0, 0, c))
    # The u axis stays put under a tilt about u: rays in the plane z = 0 hit the same pixels.
    pts = np.array([_plane_points(t, s, 0.0)[0] for s in (-15.0, 4.0, 12.0)])
    assert_same_projection(plain, about_u, pts)
    # ... and the v axis under a tilt about v.
    pts = np.array([_plane_points(t, 0.0, z)[0] for z in (-9.0, 8.0)])
    assert_same_projection(plain, about_v, pts)
    # Tilt about v, in the detector frame (x: normal to the source, y: u, z: v): the
    # source at (SDD, 0, 0) sees the point at y0 on the untilted detector; the tilted
    # plane has normal (cos c, sin c, 0) and u axis (-sin c, cos c, 0).
    for s in (-12.0, 9.0):
        X, y0, _ = _plane_points(t, s, 0.0)
        lam = SDD * np.cos(c) / (SDD * np.cos(c) - y0 * np.sin(c))
        along_u = -SDD * (1 - lam) * np.sin(c) + lam * y0 * np.cos(c)
        u, v, _ = about_v.project(X)
        assert u[0] == pytest.approx(C0 + along_u / DU, abs=TOL)
        assert v[0] == pytest.approx(R0, abs=TOL)


def test_source_offset_and_rigid_perturbation(rng):
    t = np.linspace(0, 2 * np.pi, 5, endpoint=False)
    g = circular(t, source_offset=(2.0, -3.0))
    e = np.stack([np.cos(t), np.sin(t), 0 * t], -1)
    expected = np.stack([SID * np.sin(t), -SID * np.cos(t), 0 * t], -1) + 2.0 * e + [0, 0, -3.0]
    np.testing.assert_allclose(g.source_positions(), expected, atol=TOL)
    # Moving the rig by (R, s) is the same as moving the object by its inverse.
    p = np.hstack([rng.normal(0, 3, (t.size, 3)), rng.normal(0, 0.05, (t.size, 3))])
    moved = circular(t, perturbation=p)
    plain = circular(t)
    X = random_points(rng, 20)
    for n in range(t.size):
        R = Rotation.from_euler("xyz", p[n, 3:]).as_matrix()  # extrinsic x, then y, then z
        u1, v1, w1 = moved.project(X @ R.T + p[n, :3])
        u0, v0, w0 = plain.project(X)
        np.testing.assert_allclose(u1[n], u0[n], atol=TOL)
        np.testing.assert_allclose(v1[n], v0[n], atol=TOL)


def test_rays_and_pixel_rays_hit_the_pixel_centres(rng):
    g = messy(rng, 3)
    sources, dirs = g.pixel_rays()
    assert sources.shape == (3, 1, 1, 3) and dirs.shape == (3, NR, NC, 3)
    np.testing.assert_allclose(np.linalg.norm(dirs, axis=-1), 1.0)
    for n in range(3):
        u, v, w = g.project(sources[n] + 250.0 * dirs[n])
        np.testing.assert_allclose(u[n], np.broadcast_to(np.arange(NC), (NR, NC)), atol=TOL)
        np.testing.assert_allclose(v[n], np.broadcast_to(np.arange(NR)[:, None], (NR, NC)), atol=TOL)
        assert np.all(w[n] > 0)
    one_s, one_d = g.pixel_rays(views=slice(1, 2))
    np.testing.assert_allclose(one_d[0], dirs[1])
    np.testing.assert_allclose(one_s[0], sources[1])
    d = g.ray_directions(np.array([0.0, 3.5]), 2.0)
    assert d.shape == (3, 2, 3)


# -- decomposition ------------------------------------------------------------------
def _check_decomposition(g):
    K, R, t = g.decompose()
    P = g.matrices
    assert np.all(np.abs(K[:, [1, 2, 2], [0, 0, 1]]) == 0)  # upper triangular
    assert np.all(K[:, [0, 1], [0, 1]] > 0) and np.all(K[:, 2, 2] == 1)
    np.testing.assert_allclose(R @ R.transpose(0, 2, 1), np.broadcast_to(np.eye(3), R.shape), atol=1e-12)
    scale = np.linalg.norm(P[:, 2, :3], axis=1)
    rebuilt = scale[:, None, None] * K @ np.concatenate([R, t[:, :, None]], axis=2)
    np.testing.assert_allclose(rebuilt, P, rtol=1e-12, atol=1e-12 * np.abs(P).max())
    np.testing.assert_allclose(-np.einsum("nji,nj->ni", R, t), g.source_positions(), atol=TOL)
    # R's last row is the principal ray, pointing from the source to the detector.
    centre = g.detector_frame().center if g.pixel_size else None
    if centre is not None:
        to_det = centre - g.source_positions()
        assert np.all(np.einsum("ni,ni->n", to_det, R[:, 2]) > 0)
    return K, R, t


def test_decompose_circular_and_messy(rng):
    t = np.linspace(0, 2 * np.pi, 6, endpoint=False)
    K, R, _ = _check_decomposition(circular(t))
    np.testing.assert_allclose(K[:, 0, 0], SDD / DU)
    np.testing.assert_allclose(K[:, 1, 1], SDD / DV)
    np.testing.assert_allclose(K[:, 0, 1], 0, atol=TOL)
    np.testing.assert_allclose(R[:, 0], np.stack([np.cos(t), np.sin(t), 0 * t], -1), atol=1e-12)
    np.testing.assert_allclose(R[:, 1], np.tile([0, 0, 1.0], (6, 1)), atol=1e-12)
    # leveret's pixel grid is left-handed seen from the source (e x z = -d): det R = -1
    np.testing.assert_allclose(np.linalg.det(R), -1.0)
    _check_decomposition(messy(rng))


def test_decompose_right_handed_grid_gives_a_rotation():
    g = circular([0.2, 1.3])
    P = np.array(g.matrices)
    P[:, 1] = (NR - 1) * P[:, 2] - P[:, 1]  # rows counted downwards: v' = NR - 1 - v
    flipped = ConeGeometry(P, NR, NC, pixel_size=(DU, DV))
    _, R, _ = _check_decomposition(flipped)
    np.testing.assert_allclose(np.linalg.det(R), 1.0)


def test_normalised_sets_w_to_one_at_the_origin(rng):
    g = messy(rng)
    scaled = ConeGeometry(g.matrices * rng.uniform(0.1, 10, (g.n_views, 1, 1)), NR, NC)
    n = scaled.normalised()
    np.testing.assert_allclose(n.matrices[:, 2, 3], 1.0)
    assert_same_projection(scaled, n, random_points(rng))
    np.testing.assert_allclose(scaled.depth(random_points(rng)).shape, (g.n_views, 50))
    with pytest.raises(ValueError, match="matrices"):
        ConeGeometry(-g.matrices, NR, NC).normalised()


# -- RabbitCT --------------------------------------------------------------------------
def test_rabbitct_column_major_layout_round_trip(rng):
    data = rng.normal(size=(4, 12))
    data[:, [0, 4, 8]] += 10.0  # keep M well conditioned
    g = ConeGeometry.from_rabbitct(data, 960, 1248)
    for n in range(4):
        for r in range(3):
            for c in range(4):
                assert g.matrices[n, r, c] == data[n, 3 * c + r]
    assert np.array_equal(g.rabbitct_matrices(), data)
    flat = ConeGeometry.from_rabbitct(data.ravel(), 960, 1248)
    assert flat == g
    circ = circular([0.1, 2.0])
    again = ConeGeometry.from_rabbitct(circ.rabbitct_matrices(), NR, NC)
    assert np.array_equal(again.matrices, circ.matrices)


# -- ASTRA ---------------------------------------------------------------------------
def astra_project(vectors, n_rows, n_cols, X):
    """ASTRA's CConeVecProjectionGeometry3D (src/ConeVecProjectionGeometry3D.cpp):
    initializeAngles moves the given detector centre d to the corner
    fDetS = d - 0.5 n_rows v - 0.5 n_cols u; projectPoint measures the hit point
    from that corner in steps of u and v and subtracts 0.5 (corner -> pixel centre)."""
    cols, rows = [], []
    for src, d, u, v in vectors.reshape(-1, 4, 3):
        corner = d - 0.5 * n_rows * v - 0.5 * n_cols * u
        # src + lam (X - src) = corner + a u + b v
        A = np.stack([u, v, -(X - src)], axis=1)
        a, b, _ = np.linalg.solve(A, src - corner)
        cols.append(a - 0.5)
        rows.append(b - 0.5)
    return np.array(cols), np.array(rows)


def astra_cone_to_vec(angles, det_spacing_x, det_spacing_y, source_origin, origin_det):
    """ASTRA's documented 'cone' -> 'cone_vec' conversion (docs/geom3d.rst)."""
    vectors = np.zeros((len(angles), 12))
    for i, a in enumerate(angles):
        vectors[i, 0:3] = np.sin(a) * source_origin, -np.cos(a) * source_origin, 0
        vectors[i, 3:6] = -np.sin(a) * origin_det, np.cos(a) * origin_det, 0
        vectors[i, 6:9] = np.cos(a) * det_spacing_x, np.sin(a) * det_spacing_x, 0
        vectors[i, 9:12] = 0, 0, det_spacing_y
    return vectors


def test_circular_is_astras_cone_geometry():
    t = np.linspace(0, 2 * np.pi, 8, endpoint=False)
    np.testing.assert_allclose(circular(t).to_astra_vectors(), astra_cone_to_vec(t, DU, DV, SID, SDD - SID), atol=TOL)


def test_astra_vectors_round_trip_and_astras_formula(rng):
    g = messy(rng)
    vec = g.to_astra_vectors()
    assert vec.shape == (g.n_views, 12)
    back = ConeGeometry.from_astra_vectors(vec, NR, NC)
    X = random_points(rng)
    assert_same_projection(g, back, X)
    np.testing.assert_allclose(back.pixel_size, (DU, DV), rtol=1e-12)
    np.testing.assert_allclose(back.to_astra_vectors(), vec, atol=TOL)
    u, v, _ = g.project(X)
    for n in range(g.n_views):
        for k in range(0, len(X), 7):
            col, row = astra_project(vec[n], NR, NC, X[k])
            assert col[0] == pytest.approx(u[n, k], abs=TOL)
            assert row[0] == pytest.approx(v[n, k], abs=TOL)


def test_astra_vectors_need_a_pixel_size_and_any_pitch_projects_the_same(rng):
    g = messy(rng, 3)
    bare = g.replace(pixel_size=None)
    with pytest.raises(ValueError, match="pixel_size"):
        bare.to_astra_vectors()
    far = ConeGeometry.from_astra_vectors(bare.to_astra_vectors(pixel_size=(3.0, 2.5)), NR, NC)
    assert_same_projection(g, far, random_points(rng))
    np.testing.assert_allclose(far.source_detector_distance(), 2 * g.source_detector_distance(), rtol=1e-12)


# -- TIGRE -------------------------------------------------------------------------------
def tigre_project(geo, angles, X):
    """Column and row, in TIGRE's Python projection array (n, nV, nU), of world point X.

    Transcribed from CERN/TIGRE: Python/tigre/utilities/cuda_interface/_types.pxd
    (nDetecU = nDetector[1], offDetecU = offDetector[i][1], dRoll = rotDetector[i][2],
    dPitch = [1], dYaw = [0], offOrigX = offOrigin[i][2], nVoxelX = nVoxel[2]) and
    Common/CUDA/Siddon_projection.cu (computeDeltas_Siddon, rollPitchYaw, eulerZYZ;
    kernelPixelDetector: pixelV = nDetecV - v - 1, idx = v nDetecU + u in Python).
    """
    n = len(angles)
    per = lambda name, k, default: np.broadcast_to(
        np.asarray(geo.get(name, default), float), (n,) if k is None else (n, k)
    )
    DSO, DSD, COR = per("DSO", None, 0), per("DSD", None, 0), per("COR", None, 0.0)
    offDet, rotDet, offOrig = (
        per("offDetector", 2, (0, 0)),
        per("rotDetector", 3, (0, 0, 0)),
        per("offOrigin", 3, (0, 0, 0)),
    )
    nV, nU = [int(x) for x in geo["nDetector"]]
    dV, dU = [float(x) for x in geo["dDetector"]]
    sVoxel = np.asarray(geo["sVoxel"], float)[::-1]  # (X, Y, Z)
    dVoxel = np.asarray(geo["dVoxel"], float)[::-1]
    cols, rows = [], []
    for i, (alpha, theta, psi) in enumerate(
        np.asarray(angles, float).reshape(n, -1) if np.ndim(angles) == 2 else [(a, 0.0, 0.0) for a in angles]
    ):
        roll, pitch, yaw = rotDet[i][2], rotDet[i][1], rotDet[i][0]

        def roll_pitch_yaw(p):
            x, y, z = p
            cr, sr, cp, sp, cy, sy = np.cos(roll), np.sin(roll), np.cos(pitch), np.sin(pitch), np.cos(yaw), np.sin(yaw)
            return np.array(
                [
                    cr * cp * x + (cr * sp * sy - sr * cy) * y + (cr * sp * cy + sr * sy) * z,
                    sr * cp * x + (sr * sp * sy + cr * cy) * y + (sr * sp * cy - cr * sy) * z,
                    -sp * x + cp * sy * y + cp * cy * z,
                ]
            )

        def euler_zyz(p):
            x, y, z = p
            ca, sa, ct, st, cs, ss = (
                np.cos(alpha),
                np.sin(alpha),
                np.cos(theta),
                np.sin(theta),
                np.cos(psi),
                np.sin(psi),
            )
            return np.array(
                [
                    (ca * ct * cs - sa * ss) * x + (-ca * ct * ss - sa * cs) * y + ca * st * z,
                    (sa * ct * cs + ca * ss) * x + (-sa * ct * ss + ca * cs) * y + sa * st * z,
                    -st * cs * x + st * ss * y + ct * z,
                ]
            )

        S = np.array([DSO[i], 0.0, 0.0])
        pts = [
            np.array([-(DSD[i] - DSO[i]), dU * (pu - nU / 2 + 0.5), dV * (nV / 2 - 0.5 - pv)])
            for pu, pv in [(0, 0), (1, 0), (0, 1)]
        ]  # P, Pu0, Pv0
        out = []
        for p in pts:
            p = p.copy()
            p[0] = 0.0
            p = roll_pitch_yaw(p)
            p[0] -= DSD[i] - DSO[i]
            p[1] += offDet[i][1]
            p[2] += offDet[i][0]
            out.append(euler_zyz(p))
        S = euler_zyz(S)
        off = np.array([offOrig[i][2], offOrig[i][1], offOrig[i][0]])
        cor = np.array([-COR[i] * np.sin(alpha) / dVoxel[0], COR[i] * np.cos(alpha) / dVoxel[1], 0.0])
        to_index = lambda p: (p - off + sVoxel / 2) / dVoxel + cor
        P, Pu0, Pv0 = (to_index(p) for p in out)
        S = to_index(S)
        Xv = (np.asarray(X, float) - off + sVoxel / 2) / dVoxel  # the same map for the point
        deltaU, deltaV = Pu0 - P, Pv0 - P
        # S + lam (Xv - S) = P + pixelU deltaU + pixelV deltaV
        pu, pv, _ = np.linalg.solve(np.stack([deltaU, deltaV, -(Xv - S)], axis=1), S - P)
        cols.append(pu)
        rows.append(nV - 1 - pv)
    return np.array(cols), np.array(rows)


def tigre_geo(rng, n):
    return {
        "mode": "cone",
        "DSO": 600 + rng.normal(0, 5, n),
        "DSD": 950.0,
        "nDetector": np.array([NR, NC]),
        "dDetector": np.array([DV, DU]),
        "sDetector": np.array([NR * DV, NC * DU]),
        "nVoxel": np.array([10, 12, 14]),
        "dVoxel": np.array([2.0, 1.5, 1.0]),
        "sVoxel": np.array([20.0, 18.0, 14.0]),
        "offOrigin": np.array([3.0, -4.0, 5.0]),
        "offDetector": rng.normal(0, 3, (n, 2)),
        "rotDetector": rng.normal(0, 0.05, (n, 3)),
        "COR": rng.normal(0, 1.0, n),
    }


def test_from_tigre_matches_tigres_formula(rng):
    n = 5
    geo = tigre_geo(rng, n)
    alpha = np.linspace(0, 2 * np.pi, n, endpoint=False)
    g = ConeGeometry.from_tigre(geo, alpha)
    np.testing.assert_allclose(g.angles, alpha + np.pi / 2)
    assert g.pixel_size == (DU, DV)
    X = random_points(rng, 6, 10.0) + [5.0, -4.0, 3.0]
    u, v, _ = g.project(X)
    for k, x in enumerate(X):
        cols, rows = tigre_project(geo, alpha, x)
        np.testing.assert_allclose(u[:, k], cols, atol=TOL)
        np.testing.assert_allclose(v[:, k], rows, atol=TOL)
    # Euler angles theta, psi too (TIGRE's arbitrary-axis rotation)
    ang3 = np.stack([alpha, rng.normal(0, 0.1, n), rng.normal(0, 0.1, n)], axis=1)
    g3 = ConeGeometry.from_tigre(geo, ang3)
    assert g3.angles is None
    u, v, _ = g3.project(X)
    for k, x in enumerate(X):
        cols, rows = tigre_project(geo, ang3, x)
        np.testing.assert_allclose(u[:, k], cols, atol=TOL)
        np.testing.assert_allclose(v[:, k], rows, atol=TOL)
    vol = ConeGeometry.tigre_volume(geo)
    assert vol == VolumeGeometry((10, 12, 14), (2.0, 1.5, 1.0), (3.0, -4.0, 5.0))


def test_to_tigre_of_a_circular_scan_reads_directly():
    t = np.linspace(0, 2 * np.pi, 6, endpoint=False)
    g = circular(t, det_offset=(2.0, -1.0), det_tilt=(0.01, -0.02, 0.03))
    vol = VolumeGeometry((8, 9, 10), 0.5, center=(1.0, 2.0, 3.0))
    geo = g.to_tigre(vol)
    assert geo["DSO"] == pytest.approx(SID) and geo["DSD"] == pytest.approx(SDD)
    np.testing.assert_allclose(geo["angles"], t - np.pi / 2, atol=1e-12)
    np.testing.assert_allclose(geo["offDetector"], [-1.0, 2.0], atol=TOL)
    np.testing.assert_allclose(geo["rotDetector"], [0.01, -0.02, 0.03], atol=1e-12)
    np.testing.assert_array_equal(geo["nDetector"], [NR, NC])
    np.testing.assert_allclose(geo["dDetector"], [DV, DU])
    np.testing.assert_array_equal(geo["nVoxel"], [8, 9, 10])
    np.testing.assert_allclose(geo["offOrigin"], [1.0, 2.0, 3.0])
    assert geo["mode"] == "cone" and geo["COR"] == 0.0


def test_to_tigre_of_any_scan_matches_tigres_formula_and_round_trips(rng):
    g = messy(rng)
    vol = VolumeGeometry((8, 9, 10), (1.0, 0.5, 0.75), center=(1.0, -2.0, 3.0))
    geo = g.to_tigre(vol)
    X = random_points(rng, 5, 10.0)
    u, v, _ = g.project(X)
    for k, x in enumerate(X):
        cols, rows = tigre_project(geo, geo["angles"], x)
        np.testing.assert_allclose(u[:, k], cols, atol=TOL)
        np.testing.assert_allclose(v[:, k], rows, atol=TOL)
    back = ConeGeometry.from_tigre(geo)
    assert_same_projection(g, back, random_points(rng), atol=TOL)
    assert ConeGeometry.tigre_volume(geo) == vol


def test_to_tigre_rejects_skewed_pixels():
    g = circular([0.0, 1.0])
    P = np.array(g.matrices)
    P[:, 0] += 0.3 * P[:, 1]  # columns lean along the rows
    with pytest.raises(ValueError, match="perpendicular"):
        ConeGeometry(P, NR, NC, pixel_size=(DU, DV)).to_tigre()


# -- validation, immutability, presentation --------------------------------------------------
def _good():
    return np.array(circular([0.0, 1.0]).matrices)


def _singular():
    P = _good()
    P[0, 2, :3] = P[0, 0, :3]
    return P


def _nan():
    P = _good()
    P[1, 0, 0] = np.nan
    return P


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"matrices": np.zeros((2, 3, 3))}, "matrices: expected shape"),
        ({"matrices": np.zeros((0, 3, 4))}, "matrices: expected at least one"),
        ({"matrices": _singular()}, r"matrices\[0\]: expected a non-singular"),
        ({"matrices": np.zeros((1, 3, 4))}, r"matrices\[0\]"),
        ({"matrices": _nan()}, r"matrices\[1\]: expected finite"),
        ({"n_rows": 0}, "n_rows"),
        ({"n_cols": -3}, "n_cols"),
        ({"n_rows": 2.5}, "n_rows"),
        ({"pixel_size": -1.0}, "pixel_size"),
        ({"pixel_size": (1.0, 2.0, 3.0)}, "pixel_size"),
        ({"angles": [0.0]}, "angles"),
    ],
)
def test_constructor_validation(kwargs, match):
    args = {"matrices": _good(), "n_rows": NR, "n_cols": NC, **kwargs}
    with pytest.raises(ValueError, match=match):
        ConeGeometry(args.pop("matrices"), args.pop("n_rows"), args.pop("n_cols"), **args)


def test_matrices_that_are_not_numbers_are_a_type_error():
    with pytest.raises(TypeError, match="matrices"):
        ConeGeometry("abc", NR, NC)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"angles": []}, "angles"),
        ({"sid": -1.0}, "sid"),
        ({"sdd": [800.0, 900.0]}, "sdd"),
        ({"pixel_size": 0.0}, "pixel_size"),
        ({"row_pixel_size": np.nan}, "row_pixel_size"),
        ({"det_offset": (1.0, 2.0, 3.0)}, "det_offset"),
        ({"det_tilt": (0.0, np.inf, 0.0)}, "det_tilt"),
        ({"source_offset": np.zeros((4, 2))}, "source_offset"),
        ({"perturbation": np.zeros((3, 5))}, "perturbation"),
    ],
)
def test_circular_validation(kwargs, match):
    args = {"angles": [0.0, 1.0, 2.0], "sid": SID, "sdd": SDD, "n_rows": NR, "n_cols": NC, "pixel_size": DU, **kwargs}
    with pytest.raises(ValueError, match=match):
        ConeGeometry.circular(**args)


def test_conversion_validation():
    with pytest.raises(ValueError, match="data"):
        ConeGeometry.from_rabbitct(np.ones(13), NR, NC)
    with pytest.raises(ValueError, match="vectors"):
        ConeGeometry.from_astra_vectors(np.ones((3, 11)), NR, NC)
    flat = astra_cone_to_vec([0.0], DU, DV, SID, SDD - SID)
    flat[0, 0:3] = flat[0, 3:6]  # source on the detector
    with pytest.raises(ValueError, match=r"vectors\[0\]"):
        ConeGeometry.from_astra_vectors(flat, NR, NC)
    with pytest.raises(ValueError, match="pixel_size"):
        circular([0.0]).replace(pixel_size=None).source_detector_distance()
    with pytest.raises(ValueError, match="mode"):
        ConeGeometry.from_tigre({"mode": "parallel"}, [0.0])
    with pytest.raises(ValueError, match="DSO"):
        ConeGeometry.from_tigre({"nDetector": [2, 2], "dDetector": [1, 1], "DSD": 5.0}, [0.0])
    with pytest.raises(ValueError, match="points"):
        circular([0.0]).project(np.zeros((4, 2)))


def test_immutable_comparable_replaceable():
    g = circular([0.0, 1.0])
    with pytest.raises(ValueError):
        g.matrices[0, 0, 0] = 1.0
    with pytest.raises(ValueError):
        g.angles[0] = 1.0
    with pytest.raises(AttributeError):
        g.n_rows = 3
    assert g == circular([0.0, 1.0]) and hash(g) == hash(circular([0.0, 1.0]))
    h = g.replace(n_rows=10, pixel_size=2.0)
    assert h.n_rows == 10 and h.pixel_size == (2.0, 2.0) and h != g
    one = ConeGeometry(g.matrices[0], NR, NC)
    assert one.n_views == 1 and one.projection_shape == (1, NR, NC)
    r = repr(g)
    assert "2 views" in r and f"{NR} rows x {NC} cols" in r and "source-detector 800" in r
    assert "source-origin 500" in r


def test_plot_draws_a_3d_scene(tmp_path, rng):
    from mpl_toolkits.mplot3d import Axes3D

    g = messy(rng, 12)
    ax = g.plot(VolumeGeometry((20, 30, 30), 2.0), n_views=4)
    assert isinstance(ax, Axes3D)
    assert len(ax.lines) >= 5 and len(ax.collections) >= 8
    ax.figure.savefig(tmp_path / "cone.png", dpi=60)
    assert (tmp_path / "cone.png").stat().st_size > 1000
    bare = ConeGeometry(g.matrices, NR, NC)  # no pitch: detectors at 2x the origin depth
    ax = bare.plot()
    ax.figure.savefig(tmp_path / "bare.png", dpi=60)
    assert len(ax.collections) > 0
