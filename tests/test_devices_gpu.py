"""The several-GPU path (``devices=``) against one GPU.

``DeviceSet([0, 0], shared=True)`` runs two workers on GPU 0: the dealing,
the per-worker copies of the data, the peer copies and the fixed-order sum all
run as they would on two GPUs. On a machine with two GPUs the same tests run
on GPUs 0 and 1 (``two_workers``), copies between them included.
Bit-identical where every output value is computed by the same kernel from
the same numbers (``A``; fbp, radon3d_fbp; fdk with the same slabs and view
chunks); where partial sums from the workers are added (``A.T``) within a
rounding bound derived below.
"""

from __future__ import annotations

import gc
import math
import sys

import numpy as np
import pytest

import leveret
from leveret.cuda import devices as dv
from leveret.geometry import ParallelGeometry
from leveret.operators import Projector

from cases import GEOMETRIES, MODELS, STRUCTURED, TALL, gpu_memory_for_arrays

pytestmark = pytest.mark.gpu

ALL = {**GEOMETRIES, **STRUCTURED, "tall": TALL}
UNIT = {"float32": 2.0**-24, "float64": 2.0**-53}


def _cupy():
    import cupy

    return cupy


def two_workers():
    """Two workers: GPUs 0 and 1 where there are two (peer copies between
    them), else both on GPU 0."""
    if dv.visible_device_count() >= 2:
        return dv.DeviceSet([0, 1])
    return dv.DeviceSet([0, 0], shared=True)


def terms_per_voxel(geometry, volume) -> int:
    """An upper bound on how many values one voxel of ``A.T``'s output adds up:
    ``n_views`` times the detector pixels of one view that a box of 3 x 3 x 3
    voxels around it covers (a Siddon ray inside the voxel, or a Joseph sample
    interpolating from it, passes within one voxel of its centre)."""
    if isinstance(geometry, ParallelGeometry):
        sz = 1.0 if volume.is_2d else volume.spacing("z")
        du = 3 * math.hypot(volume.spacing("x"), volume.spacing("y")) / geometry.det_spacing
        dv_ = 0.0 if geometry.is_2d else 3 * sz / geometry.row_spacing
        return geometry.projection_shape[0] * (math.ceil(du) + 1) * (math.ceil(dv_) + 1)
    c = [volume.coordinates(a) for a in "xyz"]
    s = np.array([volume.spacing(a) for a in "xyz"])
    centres = np.stack(np.meshgrid(*c, indexing="ij"), axis=-1).reshape(-1, 1, 3)
    signs = np.array([[i, j, k] for i in (-1, 1) for j in (-1, 1) for k in (-1, 1)], float)
    u, v, _ = geometry.project(centres + 1.5 * s * signs)  # (n_views, n_voxels, 8)
    du = (u.max(-1) - u.min(-1)).max()
    dv_ = (v.max(-1) - v.min(-1)).max()
    return geometry.n_views * (math.ceil(du) + 1) * (math.ceil(dv_) + 1)


def assert_sum_reordered(got, ref, abs_ref, n_terms, precision):
    """``got`` and ``ref`` are float sums of the same ``n_terms`` values per
    element in different orders: each is within ``gamma |terms|`` of the exact
    sum, ``gamma = n u / (1 - n u)`` (Higham, Accuracy and Stability of
    Numerical Algorithms, 2002, eq. 4.4), so they differ by at most twice that;
    ``sum |terms|`` is ``A.T |y|`` (computed, hence the factor 1 + gamma)."""
    cp = _cupy()
    got, ref, abs_ref = (np.asarray(cp.asnumpy(a), np.float64) for a in (got, ref, abs_ref))
    nu = n_terms * UNIT[precision]
    gamma = nu / (1 - nu)
    bound = 2 * gamma * (1 + gamma) * abs_ref
    assert not np.isnan(got).any()
    err = np.abs(got - ref)
    worst = np.argmax(err - bound)
    assert (err <= bound).all(), f"error {err.flat[worst]:.3g} > bound {bound.flat[worst]:.3g}"


