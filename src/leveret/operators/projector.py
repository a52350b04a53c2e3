"""Matched ray-driven projector ``A`` and its exact transpose ``A.T``: ``Projector``."""

from __future__ import annotations

import math

import numba
import numpy as np

from .. import _validate as v
from ._base import Operator
from ..cuda.devices import for_backend as devices_for_backend
from ..geometry import ConeGeometry, ParallelGeometry, ParallelVecGeometry, VolumeGeometry

MODELS = ("siddon", "joseph")
PRECISIONS = ("float32", "float64")


def parallel_rays(geometry: ParallelGeometry) -> tuple[np.ndarray, np.ndarray]:
    """One ray per detector pixel of a parallel geometry, in projection order.

    Pixel ``[n, r, c]`` (2D: ``[n, c]``) is the line through ``s e(t) + z ez``
    along ``d(t) = (-sin t, cos t, 0)`` with ``e(t) = (cos t, sin t, 0)``,
    ``s = (c - center - axis_shift[n]) det_spacing`` and
    ``z = (r - (n_rows-1)/2) row_spacing`` (z = 0 in 2D), as in docs/conventions.md.

    Returns
    -------
    origins, directions : ndarray (n_rays, 3) float64, world (x, y, z)
    """
    t = geometry.angles
    s = (np.arange(geometry.n_cols)[None, :] - geometry.centers()[:, None]) * geometry.det_spacing
    z = np.zeros(1) if geometry.is_2d else geometry.row_positions()
    n_a, n_r, n_c = t.size, z.size, geometry.n_cols
    origins = np.empty((n_a, n_r, n_c, 3))
    origins[..., 0] = (s * np.cos(t)[:, None])[:, None, :]
    origins[..., 1] = (s * np.sin(t)[:, None])[:, None, :]
    origins[..., 2] = z[None, :, None]
    directions = np.empty((n_a, n_r, n_c, 3))
    directions[..., 0] = -np.sin(t)[:, None, None]
    directions[..., 1] = np.cos(t)[:, None, None]
    directions[..., 2] = 0.0
    return origins.reshape(-1, 3), directions.reshape(-1, 3)


def vec_rays(geometry: ParallelVecGeometry) -> tuple[np.ndarray, np.ndarray]:
    """One ray per detector pixel of a ``ParallelVecGeometry``, in projection order.

    Pixel ``[n, r, c]`` is the line through ``(p00 + c u) + r v`` (``p00``
    the centre of pixel (0, 0), ``u``, ``v`` the view's steps, in this
    order of float64 operations, which the GPU kernels repeat) along the
    view's unit ray.

    Returns
    -------
    origins, directions : ndarray (n_rays, 3) float64, world (x, y, z)
    """
    p00 = geometry.pixel00()[:, None, None, :]
    c = np.arange(geometry.n_cols, dtype=np.float64)[None, None, :, None]
    r = np.arange(geometry.n_rows, dtype=np.float64)[None, :, None, None]
    origins = (p00 + c * geometry.u[:, None, None, :]) + r * geometry.v[:, None, None, :]
    directions = np.broadcast_to(geometry.rays[:, None, None, :], origins.shape)
    return np.ascontiguousarray(origins.reshape(-1, 3)), np.ascontiguousarray(directions.reshape(-1, 3))


