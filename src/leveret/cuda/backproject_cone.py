"""Launcher for ``backproject_cone.cu``: paper 002's kernel B (texture or
global-memory interpolation), kernel S (tiles in shared memory), the hybrid
of B and S, and the ray-aligned kernels R (texture), Q (exact weights from a
quad layout) and their hybrid RQ, which run a call's views in passes of
similar direction (``plan_passes``)."""
from __future__ import annotations

import re

import numpy as np

from ._module import kernel_source, load_module, upload_pinned
from .texture import acquire, release, release_views, view_textures

MAX_VIEWS_PER_PASS = 1024  # LEVERET_CONE_MAX_VIEWS
BLOCK = (32, 8)
STAGED_BLOCK = (16, 16)    # compact boxes: small tiles (docs/performance.md)
MAX_TILE = 4096            # floats per staged view: 16 KiB, so the texture path keeps L1 to cache in
KERNELS = ("texture", "global", "shared", "hybrid", "ray", "quad", "ray-hybrid")
RAY_KERNELS = {"ray": "backproject_cone_ray_tex", "quad": "backproject_cone_ray_quad",
               "ray-hybrid": "backproject_cone_ray_hybrid"}
VIEWS_PER_PASS = 124       # ray kernels: views per pass (direction bin), see plan_passes; 32 cost 1-1.7 ms
                           # per extra pass at 512^3 (uncoalesced volume stores, quad layout), H200
RAY_SPLIT = (1, 3)         # "ray-hybrid": of every 3 views of a pass, 1 from quads (exact), 2 through the texture
QUAD_BORDER = 2            # zero quads around each view in the quad layout (folded into the matrices)
BORDER = 2                 # LEVERET_CONE_BORDER: zero pixels around each view for the software kernels
SHARED_BYTES = 48 << 10    # per block, without opting in to more


def _define(defines: tuple[str, ...], name: str) -> int:
    """Macro ``name`` from ``defines``, else the .cu file's default."""
    for d in defines:
        if d.startswith(name + "="):
            return int(d.split("=", 1)[1])
    return int(re.search(rf"#define {name} (\d+)", kernel_source("backproject_cone")).group(1))


def depth(defines: tuple[str, ...] = ()) -> int:
    """Voxels along z per thread: LEVERET_CONE_K."""
    return _define(tuple(defines), "LEVERET_CONE_K")


def view_split(defines: tuple[str, ...] = ()) -> tuple[int, int]:
    """(views staged in shared memory, views through the texture) per round of the hybrid kernel."""
    return _define(tuple(defines), "LEVERET_CONE_STAGE"), _define(tuple(defines), "LEVERET_CONE_TEX_VIEWS")


def staged_views(n_views: int, kernel: str, defines: tuple[str, ...] = ()) -> np.ndarray:
    """Which views a kernel interpolates in software (exact weights): all for
    "global", "shared" and "quad", none for "texture" and "ray", the first STAGE
    of every round of STAGE + TEX_VIEWS for "hybrid" (counted from the first
    view of each pass). "ray-hybrid" depends on its plan: ``software_views``."""
    if kernel in ("texture", "ray"):
        return np.zeros(n_views, bool)
    if kernel == "ray-hybrid":
        raise ValueError("staged_views: 'ray-hybrid' depends on the matrices; use software_views")
    if kernel != "hybrid":
        return np.ones(n_views, bool)
    stage, tex = view_split(defines)
    index = np.arange(n_views) % MAX_VIEWS_PER_PASS
    return index % (stage + tex) < stage


def software_views(kernel: str, index_matrices: np.ndarray, volume_shape: tuple[int, int, int],
                   defines: tuple[str, ...] = (), views_per_pass: int = VIEWS_PER_PASS,
                   split: tuple[int, int] = RAY_SPLIT) -> np.ndarray:
    """``staged_views`` for every kernel, "ray-hybrid" (with its default plan) included."""
    n_views = np.asarray(index_matrices).reshape(-1, 12).shape[0]
    if kernel != "ray-hybrid":
        return staged_views(n_views, kernel, defines)
    return software_mask(plan_passes(index_matrices, volume_shape, views_per_pass, split=split), n_views)


