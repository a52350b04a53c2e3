"""Cone-beam voxel-driven back-projection as an operator over a (geometry, volume) pair."""

from __future__ import annotations

import threading

import numpy as np

from .. import _validate as v
from ..geometry import VolumeGeometry
from ..geometry.volume import volume_3d
from ..cuda.devices import for_backend as devices_for_backend
from ._base import Operator, _is_cupy
from ..cpu.cone_plan import DEPTH, fma_steps, kernel_matrices, software_views

# The kernel "auto" runs, by interpolation and problem (measurements in
# docs/performance.md, cone beam):
#
#   interpolation       condition                                  kernel
#   "linear"/"linear8"  >= RAY_MIN_VIEWS views in the call and a    "ray-hybrid"
#                       voxel spans >= RAY_MIN_PIXELS det. pixels
#   "linear"/"linear8"  otherwise (FDK's chunks, small voxels)     "texture"
#   "linear32"          always                                     "quad"
#
# Why: lanes along the rays pay off when neighbouring voxels read different
# pixels (large voxels) and a pass's extra volume traffic is spread over many
# views; otherwise kernel B's lanes along x already hit the texture cache.
# "linear8" on the CPU mirrors what "linear" runs on CUDA, so the two share a kernel.
AUTO_KERNEL = {"linear": "texture", "linear8": "texture", "linear32": "quad"}
RAY_MIN_PIXELS = 0.6
RAY_MIN_VIEWS = 124


def projected_voxel_pixels(index_matrices: np.ndarray, volume: VolumeGeometry) -> float:
    """Detector pixels one voxel step spans at the volume's centre (the larger
    of the x and y steps, median over the views)."""
    m = np.asarray(index_matrices, np.float64).reshape(-1, 3, 4)
    c = np.array([(volume.nx - 1) / 2, (volume.ny - 1) / 2, (volume.nz - 1) / 2, 1.0])
    q = m @ c  # (n, 3): (u w, v w, w)
    u = q[:, 0] / q[:, 2]
    du = [(m[:, 0, a] - u * m[:, 2, a]) / q[:, 2] for a in (0, 1)]  # d u / d index along x, y
    return float(np.median(np.maximum(np.abs(du[0]), np.abs(du[1]))))


def index_matrices(matrices: np.ndarray, volume: VolumeGeometry) -> np.ndarray:
    """Compose projection matrices with the voxel grid: (n, 3, 4) acting on (i, j, k, 1)."""
    grid = np.zeros((4, 4))
    for col, axis in enumerate("xyz"):
        grid[col, col] = volume.spacing(axis)
        grid[col, 3] = volume.coordinates(axis)[0]
    grid[3, 3] = 1.0
    return np.asarray(matrices, np.float64) @ grid


def check_in_front(matrices: np.ndarray, volume: VolumeGeometry) -> None:
    """w > 0 at every voxel of every view (w is linear: the 8 corners decide)."""
    corners = np.array(
        [[i, j, k, 1.0] for i in (0, volume.nx - 1) for j in (0, volume.ny - 1) for k in (0, volume.nz - 1)]
    )
    w = index_matrices(matrices, volume)[:, 2, :] @ corners.T
    bad = np.flatnonzero((w <= 0).any(axis=1))
    if bad.size:
        raise ValueError(
            f"matrices: expected w > 0 (in front of the source) over the whole volume, "
            f"got w <= 0 at a volume corner in view {int(bad[0])} ({bad.size} view(s))"
        )


