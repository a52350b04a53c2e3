"""ray_weights.cu, the pixel weights of ``Projector(adjoint="unmatched")`` on
CUDA: its own source built for the CPU (one thread at a time over the launch
grid, rows strided as on the GPU) against the float64 NumPy weights the CPU
operator applies; on the GPU, the launcher against the same reference."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from leveret.cuda.ray_weights import BLOCK, view_frames
from leveret.geometry import ConeGeometry, VolumeGeometry
from leveret.operators import Projector
from leveret.operators.projector import weight_by_ray_length

from host_build import build_host_harness  # this folder is on sys.path (pytest's rootdir-relative import)


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build_host_harness(tmp_path_factory, "ray_weights")


def _case(rng, n_rows=7, n_cols=300):
    """An off-centre scan of a few views whose detector is wider than one block."""
    angles = np.linspace(0.0, 2 * np.pi, 5, endpoint=False)
    geometry = ConeGeometry.circular(angles, 400.0, 600.0, n_rows, n_cols, 0.8, det_offset=(3.1, -1.7))
    volume = VolumeGeometry((8, 16, 16), 2.0)
    A = Projector(geometry, volume, model="joseph", backend="cpu", adjoint="unmatched")
    y = rng.standard_normal(geometry.projection_shape).astype(np.float32)
    return A, y


def _reference(A, y):
    """The CPU operator's weights, in float64: y scale |M^-1 (c, r, 1)|."""
    return weight_by_ray_length(y, A._pixel_minv, A._pixel_scale, np.float64)


@pytest.mark.parametrize("grid_y", [1, 4, 35])
def test_host_build_equals_the_cpu_weights(lib, grid_y, rng):
    """Every pixel written once (output poisoned), whatever the rows of blocks
    (fewer than the rows: each block row strides): the float64 weights to
    float32 rounding."""
    A, y = _case(rng)
    frames = view_frames(A._pixel_minv, A._pixel_scale)
    out = np.full_like(y, np.nan)
    n_views, n_rows, n_cols = y.shape
    lib.run_ray_length_weight(
        y.ctypes.data_as(ctypes.c_void_p),
        out.ctypes.data_as(ctypes.c_void_p),
        frames.ctypes.data_as(ctypes.c_void_p),
        n_views,
        n_rows,
        n_cols,
        BLOCK,
        grid_y,
    )
    ref = _reference(A, y)
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, ref, rtol=2**-23, atol=0)


def test_frames_of_other_views_are_refused_before_any_launch():
    from leveret.cuda.ray_weights import weight_by_ray_length

    with pytest.raises(ValueError, match=r"frames: expected \(2, 10\), got \(3, 10\)"):
        weight_by_ray_length(np.zeros((2, 3, 4), np.float32), np.zeros((3, 10)))


@pytest.mark.gpu
def test_gpu_weights_equal_the_cpu_weights(rng):
    import cupy

    from leveret.cuda.ray_weights import weight_by_ray_length

    A, y = _case(rng, n_rows=70, n_cols=600)
    out = cupy.full(y.shape, cupy.nan, cupy.float32)
    weight_by_ray_length(cupy.asarray(y), view_frames(A._pixel_minv, A._pixel_scale), out=out)
    np.testing.assert_allclose(out.get(), _reference(A, y), rtol=2**-23, atol=0)
