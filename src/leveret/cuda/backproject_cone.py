"""Launcher for ``backproject_cone.cu``: the "kernel B" of Zinsser and Keck
(2013) with texture ("texture") or global-memory ("global") interpolation,
and the ray-aligned kernels "ray" (texture), "quad" (exact weights from a
quad layout) and their hybrid "ray-hybrid", which run a call's views in
passes of similar direction (``leveret.cpu.cone_plan.plan_passes``)."""

from __future__ import annotations

import threading

import numpy as np

from ..cpu.cone_plan import (
    DEPTH,
    KERNELS,
    MAX_VIEWS_PER_PASS,
    QUAD_BORDER,
    RAY_SPLIT,
    VIEWS_PER_PASS,
    kernel_matrices,
    plan_passes,
    software_views,
)
from .device_state import device_state
from .pipeline import upload_pinned
from .texture import acquire, release, release_views, view_textures

BLOCK = (32, 8)  # kernel B: a warp along x, 8 warps per block
RAY_KERNELS = {
    "ray": "backproject_cone_ray_tex",
    "quad": "backproject_cone_ray_quad",
    "ray-hybrid": "backproject_cone_ray_hybrid",
}
BORDER = 2  # zero pixels around each view for the "global" kernel (its clamp needs two)
MIN_BLOCKS = 4  # blocks of 256 threads per multiprocessor: at most 64 registers per thread


def defines(depth: int = DEPTH, min_blocks: int = MIN_BLOCKS) -> tuple[str, ...]:
    """The -D options ``backproject_cone.cu`` needs (it has no defaults of its own)."""
    return (
        f"LEVERET_CONE_K={int(depth)}",
        f"LEVERET_CONE_MAX_VIEWS={MAX_VIEWS_PER_PASS}",
        f"LEVERET_CONE_MIN_BLOCKS={int(min_blocks)}",
        f"LEVERET_CONE_BORDER={BORDER}",
    )


DEFINES = defines()  # what the operators run, and what CI compiles (cuda._module.compile_report)