# -- the projector ---------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name", list(ALL))
def test_projector_forward_on_devices_is_bit_identical(name, model, precision, rng):
    cp = _cupy()
    geometry, volume = ALL[name]
    one = Projector(geometry, volume, model=model, precision=precision, backend="cuda")
    two = Projector(geometry, volume, model=model, precision=precision, backend="cuda", devices=two_workers())
    x = rng.standard_normal(volume.shape).astype(precision)
    ref = one(x)
    # NumPy in, NumPy out
    got = two(x)
    assert isinstance(got, np.ndarray) and got.dtype == np.dtype(precision)
    np.testing.assert_array_equal(got, ref)
    # CuPy in, CuPy out (into a poisoned out=)
    out = cp.full(geometry.projection_shape, np.nan, precision)
    assert two(cp.asarray(x), out=out) is out
    np.testing.assert_array_equal(cp.asnumpy(out), ref)


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name", list(ALL))
def test_projector_transpose_on_devices_within_reordered_sums(name, model, precision, rng):
    cp = _cupy()
    geometry, volume = ALL[name]
    one = Projector(geometry, volume, model=model, precision=precision, backend="cuda")
    two = Projector(geometry, volume, model=model, precision=precision, backend="cuda", devices=two_workers())
    y = rng.standard_normal(geometry.projection_shape).astype(precision)
    ref = one.T(cp.asarray(y))
    abs_ref = one.T(cp.asarray(np.abs(y)))
    n_terms = terms_per_voxel(geometry, volume)
    got = two.T(y)
    assert isinstance(got, np.ndarray) and got.dtype == np.dtype(precision)
    assert_sum_reordered(got, ref, abs_ref, n_terms, precision)
    out = cp.full(volume.shape, np.nan, precision)
    assert two.T(cp.asarray(y), out=out) is out
    assert_sum_reordered(out, ref, abs_ref, n_terms, precision)


@pytest.mark.parametrize("model", MODELS)
def test_projector_forward_on_devices_lays_out_the_volume_once_per_worker(model, rng, monkeypatch):
    """The structured paths' z-fastest copy is made once per call and worker,
    not once per view block (7 views in 7 blocks for 2 workers)."""
    from leveret.cuda.raytrace import CudaRaytracer

    geometry, volume = STRUCTURED["cone_offset"]
    two = Projector(geometry, volume, model=model, backend="cuda", devices=two_workers())
    assert two.structured
    calls = []
    original = CudaRaytracer.laid_out
    monkeypatch.setattr(CudaRaytracer, "laid_out", lambda self, vol: calls.append(1) or original(self, vol))
    x = rng.standard_normal(volume.shape).astype(np.float32)
    got = two(x)
    assert 1 <= len(calls) <= 2
    np.testing.assert_array_equal(got, Projector(geometry, volume, model=model, backend="cuda")(x))


def test_projector_voxel_transpose_on_devices_repeats_exactly(rng):
    """The gather transpose is deterministic and the partials are summed in a
    fixed order: the same bits from run to run."""
    cp = _cupy()
    geometry, volume = TALL
    two = Projector(geometry, volume, model="joseph", backend="cuda", transpose="gather", devices=two_workers())
    y = cp.asarray(rng.standard_normal(geometry.projection_shape), dtype=cp.float32)
    first = two.T(y)
    for _ in range(3):
        cp.testing.assert_array_equal(two.T(y), first)


def test_projector_subsets_keep_devices(rng):
    geometry, volume = STRUCTURED["cone_offset"]
    one = Projector(geometry, volume, backend="cuda").subset([1, 4, 5])
    two = Projector(geometry, volume, backend="cuda", devices=two_workers()).subset([1, 4, 5])
    assert two.devices == two_workers()
    x = rng.standard_normal(volume.shape).astype(np.float32)
    np.testing.assert_array_equal(two(x), one(x))


