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
import numbers
from functools import lru_cache

import numpy as np
import scipy.fft

from .. import _validate as v
from ._coverage import check_reach, check_views
from ..cpu import radon3d as kernels
from ..cuda.devices import for_backend as devices_for_backend
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


def second_derivative_response(
    n_samples: int, window: str = "none", *, cutoff: float = 1.0, spacing: float = 1.0
) -> np.ndarray:
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


METHODS = ("single-stage", "two-stage")
#: z slices one thread of the single-stage back-projection computes (``zpt``):
#: slabs start at multiples of it, so that every voxel is computed by the same tile.
TILE_SLICES = 4


def radon3d_fbp(
    projections,
    geometry: RadonGeometry,
    volume: VolumeGeometry | None = None,
    *,
    backend: str = "auto",
    precision: str = "float32",
    window: str = "none",
    cutoff: float = 1.0,
    angle_weights="auto",
    method: str = "single-stage",
    oversampling: int = 2,
    stats: dict | None = None,
    devices=None,
):
    """3D Radon FBP: second-derivative filter, solid-angle weights, back-projection.

    Parameters
    ----------
    projections : ndarray (n_dirs, n_samples)
        Plane integrals (value x length^2), NumPy or CuPy; row q is direction
        ``geometry.directions[q]``, sample k sits at
        ``t = (k - (n_samples-1)/2) spacing``.
    geometry : RadonGeometry
        Must match ``projections.shape``. Directions need not lie on a grid
        (except for ``method="two-stage"``).
    volume : VolumeGeometry, optional
        3D output grid ``(nz, ny, nx)``; default ``geometry.default_volume()``.
        A voxel whose plane ``x . n`` falls outside the sampled range of a
        direction gets zero from that projection.
    backend : {"auto", "cpu", "cuda"}
        "auto": CUDA when CuPy finds a GPU (or the input is a CuPy array),
        else the CPU. "cuda" without a GPU raises RuntimeError.
    precision : {"float32", "float64"}
        float32 or float64 arithmetic and output. The CPU computes sample
        coordinates in float64 either way; the GPU's float32 path computes
        them in float32 relative to a float64 origin per 32 x 8 x 4 tile
        (a few 1e-6 samples off), see ``leveret/cuda/radon3d.cu``. Where a
        tile's window of samples is too wide for that (voxels several times
        coarser than the sample spacing: more than 128 samples in float32,
        or more than shared memory holds), the GPU reads the samples from
        global memory with float64 coordinates instead; same results, slower.
    window : {"none", "shepp-logan", "cosine", "hamming", "hann"}
        Apodisation of the second-derivative filter ``-(2 pi nu)^2``; "none"
        keeps the full band up to Nyquist.
    cutoff : float
        Frequency above which the filter is zero, as a fraction of Nyquist,
        in (0, 1].
    angle_weights : "auto", "uniform" or array (n_dirs,)
        Solid-angle quadrature in steradians: "auto" is
        ``geometry.direction_weights()`` (spherical Voronoi areas), "uniform"
        gives every direction ``total_solid_angle / n_dirs``; an array is
        used as given (it should sum to 4 pi, or 2 pi on a hemisphere).
    method : {"single-stage", "two-stage"}
        "single-stage": every voxel reads every projection. "two-stage"
        (directions on a (theta, phi) grid, ``RadonGeometry.grid`` order,
        theta-major): for each phi, the theta projections are back-projected
        into a vertical plane ``(z, r)`` with ``r`` along ``(cos phi, sin phi, 0)``;
        then every z slice gathers the planes, a 2D back-projection. Cost
        ``n_phi nz n_r n_theta + nz ny nx n_phi`` instead of
        ``nz ny nx n_theta n_phi``; the price is one more linear
        interpolation (in r), measured in tests/algorithms/test_radon3d.py.
    oversampling : int
        Two-stage only: the intermediate planes' r pitch is
        ``min(dx, dy) / oversampling`` (finer = closer to single-stage).
    stats : dict, optional
        If given, filled with seconds: "transfer_in" (pinned upload, with
        the host-side staging), "filter", "backprojection" (both stages for
        "two-stage"), "transfer_out" (the part of the result's way back
        not hidden behind the back-projection: the last slab's copy) and
        "total" (wall time of the call). CUDA events on the GPU, zero
        transfers for CuPy in and out; perf_counter on the CPU. With
        ``devices``, only "total".
    devices : None, "all", list of int or leveret.cuda.devices.DeviceSet
        CUDA only: the GPUs to run on (:mod:`leveret.cuda.devices`); None: the
        current device. Each GPU filters the projections (they are small)
        and back-projects the z-slabs it takes from a queue (``two-stage``:
        each GPU also runs the first stage). Bit-identical to one GPU.

    Returns
    -------
    ndarray
        ``(nz, ny, nx)`` values per unit volume of ``f`` (x fastest), float32
        or float64: a ball of value 1 comes back as 1. NumPy in, NumPy out;
        CuPy in, CuPy out. On the GPU a NumPy result of up to
        ``PINNED_RESULT_MAX_BYTES`` (1 GiB) lives in page-locked memory, so
        the copy engine writes it at full PCIe speed with no host copy.

    Notes
    -----
    ``f(x) = -1/(8 pi^2) * c * sum_q w_q p''_q(x . n_q)`` with ``c = 2`` when
    the geometry is a hemisphere and 1 otherwise; ``p''_q`` is read from the
    filtered projection by linear interpolation (zero outside the samples).
    """
    import time

    t_start = time.perf_counter()
    if not isinstance(geometry, RadonGeometry):
        raise TypeError(f"geometry: expected a RadonGeometry, got {type(geometry).__name__}")
    backend = resolve_backend(backend, projections)
    precision = v.precision(precision, ("float32", "float64"))
    method = v.choice("method", method, METHODS)
    dtype = np.float64 if precision == "float64" else np.float32
    projections = _check_projections(projections, geometry)
    volume = _check_volume(geometry.default_volume() if volume is None else volume)
    oversampling = _oversampling(oversampling)
    check_views(geometry)
    check_reach(geometry, volume)
    if isinstance(projections, np.ndarray):
        v.check_allocation("volume", volume.size * np.dtype(dtype).itemsize, "the reconstruction")
    q_weights = _direction_weights(angle_weights, geometry)
    response = second_derivative_response(geometry.n_samples, window, cutoff=cutoff, spacing=geometry.spacing)
    plan = TwoStagePlan(geometry, volume, oversampling) if method == "two-stage" else None
    scale = -(2.0 if geometry.hemisphere else 1.0) / (8.0 * math.pi**2)
    row_scale = scale * q_weights
    devices = devices_for_backend(devices, backend)
    if devices is not None:
        out = _fbp_devices(devices, projections, geometry, volume, response, row_scale, dtype, plan)
    elif backend == "cuda":
        out = _fbp_cuda(projections, geometry, volume, response, row_scale, dtype, plan, stats)
    else:
        t0 = time.perf_counter()
        filtered = filter_projections(projections, response, row_scale, dtype)
        t1 = time.perf_counter()
        out = np.empty(volume.shape, dtype=dtype)
        if plan is None:
            table = kernels.sample_table(geometry.directions, geometry.n_samples, geometry.spacing, volume)
            kernels.backproject(filtered, table, out)
        else:
            plan.backproject_cpu(filtered, out)
        if stats is not None:
            stats.update(transfer_in=0.0, filter=t1 - t0, backprojection=time.perf_counter() - t1, transfer_out=0.0)
    if stats is not None:
        stats["total"] = time.perf_counter() - t_start
    return out


