"""The disk-to-disk pipeline's GPU stages: raw counts uploaded as stored and
preprocessed on the GPU (flat/dark, -log, stripes), the output dtype made
there, several workers (and GPUs) pulling slabs from one queue, pinned
buffers, the stage split. Each against the CPU pipeline or the in-memory
CUDA reconstruction."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.execution import pipeline
from leveret.execution.outofcore import reconstruct_to_file
from leveret.io import read_array, read_metadata
from leveret.io.quantize import dequantize

pytestmark = pytest.mark.gpu


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def raw_scan():
    """uint16 counts with flats and darks, as a detector gives them (the off-centre axis
    makes slices differ)."""
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 180, endpoint=False), 128, n_rows=40, center=65.5)
    lines = phantom.shepp_logan_3d(radius=55.0).project(g)
    rng = np.random.default_rng(3)
    dark = rng.uniform(90, 110, (3, 40, 128)).astype(np.float32)
    flat = dark.mean(0) + rng.uniform(18000, 22000, (5, 40, 128)).astype(np.float32)
    counts = np.round(dark.mean(0) + (flat.mean(0) - dark.mean(0)) * np.exp(-0.05 * lines)).astype(np.uint16)
    return g, counts, flat, dark


def test_raw_counts_preprocessed_on_the_gpu_equal_the_cpu_pipeline(tmp_path, raw_scan):
    g, counts, flat, dark = raw_scan
    on_cpu = reconstruct_to_file(counts, g, tmp_path / "c.h5", flats=flat, darks=dark, backend="cpu", slab_slices=8)
    on_gpu = reconstruct_to_file(counts, g, tmp_path / "g.h5", flats=flat, darks=dark, backend="cuda", slab_slices=8)
    # the exact kernel's bound on the reconstruction; flat/dark and -log are the same float32 operations
    assert rel(read_array(tmp_path / "g.h5"), read_array(tmp_path / "c.h5")) < 1e-5
    stages = on_gpu.stages
    assert {"read", "upload", "preprocess", "reconstruct", "download", "write"} <= set(stages)
    from leveret.execution.slab import slab_rows

    band_rows = sum(r1 - r0 for r0, r1 in (slab_rows(g, g.default_volume(), (k, k + 8)) for k in range(0, 40, 8)))
    # the raw uint16 rows go up as read: half the bytes of float32
    assert stages["upload"]["bytes"] == stages["read"]["bytes"] == 180 * band_rows * 128 * 2
    assert stages["download"]["bytes"] == g.default_volume().size * 4
    assert on_cpu.stages.keys().isdisjoint({"upload", "download"})


def test_stripes_on_the_gpu_equal_the_cpu(tmp_path, raw_scan):
    g, counts, flat, dark = raw_scan
    kw = dict(flats=flat, darks=dark, stripes="sort", slab_slices=10)
    reconstruct_to_file(counts, g, tmp_path / "c.npy", backend="cpu", **kw)
    reconstruct_to_file(counts, g, tmp_path / "g.npy", backend="cuda", **kw)
    assert rel(np.load(tmp_path / "g.npy"), np.load(tmp_path / "c.npy")) < 1e-5


@pytest.mark.parametrize("dtype", ["uint16", "uint8", "float16"])
def test_the_output_dtype_made_on_the_gpu_equals_the_cpu_s(tmp_path, raw_scan, dtype):
    g, counts, flat, dark = raw_scan
    kw = dict(flats=flat, darks=dark, slab_slices=8, output_dtype=dtype)
    if dtype != "float16":
        kw["output_range"] = (-0.01, 0.06)
    reconstruct_to_file(counts, g, tmp_path / "f.npy", flats=flat, darks=dark, backend="cuda", slab_slices=8)
    reconstruct_to_file(counts, g, tmp_path / "q.h5", backend="cuda", **kw)
    stored = read_array(tmp_path / "q.h5")
    assert stored.dtype == dtype
    from leveret.io.quantize import quantize

    expected = quantize(np.load(tmp_path / "f.npy"), dtype, kw.get("output_range"))
    # the same float32 values rounded the same way (rint on both): equal, but for a value at a half step
    assert np.abs(stored.astype(np.float64) - expected.astype(np.float64)).max() <= (1 if dtype != "float16" else 0)
    if dtype != "float16":
        assert read_metadata(tmp_path / "q.h5")["value_range"] == [-0.01, 0.06]


def test_the_automatic_range_is_sampled_on_the_gpu(tmp_path, raw_scan):
    g, counts, flat, dark = raw_scan
    res = reconstruct_to_file(
        counts, g, tmp_path / "q.h5", flats=flat, darks=dark, backend="cuda", output_dtype="uint16"
    )
    ref = leveret.fbp(
        -np.log((counts - dark.mean(0)) / (flat.mean(0) - dark.mean(0))).astype(np.float32), g, backend="cuda"
    )
    lo, hi = res.value_range
    assert lo < np.percentile(ref, 1) and hi > np.percentile(ref, 99)
    back = dequantize(read_array(tmp_path / "q.h5"), read_metadata(tmp_path / "q.h5"))
    inside = (ref > lo) & (ref < hi)
    assert np.abs(back - ref)[inside].max() < (hi - lo) / 65535 + 1e-5
    # the sampled slices, written as sampled, are those the pipeline makes; made as a slab of their
    # own, the GPU (its FFT batch, its kernel tiles) may round a value an ulp apart: one step at a half step
    reconstruct_to_file(
        counts,
        g,
        tmp_path / "r.h5",
        flats=flat,
        darks=dark,
        backend="cuda",
        output_dtype="uint16",
        output_range=(lo, hi),
    )
    steps = read_array(tmp_path / "q.h5").astype(np.int32) - read_array(tmp_path / "r.h5")
    assert np.abs(steps).max() <= 1 and np.count_nonzero(steps) < 1e-3 * steps.size


def test_several_workers_on_one_gpu_give_the_one_worker_volume_bit_for_bit(tmp_path, raw_scan):
    """Each slab is reconstructed the same way wherever it runs: four workers
    (a DeviceSet of GPU 0 twice, two workers each) equal the default two."""
    import cupy

    from leveret.cuda.devices import DeviceSet

    g, counts, flat, dark = raw_scan
    one = reconstruct_to_file(counts, g, tmp_path / "a.npy", flats=flat, darks=dark, backend="cuda", slab_slices=4)
    dev = cupy.cuda.Device().id
    two = reconstruct_to_file(
        counts,
        g,
        tmp_path / "b.npy",
        flats=flat,
        darks=dark,
        backend="cuda",
        slab_slices=4,
        devices=DeviceSet([dev, dev], shared=True),
    )
    np.testing.assert_array_equal(np.load(tmp_path / "b.npy"), np.load(tmp_path / "a.npy"))
    assert one.slabs_done == two.slabs_done == 10


def test_the_staging_buffers_are_pinned_and_reused(tmp_path, raw_scan, monkeypatch):
    from leveret.cuda.pipeline import is_pinned

    g, counts, flat, dark = raw_scan
    made = []
    real = pipeline.Buffers._make

    def record(self):
        block = real(self)
        made.append(is_pinned(block))
        return block

    monkeypatch.setattr(pipeline.Buffers, "_make", record)
    res = reconstruct_to_file(counts, g, tmp_path / "r.npy", flats=flat, darks=dark, backend="cuda", slab_slices=2)
    raws, outs = pipeline.in_flight(pipeline.WORKERS_PER_GPU)
    assert res.slabs_done == 20 and all(made) and 2 <= len(made) <= raws + outs  # 20 slabs, few buffers


def test_two_gpus_take_slabs_from_one_queue(tmp_path, raw_scan):
    from leveret.cuda.devices import visible_device_count

    if visible_device_count() < 2:
        pytest.skip("needs two GPUs")
    g, counts, flat, dark = raw_scan
    reconstruct_to_file(counts, g, tmp_path / "a.npy", flats=flat, darks=dark, backend="cuda", slab_slices=4)
    res = reconstruct_to_file(
        counts, g, tmp_path / "b.npy", flats=flat, darks=dark, backend="cuda", slab_slices=4, devices="all"
    )
    np.testing.assert_array_equal(np.load(tmp_path / "b.npy"), np.load(tmp_path / "a.npy"))
    assert res.stages["reconstruct"]["lanes"] >= 2


def test_cone_slabs_through_the_gpu_pipeline_equal_fdk(tmp_path):
    g = leveret.ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 120, endpoint=False), sid=300, sdd=600, n_rows=64, n_cols=96, pixel_size=1.0
    )
    v = leveret.VolumeGeometry((32, 64, 64), 0.6)
    proj = phantom.shepp_logan_3d(radius=18.0).project(g).astype(np.float32)
    ref = leveret.fdk(proj, g, v, backend="cuda")
    res = reconstruct_to_file(proj, g, tmp_path / "c.h5", volume=v, backend="cuda", slab_slices=6)
    assert "upload" in res.stages and res.retries == 0
    assert rel(read_array(tmp_path / "c.h5"), ref) < 2e-4  # test_outofcore_gpu's bound for slabs vs whole
