"""Phase retrieval, ring removal and half-acquisition stitching in the
disk-to-disk pipeline (reconstruct_to_file): slab by slab equals the
in-memory preprocess functions followed by fbp of the whole scan."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.execution import slab as slab_module
from leveret.execution.outofcore import gpu_bytes, host_bytes, plan, reconstruct_to_file
from leveret.io import read_array
from leveret.preprocess import (
    half_acquisition,
    normalize,
    phase_border,
    remove_stripes,
    retrieve_phase,
)

# sigma 3.1 pixels: 19 rows of border each side, slabs of 4 slices (6 rows of their own): every slab
# reads more border than rows of its own, and the first and last ones are clipped at the detector's edges
PHASE = dict(energy=20.0, distance=0.3, pixel_size=4e-6, delta_beta=100.0)


def phase_scan(rng, n_rows=48):
    """Raw counts, flats and darks of a scan (64 columns, ``n_rows`` rows)."""
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 90, endpoint=False), 64, n_rows=n_rows)
    mu_t = 0.01 * phantom.shepp_logan_3d(radius=28.0).project(g)
    flat = np.float32(1000.0) * (1 + 0.02 * rng.random((n_rows, 64), dtype=np.float32))
    dark = np.float32(10.0) + rng.random((n_rows, 64), dtype=np.float32)
    raw = (dark + flat * np.exp(-mu_t)).astype(np.float32)
    return g, raw, flat, dark


def phase_reference(g, raw, flat, dark, backend):
    """retrieve_phase on whole projections, then fbp (in memory)."""
    lines = retrieve_phase(normalize(raw, flat, dark), **PHASE)
    return leveret.fbp(lines, g, backend=backend)


def run_phase(tmp_path, g, raw, flat, dark, backend, name="phase.npy"):
    res = reconstruct_to_file(
        raw,
        g,
        tmp_path / name,
        flats=flat,
        darks=dark,
        phase=PHASE,
        slab_slices=4,
        backend=backend,
        host_memory=1 << 30,
    )
    return res, read_array(res.path)


def max_rel(a, b):
    return float(np.abs(np.asarray(a, np.float64) - b).max() / np.abs(b).max())


def test_phase_slabs_match_whole_projections(tmp_path, rng, monkeypatch):
    g, raw, flat, dark = phase_scan(rng)
    assert phase_border(**PHASE) == 19
    ref = phase_reference(g, raw, flat, dark, "cpu")
    res, vol = run_phase(tmp_path, g, raw, flat, dark, "cpu")
    assert res.slabs_done == 12
    # the filter's tail beyond the border weighs < 1e-3 (BORDER_TOLERANCE) of the transmission's jumps
    assert max_rel(vol, ref) < 1e-3
    # without the border the slabs' edges are filtered with copies of their last rows: far off
    monkeypatch.setattr(slab_module, "border_rows", lambda phase: 0)
    _, bare = run_phase(tmp_path, g, raw, flat, dark, "cpu", "bare.npy")
    assert max_rel(bare, ref) > 1e-2


def test_phase_slabs_match_to_rounding_with_a_wide_border(tmp_path, rng, monkeypatch):
    """With a border where the filter's tail is below float32 rounding, the slabs
    away from the detector's edges give the whole projections' values to rounding
    (the rows read, filtered and dropped line up exactly)."""
    g, raw, flat, dark = phase_scan(rng, n_rows=160)
    wide = phase_border(**PHASE, tolerance=1e-8)
    assert wide == 54
    monkeypatch.setattr(slab_module, "border_rows", lambda phase: 0 if phase is None else wide)
    ref = phase_reference(g, raw, flat, dark, "cpu")
    _, vol = run_phase(tmp_path, g, raw, flat, dark, "cpu")
    # float32 rounding: how far the in-memory float32 result is from float64 throughout
    t64 = (raw.astype(np.float64) - dark) / (flat.astype(np.float64) - dark)
    ref64 = leveret.fbp(retrieve_phase(t64, **PHASE), g, backend="cpu", precision="float64")
    inside = slice(60, 100)  # slabs that read neither edge of the detector (where both pad) nor all of it
    rounding = max_rel(ref[inside], ref64[inside])
    assert 0 < rounding < 1e-4
    assert max_rel(vol[inside], ref[inside]) < 3 * rounding
    assert max_rel(vol, ref) < 1e-3


def test_phase_needs_transmissions_and_valid_values(tmp_path, rng):
    g, raw, flat, dark = phase_scan(rng)
    lines = -np.log(raw / 1000.0)
    with pytest.raises(ValueError, match="^phase: phase retrieval takes transmissions"):
        reconstruct_to_file(lines, g, tmp_path / "a.npy", phase=PHASE)
    for key, value in (("energy", 0.0), ("distance", -1.0), ("delta_beta", 0.0), ("pixel_size", 4.0)):
        with pytest.raises(ValueError, match=f"^{key}: "):
            reconstruct_to_file(raw, g, tmp_path / "b.npy", flats=flat, darks=dark, phase={**PHASE, key: value})
    with pytest.raises(ValueError, match="^phase: .*missing delta_beta"):
        reconstruct_to_file(
            raw,
            g,
            tmp_path / "c.npy",
            flats=flat,
            darks=dark,
            phase={k: v for k, v in PHASE.items() if k != "delta_beta"},
        )
    assert not any(tmp_path.iterdir())


def test_phase_with_transmission_input_takes_no_second_log(tmp_path, rng):
    g, raw, flat, dark = phase_scan(rng)
    transmission = normalize(raw, flat, dark)
    ref = phase_reference(g, raw, flat, dark, "cpu")
    res = reconstruct_to_file(
        transmission, g, tmp_path / "t.npy", log_transform=True, phase=PHASE, slab_slices=8, backend="cpu"
    )
    assert max_rel(read_array(res.path), ref) < 1e-3
    # -log taken twice would give values of another scale altogether
    assert np.abs(read_array(res.path)).max() == pytest.approx(np.abs(ref).max(), rel=1e-2)


AXIS_HALF = 47.3


def half_scan():
    """A 360-degree scan of 56 columns with the axis at column AXIS_HALF (12 rows)."""
    angles = np.linspace(0, 2 * np.pi, 360, endpoint=False)
    g = leveret.ParallelGeometry(angles, 56, n_rows=12, center=AXIS_HALF)
    proj = (0.01 * phantom.shepp_logan_3d(radius=40.0).project(g)).astype(np.float32)
    return leveret.ParallelGeometry(angles, 56, n_rows=12), proj, AXIS_HALF


def half_reference(proj, center, backend):
    st = half_acquisition(proj, np.linspace(0, 2 * np.pi, 360, endpoint=False), center)
    geometry = leveret.ParallelGeometry(st.angles, st.projections.shape[-1], n_rows=proj.shape[1], center=st.center)
    return leveret.fbp(st.projections, geometry, backend=backend)


def test_half_acquisition_slabs_match_in_memory_stitching(tmp_path):
    g, proj, center = half_scan()
    ref = half_reference(proj, center, "cpu")
    res = reconstruct_to_file(proj, g, tmp_path / "h.npy", half_acquisition=center, slab_slices=4, backend="cpu")
    vol = read_array(res.path)
    assert vol.shape == ref.shape == (12, 95, 95)  # the stitched width: floor(2 * 47.3) + 1
    assert max_rel(vol, ref) < 1e-5
    # the stitched field of view is reconstructed, not the 56-column one
    assert res.plan.volume_bytes == 12 * 95 * 95 * 4


def test_half_acquisition_refuses_a_half_turn_and_a_column_off_the_detector(tmp_path):
    g, proj, _ = half_scan()
    half_turn = g.replace(angles=np.linspace(0, np.pi, 360, endpoint=False))
    with pytest.raises(ValueError, match="^half_acquisition: expected a 360-degree scan"):
        reconstruct_to_file(proj, half_turn, tmp_path / "a.npy", half_acquisition=47.3)
    with pytest.raises(
        ValueError, match=r"^half_acquisition: expected the rotation axis inside the detector.*\[0, 55\]"
    ):
        reconstruct_to_file(proj, g, tmp_path / "b.npy", half_acquisition=60.0)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "method, options",
    [
        ("all", {"snr": 3.0, "large_size": 11}),
        ("wavelet-fft", {"wavelet": "db5", "level": 3, "sigma": 2.0}),
    ],
)
def test_stripe_methods_per_slab_match_the_whole_scan(tmp_path, rng, method, options):
    if method == "wavelet-fft":
        pytest.importorskip("pywt")
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 120, endpoint=False), 64, n_rows=16)
    proj = (0.01 * phantom.shepp_logan_3d(radius=28.0).project(g)).astype(np.float32)
    proj += rng.normal(0, 0.002, proj.shape).astype(np.float32)
    proj[:, :, [12, 30]] += np.float32(0.05)
    proj[:, :, 44:47] += np.float32(0.04)
    size = 5 if method == "all" else None
    cleaned = remove_stripes(proj, method=method, size=size, **options)
    ref = leveret.fbp(cleaned, g, backend="cpu")
    res = reconstruct_to_file(
        proj,
        g,
        tmp_path / "s.npy",
        stripes=method,
        stripe_size=size or 5,
        stripe_options=options,
        slab_slices=4,
        backend="cpu",
    )
    vol = read_array(res.path)
    assert max_rel(vol, ref) < 1e-5
    # the stripes were removed: the plain reconstruction differs
    assert max_rel(leveret.fbp(proj, g, backend="cpu"), ref) > 1e-2


def test_plan_counts_border_rows_and_stitched_width():
    g, _, _ = half_scan()
    vol = leveret.VolumeGeometry((12, 95, 95))
    stitched = slab_module.stitched_geometry(g, 47.3)
    assert (stitched.n_angles, stitched.n_cols, stitched.center) == (180, 95, 47.3)
    plain = host_bytes(g, vol, 4, preprocess=True)
    assert host_bytes(g, vol, 4, preprocess=True, border=3) > plain
    assert host_bytes(g, vol, 4, preprocess=True, stitched=stitched) > plain
    gpu = gpu_bytes(g, vol, 4)
    assert gpu_bytes(g, vol, 4, border=3) > gpu and gpu_bytes(g, vol, 4, stitched=stitched) > gpu
    # the rows read: 4 slices need 6 rows, 20 more each side (clipped to the detector's 12)
    from leveret.execution.outofcore import _rows_for

    assert _rows_for(g, vol, 4, 20) == 12 and _rows_for(g, vol, 4, 2) == 10
    p = plan(g, backend="cpu", host_memory=1 << 30, stitched=stitched)
    assert p.volume_bytes == 12 * 95 * 95 * 4


@pytest.mark.parametrize("phase", [None, PHASE])
def test_transmissions_in_memory_are_left_as_they_were(tmp_path, rng, phase):
    """-log and the phase retrieval of transmissions work on a copy: an array given as
    the input (sliced for the value range of an integer output) keeps its values."""
    g, raw, flat, dark = phase_scan(rng)
    transmission = normalize(raw, flat, dark)
    before = transmission.copy()
    reconstruct_to_file(
        transmission, g, tmp_path / "t.h5", log_transform=True, phase=phase, backend="cpu", output_dtype="uint16"
    )
    np.testing.assert_array_equal(transmission, before)
    rows = transmission[:, 10:30]
    slab_module.preprocess_rows(rows, (10, 30), log_transform=True, phase=phase)
    np.testing.assert_array_equal(transmission, before)