def filter_projections(projections, response: np.ndarray, row_scale: np.ndarray, dtype):
    """Second-derivative filter (zero-padded FFT) and per-row scale; NumPy or CuPy.

    ``projections`` (n_dirs, n_samples) -> C-contiguous ``dtype`` array of the
    same shape: ``row_scale[q] * irfft(rfft(p_q, n_pad) * response)[:n_samples]``.

    The FFTs run in float64 whatever ``dtype``, and only the result is
    rounded. The filtered projections are large oscillating values whose
    back-projection cancels to O(1): float32 FFT rounding (~1e-7 of the
    largest value, spread over every sample) reaches the image as ~2e-5 of
    its maximum, against ~2e-6 for one rounding of float64 values (measured
    on a ball, 2000 directions). That difference is what lets the GPU
    (cuFFT) and the CPU (pocketfft) agree to 1e-5 in float32; the filter is
    a small share of the work (n_dirs FFTs of ~2 n_samples points).
    """
    xp = v.array_module(projections)
    n_samples = projections.shape[-1]
    n_pad = 2 * (response.size - 1)
    if xp is np:
        spec = scipy.fft.rfft(projections.astype(np.float64, copy=False), n=n_pad, axis=-1, workers=-1)
        spec *= response
        filtered = scipy.fft.irfft(spec, n=n_pad, axis=-1, workers=-1)[:, :n_samples]
        filtered *= row_scale[:, None]
        return np.ascontiguousarray(filtered, dtype=dtype)
    spec = xp.fft.rfft(projections.astype(np.float64, copy=False), n=n_pad, axis=-1)
    spec *= xp.asarray(response)
    filtered = xp.fft.irfft(spec, n=n_pad, axis=-1)[:, :n_samples]
    filtered *= xp.asarray(row_scale)[:, None]
    return xp.ascontiguousarray(filtered, dtype=dtype)


