"""Parallel-beam back-projection as an operator over a (geometry, volume) pair."""
from __future__ import annotations

import numpy as np

from .. import _validate as v
from ..backends import resolve
from ..geometry import ParallelGeometry, VolumeGeometry

INTERPOLATIONS = ("nearest", "linear", "linear8")


def parallel_table(geometry: ParallelGeometry, volume: VolumeGeometry, dtype=np.float32) -> np.ndarray:
    """Per-projection ``(a, b, c)`` so that pixel (j, i) samples texture coordinate
    ``u = (i a + j b) + c = column + 0.5`` (CONVENTIONS.md, parallel beam).

    Computed in float64 and rounded once to ``dtype``, the same table for both
    backends, so they sample the same coordinates.
    """
    t = geometry.angles
    cos, sin = np.cos(t), np.sin(t)
    dx, dy = volume.spacing("x"), volume.spacing("y")
    x0 = volume.coordinates("x")[0]
    y0 = volume.coordinates("y")[0]
    ds = geometry.det_spacing
    table = np.empty((geometry.n_angles, 3))
    table[:, 0] = dx * cos / ds
    table[:, 1] = dy * sin / ds
    table[:, 2] = (x0 * cos + y0 * sin) / ds + geometry.centers() + 0.5
    return table.astype(dtype)


class ParallelBackprojection:
    """Voxel-driven back-projection ``B``: sinogram stack -> image slices.

    ``B(sinos)[k, j, i] = sum_n sinos[k, n](column of pixel (j, i) at angle n)``,
    sampled with ``interpolation``; no angular weight is applied (FBP folds its
    quadrature weights into the filtered sinograms).

    Parameters
    ----------
    geometry : ParallelGeometry
    volume : VolumeGeometry
        Only its xy grid matters here; slices map 1:1 to sinograms.
    interpolation : {"nearest", "linear", "linear8"}
        "linear" is exact on the CPU; on CUDA it is the texture unit's
        filtering, whose weights have 8 fractional bits. "linear8" asks for
        those 8-bit weights on either backend, so a CPU run reproduces a GPU
        run to float rounding (docs/accuracy.md).
    backend : {"auto", "cuda", "cpu"}
    texture_packing : {"auto", "float", "float2"}
        CUDA only: slices per texel ("auto": two whenever there are two).
        The result is the same; float2 is faster on several slices.
    """

    def __init__(self, geometry: ParallelGeometry, volume: VolumeGeometry, *,
                 interpolation: str = "linear", backend: str = "auto",
                 texture_packing: str = "auto"):
        if not isinstance(geometry, ParallelGeometry):
            raise ValueError(f"geometry: expected a ParallelGeometry, got {type(geometry).__name__}")
        if not isinstance(volume, VolumeGeometry):
            raise ValueError(f"volume: expected a VolumeGeometry, got {type(volume).__name__}")
        self.geometry = geometry
        self.volume = volume
        self.interpolation = v.choice("interpolation", interpolation, INTERPOLATIONS)
        self.backend = resolve(backend)
        self.texture_packing = v.choice("texture_packing", texture_packing, ("auto", "float", "float2"))
        self._gpu = None
        self._tables: dict = {}
        self._last_cpu: str | None = None

    def table(self, dtype) -> np.ndarray:
        key = np.dtype(dtype).str
        if key not in self._tables:
            self._tables[key] = parallel_table(self.geometry, self.volume, dtype)
        return self._tables[key]

    def __call__(self, sinos, out=None):
        """Back-project ``sinos`` (n_slices, n_angles, n_cols) into ``out`` (n_slices, ny, nx).

        NumPy in/out on the CPU backend, CuPy in/out on CUDA. float64 runs on the
        CPU only.
        """
        g = self.geometry
        if sinos.ndim != 3 or sinos.shape[1:] != (g.n_angles, g.n_cols):
            raise ValueError(f"sinos: expected shape (n_slices, {g.n_angles}, {g.n_cols}), "
                             f"got {tuple(sinos.shape)}")
        ny, nx = self.volume.ny, self.volume.nx
        xp = v.array_module(sinos)
        if out is None:
            out = xp.empty((sinos.shape[0], ny, nx), dtype=sinos.dtype)
        elif out.shape != (sinos.shape[0], ny, nx) or out.dtype != sinos.dtype:
            raise ValueError(f"out: expected {(sinos.shape[0], ny, nx)} {sinos.dtype}, "
                             f"got {out.shape} {out.dtype}")
        if self.backend == "cpu":
            if xp is not np:
                raise ValueError("sinos: the CPU backend takes NumPy arrays, got a CuPy array")
            from ..cpu.backproject_parallel import backproject
            mode = self.interpolation
            # The exact mode reads its coordinates in float64; the texture-like
            # modes round them in the data's precision, as the GPU does.
            table = self.table(np.float64 if mode == "linear" else sinos.dtype)
            self._last_cpu = f"cpu-{mode}"
            return backproject(np.ascontiguousarray(sinos), table, out, mode)
        if xp is np:
            raise ValueError("sinos: the CUDA backend takes CuPy arrays, got a NumPy array")
        if sinos.dtype != np.float32:
            raise ValueError(f"sinos: the CUDA backend runs in float32, got {sinos.dtype}")
        if self._gpu is None:
            from ..cuda.backproject_parallel import ParallelTextureBackprojector
            self._gpu = ParallelTextureBackprojector(self.texture_packing)
        filtering = "nearest" if self.interpolation == "nearest" else "linear"
        return self._gpu(xp.ascontiguousarray(sinos), self.table(np.float32), out, filtering)

    @property
    def last_kernel(self) -> str | None:
        """Which kernel ran last ("cpu-linear", "texture-float2", ...)."""
        if self.backend == "cpu":
            return self._last_cpu
        return None if self._gpu is None else self._gpu.last_kernel

    def __repr__(self) -> str:
        return (f"ParallelBackprojection({self.geometry!r}, {self.volume!r}, "
                f"interpolation={self.interpolation!r}, backend={self.backend!r})")
