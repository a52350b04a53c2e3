"""The pipeline's GPU stages' bookkeeping on the CPU, with stand-in GPUs
(tests/stand_in_cupy.py) whose reconstruction is the CPU's: the raw rows go
up as stored from pinned buffers and those go back to their pool, the output
dtype is made "on the device" and comes down into pinned buffers, workers of
several GPUs pull slabs from one queue, the split has upload and download.
What real streams and kernels do is in test_e2e_gpu.py."""

from __future__ import annotations

import types

import numpy as np
import pytest

import leveret
import stand_in_cupy
from leveret import phantom
from leveret.execution import pipeline, slab
from leveret.io import SlabWriter, read_array


@pytest.fixture
def gpus(monkeypatch):
    stand_in_cupy.install(monkeypatch, n_gpus=2)
    monkeypatch.setattr(
        stand_in_cupy.DeviceArray, "set", lambda self, a, stream=None: np.copyto(self, a), raising=False
    )
    real = slab.reconstruct_slab
    calls = []

    def on_device(rows_data, geometry, volume, region, *, flats=None, darks=None, backend, stats=None, **kw):
        if backend == "cpu":  # the CPU pipeline beside
            return real(
                rows_data, geometry, volume, region, flats=flats, darks=darks, backend=backend, stats=stats, **kw
            )
        assert isinstance(rows_data, stand_in_cupy.DeviceArray)
        assert flats is None or isinstance(flats, stand_in_cupy.DeviceArray)  # uploaded once per GPU
        calls.append((tuple(region), rows_data.dtype))
        out = real(
            np.asarray(rows_data),
            geometry,
            volume,
            region,
            backend="cpu",
            stats=stats,
            flats=None if flats is None else np.asarray(flats),
            darks=None if darks is None else np.asarray(darks),
            **kw,
        )
        return stand_in_cupy.device_array(out)

    monkeypatch.setattr(slab, "reconstruct_slab", on_device)
    return calls


@pytest.fixture(scope="module")
def raw_scan():
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 60, endpoint=False), 48, n_rows=16)
    lines = phantom.shepp_logan_3d(radius=20.0).project(g)
    rng = np.random.default_rng(1)
    dark = rng.uniform(90, 110, (2, 16, 48)).astype(np.float32)
    flat = dark.mean(0) + rng.uniform(9000, 11000, (3, 16, 48)).astype(np.float32)
    counts = np.round(dark.mean(0) + (flat.mean(0) - dark.mean(0)) * np.exp(-0.05 * lines)).astype(np.uint16)
    return g, counts, flat, dark


def _run(tmp_path, name, raw_scan, *, backend, devices=None, dtype=np.float32, value_range=None):
    g, counts, flat, dark = raw_scan
    vol = g.default_volume()
    with SlabWriter(tmp_path / name, vol.shape, dtype) as writer:
        p = pipeline.Pipeline(
            counts,
            g,
            vol,
            writer,
            backend=backend,
            devices=devices,
            flats=flat,
            darks=dark,
            value_range=value_range,
            slab_slices=2,
            read_threads=2,
            checksum=True,
        )
        split = p.run(writer.todo(2))
        writer.finish()
    return p, split, read_array(tmp_path / name)


@pytest.mark.parametrize("dtype,value_range", [(np.float32, None), (np.uint16, (-0.01, 0.05)), (np.float16, None)])
def test_the_gpu_stages_give_the_cpu_stages_volume(tmp_path, gpus, raw_scan, dtype, value_range):
    p, split, out = _run(tmp_path, "g.npy", raw_scan, backend="cuda", dtype=dtype, value_range=value_range)
    _, _, ref = _run(tmp_path, "c.npy", raw_scan, backend="cpu", dtype=dtype, value_range=value_range)
    np.testing.assert_array_equal(out, ref)
    assert all(dtype_ == np.uint16 for _, dtype_ in gpus)  # the counts went up as stored
    assert sorted(region for region, _ in gpus) == [(k, k + 2) for k in range(0, 16, 2)]
    band = sum(r1 - r0 for r0, r1 in (slab.slab_rows(p.geometry, p.volume, (k, k + 2)) for k in range(0, 16, 2)))
    assert split["upload"]["bytes"] == split["read"]["bytes"] == 60 * band * 48 * 2
    assert split["download"]["bytes"] == out.nbytes
    assert p.slabs_done == 8 and p.retries == 0


