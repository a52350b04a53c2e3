"""``Projector(devices=...)`` argument checks that need no GPU (the GPU
results are in tests/test_devices_gpu.py)."""

from __future__ import annotations

import pytest

from leveret.cuda import devices
from leveret.operators import Projector

from cases import GEOMETRIES


def test_devices_without_a_gpu_names_devices(monkeypatch):
    monkeypatch.setattr(devices, "visible_device_count", lambda: 0)
    geometry, volume = GEOMETRIES["parallel2d"]
    with pytest.raises(ValueError, match=r"^devices: 'all' needs a CUDA GPU"):
        Projector(geometry, volume, devices="all")
    with pytest.raises(ValueError, match=r"^devices: \[0, 1\] needs a CUDA GPU"):
        Projector(geometry, volume, devices=[0, 1])


def test_devices_with_the_cpu_backend_is_refused(monkeypatch):
    monkeypatch.setattr(devices, "visible_device_count", lambda: 2)
    geometry, volume = GEOMETRIES["cone_circular"]
    with pytest.raises(ValueError, match=r"^devices: runs on CUDA GPUs, but the backend is 'cpu'"):
        Projector(geometry, volume, backend="cpu", devices=[0, 1])


def test_devices_beyond_the_host_names_devices(monkeypatch):
    monkeypatch.setattr(devices, "visible_device_count", lambda: 2)
    geometry, volume = GEOMETRIES["cone_circular"]
    with pytest.raises(ValueError, match=r"^devices: GPU 7 does not exist"):
        Projector(geometry, volume, backend="cpu", devices=[7])
    with pytest.raises(ValueError, match=r"^devices: GPU 1 is listed more than once"):
        Projector(geometry, volume, backend="cpu", devices=[1, 1])


def test_devices_none_is_the_default():
    geometry, volume = GEOMETRIES["parallel3d"]
    A = Projector(geometry, volume, backend="cpu")
    assert A.devices is None and "devices" not in repr(A)
