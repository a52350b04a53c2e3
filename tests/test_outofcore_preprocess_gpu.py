"""Phase retrieval, ring removal and half-acquisition stitching in the
disk-to-disk pipeline on the GPU: the preprocessing runs on CuPy arrays, and
slab by slab equals the in-memory functions followed by fbp (CUDA and CPU)."""

from __future__ import annotations

import numpy as np
import pytest
from test_outofcore_preprocess import AXIS_HALF, PHASE, half_scan, max_rel, phase_scan

import leveret
from leveret import preprocess
from leveret.cli import main
from leveret.execution.outofcore import reconstruct_to_file
from leveret.io import read_array
from leveret.preprocess import (
    half_acquisition,
    normalize,
    remove_stripes,
    retrieve_phase,
)

pytestmark = pytest.mark.gpu


def test_phase_runs_on_the_gpu_and_matches_whole_projections(tmp_path, rng, monkeypatch):
    import cupy

    g, raw, flat, dark = phase_scan(rng)
    lines = retrieve_phase(cupy.asarray(normalize(raw, flat, dark)), **PHASE)
    ref_gpu = cupy.asnumpy(leveret.fbp(lines, g, backend="cuda"))
    ref_cpu = leveret.fbp(retrieve_phase(normalize(raw, flat, dark), **PHASE), g, backend="cpu")
    seen = []
    original = preprocess.retrieve_phase

    def spy(transmission, **kwargs):
        seen.append(type(transmission).__module__.split(".")[0])
        return original(transmission, **kwargs)

    monkeypatch.setattr(preprocess, "retrieve_phase", spy)
    res = reconstruct_to_file(
        raw, g, tmp_path / "p.npy", flats=flat, darks=dark, phase=PHASE, slab_slices=4, backend="cuda"
    )
    vol = read_array(res.path)
    assert seen and set(seen) == {"cupy"}  # on the GPU, no host round trip
    assert max_rel(vol, ref_gpu) < 1e-3  # the filter's tail beyond the border rows
    assert max_rel(vol, ref_cpu) < 2e-3


def test_half_acquisition_on_the_gpu_matches_in_memory_stitching(tmp_path):
    g, proj, center = half_scan()
    st = half_acquisition(proj, g.angles, center)
    stitched = leveret.ParallelGeometry(st.angles, st.projections.shape[-1], n_rows=12, center=st.center)
    ref_gpu = leveret.fbp(st.projections, stitched, backend="cuda")
    ref_cpu = leveret.fbp(st.projections, stitched, backend="cpu")
    res = reconstruct_to_file(proj, g, tmp_path / "h.npy", half_acquisition=center, slab_slices=4, backend="cuda")
    vol = read_array(res.path)
    assert vol.shape == (12, 95, 95)
    # float32 roundings of slabs and of the whole volume differ (the exact kernel's tiles start at each slab)
    assert max_rel(vol, np.asarray(ref_gpu)) < 1e-4
    assert max_rel(vol, ref_cpu) < 1e-3


@pytest.mark.parametrize(
    "method, options",
    [("all", {"snr": 3.0, "large_size": 11}), ("wavelet-fft", {"wavelet": "db5", "level": 3, "sigma": 2.0})],
)
def test_stripe_methods_on_the_gpu_match_the_whole_scan(tmp_path, rng, method, options):
    if method == "wavelet-fft":
        pytest.importorskip("pywt")
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 120, endpoint=False), 64, n_rows=16)
    proj = (0.01 * leveret.phantom.shepp_logan_3d(radius=28.0).project(g)).astype(np.float32)
    proj += rng.normal(0, 0.002, proj.shape).astype(np.float32)
    proj[:, :, [12, 30]] += np.float32(0.05)
    ref = leveret.fbp(remove_stripes(proj, method=method, size=5, **options), g, backend="cpu")
    res = reconstruct_to_file(
        proj,
        g,
        tmp_path / "s.npy",
        stripes=method,
        stripe_size=5,
        stripe_options=options,
        slab_slices=4,
        backend="cuda",
    )
    assert max_rel(read_array(res.path), ref) < 1e-3


def test_cli_phase_and_half_acquisition_on_the_gpu(tmp_path, rng):
    g, raw, flat, dark = phase_scan(rng)
    for name, a in (("raw", raw), ("flat", flat), ("dark", dark)):
        np.save(tmp_path / f"{name}.npy", a)
    assert (
        main(
            [
                "recon",
                str(tmp_path / "raw.npy"),
                str(tmp_path / "p.npy"),
                "--angles",
                "0:180:90",
                "--flat",
                str(tmp_path / "flat.npy"),
                "--dark",
                str(tmp_path / "dark.npy"),
                "--phase",
                "paganin",
                "--energy",
                "20",
                "--distance",
                "0.3",
                "--pixel-size",
                "4e-6",
                "--delta-beta",
                "100",
                "--backend",
                "cuda",
                "-q",
            ]
        )
        == 0
    )
    ref = leveret.fbp(retrieve_phase(normalize(raw, flat, dark), **PHASE), g, backend="cpu")
    assert max_rel(read_array(tmp_path / "p.npy"), ref) < 1e-3
    _, proj, center = half_scan()
    np.save(tmp_path / "half.npy", proj)
    assert (
        main(
            [
                "recon",
                str(tmp_path / "half.npy"),
                str(tmp_path / "h.npy"),
                "--angles",
                "0:360:360",
                "--half-acquisition",
                str(AXIS_HALF),
                "--backend",
                "cuda",
                "-q",
            ]
        )
        == 0
    )
    st = half_acquisition(proj, np.linspace(0, 2 * np.pi, 360, endpoint=False), center)
    ref = leveret.fbp(
        st.projections, leveret.ParallelGeometry(st.angles, 95, n_rows=12, center=st.center), backend="cpu"
    )
    assert max_rel(read_array(tmp_path / "h.npy"), ref) < 1e-3
