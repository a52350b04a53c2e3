"""leveret.preprocess: find_center / center_sweep, remove_zingers, remove_stripes."""

import numpy as np
import pytest

import leveret
from leveret.phantom import shepp_logan_ellipses
from leveret.preprocess import (
    CenterEstimate,
    center_sweep,
    find_center,
    minus_log,
    normalize,
    remove_stripes,
    remove_zingers,
)

N_COLS = 128
PHANTOM = shepp_logan_ellipses(radius=40.0)


def _sinogram(angles, center):
    return PHANTOM.project(leveret.ParallelGeometry(angles, N_COLS, center=center))


@pytest.mark.parametrize("center", [70.3, 57.8, 63.5])
@pytest.mark.parametrize(
    "angles",
    [
        np.linspace(0, np.pi, 91),  # ends 180 apart
        np.linspace(0, 2 * np.pi, 120, endpoint=False),
    ],
    ids=["180-inclusive", "360"],
)
def test_find_center_pairs_simulated(angles, center):
    est = find_center(_sinogram(angles, center), angles, method="pairs")
    assert isinstance(est, CenterEstimate) and est.method == "pairs"
    assert abs(est.center - center) < 0.5, est
    assert 0.5 < est.confidence <= 1 and est.details["spread"] < 0.5


def test_find_center_relation_exact_on_integer_shift():
    """center = (n_cols - 1)/2 + d/2: a shift by a whole pixel pair is found exactly."""
    angles = np.array([0.4, 0.4 + np.pi])
    est = find_center(_sinogram(angles, 60.5), angles, method="pairs")  # d = -6
    assert est.center == pytest.approx(60.5, abs=0.02)


def test_find_center_sweep_without_pairs_and_stack_rows():
    angles = np.linspace(0, np.pi, 60, endpoint=False)  # no 180-degree pair
    sino = _sinogram(angles, 66.4)
    est = find_center(sino, angles, search=(60, 72), method="sweep")
    assert est.method == "sweep" and abs(est.center - 66.4) < 0.5 and 0 < est.confidence <= 1
    stack = np.stack([sino, sino], axis=1)  # (A, 2, C)
    assert find_center(stack, angles, row=1, search=(60, 72), method="sweep").center == est.center
    with pytest.raises(ValueError, match="method"):
        find_center(sino, angles, method="pairs")
    with pytest.raises(ValueError, match="search"):
        find_center(sino, angles, search=(90, 80))


