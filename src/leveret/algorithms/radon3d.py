"""3D Radon filtered back-projection (pulse EPR imaging) and the matched forward projector.

The inverse 3D Radon transform is

    f(x) = -1 / (8 pi^2) * integral over S^2 of p''(x . n, n) dn,

with p'' the second derivative along t. Discretised over the directions of
a :class:`~leveret.geometry.RadonGeometry` with solid-angle weights ``w_q``
(summing to 4 pi), it is a single-stage back-projection of the filtered,
weighted projections: ``f(x) = -1/(8 pi^2) sum_q w_q p''_q(x . n_q)``. On a
hemisphere (weights summing to 2 pi) each projection stands for itself and
its antipode, since ``p''(t, -n) = p''(-t, n)``, so the sum counts twice.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import scipy.fft

from .. import _validate as v
from ..cpu import radon3d as kernels
from ..filters import padded_length, window
from ..geometry import VolumeGeometry
from ..geometry.radon import RadonGeometry

#: Apodisation windows of the second-derivative filter ("none": the band-limited derivative).
WINDOWS = ("none", "shepp-logan", "cosine", "hamming", "hann")


def second_derivative_kernel(n_pad: int, spacing: float = 1.0) -> np.ndarray:
    """The band-limited second derivative's kernel on a circular grid of ``n_pad``.

    Sampling ``h(t) = integral_{-B}^{B} -(2 pi nu)^2 exp(2 pi i nu t) dnu`` with
    ``B = 1 / (2 tau)`` at ``t = n tau`` and multiplying by the sample pitch
    ``tau`` (the convolution integral as a sum) gives ``h[0] = -pi^2 / (3 tau^2)``
    and ``h[n] = 2 (-1)^(n+1) / (n tau)^2``; index n and n_pad - n hold offset
    +-n. Built in space and then transformed, as the ramp in
    :mod:`leveret.filters` is. The infinite kernel sums to zero (constants
    have no curvature); cutting it at ``n_pad / 2`` would leave a DC
    response of about ``4 / (n_pad tau^2)``, which back-projects the total
    mass into a constant offset. So ``h[0]`` is set to minus the sum of the
    others (it differs from ``-pi^2 / (3 tau^2)`` by that same amount, a
    relative 1e-3 / n_pad), and the response is exactly zero at DC.
    """
    n = np.arange(n_pad)
    offset = np.minimum(n, n_pad - n)
    h = np.empty(n_pad)
    off = offset[1:].astype(np.float64)
    h[1:] = 2.0 * np.where(offset[1:] % 2 == 1, 1.0, -1.0) / (off * spacing) ** 2
    h[0] = -h[1:].sum()
    return h


@lru_cache(maxsize=32)
def _response(n_samples: int, name: str, cutoff: float, spacing: float) -> np.ndarray:
    n_pad = padded_length(n_samples)
    h = np.real(scipy.fft.rfft(second_derivative_kernel(n_pad, spacing)))
    out = h * window("ram-lak" if name == "none" else name, h.size, cutoff)
    out.setflags(write=False)
    return out


def second_derivative_response(n_samples: int, window: str = "none", *, cutoff: float = 1.0,
                               spacing: float = 1.0) -> np.ndarray:
    """Real frequency response (length ``n_pad // 2 + 1``) of the filtered second derivative.

    Multiplying a projection's rfft, zero-padded to ``padded_length(n_samples)``
    (at least twice its length, so the circular convolution does not wrap),
    by this response gives ``d^2 p / dt^2`` band-limited to Nyquist and
    apodised by ``window`` above ``cutoff`` (a fraction of Nyquist): plane
    integrals (value x length^2) in, value out.
    """
    n_samples = v.positive_int("n_samples", n_samples)
    name = v.choice("window", window, WINDOWS)
    if not (0 < float(cutoff) <= 1):
        raise ValueError(f"cutoff: expected a fraction of Nyquist in (0, 1], got {cutoff!r}")
    return _response(n_samples, name, float(cutoff), v.positive_float("spacing", spacing))


def radon3d_fbp(projections, geometry: RadonGeometry, volume: VolumeGeometry | None = None, *,
                backend: str = "auto", precision: str = "single", window: str = "none",
                cutoff: float = 1.0, weights="auto") -> np.ndarray:
    """3D Radon FBP: second-derivative filter, solid-angle weights, single-stage back-projection.

    Parameters
    ----------
    projections : ndarray (n_dirs, n_samples)
        Plane integrals (value x length^2), NumPy; row q is direction
        ``geometry.directions[q]``, sample k sits at
        ``t = (k - (n_samples-1)/2) spacing``.
    geometry : RadonGeometry
        Must match ``projections.shape``. Directions need not lie on a grid.
    volume : VolumeGeometry, optional
        3D output grid ``(nz, ny, nx)``; default ``geometry.default_volume()``.
        A voxel whose plane ``x . n`` falls outside the sampled range of a
        direction gets zero from that projection.
    backend : {"auto", "cpu", "cuda"}
        Only the CPU path exists so far: "auto" runs on the CPU even where a
        GPU is present, and "cuda" raises RuntimeError (not built yet).
    precision : {"single", "double"}
        float32 or float64 arithmetic and output. Sample coordinates are
        computed in float64 either way.
    window : {"none", "shepp-logan", "cosine", "hamming", "hann"}
        Apodisation of the second-derivative filter ``-(2 pi nu)^2``; "none"
        keeps the full band up to Nyquist.
    cutoff : float
        Frequency above which the filter is zero, as a fraction of Nyquist,
        in (0, 1].
    weights : "auto", "uniform" or array (n_dirs,)
        Solid-angle quadrature in steradians: "auto" is
        ``geometry.direction_weights()`` (spherical Voronoi areas), "uniform"
        gives every direction ``total_solid_angle / n_dirs``; an array is
        used as given (it should sum to 4 pi, or 2 pi on a hemisphere).

    Returns
    -------
    numpy.ndarray
        ``(nz, ny, nx)`` values per unit volume of ``f`` (x fastest), float32
        or float64: a ball of value 1 comes back as 1.

    Notes
    -----
    ``f(x) = -1/(8 pi^2) * c * sum_q w_q p''_q(x . n_q)`` with ``c = 2`` when
    the geometry is a hemisphere and 1 otherwise; ``p''_q`` is read from the
    filtered projection by linear interpolation (zero outside the samples).
    """
    if not isinstance(geometry, RadonGeometry):
        raise ValueError(f"geometry: expected a RadonGeometry, got {type(geometry).__name__}")
    _check_backend(backend, projections, "projections")
    precision = v.choice("precision", precision, ("single", "double"))
    dtype = np.float64 if precision == "double" else np.float32
    projections = _check_projections(projections, geometry)
    volume = _check_volume(geometry.default_volume() if volume is None else volume)
    q_weights = _direction_weights(weights, geometry)
    response = second_derivative_response(geometry.n_samples, window, cutoff=cutoff,
                                          spacing=geometry.spacing)

    n_pad = 2 * (response.size - 1)
    spec = scipy.fft.rfft(projections.astype(dtype, copy=False), n=n_pad, axis=-1, workers=-1)
    spec *= response.astype(dtype)
    filtered = scipy.fft.irfft(spec, n=n_pad, axis=-1, workers=-1)[:, :geometry.n_samples]
    scale = -(2.0 if geometry.hemisphere else 1.0) / (8.0 * math.pi ** 2)
    filtered = np.ascontiguousarray(filtered * (scale * q_weights)[:, None], dtype=dtype)

    out = np.empty(volume.shape, dtype=dtype)
    table = kernels.sample_table(geometry.directions, geometry.n_samples, geometry.spacing, volume)
    return kernels.backproject(filtered, table, out)


def radon3d_forward(volume_array, geometry: RadonGeometry, volume: VolumeGeometry, *,
                    backend: str = "auto") -> np.ndarray:
    """Plane integrals of a voxel volume: the matched transpose of the back-projection.

    Each voxel's value times the voxel volume is split between the two
    samples nearest to ``x . n`` with linear weights and divided by the
    sample spacing (a density along t). So this operator ``A`` and the
    unweighted back-projection ``B`` used by :func:`radon3d_fbp` satisfy
    ``A = (dx dy dz / spacing) B^T`` exactly.

    Parameters
    ----------
    volume_array : ndarray (nz, ny, nx)
        Voxel values (x fastest), NumPy; float64 input is projected in
        float64, anything else in float32.
    geometry : RadonGeometry
    volume : VolumeGeometry
        The grid of ``volume_array``.
    backend : {"auto", "cpu", "cuda"}
        CPU only so far, as in :func:`radon3d_fbp`.

    Returns
    -------
    numpy.ndarray
        ``(n_dirs, n_samples)`` plane integrals (value x length^2).
    """
    if not isinstance(geometry, RadonGeometry):
        raise ValueError(f"geometry: expected a RadonGeometry, got {type(geometry).__name__}")
    _check_backend(backend, volume_array, "volume_array")
    volume = _check_volume(volume)
    arr = v.real_array("volume_array", np.asarray(volume_array), volume.shape, "(nz, ny, nx)", "the volume")
    v.check_finite_array("volume_array", arr)
    dtype = np.float64 if arr.dtype == np.float64 else np.float32
    arr = np.ascontiguousarray(arr, dtype=dtype)
    table = kernels.sample_table(geometry.directions, geometry.n_samples, geometry.spacing, volume)
    out = kernels.forward(arr, table, np.empty(geometry.projection_shape, dtype=dtype))
    out *= dtype(np.prod(volume.voxel_size) / geometry.spacing)
    return out


# -- helpers ---------------------------------------------------------------------------------------

def _check_backend(backend, arr, name: str) -> str:
    backend = v.choice("backend", backend, ("auto", "cpu", "cuda"))
    if backend == "cuda":
        raise RuntimeError("backend: the CUDA path of the 3D Radon transform is not built yet; "
                           "use backend='cpu' or 'auto' (which runs on the CPU)")
    if v.array_module(arr) is not np:
        raise ValueError(f"{name}: the 3D Radon transform runs on the CPU only so far and "
                         f"takes NumPy arrays; got a CuPy array (use .get())")
    return "cpu"


def _check_projections(projections, geometry: RadonGeometry) -> np.ndarray:
    projections = v.real_array("projections", np.asarray(projections), geometry.projection_shape,
                               "(n_dirs, n_samples)")
    v.check_finite_array("projections", projections)
    return projections


def _check_volume(volume) -> VolumeGeometry:
    if not isinstance(volume, VolumeGeometry):
        raise ValueError(f"volume: expected a VolumeGeometry, got {type(volume).__name__}")
    if volume.is_2d:
        raise ValueError(f"volume: expected a 3D VolumeGeometry (nz, ny, nx), got shape {volume.shape}")
    return volume


def _direction_weights(weights, geometry: RadonGeometry) -> np.ndarray:
    if isinstance(weights, str):
        mode = v.choice("weights", weights, ("auto", "uniform"))
        if mode == "uniform":
            return np.full(geometry.n_dirs, geometry.total_solid_angle / geometry.n_dirs)
        return geometry.direction_weights()
    return v.finite_vector("weights", weights, length=geometry.n_dirs)
