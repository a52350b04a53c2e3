"""The fused correction kernel (leveret/cuda/correct.cu) against the CPU correction (leveret.live.correct).

Small sizes: the file also runs quickly under compute-sanitizer memcheck.
"""

import numpy as np
import pytest

from leveret.live.correct import Correction

pytestmark = pytest.mark.gpu
ROWS, COLS = 12, 40


@pytest.mark.parametrize("dtype", [np.uint16, np.float32])
@pytest.mark.parametrize("with_flat", [True, False])
def test_fused_correction_equals_the_cpu_one_and_counts_non_finite_values(dtype, with_flat):
    import cupy
    from leveret.live.correct import GpuCorrection

    rng = np.random.default_rng(0)
    k, n_pad = 5, 64
    dark = rng.uniform(90, 110, (ROWS, COLS)).astype(np.float32)
    flat = (dark + rng.uniform(3e4, 4e4, (ROWS, COLS))).astype(np.float32)
    flat[3, 7] = dark[3, 7]  # a dead pixel
    frames = rng.uniform(200, 3e4, (k, ROWS, COLS)).astype(dtype)
    if dtype == np.float32:
        frames[2, 5, 9] = np.nan
        frames[4, 0, 0] = np.inf
    corr = Correction(flat if with_flat else None, dark if with_flat else None, True, (ROWS, COLS))
    expected = np.empty((k, ROWS, COLS), np.float32)
    counts_cpu = [corr.frame(f, expected[i]) for i, f in enumerate(frames)]
    out = cupy.full((k + 1, ROWS, n_pad), np.nan, np.float32)  # poisoned: every written value is checked
    counts = cupy.full(k + 1, -7, np.int32)
    GpuCorrection(corr).batch(cupy.asarray(frames), out, counts)
    got = out.get()
    assert list(counts.get()[:k]) == counts_cpu
    if dtype == np.float32:
        assert counts_cpu == [0, 0, 1, 0, 1]
    else:
        assert counts_cpu == [0] * k
    finite = np.isfinite(expected)
    # same float32 operations; logf and the CPU's log differ by at most an ulp or two
    np.testing.assert_allclose(got[:k, :, :COLS][finite], expected[finite], rtol=2e-6, atol=1e-6)
    assert np.all(got[:k, :, COLS:] == 0)  # the FFT's zero padding
    assert np.isnan(got[k]).all()  # beyond the batch: untouched
