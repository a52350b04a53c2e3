"""The frame correction on the CPU (leveret.live.correct) against leveret.preprocess."""

import numpy as np

from leveret.live import correct
from leveret.preprocess import minus_log, normalize


def test_correction_equals_normalize_and_minus_log_and_counts_non_finite_values():
    rng = np.random.default_rng(0)
    dark = rng.uniform(90, 110, (6, 9))
    flat = dark + rng.uniform(3e4, 4e4, (6, 9))
    flat[2, 3] = dark[2, 3] - 1  # a dead pixel: zero attenuation, as normalize sets it
    frame = rng.uniform(50, 3e4, (6, 9)).astype(np.float32)
    frame[1, 1] = 0.0  # below the dark: the log's floor
    c = correct.Correction(flat, dark, True, (6, 9))
    out = np.full((6, 9), np.nan, np.float32)
    assert c.frame(frame, out) == 0
    expected = minus_log(normalize(frame[None], flat.astype(np.float32), dark.astype(np.float32)))[0]
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-7)
    assert out[2, 3] == 0.0
    frame[4, 4], frame[0, 8] = np.nan, np.inf
    assert c.frame(frame, out) == 2
    assert np.isnan(out[4, 4]) and np.isneginf(out[0, 8])


def test_correction_without_flat_converts_and_optionally_takes_the_log():
    frame = np.array([[1, 2], [3, 40000]], np.uint16)
    out = np.empty((2, 2), np.float32)
    assert correct.Correction(None, None, False, (2, 2)).frame(frame, out) == 0
    np.testing.assert_array_equal(out, frame.astype(np.float32))
    assert correct.Correction(None, None, True, (2, 2)).frame(np.full((2, 2), 0.5), out) == 0
    np.testing.assert_allclose(out, -np.log(0.5), rtol=1e-6)
