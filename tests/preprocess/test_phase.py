"""leveret.preprocess.retrieve_phase (Paganin et al. 2002 and the generalised form of 2020):
absolute line integrals of analytic objects, the padding, slab borders, the argument checks."""

import numpy as np
import pytest

from leveret.preprocess import minus_log, phase_border, retrieve_phase, wavelength

ENERGY, PIXEL = 20.0, 1e-6  # keV, m
N = 256
Y, X = (np.mgrid[:N, :N] - (N - 1) / 2) * PIXEL  # metres from the image centre


def _gaussian_lines(peak, s):
    """mu T of a Gaussian bump of material: peak line integral ``peak``, width ``s`` metres."""
    return peak * np.exp(-(X**2 + Y**2) / (2 * s**2))


def test_wavelength_is_hc_over_e():
    # 12.398 keV <-> 1 Angstrom
    assert wavelength(12.398419843320026) == pytest.approx(1e-10, rel=1e-9)
    assert wavelength(20.0) == pytest.approx(6.19920992e-11, rel=1e-8)


def test_inverts_the_transport_of_intensity_forward_model_exactly():
    """I/I0 = exp(-mu T) - (R delta/mu) laplacian exp(-mu T) (Paganin 2002, eq. 6), the Laplacian
    taken analytically for a Gaussian bump: the retrieval gives mu T back to float64 rounding."""
    distance, delta_beta, s = 0.05, 100.0, 8e-6
    lines = _gaussian_lines(1.0, s)
    r2 = X**2 + Y**2
    f = np.exp(-lines)
    laplacian = f * (lines**2 * r2 / s**4 - lines * (r2 / s**4 - 2 / s**2))
    area = delta_beta * wavelength(ENERGY) * distance / (4 * np.pi)  # R delta / mu in m^2
    intensity = f - area * laplacian
    assert intensity.min() > 0.05  # strong but valid contrast
    out = retrieve_phase(intensity[None], energy=ENERGY, distance=distance, pixel_size=PIXEL, delta_beta=delta_beta)
    assert out.dtype == np.float64 and out.shape == (1, N, N)
    np.testing.assert_allclose(out[0], lines, rtol=0, atol=1e-9)
    # -log alone is far off: the fringes are half of the signal
    assert np.abs(minus_log(intensity) - lines).max() > 0.5


def _fresnel_intensity(lines, delta_beta, distance):
    """|psi|^2 at ``distance`` behind an object of line integral ``lines``: the exit wave
    exp(-k beta T - i k delta T) propagated with the Fresnel transfer function."""
    lam = wavelength(ENERGY)
    k_beta_t = lines / 2  # mu = 2 k beta
    psi = np.exp(-k_beta_t - 1j * delta_beta * k_beta_t)
    fy, fx = np.fft.fftfreq(N, PIXEL)[:, None], np.fft.fftfreq(N, PIXEL)[None, :]
    propagated = np.fft.ifft2(np.fft.fft2(psi) * np.exp(-1j * np.pi * lam * distance * (fx**2 + fy**2)))
    return np.abs(propagated) ** 2


def test_fresnel_propagated_wave_gives_mu_t_within_one_percent():
    """An independent forward model: Fresnel propagation of the exit wave. Measured: 0.69 %
    of the peak (-log: 19 %; delta/beta taken 4x too large: 29 %)."""
    distance, delta_beta, peak = 0.05, 100.0, 0.5
    lines = _gaussian_lines(peak, 16e-6)
    intensity = _fresnel_intensity(lines, delta_beta, distance).astype(np.float32)
    args = dict(energy=ENERGY, distance=distance, pixel_size=PIXEL)
    out = retrieve_phase(intensity[None], delta_beta=delta_beta, **args)[0]
    assert out.dtype == np.float32
    assert np.abs(out - lines).max() < 0.01 * peak
    assert np.abs(minus_log(intensity) - lines).max() > 0.15 * peak
    wrong = retrieve_phase(intensity[None], delta_beta=4 * delta_beta, **args)[0]
    assert np.abs(wrong - lines).max() > 0.2 * peak


