"""The CUDA projector pair (``Projector(backend="cuda")``) against the CPU operators.

GPU tests (``gpu`` marker, skipped without a GPU): forward and transpose equal
the CPU ones on fresh random data for every geometry and model of
tests/cases.py (odd sizes, grazing rays, rays that miss, detectors wider than
the volume), outputs are poisoned with NaN first, the adjoint identity holds
on the GPU, the structured path is refused where it does not apply, analytic
phantoms, and the iterative methods with CuPy data. The kernels' own tests
are in tests/cuda/test_raytrace_host.py and test_raytrace_gpu.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.geometry import ConeGeometry, VolumeGeometry
from leveret.operators import Projector

from cases import GEOMETRIES, MODELS, STRUCTURED, adjoint_scale, assert_close

# GPU vs CPU: float64 runs the same float64 traversal (rays bit-identical, see
# cone_rays); float32 marches in float32 where the kernels have a float32 march
# (structured Siddon and Joseph, general Joseph: within 1e-5, their own bounds
# tested in tests/cuda/test_raytrace_gpu.py) and in float64 elsewhere; the
# forward sums in float64 on both, so they differ by the order of float32
# rounding of the result; the transpose adds with float32 (float64) atomics in
# another order than the CPU's private buffers. Bound: relative to the largest
# value, 1e-5 in float32 (the accuracy the float32 operators promise).
GPU_TOL = {"float32": 1e-5, "float64": 1e-12}


def _cupy():
    import cupy

    return cupy


ALL = {**GEOMETRIES, **STRUCTURED}


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name", list(ALL))
def test_gpu_equals_cpu(name, model, precision, rng):
    cp = _cupy()
    geometry, volume = ALL[name]
    A = Projector(geometry, volume, model=model, precision=precision, backend="cpu")
    G = Projector(geometry, volume, model=model, precision=precision, backend="cuda")
    assert G.backend == "cuda"
    x = rng.standard_normal(volume.shape).astype(precision)
    y = rng.standard_normal(geometry.projection_shape).astype(precision)
    out = cp.full(geometry.projection_shape, np.nan, precision)
    assert G(cp.asarray(x), out=out) is out
    assert_close(out, A(x), GPU_TOL[precision])
    back = cp.full(volume.shape, np.nan, precision)
    assert G.T(cp.asarray(y), out=back) is back
    assert_close(back, A.T(y), GPU_TOL[precision])
    # NumPy in, NumPy out
    res = G(x)
    assert isinstance(res, np.ndarray) and res.dtype == np.dtype(precision)
    assert_close(cp.asarray(res), A(x), GPU_TOL[precision])


@pytest.mark.gpu
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name", list(ALL))
def test_gpu_adjoint(name, model, rng):
    cp = _cupy()
    geometry, volume = ALL[name]
    G = Projector(geometry, volume, model=model, precision="float32", backend="cuda")
    x = cp.asarray(rng.standard_normal(volume.shape), dtype=cp.float32)
    y = cp.asarray(rng.standard_normal(geometry.projection_shape), dtype=cp.float32)
    Ax, ATy = G(x), G.T(y)
    assert isinstance(Ax, cp.ndarray) and Ax.dtype == cp.float32 and ATy.dtype == cp.float32
    lhs = float(cp.vdot(Ax.astype(cp.float64), y.astype(cp.float64)))
    rhs = float(cp.vdot(x.astype(cp.float64), ATy.astype(cp.float64)))
    assert int(cp.count_nonzero(Ax)) > 0
    assert abs(lhs - rhs) <= 1e-5 * adjoint_scale(lhs, Ax, y)


@pytest.mark.gpu
def test_structured_refused_where_invalid():
    geometry, volume = GEOMETRIES["cone_matrices"]  # tilted detector
    assert not Projector(geometry, volume, backend="cuda").structured
    with pytest.raises(ValueError, match="structured"):
        Projector(geometry, volume, backend="cuda", structured=True)
    assert not Projector(geometry, volume, model="joseph", backend="cuda").structured


@pytest.mark.gpu
@pytest.mark.parametrize("model", MODELS)
def test_gpu_ellipsoid_phantom_cone(model):
    """Absolute line integrals of an analytic phantom (bound as the CPU test's)."""
    cp = _cupy()
    volume = VolumeGeometry((48, 48, 48), 0.05)
    geometry = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 8, endpoint=False), sid=6.0, sdd=10.0, n_rows=40, n_cols=56, pixel_size=0.075
    )
    ph = phantom.EllipsoidPhantom(
        [
            phantom.Ellipsoid(1.0, (0.9, 0.7, 0.8), (0.1, -0.05, 0.0), 0.3),
            phantom.Ellipsoid(0.5, (0.3, 0.4, 0.3), (-0.2, 0.2, 0.1)),
        ]
    )
    x = ph.rasterize(volume, supersampling=3)
    G = Projector(geometry, volume, model=model, precision="float32", backend="cuda")
    p = cp.asnumpy(G(cp.asarray(x, dtype=cp.float32))).astype(np.float64)
    exact = ph.project(geometry)
    # The CPU operators measure 2.78 % (Siddon) and 2.54 % (Joseph) here, the
    # rasterised boundary on this 48^3 grid; bound: measured + 20 %.
    tol = {"siddon": 0.034, "joseph": 0.031}[model]
    assert np.linalg.norm(p - exact) <= tol * np.linalg.norm(exact)


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["sirt", "os_sart", "cgls"])
@pytest.mark.parametrize("name", ["parallel2d", "cone_small"])
def test_iterative_on_gpu_matches_cpu(method, name, rng):
    cp = _cupy()
    geometry, volume = ALL[name]
    A = Projector(geometry, volume, model="siddon", precision="float64", backend="cpu")
    G = Projector(geometry, volume, model="siddon", precision="float64", backend="cuda")
    b = A(rng.random(volume.shape))
    run = getattr(leveret, method)
    kwargs = {} if method == "cgls" else {"nonnegative": True}
    ref = run(b, A, 5, **kwargs)
    got = run(cp.asarray(b), G, 5, **kwargs)
    assert isinstance(got, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(got), ref, rtol=0, atol=1e-9 * np.abs(ref).max())


@pytest.mark.gpu
def test_gpu_bad_input():
    cp = _cupy()
    geometry, volume = GEOMETRIES["parallel2d"]
    G = Projector(geometry, volume, backend="cuda")
    with pytest.raises(ValueError, match="x: expected shape"):
        G(cp.zeros((13, 16), cp.float32))
    with pytest.raises(ValueError, match="out"):
        G(cp.zeros(volume.shape, cp.float32), out=np.zeros(geometry.projection_shape, np.float32))
    A = Projector(geometry, volume, backend="cpu")
    with pytest.raises(ValueError, match="x:"):
        A(cp.zeros(volume.shape, cp.float32))
    with pytest.raises(ValueError, match="projections"):
        leveret.sirt(cp.zeros(geometry.projection_shape, cp.float32), A, 2)
