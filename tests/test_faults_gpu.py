"""Fault injection on the GPU path: NaN and overflowing inputs to the CUDA
kernels are refused like on the CPU (also when checked on the device while
streaming host data), and an interrupted GPU run leaves nothing behind or
resumes bit for bit."""

from __future__ import annotations

import signal
import subprocess

import numpy as np
import pytest

import leveret
from leveret import ConeGeometry, ParallelGeometry, Projector, VolumeGeometry
from leveret.io import read_array
from test_faults import _cli, _env, _leftovers, _scan, _start, _wait_for_slabs

pytestmark = pytest.mark.gpu


def _poisoned(shape, kind):
    p = np.ones(shape, np.float32)
    if kind == "nan":
        p[0, 0, 0] = np.nan
    else:
        p[-1, -1, -1] = 3e38  # finite, but sums of it overflow float32
    return p


MESSAGES = {
    "nan": r"^projections: expected finite values",
    "huge": r"^projections: (values up to 3e\+38|"
    r"expected finite values of magnitude)",
}


@pytest.mark.parametrize("kind", ["nan", "huge"])
@pytest.mark.parametrize("where", ["numpy", "cupy"])
def test_cuda_fbp_refuses_nan_and_overflowing_projections(kind, where):
    import cupy

    g = ParallelGeometry(np.linspace(0, np.pi, 64, endpoint=False), 64, n_rows=8)
    p = _poisoned(g.projection_shape, kind)
    with pytest.raises(ValueError, match=MESSAGES[kind]):
        leveret.fbp(cupy.asarray(p) if where == "cupy" else p, g, backend="cuda")


@pytest.mark.parametrize("kind", ["nan", "huge"])
@pytest.mark.parametrize("where", ["numpy", "cupy"])
def test_cuda_fdk_refuses_nan_and_overflowing_projections(kind, where):
    import cupy

    g = ConeGeometry.circular(np.linspace(0, 2 * np.pi, 32, endpoint=False), 200.0, 400.0, 16, 32, 2.0)
    p = _poisoned(g.projection_shape, kind)
    with pytest.raises(ValueError, match=MESSAGES[kind]):
        leveret.fdk(cupy.asarray(p) if where == "cupy" else p, g, VolumeGeometry((8, 16, 16)), backend="cuda")


@pytest.mark.parametrize("dtype", [np.float32, complex])
def test_cuda_projector_refuses_nan_and_complex(dtype):
    import cupy

    g = ParallelGeometry(np.linspace(0, np.pi, 16, endpoint=False), 16, n_rows=2)
    A = Projector(g, VolumeGeometry((2, 16, 16)), backend="cuda")
    x = np.ones(A.volume.shape).astype(dtype)
    if dtype is np.float32:
        x[0, 0, 0] = np.nan
    for arr in (x, cupy.asarray(x)):
        with pytest.raises(ValueError, match="^x: expected (finite values|real numbers)"):
            A(arr)


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_gpu_run_leaves_nothing_behind(tmp_path, sig, code):
    _scan(tmp_path)
    cmd = [a if a != "cpu" else "cuda" for a in _cli(tmp_path, tmp_path / "r.h5", "--no-progress")]
    proc = _start(cmd)
    _wait_for_slabs(tmp_path / ".r.h5.partial" / "manifest.json", proc, 1)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.npy"]


def test_a_killed_gpu_run_resumes_to_the_uninterrupted_gpu_volume(tmp_path):
    _scan(tmp_path)
    whole = [a if a != "cpu" else "cuda" for a in _cli(tmp_path, tmp_path / "whole.h5", "--no-progress")]
    assert subprocess.run(whole, capture_output=True, text=True, env=_env(), timeout=300).returncode == 0
    cmd = [a if a != "cpu" else "cuda" for a in _cli(tmp_path, tmp_path / "r.h5", "--no-progress", "--resume")]
    proc = _start(cmd)
    _wait_for_slabs(tmp_path / ".r.h5.partial" / "manifest.json", proc, 3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert ".r.h5.partial" in _leftovers(tmp_path)
    again = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=300)
    assert again.returncode == 0, again.stderr
    np.testing.assert_array_equal(read_array(tmp_path / "r.h5"), read_array(tmp_path / "whole.h5"))
    assert _leftovers(tmp_path) == []
