"""RabbitCT runner: the HU metrics on hand-made volumes, timings and scores of real runs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from leveret.rabbitct import (
    HISTOGRAM_EDGES,
    PSNR_PEAK_HU,
    RabbitCTResult,
    hu_errors,
    hu_from_mu,
    make_dataset,
    run_benchmark,
)
from leveret.rabbitct import runner

SCAN = dict(n_views=24, n_rows=40, n_cols=48)
L = 16


@pytest.fixture(scope="module")
def dataset():
    cache = {}
    data = make_dataset(**SCAN, reference_sizes=(L, 2 * L), cache=cache)
    return data, cache


# -- metrics ---------------------------------------------------------------------------------


def test_hu_errors_on_known_values():
    result = np.array([[1000.0, 1000.5], [998.0, 1012.0]])
    reference = np.full((2, 2), 1000, dtype=np.uint16)
    e = hu_errors(result, reference)
    # errors 0, 0.5, -2, 12
    assert e["n_voxels"] == 4
    assert e["mse_hu2"] == pytest.approx((0 + 0.25 + 4 + 144) / 4)
    assert e["rmse_hu"] == pytest.approx(np.sqrt(148.25 / 4))
    assert e["psnr_db"] == pytest.approx(10 * np.log10(4095.0**2 / (148.25 / 4)))
    assert e["max_abs_error_hu"] == 12.0
    assert e["mean_error_hu"] == pytest.approx(10.5 / 4)
    # RabbitCTRunner's bins: [0,1) [1,2) ... [9,10) [10,inf)
    np.testing.assert_array_equal(e["bin_edges_hu"], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, np.inf])
    np.testing.assert_array_equal(e["histogram"], [2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1])
    assert PSNR_PEAK_HU == 4095.0 and np.array_equal(HISTOGRAM_EDGES, e["bin_edges_hu"])


def test_hu_errors_identical_and_custom_bins():
    a = np.arange(27, dtype=np.float32).reshape(3, 3, 3)
    e = hu_errors(a, a)
    assert e["mse_hu2"] == 0 and e["rmse_hu"] == 0 and e["psnr_db"] == float("inf")
    assert e["histogram"][0] == 27 and e["histogram"][1:].sum() == 0
    e = hu_errors(a + 0.25, a, bins=[0.0, 0.1, 0.3, 1.0])
    np.testing.assert_array_equal(e["histogram"], [0, 27, 0])


def test_hu_errors_slab_by_slab_equals_all_at_once(monkeypatch, rng):
    a = rng.normal(1000, 3, size=(9, 7, 5))
    b = rng.integers(990, 1010, size=(9, 7, 5)).astype(np.uint16)
    whole = hu_errors(a, b)
    monkeypatch.setattr(runner, "_SLAB_VOXELS", 40)  # 1 slice per slab
    sliced = hu_errors(a, b)
    for key in ("mse_hu2", "max_abs_error_hu", "mean_error_hu"):
        assert sliced[key] == pytest.approx(whole[key], rel=1e-12)
    np.testing.assert_array_equal(sliced["histogram"], whole["histogram"])
    direct = a - b.astype(np.float64)
    assert whole["mse_hu2"] == pytest.approx(np.mean(direct**2), rel=1e-12)


def test_hu_errors_refuses_bad_input():
    a = np.zeros((2, 2))
    with pytest.raises(ValueError, match="reference_hu"):
        hu_errors(a, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="result_hu"):
        hu_errors(np.array([[np.nan, 0], [0, 0]]), a)
    with pytest.raises(ValueError, match="result_hu"):
        hu_errors(np.array([], dtype=float), np.array([], dtype=float))
    with pytest.raises(ValueError, match="reference_hu"):
        hu_errors(a, np.array([["a", "b"], ["c", "d"]]))
    with pytest.raises(ValueError, match="bins"):
        hu_errors(a, a, bins=[1.0, 0.0])


# -- runs ------------------------------------------------------------------------------------


def test_cpu_run_against_float64_reference_is_float32_rounding_only(dataset):
    data, cache = dataset
    res = run_benchmark(data, L, backend="cpu", reference=cache[L], repeats=2)
    assert isinstance(res, RabbitCTResult)
    assert res.comparison == "float" and res.backend == "cpu" and res.transfer_times_s is None
    # float32 output vs float64 (values near 1000 HU, eps/2 = 6e-5 HU): measured RMSE 1.0e-5 HU,
    # max 8.5e-5 HU, PSNR 172 dB; bounds 5x (PSNR for the RMSE bound: 158 dB).
    assert res.rmse_hu < 5e-5 and res.max_abs_error_hu < 4e-4
    assert res.psnr_db > 158
    assert res.errors["n_voxels"] == L**3
    # RabbitCT's arithmetic.
    assert len(res.compute_times_s) == 2 and res.time_s == min(res.compute_times_s)
    assert res.voxel_updates == L**3 * SCAN["n_views"]
    assert res.gups == pytest.approx(L**3 * SCAN["n_views"] / res.time_s / 1e9, rel=1e-12)
    assert res.time_per_projection_s == pytest.approx(res.time_s / SCAN["n_views"], rel=1e-12)
    d = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    assert d["size"] == L and d["gups"] == pytest.approx(res.gups) and d["errors"]["bin_edges_hu"][-1] is None
    text = res.table()
    assert "GUPS" in text and "RMSE" in text and "float HU" in text


def test_cpu_run_against_the_files_reference_is_rabbitcts_score(dataset):
    data, cache = dataset
    res = run_benchmark(data, 2 * L, backend="cpu")
    assert res.comparison == "quantised" and "uint16" in res.reference
    # Quantised HU: only voxels whose float32 and float64 values straddle a half-integer differ, by 1;
    # with float32 errors below 4e-4 HU (above) that is at most ~1e-3 of the voxels: RMSE < 0.03
    # (measured: none differ).
    assert res.rmse_hu < 0.03 and res.max_abs_error_hu <= 1.0
    assert res.errors["histogram"][0] + res.errors["histogram"][1] == (2 * L) ** 3
    # The same score, computed by hand from the float64 volume the reference came from.
    quantised = run_benchmark(data, 2 * L, backend="cpu", reference=cache[2 * L], compare="quantised")
    assert quantised.mse_hu2 == pytest.approx(res.mse_hu2, abs=1e-12)
    np.testing.assert_array_equal(hu_from_mu(cache[2 * L], data.hu_scale, data.hu_offset), data.references[2 * L])


def test_run_benchmark_refuses_bad_input(dataset):
    data, cache = dataset
    with pytest.raises(ValueError, match="size"):
        run_benchmark(data, 64, backend="cpu")  # no such reference, none given
    with pytest.raises(ValueError, match="size"):
        run_benchmark(data, 16.0, backend="cpu")
    with pytest.raises(TypeError, match="data"):
        run_benchmark(data.projections, L, backend="cpu")
    with pytest.raises(ValueError, match="reference"):
        run_benchmark(data, L, backend="cpu", reference=cache[2 * L])  # wrong shape
    with pytest.raises(TypeError, match="reference"):
        run_benchmark(data, L, backend="cpu", reference=cache[L].tolist())  # not an array
    with pytest.raises(ValueError, match="reference"):
        run_benchmark(data, L, backend="cpu", reference=np.zeros((L,) * 3, np.int32))
    with pytest.raises(ValueError, match="repeats"):
        run_benchmark(data, L, backend="cpu", repeats=0)
    with pytest.raises(ValueError, match="compare"):
        run_benchmark(data, L, backend="cpu", compare="exact")
    with pytest.raises(ValueError, match="include_transfers"):
        run_benchmark(data, L, backend="cpu", include_transfers="yes")
    with pytest.raises(ValueError, match="backend"):
        run_benchmark(data, L, backend="tpu")


def test_texture_emulation_costs_a_fraction_of_a_hu(dataset):
    """interpolation="linear8": the CPU computes what the CUDA kernel does (8-bit weights)."""
    data, cache = dataset
    res = run_benchmark(data, L, backend="cpu", reference=cache[L], interpolation="linear8")
    assert res.interpolation == "linear8" and "emulation" in res.device
    # Far above float32 rounding (1e-4 HU), yet unbiased and below a HU at this coarse scale:
    # measured RMSE 0.66 HU, mean 0.013 HU; bounds 1.5x and 4x.
    assert 0.3 < res.rmse_hu < 1.0 and abs(res.errors["mean_error_hu"]) < 0.05


# -- GPU -------------------------------------------------------------------------------------

# The texture unit interpolates with 8-bit weights (1/256 pixel steps), so the
# CUDA result differs from the float64 reference by far more than float32
# rounding, unbiased. Measured on an H200: this dataset gives 0.281 HU RMSE
# (the CPU's emulation, interpolation="linear8", the same to 4 digits); the
# full synthetic dataset (496 views of 1248 x 960) gives 0.141 HU at L = 128,
# 256 and 512 (0.210 HU quantised). Zinsser and Keck (2013)'s 0.021 HU on the
# rabbit is not reached on this phantom, whose skull is a sharp
# 1000 HU step: the floor is the kernel's 8-bit weights, not the runner. The
# full size takes minutes to build, so this test keeps to seconds and asserts
# the bound for its own scale.
GPU_SCAN = dict(n_views=124, n_rows=240, n_cols=312)
GPU_SIZE = 64
GPU_RMSE_BOUND_HU = 0.4


@pytest.mark.gpu
def test_cuda_run_is_timed_both_ways_and_close_to_float64():
    cache = {}
    data = make_dataset(**GPU_SCAN, reference_sizes=(GPU_SIZE,), cache=cache)
    res = run_benchmark(data, GPU_SIZE, backend="cuda", reference=cache[GPU_SIZE], repeats=2)
    print(res.table())
    assert res.backend == "cuda" and res.comparison == "float"
    assert len(res.transfer_times_s) == 2 and len(res.compute_times_s) == 2
    assert res.time_s == min(res.transfer_times_s) and res.compute_time_s <= res.time_s
    assert res.gups == pytest.approx(GPU_SIZE**3 * GPU_SCAN["n_views"] / res.time_s / 1e9, rel=1e-12)
    assert res.rmse_hu <= GPU_RMSE_BOUND_HU and abs(res.errors["mean_error_hu"]) < 0.05
    # The kernel is what the CPU emulates: the same score.
    emulated = run_benchmark(data, GPU_SIZE, backend="cpu", reference=cache[GPU_SIZE], interpolation="linear8")
    assert res.rmse_hu == pytest.approx(emulated.rmse_hu, rel=0.05)
    # RabbitCT's own score against the file's reference, and without transfers.
    score = run_benchmark(data, GPU_SIZE, backend="cuda", include_transfers=False)
    print(score.table())
    assert score.transfer_times_s is None and score.time_s == score.compute_time_s
    assert score.comparison == "quantised" and score.rmse_hu <= GPU_RMSE_BOUND_HU + 0.1