class TwoStagePlan:
    """The two-stage back-projection's tables for a (theta, phi) grid of directions.

    Stage 1, for each phi_j: plane ``g_j[k, m] = sum_i p_ij(u)`` at
    ``r_m = (m - (n_r-1)/2) dr`` (measured from the volume centre's (x, y),
    along ``(cos phi_j, sin phi_j, 0)``) and ``z_k``, with
    ``u = (sin th_i (r_m + c_j) + z_k cos th_i) / spacing + (n_samples-1)/2``,
    ``c_j = cx cos phi_j + cy sin phi_j``: table1 rows ``(a, b, 0, d)`` over (m, k).
    Stage 2, for each z slice: ``f[k, j, i] = sum_j g_j[k, m(x_i, y_j)]``
    with ``m = ((x - cx) cos phi + (y - cy) sin phi) / dr + (n_r-1)/2``:
    table2 rows ``(a, b, 0, d)`` over (i, j). Both stages interpolate linearly
    and are the single-stage kernel on 2D outputs.
    """

    def __init__(self, geometry: RadonGeometry, volume: VolumeGeometry, oversampling: int = 2):
        self.n_theta, self.n_phi = grid_shape(geometry)
        oversampling = v.positive_int("oversampling", oversampling)
        nz, ny, nx = volume.shape
        dz, dy, dx = volume.voxel_size
        cz, cy, cx = volume.center
        self.volume = volume
        self.dr = geometry.spacing / oversampling
        r_max = math.hypot((nx - 1) / 2 * dx, (ny - 1) / 2 * dy)
        self.n_r = 2 * int(math.ceil(r_max / self.dr)) + 3
        # Directions theta-major (q = i * n_phi + j); stage 1 wants them per phi.
        q = np.arange(geometry.n_dirs).reshape(self.n_theta, self.n_phi)
        self.order = np.ascontiguousarray(q.T.ravel())  # (n_phi * n_theta,) phi-major
        d = geometry.directions[self.order]  # (n_phi * n_theta, 3)
        sin_t = np.hypot(d[:, 0], d[:, 1])
        phi = np.arctan2(d[:: self.n_theta, 1], d[:: self.n_theta, 0])  # (n_phi,)
        cos_p, sin_p = np.cos(phi), np.sin(phi)
        r0 = -(self.n_r - 1) / 2 * self.dr
        z0 = cz - (nz - 1) / 2 * dz
        c = np.repeat(cx * cos_p + cy * sin_p, self.n_theta)
        s = geometry.spacing
        t1 = np.zeros((d.shape[0], 4))
        t1[:, 0] = sin_t * self.dr / s
        t1[:, 1] = d[:, 2] * dz / s
        t1[:, 3] = (sin_t * (r0 + c) + z0 * d[:, 2]) / s + (geometry.n_samples - 1) / 2
        self.table1 = t1
        x0 = -(nx - 1) / 2 * dx  # relative to the centre
        y0 = -(ny - 1) / 2 * dy
        t2 = np.zeros((self.n_phi, 4))
        t2[:, 0] = cos_p * dx / self.dr
        t2[:, 1] = sin_p * dy / self.dr
        t2[:, 3] = (x0 * cos_p + y0 * sin_p) / self.dr + (self.n_r - 1) / 2
        self.table2 = t2

    @property
    def plane_shape(self) -> tuple[int, int, int]:
        """Intermediate planes ``(n_phi, nz, n_r)``."""
        return (self.n_phi, self.volume.nz, self.n_r)

    def backproject_cpu(self, filtered: np.ndarray, out: np.ndarray) -> np.ndarray:
        by_phi = filtered[self.order].reshape(self.n_phi, self.n_theta, -1)
        planes = np.empty(self.plane_shape, filtered.dtype)
        for j in range(self.n_phi):
            kernels.backproject(by_phi[j], self.table1[j * self.n_theta : (j + 1) * self.n_theta], planes[j][None])
        slices = np.ascontiguousarray(planes.transpose(1, 0, 2))  # (nz, n_phi, n_r)
        for k in range(out.shape[0]):
            kernels.backproject(slices[k], self.table2, out[k][None])
        return out


