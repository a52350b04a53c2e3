"""``leveret recon --method sirt|cgls|fista|pdhg``: iterative reconstruction
from the command line.

Parallel beam runs slab by slab through the out-of-core pipeline, each slice
its own 2D problem (:mod:`leveret.execution.iterate`); a single sinogram and
a cone-beam volume run in memory, the latter only when its working set fits
the memory caps.
"""

from __future__ import annotations

import argparse

import numpy as np

from .scan import _say, _warn

#: The flags that shape FBP and FDK only, with their defaults.
_ANALYTIC_FLAGS = (
    ("--filter", "filter", "ram-lak"),
    ("--cutoff", "cutoff", 1.0),
    ("--interpolation", "interpolation", "linear"),
    ("--kernel", "kernel", "auto"),
)


def add_options(parser: argparse.ArgumentParser) -> None:
    """--method, --iterations, --tv, --nonnegative (``leveret recon``)."""
    from ..execution.iterate import METHODS

    g = parser.add_argument_group("method (iterative reconstruction: docs/regularised.md)")
    g.add_argument(
        "--method",
        default="fbp",
        choices=METHODS,
        help="fbp: filtered back-projection (FDK for cone beam); sirt, cgls: least squares; "
        "fista, pdhg: least squares with total variation (--tv). Parallel beam iterates "
        "slice by slice within the memory plan; cone beam in memory",
    )
    g.add_argument(
        "--iterations",
        type=int,
        default=None,
        metavar="N",
        help="iterations of sirt, cgls, fista or pdhg (required for them)",
    )
    g.add_argument(
        "--tv",
        type=float,
        default=None,
        metavar="LAMBDA",
        help="fista, pdhg: the weight of the total variation (>= 0; its scale is the data's: "
        "squared line integrals per unit of the values)",
    )
    g.add_argument("--nonnegative", action="store_true", help="sirt, fista, pdhg: keep every voxel >= 0")


def options(args) -> dict:
    """The method's checked arguments (``{}`` for fbp); ValueError naming the flag
    for a flag the method does not take."""
    from ..execution.iterate import check

    checked = check(args.method, args.iterations, args.tv, args.nonnegative)
    if checked:
        for flag, dest, default in _ANALYTIC_FLAGS:
            if getattr(args, dest) != default:
                raise ValueError(f"{flag}: shapes fbp (and FDK) only, not --method {args.method}")
        if args.precision == "float16":
            raise ValueError(
                f"--precision: float16 filtered sinograms are fbp's; --method {args.method} "
                "takes float32 (or float64 on the CPU)"
            )
    return checked


def describe(args, method: dict, volume_shape, projection_shape, *, where: str) -> str:
    """The dry run's line for the method: what it runs and one run's working set."""
    from ..backends import resolve
    from ..execution.iterate import working_bytes
    from ..resources import format_bytes

    backend = resolve(args.backend)
    need = working_bytes(method["method"], volume_shape, projection_shape, backend=backend)
    tv = "" if method["tv"] is None else f", tv {method['tv']:g}"
    return (
        f"method: {method['method']}, {method['iterations']} iteration(s){tv}"
        f"{', nonnegative' if method['nonnegative'] else ''}; {where}; one run holds "
        f"{format_bytes(need)} ({'GPU' if backend == 'cuda' else 'host'})"
    )


def _report(args, method: str, stats: dict) -> None:
    if stats:
        _say(args, f"{method}: objective {stats['objective'][-1]:.6g} after {stats['iterations']} iteration(s)")


def sinogram(args, data, geometry, method: dict, progress: bool):
    """One sinogram's slice by the iterative method, in memory."""
    from ..backends import resolve
    from ..operators import Projector

    backend = resolve(args.backend)
    projector = Projector(geometry, geometry.default_volume(), backend=backend, precision=args.precision)
    stats: dict = {}
    image = _run(data, projector, method, backend, progress, stats)
    _report(args, method["method"], stats)
    return image


def _run(data, projector, method: dict, backend: str, progress: bool, stats: dict):
    """The method on ``data`` (NumPy), every array on the GPU with the CUDA
    backend; the result as float32 NumPy."""
    from ..execution.iterate import run

    if backend == "cuda":
        import cupy

        data = cupy.asarray(data)
    out = run(
        data,
        projector,
        method["method"],
        iterations=method["iterations"],
        tv=method["tv"],
        nonnegative=method["nonnegative"],
        progress=progress,
        stats=stats,
    )
    if backend == "cuda":
        out = out.get()
    return np.asarray(out, dtype=np.float32)


