"""Frame correction in one pass: flat/dark, -log, float32, and a count of non-finite values.

:meth:`Correction.frame` (CPU, NumPy in place) and :meth:`GpuCorrection.batch`
(CUDA, one kernel: :mod:`leveret.cuda.correct`) compute, per pixel,

    t = (p - dark) / (flat - dark)      with flat and dark, else t = p
    line = -log(max(t, min_transmission))   when minus_log, else line = t

in float32, as :func:`leveret.preprocess.normalize` and
:func:`leveret.preprocess.minus_log` do (a pixel where ``flat - dark <= 0`` is
dead: transmission 1, zero attenuation), and count the non-finite results of
each frame in the same pass, so a frame with NaN or Inf is rejected without a
second pass over it on the GPU, where the result goes straight into the
zero-padded input of the FFT.
"""

from __future__ import annotations

import numpy as np

MIN_TRANSMISSION = 1e-6  # leveret.preprocess.minus_log's default floor


class Correction:
    """The per-pixel constants of the correction, on the host (NumPy float32).

    ``dark`` and ``denom = flat - dark`` with dead pixels (``denom <= 0`` or
    not finite) marked by ``denom = 0``; ``normalize`` is False without a flat.
    """

    def __init__(self, flat, dark, minus_log: bool, shape):
        self.normalize = flat is not None
        self.minus_log = bool(minus_log)
        if self.normalize:
            flat = np.asarray(flat, np.float32)
            dark = np.zeros(shape, np.float32) if dark is None else np.asarray(dark, np.float32)
            denom = flat - dark
            denom[~(denom > 0)] = 0.0  # NaN too: a dead pixel
            self.dark, self.denom = dark, denom
            self._live = denom > 0
            self._dead = not bool(self._live.all())
        else:
            self.dark = self.denom = np.zeros((1, 1), np.float32)

    def frame(self, frame, out) -> int:
        """Correct one (n_rows, n_cols) frame into ``out`` (float32); the count of non-finite values.

        NumPy's ufuncs in place, no temporaries of the frame's size: their SIMD
        logarithm beats a compiled scalar loop, and one thread leaves the
        other core to the filter and back-projection.
        """
        if self.normalize:
            np.subtract(frame, self.dark, out=out, dtype=np.float32)
            np.divide(out, self.denom, out=out, where=self._live)
            if self._dead:
                np.copyto(out, np.float32(1.0), where=~self._live)  # dead pixel: zero attenuation
        else:
            np.copyto(out, frame, casting="unsafe")
        if self.minus_log:
            np.maximum(out, np.float32(MIN_TRANSMISSION), out=out)  # NaN stays NaN
            np.log(out, out=out)
            np.negative(out, out=out)
        return int(out.size - np.count_nonzero(np.isfinite(out)))


class GpuCorrection:
    """The correction on the GPU: constants uploaded once, one launch per batch."""

    def __init__(self, correction: Correction):
        import cupy

        self.normalize, self.minus_log = correction.normalize, correction.minus_log
        self.dark = cupy.asarray(correction.dark)
        self.denom = cupy.asarray(correction.denom)

    def batch(self, frames, out, counts):
        """Correct ``frames`` (k, n_rows, n_cols) uint16 or float32 on the GPU into
        ``out[:k, :, :n_cols]`` of the zero-padded FFT input (k, n_rows, n_pad) float32,
        zeroing ``out[:k, :, n_cols:]``; ``counts[:k]`` (int32) receives each frame's
        number of non-finite results. Runs on the current stream."""
        from ..cuda.correct import correct

        correct(
            frames,
            self.dark,
            self.denom,
            out,
            counts,
            normalize=self.normalize,
            minus_log=self.minus_log,
            min_transmission=MIN_TRANSMISSION,
        )