def grid_shape(geometry: RadonGeometry) -> tuple[int, int]:
    """``(n_theta, n_phi)`` of a theta-major (theta, phi) grid of directions, or ValueError.

    The grid's rows (theta_i, all phi) must share one theta and its columns
    one phi, in the same phi order in every row (``RadonGeometry.grid``
    makes such sets; the angles need not be equally spaced).
    """
    theta, phi = geometry.angles()
    n = geometry.n_dirs
    n_phi = 1
    while n_phi < n and abs(theta[n_phi] - theta[0]) < 1e-9:
        n_phi += 1
    ok = n % n_phi == 0 and n_phi > 1
    if ok:
        th = theta.reshape(-1, n_phi)
        ph = phi.reshape(-1, n_phi)
        dph = np.angle(np.exp(1j * (ph - ph[:1])))  # phi differences modulo 2 pi
        ok = bool(np.all(np.abs(th - th[:, :1]) < 1e-9) and np.all(np.abs(dph) < 1e-9) and th.shape[0] > 1)
    if not ok:
        raise ValueError(
            "method: 'two-stage' needs directions on a theta-major (theta, phi) grid "
            "(RadonGeometry.grid order: rows of one theta, the same phi in every row); "
            "these directions are not; use method='single-stage'"
        )
    return n // n_phi, n_phi


def _slab_function(filtered, geometry, volume, plan, dtype):
    """``slab(k0, k1, out_dev)``: back-project slices k0:k1 of the volume from
    the filtered projections (on the current device) into ``out_dev``."""
    import cupy

    from ..cuda import radon3d as gpu

    if plan is None:
        table = kernels.sample_table(geometry.directions, geometry.n_samples, geometry.spacing, volume)
        table_dev = cupy.asarray(table)

        def slab(k0, k1, out_dev):
            gpu.backproject(filtered, table, out_dev, zpt=TILE_SLICES, table_dev=table_dev, b_offset=k0)

        return slab
    by_phi = cupy.ascontiguousarray(filtered[cupy.asarray(plan.order)]).reshape(
        plan.n_phi, plan.n_theta, geometry.n_samples
    )
    planes = cupy.empty(plan.plane_shape, dtype)
    gpu.backproject(
        by_phi, plan.table1, planes, proj_bstride=plan.n_theta * geometry.n_samples, table_bstride=plan.n_theta, zpt=1
    )
    slices = cupy.ascontiguousarray(planes.transpose(1, 0, 2))  # (nz, n_phi, n_r)
    table2_dev = cupy.asarray(plan.table2)

    def slab(k0, k1, out_dev):
        gpu.backproject(
            slices[k0:k1], plan.table2, out_dev, proj_bstride=plan.n_phi * plan.n_r, zpt=1, table_dev=table2_dev
        )

    return slab