def fma_steps(kernel: str, software: np.ndarray) -> np.ndarray:
    """Which views a kernel steps along z in one fma per voxel (exact z
    coordinates) rather than by running sums: its software views, except in
    "ray-hybrid", whose quad views take running sums like its texture views
    (the fma form cost it ~2 ms at 512^3; see Segment in the .cu file)."""
    software = np.asarray(software, bool)
    return np.zeros_like(software) if kernel == "ray-hybrid" else software


def kernel_matrices(index_matrices: np.ndarray, software: np.ndarray, border: int = 0) -> np.ndarray:
    """The float32 (n_views, 12) matrices the kernels (and their CPU mirror)
    use: views read through the texture unit get the half-texel shift of
    texture coordinates (u + 1/2, v + 1/2) built into their u and v rows,
    software views the shift of a ``border``-pixel border (the quad layout's
    2; 0 for the other software kernels, which add theirs), computed in
    float64, so the kernel adds nothing per sample."""
    m = np.array(index_matrices, np.float64).reshape(-1, 3, 4)
    software = np.broadcast_to(np.asarray(software, bool), (m.shape[0],))
    m[~software, 0:2, :] += 0.5 * m[~software, 2:3, :]
    if border:
        m[software, 0:2, :] += border * m[software, 2:3, :]
    return np.ascontiguousarray(m.reshape(-1, 12), np.float32)


class Pass:
    """One launch of a ray kernel: ``views`` (indices into the call's views,
    in the kernel's order), lanes along x (``y_major`` False) or y, shifted by
    ``round(lane * slope)`` along the other axis; ``software``: which of
    ``views`` the "ray-hybrid" kernel reads from quads."""

    def __init__(self, views, y_major, slope, software):
        self.views, self.y_major, self.slope, self.software = views, bool(y_major), float(slope), software


def view_directions(index_matrices: np.ndarray, volume_shape: tuple[int, int, int]) -> np.ndarray:
    """Azimuth (radians) of each view's central ray, source -> volume centre,
    in voxel-index coordinates (x = i, y = j). The source is the matrix's null
    vector (a source at infinity gives its direction)."""
    m = np.asarray(index_matrices, np.float64).reshape(-1, 3, 4)
    h = np.linalg.svd(m)[2][:, -1, :]                      # (n, 4): M h = 0
    nz, ny, nx = volume_shape
    centre = np.array([(nx - 1) / 2, (ny - 1) / 2, (nz - 1) / 2])
    d = centre[None, :] * h[:, 3:4] - h[:, :3]             # (centre - source) x h_w: the sign is irrelevant mod pi
    return np.arctan2(d[:, 1], d[:, 0])


