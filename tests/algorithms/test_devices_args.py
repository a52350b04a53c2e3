"""``fbp``, ``fdk``, ``radon3d_fbp`` ``devices=`` argument checks that need no GPU (the GPU results are
in tests/test_devices_gpu.py)."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret.cuda import devices
from leveret.geometry import ParallelGeometry

GEOMETRY = ParallelGeometry(np.linspace(0, np.pi, 12, endpoint=False), 16, n_rows=3)


def test_fbp_devices_without_a_gpu_names_devices(monkeypatch):
    monkeypatch.setattr(devices, "visible_device_count", lambda: 0)
    with pytest.raises(ValueError, match=r"^devices: 'all' needs a CUDA GPU"):
        leveret.fbp(np.zeros(GEOMETRY.projection_shape), GEOMETRY, devices="all")


def test_fbp_devices_with_the_cpu_backend_is_refused(monkeypatch):
    monkeypatch.setattr(devices, "visible_device_count", lambda: 2)
    with pytest.raises(ValueError, match=r"^devices: runs on CUDA GPUs, but the backend is 'cpu'"):
        leveret.fbp(np.zeros(GEOMETRY.projection_shape), GEOMETRY, backend="cpu", devices=[0, 1])
    with pytest.raises(ValueError, match=r"^devices: GPU 2 does not exist"):
        leveret.fbp(np.zeros(GEOMETRY.projection_shape), GEOMETRY, backend="cpu", devices=[2])


def test_fdk_devices_with_the_cpu_backend_is_refused(monkeypatch):
    from leveret.geometry import ConeGeometry, VolumeGeometry

    monkeypatch.setattr(devices, "visible_device_count", lambda: 2)
    geometry = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 8, endpoint=False), sid=60, sdd=90, n_rows=10, n_cols=12, pixel_size=1.0
    )
    volume = VolumeGeometry((6, 8, 8), voxel_size=1.0)
    with pytest.raises(ValueError, match=r"^devices: runs on CUDA GPUs, but the backend is 'cpu'"):
        leveret.fdk(np.zeros(geometry.projection_shape, np.float32), geometry, volume, backend="cpu", devices=[0, 1])


def test_radon3d_fbp_devices_with_the_cpu_backend_is_refused(monkeypatch):
    from leveret.geometry import RadonGeometry

    monkeypatch.setattr(devices, "visible_device_count", lambda: 2)
    g = RadonGeometry.grid(4, 8, 9, spacing=0.1)
    with pytest.raises(ValueError, match=r"^devices: runs on CUDA GPUs, but the backend is 'cpu'"):
        leveret.radon3d_fbp(np.zeros(g.projection_shape), g, backend="cpu", devices=[0, 1])


# -- fdk on several GPUs: the plan (which GPU filters which rows) ------------------------------------


class _Devices:
    """Stands for a DeviceSet: only ``ids`` is read by the plan."""

    def __init__(self, ids):
        self.ids = tuple(ids)


def _cone_case():
    from leveret.geometry import ConeGeometry, VolumeGeometry

    geometry = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 24, endpoint=False), sid=60, sdd=90, n_rows=80, n_cols=48, pixel_size=1.2
    )
    return geometry, VolumeGeometry((70, 32, 32), voxel_size=1.0)


def test_fdk_on_one_shared_gpu_filters_each_row_once_whatever_the_slabs():
    """Two workers of one GPU, slabs of 16 slices: the rows filtered per view
    are the rows the whole volume sees, not the sum over slabs (which counts
    the rows neighbouring slabs share again)."""
    from leveret.algorithms.fdk import plan_devices
    from leveret.algorithms.fdk_weights import rows_seen

    geometry, volume = _cone_case()
    plan = plan_devices(geometry, volume, _Devices([0, 0]), chunk_views=6, slab_slices=16, free_bytes=lambda d: 1 << 30)
    assert len(plan) == 1 and plan[0].z == (0, 70) and plan[0].workers == 2
    assert plan[0].slabs == [(0, 16), (16, 32), (32, 48), (48, 64), (64, 70)]
    r0, r1 = rows_seen(geometry, volume)
    assert sum(p.filtered_rows for p in plan) == r1 - r0
    per_slab = sum(np.subtract(*rows_seen(geometry, volume.slab(*s))[::-1]) for s in plan[0].slabs)
    assert per_slab > r1 - r0  # what filtering per slab costs


def test_fdk_on_two_gpus_splits_z_into_contiguous_aligned_ranges():
    from leveret.algorithms.fdk import plan_devices
    from leveret.algorithms.fdk_weights import rows_seen

    geometry, volume = _cone_case()
    plan = plan_devices(geometry, volume, _Devices([0, 1]), chunk_views=6, free_bytes=lambda d: 1 << 30)
    assert [p.device for p in plan] == [0, 1]
    assert [p.z for p in plan] == [(0, 32), (32, 70)]
    assert all(p.slabs == [p.z] for p in plan)  # one worker per GPU, room for its whole range
    assert [p.rows for p in plan] == [rows_seen(geometry, volume.slab(*p.z)) for p in plan]
    # each GPU filters its own rows: their overlap is filtered on both, nothing else twice
    r0, r1 = rows_seen(geometry, volume)
    overlap = plan[0].rows[1] - plan[1].rows[0]
    assert sum(p.filtered_rows for p in plan) == (r1 - r0) + overlap


def test_fdk_plan_gives_up_where_a_gpu_cannot_hold_the_filtered_views():
    from leveret.algorithms.fdk import plan_devices

    geometry, volume = _cone_case()
    views = geometry.n_views * geometry.n_rows * geometry.n_cols * 4
    assert plan_devices(geometry, volume, _Devices([0, 1]), chunk_views=6, free_bytes=lambda d: views) is None
    assert (
        plan_devices(
            geometry, volume, _Devices([0, 1]), chunk_views=6, array_memory=views, free_bytes=lambda d: 1 << 30
        )
        is None
    )


def test_fdk_weighting_of_some_rows_equals_those_rows_of_every_row():
    """``row0``: rows 17..52 weighted and filtered alone equal the same rows
    of the whole detector's (what lets each GPU filter only its rows)."""
    from leveret.algorithms.fdk_weights import FDKWeighting

    geometry, _ = _cone_case()
    raw = np.random.default_rng(3).standard_normal(geometry.projection_shape).astype(np.float32)
    weighting = FDKWeighting(geometry)
    whole = weighting(raw.copy(), slice(None))
    part = weighting(raw[:, 17:53].copy(), slice(None), row0=17)
    np.testing.assert_array_equal(part, whole[:, 17:53])
