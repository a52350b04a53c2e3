"""Launcher for ``correct.cu``: flat/dark correction and -log to float32 in one
pass, counting each frame's non-finite results. The live reconstructor corrects
its frames with it into the zero-padded FFT input; a slab's detector rows are
corrected with it before their reconstruction
(:func:`leveret.execution.slab.preprocess_rows`). The CPU twins are
:meth:`leveret.live.correct.Correction.frame` and
:func:`leveret.preprocess.normalize` then :func:`leveret.preprocess.minus_log`,
which give the same float32 operations in the same order."""

from __future__ import annotations

import numpy as np

from ._module import load_module

BLOCK = 256  # threads per block (the kernels' launch bounds)
DEFINES = (f"LEVERET_CORRECT_BLOCK={BLOCK}",)
MAX_FRAMES = 65535  # frames per launch: the grid's z extent
_KIND = {np.dtype(np.uint16): "u16", np.dtype(np.float32): "f32"}


def correct(frames, dark, denom, out, counts, *, normalize: bool, minus_log: bool, min_transmission: float) -> None:
    """Correct ``frames`` (k, n_rows, n_cols) uint16 or float32 CuPy, C-contiguous, into
    ``out[:k, :, :n_cols]`` of ``out`` (k', n_rows, n_pad) float32 and zero
    ``out[:k, :, n_cols:]``; ``counts[:k]`` (int32, zeroed here) receives each
    frame's number of non-finite results. ``dark`` and ``denom`` are float32
    (n_rows, n_cols), C-contiguous. On the current stream.

    Per pixel ``t = (p - dark) / denom`` with ``normalize`` (a pixel with
    ``denom <= 0`` or NaN is dead: ``t = 1``), else ``t = p``; then
    ``-log(max(t, min_transmission))`` with ``minus_log`` (NaN stays NaN).
    """
    kind = _KIND.get(np.dtype(frames.dtype))
    if kind is None:
        raise TypeError(f"frames: expected uint16 or float32 on the GPU, got {frames.dtype}")
    k, n_rows, n_cols = frames.shape
    n_pad = out.shape[2]
    counts[:k] = 0
    kernel = load_module("correct").get_function(f"correct_{kind}")
    for a in range(0, k, MAX_FRAMES):
        b = min(k, a + MAX_FRAMES)
        kernel(
            (-(-n_pad // BLOCK), n_rows, b - a),
            (BLOCK,),
            (
                frames[a:b],
                dark,
                denom,
                out[a:b],
                counts[a:b],
                np.int32(n_rows),
                np.int32(n_cols),
                np.int32(n_pad),
                np.int32(bool(normalize)),
                np.int32(bool(minus_log)),
                np.float32(min_transmission),
            ),
        )
