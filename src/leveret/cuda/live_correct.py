"""Launcher for ``live_correct.cu``: the live reconstructor's frame correction
(flat/dark, -log, float32) into the zero-padded FFT input, counting each
frame's non-finite results, in one pass. The CPU twin is
:meth:`leveret.live.correct.Correction.frame` (NumPy in place)."""

from __future__ import annotations

import numpy as np

from ._module import load_module

BLOCK = 256  # threads per block (the kernels' launch bounds)
DEFINES = (f"LEVERET_LIVE_CORRECT_BLOCK={BLOCK}",)
_KIND = {np.dtype(np.uint16): "u16", np.dtype(np.float32): "f32"}


def correct(frames, dark, denom, out, counts, *, normalize: bool, minus_log: bool, min_transmission: float) -> None:
    """Correct ``frames`` (k, n_rows, n_cols) uint16 or float32 CuPy into
    ``out[:k, :, :n_cols]`` of the zero-padded FFT input (k', n_rows, n_pad)
    float32 and zero ``out[:k, :, n_cols:]``; ``counts[:k]`` (int32, zeroed
    here) receives each frame's number of non-finite results. One launch on
    the current stream.

    Per pixel ``t = (p - dark) / denom`` with ``normalize`` (a pixel with
    ``denom <= 0`` is dead: ``t = 1``), else ``t = p``; then
    ``-log(max(t, min_transmission))`` with ``minus_log``.
    """
    kind = _KIND.get(np.dtype(frames.dtype))
    if kind is None:
        raise TypeError(f"frames: expected uint16 or float32 on the GPU, got {frames.dtype}")
    k, n_rows, n_cols = frames.shape
    n_pad = out.shape[2]
    counts[:k] = 0
    load_module("live_correct").get_function(f"correct_{kind}")(
        (-(-n_pad // BLOCK), n_rows, k),
        (BLOCK,),
        (
            frames,
            dark,
            denom,
            out,
            counts,
            np.int32(n_rows),
            np.int32(n_cols),
            np.int32(n_pad),
            np.int32(bool(normalize)),
            np.int32(bool(minus_log)),
            np.float32(min_transmission),
        ),
    )
