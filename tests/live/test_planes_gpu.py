"""The live reconstructor on CUDA: the same slices as leveret.fbp / leveret.fdk on the GPU.

Parallel beam: the GPU's plane kernel (planes.cu) interpolates with exact
float32 weights as leveret.fbp's CPU kernel does in float64, so the reference
is the CPU fbp; the bound is 1e-5 of the slice's peak for float32 storage
(about 30 float32 steps over a few dozen views), 3e-4 for float16 storage (as
on the CPU).
"""
import numpy as np
import pytest

import leveret
from leveret.live import LiveReconstructor
from leveret.phantom import shepp_logan_3d

pytestmark = pytest.mark.gpu
N, ROWS, VIEWS = 64, 16, 96


def _err(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("storage, tol", [("float32", 1e-5), ("float16", 3e-4)])
def test_parallel_gpu_slices_equal_fbp(storage, tol):
    import cupy
    angles = np.linspace(0, np.pi, VIEWS, endpoint=False)
    g = leveret.ParallelGeometry(angles, N, ROWS)
    vol = g.default_volume()
    proj = shepp_logan_3d(radius=N / 2.2).project(g).astype(np.float32)
    ref = leveret.fbp(proj, g, vol, backend="cpu")
    rec = LiveReconstructor(vol, (ROWS, N), backend="cuda", storage=storage)
    for batch in np.array_split(np.random.default_rng(0).permutation(VIEWS), 7):
        rec.add(proj[batch], angles[batch])
    p = (vol.coordinates("x")[20], vol.coordinates("y")[40], vol.coordinates("z")[5])
    rec.watch_orthogonal(p)
    s = rec.slices()
    assert _err(s["xy"], ref[5]) < tol
    assert _err(s["xz"], ref[:, 40, :]) < tol
    assert _err(s["yz"], ref[:, :, 20]) < tol


def test_cone_gpu_slices_equal_fdk():
    import cupy
    n, views = 32, 48
    angles = np.linspace(0, 2 * np.pi, views, endpoint=False)
    g = leveret.ConeGeometry.circular(angles, 80.0, 160.0, n, n, 2.0)
    vol = leveret.VolumeGeometry((n, n, n), 1.0)
    proj = shepp_logan_3d(radius=12).project(g).astype(np.float32)
    ref = leveret.fdk(proj, g, vol, backend="cpu", short_scan=False)
    ref_gpu = cupy.asnumpy(leveret.fdk(cupy.asarray(proj), g, vol, backend="cuda", short_scan=False))
    rec = LiveReconstructor(vol, (n, n), beam="cone", backend="cuda")
    for batch in np.array_split(np.arange(views), 5):
        rec.add(proj[batch], matrices=g.matrices[batch])
    rec.watch_orthogonal((vol.coordinates("x")[10], vol.coordinates("y")[12], vol.coordinates("z")[7]))
    s = rec.slices()
    # the axial slice runs ConeBackprojection's CUDA kernel, as fdk on the GPU does
    # (the texture unit's 8-bit weights); the others the exact float32 point kernel
    # cone slices: float32 matrices and the point kernel's own arithmetic; measured 1.1e-5 (H100)
    assert _err(s["xy"], ref_gpu[7]) < 3e-5
    assert _err(s["xz"], ref[:, 12, :]) < 3e-5
    assert _err(s["yz"], ref[:, :, 10]) < 3e-5