def cone_rays(geometry: ConeGeometry) -> tuple[np.ndarray, np.ndarray]:
    """Rays from each view's source through every pixel centre, flattened in
    projection order ``(n_views, n_rows, n_cols)``.

    The same rays as ``ConeGeometry.pixel_rays`` (directions ``M^-1 (u, v, 1)``,
    normalised, ``M = P[:, :3]``), but computed element by element in a fixed
    order of float64 operations, ``(m0 u + m1 v) + m2`` and
    ``sqrt((x x + y y) + z z)``, which the GPU kernels repeat exactly
    (``leveret.cuda.raytrace``): both backends then trace bit-identical rays
    (einsum's summation order is not specified).
    """
    P = geometry.matrices if geometry.matrices.ndim == 3 else geometry.matrices[None]
    minv = np.linalg.inv(P[:, :, :3])[:, None, None, :, :]  # (n, 1, 1, 3, 3)
    u = np.arange(geometry.n_cols, dtype=np.float64)[None, None, :]
    v = np.arange(geometry.n_rows, dtype=np.float64)[None, :, None]
    d = [minv[..., i, 0] * u + minv[..., i, 1] * v + minv[..., i, 2] for i in range(3)]
    norm = np.sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2])
    directions = np.stack([d[i] / norm for i in range(3)], axis=-1)
    sources = geometry.source_positions()[:, None, None, :]
    origins = np.broadcast_to(sources, directions.shape)
    return np.ascontiguousarray(origins.reshape(-1, 3)), np.ascontiguousarray(directions.reshape(-1, 3))


