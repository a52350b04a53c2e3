"""``leveret recon`` (alias ``fbp``): a scan file to a volume file."""

from __future__ import annotations

import time

import numpy as np

from . import iterate
from .cone import is_cone
from .scan import (
    _band,
    _check_backend_flags,
    _check_output,
    _devices,
    _geometry,
    _rows,
    _say,
    _sinogram_data,
    _warn,
    estimate_center,
    load_scan,
)
from .trajectory import is_trajectory


def recon(args) -> int:
    """``leveret recon``: with --scheduler, on a Dask cluster connected before any work."""
    if args.scheduler is None:
        return _recon(args, None)
    from ..execution.executors import check_address, connect

    if args.scheduler.strip().lower() != "local":
        check_address(args.scheduler)
    if args.dry_run:
        return _recon(args, None)
    with connect(args.scheduler, backend=args.backend) as client:
        _say(
            args,
            f"dask: {len(client.nthreads())} worker(s) at {client.scheduler.address}; "
            f"dashboard {client.dashboard_link}",
        )
        return _recon(args, client)


def _recon(args, client) -> int:
    import leveret
    from ..io import write_array
    from ..io._common import split_dataset
    from ..io.slabs import output_format

    if args.output is None and args.xtekct is not None and args.input is not None:
        args.input, args.output = None, args.input  # 'recon --xtekct FILE OUT': the TIFFs beside FILE
    if args.output is None:
        raise ValueError("output: give the output path (second argument, or output = ... in --config)")
    out_path, dataset = split_dataset(args.output, None)
    fmt = output_format(args.output if dataset is None else out_path)  # a bad extension fails now
    _check_output(out_path, args.overwrite, kind={"bigtiff": "tiff"}.get(fmt, fmt), args=args, inside=True)
    compression = None if str(args.compression).lower() == "none" else args.compression
    if args.output_range is not None and args.output_range != "auto" and args.output_dtype not in ("uint8", "uint16"):
        raise ValueError(
            f"--output-range: a value range applies to --output-dtype uint8 or uint16, not {args.output_dtype}"
        )
    if args.slab_slices is not None and args.slab_slices < 1:
        raise ValueError(f"slab_slices: expected a positive number of slices, got {args.slab_slices}")
    progress = not (args.no_progress or args.quiet)
    method = iterate.options(args)  # {} for fbp
    output = dict(
        compression=compression,
        output_dtype=args.output_dtype,
        output_range=args.output_range,
        io_threads=args.io_threads,
        sync=not args.no_sync,
    )
    if is_cone(args) or is_trajectory(args):
        return _recon_cone(args, client, out_path, dataset, output, progress, method)
    scan = load_scan(args)
    _check_backend_flags(args)
    options = dict(
        filter=args.filter,
        cutoff=args.cutoff,
        interpolation=args.interpolation,
        kernel=args.kernel,
        precision=args.precision,
        **_devices(args),
    )
    if method:  # the slabs' slices by the iterative method; FBP's options do not apply
        options = dict(precision=args.precision, **method, **_devices(args))
    from .preprocessing import check_flags, describe, steps

    check_flags(args, scan)

    if len(scan.shape) == 2:  # one sinogram: one slice, in memory
        g = _geometry(args, scan, None if args.center in (None, "auto") else args.center)
        if args.dry_run:
            print(f"memory plan: one slice {g.n_cols} x {g.n_cols} from a sinogram {scan.shape}; in memory")
            if method:
                print(iterate.describe(args, method, (g.n_cols, g.n_cols), scan.shape, where="in memory"))
            return 0
        data = _sinogram_data(scan)
        if args.center == "auto":
            g = g.replace(center=estimate_center(args, scan)[0].center)
        if client is not None:
            _warn(args, "--scheduler: a single sinogram is one slice, reconstructed in this process")
        if args.output_dtype != "float32":
            raise ValueError("--output-dtype: a single sinogram's slice is written as float32")
        t0 = time.perf_counter()
        if method:
            image = iterate.sinogram(args, data, g, method, progress)
        else:
            image = leveret.fbp(data, g, backend=args.backend, progress=progress, **options)
        write_array(args.output, image, overwrite=args.overwrite)
        _say(args, f"wrote {out_path}: {image.shape} float32 in {time.perf_counter() - t0:.2f} s")
        return 0

    g = _geometry(args, scan, None if args.center in (None, "auto") else args.center)
    pre = steps(
        args, scan, g, say=lambda message: _say(args, message), middle_rows=lambda: _rows(scan, *_band(scan.shape))
    )
    the_plan = _plan(args, scan, g, None, method.get("method", "fbp"), **pre.plan())
    if args.dry_run:
        print(
            f"input {scan.source}: {scan.shape} {scan.projections.dtype}; output {args.output} "
            f"({output_format(args.output if dataset is None else out_path)})"
        )
        print("\n".join(describe(scan, pre)))
        if args.center == "auto":
            print("centre: 'auto', estimated when the run starts")
        if method:
            print(
                iterate.describe(
                    args,
                    method,
                    (g.n_cols, g.n_cols),
                    (g.n_angles, g.n_cols),
                    where="slab by slab, each slice its own 2D problem",
                )
            )
        print(the_plan.describe())
        return 0
    if args.center == "auto":
        g = g.replace(center=estimate_center(args, scan)[0].center)
    _say(args, f"input {scan.source}: {scan.shape} {scan.projections.dtype}; {g!r}")
    reconstructed = pre.stitched or g
    run = _run_options(args, scan, progress, {"center": reconstructed.center, "input": scan.source})
    result = _write(args, client, the_plan, scan.projections, g, **run, **output, **pre.run(), **options)
    _report(args, result, reconstructed.default_volume().size * reconstructed.n_angles)
    return 0


