"""Launchers for ``backproject_parallel.cu``: back-projection of sinogram stacks.

Kernels (``KERNELS``), all reading ``(n_slices, n_angles, n_cols)`` filtered
sinograms and writing ``(n_slices, ny, nx)`` slices:

texture
    one pixel per thread, float or float2 texels.
texz
    Chilingaryan et al. (2018), Alg. 2-4: Z-order thread mapping, 4
    projections in parallel per block and ``nq`` pixels per thread; float,
    float2, half2 or half4 texels (``packing``).
alu
    Chilingaryan et al. (2018), Alg. 6/9: the sinogram bins a ``tile`` x
    ``tile`` pixel block needs are cached in shared memory, interpolation in
    software with exact float32 weights; 1, 2 or 4 slices per block (``nv``).
hybrid
    Chilingaryan et al. (2018), Sect. 7.1: the same tiles, ``ratio = (num, den)``: blocks with
    ``block % den < num`` use the texture path, the rest the ALU path, so
    texture units and ALUs/shared memory work at the same time.

The pure-NumPy helpers (``pack_slices``, ``alu_table``, ``cache_width``) are
used by the launchers and tested on the CPU.
"""

from __future__ import annotations

import math

import numpy as np

from ._module import load_module
from .device_state import device_state
from .texture import LayeredTexture, acquire, release

MAX_ANGLES_PER_PASS = 2048  # projections whose (a, b, c) rows fit in constant memory at once
KERNELS = ("texture", "texz", "alu", "hybrid")
PACKINGS = {"float": (1, False), "float2": (2, False), "half2": (2, True), "half4": (4, True)}
ALU_SD = {32: 16, 64: 8}  # projections cached per stage for each tile size
MAX_SHARED = 48 * 1024  # dynamic shared memory without opting in
MAX_LAYERS_PER_CALL = 2048  # LayeredTexture.MAX_LAYERS: the hybrid's slices per call / nv
#: The -D options ``backproject_parallel.cu`` needs (it has no defaults of its own).
DEFINES = (f"LEVERET_PAR_MAX_ANGLES={MAX_ANGLES_PER_PASS}",)


