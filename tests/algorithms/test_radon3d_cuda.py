"""The 3D Radon transform on CUDA against the CPU (marked gpu; run with `pytest -m gpu`).

Reference and bounds. The CPU kernels compute sample coordinates in float64;
the GPU's float32 kernel computes them in float32 relative to a float64
origin per 32 x 8 x 4 tile (|error| of a few 1e-6 samples), so float32 GPU
results are compared with the float64 CPU reference on the same
float32-rounded inputs, to 1e-5 of the largest value (a NumPy emulation of
the kernel's arithmetic gave 1.5e-6 to 2e-6 on random data and 3e-7 on
balls). float64 GPU results equal the float64 CPU ones to 1e-12. Outputs are
poisoned (NaN) before each kernel run, so an unwritten voxel fails.

Phase 2 fallbacks: the global-memory back-projection (float64 coordinates;
windows too wide to stage, or wider than MAX_WINDOW_F32 in float32) runs on
every kernel case beside the shared one and is chosen automatically for
coarse voxels; the forward transform's global atomics run past the shared
histogram's 12288 float32 / 6144 float64 samples. Their host builds
(tests/cuda/test_radon3d_host.py) and the planning logic
(tests/algorithms/test_radon3d_kernel_mirror.py) are checked without a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from leveret import RadonGeometry, VolumeGeometry, radon3d_fbp, radon3d_forward
from leveret.algorithms.radon3d import TwoStagePlan
from leveret.cpu import radon3d as cpu
from leveret.phantom import ball

pytestmark = pytest.mark.gpu

ODD_VOL = VolumeGeometry((17, 23, 37), (0.05, 0.04, 0.045), center=(0.02, -0.03, 0.01))
TOL = {np.float32: 1e-5, np.float64: 1e-12}


def rel(a, b) -> float:
    """max |a - b| / max |b|, on the host, NaN-aware (a NaN anywhere fails)."""
    import cupy

    a = cupy.asnumpy(a).astype(np.float64)
    b = cupy.asnumpy(b).astype(np.float64)
    if not np.all(np.isfinite(a)):
        return np.inf
    return float(np.abs(a - b).max() / np.abs(b).max())


def _radius(volume):
    z, y, x = (volume.coordinates(a) for a in "zyx")
    return np.sqrt(x[None, None, :] ** 2 + y[None, :, None] ** 2 + z[:, None, None] ** 2)


# -- the kernels ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["shared", "global"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "vol",
    [ODD_VOL, VolumeGeometry((5, 3, 70), 0.02), VolumeGeometry((33, 9, 1), (0.03, 0.05, 0.02))],
    ids=["odd-offcentre", "thin", "one-column"],
)
def test_backproject_kernel_equals_cpu(rng, dtype, vol, path):
    """Random filtered projections (fresh each run), odd sizes, poisoned output;
    the shared-memory kernel and the global-memory fallback."""
    import cupy

    from leveret.cuda import radon3d as gpu

    g = RadonGeometry.uniform(208, 61, spacing=0.03)
    table = cpu.sample_table(g.directions, g.n_samples, g.spacing, vol)
    proj = rng.standard_normal(g.projection_shape).astype(dtype)
    ref = cpu.backproject(proj.astype(np.float64), table, np.empty(vol.shape))
    out = cupy.full(vol.shape, np.nan, dtype)
    gpu.backproject(cupy.asarray(proj), table, out, zpt=4, path=path)
    assert rel(out, ref) < TOL[dtype]
    # zpt=1 is the same sum; slabs (b_offset) give the same voxels.
    out1 = cupy.full(vol.shape, np.nan, dtype)
    gpu.backproject(cupy.asarray(proj), table, out1, zpt=1, path=path)
    assert rel(out1, ref) < TOL[dtype]
    k = vol.nz // 2
    slab = cupy.full((vol.nz - k,) + vol.shape[1:], np.nan, dtype)
    gpu.backproject(cupy.asarray(proj), table, slab, zpt=4, b_offset=k, path=path)
    assert rel(slab, ref[k:]) < TOL[dtype]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dx", [0.24, 6.0], ids=["wide-window", "window-beyond-shared-memory"])
def test_backproject_falls_back_to_global_memory(rng, dtype, dx):
    """Voxels 8 and 200 times the sample pitch: windows of 259 samples (float32:
    past MAX_WINDOW_F32) and 6372 (past shared memory in both precisions) run
    the global kernel under path="auto" and still match the CPU."""
    import cupy

    from leveret.cuda import radon3d as gpu

    vol = VolumeGeometry((8, 16, 40), dx, center=(0.1 * dx, -0.2 * dx, 0.3 * dx))
    half = 0.5 * dx * np.sqrt(8**2 + 16**2 + 40**2)
    g = RadonGeometry.uniform(100, int(2 * half / 0.03) + 5, spacing=0.03)
    table = cpu.sample_table(g.directions, g.n_samples, g.spacing, vol)
    plan = gpu.plan_backprojection(table, 4, dtype, g.n_dirs)
    assert plan.path == ("shared" if (dtype, dx) == (np.float64, 0.24) else "global")
    proj = rng.standard_normal(g.projection_shape).astype(dtype)
    ref = cpu.backproject(proj.astype(np.float64), table, np.empty(vol.shape))
    out = cupy.full(vol.shape, np.nan, dtype)
    gpu.backproject(cupy.asarray(proj), table, out)
    assert rel(out, ref) < TOL[dtype]


def _fft_rounding_spread(p, g, vol) -> float:
    """How much the float64 FBP image moves when the filter's FFT is computed by
    another, equally valid algorithm: scipy's real FFT (what the CPU path uses)
    against NumPy's complex FFT of the same zero-padded rows, both images
    back-projected on the CPU; max |difference| / max |image|."""
    import math

    from leveret.algorithms import radon3d as alg

    response = alg.second_derivative_response(g.n_samples, spacing=g.spacing)
    scale = -(2.0 if g.hemisphere else 1.0) / (8.0 * math.pi**2)
    row_scale = scale * alg._direction_weights("auto", g)
    n_pad = 2 * (response.size - 1)
    real = alg.filter_projections(p, response, row_scale, np.float64)
    spec = np.fft.fft(p, n=n_pad, axis=-1)[:, : response.size] * response
    whole = np.concatenate([spec, np.conj(spec[:, -2:0:-1])], axis=1)
    other = np.ascontiguousarray(np.fft.ifft(whole, axis=-1).real[:, : g.n_samples] * row_scale[:, None])
    table = cpu.sample_table(g.directions, g.n_samples, g.spacing, vol)
    a = cpu.backproject(real, table, np.empty(vol.shape))
    b = cpu.backproject(other, table, np.empty(vol.shape))
    return float(np.abs(a - b).max() / np.abs(a).max())


@pytest.mark.parametrize("precision, dtype", [("float32", np.float32), ("float64", np.float64)])
def test_fbp_with_coarse_voxels_on_gpu(precision, dtype):
    """radon3d_fbp with voxels 100 x the sample pitch (windows of ~3200 samples:
    past shared memory in float64, past MAX_WINDOW_F32 in float32; stage 2 of
    the two-stage method likewise): the GPU equals the CPU, both methods.

    float64 bound: the filter's FFT rounding, amplified by the second
    derivative at this fine pitch (gain (pi / 0.01)^2), moves the image by
    ~1e-12 here: another valid FFT algorithm on the CPU moves it by 8.9e-13,
    cuFFT (H200, 2026-11-22) by 2.96e-12, while the back-projection kernels
    themselves equal the CPU's to 1e-12 (the kernel and fallback tests). So
    float64 is held to 10x the measured CPU spread (at least 1e-12)."""
    from leveret.cuda import radon3d as gpu

    g = RadonGeometry.grid(10, 20, 3600, spacing=0.01)
    vol = VolumeGeometry((9, 10, 11), 1.0, center=(0.4, -0.2, 0.6))
    p = ball(6.0, center=(0.2, 0.4, -0.6)).project_radon(g)
    table = cpu.sample_table(g.directions, g.n_samples, g.spacing, vol)
    assert gpu.plan_backprojection(table, 4, dtype, g.n_dirs).path == "global"
    tol = TOL[dtype] if dtype == np.float32 else max(TOL[dtype], 10 * _fft_rounding_spread(p, g, vol))
    for method in ("single-stage", "two-stage"):
        ref = radon3d_fbp(p, g, vol, backend="cpu", precision="float64", method=method)
        got = radon3d_fbp(p, g, vol, backend="cuda", precision=precision, method=method)
        assert got.dtype == dtype and rel(got, ref) < tol


@pytest.mark.parametrize("path", ["shared", "global"])
def test_backproject_kernel_accumulates_and_handles_voxels_off_the_samples(rng, path):
    """Voxels whose planes miss the sampled range get exactly 0 from those directions."""
    import cupy

    from leveret.cuda import radon3d as gpu

    # Directions near +x (|n_x| > 0.95), samples |t| <= 0.04, x up to +-0.44:
    # voxels with |x| > ~0.07 see no sample at all.
    theta = np.full(7, np.pi / 2) + np.linspace(-0.1, 0.1, 7)
    g = RadonGeometry.from_angles(theta, np.linspace(-0.2, 0.2, 7), 9, spacing=0.01)
    vol = VolumeGeometry((6, 7, 45), 0.02)
    table = cpu.sample_table(g.directions, g.n_samples, g.spacing, vol)
    proj = rng.standard_normal(g.projection_shape)
    ref = cpu.backproject(proj, table, np.empty(vol.shape))
    out = cupy.full(vol.shape, np.nan)
    gpu.backproject(cupy.asarray(proj), table, out, path=path)
    assert rel(out, ref) < 1e-12
    assert np.count_nonzero(ref == 0) > 0 and np.all(cupy.asnumpy(out)[ref == 0] == 0)
    gpu.backproject(cupy.asarray(proj), table, out, accumulate=True, path=path)
    assert rel(out, 2 * ref) < 1e-12


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_kernel_equals_cpu(rng, dtype):
    import cupy

    g = RadonGeometry.uniform(97, 71, spacing=0.03)
    x = rng.standard_normal(ODD_VOL.shape).astype(dtype)
    ref = radon3d_forward(x.astype(np.float64), g, ODD_VOL, backend="cpu")
    got = radon3d_forward(cupy.asarray(x), g, ODD_VOL, backend="cuda")
    assert isinstance(got, cupy.ndarray) and got.dtype == dtype
    assert rel(got, ref) < TOL[dtype]
    host = radon3d_forward(x, g, ODD_VOL, backend="cuda")  # NumPy in, NumPy out
    assert isinstance(host, np.ndarray) and rel(host, ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_kernel_global_atomics_equal_cpu(rng, dtype):
    """The global-atomics forward kernel, asked for on a short geometry
    (output poisoned: the launcher must zero it)."""
    import cupy

    from leveret.cuda import radon3d as gpu

    g = RadonGeometry.uniform(97, 71, spacing=0.03)
    table = cpu.sample_table(g.directions, g.n_samples, g.spacing, ODD_VOL)
    x = rng.standard_normal(ODD_VOL.shape).astype(dtype)
    ref = cpu.forward(x.astype(np.float64), table, np.empty(g.projection_shape))
    out = cupy.full(g.projection_shape, np.nan, dtype)
    gpu.forward(cupy.asarray(x), table, out, path="global")
    assert rel(out, ref) < TOL[dtype]


@pytest.mark.parametrize("dtype, n_samples", [(np.float32, 12289), (np.float32, 20001), (np.float64, 6145)])
def test_forward_of_long_projections_on_gpu(rng, dtype, n_samples):
    """More samples than the shared histogram holds (12288 float32, 6144
    float64): radon3d_forward takes the global atomics and equals the CPU."""
    from leveret.cuda import radon3d as gpu

    assert gpu.plan_forward(n_samples, dtype) == "global"
    g = RadonGeometry.uniform(40, n_samples, spacing=2.4 / n_samples)  # covers ODD_VOL
    x = rng.standard_normal(ODD_VOL.shape).astype(dtype)
    ref = radon3d_forward(x.astype(np.float64), g, ODD_VOL, backend="cpu")
    got = radon3d_forward(x, g, ODD_VOL, backend="cuda")
    assert got.dtype == dtype and rel(got, ref) < TOL[dtype]


def test_forward_of_ball_matches_closed_form_on_gpu():
    g = RadonGeometry.uniform(40, 64, spacing=0.02)
    vol = VolumeGeometry((48, 48, 48), 1.0 / 48)
    p = radon3d_forward(ball(0.4).rasterize(vol, supersampling=2), g, vol, backend="cuda")
    exact = ball(0.4).project_radon(g)
    assert np.abs(p - exact).max() < 0.03 * exact.max()


# -- radon3d_fbp -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ball2000():
    g = RadonGeometry.uniform(2000, 128, spacing=0.01)
    return g, ball(0.5, center=(0.03, 0.0, -0.02)).project_radon(g)


@pytest.mark.parametrize("precision, dtype", [("float32", np.float32), ("float64", np.float64)])
def test_fbp_gpu_equals_cpu_on_a_ball(ball2000, precision, dtype):
    g, p = ball2000
    vol = VolumeGeometry((31, 32, 33), 1.0 / 32)
    ref = radon3d_fbp(p, g, vol, backend="cpu", precision="float64")
    got = radon3d_fbp(p, g, vol, backend="cuda", precision=precision)
    assert isinstance(got, np.ndarray) and got.dtype == dtype
    assert rel(got, ref) < TOL[dtype]


def test_fbp_ball_reconstructs_to_one_on_gpu(ball2000):
    """2000+ uniform directions: 1 within 2 % in the interior (the CPU measures 0.12 %)."""
    g, _ = ball2000
    p = ball(0.5).project_radon(g)
    vol = VolumeGeometry((32, 32, 32), 1.0 / 32)
    rec = radon3d_fbp(p, g, vol, backend="cuda")
    inside = rec[_radius(vol) < 0.4]
    assert np.abs(inside - 1).max() < 0.02
    assert abs(inside.mean() - 1) < 2e-3


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("method", ["single-stage", "two-stage"])
@pytest.mark.parametrize("result", ["pinned", "pipeline"])
def test_numpy_in_equals_cupy_in(precision, method, result, monkeypatch):
    """The streamed NumPy paths (slabs copied out while later slabs are computed:
    into a pinned result, or through leveret.cuda.pipeline for results too large to
    pin) give the CuPy path's voxels, bit for bit."""
    import cupy

    import leveret.algorithms.radon3d as mod

    if result == "pipeline":
        monkeypatch.setattr(mod, "PINNED_RESULT_MAX_BYTES", 0)
    g = RadonGeometry.grid(16, 32, 96, spacing=0.012)
    p = ball(0.4, center=(0.02, -0.01, 0.03)).project_radon(g)
    vol = VolumeGeometry((45, 38, 41), 0.02)
    t_host, t_dev = {}, {}
    host = radon3d_fbp(p, g, vol, backend="cuda", precision=precision, method=method, stats=t_host)
    dev = radon3d_fbp(cupy.asarray(p), g, vol, precision=precision, method=method, stats=t_dev)
    assert isinstance(host, np.ndarray) and isinstance(dev, cupy.ndarray)
    np.testing.assert_array_equal(host, cupy.asnumpy(dev))
    for t in (t_host, t_dev):
        assert set(t) == {"transfer_in", "filter", "backprojection", "transfer_out", "total"}
        assert all(v >= 0 for v in t.values()) and t["backprojection"] > 0
    assert t_dev["transfer_in"] == 0 and t_host["transfer_in"] > 0


