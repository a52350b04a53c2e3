"""Launcher for ``backproject_cone.cu``: paper 002's kernel B (texture or
global-memory interpolation), kernel S (tiles in shared memory) and the hybrid
of B and S."""
from __future__ import annotations

import re

import numpy as np

from ._module import kernel_source, load_module
from .texture import acquire, release

MAX_VIEWS_PER_PASS = 1024  # LEVERET_CONE_MAX_VIEWS
BLOCK = (32, 8)
STAGED_BLOCK = (16, 16)    # compact boxes: small tiles (docs/performance.md)
MAX_TILE = 4096            # floats per staged view: 16 KiB, so the texture path keeps L1 to cache in
KERNELS = ("texture", "global", "shared", "hybrid")
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
    "global" and "shared", none for "texture", the first STAGE of every round of
    STAGE + TEX_VIEWS for "hybrid" (counted from the first view of each pass)."""
    if kernel == "texture":
        return np.zeros(n_views, bool)
    if kernel != "hybrid":
        return np.ones(n_views, bool)
    stage, tex = view_split(defines)
    index = np.arange(n_views) % MAX_VIEWS_PER_PASS
    return index % (stage + tex) < stage


def kernel_matrices(index_matrices: np.ndarray, software: np.ndarray) -> np.ndarray:
    """The float32 (n_views, 12) matrices the kernels (and their CPU mirror)
    use: views read through the texture unit get the half-texel shift of
    texture coordinates (u + 1/2, v + 1/2) built into their u and v rows,
    computed in float64, so the kernel adds nothing per sample."""
    m = np.array(index_matrices, np.float64).reshape(-1, 3, 4)
    texture = ~np.asarray(software, bool)
    m[texture, 0:2, :] += 0.5 * m[texture, 2:3, :]
    return np.ascontiguousarray(m.reshape(-1, 12), np.float32)


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

    kernel : {"texture", "global", "shared", "hybrid"}
        "texture": kernel B, the texture unit interpolates (8-bit weights);
        "global": software bilinear interpolation with exact float32 weights,
        neighbours read from global memory (through the L1/texture cache);
        "shared": the same arithmetic, neighbours read from a per-block tile
        of the detector staged in shared memory; "hybrid": "shared" for the
        views ``staged_views`` marks, the texture unit for the others, both at
        once on every multiprocessor.
    """

    def __init__(self, block: tuple[int, int] | None = None, defines: tuple[str, ...] = (),
                 kernel: str = "texture"):
        if kernel not in KERNELS:
            raise ValueError(f"kernel: expected one of {KERNELS}, got {kernel!r}")
        self.kernel = kernel
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
                        grid, self.block, (tex.linear, out) + ints(nx, ny, nz, v1 - v0, flag, block0), stream=stream)
                else:
                    module.get_function("backproject_cone_hybrid")(
                        grid, self.block,
                        (tex.linear, padded[v0:v1], out) + ints(nx, ny, nz, v1 - v0, n_rows, n_cols, capacity,
                                                                flag, block0),
                        stream=stream, shared_mem=shared_bytes)
                release(tex, stream)
        return out