def test_the_staging_buffers_are_pinned_few_and_given_back(tmp_path, gpus, raw_scan, monkeypatch):
    from leveret.cuda.pipeline import is_pinned

    made = []
    real = pipeline.Buffers._make

    def record(self):
        block = real(self)
        made.append((self.pinned, is_pinned(block)))
        return block

    monkeypatch.setattr(pipeline.Buffers, "_make", record)
    p, _, _ = _run(tmp_path, "g.npy", raw_scan, backend="cuda")
    raws, outs = pipeline.in_flight(pipeline.WORKERS_PER_GPU)
    assert made and all(pinned and locked for pinned, locked in made)
    assert len(made) <= raws + outs
    assert len(p._raw_pool._free) == 0 and p._raw_pool._made <= raws  # all handed back, then let go


def test_workers_of_two_gpus_share_one_queue(tmp_path, gpus, raw_scan, monkeypatch):
    seen = []
    real_build = pipeline._GpuStage.build

    def build(self, slab_, *args):
        seen.append(self.device)
        return real_build(self, slab_, *args)

    monkeypatch.setattr(pipeline._GpuStage, "build", build)
    devices = types.SimpleNamespace(ids=[0, 1])
    p, split, out = _run(tmp_path, "two.npy", raw_scan, backend="cuda", devices=devices)
    _, _, ref = _run(tmp_path, "c.npy", raw_scan, backend="cpu")
    np.testing.assert_array_equal(out, ref)
    assert set(seen) <= {0, 1} and len(seen) == 8
    assert split["reconstruct"]["lanes"] == 2  # two GPUs side by side


def test_an_out_of_memory_slab_on_a_gpu_is_rebuilt_in_halves(tmp_path, gpus, raw_scan, monkeypatch):
    from cases import CupyOutOfMemoryError

    on_device = slab.reconstruct_slab

    def squeezed(rows_data, geometry, volume, region, **kw):
        if region[1] - region[0] > 1:
            raise CupyOutOfMemoryError("out of memory")
        return on_device(rows_data, geometry, volume, region, **kw)

    monkeypatch.setattr(slab, "reconstruct_slab", squeezed)
    monkeypatch.setattr(slab, "_free_gpu_pool", lambda: None)
    p, _, out = _run(tmp_path, "g.npy", raw_scan, backend="cuda")
    monkeypatch.setattr(slab, "reconstruct_slab", on_device)
    _, _, ref = _run(tmp_path, "c.npy", raw_scan, backend="cpu")
    np.testing.assert_array_equal(out, ref)
    assert p.retries == 8 and p.smallest == 1


@pytest.mark.parametrize("backend", ["cuda", "cpu"])
def test_the_slices_sampled_for_a_range_are_those_the_run_stores(tmp_path, gpus, raw_scan, backend):
    g, counts, flat, dark = raw_scan
    sample = pipeline.sample_range(
        counts, g, g.default_volume(), (4, 6), backend=backend, output_dtype="uint16", flats=flat, darks=dark
    )
    _, _, ref = _run(tmp_path, "c.npy", raw_scan, backend="cpu", dtype=np.uint16, value_range=sample.value_range)
    assert type(sample.slices) is np.ndarray and sample.slices.dtype == np.uint16
    np.testing.assert_array_equal(sample.slices, ref[4:6])
    assert gpus == ([((4, 6), np.uint16)] if backend == "cuda" else [])
