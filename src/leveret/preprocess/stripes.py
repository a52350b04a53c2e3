"""Stripe (ring artefact) suppression in sinograms."""
from __future__ import annotations

from .._validate import choice
from ._common import ndimage_module, odd_size, projection_like


def remove_stripes(sinogram_or_projections, *, method: str = "sort", size: int = 5):
    """Suppress stripes in sinograms (ring artefacts in the reconstruction).

    Stripes are columns whose response is off by a (possibly angle-dependent)
    offset or gain: defective or miscalibrated detector pixels.

    Methods (``size``: the filter width across columns, wider than the stripes):

    - "sort" (default): the sorting-based method of Vo, Atwood and Drakopoulos,
      "Superior techniques for eliminating ring artifacts in X-ray
      micro-tomography", Optics Express 26, 28396 (2018), algorithm 3: sort
      each column along the angle axis, median-filter the sorted sinogram
      across columns (``size`` wide), and put every value back at its angle.
      Sorting turns a stripe into a column that differs from its neighbours
      over all of its length, which the median removes; object structure is
      left mostly intact. Handles constant and intensity-dependent stripes.
    - "mean": normalisation by the smoothed column mean (in the spirit of
      Raven, Rev. Sci. Instrum. 69, 2978, 1998): subtract from each column
      its mean over angles minus the ``size``-wide median of those means
      across columns. Removes constant offsets only.

    (The wavelet-Fourier filter of Münch et al. 2009 needs a wavelet library,
    which leveret does not depend on.)

    Parameters
    ----------
    sinogram_or_projections : array, (n_angles, n_cols) or (n_angles, n_rows, n_cols)
        Line integrals, NumPy or CuPy; each detector row's sinogram is treated apart.
    method : {"sort", "mean"}
    size : int
        Odd width, >= 3, across columns.

    Returns
    -------
    array, float32 (float64 for float64 input), shape of the input
    """
    xp, x = projection_like("sinogram_or_projections", sinogram_or_projections)
    method = choice("method", method, ("sort", "mean"))
    size = odd_size(size)
    x = x.astype(xp.float64 if x.dtype == xp.float64 else xp.float32)
    footprint = (1,) * (x.ndim - 1) + (size,)
    ndi = ndimage_module(xp)
    if method == "mean":
        means = x.mean(axis=0, keepdims=True)
        return x - (means - ndi.median_filter(means, size=footprint, mode="reflect"))
    order = xp.argsort(x, axis=0)
    smoothed = ndi.median_filter(xp.take_along_axis(x, order, axis=0), size=footprint,
                                 mode="reflect")
    return xp.take_along_axis(smoothed, xp.argsort(order, axis=0), axis=0)

