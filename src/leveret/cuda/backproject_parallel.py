"""Launcher for ``backproject_parallel.cu``: texture back-projection of sinogram stacks."""
from __future__ import annotations

import numpy as np

from ._module import load_module
from .texture import LayeredTexture, acquire, release

MAX_ANGLES_PER_PASS = 2048  # LEVERET_PAR_MAX_ANGLES in the .cu file
KERNELS = ("float", "float2")


class ParallelTextureBackprojector:
    """Back-projects ``(n_slices, n_angles, n_cols)`` float32 sinograms on the GPU.

    ``packing="float2"`` puts two slices in each texel (one fetch filters
    both, same weights, same result); "float" one slice per texel; "auto"
    packs whenever there are two slices or more. Textures come from the
    cache in ``texture.py``, so streaming chunk after chunk allocates once.
    """

    def __init__(self, packing: str = "auto", block: tuple[int, int] = (32, 8)):
        self.packing = packing
        self.block = block
        self.last_kernel: str | None = None

    def __call__(self, sinos, table: np.ndarray, out, interpolation: str = "linear"):
        """``out[k] = sum_n sinos[k, n](u_n(i, j))`` for every slice k (see the cpu module).

        sinos : cupy (n_slices, n_angles, n_cols) float32, C-contiguous
        table : numpy (n_angles, 3), rows (a, b, c); rounded to float32
        out : cupy (n_slices, ny, nx) float32, overwritten
        """
        import cupy

        n_slices, n_angles, n_cols = sinos.shape
        ny, nx = out.shape[1:]
        packing = self.packing if self.packing != "auto" else ("float2" if n_slices > 1 else "float")
        module = load_module("backproject_parallel")
        kernel = module.get_function("backproject_parallel_tex2" if packing == "float2"
                                     else "backproject_parallel_tex")
        self.last_kernel = f"texture-{packing}"
        const = module.get_global("c_par_table")
        stream = cupy.cuda.get_current_stream()

        table4 = np.zeros((n_angles, 4), np.float32)
        table4[:, :3] = table
        table4_dev = cupy.asarray(table4)
        grid_xy = ((nx + self.block[0] - 1) // self.block[0], (ny + self.block[1] - 1) // self.block[1])
        per_layer = 2 if packing == "float2" else 1
        step = LayeredTexture.MAX_LAYERS * per_layer

        for s0 in range(0, n_slices, step):
            s1 = min(n_slices, s0 + step)
            layers = -(-(s1 - s0) // per_layer)
            tex = acquire((layers, n_angles, n_cols), per_layer, stream)
            tex.upload(_pack(sinos[s0:s1], layers) if per_layer == 2 else sinos[s0:s1], stream)
            tex_obj = tex.linear if interpolation == "linear" else tex.point
            for a0 in range(0, n_angles, MAX_ANGLES_PER_PASS):
                a1 = min(n_angles, a0 + MAX_ANGLES_PER_PASS)
                const.copy_from_device_async(table4_dev[a0:a1].data, (a1 - a0) * 16, stream)
                args = [tex_obj, out[s0:s1], np.int32(nx), np.int32(ny)]
                if per_layer == 2:
                    args.append(np.int32(s1 - s0))
                args += [np.int32(a1 - a0), np.int32(a0), np.int32(a0 > 0)]
                kernel(grid_xy + (layers,), self.block, tuple(args), stream=stream)
            release(tex, stream)
        return out


def _pack(sinos, layers):
    """(S, A, C) -> (layers, A, 2C): slices 2L and 2L+1 interleaved per texel."""
    import cupy

    n_slices, n_angles, n_cols = sinos.shape
    packed = cupy.zeros((layers, n_angles, n_cols, 2), cupy.float32)
    packed[: n_slices // 2, :, :, 0] = sinos[0:n_slices - 1:2]
    packed[: n_slices // 2, :, :, 1] = sinos[1::2]
    if n_slices % 2:
        packed[-1, :, :, 0] = sinos[-1]
    return packed.reshape(layers, n_angles, 2 * n_cols)