def _fbp_devices(devices, projections, geometry, volume, response, row_scale, dtype, plan):
    """GPU FBP on several GPUs: each GPU filters the (small) projections
    itself and back-projects the z-slabs it takes from a queue; slabs start at
    multiples of 4 slices, as the one-GPU path's do, so that every voxel is
    computed by the same tile (bit-identical)."""
    import cupy

    from ..cuda import devices as dv

    host_in = isinstance(projections, np.ndarray)
    nz, ny, nx = volume.shape
    if host_in:
        up = np.result_type(projections.dtype, np.float32)  # as the one-GPU path uploads it
        source = np.ascontiguousarray(projections, dtype=up)
        out = np.empty(volume.shape, dtype)
    else:
        with cupy.cuda.Device(projections.device.id):  # the input is complete before other streams read it
            cupy.cuda.get_current_stream().synchronize()
        source = dv.contiguous(projections)
        out = cupy.empty(volume.shape, dtype)
    slabs = dv.aligned_blocks(nz, 4 * len(devices), TILE_SLICES)  # about 4 slabs per GPU
    prepared: dict = {}

    def work(worker, k0, k1):
        slab = prepared.get(worker.index)
        if slab is None:
            dev_in = cupy.asarray(source) if host_in else dv.to_device(source, worker.device)
            filtered = filter_projections(dev_in, response, row_scale, dtype)
            slab = prepared[worker.index] = _slab_function(filtered, geometry, volume, plan, dtype)
        res = cupy.empty((k1 - k0, ny, nx), dtype)
        slab(k0, k1, res)
        if host_in:
            res.get(out=out[k0:k1])
        else:
            cupy.cuda.get_current_stream().synchronize()
            dv.copy_to(out[k0:k1], res)

    devices.run(slabs, work, align=TILE_SLICES)  # an out-of-memory split keeps the tiles whole too
    return out


