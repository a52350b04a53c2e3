"""Launcher for ``backproject_cone.cu`` (paper 002's kernel B)."""
from __future__ import annotations

import re

import numpy as np

from ._module import kernel_source, load_module
from .texture import acquire, release

MAX_VIEWS_PER_PASS = 1024  # LEVERET_CONE_MAX_VIEWS
BLOCK = (32, 8)


def depth(defines: tuple[str, ...] = ()) -> int:
    """Voxels along z per thread: LEVERET_CONE_K from ``defines``, else the .cu file's default."""
    for d in defines:
        if d.startswith("LEVERET_CONE_K="):
            return int(d.split("=", 1)[1])
    return int(re.search(r"#define LEVERET_CONE_K (\d+)", kernel_source("backproject_cone")).group(1))


class ConeTextureBackprojector:
    """Back-projects (n_views, n_rows, n_cols) float32 CuPy projections into a CuPy volume.

    ``kernel="texture"``: the texture unit interpolates (8-bit weights);
    ``"global"``: software bilinear interpolation with exact float32 weights
    from global memory (through the same L1/texture cache).
    """

    def __init__(self, block: tuple[int, int] = BLOCK, defines: tuple[str, ...] = (),
                 kernel: str = "texture"):
        self.block = block
        self.depth = depth(tuple(defines))
        self.defines = tuple(defines)   # bottleneck variants (see the .cu file)
        self.kernel = kernel

    def __call__(self, projections, index_matrices: np.ndarray, out, *, accumulate: bool = False):
        import cupy

        n_views, n_rows, n_cols = projections.shape
        nz, ny, nx = out.shape
        module = load_module("backproject_cone", self.defines)
        const = module.get_global("c_cone_mat")
        stream = cupy.cuda.get_current_stream()
        mats = cupy.asarray(np.ascontiguousarray(index_matrices, np.float32).reshape(n_views, 12))
        grid = (-(-nx // self.block[0]), -(-ny // self.block[1]), -(-nz // self.depth))
        if self.kernel == "global":
            kernel = module.get_function("backproject_cone_global")
            padded = cupy.pad(projections, ((0, 0), (1, 1), (1, 1)))   # the zero border
            for v0 in range(0, n_views, MAX_VIEWS_PER_PASS):
                v1 = min(n_views, v0 + MAX_VIEWS_PER_PASS)
                const.copy_from_device_async(mats[v0:v1].data, (v1 - v0) * 48, stream)
                kernel(grid, self.block, (padded[v0:v1], out, np.int32(nx), np.int32(ny), np.int32(nz),
                                          np.int32(v1 - v0), np.int32(n_rows), np.int32(n_cols),
                                          np.int32(accumulate or v0 > 0)), stream=stream)
            return out
        kernel = module.get_function("backproject_cone_tex")
        for v0 in range(0, n_views, MAX_VIEWS_PER_PASS):
            v1 = min(n_views, v0 + MAX_VIEWS_PER_PASS)
            tex = acquire((v1 - v0, n_rows, n_cols), 1, stream)
            tex.upload(projections[v0:v1], stream)
            const.copy_from_device_async(mats[v0:v1].data, (v1 - v0) * 48, stream)
            kernel(grid, self.block, (tex.linear, out, np.int32(nx), np.int32(ny), np.int32(nz),
                                      np.int32(v1 - v0), np.int32(accumulate or v0 > 0)), stream=stream)
            release(tex, stream)
        return out
