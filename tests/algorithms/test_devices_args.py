"""``fbp``, ``fdk``, ``radon3d_fbp`` ``devices=`` argument checks that need no GPU (the GPU results are
in tests/test_devices_gpu.py)."""
from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import devices
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
    geometry = ConeGeometry.circular(np.linspace(0, 2 * np.pi, 8, endpoint=False), sid=60, sdd=90,
                                     n_rows=10, n_cols=12, pixel_size=1.0)
    volume = VolumeGeometry((6, 8, 8), voxel_size=1.0)
    with pytest.raises(ValueError, match=r"^devices: runs on CUDA GPUs, but the backend is 'cpu'"):
        leveret.fdk(np.zeros(geometry.projection_shape, np.float32), geometry, volume, backend="cpu",
                    devices=[0, 1])


def test_radon3d_fbp_devices_with_the_cpu_backend_is_refused(monkeypatch):
    from leveret.geometry import RadonGeometry
    monkeypatch.setattr(devices, "visible_device_count", lambda: 2)
    g = RadonGeometry.grid(4, 8, 9, spacing=0.1)
    with pytest.raises(ValueError, match=r"^devices: runs on CUDA GPUs, but the backend is 'cpu'"):
        leveret.radon3d_fbp(np.zeros(g.projection_shape), g, backend="cpu", devices=[0, 1])
