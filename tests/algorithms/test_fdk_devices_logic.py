"""fdk's several-GPU path (``_fdk_devices_filter_once``) run on the CPU: two
workers of one stand-in GPU or two stand-in GPUs (tests/stand_in_cupy.py),
the back-projection on the CPU backend (``linear8``,
which computes a slab with the whole volume's arithmetic). What this checks
without a GPU: each view's rows filtered once per GPU, chunks added to every
slab in chunk order, slabs downloaded, and the result equal to a one-call
fdk. Ordering between real CUDA streams is checked by tests/test_devices_gpu.py."""

from __future__ import annotations

import importlib
import threading

import numpy as np
import pytest
import stand_in_cupy

from leveret.cuda import devices
from leveret.geometry import ConeGeometry, VolumeGeometry

fdk_module = importlib.import_module(
    "leveret.algorithms.fdk"
)  # the module: leveret.algorithms.fdk is also the function


@pytest.fixture
def fake_gpu(monkeypatch):
    stand_in_cupy.install(monkeypatch, n_gpus=2)
    import leveret.operators.cone as cone

    monkeypatch.setattr(cone, "slab_alias", stand_in_cupy.slab_alias)
    filtered = []  # (first view, rows) of every weighting call
    lock = threading.Lock()
    weigh = fdk_module.FDKWeighting.__call__

    def counting(self, raw, views, row0=0):
        with lock:
            filtered.append((views.start, raw.shape[0] * raw.shape[1]))
        return weigh(self, raw, views, row0)

    monkeypatch.setattr(fdk_module.FDKWeighting, "__call__", counting)
    return filtered


@pytest.mark.parametrize("ids", [[0, 0], [0, 1]])
def test_each_gpu_filters_its_rows_once_and_the_volume_matches_one_call(fake_gpu, rng, ids):
    """[0, 0]: two workers of one GPU share its filtered views across three
    slabs; [0, 1]: each GPU filters the rows of its own z range."""
    geometry = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 24, endpoint=False), sid=60, sdd=90, n_rows=80, n_cols=48, pixel_size=1.2
    )
    volume = VolumeGeometry((37, 32, 32), voxel_size=1.0)
    proj = rng.random(geometry.projection_shape).astype(np.float32)
    ds = devices.DeviceSet(ids, shared=True)
    plan = fdk_module.plan_devices(geometry, volume, ds, chunk_views=5, slab_slices=16, free_bytes=lambda d: 1 << 30)
    assert sum(len(p.slabs) for p in plan) == 3
    stats: dict = {}
    settings = dict(
        filter="ram-lak",
        cutoff=1.0,
        padding="zero",
        short_scan="auto",
        interpolation="linear8",
        kernel="auto",
        backend="cpu",
        dtype=np.float32,
        chunk_views=5,
        fixed_chunks=True,
    )
    got = fdk_module._fdk_devices_filter_once(ds, plan, proj, geometry, volume, progress=False, stats=stats, **settings)
    # every view's rows weighted and filtered once per GPU, whatever its slabs and workers
    assert sorted(start for start, _ in fake_gpu) == sorted(list(range(0, 24, 5)) * len(plan))
    assert sum(rows for _, rows in fake_gpu) == geometry.n_views * sum(p.filtered_rows for p in plan)
    assert stats["chunks"] == 5 * len(plan) and stats["busy"] > 0 and stats["backproject"] > 0
    ref = fdk_module.fdk(proj, geometry, volume, backend="cpu", interpolation="linear8", chunk_views=5)
    np.testing.assert_array_equal(got, ref)


def test_the_output_is_not_kept_alive_after_the_call(fake_gpu, rng):
    """Nothing the call leaves in a reference cycle holds the volume: on a
    GPU host a 32 GiB output would otherwise stay allocated until the cyclic
    garbage collector happened to run."""
    import gc
    import sys

    geometry = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 12, endpoint=False), sid=60, sdd=90, n_rows=40, n_cols=32, pixel_size=1.2
    )
    volume = VolumeGeometry((20, 24, 24), voxel_size=1.0)
    proj = rng.random(geometry.projection_shape).astype(np.float32)
    ds = devices.DeviceSet([0, 0], shared=True)
    plan = fdk_module.plan_devices(geometry, volume, ds, chunk_views=4, slab_slices=16, free_bytes=lambda d: 1 << 30)
    settings = dict(
        filter="ram-lak",
        cutoff=1.0,
        padding="zero",
        short_scan="auto",
        interpolation="linear8",
        kernel="auto",
        backend="cpu",
        dtype=np.float32,
        chunk_views=4,
        fixed_chunks=True,
    )
    gc.collect()
    gc.disable()
    try:
        got = fdk_module._fdk_devices_filter_once(
            ds, plan, proj, geometry, volume, progress=False, stats=None, **settings
        )
        assert sys.getrefcount(got) == 2  # the name and getrefcount's argument: nobody else
    finally:
        gc.enable()


def test_filtered_chunks_are_back_projected_several_per_call_unless_chunks_are_given(fake_gpu, rng, monkeypatch):
    """A slab taken once its chunks are filtered adds them several per call
    (up to ``_call_views``: 4 x 2 views here), each view once and in order;
    with ``chunk_views`` given (``fixed_chunks``) every call is one chunk, as
    a one-GPU call adds them."""
    import leveret.operators.cone as cone

    geometry = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 24, endpoint=False), sid=60, sdd=90, n_rows=40, n_cols=48, pixel_size=1.2
    )
    volume = VolumeGeometry((48, 32, 32), voxel_size=1.0)
    proj = rng.random(geometry.projection_shape).astype(np.float32)
    calls = []  # (first slice, first view, view stop) of every back-projection call
    lock = threading.Lock()
    backproject = cone.ConeBackprojection.__call__

    def recording(self, projections, out=None, *, views=slice(None), accumulate=False, slices=None):
        with lock:
            calls.append((slices[0], views.start, views.stop))
        return backproject(self, projections, out, views=views, accumulate=accumulate, slices=slices)

    ref = fdk_module.fdk(proj, geometry, volume, backend="cpu", interpolation="linear8", chunk_views=2)
    monkeypatch.setattr(cone.ConeBackprojection, "__call__", recording)
    for fixed in (False, True):
        calls.clear()
        ds = devices.DeviceSet([0, 0], shared=True)
        plan = fdk_module.plan_devices(
            geometry, volume, ds, chunk_views=2, slab_slices=16, free_bytes=lambda d: 1 << 30
        )
        settings = dict(
            filter="ram-lak",
            cutoff=1.0,
            padding="zero",
            short_scan="auto",
            interpolation="linear8",
            kernel="auto",
            backend="cpu",
            dtype=np.float32,
            chunk_views=2,
            fixed_chunks=fixed,
        )
        got = fdk_module._fdk_devices_filter_once(
            ds, plan, proj, geometry, volume, progress=False, stats=None, **settings
        )
        for k0 in (0, 16, 32):  # each slab: every view once, in order (its last call in download pieces)
            ranges = sorted({(a, b) for k, a, b in calls if k // 16 * 16 == k0})
            assert [a for a, _ in ranges] == [0] + [b for _, b in ranges[:-1]] and ranges[-1][1] == 24
        widths = {b - a for _, a, b in calls}
        if fixed:
            assert widths == {2}
            np.testing.assert_array_equal(got, ref)
        else:
            assert max(widths) == 8 and widths <= set(range(1, 9))
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())
