"""leveret.preprocess: normalize and minus_log."""

import numpy as np
import pytest

from leveret.preprocess import minus_log, normalize


def test_normalize_exact_values():
    proj = np.array([[[3, 5, 9], [1, 2, 7]], [[5, 3, 1], [4, 2, 8]]], np.uint16)  # (2 angles, 2 rows, 3 cols)
    dark = np.array([[1, 1, 1], [0, 2, 2]], np.float32)
    flat = np.array([[5, 9, 3], [4, 6, 10]], np.float32)
    t = normalize(proj, flat, dark)
    assert t.dtype == np.float32 and t.shape == proj.shape
    expected = (proj - dark.astype(np.float64)) / (flat - dark)
    np.testing.assert_array_equal(t, expected.astype(np.float32))
    assert t[0, 0, 0] == 0.5 and t[1, 1, 0] == 1.0 and t[0, 0, 2] == 4.0


def test_normalize_dead_pixels_are_one():
    proj = np.full((3, 2, 2), 7.0)
    dark = np.array([[1, 5], [1, 1]], np.float32)
    flat = np.array([[4, 5], [0, np.nan]], np.float32)  # flat - dark: 3, 0, -1, NaN
    t = normalize(proj, flat, dark)
    np.testing.assert_array_equal(t[:, 0, 0], 2.0)
    np.testing.assert_array_equal(t[:, [0, 1, 1], [1, 0, 1]], 1.0)
    assert np.isfinite(t).all()
    np.testing.assert_array_equal(minus_log(t)[:, [0, 1, 1], [1, 0, 1]], 0.0)


def test_normalize_averages_stacks_of_flats_and_darks():
    proj = np.arange(12, dtype=np.float32).reshape(3, 4) + 10  # a sinogram (3 angles, 4 cols)
    flats = np.stack([np.full(4, 20.0), np.full(4, 30.0)])  # mean 25
    darks = np.stack([np.full(4, 4.0), np.full(4, 6.0), np.full(4, 5.0)])  # mean 5
    np.testing.assert_allclose(normalize(proj, flats, darks), (proj - 5) / 20, rtol=1e-7)
    np.testing.assert_array_equal(normalize(proj, flats[:1], darks[:1]), normalize(proj, flats[0], darks[0]))


def test_normalize_out_and_in_place():
    proj = np.random.default_rng(0).uniform(10, 100, (4, 3, 5)).astype(np.float32)
    flat, dark = np.full((3, 5), 120.0), np.full((3, 5), 5.0)
    expected = normalize(proj, flat, dark)
    out = np.empty_like(proj)
    assert normalize(proj, flat, dark, out=out) is out
    np.testing.assert_array_equal(out, expected)
    assert normalize(proj, flat, dark, out=proj) is proj
    np.testing.assert_array_equal(proj, expected)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(projections=np.zeros(5)), r"^projections: expected shape"),
        (dict(projections=np.zeros((2, 3, 4), complex)), r"^projections: expected real"),
        (dict(flats=np.ones((3, 5))), r"^flats: expected one image of shape \(3, 4\)"),
        (dict(darks=np.zeros((0, 3, 4))), r"^darks: expected one image"),
        (dict(out=np.empty((2, 3, 4))), r"^out: expected shape \(2, 3, 4\) and dtype float32"),
    ],
)
def test_normalize_bad_input_names_argument(kwargs, match):
    args = dict(projections=np.zeros((2, 3, 4)), flats=np.ones((3, 4)), darks=np.zeros((3, 4)))
    args.update(kwargs)
    out = args.pop("out", None)
    with pytest.raises(ValueError, match=match):
        normalize(args["projections"], args["flats"], args["darks"], out=out)


def test_normalize_out_that_is_no_array_is_a_type_error():
    with pytest.raises(TypeError, match=r"^out: expected a numpy array"):
        normalize(np.zeros((2, 3, 4)), np.ones((3, 4)), np.zeros((3, 4)), out=[0.0])


def test_minus_log_values_and_clipping():
    t = np.array([1.0, np.exp(-2.0), 0.0, -0.5, 1e-7, 2.0], np.float32)
    p = minus_log(t)
    assert p.dtype == np.float32
    np.testing.assert_allclose(p, [0, 2, -np.log(1e-6), -np.log(1e-6), -np.log(1e-6), -np.log(2)], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(minus_log(t, min_transmission=1e-3)[2:4], -np.log(1e-3), rtol=1e-6)
    assert minus_log(t.astype(np.float64)).dtype == np.float64
    assert minus_log(np.array([1, 2], np.uint16)).dtype == np.float32
    assert np.isnan(minus_log(np.array([np.nan]))).all()
    assert minus_log(t, out=t) is t and t[1] == pytest.approx(2.0)
    for bad in (0, -1e-3, np.inf, "x"):
        with pytest.raises(ValueError, match=r"^min_transmission: expected a"):
            minus_log(t, min_transmission=bad)
    with pytest.raises(ValueError, match=r"^out: expected shape"):
        minus_log(t, out=np.empty(6, np.float64))


def test_real_scan(savu_scan):
    scan = savu_scan
    t = normalize(scan.projections, scan.flat, scan.dark)
    assert t.shape == (91, 135, 160) and t.dtype == np.float32
    assert np.isfinite(t).all()
    # The README's dead pixel (flat - dark == 0) gets transmission 1.
    dead = (scan.flat - scan.dark) <= 0
    assert dead.sum() == 1 and (t[:, dead] == 1).all()
    assert np.mean((t > 0) & (t <= 1.2)) > 0.999
    p = minus_log(t)
    assert np.isfinite(p).all() and (p[:, dead] == 0).all()
    # A sample that absorbs: mean line integral clearly positive, not absurd.
    assert 0.1 < float(p.mean()) < 3


@pytest.mark.gpu
def test_cupy_in_cupy_out():
    cp = pytest.importorskip("cupy")
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CuPy installed but no usable GPU
        pytest.skip(f"no CUDA device: {exc}")
    proj = np.random.default_rng(1).uniform(1, 50, (3, 4, 5)).astype(np.uint16)
    flats = np.full((2, 4, 5), 60.0, np.float32)
    dark = np.zeros((4, 5), np.float32)
    dark[0, 0] = 60  # one dead pixel
    t_gpu = normalize(cp.asarray(proj), cp.asarray(flats), dark)
    assert isinstance(t_gpu, cp.ndarray) and t_gpu.dtype == cp.float32
    np.testing.assert_allclose(t_gpu.get(), normalize(proj, flats, dark), rtol=1e-6)
    p_gpu = minus_log(t_gpu)
    assert isinstance(p_gpu, cp.ndarray)
    np.testing.assert_allclose(p_gpu.get(), minus_log(normalize(proj, flats, dark)), rtol=1e-5, atol=1e-6)