def test_projector_on_devices_shrinks_ranges_when_memory_runs_out(rng, monkeypatch):
    """A worker whose view range runs out of device memory (CuPy's own
    OutOfMemoryError, raised here for ranges over 4 views) halves its range,
    and the result is still exact."""
    cp = _cupy()
    from leveret.cuda import raytrace

    geometry = ParallelGeometry(np.linspace(0, np.pi, 32, endpoint=False), 64, n_rows=64)
    volume = geometry.default_volume()
    one = Projector(geometry, volume, backend="cuda")
    two = Projector(geometry, volume, backend="cuda", devices=dv.DeviceSet([0]))
    x = rng.standard_normal(volume.shape).astype(np.float32)
    ref = one(x)
    forward = raytrace.CudaRaytracer.forward

    ran = []

    def tight(self, vol, out, **kwargs):
        if out.shape[0] > 4:
            raise cp.cuda.memory.OutOfMemoryError(out.nbytes, 0, 0)
        forward(self, vol, out, **kwargs)
        ran.append(out.shape[0])

    monkeypatch.setattr(raytrace.CudaRaytracer, "forward", tight)
    got = two(x)
    np.testing.assert_array_equal(got, ref)
    assert max(ran) == 4 and sum(ran) == 32, ran  # every view ran once, in ranges of 4 at most


@pytest.mark.parametrize("method", ["sirt", "os_sart", "cgls"])
@pytest.mark.parametrize("name", ["parallel2d", "cone_small"])
def test_iterative_methods_on_devices(method, name, rng):
    """sirt, os_sart and cgls run unchanged on a projector with devices; in
    float64 the reordered sums of A.T differ from one GPU's by ~1e-16
    relative, which 5 iterations keep far below the 1e-9 the CUDA-vs-CPU
    test of the same methods allows."""
    cp = _cupy()
    geometry, volume = ALL[name]
    one = Projector(geometry, volume, model="siddon", precision="float64", backend="cuda")
    two = Projector(geometry, volume, model="siddon", precision="float64", backend="cuda", devices=two_workers())
    b = one(rng.random(volume.shape))
    run = getattr(leveret, method)
    kwargs = {} if method == "cgls" else {"nonnegative": True}
    ref = run(b, one, 5, **kwargs)
    got = run(b, two, 5, **kwargs)
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-9 * np.abs(ref).max())
    got_gpu = run(cp.asarray(b), two, 5, **kwargs)
    assert isinstance(got_gpu, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(got_gpu), ref, rtol=0, atol=1e-9 * np.abs(ref).max())


# -- the device set on a real GPU ------------------------------------------------------------------


def test_cupy_out_of_memory_is_caught_and_shrunk():
    """CuPy's OutOfMemoryError is a MemoryError, and the released pool lets the halves run."""
    cp = _cupy()
    pool = cp.get_default_memory_pool()
    gc.collect()  # earlier tests' arrays in cycles: freed now, not during the test
    cp.cuda.Device().synchronize()
    pool.free_all_blocks()
    sizes = []

    def work(worker, a, b):
        buf = cp.ones((b - a) << 18, cp.float32)  # 1 MiB per element of the range
        sizes.append(b - a)
        return float(buf.sum())

    try:
        pool.set_limit(size=pool.total_bytes() + (5 << 20))
        out = dv.DeviceSet([0]).run([(0, 16)], work)
    finally:
        pool.set_limit(size=0)
    assert [(a, b) for a, b, _ in out] == [(0, 4), (4, 8), (8, 12), (12, 16)], (out, sizes)
    assert sizes == [4, 4, 4, 4]


def test_peer_sum_in_fixed_order():
    cp = _cupy()
    parts = [cp.full(1000, v, cp.float32) for v in (1e8, 1.0, -1e8)]
    total = dv.reduce_sum(parts, 0)
    # ((1e8 + 1) - 1e8) in float32 is 0: the order is p0 + p1 + p2, as documented
    assert float(total[0]) == float((np.float32(1e8) + np.float32(1.0)) - np.float32(1e8))
    assert parts[0][0] == 1e8  # the first part is not summed into in place
    cp.testing.assert_array_equal(dv.to_device(parts[1], 0), parts[1])