def plan_passes(index_matrices: np.ndarray, volume_shape: tuple[int, int, int], views_per_pass: int = VIEWS_PER_PASS,
                aligned: bool = True, split: tuple[int, int] = (0, 1)) -> list[Pass]:
    """Group the views into passes of at most ``views_per_pass`` views of
    similar direction: azimuths modulo 180 degrees (a line and its reverse
    are the same lanes), sorted, cut after the largest gap into equal groups;
    each group keeps the call's view order (contiguous runs stay contiguous).
    A pass's lanes follow the axial mean of its azimuths; ``aligned=False``:
    lanes along x (kernel B's mapping), for comparison. ``split=(count,
    period)``: view n of a pass is a software (quad) view when n % period <
    count."""
    n = np.asarray(index_matrices).reshape(-1, 12).shape[0]
    phi = view_directions(index_matrices, volume_shape)
    alpha = np.mod(phi, np.pi)
    order = np.argsort(alpha, kind="stable")
    if n > 1:   # start after the largest gap of the circle of axial directions
        gaps = np.diff(np.concatenate([alpha[order], alpha[order[:1]] + np.pi]))
        order = np.roll(order, -(int(np.argmax(gaps)) + 1))
    count, period = split
    passes = []
    for group in np.array_split(order, -(-n // max(1, int(views_per_pass)))):
        views = np.sort(group)
        mean = 0.5 * np.arctan2(np.sin(2 * phi[views]).sum(), np.cos(2 * phi[views]).sum())
        dx, dy = np.cos(mean), np.sin(mean)
        if not aligned:
            y_major, slope = False, 0.0
        elif abs(dx) >= abs(dy):
            y_major, slope = False, dy / dx
        else:
            y_major, slope = True, dx / dy
        passes.append(Pass(views, y_major, slope, np.arange(views.size) % period < count))
    return passes


def software_mask(passes: list[Pass], n_views: int) -> np.ndarray:
    """Which of the call's views a plan reads in software (for the CPU mirror)."""
    mask = np.zeros(n_views, bool)
    for p in passes:
        mask[p.views[p.software]] = True
    return mask


def tile_capacity(index_matrices: np.ndarray, volume_shape: tuple[int, int, int], block: tuple[int, int],
                  k: int, n_rows: int, n_cols: int, limit: int = MAX_TILE) -> int:
    """Floats per view that a block's tile needs: the largest footprint over a
    sample of blocks (a 9 x 9 x 5 lattice, corners included) and every view,
    as the kernel computes it, rounded up to 32 and capped at ``limit``. A view
    whose tile is larger for some block is read from global memory there."""
    nz, ny, nx = volume_shape
    starts = [np.unique(np.linspace(0, (n - 1) // b, m).round().astype(int)) * b
              for n, b, m in ((nx, block[0], 9), (ny, block[1], 9), (nz, k, 5))]
    i0, j0, k0 = (a.ravel() for a in np.meshgrid(*starts, indexing="ij"))
    i1, j1, k1 = np.minimum(i0 + block[0], nx) - 1, np.minimum(j0 + block[1], ny) - 1, np.minimum(k0 + k, nz) - 1
    m = np.asarray(index_matrices, np.float64).reshape(-1, 3, 4)
    u_lo = v_lo = np.inf
    u_hi = v_hi = -np.inf
    for ci in (i0, i1):
        for cj in (j0, j1):
            for ck in (k0, k1):
                p = np.stack([ci, cj, ck, np.ones_like(ci)]).astype(np.float64)   # (4, blocks)
                q = m @ p                                                         # (views, 3, blocks)
                u, v = q[:, 0] / q[:, 2], q[:, 1] / q[:, 2]
                u_lo, u_hi = np.minimum(u_lo, u), np.maximum(u_hi, u)
                v_lo, v_hi = np.minimum(v_lo, v), np.maximum(v_hi, v)
    width = np.floor(np.clip(u_hi + 0.5, -2, n_cols)) - np.floor(np.clip(u_lo - 0.5, -2, n_cols)) + 2
    height = np.floor(np.clip(v_hi + 0.5, -2, n_rows)) - np.floor(np.clip(v_lo - 0.5, -2, n_rows)) + 2
    need = int((width * height).max())
    return int(min(limit, -(-need // 32) * 32))


class ConeTextureBackprojector:
    """Back-projects (n_views, n_rows, n_cols) float32 CuPy projections into a CuPy volume.

    kernel : {"texture", "global", "shared", "hybrid", "ray", "quad", "ray-hybrid"}
        "texture": kernel B, the texture unit interpolates (8-bit weights);
        "global": software bilinear interpolation with exact float32 weights,
        neighbours read from global memory (through the L1/texture cache);
        "shared": the same arithmetic, neighbours read from a per-block tile
        of the detector staged in shared memory; "hybrid": "shared" for the
        views ``staged_views`` marks, the texture unit for the others, both at
        once on every multiprocessor. The ray-aligned kernels run the views in
        passes of similar direction with a warp's lanes along the pass's rays
        (``plan_passes``): "ray" through the texture unit (a 2D texture
        object per view over ``projections`` in place, ``texture.view_textures``:
        no copy into a CUDA array), "quad" with exact
        float32 weights from a per-view quad layout (one 16-byte load per
        sample), "ray-hybrid" ``split`` = (count, period): ``count`` of every
        ``period`` views from quads, the others through the texture.
    views_per_pass, aligned, split : the ray kernels' plan (``plan_passes``).
    """

    def __init__(self, block: tuple[int, int] | None = None, defines: tuple[str, ...] = (),
                 kernel: str = "texture", views_per_pass: int = VIEWS_PER_PASS, aligned: bool = True,
                 split: tuple[int, int] = RAY_SPLIT):
        if kernel not in KERNELS:
            raise ValueError(f"kernel: expected one of {KERNELS}, got {kernel!r}")
        self.kernel = kernel
        self.views_per_pass = int(views_per_pass)
        if not 1 <= self.views_per_pass <= MAX_VIEWS_PER_PASS:
            raise ValueError(f"views_per_pass: expected 1 .. {MAX_VIEWS_PER_PASS} (constant memory), "
                             f"got {views_per_pass}")
        self.aligned = bool(aligned)
        if kernel == "ray":
            split = (0, 1)
        elif kernel == "quad":
            split = (1, 1)
        self.split = (int(split[0]), int(split[1]))
        if not 0 <= self.split[0] <= self.split[1] or self.split[1] < 1:
            raise ValueError(f"split: expected 0 <= count <= period, period >= 1, got {split}")
        self._plans: dict = {}
        self.block = tuple(block) if block is not None else (
            STAGED_BLOCK if kernel in ("shared", "hybrid") else BLOCK)
        self.defines = tuple(defines)   # bottleneck variants and tuning (see the .cu file)
        self.depth = depth(self.defines)
        self._capacity: dict = {}

    def __call__(self, projections, index_matrices: np.ndarray, out, *, accumulate: bool = False, slices=None,
                 device_matrices=None):
        """Back-project into ``out`` (nz, ny, nx); ``slices=(k0, k1)`` (k0, and
        k1 unless it is nz, multiples of ``depth``) writes only those z slices.
        ``device_matrices``: ``kernel_matrices(index_matrices, ...)`` already on
        the GPU (a pageable upload per call would wait for the stream's work)."""
        import cupy

        n_views, n_rows, n_cols = projections.shape
        nz, ny, nx = out.shape
        if self.kernel in RAY_KERNELS:
            return self._call_ray(projections, index_matrices, out, accumulate, slices)
        module = load_module("backproject_cone", self.defines)
        const = module.get_global("c_cone_mat")
        stream = cupy.cuda.get_current_stream()
        index_matrices = np.asarray(index_matrices, np.float64).reshape(n_views, 12)
        mats = device_matrices if device_matrices is not None else cupy.asarray(
            kernel_matrices(index_matrices, staged_views(n_views, self.kernel, self.defines)))
        k0, k1 = (0, nz) if slices is None else slices
        if k0 % self.depth or (k1 % self.depth and k1 != nz) or not 0 <= k0 < k1 <= nz:
            raise ValueError(f"slices: expected 0 <= k0 < k1 <= {nz}, k0 and k1 multiples of {self.depth} "
                             f"(or k1 = {nz}), got {slices}")
        block0 = k0 // self.depth
        grid = (-(-nx // self.block[0]), -(-ny // self.block[1]), -(-k1 // self.depth) - block0)
        ints = lambda *a: tuple(np.int32(x) for x in a)   # noqa: E731
        padded = None
        if self.kernel != "texture":
            padded = cupy.pad(projections, ((0, 0), (BORDER, BORDER), (BORDER, BORDER)))   # the zero border
        capacity = 0
        if self.kernel in ("shared", "hybrid"):
            key = (index_matrices.tobytes(), out.shape, n_rows, n_cols)
            if key not in self._capacity:
                stage, _ = view_split(self.defines)
                limit = min(MAX_TILE, (SHARED_BYTES - 256) // (4 * stage))
                self._capacity = {key: tile_capacity(index_matrices, out.shape, self.block, self.depth,
                                                     n_rows, n_cols, limit=limit)}
            capacity = self._capacity[key]
            stage, _ = view_split(self.defines)
            shared_bytes = stage * capacity * 4
        for v0 in range(0, n_views, MAX_VIEWS_PER_PASS):
            v1 = min(n_views, v0 + MAX_VIEWS_PER_PASS)
            const.copy_from_device_async(mats[v0:v1].data, (v1 - v0) * 48, stream)
            flag = accumulate or v0 > 0
            if self.kernel == "global":
                module.get_function("backproject_cone_global")(
                    grid, self.block, (padded[v0:v1], out) + ints(nx, ny, nz, v1 - v0, n_rows, n_cols, flag, block0),
                    stream=stream)
            elif self.kernel == "shared":
                module.get_function("backproject_cone_shared")(
                    grid, self.block,
                    (padded[v0:v1], out) + ints(nx, ny, nz, v1 - v0, n_rows, n_cols, capacity, flag, block0),
                    stream=stream, shared_mem=shared_bytes)
            else:
                tex = acquire((v1 - v0, n_rows, n_cols), 1, stream)
                tex.upload(projections[v0:v1], stream)
                if self.kernel == "texture":
                    module.get_function("backproject_cone_tex")(
                        grid, self.block, (tex.linear, out) + ints(nx, ny, nz, v1 - v0, n_rows, n_cols, flag, block0),
                        stream=stream)
                else:
                    module.get_function("backproject_cone_hybrid")(
                        grid, self.block,
                        (tex.linear, padded[v0:v1], out) + ints(nx, ny, nz, v1 - v0, n_rows, n_cols, capacity,
                                                                flag, block0),
                        stream=stream, shared_mem=shared_bytes)
                release(tex, stream)
        return out

    def plan(self, index_matrices: np.ndarray, volume_shape: tuple[int, int, int], stream=None) -> list:
        """[(pass, device matrices, device software views, device views)]
        for these views, cached, uploaded on ``stream`` from pinned memory: a
        pageable upload would make the host wait for the stream's earlier work,
        and FDK queues its chunks ahead of the GPU (each chunk is a new plan)."""
        import cupy

        m = np.asarray(index_matrices, np.float64).reshape(-1, 12)
        key = (m.tobytes(), tuple(volume_shape))
        if key not in self._plans:
            stream = stream if stream is not None else cupy.cuda.get_current_stream()
            plan, pinned = [], []

            def upload(host: np.ndarray):
                device, host_copy = upload_pinned(host, stream)
                pinned.append(host_copy)
                return device

            for p in plan_passes(m, volume_shape, self.views_per_pass, self.aligned, self.split):
                plan.append((p, upload(kernel_matrices(m[p.views], p.software, QUAD_BORDER)),
                             upload(p.views[p.software].astype(np.int32)), upload(p.views.astype(np.int32))))
            if len(self._plans) >= 64:
                self._plans.pop(next(iter(self._plans)))
            self._plans[key] = (plan, pinned)   # the copies' host side lives as long as the plan
        return self._plans[key][0]

    def _call_ray(self, projections, index_matrices, out, accumulate, slices):
        import cupy

        n_views, n_rows, n_cols = projections.shape
        nz, ny, nx = out.shape
        if (n_rows + 2 * QUAD_BORDER) * (n_cols + 2 * QUAD_BORDER) >= 1 << 23:
            raise ValueError(f"projections: {n_rows} x {n_cols} detector too large for the quad layout's "
                             f"2^23-pixel indices (use kernel 'global' or 'texture')")
        k0, k1 = (0, nz) if slices is None else slices
        if k0 % self.depth or (k1 % self.depth and k1 != nz) or not 0 <= k0 < k1 <= nz:
            raise ValueError(f"slices: expected 0 <= k0 < k1 <= {nz}, k0 and k1 multiples of {self.depth} "
                             f"(or k1 = {nz}), got {slices}")
        module = load_module("backproject_cone", self.defines)
        const = module.get_global("c_cone_mat")
        stream = cupy.cuda.get_current_stream()
        plan = self.plan(index_matrices, out.shape, stream)
        block0 = k0 // self.depth
        by = 256 // 32
        pitch, height = n_cols + 2 * QUAD_BORDER, n_rows + 2 * QUAD_BORDER
        function = module.get_function(RAY_KERNELS[self.kernel])
        quads_fn = module.get_function("cone_quads")
        table = module.get_global("c_cone_views")
        ints = lambda *a: tuple(np.int32(x) for x in a)   # noqa: E731
        unused = cupy.zeros(4, cupy.float32)   # a valid pointer for a pass without software views
        textures = view_textures(projections, stream) if self.split[0] < self.split[1] else None
        for number, (p, mats, soft, views) in enumerate(plan):
            const.copy_from_device_async(mats.data, mats.size * 4, stream)
            if textures is not None:   # the pass's texture objects, in pass order
                handles = textures.handles.take(views)
                table.copy_from_device_async(handles.data, handles.nbytes, stream)
            quads = unused
            if soft.size:
                quads = cupy.empty((soft.size, height, pitch, 4), cupy.float32)
                quads_fn((-(-pitch // 128), height, soft.size), (128,),
                         (projections, soft, quads) + ints(n_rows, n_cols), stream=stream)
            na, nb = (ny, nx) if p.y_major else (nx, ny)
            grid = (-(-na // 32), -(-nb // by), -(-k1 // self.depth) - block0)
            function(grid, (32, by),
                     (quads, out) + ints(nx, ny, nz, p.views.size, p.y_major) + (np.float32(p.slope),)
                     + ints(self.split[1], self.split[0], pitch, height * pitch, n_rows, n_cols,
                            accumulate or number > 0, block0),
                     stream=stream)
        if textures is not None:
            release_views(textures, stream)
        return out
