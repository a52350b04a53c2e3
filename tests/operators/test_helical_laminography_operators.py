"""The operators on helical and laminography geometries: Projector (ray-driven,
matched transpose) and ConeBackprojection (voxel-driven) on ConeGeometry.helical,
ConeGeometry.laminography and ParallelVecGeometry; SIRT and CGLS converge on them.
GPU variants (marked gpu) compare CUDA with the CPU."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.geometry import ConeGeometry, ParallelGeometry, ParallelVecGeometry, VolumeGeometry
from leveret.operators import ConeBackprojection, Projector

from cases import assert_close

VOLUME = VolumeGeometry((9, 12, 11), (1.1, 1.0, 0.9), center=(0.4, -0.3, 0.2))


def helical():
    t = np.arange(40) * 2 * np.pi / 16
    return ConeGeometry.helical(t, 6.0, sid=30, sdd=50, n_rows=8, n_cols=17, pixel_size=1.6)


def cone_laminography():
    return ConeGeometry.laminography(
        np.arange(12) * 2 * np.pi / 12, np.radians(35), sid=40, sdd=60, n_rows=14, n_cols=17, pixel_size=1.5
    )


def parallel_laminography(tilt=np.radians(50)):
    return ParallelVecGeometry.laminography(
        np.arange(13) * 2 * np.pi / 13, tilt, 13, 17, 1.2, row_pixel_size=1.1, center=8.3
    )


GEOMETRIES = {
    "helical": helical,
    "cone_laminography": cone_laminography,
    "parallel_laminography": parallel_laminography,
}


@pytest.mark.parametrize("model", ["siddon", "joseph"])
def test_vec_geometry_of_a_parallel_scan_projects_the_same(rng, model):
    """The same rays (origins equal to float64 rounding: the pixel positions are
    computed in another order), so the same operator."""
    pg = ParallelGeometry(
        np.linspace(0, np.pi, 7, endpoint=False), 19, 9, 1.3, 0.9, center=8.7, axis_shift=rng.normal(0, 0.3, 7)
    )
    A = Projector(pg, VOLUME, model=model, backend="cpu", precision="float64")
    B = Projector(ParallelVecGeometry.from_parallel(pg), VOLUME, model=model, backend="cpu", precision="float64")
    x = rng.standard_normal(VOLUME.shape)
    y = rng.standard_normal(pg.projection_shape)
    np.testing.assert_allclose(B(x), A(x), rtol=0, atol=1e-11 * np.abs(A(x)).max())
    np.testing.assert_allclose(B.T(y), A.T(y), rtol=0, atol=1e-11 * np.abs(A.T(y)).max())
    np.testing.assert_allclose(B.view_angles(), pg.angles, atol=1e-12)


@pytest.mark.parametrize("model", ["siddon", "joseph"])
@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_adjoint_identity(rng, name, model):
    g = GEOMETRIES[name]()
    A = Projector(g, VOLUME, model=model, backend="cpu", precision="float64")
    x = rng.standard_normal(VOLUME.shape)
    y = rng.standard_normal(g.projection_shape)
    ax, aty = A(x), A.T(y)
    assert np.abs(ax).max() > 0 and np.abs(aty).max() > 0  # the rays hit the volume
    lhs, rhs = np.vdot(ax, y), np.vdot(x, aty)
    assert abs(lhs - rhs) <= 1e-12 * np.linalg.norm(ax) * np.linalg.norm(y)


def test_laminography_line_integrals_match_the_exact_ones():
    g = ParallelVecGeometry.laminography(np.arange(8) * 2 * np.pi / 8, np.radians(60), 24, 32, 1.0)
    vol = VolumeGeometry((24, 32, 32), 1.0)
    ball = phantom.ball(8.0, center=(2.0, -1.0, 1.5))
    exact = ball.project(g)  # closed form along ParallelVecGeometry.pixel_rays
    assert exact.max() == pytest.approx(16.0, rel=0.01)
    A = Projector(g, vol, model="joseph", backend="cpu")
    traced = A(ball.rasterize(vol, supersampling=3).astype(np.float32))
    # a ball of radius 8 voxels: the traced sums differ from the chords at the rasterised edge only
    assert np.abs(traced - exact).mean() < 0.01 * exact.max()
    # every view sees the whole mass, centred where the ball's centre projects
    pixel_area = 1.0
    np.testing.assert_allclose(traced.sum(axis=(1, 2)) * pixel_area, ball.mass, rtol=0.01)
    u, v = g.project(np.array([2.0, -1.0, 1.5]))
    rows, cols = np.indices(traced.shape[1:])
    for n in range(g.n_views):
        w = traced[n] / traced[n].sum()
        assert (w * cols).sum() == pytest.approx(u[n], abs=0.05)
        assert (w * rows).sum() == pytest.approx(v[n], abs=0.05)


def test_cone_backprojection_of_a_parallel_vec_geometry_interpolates_along_the_rays(rng):
    """B(q)[voxel] = sum_n q_n at the voxel's (u, v) (bilinear, w = 1: no distance weight)."""
    g = parallel_laminography()
    q = rng.standard_normal(g.projection_shape).astype(np.float32)
    out = ConeBackprojection(g, VOLUME, backend="cpu")(q)
    k, j, i = np.meshgrid(*(np.arange(n) for n in VOLUME.shape), indexing="ij")
    pts = np.stack([VOLUME.coordinates("x")[i], VOLUME.coordinates("y")[j], VOLUME.coordinates("z")[k]], -1)
    u, v = g.project(pts.reshape(-1, 3))
    expected = np.zeros(pts.shape[:-1]).ravel()
    for n in range(g.n_views):
        from scipy.ndimage import map_coordinates

        expected += map_coordinates(q[n].astype(np.float64), [v[n], u[n]], order=1, mode="constant", cval=0.0)
    inside = ((u > 0) & (u < g.n_cols - 1) & (v > 0) & (v < g.n_rows - 1)).all(axis=0)
    assert inside.mean() > 0.5
    np.testing.assert_allclose(out.ravel()[inside], expected[inside], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_sirt_and_cgls_converge(rng, name):
    g = GEOMETRIES[name]()
    vol = VolumeGeometry((6, 8, 8), 1.2)
    A = Projector(g, vol, model="joseph", backend="cpu")
    truth = rng.uniform(0.0, 1.0, vol.shape).astype(np.float32)
    b = A(truth)
    residuals = {"sirt": [], "cgls": []}
    errors = {"sirt": [], "cgls": []}

    def track(method):
        def callback(x, info):
            residuals[method].append(info["residual"])
            errors[method].append(float(np.linalg.norm(x - truth) / np.linalg.norm(truth)))

        return callback

    leveret.sirt(b, A, 60, callback=track("sirt"))
    leveret.cgls(b, A, 30, callback=track("cgls"))
    for method, r in residuals.items():
        assert np.all(np.diff(r) <= 1e-6 * r[0]), method  # never increases
        assert r[-1] < 0.25 * r[0], method
        assert errors[method][-1] < errors[method][0], method
    assert residuals["cgls"][-1] < 0.02


# -- GPU ------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("model", ["siddon", "joseph"])
@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_gpu_projector_equals_cpu(rng, name, model, precision):
    import cupy as cp

    g = GEOMETRIES[name]()
    A = Projector(g, VOLUME, model=model, precision=precision, backend="cpu")
    G = Projector(g, VOLUME, model=model, precision=precision, backend="cuda")
    x = rng.standard_normal(VOLUME.shape).astype(precision)
    y = rng.standard_normal(g.projection_shape).astype(precision)
    tol = {"float32": 1e-5, "float64": 1e-12}[precision]
    assert_close(G(cp.asarray(x)), A(x), tol)
    assert_close(G.T(cp.asarray(y)), A.T(y), tol)
    assert_close(G(x), A(x), tol)  # NumPy in, NumPy out


@pytest.mark.gpu
@pytest.mark.parametrize(
    "kernel,mode,mirror",
    [
        ("texture", "linear", "linear8"),
        ("ray-hybrid", "linear", "linear8"),
        ("quad", "linear32", "linear32"),
        ("global", "linear32", "linear32"),
    ],
)
@pytest.mark.parametrize("name", ["parallel_laminography", "cone_laminography", "helical"])
def test_gpu_cone_backprojection_equals_its_cpu_mirror(rng, rel_mirror, name, kernel, mode, mirror):
    """The affine matrices of ParallelVecGeometry (w = 1) in every kernel, against the CPU's mirror."""
    import cupy as cp

    g = GEOMETRIES[name]()
    q = rng.standard_normal(g.projection_shape).astype(np.float32)
    cpu = ConeBackprojection(g, VOLUME, backend="cpu", interpolation=mirror, kernel=kernel)(q)
    gpu = ConeBackprojection(g, VOLUME, backend="cuda", interpolation=mode, kernel=kernel)(cp.asarray(q)).get()
    assert rel_mirror(gpu, cpu) < 1e-5