@pytest.mark.parametrize("method", ["paganin", "generalized"])
def test_filter_of_one_fourier_mode(method):
    """A weak cosine of wavenumber k (radians per metre) comes out scaled by the filter at k:
    1 / (1 + a k^2) (Paganin), 1 / (1 + (2a/W^2)(2 - cos(W k_x) - cos(W k_y))) (generalised)."""
    distance, delta_beta, eps = 0.02, 50.0, 1e-6
    area = delta_beta * wavelength(ENERGY) * distance / (4 * np.pi)
    n = 64
    for m_y, m_x in ((0, 3), (5, 0), (4, 7)):
        ky, kx = 2 * np.pi * m_y / (n * PIXEL), 2 * np.pi * m_x / (n * PIXEL)
        yy, xx = np.mgrid[:n, :n] * PIXEL
        t = 1 + eps * np.cos(ky * yy + kx * xx)
        out = retrieve_phase(
            t[None], energy=ENERGY, distance=distance, pixel_size=PIXEL, delta_beta=delta_beta, pad=False, method=method
        )[0]
        gain = -np.sum(out * np.cos(ky * yy + kx * xx)) / np.sum(np.cos(ky * yy + kx * xx) ** 2) / eps
        if method == "paganin":
            expected = 1 / (1 + area * (kx**2 + ky**2))
        else:
            expected = 1 / (1 + 2 * area / PIXEL**2 * (2 - np.cos(PIXEL * kx) - np.cos(PIXEL * ky)))
        assert gain == pytest.approx(expected, rel=1e-5), (m_y, m_x)


def test_generalized_keeps_more_of_the_finest_detail():
    n = 32
    t = np.ones((1, n, n))
    t[0, :, ::2] -= 1e-6  # the highest column frequency
    args = dict(energy=ENERGY, distance=0.05, pixel_size=PIXEL, delta_beta=100.0, pad=False)
    paganin = np.ptp(retrieve_phase(t, **args)[0, 0])
    generalized = np.ptp(retrieve_phase(t, method="generalized", **args)[0, 0])
    assert generalized > 2 * paganin
    wide = np.ptp(retrieve_phase(t, method="generalized", width=4 * PIXEL, **args)[0, 0])
    assert wide != pytest.approx(generalized, rel=1e-3)  # width is used


def test_reduces_to_minus_log_as_delta_beta_or_distance_go_to_zero(rng):
    t = rng.uniform(0.2, 1.0, (3, 40, 50)).astype(np.float32)
    for args in (dict(delta_beta=1e-9, distance=0.1), dict(delta_beta=100.0, distance=0.0)):
        out = retrieve_phase(t, energy=ENERGY, pixel_size=PIXEL, **args)
        np.testing.assert_allclose(out, minus_log(t), rtol=1e-5, atol=2e-6)


def _edge_case():
    """Projections bright on the left and top, dark on the right and bottom, with detail."""
    rng = np.random.default_rng(5)
    yy, xx = np.mgrid[:128, :64]
    t = 0.9 - 0.6 * (xx / 63) - 0.2 * (yy / 127) + 0.05 * rng.standard_normal((128, 64))
    return np.stack([t, t[::-1]]).astype(np.float64)


def test_padding_prevents_wrap_around():
    t = _edge_case()
    args = dict(energy=ENERGY, distance=0.05, pixel_size=PIXEL, delta_beta=100.0)
    # reference: the same images in the middle of a wide canvas of their edge values
    wide = np.pad(t, ((0, 0), (400, 400), (400, 400)), mode="edge")
    reference = retrieve_phase(wide, pad=False, **args)[:, 400:-400, 400:-400]
    padded = retrieve_phase(t, **args)
    # the tolerance bounds the error of the filtered transmission, exp(-lines)
    assert np.abs(np.exp(-padded) - np.exp(-reference)).max() < 1e-3 * np.ptp(t)
    wrapped = retrieve_phase(t, pad=False, **args)
    assert np.abs(wrapped - reference).max() > 0.03