def _run_options(args, scan, progress, metadata: dict) -> dict:
    """The arguments of :func:`reconstruct_to_file` every reconstruction of the CLI
    passes: the memory, resume and overwrite flags, the input's preprocessing and
    where it came from, ``metadata`` for the output."""
    return dict(
        backend=args.backend,
        host_memory=args.host_memory,
        gpu_memory=args.gpu_memory,
        resume=args.resume,
        overwrite=args.overwrite,
        progress=progress,
        params={"input": scan.source},
        metadata=metadata,
        **scan.preprocess,
    )


def _write(args, client, the_plan, projections, geometry, **run):
    """:func:`reconstruct_to_file` with ``the_plan``'s slabs; on a Dask ``client``
    planned for its smallest worker instead (``--slab-slices`` still caps it)."""
    from ..execution.outofcore import reconstruct_to_file

    if client is None:
        _say(args, the_plan.describe())
        return reconstruct_to_file(projections, geometry, args.output, slab_slices=the_plan.slab_slices, **run)
    return reconstruct_to_file(
        projections,
        geometry,
        args.output,
        slab_slices=args.slab_slices,
        client=client,
        on_plan=lambda p: _say(args, p.describe()),
        **run,
    )


def _plan(args, scan, geometry, volume, method: str = "fbp", **steps):
    """The memory plan of this process's pipeline for the flags (``method``: fbp's
    working set or an iterative method's, :mod:`leveret.execution.iterate`; ``steps``:
    the phase border and the stitched geometry, :meth:`leveret.cli.preprocessing.Steps.plan`)."""
    from ..cuda.devices import parse
    from ..execution.outofcore import plan

    itemsize = np.dtype(scan.projections.dtype).itemsize
    resident = 0 if scan.flats is None else np.asarray(scan.flats).nbytes + np.asarray(scan.darks).nbytes
    gpus = 1
    if args.gpus is not None and args.scheduler is None:
        from ..backends import resolve

        gpus = len(parse(args.gpus)) if resolve(args.backend) == "cuda" else 1
    return plan(
        geometry,
        volume,
        backend=args.backend,
        host_memory=args.host_memory,
        gpu_memory=args.gpu_memory,
        input_itemsize=itemsize,
        preprocess=scan.flats is not None or scan.log_transform,
        resident=resident,
        max_slices=args.slab_slices,
        stripes=getattr(scan, "stripes", None) is not None,
        overlap=args.scheduler is None,
        gpus=gpus,
        output_itemsize=np.dtype(args.output_dtype).itemsize,
        method=method,
        **steps,
    )


def _report(args, result, updates: int) -> None:
    """The closing lines: the summary, the overall rate, and each stage's split."""
    _say(args, result.summary() + f"; {updates / result.seconds / 1e9:.3f} GU/s overall")
    if result.stages:
        _say(
            args,
            "stages: "
            + ", ".join(
                f"{name} {part['seconds']:.2f} s ({part['rate']:.2f} GB/s, {part['busy']:.0%} busy)"
                for name, part in result.stages.items()
            ),
        )
    if result.value_range is not None:
        _say(
            args,
            f"stored as {args.output_dtype}: {result.value_range[0]:.6g} -> 0, {result.value_range[1]:.6g} "
            f"-> {np.iinfo(args.output_dtype).max} (values outside clip)",
        )


def _recon_cone(args, client, out_path, dataset, output, progress, method) -> int:
    """A cone-beam scan (matrices, circular parameters or an xtekct file), a
    helical one or a laminography one (parallel or cone beam) through the same
    out-of-core pipeline as parallel beam."""
    from ..io.slabs import output_format
    from .cone import load_cone
    from .trajectory import load_trajectory

    scan = load_trajectory(args) if is_trajectory(args) else load_cone(args)
    extra = getattr(scan, "options", {})  # what a helix or a tilted axis adds
    _check_backend_flags(args)
    if method:  # the whole volume at once: its slabs are not independent
        return iterate.recon_cone(args, scan, out_path, dataset, output, progress, method)
    if args.interpolation == "nearest":
        raise ValueError("--interpolation: cone beam takes 'linear' or 'linear8'")
    if args.precision == "float16":
        raise ValueError(
            "--precision: float16 filtered sinograms are a parallel-beam mode; cone beam takes "
            "float32 (or float64 on the CPU)"
        )
    options = dict(
        filter=args.filter, cutoff=args.cutoff, interpolation=args.interpolation, precision=args.precision, **extra
    )
    if args.kernel != "auto":
        raise ValueError("--kernel: chooses among parallel-beam kernels; cone beam picks its own")
    the_plan = _plan(args, scan, scan.geometry, scan.volume)
    if args.dry_run:
        print(
            f"input {scan.source}: {tuple(scan.projections.shape)} {scan.projections.dtype}; output "
            f"{args.output} ({output_format(args.output if dataset is None else out_path)}); "
            f"{getattr(scan, 'metadata', {}).get('beam', 'cone')} beam, "
            f"volume {scan.volume.shape}"
        )
        for line in getattr(scan, "notes", ()):
            print(line)
        print(the_plan.describe())
        return 0
    run = _run_options(args, scan, progress, {"input": scan.source, "beam": "cone", **getattr(scan, "metadata", {})})
    result = _write(
        args, client, the_plan, scan.projections, scan.geometry, volume=scan.volume, **run, **output, **options
    )
    _report(args, result, scan.volume.size * scan.geometry.n_views)
    return 0