# -- parallel-beam FBP -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n_angles,kernel,precision", [(90, "auto", "float32"), (90, "texture", "float16"), (2100, "texture", "float32")]
)
def test_fbp_on_devices_is_bit_identical(n_angles, kernel, precision, rng):
    """NumPy in and out (the streamed pipelines, one per worker) and CuPy in
    and out; 2100 angles take two constant-memory passes, which the two
    workers of one GPU must not interleave (``DeviceState.constants``)."""
    cp = _cupy()
    geometry = ParallelGeometry(np.linspace(0, np.pi, n_angles, endpoint=False), 48, n_rows=23)
    proj = rng.random(geometry.projection_shape).astype(np.float32)
    kw = dict(slab_slices=3, kernel=kernel, precision=precision, backend="cuda")
    ref = leveret.fbp(proj, geometry, **kw)
    split: dict = {}
    got = leveret.fbp(proj, geometry, devices=two_workers(), stats=split, **kw)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, ref)
    assert split["chunks"] == 8 and split["wall"] > 0
    assert 0 < split["busy"] <= 2 * split["wall"]  # each worker's pipeline runs within the call
    ref_gpu = leveret.fbp(cp.asarray(proj), geometry, **kw)
    out = cp.full(ref.shape, np.nan, np.float32)
    got_gpu = leveret.fbp(cp.asarray(proj), geometry, devices=two_workers(), out=out, **kw)
    assert got_gpu is out
    cp.testing.assert_array_equal(got_gpu, ref_gpu)


def test_fbp_on_devices_reports_bad_input():
    geometry = ParallelGeometry(np.linspace(0, np.pi, 30, endpoint=False), 32, n_rows=8)
    proj = np.ones(geometry.projection_shape, np.float32)
    proj[3, 6, 7] = np.nan
    with pytest.raises(ValueError, match=r"^projections: expected finite values.*, got 1 "):
        leveret.fbp(proj, geometry, slab_slices=2, backend="cuda", devices=two_workers())


# -- cone-beam FDK -----------------------------------------------------------------------------------


def _fdk_case(rng):
    from leveret.geometry import ConeGeometry, VolumeGeometry

    geometry = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 24, endpoint=False), sid=60, sdd=90, n_rows=40, n_cols=48, pixel_size=1.2
    )
    volume = VolumeGeometry((33, 32, 32), voxel_size=1.5)
    return geometry, volume, rng.random(geometry.projection_shape).astype(np.float32)


def test_fdk_on_devices_is_bit_identical_to_one_gpu(rng):
    """Each GPU filters its rows once, its workers back-project slabs of 16
    slices from them (3 slabs, taken from its queue): bit-identical to one
    GPU with the same view chunks (of 6), which filters every row and
    back-projects the whole volume."""
    cp = _cupy()
    geometry, volume, proj = _fdk_case(rng)
    kw = dict(chunk_views=6, backend="cuda")
    ref = leveret.fdk(proj, geometry, volume, **kw)
    split: dict = {}
    got = leveret.fdk(proj, geometry, volume, devices=two_workers(), slab_slices=16, stats=split, **kw)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, ref)
    n_gpus = len(set(two_workers().ids))
    assert split["chunks"] == 4 * n_gpus  # each GPU filters every view once, in chunks of 6
    assert 0 < split["busy"] <= 2 * split["wall"] and split["backproject"] > 0
    got_gpu = leveret.fdk(cp.asarray(proj), geometry, volume, devices=two_workers(), **kw)
    assert isinstance(got_gpu, cp.ndarray)
    cp.testing.assert_array_equal(got_gpu, leveret.fdk(cp.asarray(proj), geometry, volume, **kw))


