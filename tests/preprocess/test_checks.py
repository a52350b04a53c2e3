"""Flat and dark fields that would silently give a volume of zeros (or a wrong
one) are refused with a message naming them."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret.cli import main
from leveret.io import read_array
from leveret.execution.outofcore import reconstruct_to_file
from leveret.preprocess import check_flats_darks, minus_log, normalize, sinogram_fields


@pytest.fixture
def counts(rng):
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 24, endpoint=False), 16, n_rows=4)
    flat = 1000 + 50 * rng.random((4, 16))
    dark = 100 + 5 * rng.random((4, 16))
    transmission = np.exp(-0.01 * rng.random(g.projection_shape))
    raw = (dark + (flat - dark) * transmission).astype(np.float32)
    return g, raw, flat, dark


def test_an_all_nan_flat_is_refused_not_turned_into_zeros(counts, tmp_path):
    g, raw, flat, dark = counts
    with pytest.raises(ValueError, match="^flats: the flat field is nowhere brighter than the dark"):
        normalize(raw, np.full_like(flat, np.nan), dark)
    with pytest.raises(ValueError, match=r"^flats: expected finite values, got 64 NaN/Inf value\(s\) of 64"):
        reconstruct_to_file(raw, g, tmp_path / "r.npy", flats=np.full_like(flat, np.nan), darks=dark, backend="cpu")
    assert list(tmp_path.iterdir()) == []


def test_a_dark_brighter_than_the_flat_is_refused(counts, tmp_path):
    g, raw, flat, dark = counts
    with pytest.raises(
        ValueError,
        match="not brighter than the dark field in 100% of the detector pixels; "
        "check that --flat and --dark are not swapped",
    ):
        reconstruct_to_file(raw, g, tmp_path / "r.npy", flats=dark, darks=flat, backend="cpu")
    with pytest.raises(ValueError, match="^flats: the flat field is nowhere brighter"):
        normalize(raw, dark, flat)


def test_a_few_dead_pixels_are_still_accepted(counts):
    _, _, flat, dark = counts
    flat = flat.copy()
    flat[0, :3] = dark[0, :3]  # 3 of 64 pixels: dead, set to no attenuation
    f, d = check_flats_darks(flat, dark, (4, 16))
    assert f is not None and d is not None


def test_a_nan_dark_pixel_is_refused_by_name(counts):
    _, _, flat, dark = counts
    dark = dark.copy()
    dark[2, 5] = np.nan
    with pytest.raises(ValueError, match=r"^darks: expected finite values, got 1 NaN/Inf"):
        check_flats_darks(flat, dark, (4, 16))


def test_a_sinogram_needs_the_flat_of_its_own_row(counts, tmp_path, capsys):
    g, raw, flat, dark = counts
    row = 2
    np.save(tmp_path / "sino.npy", raw[:, row])
    np.save(tmp_path / "flat.npy", flat)
    np.save(tmp_path / "dark.npy", dark)
    args = [
        "recon",
        str(tmp_path / "sino.npy"),
        str(tmp_path / "r.npy"),
        "--angles",
        "0:180:24",
        "--backend",
        "cpu",
        "--no-progress",
        "--dark",
        str(tmp_path / "dark.npy"),
    ]
    assert main(args + ["--flat", str(tmp_path / "flat.npy")]) == 2
    assert "--flat: the input is one sinogram with 16 columns" in capsys.readouterr().err
    assert not (tmp_path / "r.npy").exists()
    # The matching row, as 1D images: the reconstruction of that row's line integrals.
    np.save(tmp_path / "flat.npy", flat[row])
    np.save(tmp_path / "dark.npy", dark[row])
    assert main(args + ["--flat", str(tmp_path / "flat.npy")]) == 0
    lines = minus_log(normalize(raw[:, row], flat[row], dark[row]))
    want = leveret.fbp(lines, leveret.ParallelGeometry(g.angles, 16), backend="cpu")
    np.testing.assert_allclose(read_array(tmp_path / "r.npy"), want, rtol=0, atol=1e-6)


def test_sinogram_fields_shapes():
    assert sinogram_fields("flats", np.ones(5), 5).shape == (1, 1, 5)
    assert sinogram_fields("flats", np.ones((1, 5)), 5).shape == (1, 1, 5)
    assert sinogram_fields("flats", np.ones((3, 1, 5)), 5).shape == (3, 1, 5)
    with pytest.raises(ValueError, match=r"^flats: .* got shape \(4, 5\), whose rows would all be averaged"):
        sinogram_fields("flats", np.ones((4, 5)), 5)


def test_the_checked_fields_come_back_averaged_when_asked(counts):
    """What a run normalises every slab with: the stacks' float32 means, as normalize averages them."""
    _, _, flat, dark = counts
    flats = np.stack([flat, flat + 2, flat + 4]).astype(np.uint16)
    darks = np.stack([dark, dark + 1]).astype(np.uint16)
    f, d = check_flats_darks(flats, darks, (4, 16), averaged=True)
    assert f.dtype == d.dtype == np.float32 and f.shape == d.shape == (4, 16)
    np.testing.assert_array_equal(f, flats.mean(axis=0, dtype=np.float32))
    np.testing.assert_array_equal(d, darks.mean(axis=0, dtype=np.float32))
    same = check_flats_darks(flats, darks, (4, 16))
    assert same[0] is flats and same[1] is darks  # as given


def test_a_stack_is_averaged_on_threads_to_the_same_float32_image(monkeypatch):
    """The bands of rows each thread averages give, pixel by pixel, the sum of one
    NumPy call (float32 sums of values whose order matters)."""
    from leveret.preprocess import _common

    monkeypatch.setattr(_common, "MEAN_PER_THREAD", 64)
    rng = np.random.default_rng(3)
    stack = (rng.standard_normal((9, 37, 21)) * 10.0 ** rng.integers(-3, 4, (9, 1, 1))).astype(np.float32)
    got = _common.average_fields("flats", stack, (37, 21), np)
    np.testing.assert_array_equal(got, stack.mean(axis=0, dtype=np.float32))
    assert _common.average_fields("flats", stack[:1], (37, 21), np).dtype == np.float32
