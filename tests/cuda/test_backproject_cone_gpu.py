"""Kernel-level GPU tests of backproject_cone.cu through its launcher
(``CudaConeBackprojector``), each against the CPU mirror of the same plan
(``leveret.cpu.backproject_cone.backproject_gpu_mirror``). Operator-level
tests: tests/operators/test_cone_backprojection.py."""

from __future__ import annotations

import numpy as np
import pytest
from cases import rel, scrambled_scan, smooth_noise

from leveret.cpu.backproject_cone import backproject_gpu_mirror
from leveret.geometry import VolumeGeometry
from leveret.operators.cone import index_matrices
from leveret.cpu.cone_plan import DEPTH, fma_steps, kernel_matrices

pytestmark = pytest.mark.gpu

# Kernel against its CPU mirror, relative 2-norm (the texture kernels through
# conftest's rel_mirror): float32 rounding of coordinates and sums, ~8e-6 on
# smooth_noise for these skewed matrices (the summation order differs between
# passes), with a margin of ~1.25.
MIRROR_TOL = 1e-5
# Two plans of "ray" or "quad" compute every (voxel, view) term alike and differ
# only in how the per-pass float32 partial sums add up: measured <= 1.2e-7 on
# the CPU mirrors (each pass mirrored and accumulated as the kernel does, this
# test's case, 6 seeds, 1 / 7 / 124 views per pass), with a margin of 4.
PASS_ORDER_TOL = 5e-7


def mirror(bp, m, proj, shape):
    """What ``bp`` (a CudaConeBackprojector) computes, on the CPU, with the
    software views of its own plan."""
    software = bp.software_views(m, shape)
    out = np.zeros(shape, np.float32)
    return backproject_gpu_mirror(
        proj,
        kernel_matrices(m, software).reshape(-1, 3, 4),
        out,
        depth=DEPTH,
        software=software,
        fma_steps=fma_steps(bp.kernel, software),
    )


@pytest.mark.parametrize("kernel", ["ray", "quad", "ray-hybrid"])
def test_ray_kernels_match_the_mirror_of_every_plan(rng, rel_mirror, kernel):
    """Any views per pass, lanes along the rays or along x, and a detector
    too small for the volume (most samples clamped into the zero border):
    each plan gives its own mirror's sums up to float32 rounding. (For
    "ray-hybrid" the plan decides which views are exact, so plans differ
    from each other by the texture unit's weights, not by rounding: hence one
    mirror per plan.)"""
    import cupy as cp

    from leveret.cuda.backproject_cone import CudaConeBackprojector

    g, matrices = scrambled_scan(rng, n_views=41, n_rows=9, n_cols=13)
    vol = VolumeGeometry((19, 33, 31), voxel_size=1.5)
    m = index_matrices(matrices, vol)
    host = smooth_noise(rng, g.projection_shape)
    proj = cp.asarray(host)
    results = []
    for options in ({}, {"views_per_pass": 1}, {"views_per_pass": 7}, {"views_per_pass": 1000}, {"aligned": False}):
        bp = CudaConeBackprojector(kernel, **options)
        out = cp.full(vol.shape, cp.nan, cp.float32)  # poison: unwritten voxels show
        got = bp(proj, m, out).get()
        assert np.isfinite(got).all()
        assert rel_mirror(got, mirror(bp, m, host, vol.shape)) < MIRROR_TOL, options
        results.append(got)
    if kernel != "ray-hybrid":
        for got in results[1:]:
            assert rel(got, results[0]) < PASS_ORDER_TOL


@pytest.mark.parametrize("kernel", ["texture", "global", "ray", "quad", "ray-hybrid"])
def test_skipping_off_detector_samples_drops_no_contribution(rng, rel_mirror, kernel):
    """Every kernel skips a thread's K samples of a view when they all miss
    the detector (segment_visible). The detector is too small for the
    volume, so most segments miss it on some side and many straddle an
    edge, and the projections are zero except in their outermost ring of
    pixels: every contribution comes from a sample near an edge, so a
    segment skipped wrongly changes the sums far beyond rounding. The CPU
    mirror skips nothing."""
    import cupy as cp

    from leveret.cuda.backproject_cone import CudaConeBackprojector

    g, matrices = scrambled_scan(rng, n_views=37, n_rows=11, n_cols=14)
    vol = VolumeGeometry((35, 26, 29), voxel_size=0.55, center=(0.7, -0.3, 1.1))
    m = index_matrices(matrices, vol)
    # the case has work to skip and edges to straddle: a third to two thirds of the samples are off the detector
    z, y, x = np.meshgrid(*(np.arange(n, dtype=float) for n in vol.shape), indexing="ij")
    q = np.einsum("nab,bzyx->nazyx", m, np.stack([x, y, z, np.ones_like(x)]))
    u, v = q[:, 0] / q[:, 2], q[:, 1] / q[:, 2]
    on = ((u > -1) & (u < 14) & (v > -1) & (v < 11)).mean()
    assert 0.3 < on < 0.7
    host = smooth_noise(rng, g.projection_shape) + np.float32(3)  # no ring pixel near zero
    host[:, 1:-1, 1:-1] = 0
    bp = CudaConeBackprojector(kernel)
    out = cp.full(vol.shape, cp.nan, cp.float32)  # poison
    got = bp(cp.asarray(host), m, out).get()
    assert np.isfinite(got).all()
    expected = mirror(bp, m, host, vol.shape)
    assert (expected != 0).mean() > 0.2
    assert rel_mirror(got, expected) < MIRROR_TOL


@pytest.mark.parametrize("kernel", ["ray", "ray-hybrid"])
def test_ray_kernels_read_views_in_place_or_staged_alike(rng, kernel):
    """The ray kernels' per-view textures read aligned projections in place
    (16 x 32 views: 2 KiB views, 128-byte rows) and others through an
    aligned staging copy: the same sums, bit for bit; cached texture objects
    read the projections' current values."""
    import cupy as cp

    from leveret.cuda import texture
    from leveret.cuda.backproject_cone import CudaConeBackprojector

    g, matrices = scrambled_scan(rng, n_views=29, n_rows=16, n_cols=32)
    vol = VolumeGeometry((19, 21, 23), voxel_size=1.5)
    m = index_matrices(matrices, vol)
    proj = cp.asarray(smooth_noise(rng, g.projection_shape))
    shifted = cp.empty(proj.size + 1, cp.float32)[1:].reshape(proj.shape)  # 4 bytes off the alignment
    shifted[...] = proj
    assert proj.data.ptr % 512 == 0 and shifted.data.ptr % 512 == 4
    bp = CudaConeBackprojector(kernel)
    texture.clear_cache()

    def run(p):
        return bp(p, m, cp.full(vol.shape, cp.nan, cp.float32)).get()  # poison: unwritten voxels show

    in_place = run(proj)
    assert [key[0] for key in texture.view_cache().keys()] == [proj.data.ptr]
    staged = run(shifted)
    assert [key[0] for key in texture.view_cache().keys()] == [proj.data.ptr, "staging"]
    assert np.isfinite(in_place).all() and np.abs(in_place).max() > 0
    np.testing.assert_array_equal(staged, in_place)
    proj *= 2  # a power of two scales every product and sum exactly
    shifted *= 2
    np.testing.assert_array_equal(run(proj), 2 * in_place)
    np.testing.assert_array_equal(run(shifted), 2 * in_place)
    assert len(texture.view_cache().keys()) == 2  # reused, not rebuilt