def test_fdk_on_devices_without_room_for_the_filtered_views_filters_per_slab(rng):
    """Where a GPU cannot hold the filtered views (``gpu_memory``: 250 kB
    for arrays, the 184 kB of filtered views and a view's working set do not
    fit beside each other), the views are filtered once into host memory,
    then z-slabs of 7 slices are dealt from one queue, each uploading its
    rows of them: bit-identical to one GPU with the same slabs and view
    chunks. CuPy input: each slab filters its own rows, on one GPU as on
    several."""
    cp = _cupy()
    geometry, volume, proj = _fdk_case(rng)
    kw = dict(slab_slices=7, chunk_views=1, gpu_memory=gpu_memory_for_arrays(250_000), backend="cuda")
    ref = leveret.fdk(proj, geometry, volume, **kw)
    split: dict = {}
    got = leveret.fdk(proj, geometry, volume, devices=two_workers(), stats=split, **kw)
    np.testing.assert_array_equal(got, ref)
    assert split["chunks"] == 5 * 24 + 24  # the slabs' chunks, and the filtering pass's
    assert 0 < split["busy"] <= 2 * split["wall"]  # the slabs' pipelines, two at a time, within the call
    cp.testing.assert_array_equal(
        leveret.fdk(cp.asarray(proj), geometry, volume, devices=two_workers(), **kw),
        leveret.fdk(cp.asarray(proj), geometry, volume, **kw),
    )


def test_fdk_on_one_gpu_in_slabs_runs_two_workers_where_the_filtered_views_fit(rng):
    """One GPU, NumPy in, a volume in slabs that the GPU can hold the filtered
    views beside: two workers share it, bit-identical to asking for them and
    to the one-piece reconstruction with the same view chunks."""
    cp = _cupy()
    geometry, volume, proj = _fdk_case(rng)
    kw = dict(slab_slices=16, chunk_views=6, backend="cuda")
    split: dict = {}
    got = leveret.fdk(proj, geometry, volume, stats=split, **kw)
    assert split["backproject"] > 0  # the workers' path (fdk(devices=...)'s stats)
    pair = dv.DeviceSet([cp.cuda.Device().id] * 2, shared=True)
    np.testing.assert_array_equal(got, leveret.fdk(proj, geometry, volume, devices=pair, **kw))
    np.testing.assert_array_equal(got, leveret.fdk(proj, geometry, volume, chunk_views=6, backend="cuda"))


def test_workers_sharing_a_gpu_share_its_memory_cap(rng, monkeypatch):
    """``gpu_memory`` is per GPU: two workers sharing one plan their slabs
    with half of its arrays' share each."""
    _cupy()
    fdk_module = sys.modules["leveret.algorithms.fdk"]  # leveret.algorithms.fdk is also the function
    geometry, volume, proj = _fdk_case(rng)
    caps, original = [], fdk_module._plan_slabs

    def spy(geometry, volume, backend, array_memory, slab_slices, budget=None):
        caps.append(array_memory)
        return original(geometry, volume, backend, array_memory, slab_slices, budget=budget)

    monkeypatch.setattr(fdk_module, "_plan_slabs", spy)
    arrays = 3_000_000
    cap = gpu_memory_for_arrays(arrays)
    leveret.fdk(proj, geometry, volume, backend="cuda", gpu_memory=cap, devices=dv.DeviceSet([0, 0], shared=True))
    leveret.fdk(proj, geometry, volume, backend="cuda", gpu_memory=cap)
    assert caps == [arrays // 2, arrays]


def test_fdk_on_devices_gives_every_worker_a_slab(rng):
    """Without slab_slices a volume that fits one GPU is still cut, one slab
    per worker (from 16-slice blocks); the result is one GPU's."""
    from leveret.geometry import ConeGeometry, VolumeGeometry

    geometry = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 16, endpoint=False), sid=60, sdd=90, n_rows=30, n_cols=40, pixel_size=1.2
    )
    volume = VolumeGeometry((41, 24, 24), voxel_size=1.5)
    proj = rng.random(geometry.projection_shape).astype(np.float32)
    split: dict = {}
    got = leveret.fdk(proj, geometry, volume, chunk_views=4, backend="cuda", devices=two_workers(), stats=split)
    ref = leveret.fdk(proj, geometry, volume, chunk_views=4, backend="cuda")
    np.testing.assert_array_equal(got, ref)
    assert split["backproject"] > 0


