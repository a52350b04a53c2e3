"""leveret.fbp on CUDA against the CPU reference (marked gpu; run with `pytest -m gpu`)."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.geometry import ParallelGeometry, VolumeGeometry

pytestmark = pytest.mark.gpu

# Texture (8-bit weights) against exact linear interpolation, relative 2-norm
# (docs/accuracy.md): FBP of white noise, the worst case since the ramp lifts
# the highest frequencies (measured 2.9e-3 to 3.0e-3 on an H200), and of phantoms.
TEXTURE_VS_EXACT_NOISE = 4e-3
TEXTURE_VS_EXACT_PHANTOM = 1e-3


@pytest.fixture(autouse=True)
def _texture_kernel(monkeypatch, tmp_path):
    """These tests check the texture kernel against the CPU's linear8; "auto"
    runs the exact ALU kernel where it fits, so here the rule answers the
    texture kernel, and no tuning cache is read (the defaults are tested in
    test_parallel_kernels_gpu.py)."""
    from leveret.operators import ParallelBackprojection

    monkeypatch.setenv("LEVERET_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ParallelBackprojection, "default_config", lambda self, n_slices: {"kernel": "texture"})


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def cpu_texture_mode(proj, g, vol=None, **kw):
    """The CPU FBP with the texture unit's weights: what the GPU must equal."""
    return leveret.fbp(proj, g, vol, backend="cpu", interpolation="linear8", **kw)


@pytest.mark.parametrize("n_slices", [1, 2, 5])
def test_cupy_in_cupy_out_equals_cpu(rng, n_slices):
    import cupy as cp

    g = ParallelGeometry(
        np.sort(rng.uniform(0, np.pi, 97)),
        63,
        n_rows=n_slices,
        det_spacing=0.9,
        center=30.2,
        axis_shift=rng.uniform(-1, 1, 97),
    )
    vol = VolumeGeometry((n_slices, 51, 58), voxel_size=(1.0, 0.8, 0.85))
    proj = rng.standard_normal(g.projection_shape).astype(np.float32)
    out = cp.full(vol.shape, cp.nan, cp.float32)
    got = leveret.fbp(cp.asarray(proj), g, vol, out=out)
    assert got is out and isinstance(got, cp.ndarray) and bool(cp.isfinite(got).all())
    assert rel(got.get(), cpu_texture_mode(proj, g, vol)) < 1e-5
    assert rel(got.get(), leveret.fbp(proj, g, vol, backend="cpu")) < TEXTURE_VS_EXACT_NOISE


def test_numpy_streamed_equals_device_and_phantom_bound(rng):
    import cupy as cp

    g = ParallelGeometry(np.linspace(0, np.pi, 360, endpoint=False), 128, n_rows=37, det_spacing=1 / 64)
    ph = phantom.shepp_logan_3d(radius=1.0)
    proj = ph.project(g).astype(np.float32)
    device = leveret.fbp(cp.asarray(proj), g).get()
    streamed = leveret.fbp(proj, g, slab_slices=4)  # 10 chunks through the pipeline
    planned = leveret.fbp(proj, g)
    assert isinstance(streamed, np.ndarray)
    # Same kernels; only cuFFT's batch sizes differ between the chunkings.
    assert rel(streamed, device) < 1e-6 and rel(planned, device) < 1e-6
    exact = leveret.fbp(proj, g, backend="cpu")
    assert rel(device, exact) < TEXTURE_VS_EXACT_PHANTOM
    assert rel(device, cpu_texture_mode(proj, g)) < 1e-5


def test_one_slice_from_numpy_in_angle_batches(rng):
    """A single chunk from host memory goes up in angle batches (here 4)."""
    import cupy as cp

    g = ParallelGeometry(
        np.sort(rng.uniform(0, np.pi, 1031)), 2048, det_spacing=0.5, axis_shift=rng.uniform(-1, 1, 1031)
    )
    sino = rng.standard_normal(g.projection_shape).astype(np.float32)
    vol = VolumeGeometry((97, 131), voxel_size=7.0)
    from_host = leveret.fbp(sino, g, vol)
    from_device = leveret.fbp(cp.asarray(sino), g, vol).get()
    assert rel(from_host, from_device) < 1e-6
    assert rel(from_host, cpu_texture_mode(sino, g, vol)) < 1e-5
    sino[500, 7] = np.nan
    with pytest.raises(ValueError, match=r"^projections: expected finite values.*, got 1 "):
        leveret.fbp(sino, g, vol)


def test_2d_nearest_and_filters(rng):
    import cupy as cp

    g = ParallelGeometry(np.linspace(0, np.pi, 180, endpoint=False), 96)
    sino = phantom.shepp_logan_ellipses(radius=40.0).project(g).astype(np.float32)
    for interpolation in ("nearest", "linear"):
        for filt in ("ram-lak", "hann"):
            got = leveret.fbp(cp.asarray(sino), g, filter=filt, interpolation=interpolation)
            assert got.shape == (96, 96)
            ref = leveret.fbp(sino, g, filter=filt, interpolation=interpolation, backend="cpu")
            bound = 1e-5 if interpolation == "nearest" else TEXTURE_VS_EXACT_PHANTOM
            assert rel(got.get(), ref) < bound


def test_disk_absolute_value_on_gpu():
    g = ParallelGeometry(np.linspace(0, np.pi, 720, endpoint=False), 256, det_spacing=2 / 256)
    rec = leveret.fbp(phantom.disk(0.6).project(g).astype(np.float32), g, backend="cuda")
    x = g.default_volume().coordinates("x")
    r = np.hypot(x[None, :], x[:, None])
    assert abs(rec[r < 0.5].mean() - 1) < 0.01


def test_streamed_non_finite_input_is_an_error():
    g = ParallelGeometry(np.linspace(0, np.pi, 20, endpoint=False), 16, n_rows=8)
    proj = np.ones(g.projection_shape, np.float32)
    proj[3, 5, 2] = np.inf
    with pytest.raises(ValueError, match=r"^projections: expected finite values.*, got 1 "):
        leveret.fbp(proj, g, backend="cuda", slab_slices=2)


def test_real_scan_gpu_equals_cpu(savu_scan):
    from leveret.preprocess import minus_log, normalize

    p = minus_log(normalize(savu_scan.projections, savu_scan.flat, savu_scan.dark))
    g = ParallelGeometry(savu_scan.angles, 160, n_rows=135, center=86.0)
    gpu = leveret.fbp(p, g, backend="cuda")
    assert rel(gpu, cpu_texture_mode(p, g)) < 1e-5
    assert rel(gpu, leveret.fbp(p, g, backend="cpu")) < TEXTURE_VS_EXACT_PHANTOM