def weight_by_ray_length(y: np.ndarray, minv: np.ndarray, scale: np.ndarray, dtype) -> np.ndarray:
    """``y`` (n_views, n_rows, n_cols) times ``scale |M^-1 (c, r, 1)|`` per
    pixel, in float64, as ``dtype``: ``adjoint="unmatched"``'s weights on the CPU
    (per view ``minv`` M^-1 (3, 3) and ``scale``; CUDA: leveret/cuda/ray_weights.cu)."""
    n_views, n_rows, n_cols = y.shape
    u = np.arange(n_cols, dtype=np.float64)[None, None, :]
    r = np.arange(n_rows, dtype=np.float64)[None, :, None]
    weighted = np.empty(y.shape, dtype)
    step = max(1, (1 << 23) // (n_rows * n_cols))  # views per block: float64 temporaries of ~64 MiB
    for k0 in range(0, n_views, step):
        m = minv[k0 : k0 + step, :, :, None, None]  # (b, 3, 3, 1, 1)
        norm2 = sum((m[:, i, 0] * u + m[:, i, 1] * r + m[:, i, 2]) ** 2 for i in range(3))
        weighted[k0 : k0 + step] = y[k0 : k0 + step] * (scale[k0 : k0 + step, None, None] * np.sqrt(norm2))
    return weighted


class _Transpose:
    """``A.T``: projections -> volume, the transpose of a :class:`Projector`
    (exact, or with ``adjoint="unmatched"`` the scaled voxel-driven back-projection)."""

    def __init__(self, projector: "Projector"):
        self.T = projector

    @property
    def shape(self) -> tuple[int, int]:
        return self.T.shape[::-1]

    @property
    def dtype(self):
        return self.T.dtype

    def __call__(self, projections, out=None):
        return self.T.adjoint(projections, out=out)

    def __repr__(self) -> str:
        return f"{self.T!r}.T"


class Projector(Operator):
    """Ray-driven linear projector ``A`` (line integrals) with its exact transpose.

    ``A(x)`` maps a volume to projections, ``A.T(y)`` maps projections back;
    both trace the same rays with the same weights (``leveret.cpu.raytrace``,
    ``leveret.cuda.raytrace``), so ``<A x, y> = <x, A.T y>`` holds to rounding.

    Parameters
    ----------
    geometry : ParallelGeometry, ParallelVecGeometry or ConeGeometry
        2D parallel geometries need a 2D volume; 3D parallel (also with
        per-view ray directions, e.g. laminography) and cone geometries a 3D
        one. Cone rays start at the source (half lines); parallel rays are
        whole lines.
    volume : VolumeGeometry
    model : {"siddon", "joseph"}
        "siddon": a voxel's weight is the exact length of the ray inside it
        (Siddon, in Jacobs' incremental form). "joseph": one bilinear sample
        per voxel-centre plane of the ray's dominant axis, weighted by the
        ray length between two planes.
    backend : {"auto", "cpu", "cuda"}
        NumPy or CuPy in, the same kind out ("cpu": NumPy only).
    precision : {"float32", "float64"}
        dtype of ``A``'s and ``A.T``'s results; geometry is computed in
        float64. On CUDA "float32" steps rays in float32 where a fast march
        exists, within the bound in docs/accuracy.md, ``A.T`` with the same
        weights; "float64" gives the CPU's rays and weights bit for bit.
    structured : {"auto", True, False}
        CUDA cone beam (Siddon; Joseph in float32): the structure-exploiting
        path of Thompson and Lionheart (2014), taken by "auto" where
        :func:`leveret.cuda.raytrace.structured_ratio` shows it valid.
    transpose : {"auto", "gather", "scatter"}
        CUDA: how the exact ``A.T`` runs. "scatter" adds the weights into the
        volume with atomics (the last bits vary from run to run); "gather"
        has each voxel gather them (deterministic; structured Joseph where
        detector rows are at least an eighth of a voxel apart in z and the
        sources lie outside the grid, else a ValueError); "auto" takes the
        one a cost model predicts faster (docs/performance.md, "Which
        transpose"; ``leveret tune`` corrects it per GPU).
    adjoint : {"exact", "unmatched"}
        What ``A.T`` is: the transpose of ``A``'s weights, or (cone beam, one
        device) the voxel-driven ``ConeBackprojection`` of the projections
        weighted per pixel, faster where the detector oversamples the volume
        and within the mismatch given in docs/accuracy.md (SIRT converges).
    devices : None, "all", list of int or leveret.cuda.devices.DeviceSet
        CUDA: the GPUs ``A`` and ``A.T`` run on; the views are split among
        them, the volume copied to each (docs/multigpu.md). ``A`` is
        bit-identical to one GPU; ``A.T`` sums the GPUs' partial volumes in
        a fixed order (within float32 rounding of one GPU's).
    n_buffers : int, optional
        CPU: private volumes ``A.T`` sums (default: Numba's thread count).

    Attributes
    ----------
    shape : (int, int)
        ``(number of projection values, number of voxels)``.
    dtype : numpy.dtype
    volume, geometry : the grid and scan the operator was built for.
    projection_shape : tuple
        ``geometry.projection_shape``: the shape of ``A(x)``.
    T : the transpose, a callable with ``shape`` and ``dtype``.
    transpose : str or None
        How the exact ``A.T`` runs on CUDA (``transpose`` resolved).

    Notes
    -----
    The CPU builds the rays once (48 bytes per detector pixel) and sums
    ``A.T`` into private volumes per thread (deterministic for a thread
    count). CUDA rebuilds each view's rays from 12 float64 numbers with the
    CPU's operations; the structured paths keep one extra, z-fastest copy of
    the volume. Memory, the transposes and their speed: docs/performance.md;
    the unmatched adjoint's weights and mismatch: docs/accuracy.md.
    """

    def __init__(
        self,
        geometry,
        volume: VolumeGeometry,
        *,
        model: str = "siddon",
        backend: str = "auto",
        precision: str = "float32",
        n_buffers: int | None = None,
        structured="auto",
        transpose: str = "auto",
        adjoint: str = "exact",
        devices=None,
    ):
        if not isinstance(volume, VolumeGeometry):
            raise TypeError(f"volume: expected a VolumeGeometry, got {type(volume).__name__}")
        if isinstance(geometry, ParallelGeometry):
            if geometry.is_2d != volume.is_2d:
                want = "2D (ny, nx)" if geometry.is_2d else "3D (nz, ny, nx)"
                raise ValueError(
                    f"volume: a {'2D' if geometry.is_2d else '3D'} parallel geometry "
                    f"needs a {want} VolumeGeometry, got shape {volume.shape}"
                )
            make_rays = parallel_rays
            self._t_start = -np.inf
        elif isinstance(geometry, ParallelVecGeometry):
            if volume.is_2d:
                raise ValueError(f"volume: a ParallelVecGeometry needs a 3D VolumeGeometry, got shape {volume.shape}")
            make_rays = vec_rays
            self._t_start = -np.inf
        elif isinstance(geometry, ConeGeometry):
            if volume.is_2d:
                raise ValueError(f"volume: a ConeGeometry needs a 3D VolumeGeometry, got shape {volume.shape}")
            make_rays = cone_rays
            self._t_start = 0.0
        else:
            raise TypeError(
                f"geometry: expected a ParallelGeometry, ParallelVecGeometry or ConeGeometry, "
                f"got {type(geometry).__name__}"
            )
        self.model = v.choice("model", model, MODELS)
        self.dtype = np.dtype(v.choice("precision", precision, PRECISIONS))
        # Ray set-up squares lengths: a grid beyond sqrt(max) overflows before any data is seen.
        span = float(np.sqrt(sum((float(n) * float(s)) ** 2 for n, s in zip(volume.shape, volume.voxel_size))))
        if not span < float(np.sqrt(np.finfo(self.dtype).max)):
            raise ValueError(
                f"volume: the grid spans {span:.3g} length units, beyond {self.dtype} arithmetic "
                f"(squared lengths must fit); use smaller units or precision='float64'"
            )
        if structured not in ("auto", True, False):
            raise ValueError(f"structured: expected 'auto', True or False, got {structured!r}")
        Operator.__init__(self, geometry, volume, v.choice("backend", backend, ("auto", "cuda", "cpu")))
        if structured is True and self.backend != "cuda":
            raise ValueError("structured: True needs backend='cuda' (the structured path is a GPU kernel)")
        transpose = v.choice("transpose", transpose, ("auto", "gather", "scatter"))
        if transpose != "auto" and self.backend != "cuda":
            raise ValueError(
                f"transpose: {transpose!r} needs backend='cuda' (the CPU's A.T sums private "
                f"volumes per thread; use 'auto')"
            )
        self.adjoint_kind = v.choice("adjoint", adjoint, ("exact", "unmatched"))
        self.devices = devices_for_backend(devices, self.backend)
        if self.adjoint_kind == "unmatched" and not isinstance(geometry, ConeGeometry):
            raise ValueError(
                f"adjoint: 'unmatched' is the cone-beam voxel-driven back-projection and needs a "
                f"ConeGeometry, got {type(geometry).__name__}; use 'exact'"
            )
        if self.adjoint_kind == "unmatched" and self.devices is not None:
            raise ValueError("adjoint: 'unmatched' runs on one device; use devices=None or adjoint='exact'")
        self._device_tracers: dict = {}  # (device, first view, stop view) -> CudaRaytracer there
        self.projection_shape = tuple(geometry.projection_shape)
        self._views = np.arange(self.projection_shape[0])
        # The CPU's ray tables (48 bytes per detector pixel); the GPU rebuilds rays from
        # per-view parameters instead.
        if self.backend == "cpu":  # refuse at once what would fail after a long build
            v.check_allocation(
                "geometry",
                48 * math.prod(self.projection_shape),
                "the CPU ray tables",
                "use fewer views or detector pixels, or backend='cuda' (no tables)",
            )
        self._origins, self._directions = make_rays(geometry) if self.backend == "cpu" else (None, None)
        # The grid as the kernel sees it: always (x, y, z); a 2D image is one
        # slice spanning z in [-0.5, 0.5).
        if volume.is_2d:
            lo = [volume.extent("x")[0], volume.extent("y")[0], -0.5]
            size = [volume.spacing("x"), volume.spacing("y"), 1.0]
        else:
            lo = [volume.extent(a)[0] for a in "xyz"]
            size = [volume.spacing(a) for a in "xyz"]
        self._offset = np.array(lo, np.float64)
        self._scale = 1.0 / np.array(size, np.float64)
        self._grid3 = volume.shape if not volume.is_2d else (1,) + volume.shape
        self.n_buffers = numba.get_num_threads() if n_buffers is None else v.positive_int("n_buffers", n_buffers)
        self._gpu = None
        if self.backend == "cuda":
            from ..cuda.raytrace import CudaRaytracer

            self._gpu = CudaRaytracer(
                geometry,
                self._grid3,
                self._offset,
                self._scale,
                self.model,
                self.dtype,
                structured=structured,
                transpose=transpose,
            )
        self._backprojection = None
        if self.adjoint_kind == "unmatched":
            from .cone import ConeBackprojection

            self._backprojection = ConeBackprojection(geometry, volume, backend=self.backend)
            # Per view: M^-1 and voxel volume / |det M^-1| (the pixel weight's factors).
            P = geometry.matrices if geometry.matrices.ndim == 3 else geometry.matrices[None]
            minv = np.linalg.inv(P[:, :, :3])
            self._pixel_minv = minv
            self._pixel_scale = float(np.prod(volume.voxel_size)) / np.abs(np.linalg.det(minv))
        self._ray_frames = None  # CUDA, adjoint="unmatched": the pixel weights' numbers of this operator's views
        self.T = _Transpose(self)

    @property
    def structured(self) -> bool:
        """Whether ``A`` and ``A.T`` run the structured cone path (CUDA only)."""
        return bool(self._gpu is not None and self._gpu.structured)

    @property
    def transpose(self) -> str | None:
        """How the exact ``A.T`` runs on CUDA, "gather" or "scatter" (``transpose``
        resolved); None on the CPU and with ``adjoint="unmatched"``."""
        return None if self._gpu is None or self.adjoint_kind == "unmatched" else self._gpu.transpose

    # -- metadata ------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return (int(np.prod(self.projection_shape)), self.volume.size)

    @property
    def view_indices(self) -> np.ndarray:
        """Indices (into ``geometry``'s views) of the views this operator covers."""
        return self._views

    def view_angles(self) -> np.ndarray:
        """Rotation angle (radians) of each covered view: the parallel angle,
        for ``ParallelVecGeometry`` the ``t`` whose ``d(t)`` is the rays' xy
        direction, for cone beams the source's azimuth ``atan2(x, -y)`` (the
        ``t`` of ``ConeGeometry.circular``)."""
        if isinstance(self.geometry, ParallelGeometry):
            return self.geometry.angles[self._views]
        if isinstance(self.geometry, ParallelVecGeometry):  # the t of d(t) = (-sin t, cos t, 0) along the ray
            rays = self.geometry.rays[self._views]
            return np.arctan2(-rays[:, 0], rays[:, 1])
        s = self.geometry.source_positions()[self._views]
        return np.arctan2(s[:, 0], -s[:, 1])

    def subset(self, views) -> "Projector":
        """The operator restricted to some views (rows of ``A``), sharing the
        volume and the ray tables: projections ``(len(views),) + projection_shape[1:]``."""
        views = np.asarray(views, dtype=np.int64).ravel()
        n = self.projection_shape[0]
        if views.size == 0 or views.min() < 0 or views.max() >= n:
            raise ValueError(f"views: expected 1 or more indices in [0, {n}), got {views.tolist()[:8]}")
        per_view = int(np.prod(self.projection_shape[1:]))
        rows = (views[:, None] * per_view + np.arange(per_view)[None, :]).ravel()
        sub = object.__new__(Projector)
        sub.__dict__.update(self.__dict__)
        if self._origins is not None:
            sub._origins = np.ascontiguousarray(self._origins[rows])
            sub._directions = np.ascontiguousarray(self._directions[rows])
        sub._views = self._views[views]
        sub._ray_frames = None
        if self._gpu is not None:
            sub._gpu = self._gpu.subset(views)
        sub._device_tracers = {}
        sub.projection_shape = (views.size,) + self.projection_shape[1:]
        sub.T = _Transpose(sub)
        return sub

    # -- application ------------------------------------------------------------------
    def _input(self, name: str, arr, shape, *, upload: bool = True):
        """``arr`` checked and converted; on CUDA uploaded to the current
        device unless ``upload`` is False (the several-GPU path uploads NumPy
        arrays to each GPU itself)."""
        xp = v.array_module(arr)
        if xp is not np and self.backend == "cpu":
            raise ValueError(
                f"{name}: the CPU projector takes NumPy arrays, got {type(arr).__module__}."
                f"{type(arr).__name__} (use backend='cuda' for CuPy arrays)"
            )
        if self.backend == "cuda" and upload:
            import cupy as xp
        arr = xp.asarray(arr)
        v.check_finite_array(name, arr)  # NaN, Inf, complex and objects: refused, naming the argument
        if arr.shape != tuple(shape):
            raise ValueError(
                f"{name}: expected shape {tuple(shape)} for this projector "
                f"({self.volume.shape} volume, {self.projection_shape} projections), "
                f"got {arr.shape}"
            )
        # The kernels take writable C-contiguous arrays of the working dtype.
        arr = xp.ascontiguousarray(arr, dtype=self.dtype)
        return arr if xp is not np or arr.flags.writeable else arr.copy()

    def _output(self, name: str, out, shape, like):
        """The output array: on the device of the input ``like`` (NumPy in, NumPy out)."""
        xp = v.array_module(like)
        if out is None:
            return xp.empty(shape, self.dtype)
        if (
            v.array_module(out) is not xp
            or out.shape != tuple(shape)
            or out.dtype != self.dtype
            or not out.flags.c_contiguous
            or (xp is np and not out.flags.writeable)
        ):
            raise ValueError(
                f"{name}: expected a writable C-contiguous {self.dtype} {xp.__name__} array "
                f"of shape {tuple(shape)}, got {getattr(out, 'shape', type(out).__name__)}"
            )
        return out

    def _checked(self, name: str, out):
        """``out``, refused if the sums overflowed the working dtype: finite
        input never gives Inf or NaN without saying so."""
        if v.count_outside(out, float(np.finfo(self.dtype).max)):
            raise ValueError(
                f"{name}: the sums overflow {self.dtype} (values x lengths of this "
                f"{self.volume.voxel_size} voxel grid); rescale the data or use precision='float64'"
            )
        return out

    def _on_gpu(self, name: str, run, out):
        """``run(res)`` into a CuPy ``res`` (``out`` itself when it is one), checked
        (:meth:`_checked`), then copied into a NumPy ``out``."""
        import cupy

        res = out if isinstance(out, cupy.ndarray) else cupy.empty(out.shape, self.dtype)
        run(res)
        self._checked(name, res)
        if res is not out:
            out[...] = res.get()
        return out

    def __call__(self, x, out=None):
        """Forward projection ``A x``: volume ``volume.shape`` -> projections
        ``projection_shape`` (line integrals, value x length). NumPy or CuPy
        (CUDA backend) in, the same kind out."""
        out = self._output("out", out, self.projection_shape, x)
        if self.devices is not None:
            return self._checked("x", self._forward_devices(self._input("x", x, self.volume.shape, upload=False), out))
        x = self._input("x", x, self.volume.shape)
        if self._gpu is not None:
            return self._on_gpu("x", lambda res: self._gpu.forward(x.reshape(self._grid3), res), out)
        from ..cpu import raytrace

        raytrace.forward(
            x.reshape(self._grid3),
            self._origins,
            self._directions,
            self._offset,
            self._scale,
            self._t_start,
            self._model_id,
            out.reshape(-1),
        )
        return self._checked("x", out)

    def adjoint(self, y, out=None):
        """Transpose ``A^T y``: projections ``projection_shape`` -> volume ``volume.shape``
        (``adjoint="unmatched"``: the scaled voxel-driven back-projection)."""
        out = self._output("out", out, self.volume.shape, y)
        if self.adjoint_kind == "unmatched":
            return self._checked("y", self._voxel_adjoint(self._input("y", y, self.projection_shape), out))
        if self.devices is not None:
            y = self._input("y", y, self.projection_shape, upload=False)
            return self._checked("y", self._adjoint_devices(y, out))
        y = self._input("y", y, self.projection_shape)
        if self._gpu is not None:
            return self._on_gpu("y", lambda res: self._gpu.adjoint(y, res.reshape(self._grid3)), out)
        from ..cpu import raytrace

        raytrace.adjoint(
            y.reshape(-1),
            self._origins,
            self._directions,
            self._offset,
            self._scale,
            self._t_start,
            self._model_id,
            out.reshape(self._grid3),
            self.n_buffers,
        )
        return self._checked("y", out)

    def _voxel_adjoint(self, y, out):
        """``adjoint="unmatched"``: ``y`` weighted per pixel by ``V |M^-1 (u, v, 1)| / |det M^-1|``
        (class Notes), then ``ConeBackprojection`` over this operator's views."""
        if self.backend == "cuda":  # one fused pass (leveret/cuda/ray_weights.cu)
            import cupy

            from ..cuda import ray_weights
            from ..cuda.device_state import upload

            if self._ray_frames is None:
                self._ray_frames = upload(
                    ray_weights.view_frames(self._pixel_minv[self._views], self._pixel_scale[self._views])
                )
            weighted = ray_weights.weight_by_ray_length(cupy.ascontiguousarray(y, cupy.float32), self._ray_frames)
        else:
            weighted = weight_by_ray_length(
                y, self._pixel_minv[self._views], self._pixel_scale[self._views], self.dtype
            )
        vol = self._backprojection(weighted, views=self._views)
        out[...] = vol.reshape(out.shape) if v.array_module(vol) is v.array_module(out) else vol.get()
        return out

    # -- several GPUs ---------------------------------------------------------------------
    def _tracer(self, device: int, v0: int, v1: int):
        """The kernels of views ``v0:v1`` with their numbers on GPU ``device`` (made once)."""
        key = (device, v0, v1)
        tracer = self._device_tracers.get(key)
        if tracer is None:
            import cupy

            with cupy.cuda.Device(device):
                tracer = self._gpu.subset(np.arange(v0, v1))
            self._device_tracers[key] = tracer
        return tracer

    def _forward_devices(self, x, out):
        """``A x`` with the views dealt to ``self.devices`` from a queue, the volume on every GPU."""
        import cupy

        from ..cuda import devices as dv

        dv.settled(x)
        laid_out: dict = {}  # worker index -> the volume on its GPU, as the kernels read it

        def compute(worker, v0, v1):
            tracer = self._tracer(worker.device, v0, v1)
            if worker.index not in laid_out:  # once per call and worker, not per view block
                xd = dv.on_worker(x, worker).reshape(self._grid3)
                src = tracer.laid_out(xd)
                laid_out[worker.index] = (xd if src is xd else None, src)  # the structured paths read only src
            xd, src = laid_out[worker.index]
            res = cupy.empty((v1 - v0,) + self.projection_shape[1:], self.dtype)
            tracer.forward(xd, res, laid_out=src)
            return res

        return dv.map_ranges(self.devices, dv.blocks(self.projection_shape[0], 4 * len(self.devices)), compute, out)

    def _adjoint_devices(self, y, out):
        """``A^T y``: GPU ``i`` back-projects the ``i``-th block of views into a
        partial volume; the partials are summed in device order on one GPU."""
        import cupy

        from ..cuda import devices as dv

        dv.settled(y)

        def compute(worker, v0, v1):
            vol = cupy.empty(self._grid3, self.dtype)
            self._tracer(worker.device, v0, v1).adjoint(dv.on_worker(y[v0:v1], worker), vol)
            return vol

        return dv.sum_blocks(self.devices, self.projection_shape[0], compute, out)

    @property
    def _model_id(self) -> int:
        from ..cpu import raytrace

        return raytrace.SIDDON if self.model == "siddon" else raytrace.JOSEPH

    _repr_fields = ("model", "precision")

    @property
    def precision(self) -> str:
        """The working precision, "float32" or "float64"."""
        return self.dtype.name
