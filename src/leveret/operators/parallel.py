"""Parallel-beam back-projection as an operator over a (geometry, volume) pair."""

from __future__ import annotations


import numpy as np

from .. import _validate as v
from ..geometry import ParallelGeometry, VolumeGeometry
from ..cuda.devices import for_backend as devices_for_backend
from ._base import Operator, _is_cupy

INTERPOLATIONS = ("nearest", "linear", "linear8")
KERNELS = ("auto", "texture", "texz", "alu", "hybrid")
PRECISIONS = ("float32", "float16")


def parallel_table(
    geometry: ParallelGeometry, volume: VolumeGeometry, dtype=np.float32, offset: tuple[int, int] = (0, 0)
) -> np.ndarray:
    """Per-projection ``(a, b, c)`` so that pixel (j, i) samples texture coordinate
    ``u = (i a + j b) + c = column + 0.5`` (docs/conventions.md, parallel beam).

    ``offset = (j0, i0)`` shifts the origin to pixel (j0, i0) of the volume's
    grid: a region of interest starting there uses the same (a, b) and
    ``c + i0 a + j0 b``, computed in float64 before rounding. Computed in
    float64 and rounded once to ``dtype``, the same table for both backends,
    so they sample the same coordinates.
    """
    t = geometry.angles
    cos, sin = np.cos(t), np.sin(t)
    dx, dy = volume.spacing("x"), volume.spacing("y")
    x0 = volume.coordinates("x")[offset[1]]
    y0 = volume.coordinates("y")[offset[0]]
    ds = geometry.det_spacing
    table = np.empty((geometry.n_angles, 3))
    table[:, 0] = dx * cos / ds
    table[:, 1] = dy * sin / ds
    table[:, 2] = (x0 * cos + y0 * sin) / ds + geometry.centers() + 0.5
    return table.astype(dtype)


def slab_alignment(config: dict) -> int:
    """Slices one texel or ALU block of the CUDA kernel ``config`` holds
    (``ParallelBackprojection.resolve_kernel``): slabs dealt to several GPUs
    start at multiples of it, so that every slice shares its texel or block
    with the same neighbours as in a one-GPU call."""
    from ..cuda.backproject_parallel import PACKINGS

    if config["kernel"] == "alu":
        return int(config.get("nv", 2))
    return PACKINGS[config.get("packing", "float2")][0]


def _check_roi(roi, ny: int, nx: int) -> tuple[int, int, int, int]:
    """roi = (y0, x0, height, width) in pixels of the volume's (ny, nx) grid."""
    if roi is None:
        return (0, 0, ny, nx)
    try:
        y0, x0, h, w = (int(r) for r in roi)
        if any(int(r) != r for r in roi):
            raise TypeError
    except (TypeError, ValueError):
        raise ValueError(f"roi: expected four integers (y0, x0, height, width), got {roi!r}") from None
    if h < 1 or w < 1 or y0 < 0 or x0 < 0 or y0 + h > ny or x0 + w > nx:
        raise ValueError(
            f"roi: (y0, x0, height, width) = {roi} does not lie inside the "
            f"volume's {ny} x {nx} pixel grid with a positive size"
        )
    return (y0, x0, h, w)