def test_find_center_real_scan_agrees_with_sweep(savu_scan):
    p = minus_log(normalize(savu_scan.projections, savu_scan.flat, savu_scan.dark))
    est = find_center(p, savu_scan.angles)
    assert est.method == "pairs"  # -88.2 and 91.8 degrees
    centers = np.arange(80, 92.01, 0.25)
    scores = center_sweep(p[:, p.shape[1] // 2, :], savu_scan.angles, centers)
    best = centers[np.argmin(scores)]
    assert abs(best - 86) <= 1  # README: near column 86
    assert abs(est.center - best) < 1, (est, best)
    assert est.details["spread"] < 1


@pytest.mark.parametrize("metric", ["negativity", "entropy"])
def test_center_sweep_metrics_prefer_true_center(metric):
    angles = np.linspace(0, np.pi, 90, endpoint=False)
    centers = np.array([59.0, 62.0, 64.0, 66.0, 69.0])
    scores = center_sweep(_sinogram(angles, 64.0), angles, centers, metric=metric)
    assert scores.shape == (5,) and np.argmin(scores) == 2


def _zinger_case():
    rng = np.random.default_rng(7)
    angles = np.linspace(0, np.pi, 180, endpoint=False)
    noisy = _sinogram(angles, 63.5) + rng.normal(0, 0.05, (180, N_COLS))
    where = np.zeros(noisy.size, bool)
    where[rng.choice(noisy.size, 60, replace=False)] = True
    where = where.reshape(noisy.shape)
    hit = noisy + 5.0 * where * rng.choice([-1, 1], noisy.shape)
    return noisy, hit, where


def test_remove_zingers_along_angles():
    noisy, hit, where = _zinger_case()
    out = remove_zingers(hit, axes="angle")
    assert out.shape == hit.shape and out.dtype == np.float64
    assert np.abs(out - noisy)[where].max() < 0.5  # every zinger gone
    assert np.mean(out[~where] != hit[~where]) < 0.005  # the rest nearly untouched
    assert np.sqrt(np.mean((out - noisy) ** 2)) < 0.3 * np.sqrt(np.mean((hit - noisy) ** 2))


def test_remove_zingers_image_stack():
    rng = np.random.default_rng(3)
    yy, xx = np.mgrid[:40, :50]
    smooth = np.exp(-((yy - 20) ** 2 + (xx - 25) ** 2) / 200.0)
    stack = np.stack([smooth * (1 + 0.1 * k) for k in range(6)]).astype(np.float32)
    stack += rng.normal(0, 0.01, stack.shape).astype(np.float32)
    hit = stack.copy()
    hit[2, 10, 10] += 1.0
    hit[5, 39, 0] += 1.0  # a corner pixel
    out = remove_zingers(hit)
    assert out.dtype == np.float32
    assert abs(out[2, 10, 10] - stack[2, 10, 10]) < 0.05 and abs(out[5, 39, 0] - stack[5, 39, 0]) < 0.05
    assert np.mean(out != hit) < 0.002
    with pytest.raises(ValueError, match="size"):
        remove_zingers(hit, size=4)


@pytest.mark.parametrize("method, factor", [("sort", 5.0), ("mean", 4.0)])
def test_remove_stripes_reduces_stripes_not_accuracy(method, factor):
    angles = np.linspace(0, np.pi, 180, endpoint=False)
    g = leveret.ParallelGeometry(angles, N_COLS)
    clean = PHANTOM.project(g)
    cols = [30, 50, 51, 64, 77, 95]
    striped = clean.copy()
    striped[:, cols[:3] + cols[4:]] += [3.0, -2.0, 2.0, 4.0, -3.0]  # constant offsets
    striped[:, 64] += np.linspace(0.5, 3.0, 180)  # a linear (drifting) one
    out = remove_stripes(striped, method=method)
    stripe = lambda s: np.sqrt(np.mean((s - clean).mean(axis=0)[cols] ** 2))
    assert stripe(out) < stripe(striped) / factor
    truth = PHANTOM.rasterize(g.default_volume(), supersampling=4)
    err = lambda s: np.sqrt(np.mean((leveret.fbp(s, g, filter="hann") - truth) ** 2))
    assert err(out) < err(striped)
    stack = remove_stripes(np.stack([striped, striped], axis=1), method=method)  # row by row
    np.testing.assert_allclose(stack[:, 1], out, rtol=1e-6, atol=1e-9)


@pytest.mark.gpu
def test_cupy_matches_numpy():
    import cupy

    noisy, hit, where = _zinger_case()
    angles = np.linspace(0, np.pi, 180, endpoint=False)
    np.testing.assert_allclose(
        remove_zingers(cupy.asarray(hit), axes="angle").get(), remove_zingers(hit, axes="angle"), atol=1e-9
    )
    for method in ("sort", "mean"):
        np.testing.assert_allclose(
            remove_stripes(cupy.asarray(noisy), method=method).get(), remove_stripes(noisy, method=method), atol=1e-9
        )
    sino = _sinogram(np.linspace(0, np.pi, 91), 70.3)
    ref = find_center(sino, np.linspace(0, np.pi, 91))
    est = find_center(cupy.asarray(sino), np.linspace(0, np.pi, 91))
    assert est.center == pytest.approx(ref.center, abs=1e-6)
    assert find_center(cupy.asarray(_sinogram(angles, 66.0)), angles, search=(60, 72)).method == "vo"