def pack_slices(sinos, per_texel: int, dtype=np.float32, xp=np):
    """(S, A, C) -> (ceil(S / per_texel), A, per_texel * C) of ``dtype``:
    slices ``per_texel * L + c`` go to channel c of layer L; missing slices of
    the last layer are zero. Works on NumPy and CuPy (``xp``)."""
    n_slices, n_angles, n_cols = sinos.shape
    layers = -(-n_slices // per_texel)
    packed = xp.zeros((layers, n_angles, n_cols, per_texel), dtype)
    for c in range(per_texel):
        part = sinos[c::per_texel]
        packed[: part.shape[0], :, :, c] = part
    return packed.reshape(layers, n_angles, per_texel * n_cols)


def unpack_slices(packed, per_texel: int, n_slices: int):
    """Inverse of ``pack_slices`` (for tests): (L, A, per_texel * C) -> (S, A, C)."""
    layers, n_angles, width = packed.shape
    n_cols = width // per_texel
    four = packed.reshape(layers, n_angles, n_cols, per_texel)
    return four.transpose(0, 3, 1, 2).reshape(layers * per_texel, n_angles, n_cols)[:n_slices]


def cache_width(table64: np.ndarray, tile: int) -> int:
    """Bins the ALU kernel caches per projection row for a ``tile`` x ``tile`` block:
    the span of ``x = i a + j b`` over the tile, plus interpolation partner and
    one bin of margin on each side (see tile_body in the .cu file)."""
    a, b = np.abs(table64[:, 0]), np.abs(table64[:, 1])
    span = float(np.max(a * (tile - 1) + b * (tile - 1))) if len(a) else 0.0
    return int(math.ceil(span)) + 4


def alu_table(table64: np.ndarray, tile: int) -> np.ndarray:
    """Per projection (a, b, c - 0.5, cm) in float64: column = (c - 0.5) + i a + j b,
    and cm, the offset from a tile's corner to its smallest column (<= 0)."""
    a, b, c = (np.asarray(table64[:, k], np.float64) for k in range(3))
    e = tile - 1
    cm = np.minimum(np.minimum(0.0, a * e), np.minimum(b * e, (a + b) * e))
    return np.ascontiguousarray(np.stack([a, b, c - 0.5, cm], axis=1))


def alu_shared_bytes(cw: int, tile: int, nv: int) -> int:
    return ALU_SD[tile] * cw * 8 * nv


# The ALU kernel's in-cache coordinate h (0 <= h < cw) is float32: its rounding,
# up to ulp(h)/2, is the weight error. Below 128 bins that is <= 3.8e-6 px per
# rounding, ~5e-6 relative on white noise against the exact reference (the 1e-5
# of the exact mode); wider caches (pixels much larger than detector bins,
# 64-pixel tiles) would exceed it, so they are refused.
MAX_EXACT_CACHE_WIDTH = 128


def alu_plan(table64: np.ndarray, tile: int, nv: int) -> tuple[int, int]:
    """(cache width in bins, dynamic shared bytes) of the ALU kernel for this
    geometry, or ValueError naming ``tile`` when the tile is too large for it."""
    cw = cache_width(table64, tile)
    shared = alu_shared_bytes(cw, tile, nv)
    if cw > MAX_EXACT_CACHE_WIDTH or shared > MAX_SHARED:
        raise ValueError(
            f"tile: {tile}-pixel tiles need {cw} cached bins per projection here "
            f"({shared} B of shared memory); the ALU kernel takes at most "
            f"{MAX_EXACT_CACHE_WIDTH} bins (float32 cache coordinates stay exact to "
            f"1e-5) and {MAX_SHARED} B: pixels are large against detector bins, "
            "use tile=32 or kernel='texz'"
        )
    return cw, shared


class ParallelBackprojectorGPU:
    """Runs one of ``KERNELS`` on CuPy arrays; ``last_kernel`` names what ran.

    Parameters of ``__call__`` (see each kernel above): ``packing`` (texture,
    texz, hybrid: "float", "float2", "half2", "half4"; hybrid: float or
    float2, as its ALU blocks read float32), ``nq`` (texz: 4 or 8), ``tile``
    (alu, hybrid: 32 or 64), ``nv`` (alu: 1 or 2 slices per block), ``ratio``
    (hybrid: (num, den)).
    """

    def __init__(self, block: tuple[int, int] = (32, 8)):
        self.block = block
        self.last_kernel: str | None = None

    def __call__(
        self,
        sinos,
        table32: np.ndarray,
        table64: np.ndarray,
        out,
        *,
        interpolation: str = "linear",
        kernel: str = "texture",
        packing: str = "auto",
        nq: int = 4,
        tile: int = 32,
        nv: int = 2,
        ratio: tuple[int, int] = (1, 2),
    ):
        """``out[k] = sum_n sinos[k, n](u_n(i, j))`` for every slice k.

        sinos : cupy (n_slices, n_angles, n_cols) float32, C-contiguous
        table32 : numpy (n_angles, 3) float32 rows (a, b, c) (texture paths)
        table64 : numpy (n_angles, 3) float64, the same rows unrounded (ALU path)
        out : cupy (n_slices, ny, nx) float32, overwritten
        """
        if kernel not in KERNELS:
            raise ValueError(f"kernel: expected one of {KERNELS}, got {kernel!r}")
        n_slices = sinos.shape[0]
        if packing == "auto":
            packing = "float2" if n_slices > 1 else "float"
        if packing not in PACKINGS:
            raise ValueError(f"packing: expected one of {tuple(PACKINGS)}, got {packing!r}")
        if kernel == "texture":
            if packing == "half4":
                raise ValueError(
                    "packing: the 'texture' kernel reads 1 or 2 slices per texel; use kernel='texz' for half4"
                )
            return self._texture(sinos, table32, out, interpolation, packing)
        if kernel == "texz":
            if nq not in (4, 8) or (packing == "half4" and nq != 4):
                raise ValueError(f"nq: expected 4 or 8 (4 with half4), got {nq}")
            return self._texz(sinos, table32, out, interpolation, packing, nq)
        if tile not in ALU_SD:
            raise ValueError(f"tile: expected 32 or 64, got {tile}")
        if kernel == "alu":
            if nv not in (1, 2, 4):
                raise ValueError(f"nv: expected 1, 2 or 4, got {nv}")
            return self._tile(sinos, table32, table64, out, interpolation, tile, nv, (0, 1), None)
        num, den = (int(r) for r in ratio)
        if not (den >= 1 and 0 <= num <= den):
            raise ValueError(f"ratio: expected (num, den) with 0 <= num <= den, den >= 1, got {ratio}")
        # the texel's slice count sets the ALU blocks' too (half2/half4: the fast mode's
        # texture blocks read fp16, its ALU blocks float32)
        nv_h = PACKINGS[packing][0]
        return self._tile(sinos, table32, table64, out, interpolation, tile, nv_h, (num, den), packing)

    # -- texture kernels ------------------------------------------------------------------
    def _passes(self, module, table32, stream):
        """Yield (a0, a1) angle passes after copying their rows to constant memory."""
        import cupy

        n_angles = table32.shape[0]
        const = module.get_global("c_par_table")
        table4 = np.zeros((n_angles, 4), np.float32)
        table4[:, :3] = table32
        table4_dev = cupy.asarray(table4)
        for a0 in range(0, n_angles, MAX_ANGLES_PER_PASS):
            a1 = min(n_angles, a0 + MAX_ANGLES_PER_PASS)
            const.copy_from_device_async(table4_dev[a0:a1].data, (a1 - a0) * 16, stream)
            yield a0, a1

    def _chunks(self, sinos, packing, stream):
        """Yield (s0, s1, layers, texture) for the slice chunks one layered texture holds."""
        import cupy

        per, half = PACKINGS[packing]
        n_slices, n_angles, n_cols = sinos.shape
        step = LayeredTexture.MAX_LAYERS * per
        for s0 in range(0, n_slices, step):
            s1 = min(n_slices, s0 + step)
            layers = -(-(s1 - s0) // per)
            tex = acquire((layers, n_angles, n_cols), per, stream, half=half)
            dtype = cupy.float16 if half else cupy.float32
            data = sinos[s0:s1] if (per == 1 and not half) else pack_slices(sinos[s0:s1], per, dtype, cupy)
            tex.upload(data, stream)
            yield s0, s1, layers, tex
            release(tex, stream)

    def _texture(self, sinos, table32, out, interpolation, packing):
        import cupy

        ny, nx = out.shape[1:]
        per = PACKINGS[packing][0]
        self.last_kernel = f"texture-{packing}"
        stream = cupy.cuda.get_current_stream()
        grid_xy = (-(-nx // self.block[0]), -(-ny // self.block[1]))
        with device_state().constants("backproject_parallel", None, stream) as module:
            kernel = module.get_function("backproject_parallel_tex2" if per == 2 else "backproject_parallel_tex")
            for s0, s1, layers, tex in self._chunks(sinos, packing, stream):
                tex_obj = tex.linear if interpolation != "nearest" else tex.point
                for a0, a1 in self._passes(module, table32, stream):
                    args = [tex_obj, out[s0:s1], np.int32(nx), np.int32(ny)]
                    if per == 2:
                        args.append(np.int32(s1 - s0))
                    args += [np.int32(a1 - a0), np.int32(a0), np.int32(a0 > 0)]
                    kernel(grid_xy + (layers,), self.block, tuple(args), stream=stream)
        return out

    def _texz(self, sinos, table32, out, interpolation, packing, nq):
        import cupy

        ny, nx = out.shape[1:]
        per = PACKINGS[packing][0]
        self.last_kernel = f"texz-{packing}-q{nq}"
        stream = cupy.cuda.get_current_stream()
        grid_xy = (-(-nx // 16), -(-ny // (4 * nq)))
        with device_state().constants("backproject_parallel", None, stream) as module:
            kernel = module.get_function(f"backproject_parallel_texz{per}_q{nq}")
            for s0, s1, layers, tex in self._chunks(sinos, packing, stream):
                tex_obj = tex.linear if interpolation != "nearest" else tex.point
                for a0, a1 in self._passes(module, table32, stream):
                    args = (
                        tex_obj,
                        out[s0:s1],
                        np.int32(nx),
                        np.int32(ny),
                        np.int32(s1 - s0),
                        np.int32(a1 - a0),
                        np.int32(a0),
                        np.int32(a0 > 0),
                    )
                    kernel(grid_xy + (layers,), (256, 1, 1), args, stream=stream)
        return out

    # -- tile kernels (ALU and hybrid) ------------------------------------------------------
    def _tile(self, sinos, table32, table64, out, interpolation, tile, nv, ratio, packing):
        n_slices, n_angles, n_cols = sinos.shape
        ny, nx = out.shape[1:]
        nearest = interpolation == "nearest"
        if nearest and nv == 1 and tile == 64:
            raise ValueError("tile: the 1-slice nearest ALU kernel exists for tile=32 only")
        if nv == 4 and (tile != 32 or nearest):
            raise ValueError("nv: the 4-slice tile kernel exists for tile=32 and linear interpolation only")
        name = f"backproject_parallel_tile{nv}_t{tile}" + ("_nearest" if nearest else "")
        cw, shared = alu_plan(table64, tile, nv)
        import cupy

        num, den = ratio
        self.last_kernel = (
            ("alu" if num == 0 else f"hybrid-{num}/{den}-{packing}")
            + f"-t{tile}-nv{nv}"
            + ("-nearest" if nearest else "")
        )
        stream = cupy.cuda.get_current_stream()
        t64 = cupy.asarray(alu_table(table64, tile))
        grid = (-(-nx // tile), -(-ny // tile), -(-n_slices // nv))
        if grid[2] > 65535:
            raise ValueError(f"sinos: at most {65535 * nv} slices per call, got {n_slices}")

        if num and n_slices > LayeredTexture.MAX_LAYERS * nv:
            raise ValueError(
                f"sinos: the hybrid kernel takes at most {LayeredTexture.MAX_LAYERS * nv} "
                f"slices per call, got {n_slices}"
            )

        def launch(kernel, tex_obj, a0, a1):
            args = (
                tex_obj,
                sinos,
                t64,
                out,
                np.int32(nx),
                np.int32(ny),
                np.int32(n_slices),
                np.int32(n_cols),
                np.int32(n_angles),
                np.int32(a1 - a0),
                np.int32(a0),
                np.int32(a0 > 0),
                np.int32(cw),
                np.int32(num),
                np.int32(den),
            )
            kernel(grid, (256, 1, 1), args, stream=stream, shared_mem=shared)

        if num == 0:  # the texture and the constant angle table are never read
            launch(load_module("backproject_parallel").get_function(name), np.uint64(0), 0, n_angles)
            return out
        with device_state().constants("backproject_parallel", None, stream) as module:
            kernel = module.get_function(name)
            for _, _, _, tex in self._chunks(sinos, packing, stream):
                tex_obj = tex.linear if not nearest else tex.point
                for a0, a1 in self._passes(module, table32, stream):
                    launch(kernel, tex_obj, a0, a1)
        return out
