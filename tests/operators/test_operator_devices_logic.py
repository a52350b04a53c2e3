"""``devices=`` on ParallelBackprojection and ConeBackprojection run on the
CPU: two stand-in GPUs (tests/stand_in_cupy.py) whose kernels are the CPU
backend's, NumPy in and out. What this checks without a GPU: the slabs and
where their edges fall, the kernel configuration every slab runs, that each
slab lands where it belongs (accumulating, a ``slices`` range). The CUDA
results are in tests/test_devices_gpu.py."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import stand_in_cupy

from leveret.cuda.devices import DeviceSet
from leveret.geometry import ConeGeometry, ParallelGeometry, VolumeGeometry
from leveret.operators import ConeBackprojection, ParallelBackprojection
from leveret.operators import _base
from leveret.operators import cone as cone_module
from leveret.operators import parallel as parallel_module


@pytest.fixture
def two_gpus(monkeypatch, tmp_path):
    stand_in_cupy.install(monkeypatch, n_gpus=2)
    # the operators take the stand-in for a GPU; backend="cpu" stays the CPU
    monkeypatch.setattr(_base, "resolve", lambda backend: "cpu" if backend == "cpu" else "cuda")
    monkeypatch.setattr(parallel_module, "_gpu_name", lambda: "stand-in GPU")
    monkeypatch.setattr(cone_module, "slab_alias", stand_in_cupy.slab_alias)
    monkeypatch.setenv("LEVERET_CACHE_DIR", str(tmp_path))  # no tuning cache: the rule decides
    return DeviceSet([0, 1])


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_parallel_slabs_run_the_whole_stacks_kernel_and_land_in_place(two_gpus, monkeypatch, rng, precision):
    """37 slices: every slab runs the configuration chosen for all 37 (a
    2-slice slab alone would choose another), slab edges on multiples of the
    slices per texel or block, and the result is the CPU backend's."""
    geometry = ParallelGeometry(np.linspace(0, np.pi, 40, endpoint=False), 36)
    volume = VolumeGeometry((37, 30, 32), voxel_size=1.0)
    sinos = rng.standard_normal((37, 40, 36)).astype(np.float32)
    cpu = ParallelBackprojection(geometry, volume, backend="cpu", precision=precision)
    runs = []
    lock = threading.Lock()

    def run_gpu(self, part, res, config):
        with lock:
            runs.append((part.shape[0], config))
        res[...] = cpu(np.asarray(part))

    monkeypatch.setattr(ParallelBackprojection, "_run_gpu", run_gpu)
    op = ParallelBackprojection(geometry, volume, precision=precision, devices=two_gpus)
    whole = op.resolve_kernel(37)
    got = op(sinos)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, cpu(sinos))
    assert len(runs) > 2 and all(config == whole for _, config in runs)
    align = parallel_module.slab_alignment(whole)
    assert align == 4 and sum(n for n, _ in runs) == 37
    # every slab whole texels or blocks, but the last (37 = 9 x 4 + 1)
    assert sorted(n % align for n, _ in runs) == [0] * (len(runs) - 1) + [1]
    out = np.full((37, 30, 32), np.nan, np.float32)
    assert op(sinos, out=out) is out
    np.testing.assert_array_equal(out, cpu(sinos))


def test_cone_slabs_of_whole_blocks_land_in_place(two_gpus, monkeypatch, rng):
    """37 slices in slabs of 16-slice blocks on two stand-in GPUs, the
    kernel's CPU mirror in place of the kernel: equal to one CPU call, also
    accumulating into ``out`` and for a ``slices`` range."""
    geometry = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 20, endpoint=False), sid=60, sdd=90, n_rows=30, n_cols=36, pixel_size=1.2
    )
    volume = VolumeGeometry((37, 24, 26), voxel_size=1.5)
    proj = rng.standard_normal(geometry.projection_shape).astype(np.float32)
    cpu = ConeBackprojection(geometry, volume, backend="cpu", interpolation="linear8", kernel="texture")
    slabs = []
    lock = threading.Lock()

    def gpu_for(self, kernel):
        assert kernel == "texture"

        def run(part, idx, out, *, accumulate, slices, device_matrices):
            with lock:
                slabs.append(slices)
            cpu(np.asarray(part), out=out, accumulate=accumulate, slices=slices)

        return run, None

    monkeypatch.setattr(ConeBackprojection, "_gpu_for", gpu_for)
    op = ConeBackprojection(geometry, volume, kernel="texture", devices=two_gpus)
    np.testing.assert_array_equal(op(proj), cpu(proj))
    assert sorted(slabs) == [(0, 16), (16, 32), (32, 37)]
    start = rng.standard_normal(volume.shape).astype(np.float32)
    np.testing.assert_array_equal(
        op(proj, out=start.copy(), accumulate=True), cpu(proj, out=start.copy(), accumulate=True)
    )
    slabs.clear()
    np.testing.assert_array_equal(
        op(proj, out=start.copy(), slices=(16, 37)), cpu(proj, out=start.copy(), slices=(16, 37))
    )
    assert sorted(slabs) == [(16, 32), (32, 37)]