def test_slab_with_phase_border_rows_matches_the_whole_detector():
    """What the slab pipeline relies on: rows [r0, r1) retrieved from rows [r0 - b, r1 + b)."""
    t = _edge_case()
    args = dict(energy=ENERGY, distance=0.05, pixel_size=PIXEL, delta_beta=100.0)
    b = phase_border(**args)
    assert b == int(np.ceil(np.sqrt(100.0 * wavelength(ENERGY) * 0.05 / (4 * np.pi)) / PIXEL * np.log(500)))
    whole = retrieve_phase(t, **args)
    r0, r1 = 60, 68
    slab = retrieve_phase(t[:, r0 - b : r1 + b], **args)[:, b : b + r1 - r0]
    assert np.abs(np.exp(-slab) - np.exp(-whole[:, r0:r1])).max() < 1e-3 * np.ptp(t)
    tight = retrieve_phase(t[:, r0 - 1 : r1 + 1], **args)[:, 1 : 1 + r1 - r0]
    assert np.abs(tight - whole[:, r0:r1]).max() > 10 * np.abs(slab - whole[:, r0:r1]).max()


def test_in_place_and_float32():
    t = _edge_case().astype(np.float32)
    args = dict(energy=ENERGY, distance=0.05, pixel_size=PIXEL, delta_beta=100.0)
    expected = retrieve_phase(t, **args)
    out = retrieve_phase(t, out=t, **args)
    assert out is t and out.dtype == np.float32
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize(
    "name, value, match",
    [
        ("energy", 0.05, "energy: expected a photon energy in keV between 0.1 and 1000"),
        ("energy", 20000.0, "energy: .*got 20000"),  # eV given for keV
        ("energy", float("nan"), "energy: expected a finite number"),
        ("distance", -0.1, "distance: expected a sample-detector distance in metres, >= 0"),
        ("distance", 1500.0, "distance: .*below 1000"),
        ("pixel_size", 6.5, "pixel_size: expected a pixel size in metres"),  # micrometres given for metres
        ("pixel_size", 1e-10, "pixel_size: "),
        ("delta_beta", 0.0, "delta_beta: expected the ratio delta/beta of the material, > 0"),
        ("delta_beta", -5.0, "delta_beta: "),
        ("width", 0.5, "width: "),
        ("method", "tie", "method: "),
    ],
)
def test_bad_arguments_name_the_argument(name, value, match):
    args = dict(energy=ENERGY, distance=0.05, pixel_size=PIXEL, delta_beta=100.0)
    args[name] = value
    with pytest.raises(ValueError, match=match):
        retrieve_phase(np.ones((1, 8, 8), np.float32), **args)


def test_bad_shapes():
    args = dict(energy=ENERGY, distance=0.05, pixel_size=PIXEL, delta_beta=100.0)
    with pytest.raises(ValueError, match=r"transmission: expected projections \(n_angles, n_rows, n_cols\)"):
        retrieve_phase(np.ones((8, 8), np.float32), **args)
    with pytest.raises(ValueError, match="tolerance"):
        phase_border(tolerance=0.7, **args)


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["paganin", "generalized"])
def test_cupy_matches_numpy(method):
    import cupy

    t = _edge_case().astype(np.float32)
    args = dict(energy=ENERGY, distance=0.05, pixel_size=PIXEL, delta_beta=100.0, method=method)
    cpu = retrieve_phase(t, **args)
    gpu = retrieve_phase(cupy.asarray(t), **args)
    assert isinstance(gpu, cupy.ndarray) and gpu.dtype == cupy.float32
    np.testing.assert_allclose(gpu.get(), cpu, rtol=2e-5, atol=2e-5)  # float32 FFTs, two libraries
    lines = _gaussian_lines(0.5, 16e-6)
    intensity = _fresnel_intensity(lines, 100.0, 0.05).astype(np.float32)[None]
    out = retrieve_phase(cupy.asarray(intensity), energy=ENERGY, distance=0.05, pixel_size=PIXEL, delta_beta=100.0)
    assert float(cupy.abs(out[0] - cupy.asarray(lines)).max()) < 0.005
