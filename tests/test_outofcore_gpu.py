"""Out-of-core reconstruction on the GPU: slab by slab equals the in-memory
CUDA result and the CPU/float64 references; a GPU memory cap cuts the job
into slabs; a real CUDA out-of-memory error is retried with smaller slabs."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret.execution import pipeline, slab
from leveret import phantom
from leveret.io import read_array
from leveret.execution.outofcore import plan, reconstruct_to_file

pytestmark = pytest.mark.gpu


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def scan():
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 180, endpoint=False), 128, n_rows=48, center=66.25)
    proj = phantom.shepp_logan_3d(radius=55.0).project(g).astype(np.float32)
    return g, proj


def test_cuda_slabs_equal_in_memory_cuda_and_cpu(tmp_path, scan, rng):
    g, proj = scan
    proj = proj + rng.normal(0, 0.01, proj.shape).astype(np.float32)  # fresh inputs each run
    ref_gpu = leveret.fbp(proj, g, backend="cuda")
    ref_cpu = leveret.fbp(proj, g, backend="cpu")  # exact weights, as the default ALU kernel
    ref64 = leveret.fbp(proj.astype(np.float64), g, backend="cpu", precision="float64")
    import importlib.util

    names = ("r.h5", "r.npy") + (("r.zarr",) if importlib.util.find_spec("zarr") else ())  # zarr: optional
    for name in names:
        # 8 MiB: the pipeline's buffers for a few slices of the 48 (a fixed share is not the volume's)
        res = reconstruct_to_file(proj, g, tmp_path / name, backend="cuda", gpu_memory=8 << 20, slab_slices=None)
        assert res.plan.backend == "cuda" and res.plan.n_slabs > 1 and res.plan.gpu_bytes <= 8 << 20
        out = read_array(tmp_path / name)
        assert np.isfinite(out).all()
        # The default exact (ALU) kernel anchors each tile at its slab's origin, so float32
        # roundings differ from the whole volume's (1.4e-6 measured on an H200); both are
        # within the kernel's 1e-5 of the exact references.
        assert rel(out, ref_gpu) < 1e-5
        assert rel(out, ref_cpu) < 1e-5
        assert rel(out, ref64) < 1e-5


def test_misaligned_volume_on_cuda(tmp_path, scan):
    g, proj = scan
    v = leveret.VolumeGeometry((20, 96, 96), (1.7, 1.2, 1.2), (-3.0, 2.0, 0.0))
    ref = leveret.fbp(proj, g, v, backend="cuda")
    ref64 = leveret.fbp(proj.astype(np.float64), g, v, backend="cpu", precision="float64")
    reconstruct_to_file(proj, g, tmp_path / "v/", volume=v, backend="cuda", slab_slices=3)
    out = read_array(tmp_path / "v")
    # The default exact (ALU) kernel anchors each tile's coordinates at its slab's own
    # origin: float32 roundings differ from the whole volume's (measured 1.5e-6 on an
    # H200), both within the kernel's 1e-5 of the exact reference (the CPU's float32
    # is 2.7e-7 from float64 here).
    assert rel(out, ref) < 1e-5
    assert rel(out, ref64) < 1e-5


def test_cone_slabs_on_cuda(tmp_path, rel_mirror):
    g = leveret.ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 120, endpoint=False), sid=300, sdd=600, n_rows=64, n_cols=96, pixel_size=1.0
    )
    v = leveret.VolumeGeometry((32, 64, 64), 0.6)
    proj64 = phantom.shepp_logan_3d(radius=18.0).project(g)
    proj = proj64.astype(np.float32)
    ref = leveret.fdk(proj, g, v, backend="cuda")
    on_gpu = reconstruct_to_file(proj, g, tmp_path / "c.h5", volume=v, backend="cuda", slab_slices=6)
    out = read_array(tmp_path / "c.h5")
    # The CPU's mirror of the texture unit (linear8) through the same slabs: equal to
    # float rounding (docs/accuracy.md's texture-mirror bound).
    on_cpu = reconstruct_to_file(
        proj, g, tmp_path / "c8.h5", volume=v, backend="cpu", slab_slices=6, interpolation="linear8"
    )
    assert on_gpu.slab_slices == on_cpu.slab_slices == 6 and on_gpu.retries == 0
    assert rel_mirror(out, read_array(tmp_path / "c8.h5")) < 1e-5
    # Slabs vs the whole volume, both on the GPU: a slab's float32 matrices (rows cropped,
    # z restarted) move texture coordinates by a few ulp (~3e-5 px at u ~ 96), which flips an
    # 8-bit weight (1/256 steps) in ~1.5 % of samples, each by 1/256 of a neighbour
    # difference, random over 120 views: ~ sqrt(0.015 / 120) / 256 = 4e-5 relative
    # (measured 5.2e-5 on an H200, 6.7e-5 with the CPU's linear8); bound 2e-4.
    assert rel(out, ref) < 2e-4
    # And against the exact float64 reconstruction: the 8-bit weights' own cost, measured
    # 1.14e-3 with the CPU's linear8 through the same slabs; bound 2e-3.
    ref64 = leveret.fdk(proj64, g, v, backend="cpu", precision="float64")
    assert rel(out, ref64) < 2e-3


def test_real_cuda_out_of_memory_is_retried(tmp_path, scan, monkeypatch):
    """A genuine cupy OutOfMemoryError (raised by the pool under a tiny limit) is retried."""
    import cupy

    g, proj = scan
    pool = cupy.get_default_memory_pool()
    real = slab.reconstruct_slab
    calls = []

    def squeezed(rows_data, geometry, volume, region, **kw):
        calls.append(tuple(region))
        if len(calls) == 1:
            old = pool.get_limit()
            pool.free_all_blocks()
            pool.set_limit(size=1 << 20)  # 1 MiB: the first slab cannot fit
            try:
                return real(rows_data, geometry, volume, region, **kw)
            finally:
                pool.set_limit(size=old)
        return real(rows_data, geometry, volume, region, **kw)

    monkeypatch.setattr(slab, "reconstruct_slab", squeezed)
    # one worker: the pool's limit is the device's, and a second worker's upload would meet it too
    monkeypatch.setattr(pipeline, "WORKERS_PER_GPU", 1)
    res = reconstruct_to_file(proj, g, tmp_path / "r.npy", backend="cuda", slab_slices=16)
    assert res.retries >= 1 and (0, 8) in calls and (8, 16) in calls
    out = np.load(tmp_path / "r.npy")
    assert rel(out, leveret.fbp(proj, g, backend="cuda")) < 1e-6
    assert rel(out, leveret.fbp(proj, g, backend="cpu")) < 1e-5  # the exact kernel's bound


def test_gpu_plan_and_cli_dry_run(tmp_path, scan, capsys):
    from leveret.cli import main

    g, proj = scan
    p = plan(g, backend="cuda", gpu_memory=8 << 20, host_memory=1 << 30)
    assert p.gpu_limit == 8 << 20 and p.gpu_bytes <= 8 << 20 and p.slab_slices < 48
    np.save(tmp_path / "p.npy", proj)
    assert (
        main(
            [
                "recon",
                str(tmp_path / "p.npy"),
                str(tmp_path / "r.h5"),
                "--angles",
                "0:180:180",
                "--backend",
                "cuda",
                "--gpu-memory",
                "8M",
                "--dry-run",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "memory plan (cuda)" in out and "GPU limit 8 MiB" in out
    assert (
        main(
            [
                "recon",
                str(tmp_path / "p.npy"),
                str(tmp_path / "r.h5"),
                "--angles",
                "0:180:180",
                "--center",
                "66.25",
                "--backend",
                "cuda",
                "--gpu-memory",
                "8M",
                "--no-progress",
            ]
        )
        == 0
    )
    out = read_array(tmp_path / "r.h5")
    assert rel(out, leveret.fbp(proj, g, backend="cuda")) < 1e-6
    assert rel(out, leveret.fbp(proj, g, backend="cpu")) < 1e-5  # the exact kernel's bound
