"""``leveret recon --method ...`` on the GPU: parallel beam slab by slab (the
pipeline's GPU workers) equals the library on each slice, cone beam in GPU
memory equals the library on the whole volume, and a cone problem beyond
--gpu-memory is refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.cli import main
from leveret.io import read_array

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def parallel(tmp_path_factory):
    folder = tmp_path_factory.mktemp("iterative_gpu")
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 60, endpoint=False), 64, n_rows=10)
    lines = phantom.shepp_logan_3d(radius=26.0).project(g).astype(np.float32)
    np.save(folder / "proj.npy", lines)
    return folder, g, lines


@pytest.mark.parametrize(
    "method,flags,kwargs",
    [
        ("sirt", ("--iterations", "15", "--nonnegative"), {"nonnegative": True}),
        ("fista", ("--iterations", "12", "--tv", "0.2"), {"tv": 0.2}),
    ],
)
def test_parallel_on_the_gpu_equals_the_library_per_slice(parallel, method, flags, kwargs):
    import cupy

    folder, g, lines = parallel
    assert (
        main(
            [
                "recon",
                str(folder / "proj.npy"),
                str(folder / f"{method}.npy"),
                "--angles",
                "0:180:60",
                "--backend",
                "cuda",
                "--no-progress",
                "-q",
                "--slab-slices",
                "4",
                "--method",
                method,
                *flags,
            ]
        )
        == 0
    )
    out = read_array(folder / f"{method}.npy")
    plane = leveret.VolumeGeometry((64, 64))
    A = leveret.Projector(g.replace(n_rows=None), plane, backend="cuda")
    fn = getattr(leveret, method)
    ref = np.stack(
        [fn(cupy.asarray(np.ascontiguousarray(lines[:, k])), A, int(flags[1]), **kwargs).get() for k in range(g.n_rows)]
    )
    # A.T adds with atomics on the GPU: the last bits vary from run to run
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-4 * np.abs(ref).max())


@pytest.fixture(scope="module")
def cone(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cone_iterative_gpu")
    angles = np.linspace(0, 2 * np.pi, 60, endpoint=False)
    g = leveret.ConeGeometry.circular(angles, 100.0, 200.0, 24, 32, 1.0)
    v = leveret.VolumeGeometry((12, 28, 28), 0.5)
    proj = phantom.ball(4.0, center=(0.5, -0.5, 0.0)).project(g).astype(np.float32)
    np.save(folder / "proj.npy", proj)
    np.savetxt(folder / "m.txt", g.matrices.reshape(-1, 12))
    return folder, g, v, proj


def _cone(folder, name, *flags):
    return main(
        [
            "recon",
            str(folder / "proj.npy"),
            str(folder / name),
            "--matrices",
            str(folder / "m.txt"),
            "--backend",
            "cuda",
            "--no-progress",
            "-q",
            "--volume-shape",
            "12,28,28",
            "--voxel-size",
            "0.5",
            "--overwrite",
            *flags,
        ]
    )


@pytest.mark.parametrize(
    "method,flags,kwargs",
    [
        ("cgls", ("--iterations", "8"), {}),
        ("pdhg", ("--iterations", "15", "--tv", "0.05", "--nonnegative"), {"tv": 0.05, "nonnegative": True}),
    ],
)
def test_cone_in_gpu_memory_equals_the_library(cone, method, flags, kwargs):
    import cupy

    folder, g, v, proj = cone
    assert _cone(folder, f"{method}.h5", "--method", method, *flags) == 0
    A = leveret.Projector(g, v, backend="cuda")
    ref = getattr(leveret, method)(cupy.asarray(proj), A, int(flags[1]), **kwargs).get()
    np.testing.assert_allclose(read_array(folder / f"{method}.h5"), ref, rtol=0, atol=1e-4 * np.abs(ref).max())


def test_cone_beyond_the_gpu_memory_cap_is_one_line(cone, capsys):
    folder, _, _, _ = cone
    assert _cone(folder, "big.h5", "--method", "sirt", "--iterations", "3", "--gpu-memory", "64K") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "of 64 KiB (--gpu-memory)" in err
    assert not (folder / "big.h5").exists()
