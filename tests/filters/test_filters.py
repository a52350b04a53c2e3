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
    # DC is the sum of the kernel truncated to the padded grid: 1/4 - 2 sum_{odd k < n_pad/2}
    # 1/(pi k)^2, the tail the truncation drops (~ 2 / (pi^2 n_pad)).
    odd = np.arange(1, n_pad // 2, 2)
    assert resp[0] == pytest.approx(0.25 - 2 * np.sum(1 / (np.pi * odd) ** 2), rel=1e-9)
    # The ramp |f| above an eighth of Nyquist: measured 7.9e-4 relative; bound 1.2e-3.
    np.testing.assert_allclose(resp[n_pad // 8 :], f[n_pad // 8 :], rtol=1.2e-3)


def test_windows_at_zero_cutoff_and_nyquist():
    for name in FILTERS:
        w = window(name, 101)
        assert w[0] == pytest.approx(1.0)
        assert np.all(np.diff(w) <= 1e-12)  # non-increasing
    assert window("hann", 101)[-1] == pytest.approx(0.0, abs=1e-12)
    assert window("hamming", 101)[-1] == pytest.approx(0.08)
    assert window("cosine", 101)[-1] == pytest.approx(0.0, abs=1e-12)
    assert window("shepp-logan", 101)[-1] == pytest.approx(2 / np.pi)
    # Half way to Nyquist: the textbook windows' values.
    halfway = {
        "ram-lak": 1.0,
        "shepp-logan": np.sin(np.pi / 4) / (np.pi / 4),
        "cosine": np.cos(np.pi / 4),
        "hamming": 0.54,
        "hann": 0.5,
    }
    for name in FILTERS:
        assert window(name, 101)[50] == pytest.approx(halfway[name], rel=1e-12), name
        # A cutoff stretches the window to end there, and zeroes what lies above.
        half, full = window(name, 101, cutoff=0.5), window(name, 101)
        np.testing.assert_allclose(half[:51], full[::2], rtol=1e-12, atol=1e-15)
        assert np.all(half[51:] == 0), name


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
    direct = tau * np.apply_along_axis(lambda r: np.convolve(r, h)[n - 1 : 2 * n - 1], -1, rows)
    # float64 FFT rounding ~ eps log2(n_pad) |q| ~ 3e-15 (measured 4.4e-16, |q| up to 1.5): bound 1e-14.
    np.testing.assert_allclose(out, direct, rtol=0, atol=1e-14)


def test_apply_filter_weights_dtypes_and_edge_padding(rng):
    rows = rng.standard_normal((2, 4, 16)).astype(np.float32)
    resp = filter_response(16)
    w = np.array([1.0, 2.0, 0.5, 0.0])
    out = apply_filter(rows, resp, weights=w)
    assert out.dtype == np.float32 and out.flags.c_contiguous
    plain = apply_filter(rows, resp)
    # Powers of two scale float32 values exactly.
    np.testing.assert_array_equal(out[:, 0], plain[:, 0])
    np.testing.assert_array_equal(out[:, 1], 2 * plain[:, 1])
    np.testing.assert_array_equal(out[:, 2], 0.5 * plain[:, 2])
    assert np.all(out[:, 3] == 0)
    const = np.ones((1, 1, 16))
    # A constant row is an object wider than the detector: edge padding sees
    # no edge, zero padding sees a box.
    # (measured 0.0063 and 0.128 of the row's value 1)
    assert np.abs(apply_filter(const, resp, padding="edge")).max() < 0.01
    assert np.abs(apply_filter(const, resp, padding="zero")).max() > 0.1


@pytest.mark.parametrize("n", [16, 23])
def test_edge_padding_repeats_each_end_on_its_own_side(n):
    """Edge padding is the row with its first value repeated before it and its last after it
    (half the padding each side), filtered by circular convolution over the padded length:
    here summed directly, in float64, with the filter's own kernel. A row that is not
    constant (a slope and a bump) shows where each pad lies; a constant row cannot."""
    row = np.linspace(1.0, 3.0, n) + np.exp(-0.5 * ((np.arange(n) - 0.3 * n) / 2.0) ** 2)
    resp = filter_response(n, "hann")
    n_pad = 2 * (resp.size - 1)
    left = (n_pad - n) // 2
    padded = np.concatenate([np.full(left, row[0]), row, np.full(n_pad - n - left, row[-1])])
    kernel = scipy.fft.irfft(resp, n_pad)  # the response is real and even
    m = np.arange(n_pad)
    direct = np.array([np.dot(padded, kernel[(i - m) % n_pad]) for i in range(left, left + n)])
    out = apply_filter(row[None], resp, padding="edge")[0]
    # float64 FFT rounding: measured 1e-16 on values up to 0.06; bound 1e-13
    np.testing.assert_allclose(out, direct, rtol=0, atol=1e-13)
    zero = np.concatenate([row, np.zeros(n_pad - n)])
    direct_zero = np.array([np.dot(zero, kernel[(i - m) % n_pad]) for i in range(n)])
    np.testing.assert_allclose(apply_filter(row[None], resp)[0], direct_zero, rtol=0, atol=1e-13)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"filter": "ramp"}, "filter"),
        ({"cutoff": 0.0}, "cutoff"),
        ({"cutoff": 1.5}, "cutoff"),
        ({"det_spacing": -1}, "det_spacing"),
    ],
)
def test_bad_filter_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        filter_response(16, **kwargs)
