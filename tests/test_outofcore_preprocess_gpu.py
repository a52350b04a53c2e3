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


@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.int16])
def test_a_slabs_flat_dark_and_log_on_the_gpu_are_normalize_then_minus_log(rng, dtype, monkeypatch):
    """uint16 and float32 counts take one kernel (leveret.cuda.correct, launched in
    pieces of MAX_FRAMES frames): bit for bit normalize then minus_log on CuPy, and
    the NumPy path's to an ulp of the log, dead pixels, values under the floor and
    NaN included; other dtypes take normalize then minus_log."""
    import cupy

    from leveret.cuda import correct as correct_module
    from leveret.execution.slab import preprocess_rows
    from leveret.preprocess import minus_log

    launches = []
    original = correct_module.correct

    def spy(frames, *args, **kwargs):
        launches.append(frames.shape)
        return original(frames, *args, **kwargs)

    monkeypatch.setattr(correct_module, "correct", spy)
    monkeypatch.setattr(correct_module, "MAX_FRAMES", 3)
    views, n_rows, cols, rows = 7, 10, 33, (2, 8)
    darks = rng.uniform(90, 110, (n_rows, cols)).astype(np.float32)
    flats = (darks + rng.uniform(2e3, 3e3, (3, n_rows, cols))).astype(np.float32)  # a stack: averaged
    darks[4, 5] = darks[6, 7] = 100  # the stack's mean exact there:
    flats[:, 4, 5] = 100  # dead: flat - dark = 0
    flats[:, 6, 7] = 95  # dead: negative
    raw = rng.uniform(150, 2e3, (views, rows[1] - rows[0], cols)).astype(dtype)
    raw[1, 0, :4] = 20  # under the dark: clipped to min_transmission
    if dtype == np.float32:
        raw[2, 3, 9] = np.nan
    on_gpu = preprocess_rows(cupy.asarray(raw), rows, flats=cupy.asarray(flats), darks=cupy.asarray(darks))
    f, d = cupy.asarray(flats)[:, rows[0] : rows[1]], cupy.asarray(darks)[rows[0] : rows[1]]
    unfused = minus_log(normalize(cupy.asarray(raw), f, d, require_valid=False))
    on_cpu = preprocess_rows(raw, rows, flats=flats, darks=darks)
    assert on_gpu.dtype == np.float32 and on_gpu.shape == raw.shape
    np.testing.assert_array_equal(on_gpu.get(), unfused.get())  # NaN where NaN
    np.testing.assert_allclose(on_gpu.get(), on_cpu, rtol=2e-6, atol=1e-6)
    assert on_cpu[1, 0, 0] == pytest.approx(-np.log(1e-6), rel=1e-6)  # the floor
    assert on_cpu[0, 4 - rows[0], 5] == 0 and on_cpu[0, 6 - rows[0], 7] == 0  # dead pixels: no attenuation
    assert launches == ([(7, 6, 33)] if dtype != np.int16 else [])