def _fbp_cuda(projections, geometry, volume, response, row_scale, dtype, plan, stats):
    """GPU FBP. CuPy in: all on the device. NumPy in: a pinned upload, then the output
    streamed back slab by slab (leveret.cuda.pipeline) while later slabs are back-projected."""
    import time

    import cupy

    from ..cuda.pipeline import empty_pinned, ranges

    t_wall = time.perf_counter()
    stream = cupy.cuda.get_current_stream()
    host_in = isinstance(projections, np.ndarray)
    ev = [cupy.cuda.Event() for _ in range(4)]
    ev[0].record(stream)
    if host_in:
        # The input's own precision (float64 stays float64): the filter runs in float64.
        up = np.result_type(projections.dtype, np.float32)
        pinned = empty_pinned(projections.shape, up)
        pinned[...] = projections
        dev_in = cupy.empty(projections.shape, up)
        dev_in.set(pinned, stream=stream)
    else:
        dev_in = projections
    ev[1].record(stream)
    filtered = filter_projections(dev_in, response, row_scale, dtype)
    ev[2].record(stream)
    nz, ny, nx = volume.shape
    slab = _slab_function(filtered, geometry, volume, plan, dtype)

    if not host_in:
        out = cupy.empty(volume.shape, dtype)
        slab(0, nz, out)
        ev[3].record(stream)
        if stats is not None:
            ev[3].synchronize()
            stats.update(transfer_in=0.0, filter=_ms(ev[1], ev[2]), backprojection=_ms(ev[2], ev[3]), transfer_out=0.0)
        return out

    # Slabs of whole 32 x 8 x 4 tiles, about 8 of them, so that each slab's copy
    # to the host runs while the next ones are back-projected.
    step = max(4, 4 * -(-nz // 32))
    chunks = ranges(nz, step)
    nbytes = int(np.prod(volume.shape)) * np.dtype(dtype).itemsize
    if nbytes <= PINNED_RESULT_MAX_BYTES:
        out, t_bp, t_out = _slabs_to_pinned(slab, chunks, volume.shape, dtype, stream, ev[2])
    else:
        out, t_bp = _slabs_through_pipeline(slab, chunks, volume.shape, dtype, stream, ev[2])
        t_out = None
    if stats is not None:
        wall = time.perf_counter() - t_wall
        t_in, t_filter = _ms(ev[0], ev[1]), _ms(ev[1], ev[2])
        if t_out is None:
            # The rest of the wall time: output copies not hidden behind the
            # kernels, the last slab's copy into the NumPy result, launch overhead.
            t_out = max(0.0, wall - t_in - t_filter - t_bp)
        stats.update(transfer_in=t_in, filter=t_filter, backprojection=t_bp, transfer_out=t_out)
    return out


#: NumPy results up to this size come back in page-locked (pinned) host memory,
#: written by the GPU's copy engine at full PCIe speed, with no host-side copy
#: (a pageable copy of 64 MiB costs ~10 ms on the host, a third of the
#: 256^3 budget). Larger results go through leveret.cuda.pipeline's two pinned
#: buffers and a host copy, so pinned memory stays bounded.
PINNED_RESULT_MAX_BYTES = 1 << 30


def _slabs_to_pinned(slab, chunks, shape, dtype, stream, filtered_ready):
    """Back-project slab after slab into one device volume on ``stream``; a copy
    stream takes each finished slab into a pinned NumPy array.

    Returns (volume, back-projection seconds, exposed transfer-out seconds)."""
    import cupy

    from ..cuda.pipeline import empty_pinned

    dev = cupy.empty(shape, dtype)
    host = empty_pinned(shape, dtype)
    copy_stream = cupy.cuda.Stream(non_blocking=True)
    last_kernel = None
    for k0, k1 in chunks:
        with stream:
            slab(k0, k1, dev[k0:k1])
        last_kernel = stream.record()
        copy_stream.wait_event(last_kernel)
        # Asynchronous whatever the CuPy version (ndarray.get may block until
        # the copy is done, which would hold back the next slab's launch).
        part = dev[k0:k1]
        cupy.cuda.runtime.memcpyAsync(
            host[k0:k1].ctypes.data, part.data.ptr, part.nbytes, cupy.cuda.runtime.memcpyDeviceToHost, copy_stream.ptr
        )
    copied = copy_stream.record()
    copied.synchronize()
    return host, _ms(filtered_ready, last_kernel), _ms(last_kernel, copied)


def _slabs_through_pipeline(slab, chunks, shape, dtype, stream, filtered_ready):
    """As :func:`_slabs_to_pinned` for results too large to pin: leveret.cuda.pipeline's
    double-buffered pinned slabs, copied into a pageable NumPy array by a worker
    thread. Returns (volume, seconds from the filtered data to the last slab's end)."""
    import cupy

    from ..cuda.pipeline import parallel_copy, stream_chunks

    out = np.empty(shape, dtype)
    ready = stream.record()
    ends = []

    def compute(chunk, d_in, d_out):
        s = cupy.cuda.get_current_stream()
        s.wait_event(ready)
        slab(chunk[0], chunk[1], d_out)
        ends.append(s.record())

    stream_chunks(
        chunks,
        in_shape=lambda c: (1,),
        out_shape=lambda c: (c[1] - c[0],) + shape[1:],
        load=lambda c, buf: None,
        compute=compute,
        store=lambda c, buf: parallel_copy(out[c[0] : c[1]], buf),
        in_dtype=dtype,
        out_dtype=dtype,
    )
    return out, _ms(filtered_ready, ends[-1])


def _ms(e0, e1) -> float:
    """Seconds between two recorded CUDA events."""
    import cupy

    e1.synchronize()
    return cupy.cuda.get_elapsed_time(e0, e1) / 1e3


def radon3d_forward(volume_array, geometry: RadonGeometry, volume: VolumeGeometry, *, backend: str = "auto"):
    """Plane integrals of a voxel volume: the matched transpose of the back-projection.

    Each voxel's value times the voxel volume is split between the two
    samples nearest to ``x . n`` with linear weights and divided by the
    sample spacing (a density along t). So this operator ``A`` and the
    unweighted back-projection ``B`` used by :func:`radon3d_fbp` satisfy
    ``A = (dx dy dz / spacing) B^T`` exactly.

    Parameters
    ----------
    volume_array : ndarray (nz, ny, nx)
        Voxel values (x fastest), NumPy or CuPy; float64 input is projected
        in float64, anything else in float32.
    geometry : RadonGeometry
    volume : VolumeGeometry
        The grid of ``volume_array``.
    backend : {"auto", "cpu", "cuda"}
        As in :func:`radon3d_fbp`. On the GPU the sums run in shared-memory
        atomics (order not fixed: float32 agrees with the CPU to rounding);
        projections longer than the shared histogram (12288 float32 or 6144
        float64 samples) use global atomics.

    Returns
    -------
    ndarray
        ``(n_dirs, n_samples)`` plane integrals (value x length^2); NumPy in,
        NumPy out; CuPy in, CuPy out.
    """
    if not isinstance(geometry, RadonGeometry):
        raise TypeError(f"geometry: expected a RadonGeometry, got {type(geometry).__name__}")
    backend = resolve_backend(backend, volume_array)
    volume = _check_volume(volume)
    arr = v.real_array("volume_array", volume_array, volume.shape, "(nz, ny, nx)", "the volume")
    v.check_finite_array("volume_array", arr)
    dtype = np.float64 if arr.dtype == np.float64 else np.float32
    table = kernels.sample_table(geometry.directions, geometry.n_samples, geometry.spacing, volume)
    scale = dtype(np.prod(volume.voxel_size) / geometry.spacing)
    if backend == "cuda":
        import cupy

        from ..cuda import radon3d as gpu

        dev = cupy.ascontiguousarray(cupy.asarray(arr), dtype=dtype)
        out = gpu.forward(dev, table, cupy.empty(geometry.projection_shape, dtype))
        out *= scale
        return out if not isinstance(arr, np.ndarray) else out.get()
    arr = np.ascontiguousarray(arr, dtype=dtype)
    out = kernels.forward(arr, table, np.empty(geometry.projection_shape, dtype=dtype))
    out *= scale
    return out


# -- helpers ---------------------------------------------------------------------------------------


def resolve_backend(backend, arr) -> str:
    """ "cuda" or "cpu" for this call (leveret.backends.resolve: CuPy input picks CUDA)."""
    from ..backends import resolve

    return resolve(backend, arr)


def _check_projections(projections, geometry: RadonGeometry):
    projections = v.real_array("projections", projections, geometry.projection_shape, "(n_dirs, n_samples)")
    v.check_finite_array("projections", projections)
    return projections


def _oversampling(value) -> int:
    """``oversampling`` checked: a positive integer (TypeError for what is not an integer)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"oversampling: expected a positive integer, got {value!r}")
    if value < 1:
        raise ValueError(f"oversampling: expected a positive integer, got {value}")
    return int(value)


def _check_volume(volume) -> VolumeGeometry:
    if not isinstance(volume, VolumeGeometry):
        raise TypeError(f"volume: expected a VolumeGeometry, got {type(volume).__name__}")
    if volume.is_2d:
        raise ValueError(f"volume: expected a 3D VolumeGeometry (nz, ny, nx), got shape {volume.shape}")
    return volume


def _direction_weights(weights, geometry: RadonGeometry) -> np.ndarray:
    if isinstance(weights, str):
        mode = v.choice("angle_weights", weights, ("auto", "uniform"))
        if mode == "uniform":
            return np.full(geometry.n_dirs, geometry.total_solid_angle / geometry.n_dirs)
        return _voronoi_weights(geometry)
    return v.finite_vector("angle_weights", weights, length=geometry.n_dirs)


@lru_cache(maxsize=16)
def _voronoi_weights(geometry: RadonGeometry) -> np.ndarray:
    """``geometry.direction_weights()``, cached: the spherical Voronoi diagram of
    2000 directions takes ~70 ms, twice the real-time budget of a whole
    reconstruction, and a scan repeats one geometry (geometries are immutable
    and hashable)."""
    w = geometry.direction_weights()
    w.setflags(write=False)
    return w