class ParallelBackprojection(Operator):
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
        "linear" is exact on the CPU; on CUDA the texture kernels filter with
        the texture unit's 8-bit weights and the "alu" kernel with exact
        float32 weights (the "hybrid" kernel mixes both, tile by tile).
        "linear8" asks for the 8-bit weights on either backend (texture
        kernels only on CUDA), so a CPU run reproduces a GPU run to float
        rounding (docs/accuracy.md).
    backend : {"auto", "cuda", "cpu"}
        NumPy in, NumPy out; CuPy in, CuPy out (``leveret.operators._base``).
    kernel : {"auto", "texture", "texz", "alu", "hybrid"}
        CUDA kernel (``leveret.cuda.backproject_parallel``). "auto": this
        GPU's entry in the tuning cache for the problem class
        (``leveret.cuda.tuning``; ``tune()`` and ``leveret tune`` fill it),
        else the rule (``default_config``): the exact ALU kernel for
        "linear" in float32, the hybrid in float16, the texture kernels for
        "nearest"/"linear8" or where the ALU kernel's cache does not fit
        (pixels much wider than detector bins). ``kernel_choice`` says which
        decided, ``last_kernel`` which kernel ran.
    precision : {"float32", "float16"}
        "float32": float32 filtered sinograms. "float16": the texture kernels
        read them as fp16 (half2 / half4 texels, 2 or 4 slices per fetch; the
        hybrid's ALU tiles stay float32 and exact); the CPU backend emulates
        it with a float16 round trip of the sinograms; with
        ``interpolation="linear8"`` it also rounds each filtered sample to
        float16, as the texture unit does for 16-bit float texels, and so
        reproduces the GPU's fp16 texture path to float rounding.
    roi : (y0, x0, height, width), optional
        Reconstruct only this rectangle of each slice (pixels of the
        volume's grid); the output is (n_slices, height, width).
    kernel_options : dict, optional
        Parameters of the CUDA kernel (nq, tile, nv, ratio, packing), e.g.
        ``{"tile": 64, "ratio": (1, 2)}``. ``packing``, of the texture
        kernels: slices per texel, "float", "float2", "half2" or "half4"
        (default: float2 whenever there are two slices, half2 / half4 with
        precision "float16"); the result does not depend on float vs float2.
    devices : None, "all", list of int or leveret.cuda.devices.DeviceSet
        CUDA only: the GPUs a call runs on (:mod:`leveret.cuda.devices`); None: the
        current device. The slices are cut into slabs (about four per GPU)
        dealt from one queue; each GPU receives only its slabs' sinograms.
        The kernel configuration is chosen once for the whole stack (as a
        one-GPU call chooses it) and every slab runs it, slab boundaries at
        multiples of the slices one texel or ALU block holds, so the result
        is bit-identical to one GPU. NumPy in, NumPy out (each slab
        downloaded into it); CuPy in, CuPy out on the input's GPU.
    """

    _repr_fields = ("interpolation", "kernel", "precision", "kernel_choice")

    def __init__(
        self,
        geometry: ParallelGeometry,
        volume: VolumeGeometry,
        *,
        interpolation: str = "linear",
        backend: str = "auto",
        kernel: str = "auto",
        precision: str = "float32",
        roi=None,
        kernel_options: dict | None = None,
        devices=None,
    ):
        if not isinstance(geometry, ParallelGeometry):
            raise TypeError(f"geometry: expected a ParallelGeometry, got {type(geometry).__name__}")
        if not isinstance(volume, VolumeGeometry):
            raise TypeError(f"volume: expected a VolumeGeometry, got {type(volume).__name__}")
        super().__init__(geometry, volume, backend)
        self.interpolation = v.choice("interpolation", interpolation, INTERPOLATIONS)
        self.kernel = v.choice("kernel", kernel, KERNELS)
        self.precision = v.precision(precision, PRECISIONS)
        self.roi = _check_roi(roi, volume.ny, volume.nx)
        self.kernel_options = dict(kernel_options or {})
        bad = set(self.kernel_options) - {"nq", "tile", "nv", "ratio", "packing"}
        if bad:
            raise ValueError(f"kernel_options: unknown keys {sorted(bad)}; expected nq, tile, nv, ratio, packing")
        packing = self.kernel_options.get("packing")
        if packing is not None:
            v.choice("kernel_options['packing']", packing, ("float", "float2", "half2", "half4"))
            if (packing in ("half2", "half4")) != (self.precision == "float16"):
                raise ValueError(
                    f"kernel_options['packing']: {packing!r} texels hold "
                    f"{'fp16' if packing.startswith('half') else 'float32'}, but precision is "
                    f"{self.precision!r}"
                )
        if self.precision == "float16" and self.kernel == "alu":
            raise ValueError(
                "kernel: 'alu' reads float32 sinograms; precision='float16' runs "
                "'texture' (half2), 'texz' (half2/half4) or 'hybrid' (half2/half4 texture blocks)"
            )
        if self.interpolation == "linear8" and self.kernel in ("alu", "hybrid"):
            raise ValueError(
                f"kernel: {kernel!r} interpolates with exact weights (or mixes them); "
                "interpolation='linear8' needs 'texture' or 'texz'"
            )
        self.devices = devices_for_backend(devices, self.backend)
        self._gpu = None
        self._tables: dict = {}
        self._last_cpu: str | None = None
        self._choice: str | None = None

    @property
    def out_shape(self) -> tuple[int, int]:
        """(ny, nx) of each output slice (the ROI's size when one is set)."""
        return self.roi[2], self.roi[3]

    def table(self, dtype) -> np.ndarray:
        key = np.dtype(dtype).str
        if key not in self._tables:
            self._tables[key] = parallel_table(self.geometry, self.volume, dtype, self.roi[:2])
        return self._tables[key]

    def __call__(self, sinos, out=None):
        """Back-project ``sinos`` (n_slices, n_angles, n_cols) into ``out`` (n_slices, ny, nx)
        (ny, nx of the ROI when one is set).

        NumPy in, NumPy out; CuPy in, CuPy out (the CUDA backend runs in
        float32; float64 runs on the CPU only).
        """
        g = self.geometry
        if sinos.ndim != 3 or sinos.shape[1:] != (g.n_angles, g.n_cols):
            raise ValueError(f"sinos: expected shape (n_slices, {g.n_angles}, {g.n_cols}), got {tuple(sinos.shape)}")
        if self.backend == "cuda" and sinos.dtype != np.float32:
            raise ValueError(f"sinos: the CUDA backend runs in float32, got {sinos.dtype}")
        if self.devices is not None:
            return self._call_devices(sinos, out)
        given = sinos
        sinos = self._input("sinos", sinos)
        res, out = self._output("out", out, (sinos.shape[0],) + self.out_shape, sinos.dtype, like=given)
        if self.backend == "cpu":
            from ..cpu.backproject_parallel import backproject

            mode = self.interpolation
            if self.precision == "float16":
                # what the GPU's fp16 texels hold: each value rounded to float16
                sinos = sinos.astype(np.float16).astype(sinos.dtype)
            # The exact mode reads its coordinates in float64; the texture-like
            # modes round them in the data's precision, as the GPU does.
            table = self.table(np.float64 if mode == "linear" else sinos.dtype)
            self._last_cpu = f"cpu-{mode}" + ("-fp16" if self.precision == "float16" else "")
            if self.precision == "float16" and mode == "linear8":
                # the texture unit also returns fp16 texels' filtered values rounded to fp16
                mode = "linear8-fp16"
            return backproject(np.ascontiguousarray(sinos), table, res, mode)
        self._run_gpu(sinos, res, self.resolve_kernel(sinos.shape[0]))
        return self._finish(res, out)

    def _run_gpu(self, sinos, res, config: dict) -> None:
        """Queue the CUDA kernel ``config`` on the current device and stream."""
        import cupy

        if self._gpu is None:
            from ..cuda.backproject_parallel import ParallelBackprojectorGPU

            self._gpu = ParallelBackprojectorGPU()
        filtering = "nearest" if self.interpolation == "nearest" else "linear"
        self._gpu(
            cupy.ascontiguousarray(sinos),
            self.table(np.float32),
            self.table(np.float64),
            res,
            interpolation=filtering,
            **config,
        )

    def _call_devices(self, sinos, out):
        """``self(sinos, out)`` on ``self.devices``: slabs of slices from a queue."""
        import cupy

        from ..cuda import devices as dv

        n = sinos.shape[0]
        on_gpu = _is_cupy(sinos)
        dv.settled(sinos)
        home = sinos.device.id if on_gpu else self.devices.ids[0]
        with cupy.cuda.Device(home):
            config = self.resolve_kernel(n)
        shape = (n,) + self.out_shape
        if out is None:
            if on_gpu:
                with cupy.cuda.Device(home):
                    out = cupy.empty(shape, np.float32)
            else:
                out = np.empty(shape, np.float32)
        elif tuple(out.shape) != shape or out.dtype != np.float32 or _is_cupy(out) != on_gpu:
            raise ValueError(
                f"out: expected a {'CuPy' if on_gpu else 'NumPy'} float32 array of shape {shape}, "
                f"got {type(out).__module__.split('.')[0]} {tuple(out.shape)} {out.dtype}"
            )
        dv.settled(out)  # earlier work on out is done before the workers write it

        def compute(worker, k0, k1):
            res = cupy.empty((k1 - k0,) + self.out_shape, np.float32)
            self._run_gpu(dv.on_worker(sinos[k0:k1], worker), res, config)
            return res

        align = slab_alignment(config)
        return dv.map_ranges(
            self.devices, dv.aligned_blocks(n, 4 * len(self.devices), align), compute, out, align=align
        )

    # -- kernel choice ---------------------------------------------------------------------
    def problem_key(self, n_slices: int) -> str:
        from ..cuda.tuning import problem_class

        ny, nx = self.out_shape
        return problem_class(n_slices, ny, nx, self.geometry.n_angles, self.interpolation, self.precision)

    @property
    def kernel_choice(self) -> str | None:
        """Which kernel configuration the last CUDA call ran and what decided
        it: the ``kernel`` argument, this GPU's tuning cache entry, or the
        rule (None before the first CUDA call, and on the CPU)."""
        return self._choice

    def resolve_kernel(self, n_slices: int) -> dict:
        """The kernel configuration a call with ``n_slices`` slices runs (CUDA);
        :attr:`kernel_choice` says what decided it."""
        from ..cuda import tuning

        key = self.problem_key(n_slices)
        if self.kernel != "auto":
            config, why = {"kernel": self.kernel}, "given"
        else:
            gpu = _gpu_name()
            config = tuning.lookup(gpu, key)
            if config is None:
                config, why = self.default_config(n_slices), f"the rule for {key}"
            else:
                why = f"tuned for {gpu} ({key} in {tuning.cache_path()})"
        config = dict(config)
        config.update(self.kernel_options)
        if "packing" not in config and config["kernel"] in ("texture", "texz", "hybrid"):
            if self.precision == "float16":
                config["packing"] = "half4" if (n_slices >= 3 and config["kernel"] != "texture") else "half2"
            else:
                config["packing"] = "float2" if n_slices > 1 else "float"
        if "ratio" in config:
            config["ratio"] = tuple(config["ratio"])
        if self.kernel_options:
            why += f", kernel_options={self.kernel_options}"
        self._choice = f"{', '.join(f'{k}={val}' for k, val in config.items())} ({why})"
        return config

    def default_config(self, n_slices: int) -> dict:
        """The kernel ``kernel="auto"`` runs with nothing tuned.

        The rule (the measurements behind it: docs/performance.md, parallel beam):

        - float32, linear: the ALU kernel (exact float32 weights everywhere):
          4-slice 32-pixel tiles from 3 slices on, 64-pixel 2-slice tiles for
          2, 64-pixel 1-slice tiles for 1, each only where its cache fits (at
          most 128 bins per projection (``MAX_EXACT_CACHE_WIDTH``) and 48 KiB:
          pixels up to about 2-3 detector bins wide), else the next one, else
          the texture path.
        - float16, linear: the hybrid (half4 texture tiles beside 4-slice
          float32 ALU tiles, ratio 2/3) from 3 slices on, half2 with 2-slice
          ALU tiles (ratio 1/2) below, where the ALU cache fits; else texz.
        - texture path (nearest, linear8, or the ALU cache does not fit): texz
          with float2 texels and 8 pixels per thread for 2 slices or more,
          the one-pixel-per-thread texture kernel for one slice.
        """
        from ..cuda.backproject_parallel import MAX_LAYERS_PER_CALL, alu_plan

        table64 = self.table(np.float64)

        def fits(tile: int, nv: int) -> bool:
            try:
                alu_plan(table64, tile, nv)
            except ValueError:
                return False
            return True

        many = n_slices >= 3
        if self.precision == "float16":
            nv = 4 if many else 2
            if self.interpolation == "linear" and fits(32, nv) and n_slices <= MAX_LAYERS_PER_CALL * nv:
                return {"kernel": "hybrid", "tile": 32, "packing": f"half{nv}", "ratio": (2, 3) if many else (1, 2)}
            return (
                {"kernel": "texz", "packing": "half4", "nq": 4}
                if many
                else {"kernel": "texz", "packing": "half2", "nq": 8}
            )
        if self.interpolation == "linear":
            options = (
                [(32, 4), (64, 2), (32, 2)] if many else [(64, 2), (32, 2)] if n_slices == 2 else [(64, 1), (32, 1)]
            )
            for tile, nv in options:
                if fits(tile, nv):
                    return {"kernel": "alu", "tile": tile, "nv": nv}
        if n_slices > 1:
            return {"kernel": "texz", "packing": "float2", "nq": 8}
        return {"kernel": "texture", "packing": "float"}

    def tune(self, sinos, *, repeats: int = 3, store: bool = True):
        """Time every valid kernel configuration on ``sinos`` (CuPy, data on the GPU),
        cache the fastest for this GPU and problem class, and use it from now on
        (for ``kernel="auto"``). Returns (best config, [(config, seconds), ...])."""
        import cupy
        from ..cuda import seconds_per_run, tuning

        if self.backend != "cuda":
            raise ValueError("tune: the CPU backend has a single kernel; use backend='cuda'")
        n = sinos.shape[0]
        out = cupy.empty((n,) + self.out_shape, cupy.float32)

        def time_fn(config):
            candidate = ParallelBackprojection(
                self.geometry,
                self.volume,
                interpolation=self.interpolation,
                backend="cuda",
                kernel=config["kernel"],
                precision=self.precision,
                roi=self.roi,
                kernel_options={k: val for k, val in config.items() if k != "kernel"},
            )
            return seconds_per_run(lambda: candidate(sinos, out), repeats)

        return tuning.tune(
            _gpu_name(),
            self.problem_key(n),
            tuning.candidates(self.interpolation, self.precision, n),
            time_fn,
            store=store,
        )

    @property
    def last_kernel(self) -> str | None:
        """Which kernel ran last ("cpu-linear", "texture-float2", "alu-t32-nv2", ...)."""
        if self.backend == "cpu":
            return self._last_cpu
        return None if self._gpu is None else self._gpu.last_kernel


def _gpu_name() -> str:
    """The current GPU's name (the tuning cache's key)."""
    from ..cuda import gpu_name

    return gpu_name()