def test_cli_gpus_flag_gives_the_one_gpu_volume(tmp_path, rng):
    from leveret.cli import main

    g = ParallelGeometry(np.linspace(0, np.pi, 60, endpoint=False), 48, n_rows=6)
    np.save(tmp_path / "p.npy", rng.random(g.projection_shape).astype(np.float32))

    def recon(name, *flags):
        assert (
            main(
                [
                    "recon",
                    str(tmp_path / "p.npy"),
                    str(tmp_path / name),
                    "--angles",
                    "0:180:60",
                    "--backend",
                    "cuda",
                    "--no-progress",
                    "-q",
                    *flags,
                ]
            )
            == 0
        )
        return np.load(tmp_path / name)

    np.testing.assert_array_equal(recon("gpus.npy", "--gpus", "0"), recon("one.npy"))
    np.testing.assert_array_equal(recon("all.npy", "--gpus", "all"), recon("one.npy", "--overwrite"))


# -- 3D Radon FBP ----------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["single-stage", "two-stage"])
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_radon3d_fbp_on_devices_is_bit_identical(method, precision, rng):
    """z-slabs of whole 4-slice tiles on two workers; 37 slices (a short last slab)."""
    cp = _cupy()
    from leveret.geometry import RadonGeometry, VolumeGeometry

    g = RadonGeometry.grid(12, 24, 61, spacing=0.05)
    volume = VolumeGeometry((37, 20, 22), voxel_size=0.08)
    proj = rng.random(g.projection_shape)
    kw = dict(volume=volume, method=method, precision=precision, backend="cuda")
    ref = leveret.radon3d_fbp(proj, g, **kw)
    got = leveret.radon3d_fbp(proj, g, devices=two_workers(), **kw)
    assert isinstance(got, np.ndarray) and got.dtype == np.dtype(precision)
    np.testing.assert_array_equal(got, ref)
    got_gpu = leveret.radon3d_fbp(cp.asarray(proj), g, devices=two_workers(), **kw)
    cp.testing.assert_array_equal(got_gpu, leveret.radon3d_fbp(cp.asarray(proj), g, **kw))


# -- back-projection operators -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kernel,precision,interpolation",
    [
        ("auto", "float32", "linear"),  # the ALU kernel, 4 slices per block
        ("auto", "float16", "linear"),  # the hybrid: texture and ALU tiles, half4 texels
        ("texz", "float32", "nearest"),  # float2 texels
        ("texture", "float32", "linear8"),
    ],
)
def test_parallel_backprojection_on_devices_is_bit_identical(kernel, precision, interpolation, rng):
    """37 slices (odd: a last slab shorter than a texel or block) in slabs on
    two workers, against one GPU running the whole stack: NumPy in and out,
    CuPy in and out, and a strided CuPy ``out``."""
    cp = _cupy()
    from leveret.geometry import VolumeGeometry
    from leveret.operators import ParallelBackprojection

    geometry = ParallelGeometry(np.linspace(0, np.pi, 90, endpoint=False), 48)
    volume = VolumeGeometry((37, 40, 44), voxel_size=1.0)
    sinos = rng.standard_normal((37, 90, 48)).astype(np.float32)
    kw = dict(kernel=kernel, precision=precision, interpolation=interpolation, backend="cuda")
    one = ParallelBackprojection(geometry, volume, **kw)
    many = ParallelBackprojection(geometry, volume, devices=two_workers(), **kw)
    ref = one(sinos)
    got = many(sinos)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, ref)
    assert one.last_kernel == many.last_kernel
    got_gpu = many(cp.asarray(sinos))
    assert isinstance(got_gpu, cp.ndarray)
    cp.testing.assert_array_equal(got_gpu, cp.asarray(ref))
    strided = cp.full((37, 40, 88), cp.nan, cp.float32)[:, :, ::2]
    assert many(cp.asarray(sinos), out=strided) is strided
    cp.testing.assert_array_equal(strided, cp.asarray(ref))


