"""Ramp filter design and application."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.fft

from leveret.filters import FILTERS, apply_filter, filter_response, padded_length, ramp_kernel, window


def test_padding_is_at_least_twice_the_width():
    for n in (1, 7, 128, 160, 2048, 2049):
        n_pad = padded_length(n)
        assert n_pad >= 2 * n and n_pad % 2 == 0
        assert scipy.fft.next_fast_len(n_pad, real=True) == n_pad


def test_ramp_kernel_values():
    h = ramp_kernel(16, spacing=0.5)
    assert h[0] == pytest.approx(1 / (4 * 0.25))
    assert h[2] == 0 and h[14] == 0
    assert h[1] == pytest.approx(-1 / (np.pi * 0.5) ** 2) and h[15] == h[1]
    assert h[3] == pytest.approx(-1 / (3 * np.pi * 0.5) ** 2)


def test_band_limited_ramp_has_no_dc_error():
    """A |f| ramp sampled in frequency is 0 at DC but wrong (offset) elsewhere;
    the spatial kernel's response tends to 0 at DC and to the ramp above it."""
    n = 256
    resp = filter_response(n, "ram-lak")
    n_pad = 2 * (resp.size - 1)
    f = np.fft.rfftfreq(n_pad)
    assert 0 < resp[0] < 1.0 / n_pad                        # ~ 1/(2 n_pad), the finite-grid DC term
    np.testing.assert_allclose(resp[n_pad // 8:], f[n_pad // 8:], rtol=2e-3)   # the ramp |f|


def test_windows_at_zero_cutoff_and_nyquist():
    for name in FILTERS:
        w = window(name, 101)
        assert w[0] == pytest.approx(1.0)
        assert np.all(np.diff(w) <= 1e-12)                  # non-increasing
    assert window("hann", 101)[-1] == pytest.approx(0.0, abs=1e-12)
    assert window("hamming", 101)[-1] == pytest.approx(0.08)
    assert window("cosine", 101)[-1] == pytest.approx(0.0, abs=1e-12)
    assert window("shepp-logan", 101)[-1] == pytest.approx(2 / np.pi)
    half = window("ram-lak", 101, cutoff=0.5)
    assert np.all(half[:51] == 1) and np.all(half[51:] == 0)


def test_apply_filter_matches_direct_convolution(rng):
    n = 37
    rows = rng.standard_normal((3, 5, n))
    tau = 0.7
    out = apply_filter(rows.astype(np.float64), filter_response(n, det_spacing=tau))
    # Direct linear convolution with the spatial kernel: q = tau * sum_m p[m] h[k - m].
    k = np.arange(-(n - 1), n)
    h = np.zeros(k.size)
    h[k == 0] = 1 / (4 * tau**2)
    odd = k % 2 == 1
    h[odd] = -1 / (np.pi * k[odd] * tau) ** 2
    direct = tau * np.apply_along_axis(lambda r: np.convolve(r, h)[n - 1:2 * n - 1], -1, rows)
    np.testing.assert_allclose(out, direct, atol=1e-12)


def test_apply_filter_weights_dtypes_and_edge_padding(rng):
    rows = rng.standard_normal((2, 4, 16)).astype(np.float32)
    resp = filter_response(16)
    w = np.array([1.0, 2.0, 0.5, 0.0])
    out = apply_filter(rows, resp, weights=w)
    assert out.dtype == np.float32 and out.flags.c_contiguous
    np.testing.assert_allclose(out[:, 1], 2 * apply_filter(rows, resp)[:, 1], rtol=1e-5)
    assert np.all(out[:, 3] == 0)
    const = np.ones((1, 1, 16))
    # A constant row is an object wider than the detector: edge padding sees
    # no edge, zero padding sees a box.
    assert np.abs(apply_filter(const, resp, padding="edge")).max() < 0.01
    assert np.abs(apply_filter(const, resp, padding="zero")).max() > 0.1


@pytest.mark.parametrize("kwargs,match", [
    ({"filter": "ramp"}, "filter"), ({"cutoff": 0.0}, "cutoff"), ({"cutoff": 1.5}, "cutoff"),
    ({"det_spacing": -1}, "det_spacing"),
])
def test_bad_filter_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        filter_response(16, **kwargs)
