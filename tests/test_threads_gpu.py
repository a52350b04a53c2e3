"""Every public entry point called from several threads at once on one GPU
(and on a device set) gives, bit for bit, what the same call made alone
gives: each thread has its own geometry, so a table or texture that one
call leaves in a shared place shows in another's result.

The threads start together (a barrier) and repeat their call a few times,
so that their constant-memory tables, textures, plans and streams are in
use at the same moments. CuPy jobs run on a non-blocking stream of their
thread's own, as a service running one request per thread would."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import leveret
from leveret.geometry import ConeGeometry, ParallelGeometry, RadonGeometry, VolumeGeometry
from leveret.operators import ConeBackprojection, ParallelBackprojection, Projector

pytestmark = pytest.mark.gpu

THREADS = 6
ROUNDS = 3


def _host(x):
    return x.get() if hasattr(x, "get") else np.asarray(x)


def _threaded(jobs, rounds: int = ROUNDS, own_stream: bool = False) -> list[list[np.ndarray]]:
    """Each job in a thread of its own, all started at once, ``rounds`` calls each."""
    import cupy

    barrier = threading.Barrier(len(jobs))

    def run(job):
        stream = cupy.cuda.Stream(non_blocking=True) if own_stream else cupy.cuda.Stream.null
        with stream:
            barrier.wait()
            out = [_host(job()) for _ in range(rounds)]
            stream.synchronize()
        return out

    with ThreadPoolExecutor(len(jobs)) as pool:
        return list(pool.map(run, jobs))


def _check(jobs, own_stream: bool = False) -> None:
    """Every threaded call equals its job's serial one: bit for bit where a
    call alone repeats bit for bit; where it does not (sums by atomic
    additions, whose order varies), within ten times the spread of two
    serial calls plus float32 rounding of the peak."""
    alone = [_host(job()) for job in jobs]
    again = [_host(job()) for job in jobs]
    for i, results in enumerate(_threaded(jobs, own_stream=own_stream)):
        peak = np.abs(alone[i]).max()
        bound = 10 * np.abs(again[i] - alone[i]).max()
        bound = bound and bound + 2.0**-23 * peak  # 0 where the call repeats exactly
        for r, got in enumerate(results):
            off = np.abs(got - alone[i]).max()
            assert off <= bound, (
                f"job {i}, round {r}: differs from the call made alone by up to "
                f"{off / peak:.3g} of its peak (serial spread {bound / peak:.3g})"
            )


def _cone(i: int):
    """The issue's case: 64 x 96 x 96 from 90-200 views, a geometry per thread."""
    n_views = 90 + 22 * i
    g = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, n_views, endpoint=False) + 0.1 * i,
        sid=300.0,
        sdd=450.0 + 10 * i,
        n_rows=72,
        n_cols=112,
        pixel_size=1.0,
    )
    vol = VolumeGeometry((64, 96, 96), voxel_size=0.6)
    proj = leveret.phantom.shepp_logan_3d(radius=25.0).project(g).astype(np.float32)
    return g, vol, proj


def _parallel(i: int):
    n_angles = 120 + 40 * i
    g = ParallelGeometry(
        np.linspace(0, np.pi, n_angles, endpoint=False), 96 + 8 * i, n_rows=6 + i, center=(95 + 8 * i) / 2 + 0.3 * i
    )
    proj = np.random.default_rng(i).random(g.projection_shape, dtype=np.float32)
    return g, proj


@pytest.mark.parametrize("on_gpu", [False, True])
@pytest.mark.parametrize("kernel", ["auto", "texture", "texz", "hybrid"])
def test_fbp_from_threads(kernel, on_gpu):
    import cupy

    cases = [_parallel(i) for i in range(THREADS)]
    jobs = [
        lambda g=g, p=(cupy.asarray(p) if on_gpu else p): leveret.fbp(p, g, kernel=kernel, backend="cuda")
        for g, p in cases
    ]
    _check(jobs, own_stream=on_gpu)


