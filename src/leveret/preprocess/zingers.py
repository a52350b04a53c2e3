"""Zinger (outlier) removal."""

from __future__ import annotations

import numpy as np

from .._validate import choice, positive_float
from ._common import ndimage_module, odd_size, projection_like


def remove_zingers(projections, *, threshold: float = 6.0, size: int = 3, axes: str = "image"):
    """Replace outliers (zingers, hot pixels) by the local median.

    A pixel is an outlier when ``|x - median_filter(x)| > threshold * sigma``,
    where ``sigma = 1.4826 * median(|x[i+1] - x[i]|) / sqrt(2)`` (neighbours
    along the columns, or along the angles for ``axes="angle"``, over the
    whole array) is a robust estimate of the pixel noise: edges and zingers
    are too few to move the median. When that is 0 (noise-free data) the mean
    of ``|x - median_filter(x)|`` is used instead. Outliers get the filtered
    value; every other pixel is returned unchanged. Works on raw counts (bright
    zingers), transmission or line integrals (dark ones): both signs count.

    Parameters
    ----------
    projections : array, (n_angles, n_rows, n_cols) or (n_angles, n_cols)
        NumPy (scipy.ndimage) or CuPy (cupyx.scipy.ndimage).
    threshold : float
        In units of sigma.
    size : int
        Median filter width (odd, >= 3).
    axes : {"image", "angle"}
        "image": the ``size x size`` median over the last two axes, i.e.
        within each projection for a stack, over angles and columns for a
        sinogram. "angle": the ``size``-long median along the angle axis
        (pixel by pixel in time; keeps fine image detail, needs a fine angular step).

    Returns
    -------
    array, float32 (float64 for float64 input), shape of ``projections``
    """
    xp, x = projection_like("projections", projections)
    threshold = positive_float("threshold", threshold)
    size = odd_size(size)
    axes = choice("axes", axes, ("image", "angle"))
    x = x.astype(xp.float64 if x.dtype == xp.float64 else xp.float32)
    footprint = [1] * x.ndim
    if axes == "image":
        footprint[-1] = footprint[-2] = size
    else:
        footprint[0] = size
    med = ndimage_module(xp).median_filter(x, size=tuple(footprint), mode="mirror")
    dev = xp.abs(x - med)
    sigma = _noise_sigma(x, 0 if axes == "angle" else -1, xp)
    if sigma == 0:
        sigma = float(dev.mean())
    if sigma == 0:
        return x
    bad = dev > threshold * sigma
    return xp.where(bad, med, x)


def _noise_sigma(x, axis, xp):
    step = xp.abs(xp.diff(x, axis=axis))
    return 1.4826 * float(xp.median(step)) / np.sqrt(2)
