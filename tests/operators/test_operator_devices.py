"""``devices=`` on ParallelBackprojection and ConeBackprojection: the checks
and the slab dealing that need no GPU (the GPU results are in
tests/test_devices_gpu.py)."""

from __future__ import annotations

import numpy as np
import pytest

from leveret.cuda import devices
from leveret.geometry import ConeGeometry, ParallelGeometry, VolumeGeometry
from leveret.operators import ConeBackprojection, ParallelBackprojection
from leveret.operators.parallel import slab_alignment

PARALLEL = (ParallelGeometry(np.linspace(0, np.pi, 12, endpoint=False), 16), VolumeGeometry((5, 16, 16)))
CONE = (
    ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 8, endpoint=False), sid=60, sdd=90, n_rows=10, n_cols=12, pixel_size=1.0
    ),
    VolumeGeometry((6, 8, 8), voxel_size=1.0),
)


@pytest.mark.parametrize("cls,case", [(ParallelBackprojection, PARALLEL), (ConeBackprojection, CONE)])
def test_devices_with_the_cpu_backend_is_refused(monkeypatch, cls, case):
    monkeypatch.setattr(devices, "visible_device_count", lambda: 2)
    with pytest.raises(ValueError, match=r"^devices: runs on CUDA GPUs, but the backend is 'cpu'"):
        cls(*case, backend="cpu", devices=[0, 1])
    with pytest.raises(ValueError, match=r"^devices: GPU 2 does not exist"):
        cls(*case, backend="cpu", devices=[2])


@pytest.mark.parametrize("cls,case", [(ParallelBackprojection, PARALLEL), (ConeBackprojection, CONE)])
def test_devices_none_runs_on_the_cpu_and_repr_omits_it(cls, case):
    op = cls(*case, backend="cpu")
    assert op.devices is None and "devices" not in repr(op)


@pytest.mark.parametrize(
    "config,expected",
    [
        ({"kernel": "alu", "tile": 32, "nv": 4}, 4),
        ({"kernel": "alu", "tile": 64, "nv": 2}, 2),
        ({"kernel": "alu", "tile": 64, "nv": 1}, 1),
        ({"kernel": "hybrid", "tile": 32, "packing": "half4", "ratio": (2, 3)}, 4),
        ({"kernel": "texz", "packing": "float2", "nq": 8}, 2),
        ({"kernel": "texture", "packing": "float"}, 1),
    ],
)
def test_parallel_slabs_align_to_the_slices_of_a_texel_or_block(config, expected):
    assert slab_alignment(config) == expected


def test_the_kernel_choice_depends_on_the_slices_in_a_call():
    """Why the several-GPU path chooses the kernel once for the whole stack:
    a slab of 2 slices alone would run another configuration (the hybrid's
    texture/ALU ratio, half2 texels) than the 37-slice stack it belongs to."""
    geometry, volume = PARALLEL
    op = ParallelBackprojection(geometry, volume, backend="cpu", precision="float16")
    whole, slab = op.default_config(37), op.default_config(2)
    assert whole != slab
    assert whole["ratio"] == (2, 3) and slab["ratio"] == (1, 2)
