"""The GPU-only flags of ``leveret recon`` change the output as the library's
arguments do: --precision float16 (fp16 filtered sinograms), --kernel, and
--precision float64 refused on the GPU in one line naming the flag."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.cli import main

pytestmark = pytest.mark.gpu


@pytest.fixture
def scan(tmp_path):
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 180, endpoint=False), 128, n_rows=8, center=64.25)
    proj = phantom.shepp_logan_3d(radius=55.0).project(g).astype(np.float32)
    np.save(tmp_path / "p.npy", proj)
    return tmp_path, g, proj


def recon(folder, name, *flags):
    assert (
        main(
            [
                "recon",
                str(folder / "p.npy"),
                str(folder / name),
                "--angles",
                "0:180:180",
                "--center",
                "64.25",
                "--backend",
                "cuda",
                "--no-progress",
                "-q",
                *flags,
            ]
        )
        == 0
    )
    return np.load(folder / name)


@pytest.mark.parametrize(
    "flags,library",
    [
        (["--precision", "float16"], {"precision": "float16"}),
        (["--kernel", "alu"], {"kernel": "alu"}),
        (["--kernel", "texture"], {"kernel": "texture"}),
    ],
)
def test_gpu_flags_equal_the_library_arguments(scan, flags, library):
    folder, g, proj = scan
    rec = recon(folder, "r.npy", *flags)
    ref = leveret.fbp(proj, g, backend="cuda", **library)
    # float16 runs the hybrid kernel, whose blocks split between 8-bit texture and exact weights by
    # position in the chunk: the CLI's slabs and the library's one call differ by those weights
    # (measured 1.2e-3 of the peak on an H100); the float32 kernels are bit-identical across chunkings.
    tol = 3e-3 if library.get("precision") == "float16" else 1e-6
    np.testing.assert_allclose(rec, ref, rtol=0, atol=tol * np.abs(ref).max())


def test_float16_differs_from_float32_by_fp16_rounding(scan):
    folder, _, _ = scan
    single = recon(folder, "f32.npy")
    half = recon(folder, "f16.npy", "--precision", "float16")
    rel = np.linalg.norm(half - single) / np.linalg.norm(single)
    # fp16 keeps 11 significant bits (relative rounding 2^-11 = 5e-4): the change shows, and stays that small
    assert 0 < rel < 5e-3


def test_float64_on_the_gpu_is_one_line_naming_the_flag(scan, capsys):
    folder, _, _ = scan
    assert (
        main(
            [
                "recon",
                str(folder / "p.npy"),
                str(folder / "r.npy"),
                "--angles",
                "0:180:180",
                "--backend",
                "cuda",
                "--precision",
                "float64",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("leveret recon: error: --precision: ") and "--backend cpu" in err[0]


def test_tune_caches_the_transpose_and_the_parallel_classes(tmp_path, monkeypatch, capsys):
    """``leveret tune`` on this GPU: the transpose's correction and the first
    parallel-beam class within a short budget, cached where LEVERET_CACHE_DIR
    says and shown by ``leveret info``; the classes past the budget are named."""
    from leveret.cuda import gpu_name, tuning

    monkeypatch.setenv("LEVERET_CACHE_DIR", str(tmp_path))
    assert main(["tune", "--budget", "1"]) == 0
    out = capsys.readouterr().out
    assert "cone transpose: the band transpose takes" in out and "skipped, past the 1 s budget" in out
    cached = tuning.load(tmp_path / "tuning.json")[gpu_name()]
    assert "cone/transpose-band" in cached and any(key.startswith("parallel/") for key in cached)
    assert main(["info"]) == 0
    assert "cone/transpose-band: atomic_scale=" in capsys.readouterr().out