@pytest.mark.parametrize("precision, dtype", [("float32", np.float32), ("float64", np.float64)])
def test_two_stage_gpu_equals_two_stage_cpu(precision, dtype):
    g = RadonGeometry.grid(24, 48, 128, spacing=0.01)
    p = ball(0.5, center=(0.02, 0.0, -0.03)).project_radon(g)
    vol = VolumeGeometry((19, 26, 29), (0.035, 0.03, 0.033), center=(0.01, 0.02, -0.02))
    ref = radon3d_fbp(p, g, vol, backend="cpu", precision="float64", method="two-stage")
    got = radon3d_fbp(p, g, vol, backend="cuda", precision=precision, method="two-stage")
    assert rel(got, ref) < TOL[dtype]


@pytest.mark.parametrize("path", ["shared", "global"])
def test_two_stage_stages_poisoned(rng, path):
    """Both stages' kernels write every plane sample and voxel (random planes, NaN-poisoned)."""
    import cupy

    from leveret.cuda import radon3d as gpu

    g = RadonGeometry.grid(7, 12, 40, spacing=0.03)
    vol = VolumeGeometry((9, 13, 11), 0.04)
    plan = TwoStagePlan(g, vol, oversampling=2)
    filt = rng.standard_normal(g.projection_shape)
    by_phi = np.ascontiguousarray(filt[plan.order]).reshape(plan.n_phi, plan.n_theta, -1)
    planes = cupy.full(plan.plane_shape, np.nan)
    gpu.backproject(
        cupy.asarray(by_phi),
        plan.table1,
        planes,
        proj_bstride=plan.n_theta * g.n_samples,
        table_bstride=plan.n_theta,
        zpt=1,
        path=path,
    )
    ref_planes = np.empty(plan.plane_shape)
    for j in range(plan.n_phi):
        cpu.backproject(by_phi[j], plan.table1[j * plan.n_theta : (j + 1) * plan.n_theta], ref_planes[j][None])
    assert rel(planes, ref_planes) < 1e-12
    out = cupy.full(vol.shape, np.nan)
    slices = cupy.ascontiguousarray(planes.transpose(1, 0, 2))
    gpu.backproject(slices, plan.table2, out, proj_bstride=plan.n_phi * plan.n_r, zpt=1, path=path)
    assert rel(out, plan.backproject_cpu(filt, np.empty(vol.shape))) < 1e-12


def test_bad_input_on_gpu():
    import cupy

    g = RadonGeometry.uniform(50, 32)
    p = cupy.zeros(g.projection_shape)
    p[3, 4] = cupy.nan
    with pytest.raises(ValueError, match=r"^projections: expected finite values.*, got 1 "):
        radon3d_fbp(p, g)
    with pytest.raises(ValueError, match="backend: 'cpu' was asked for but the input is a CuPy"):
        radon3d_fbp(cupy.zeros(g.projection_shape), g, backend="cpu")
    with pytest.raises(ValueError, match=r"projections: expected shape \(n_dirs, n_samples\)"):
        radon3d_fbp(cupy.zeros((50, 31)), g)