class ConeBackprojection(Operator):
    """Voxel-driven cone-beam back-projection ``B``: projections -> volume.

    ``B(q)[k, j, i] = sum_n q_n(u, v) / w^2`` with ``(u w, v w, w) = P_n x``
    (see ``leveret.cpu.backproject_cone``). The matrices are used as given:
    ``leveret.fdk`` scales them so that 1/w^2 is the FDK distance weight;
    RabbitCT's come scaled that way.

    Parameters
    ----------
    geometry : ConeGeometry or ParallelVecGeometry
        The latter's affine matrices give ``w = 1``: a plain parallel-beam
        back-projection along its rays.
    volume : VolumeGeometry (3D)
    backend : {"auto", "cuda", "cpu"}
        NumPy in, NumPy out; CuPy in, CuPy out (``leveret.operators._base``).
    interpolation : {"linear", "linear8", "linear32"}
        "linear": exact bilinear weights on the CPU (float64 arithmetic); on
        CUDA the texture unit's 8-bit weights (kernel "ray-hybrid", which
        reads a third of the views with exact weights, or kernel "texture":
        see ``kernel``). "linear8": the CUDA kernel's arithmetic on either
        backend (float32): with a texture kernel ("texture", "ray") the
        texture unit's 8-bit weights; with kernel "auto" the CPU mirrors what
        "linear" runs on CUDA. "linear32": exact weights in float32 on either
        backend (CUDA: software interpolation, about 20x smaller
        interpolation error than the texture unit).
    matrices : ndarray (n_views, 3, 4), optional
        Replacement matrices (e.g. rescaled) for the same views.
    kernel : {"auto", "texture", "ray", "ray-hybrid", "quad", "global"}
        Which CUDA kernel (``leveret.cuda.backproject_cone``); the CPU's
        "linear8"/"linear32" modes mirror the one chosen. With
        "linear"/"linear8": "texture" (kernel B), "ray" (kernel B's
        arithmetic, views in passes of similar direction with a warp's lanes
        along the rays), "ray-hybrid" (the same passes, a third of the views
        with exact weights from quads) or "quad"; with "linear32": "quad"
        (exact float32 weights from a per-view quad layout, one 16-byte load
        per sample, lanes along the rays) or "global" (exact weights, lanes
        along x). "auto" follows the table above ``AUTO_KERNEL`` in this
        module (``RAY_MIN_PIXELS``, ``RAY_MIN_VIEWS``); ``kernel_for(n_views)``
        tells which a call runs, ``last_kernel`` which the last call ran.
    devices : None, "all", list of int or leveret.cuda.devices.DeviceSet
        CUDA only: the GPUs a call runs on (:mod:`leveret.cuda.devices`); None: the
        current device. The volume's z range (``slices``, default all) is cut
        into slabs of whole ``slab_alignment`` blocks, about two per GPU,
        dealt from one queue; each GPU back-projects every view into its
        slabs with the kernel a one-GPU call of these views runs, so the
        result is bit-identical to one GPU. Each GPU holds the projections
        and one slab at a time. NumPy in, NumPy out; CuPy in, CuPy out on the
        input's GPU.
    """

    _repr_fields = ("interpolation", "kernel")

    def __init__(
        self,
        geometry,
        volume: VolumeGeometry,
        *,
        backend: str = "auto",
        interpolation: str = "linear",
        matrices=None,
        kernel: str = "auto",
        devices=None,
    ):
        from ..geometry import ConeGeometry, ParallelVecGeometry

        if not isinstance(geometry, (ConeGeometry, ParallelVecGeometry)):  # the latter's w = 1
            raise TypeError(f"geometry: expected a ConeGeometry or ParallelVecGeometry, got {type(geometry).__name__}")
        volume_3d(volume)
        matrices = np.asarray(geometry.matrices if matrices is None else matrices, np.float64)
        if matrices.shape != (geometry.n_views, 3, 4):
            raise ValueError(f"matrices: expected shape {(geometry.n_views, 3, 4)}, got {matrices.shape}")
        check_in_front(matrices, volume)
        super().__init__(geometry, volume, backend)
        self.matrices = matrices
        self.interpolation = v.choice("interpolation", interpolation, ("linear", "linear8", "linear32"))
        allowed = (
            ("auto", "quad", "global")
            if self.interpolation == "linear32"
            else ("auto", "texture", "ray", "ray-hybrid", "quad")
        )
        self.kernel = v.choice("kernel", kernel, allowed)
        self.devices = devices_for_backend(devices, self.backend)
        self._index = index_matrices(self.matrices, volume)
        self._gpus: dict = {}  # (kernel, GPU id) -> (CudaConeBackprojector, its matrices on that GPU)
        self._gpus_lock = threading.Lock()
        self._ray_ok = (
            AUTO_KERNEL[self.interpolation] == "texture"
            and projected_voxel_pixels(self._index, volume) >= RAY_MIN_PIXELS
        )
        self._last = self.kernel_for(geometry.n_views)

    def kernel_for(self, n_views: int) -> str:
        """The CUDA kernel a call with ``n_views`` views runs (or whose arithmetic the CPU mirrors)."""
        if self.kernel != "auto":
            return self.kernel
        return "ray-hybrid" if self._ray_ok and n_views >= RAY_MIN_VIEWS else AUTO_KERNEL[self.interpolation]

    @property
    def last_kernel(self) -> str:
        """The CUDA kernel of the last call (before any: of a call with every view)."""
        return self._last

    def cached_views(self, share: int = 1) -> int:
        """Views per call whose texture leveret keeps cached on the GPU for
        the next call (``leveret.cuda.texture``: ``CACHE_BYTES``), where
        ``share`` callers share the cache (a larger call allocates and frees
        its own, and freeing waits for the whole GPU); the CPU backend: every
        view."""
        if self.backend != "cuda":
            return self.geometry.n_views
        from ..cuda.texture import CACHE_BYTES

        return max(1, CACHE_BYTES // share // (self.geometry.n_rows * self.geometry.n_cols * 4))

    @property
    def slab_alignment(self) -> int:
        """``slices`` boundaries must be multiples of this (the kernels' z voxels per thread)."""
        return 1 if (self.backend == "cpu" and self.interpolation == "linear") else DEPTH

    def __call__(self, projections, out=None, *, views=slice(None), accumulate: bool = False, slices=None):
        """Back-project ``projections`` of the views ``views`` into ``out`` (nz, ny, nx).

        ``slices=(k0, k1)``: write only z slices k0..k1-1 (both multiples of
        ``slab_alignment``, or k1 = nz), with the same arithmetic as a whole
        volume, so a volume can be finished and downloaded slab by slab.
        NumPy in, NumPy out; CuPy in, CuPy out (the CUDA backend runs in
        float32).
        """
        idx = self._index[views]
        nz = self.volume.nz
        if slices is not None:
            k0, k1 = (int(k) for k in slices)
            a = self.slab_alignment
            if k0 % a or (k1 % a and k1 != nz) or not 0 <= k0 < k1 <= nz:
                raise ValueError(
                    f"slices: expected 0 <= k0 < k1 <= {nz}, multiples of {a} (or k1 = {nz}), got {slices}"
                )
            slices = (k0, k1)
        expected = (idx.shape[0], self.geometry.n_rows, self.geometry.n_cols)
        if tuple(projections.shape) != expected:
            raise ValueError(f"projections: expected shape {expected}, got {tuple(projections.shape)}")
        if self.backend == "cuda" and projections.dtype != np.float32:
            raise ValueError(f"projections: the CUDA backend runs in float32, got {projections.dtype}")
        kernel = self._last = self.kernel_for(idx.shape[0])
        if self.devices is not None:
            return self._call_devices(projections, out, views, idx, kernel, accumulate, slices)
        given = projections
        projections = self._input("projections", projections)
        res, out = self._output(
            "out", out, self.volume.shape, projections.dtype, like=given, keep=accumulate or slices is not None
        )
        if self.backend == "cuda":
            import cupy

            gpu, matrices = self._gpu_for(kernel)
            # (the ray kernels cache their own per-pass matrices)
            gpu(
                cupy.ascontiguousarray(projections),
                idx,
                res,
                accumulate=accumulate,
                slices=slices,
                device_matrices=None if matrices is None else matrices[views],
            )
            return self._finish(res, out)
        from ..cpu import backproject_cone as cpu

        if self.interpolation in ("linear8", "linear32"):
            software = software_views(kernel, idx, self.volume.shape)
            return cpu.backproject_gpu_mirror(
                projections,
                kernel_matrices(idx, software).reshape(-1, 3, 4),
                res,
                depth=DEPTH,
                software=software,
                fma_steps=fma_steps(kernel, software),
                accumulate=accumulate,
                slices=slices,
            )
        if slices is not None:  # exact arithmetic: the slab's own index matrices
            shifted = idx.copy()
            shifted[:, :, 3] += slices[0] * idx[:, :, 2]
            cpu.backproject(
                np.ascontiguousarray(projections), shifted, res[slices[0] : slices[1]], accumulate=accumulate
            )
            return res
        return cpu.backproject(np.ascontiguousarray(projections), idx, res, accumulate=accumulate)

    # -- CUDA ------------------------------------------------------------------------------
    def _gpu_for(self, kernel: str):
        """(back-projector, its per-view matrices or None) of ``kernel`` on the
        current GPU, made once per GPU: the ray kernels' plans and the
        matrices live in that GPU's memory."""
        import cupy

        key = (kernel, cupy.cuda.Device().id)
        with self._gpus_lock:
            if key not in self._gpus:
                from ..cuda.backproject_cone import CudaConeBackprojector

                matrices = None
                if kernel in ("texture", "global"):  # the same per view in any call: upload once
                    matrices = cupy.asarray(
                        kernel_matrices(self._index, np.full(self.geometry.n_views, kernel == "global"))
                    )
                    cupy.cuda.get_current_stream().synchronize()  # before another worker's stream reads them
                self._gpus[key] = (CudaConeBackprojector(kernel), matrices)
            return self._gpus[key]

    def _call_devices(self, projections, out, views, idx, kernel, accumulate, slices):
        """``self(...)`` on ``self.devices``: z-slabs from a queue, every view into each."""
        import cupy

        from ..cuda import devices as dv

        nz, ny, nx = self.volume.shape
        on_gpu = _is_cupy(projections)
        dv.settled(projections)
        if on_gpu:
            home = projections.device.id
        else:
            projections = np.ascontiguousarray(projections)
        if out is None:
            if on_gpu:
                with cupy.cuda.Device(home):
                    out = cupy.zeros(self.volume.shape, np.float32)
            else:
                out = np.zeros(self.volume.shape, np.float32)
        elif tuple(out.shape) != self.volume.shape or out.dtype != np.float32 or _is_cupy(out) != on_gpu:
            raise ValueError(
                f"out: expected a {'CuPy' if on_gpu else 'NumPy'} float32 array of shape "
                f"{self.volume.shape}, got {type(out).__module__.split('.')[0]} "
                f"{tuple(out.shape)} {out.dtype}"
            )
        dv.settled(out)
        k_lo, k_hi = (0, nz) if slices is None else slices
        align = self.slab_alignment
        slabs = [(k_lo + a, k_lo + b) for a, b in dv.aligned_blocks(k_hi - k_lo, 2 * len(self.devices), align)]
        copies: dict = {}  # worker index -> the projections on its GPU

        def compute(worker, k0, k1):
            proj = copies.get(worker.index)
            if proj is None:
                proj = copies[worker.index] = dv.on_worker(projections, worker)
            gpu, matrices = self._gpu_for(kernel)
            if accumulate:
                dst = out[k0:k1]
                slab = dv.on_worker(dst, worker)
                if slab is dst:  # the output's own memory: added into a copy, stored back after
                    slab = slab.copy()
            else:
                slab = cupy.empty((k1 - k0, ny, nx), np.float32)
            gpu(
                proj,
                idx,
                slab_alias(slab, k0, self.volume.shape),
                accumulate=accumulate,
                slices=(k0, k1),
                device_matrices=None if matrices is None else matrices[views],
            )
            return slab

        return dv.map_ranges(self.devices, slabs, compute, out, align=align)


def slab_alias(slab, k0: int, shape: tuple[int, int, int]):
    """A CuPy array of the whole volume's ``shape`` whose slices ``k0 ..
    k0 + len(slab) - 1`` are ``slab`` (C-contiguous, float32): the kernels
    index slices absolutely (``slices=(k0, k1)``) and write only those, so a
    GPU holds its slab, not the volume. Only those slices may be touched."""
    import cupy

    nz, ny, nx = shape
    start = slab.data.ptr - k0 * ny * nx * slab.itemsize  # where slice 0 would be
    memory = cupy.cuda.UnownedMemory(start, nz * ny * nx * slab.itemsize, slab, slab.device.id)
    return cupy.ndarray(shape, slab.dtype, cupy.cuda.MemoryPointer(memory, 0))