@pytest.mark.parametrize(
    "kernel,interpolation",
    [("texture", "linear"), ("ray-hybrid", "linear"), ("quad", "linear32"), ("global", "linear32")],
)
def test_cone_backprojection_on_devices_is_bit_identical(kernel, interpolation, rng):
    """37 slices in slabs of 16-slice blocks on two workers against one GPU:
    NumPy and CuPy, accumulating into ``out``, and a ``slices`` range."""
    cp = _cupy()
    from leveret.geometry import ConeGeometry, VolumeGeometry
    from leveret.operators import ConeBackprojection

    geometry = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 40, endpoint=False), sid=60, sdd=90, n_rows=40, n_cols=48, pixel_size=1.2
    )
    volume = VolumeGeometry((37, 32, 30), voxel_size=1.5)
    proj = rng.standard_normal(geometry.projection_shape).astype(np.float32)
    kw = dict(kernel=kernel, interpolation=interpolation, backend="cuda")
    one = ConeBackprojection(geometry, volume, **kw)
    many = ConeBackprojection(geometry, volume, devices=two_workers(), **kw)
    ref = one(proj)
    got = many(proj)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, ref)
    start = rng.standard_normal(volume.shape).astype(np.float32)
    np.testing.assert_array_equal(
        many(proj, out=start.copy(), accumulate=True), one(proj, out=start.copy(), accumulate=True)
    )
    np.testing.assert_array_equal(
        many(proj, out=start.copy(), slices=(16, 37)), one(proj, out=start.copy(), slices=(16, 37))
    )
    got_gpu = many(cp.asarray(proj))
    assert isinstance(got_gpu, cp.ndarray)
    cp.testing.assert_array_equal(got_gpu, cp.asarray(ref))


def test_operators_write_a_strided_cupy_out(rng):
    """One GPU: a non-contiguous CuPy ``out`` is written through a contiguous
    temporary (accumulating from its values)."""
    cp = _cupy()
    from leveret.geometry import ConeGeometry, VolumeGeometry
    from leveret.operators import ConeBackprojection, ParallelBackprojection

    g = ParallelGeometry(np.linspace(0, np.pi, 30, endpoint=False), 24)
    vol = VolumeGeometry((3, 20, 20), voxel_size=1.0)
    sinos = cp.asarray(rng.standard_normal((3, 30, 24)).astype(np.float32))
    op = ParallelBackprojection(g, vol, backend="cuda")
    out = cp.full((3, 20, 40), cp.nan, cp.float32)[:, :, 1::2]
    assert op(sinos, out=out) is out
    cp.testing.assert_array_equal(out, op(sinos))
    cg = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 12, endpoint=False), sid=60, sdd=90, n_rows=20, n_cols=24, pixel_size=1.2
    )
    cvol = VolumeGeometry((8, 16, 16), voxel_size=1.5)
    proj = cp.asarray(rng.standard_normal(cg.projection_shape).astype(np.float32))
    cop = ConeBackprojection(cg, cvol, backend="cuda")
    base = cp.asarray(rng.standard_normal((8, 16, 32)).astype(np.float32))
    untouched = base[:, :, 1::2].copy()
    out = base[:, :, ::2]
    expected = out.copy()
    cop(proj, out=expected, accumulate=True)
    assert cop(proj, out=out, accumulate=True) is out
    cp.testing.assert_array_equal(out, expected)
    cp.testing.assert_array_equal(base[:, :, 1::2], untouched)  # the columns between stay as they were
