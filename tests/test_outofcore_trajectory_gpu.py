"""Helical and laminography reconstruction slab by slab on the GPU (the staged
pipeline's CUDA workers: each slab's views and rows uploaded, reconstructed
there), equal to the in-memory CUDA result and to the CPU's; and from the
command line."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.cli import main
from leveret.execution.outofcore import reconstruct_to_file
from leveret.io import read_array

pytestmark = pytest.mark.gpu


#: Exact float32 interpolation weights on both sides (the default texture
#: kernels' 8-bit weights differ between slab partitions by some 1e-3).
EXACT = {"interpolation": "linear32"}


def _close(a, b, tol):
    np.testing.assert_allclose(a, b, rtol=0, atol=tol * np.abs(b).max())


def _rms_close(a, b, tol):
    assert np.sqrt(np.mean((a - b) ** 2)) < tol * np.abs(b).max()


@pytest.fixture(scope="module")
def helix():
    angles = np.arange(5 * 90) * 2 * np.pi / 90
    g = leveret.ConeGeometry.helical(angles, 20.0, 300.0, 500.0, 32, 96, 1.0)
    vol = leveret.VolumeGeometry((40, 64, 64), 0.6)
    body = phantom.EllipsoidPhantom([phantom.Ellipsoid(1.0, (16, 13, 100)), phantom.Ellipsoid(0.5, 4, (4, -3, 5))])
    return g, vol, body.project(g).astype(np.float32)


def test_helical_cuda_slabs_equal_helical_fdk_on_cuda_and_cpu(tmp_path, helix):
    g, vol, proj = helix
    gpu = leveret.helical_fdk(proj, g, vol, backend="cuda", **EXACT)
    cpu = leveret.helical_fdk(proj, g, vol, backend="cpu", **EXACT)
    res = reconstruct_to_file(proj, g, tmp_path / "h.h5", volume=vol, backend="cuda", slab_slices=8, **EXACT)
    assert res.slabs_done == 5
    out = read_array(tmp_path / "h.h5")
    _close(out, gpu, 1e-5)
    _close(out, cpu, 1e-4)


@pytest.mark.parametrize("kind", ["parallel", "cone"])
def test_laminography_cuda_slabs_equal_laminography_fbp(tmp_path, kind):
    angles = np.arange(120) * 2 * np.pi / 120
    if kind == "parallel":
        g = leveret.ParallelVecGeometry.laminography(angles, np.radians(35), 64, 72, 1.0)
        options = {}
    else:
        g = leveret.ConeGeometry.laminography(angles, np.radians(35), 300.0, 500.0, 64, 72, 1.0)
        options = {"method": "laminography"}
    vol = leveret.VolumeGeometry((24, 48, 48), 0.8)
    proj = phantom.EllipsoidPhantom([phantom.Ellipsoid(1.0, (5, 15, 13))]).project(g).astype(np.float32)
    gpu = leveret.laminography_fbp(proj, g, vol, backend="cuda", **EXACT)
    cpu = leveret.laminography_fbp(proj, g, vol, backend="cpu", **EXACT)
    res = reconstruct_to_file(proj, g, tmp_path / "l.h5", volume=vol, backend="cuda", slab_slices=8, **options, **EXACT)
    assert res.slabs_done == 3
    out = read_array(tmp_path / "l.h5")
    _close(out, gpu, 1e-5)
    _close(out, cpu, 1e-4)


def test_helical_from_the_command_line_on_cuda(tmp_path, helix):
    g, vol, proj = helix
    np.save(tmp_path / "p.npy", proj)
    np.savetxt(tmp_path / "a.txt", np.degrees(g.angles))
    rc = main(
        [
            "recon",
            str(tmp_path / "p.npy"),
            str(tmp_path / "o.h5"),
            "--beam",
            "cone",
            "--sid",
            "300",
            "--sdd",
            "500",
            "--pixel-size",
            "1",
            "--angles",
            str(tmp_path / "a.txt"),
            "--helical-pitch",
            "20",
            "--volume-shape",
            "40,64,64",
            "--voxel-size",
            "0.6",
            "--backend",
            "cuda",
            "--slab-slices",
            "8",
            "--no-progress",
        ]
    )
    assert rc == 0
    # the CLI runs the default texture kernels: within their 8-bit weights
    _rms_close(read_array(tmp_path / "o.h5"), leveret.helical_fdk(proj, g, vol, backend="cuda"), 2e-3)