class CudaConeBackprojector:
    """Back-projects (n_views, n_rows, n_cols) float32 CuPy projections into a CuPy volume.

    Parameters
    ----------
    kernel : {"texture", "global", "ray", "quad", "ray-hybrid"}
        "texture": kernel B, the texture unit interpolates (8-bit weights);
        "global": software bilinear interpolation with exact float32 weights,
        neighbours read from global memory (through the L1/texture cache).
        The ray-aligned kernels run the views in passes of similar direction
        with a warp's lanes along the pass's rays (``plan_passes``): "ray"
        through the texture unit (a 2D texture object per view over
        ``projections`` in place, ``texture.view_textures``: no copy into a
        CUDA array), "quad" with exact float32 weights from a per-view quad
        layout (one 16-byte load per sample), "ray-hybrid" ``split`` =
        (count, period): ``count`` of every ``period`` views from quads, the
        others through the texture.
    block : (int, int), optional
        Threads per block of kernels "texture" and "global" (default ``BLOCK``).
    views_per_pass, aligned, split
        The ray kernels' plan (``plan_passes``).
    depth : int
        z voxels per thread (``LEVERET_CONE_K``). The CPU mirror and
        ``ConeBackprojection.slab_alignment`` assume ``cone_plan.DEPTH``;
        other values are for measurements.
    min_blocks : int
        Blocks of 256 threads per multiprocessor the compiler must fit
        (bounds the registers per thread).
    """

    def __init__(
        self,
        kernel: str = "texture",
        *,
        block: tuple[int, int] | None = None,
        views_per_pass: int = VIEWS_PER_PASS,
        aligned: bool = True,
        split: tuple[int, int] = RAY_SPLIT,
        depth: int = DEPTH,
        min_blocks: int = MIN_BLOCKS,
    ):
        if kernel not in KERNELS:
            raise ValueError(f"kernel: expected one of {KERNELS}, got {kernel!r}")
        self.kernel = kernel
        self.views_per_pass = int(views_per_pass)
        if not 1 <= self.views_per_pass <= MAX_VIEWS_PER_PASS:
            raise ValueError(
                f"views_per_pass: expected 1 .. {MAX_VIEWS_PER_PASS} (constant memory), got {views_per_pass}"
            )
        self.aligned = bool(aligned)
        if kernel == "ray":
            split = (0, 1)
        elif kernel == "quad":
            split = (1, 1)
        self.split = (int(split[0]), int(split[1]))
        if not 0 <= self.split[0] <= self.split[1] or self.split[1] < 1:
            raise ValueError(f"split: expected 0 <= count <= period, period >= 1, got {split}")
        self._plans: dict = {}  # (matrices, volume shape) -> (plan, its pinned host copies, uploaded event)
        self._plans_lock = threading.Lock()
        self.block = tuple(block) if block is not None else BLOCK
        self.depth = int(depth)
        self.defines = defines(depth, min_blocks)

    def __repr__(self) -> str:
        return f"CudaConeBackprojector(kernel={self.kernel!r}, depth={self.depth})"

    def __call__(
        self,
        projections,
        index_matrices: np.ndarray,
        out,
        *,
        accumulate: bool = False,
        slices=None,
        device_matrices=None,
    ):
        """Back-project into ``out`` (nz, ny, nx); ``slices=(k0, k1)`` (k0, and
        k1 unless it is nz, multiples of ``depth``) writes only those z slices.
        ``device_matrices``: ``kernel_matrices(index_matrices, ...)`` already on
        the GPU (a pageable upload per call would wait for the stream's work)."""
        import cupy

        n_views, n_rows, n_cols = projections.shape
        nz, ny, nx = out.shape
        if self.kernel in RAY_KERNELS:
            return self._call_ray(projections, index_matrices, out, accumulate, slices)
        stream = cupy.cuda.get_current_stream()
        index_matrices = np.asarray(index_matrices, np.float64).reshape(n_views, 12)
        mats = (
            device_matrices
            if device_matrices is not None
            else cupy.asarray(kernel_matrices(index_matrices, np.full(n_views, self.kernel == "global")))
        )
        k0, k1 = self._check_slices(slices, nz)
        block0 = k0 // self.depth
        grid = (-(-nx // self.block[0]), -(-ny // self.block[1]), -(-k1 // self.depth) - block0)
        ints = lambda *a: tuple(np.int32(x) for x in a)  # noqa: E731
        padded = None
        if self.kernel == "global":
            padded = cupy.pad(projections, ((0, 0), (BORDER, BORDER), (BORDER, BORDER)))  # the zero border
        with device_state().constants("backproject_cone", self.defines, stream) as module:
            const = module.get_global("c_cone_mat")
            for v0 in range(0, n_views, MAX_VIEWS_PER_PASS):
                v1 = min(n_views, v0 + MAX_VIEWS_PER_PASS)
                const.copy_from_device_async(mats[v0:v1].data, (v1 - v0) * 48, stream)
                flag = accumulate or v0 > 0
                if self.kernel == "global":
                    module.get_function("backproject_cone_global")(
                        grid,
                        self.block,
                        (padded[v0:v1], out) + ints(nx, ny, nz, v1 - v0, n_rows, n_cols, flag, block0),
                        stream=stream,
                    )
                else:
                    tex = acquire((v1 - v0, n_rows, n_cols), 1, stream)
                    tex.upload(projections[v0:v1], stream)
                    module.get_function("backproject_cone_tex")(
                        grid,
                        self.block,
                        (tex.linear, out) + ints(nx, ny, nz, v1 - v0, n_rows, n_cols, flag, block0),
                        stream=stream,
                    )
                    release(tex, stream)
        return out

    def _check_slices(self, slices, nz: int) -> tuple[int, int]:
        k0, k1 = (0, nz) if slices is None else slices
        if k0 % self.depth or (k1 % self.depth and k1 != nz) or not 0 <= k0 < k1 <= nz:
            raise ValueError(
                f"slices: expected 0 <= k0 < k1 <= {nz}, k0 and k1 multiples of {self.depth} "
                f"(or k1 = {nz}), got {slices}"
            )
        return k0, k1

    def software_views(self, index_matrices: np.ndarray, volume_shape: tuple[int, int, int]) -> np.ndarray:
        """Which views this back-projector reads with exact weights (for its CPU mirror)."""
        return software_views(self.kernel, index_matrices, volume_shape, self.views_per_pass, self.split)

    def plan(self, index_matrices: np.ndarray, volume_shape: tuple[int, int, int], stream=None) -> list:
        """[(pass, device matrices, device software views, device views)]
        for these views, cached, uploaded on ``stream`` from pinned memory: a
        pageable upload would make the host wait for the stream's earlier work,
        and FDK queues its chunks ahead of the GPU (each chunk is a new plan).
        ``stream`` waits for the uploads of a plan another call made."""
        import cupy

        stream = stream if stream is not None else cupy.cuda.get_current_stream()
        m = np.asarray(index_matrices, np.float64).reshape(-1, 12)
        key = (m.tobytes(), tuple(volume_shape))
        with self._plans_lock:
            cached = self._plans.get(key)
        if cached is not None:
            plan, _, uploaded = cached
            stream.wait_event(uploaded)
            return plan
        plan, pinned = [], []

        def upload(host: np.ndarray):
            device, host_copy = upload_pinned(host, stream)
            pinned.append(host_copy)
            return device

        for p in plan_passes(m, volume_shape, self.views_per_pass, self.aligned, self.split):
            plan.append(
                (
                    p,
                    upload(kernel_matrices(m[p.views], p.software, QUAD_BORDER)),
                    upload(p.views[p.software].astype(np.int32)),
                    upload(p.views.astype(np.int32)),
                )
            )
        with self._plans_lock:
            if len(self._plans) >= 64:
                self._plans.pop(next(iter(self._plans)))
            self._plans[key] = (plan, pinned, stream.record())  # the copies' host side lives as long as the plan
        return plan

    def _call_ray(self, projections, index_matrices, out, accumulate, slices):
        import cupy

        n_views, n_rows, n_cols = projections.shape
        nz, ny, nx = out.shape
        if (n_rows + 2 * QUAD_BORDER) * (n_cols + 2 * QUAD_BORDER) >= 1 << 23:
            raise ValueError(
                f"projections: {n_rows} x {n_cols} detector too large for the quad layout's "
                f"2^23-pixel indices (use kernel 'global' or 'texture')"
            )
        k0, k1 = self._check_slices(slices, nz)
        stream = cupy.cuda.get_current_stream()
        plan = self.plan(index_matrices, out.shape, stream)
        with device_state().constants("backproject_cone", self.defines, stream) as module:
            self._ray_passes(module, plan, projections, out, accumulate, k0, k1, stream)
        return out

    def _ray_passes(self, module, plan, projections, out, accumulate, k0, k1, stream):
        """Queue the ray kernels' passes of ``plan`` on ``stream``, ``module``'s
        constant memory this call's (``DeviceState.constants``)."""
        import cupy

        n_views, n_rows, n_cols = projections.shape
        nz, ny, nx = out.shape
        const = module.get_global("c_cone_mat")
        block0 = k0 // self.depth
        by = 256 // 32
        pitch, height = n_cols + 2 * QUAD_BORDER, n_rows + 2 * QUAD_BORDER
        function = module.get_function(RAY_KERNELS[self.kernel])
        quads_fn = module.get_function("cone_quads")
        table = module.get_global("c_cone_views")
        ints = lambda *a: tuple(np.int32(x) for x in a)  # noqa: E731
        unused = cupy.zeros(4, cupy.float32)  # a valid pointer for a pass without software views
        textures = view_textures(projections, stream) if self.split[0] < self.split[1] else None
        for number, (p, mats, soft, views) in enumerate(plan):
            const.copy_from_device_async(mats.data, mats.size * 4, stream)
            if textures is not None:  # the pass's texture objects, in pass order
                handles = textures.handles.take(views)
                table.copy_from_device_async(handles.data, handles.nbytes, stream)
            quads = unused
            if soft.size:
                quads = cupy.empty((soft.size, height, pitch, 4), cupy.float32)
                quads_fn(
                    (-(-pitch // 128), height, soft.size),
                    (128,),
                    (projections, soft, quads) + ints(n_rows, n_cols),
                    stream=stream,
                )
            na, nb = (ny, nx) if p.y_major else (nx, ny)
            grid = (-(-na // 32), -(-nb // by), -(-k1 // self.depth) - block0)
            function(
                grid,
                (32, by),
                (quads, out)
                + ints(nx, ny, nz, p.views.size, p.y_major)
                + (np.float32(p.slope),)
                + ints(
                    self.split[1],
                    self.split[0],
                    pitch,
                    height * pitch,
                    n_rows,
                    n_cols,
                    accumulate or number > 0,
                    block0,
                ),
                stream=stream,
            )
        if textures is not None:
            release_views(textures, stream)