@pytest.mark.parametrize("on_gpu", [False, True])
def test_fdk_from_threads(on_gpu):
    import cupy

    cases = [_cone(i) for i in range(THREADS)]
    jobs = [
        lambda g=g, v=v, p=(cupy.asarray(p) if on_gpu else p): leveret.fdk(p, g, v, backend="cuda") for g, v, p in cases
    ]
    _check(jobs, own_stream=on_gpu)


@pytest.mark.parametrize("kernel", ["texture", "ray", "ray-hybrid", "quad"])
def test_cone_backprojection_from_threads(kernel):
    import cupy

    cases = [_cone(i) for i in range(THREADS)]
    interpolation = "linear32" if kernel == "quad" else "linear"
    jobs = []
    for g, v, p in cases:
        op = ConeBackprojection(g, v, backend="cuda", kernel=kernel, interpolation=interpolation)
        jobs.append(lambda op=op, p=cupy.asarray(p): op(p))
    _check(jobs, own_stream=True)


def test_one_operator_shared_by_threads():
    """One ParallelBackprojection and one ConeBackprojection object, each called
    from every thread with its own data."""
    import cupy

    g, _ = _parallel(2)
    par = ParallelBackprojection(g, g.default_volume(), backend="cuda", kernel="texz")
    gc, vc, _ = _cone(1)
    cone = ConeBackprojection(gc, vc, backend="cuda", kernel="ray-hybrid")
    rng = np.random.default_rng(7)
    jobs = []
    for i in range(THREADS):
        sino = cupy.asarray(rng.random((g.n_rows, g.n_angles, g.n_cols), dtype=np.float32))
        proj = cupy.asarray(rng.random(gc.projection_shape, dtype=np.float32))
        jobs.append(lambda s=sino: par(s))
        jobs.append(lambda q=proj: cone(q))
    _check(jobs, own_stream=True)


def test_radon3d_fbp_from_threads():
    jobs = []
    for i in range(THREADS):
        rng = np.random.default_rng(i)
        n_dirs = 150 + 20 * i
        d = rng.standard_normal((n_dirs, 3))
        geometry = RadonGeometry(d / np.linalg.norm(d, axis=1, keepdims=True), 64 + 4 * i)
        vol = VolumeGeometry((40 + 2 * i,) * 3)
        proj = rng.random(geometry.projection_shape, dtype=np.float32)
        jobs.append(lambda p=proj, g=geometry, v=vol: leveret.radon3d_fbp(p, g, v, backend="cuda"))
    _check(jobs)


@pytest.mark.parametrize("model", ["siddon", "joseph"])
def test_projector_and_iterations_from_threads(model):
    """A Projector per thread (A, A.T and the iterative methods over it), and
    one Projector shared by every thread."""
    import cupy

    jobs = []
    shared = None
    for i in range(THREADS):
        g, v, p = _cone(i)
        op = Projector(g, v, model=model, backend="cuda")
        shared = shared or op
        x = cupy.asarray(np.random.default_rng(i).random(v.shape, dtype=np.float32))
        y = cupy.asarray(p)
        jobs += [
            lambda op=op, x=x: op(x),
            lambda op=op, y=y: op.T(y),
            lambda op=op, y=y: leveret.sirt(y, op, 3),
            lambda op=op, y=y: leveret.cgls(y, op, 3),
            lambda s=shared, x=x: s(x),
        ]
    _check(jobs, own_stream=True)


def test_several_workers_per_call_from_threads():
    """Threads whose calls each run on a device set (two workers on GPU 0)."""
    from leveret.cuda.devices import DeviceSet

    cases = [_cone(i) for i in range(3)]
    jobs = [
        lambda g=g, v=v, p=p: leveret.fdk(
            p, g, v, backend="cuda", devices=DeviceSet([0, 0], shared=True), chunk_views=16
        )
        for g, v, p in cases
    ]
    jobs += [
        lambda g=g, p=p: leveret.fbp(p, g, backend="cuda", devices=DeviceSet([0, 0], shared=True))
        for g, p in (_parallel(i) for i in range(3))
    ]
    _check(jobs)