def cone_needs(args, scan, method: dict) -> dict:
    """Host and GPU bytes a cone-beam run in memory holds, and the caps.

    Host: the projections as stored and as float32 line integrals, the
    volume (and its stored copy), and on the CPU the method's working set
    (:func:`leveret.execution.iterate.working_bytes`); GPU: the working set.
    """
    from ..backends import resolve
    from ..cuda import gpu_free_bytes
    from ..execution.iterate import working_bytes
    from ..execution.outofcore import GPU_FRACTION, HOST_FRACTION
    from ..resources import host_available_bytes

    backend = resolve(args.backend)
    shape = tuple(scan.projections.shape)
    n_proj, n_vol = int(np.prod(shape)), scan.volume.size
    work = working_bytes(method["method"], scan.volume.shape, shape, backend=backend)
    stored = np.dtype(scan.projections.dtype).itemsize * n_proj
    host = stored + 4 * n_proj + np.dtype(args.output_dtype).itemsize * n_vol
    host += work if backend == "cpu" else 4 * n_vol
    host_limit = args.host_memory if args.host_memory is not None else int(HOST_FRACTION * host_available_bytes())
    gpu_limit = None
    if backend == "cuda":
        gpu_limit = args.gpu_memory if args.gpu_memory is not None else int(GPU_FRACTION * gpu_free_bytes())
    return {
        "backend": backend,
        "host": int(host),
        "host_limit": int(host_limit),
        "gpu": int(work) if backend == "cuda" else 0,
        "gpu_limit": gpu_limit,
    }


def _check_fits(method: str, need: dict) -> None:
    from ..resources import format_bytes

    short = []
    if need["host"] > need["host_limit"]:
        short.append(f"host {format_bytes(need['host'])} of {format_bytes(need['host_limit'])} (--host-memory)")
    if need["gpu_limit"] is not None and need["gpu"] > need["gpu_limit"]:
        short.append(f"GPU {format_bytes(need['gpu'])} of {format_bytes(need['gpu_limit'])} (--gpu-memory)")
    if short:
        raise MemoryError(
            f"memory: --method {method} in cone beam holds the whole volume and every projection "
            f"at once: it needs {', '.join(short)}; raise the cap, reconstruct a smaller "
            "--volume-shape, or use --method fbp (FDK, slab by slab)"
        )


def recon_cone(args, scan, out_path, dataset, output: dict, progress: bool, method: dict) -> int:
    """A cone-beam volume by the iterative method, in memory, written atomically
    under the output's lock (:class:`leveret.io.SlabWriter`, one slab)."""
    from ..execution.outofcore import _describe
    from ..execution.slab import preprocess_rows
    from ..io import SlabWriter
    from ..io.quantize import auto_range, output_dtype, quantize
    from ..io.bands import read_rows
    from ..io.slabs import output_format, volume_metadata
    from ..operators import Projector
    from ..resources import format_bytes

    for flag, given in (("--scheduler", args.scheduler is not None), ("--resume", args.resume)):
        if given:
            raise ValueError(
                f"{flag}: --method {method['method']} in cone beam runs in this process, in "
                "one piece (the volume does not split into slabs)"
            )
    if args.slab_slices is not None:
        _warn(
            args,
            f"--slab-slices: --method {method['method']} in cone beam reconstructs the whole volume at "
            "once; the slab size is not used",
        )
    need = cone_needs(args, scan, method)
    if args.dry_run:
        print(
            f"input {scan.source}: {tuple(scan.projections.shape)} {scan.projections.dtype}; output "
            f"{args.output} ({output_format(args.output if dataset is None else out_path)}); cone beam, "
            f"volume {scan.volume.shape}"
        )
        print(describe(args, method, scan.volume.shape, scan.projections.shape, where="in memory"))
        gpu = (
            ""
            if need["gpu_limit"] is None
            else f", GPU {format_bytes(need['gpu'])} of {format_bytes(need['gpu_limit'])}"
        )
        print(
            f"memory (in memory, {need['backend']}): host {format_bytes(need['host'])} of "
            f"{format_bytes(need['host_limit'])}{gpu}"
        )
    _check_fits(method["method"], need)
    if args.dry_run:
        return 0
    stored = output_dtype(output["output_dtype"])
    g, volume = scan.geometry, scan.volume
    raw = read_rows(scan.projections, (0, g.n_rows))
    data = preprocess_rows(raw, (0, g.n_rows), **scan.preprocess)
    del raw
    projector = Projector(g, volume, backend=need["backend"], precision=args.precision)
    stats: dict = {}
    result = _run(data, projector, method, need["backend"], progress, stats)
    del data
    _report(args, method["method"], stats)
    value_range = None
    if stored.kind == "u":
        given = output["output_range"]
        value_range = given if isinstance(given, tuple) else auto_range(result)
    job = {
        "input": scan.source,
        "geometry": _describe(g),
        "volume": _describe(volume),
        **method,
        "precision": args.precision,
        **scan.preprocess,
    }
    meta = volume_metadata(volume, stored, value_range, input=scan.source, beam="cone", method=method["method"])
    with SlabWriter(
        args.output,
        volume.shape,
        stored,
        params=job,
        metadata=meta,
        overwrite=args.overwrite,
        compression=output["compression"],
        threads=output["io_threads"],
        sync=output["sync"],
    ) as writer:
        writer.write(0, quantize(result, stored, value_range) if stored != np.float32 else result)
        path = writer.finish()
    _say(args, f"wrote {path}: {volume.shape} {stored.name} by {method['method']} in memory")
    return 0
