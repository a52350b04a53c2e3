"""``leveret recon`` (alias ``fbp``): a scan file to a volume file."""
from __future__ import annotations

import time

import numpy as np

from .scan import _check_backend_flags, _check_output, _devices, _geometry, _say, _sinogram_data, _warn, estimate_center, load_scan


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
        _say(args, f"dask: {len(client.nthreads())} worker(s) at {client.scheduler.address}; "
                   f"dashboard {client.dashboard_link}")
        return _recon(args, client)


def _recon(args, client) -> int:
    import leveret
    from ..io import write_array
    from ..io._common import split_dataset
    from ..io.slabs import output_format
    from ..execution.outofcore import plan, reconstruct_to_file

    if args.output is None:
        raise ValueError("output: give the output path (second argument, or output = ... in --config)")
    out_path, dataset = split_dataset(args.output, None)
    fmt = output_format(args.output if dataset is None else out_path)     # a bad extension fails now
    _check_output(out_path, args.overwrite, kind={"bigtiff": "tiff"}.get(fmt, fmt), args=args, inside=True)
    compression = None if str(args.compression).lower() == "none" else args.compression
    scan = load_scan(args)
    _check_backend_flags(args)
    progress = not (args.no_progress or args.quiet)
    options = dict(filter=args.filter, cutoff=args.cutoff, interpolation=args.interpolation,
                   kernel=args.kernel, precision=args.precision, **_devices(args))
    if args.slab_slices is not None and args.slab_slices < 1:
        raise ValueError(f"slab_slices: expected a positive number of slices, got {args.slab_slices}")

    if len(scan.shape) == 2:     # one sinogram: one slice, in memory
        g = _geometry(args, scan, None if args.center in (None, "auto") else args.center)
        if args.dry_run:
            print(f"memory plan: one slice {g.n_cols} x {g.n_cols} from a sinogram {scan.shape}; in memory")
            return 0
        data = _sinogram_data(scan)
        if args.center == "auto":
            g = g.replace(center=estimate_center(args, scan)[0].center)
        if client is not None:
            _warn(args, "--scheduler: a single sinogram is one slice, reconstructed in this process")
        t0 = time.perf_counter()
        image = leveret.fbp(data, g, backend=args.backend, progress=progress, **options)
        write_array(args.output, image, overwrite=args.overwrite)
        _say(args, f"wrote {out_path}: {image.shape} float32 in {time.perf_counter() - t0:.2f} s")
        return 0

    g = _geometry(args, scan, None if args.center in (None, "auto") else args.center)
    itemsize = np.dtype(scan.projections.dtype).itemsize
    resident = 0 if scan.flats is None else np.asarray(scan.flats).nbytes + np.asarray(scan.darks).nbytes
    the_plan = plan(g, backend=args.backend, host_memory=args.host_memory, gpu_memory=args.gpu_memory,
                    input_itemsize=itemsize, preprocess=scan.flats is not None or scan.log_transform,
                    resident=resident, max_slices=args.slab_slices, stripes=scan.stripes is not None)
    if args.dry_run:
        print(f"input {scan.source}: {scan.shape} {scan.projections.dtype}; output {args.output} "
              f"({output_format(args.output if dataset is None else out_path)})")
        if args.center == "auto":
            print("centre: 'auto', estimated when the run starts")
        print(the_plan.describe())
        return 0
    if args.center == "auto":
        g = g.replace(center=estimate_center(args, scan)[0].center)
    _say(args, f"input {scan.source}: {scan.shape} {scan.projections.dtype}; {g!r}")
    run = dict(backend=args.backend, host_memory=args.host_memory, gpu_memory=args.gpu_memory,
               resume=args.resume, overwrite=args.overwrite, compression=compression, progress=progress,
               params={"input": scan.source}, metadata={"center": g.center, "input": scan.source},
               **scan.preprocess, **options)
    if client is None:
        _say(args, the_plan.describe())
        result = reconstruct_to_file(scan.projections, g, args.output, slab_slices=the_plan.slab_slices, **run)
    else:   # planned for the smallest worker; --slab-slices still caps it
        result = reconstruct_to_file(scan.projections, g, args.output, slab_slices=args.slab_slices,
                                     client=client, on_plan=lambda p: _say(args, p.describe()), **run)
    updates = g.default_volume().size * g.n_angles
    _say(args, result.summary() + f"; {updates / result.seconds / 1e9:.3f} GU/s overall")
    return 0
