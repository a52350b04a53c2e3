"""The ``leveret`` command: ``fbp``, ``rabbitct``, ``demo`` and ``info``.

Errors in what the user gave (a ValueError, or a missing GPU) print one line
and exit with 2; Ctrl-C exits with 130; anything else is a bug: exit 1 with
the traceback under ``-v``. Outputs are written atomically, so a failed or
interrupted run leaves no file behind.
"""
from __future__ import annotations

import argparse
import sys
import time

EXAMPLES = """examples:
  leveret demo                                   simulate, reconstruct, report, write demo.png
  leveret info                                   backends found (GPU, memory, versions)
  leveret fbp proj/ rec.tif --angles 0:180:720 --center 1023.5
  leveret fbp scan.h5:/exchange/data rec.npy --angles angles.txt --flat flat.tif --dark dark.tif
  leveret rabbitct --size 512                    RabbitCT benchmark on a synthetic dataset
  leveret rabbitct --input RabbitInput.rct --size 256
"""


def build_parser() -> argparse.ArgumentParser:
    from ..filters import FILTERS

    parser = argparse.ArgumentParser(
        prog="leveret", description="Fast, quantitative tomographic reconstruction.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks of unexpected errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    f = sub.add_parser("fbp", help="filtered back-projection of a parallel-beam scan",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                       description="Reconstruct projections (n_angles, n_rows, n_cols) or a sinogram "
                                   "(n_angles, n_cols) of line integrals into slices.")
    f.add_argument("input", help="TIFF folder or glob, multi-page TIFF, .npy, or file.h5:/dataset")
    f.add_argument("output", help=".npy, .tif (multi-page), .h5, or a folder/ for one TIFF per slice")
    f.add_argument("--angles", required=True,
                   help="'start:stop:count' (stop excluded), a text/.npy file, or 'start:stop:count:endpoint'")
    f.add_argument("--angle-unit", default="degree", choices=("degree", "radian"))
    f.add_argument("--center", type=float, default=None, help="rotation axis column (pixels); default: middle")
    f.add_argument("--det-spacing", type=float, default=1.0, help="detector pixel pitch (length unit)")
    f.add_argument("--row-spacing", type=float, default=1.0, help="detector row pitch (length unit)")
    f.add_argument("--filter", default="ram-lak", choices=FILTERS)
    f.add_argument("--cutoff", type=float, default=1.0, help="filter cutoff, fraction of Nyquist")
    f.add_argument("--interpolation", default="linear", choices=("linear", "nearest", "linear8"))
    f.add_argument("--backend", default="auto", choices=("auto", "cuda", "cpu"))
    f.add_argument("--kernel", default="auto", choices=("auto", "texture", "texz", "alu", "hybrid"),
                   help="CUDA back-projection kernel (default: the tuned choice, see 'leveret info')")
    f.add_argument("--precision", default="exact", choices=("exact", "fast"),
                   help="fast: fp16 filtered sinograms (2-4 slices per texture fetch)")
    f.add_argument("--chunk-slices", type=int, default=None, help="slices per chunk (default: planned)")
    f.add_argument("--dataset", default=None, help="HDF5 dataset path (or give file.h5:/path)")
    f.add_argument("--flat", default=None, help="flat field(s): normalise and take -log")
    f.add_argument("--dark", default=None, help="dark field(s), with --flat")
    f.add_argument("--minus-log", action="store_true", help="input is transmission: take -log first")
    f.add_argument("--overwrite", action="store_true", help="replace an existing output")
    f.add_argument("--no-progress", action="store_true", help="no progress bar")

    d = sub.add_parser("demo", help="simulate a noisy scan of a 3D phantom, reconstruct it, report",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d.add_argument("--size", type=int, default=256, help="slice width and height (pixels)")
    d.add_argument("--slices", type=int, default=32, help="number of slices")
    d.add_argument("--angles", type=int, default=None, help="projections over 180 degrees (default ~1.5 x size)")
    d.add_argument("--photons", type=float, default=1e5, help="incident photons per detector pixel (Poisson)")
    d.add_argument("--backend", default="auto", choices=("auto", "cuda", "cpu"))
    d.add_argument("--output", default="demo.png", help="PNG of phantom, reconstruction and difference")
    d.add_argument("--seed", type=int, default=None, help="noise seed")

    r = sub.add_parser("rabbitct", help="the RabbitCT back-projection benchmark (time, GUPS, HU errors)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                       description="Back-project a RabbitCT dataset (a .rct file, or a synthetic one "
                                   "made on the fly) into an L^3 volume over a 256 mm cube and score it "
                                   "against the float64 reference as RabbitCT does.")
    r.add_argument("--size", type=int, default=512, help="volume edge L in voxels")
    r.add_argument("--input", default=None, help="a RabbitCT v2 .rct file (default: synthetic)")
    r.add_argument("--small", action="store_true",
                   help="synthetic: a quarter-size detector and views (minutes on a laptop, not hours)")
    r.add_argument("--save", default=None, help="synthetic: also write the dataset to this .rct file")
    r.add_argument("--backend", default="auto", choices=("auto", "cuda", "cpu"))
    r.add_argument("--repeats", type=int, default=3, help="timed runs (the fastest is reported)")
    r.add_argument("--json", default=None, help="write the result as JSON")

    sub.add_parser("info", help="print the backends found")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "fbp":
            return _fbp(args)
        if args.command == "demo":
            from .demo import run_demo
            return run_demo(args)
        if args.command == "rabbitct":
            return _rabbitct(args)
        return _info()
    except (ValueError, RuntimeError, MemoryError) as exc:
        if args.verbose:
            raise
        print(f"leveret {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"leveret {args.command}: interrupted; no output written", file=sys.stderr)
        return 130


def _info() -> int:
    from ..backends import describe
    import leveret

    print(f"leveret {leveret.__version__}")
    for dev in describe():
        if dev["backend"] == "cpu":
            print(f"  cpu   : {dev['threads']} threads (numba {dev['numba']}, numpy {dev['numpy']})")
        elif not dev.get("available"):
            print(f"  cuda  : not available: {dev['reason']}")
        else:
            print(f"  cuda:{dev['device']}: {dev['name']} (sm_{dev['compute_capability'].replace('.', '')}, "
                  f"{dev['multiprocessors']} SMs), {dev['memory_free_gib']:.1f} of "
                  f"{dev['memory_total_gib']:.1f} GiB free; CuPy {dev['cupy']}, CUDA runtime "
                  f"{dev['cuda_runtime']}, driver {dev['cuda_driver']}")
    from ..cuda import tuning
    tuned = tuning.describe()
    print(f"  tuned parallel-beam kernels ({tuning.cache_path()}):" + ("" if tuned else " none yet"))
    for line in tuned:
        print(f"    {line}")
    return 0


def _fbp(args) -> int:
    import numpy as np

    import leveret
    from ..io import read_angles, read_array, write_array
    from ..io._common import split_dataset
    from ..io.atomic import check_writable
    from ..preprocess import minus_log, normalize

    check_writable(split_dataset(args.output, None)[0], args.overwrite)  # fail now, not after the work
    t0 = time.perf_counter()
    proj = read_array(args.input, dataset=args.dataset)
    angles = read_angles(args.angles, unit=args.angle_unit)
    if args.flat is not None or args.dark is not None:
        if args.flat is None or args.dark is None:
            raise ValueError("--flat/--dark: give both, or neither")
        proj = minus_log(normalize(proj, read_array(args.flat), read_array(args.dark)))
    elif args.minus_log:
        proj = minus_log(proj.astype(np.float32))
    if proj.ndim not in (2, 3):
        raise ValueError(f"input: expected a sinogram (n_angles, n_cols) or projections "
                         f"(n_angles, n_rows, n_cols), got shape {proj.shape}")
    if angles.size != proj.shape[0]:
        raise ValueError(f"--angles: expected {proj.shape[0]} angles (one per projection in input), "
                         f"got {angles.size}")
    geometry = leveret.ParallelGeometry(
        angles, proj.shape[-1], n_rows=proj.shape[1] if proj.ndim == 3 else None,
        det_spacing=args.det_spacing, row_spacing=args.row_spacing, center=args.center)
    t_read = time.perf_counter() - t0
    print(f"input {args.input}: {proj.shape} {proj.dtype}, {geometry!r}", file=sys.stderr)
    t1 = time.perf_counter()
    volume = leveret.fbp(proj, geometry, filter=args.filter, cutoff=args.cutoff,
                         interpolation=args.interpolation, backend=args.backend,
                         chunk_slices=args.chunk_slices, progress=not args.no_progress,
                         kernel=args.kernel, precision=args.precision)
    t_rec = time.perf_counter() - t1
    out = write_array(args.output, volume, overwrite=args.overwrite)
    updates = np.prod(volume.shape) * geometry.n_angles
    print(f"wrote {out}: {volume.shape} float32; read {t_read:.2f} s, reconstruction {t_rec:.2f} s "
          f"({updates / t_rec / 1e9:.2f} GU/s)", file=sys.stderr)
    return 0


def _rabbitct(args) -> int:
    import json

    from ..io import atomic_output
    from ..rabbitct import make_dataset, read_rabbitct, run_benchmark, write_rabbitct

    if args.size < 1:
        raise ValueError(f"--size: expected a positive volume edge, got {args.size}")
    if args.input is not None:
        data = read_rabbitct(args.input)
        reference = None                        # the file's own reference volumes
    else:
        shape = dict(n_views=124, n_rows=240, n_cols=312) if args.small else {}
        cache: dict = {}
        print(f"making a synthetic RabbitCT dataset{' (small)' if args.small else ''} and its "
              f"float64 reference at L = {args.size} ...", file=sys.stderr)
        data = make_dataset(reference_sizes=(args.size,), cache=cache, progress=True,
                            backend=args.backend, **shape)
        reference = cache[args.size]
        if args.save:
            write_rabbitct(args.save, data)
    result = run_benchmark(data, args.size, backend=args.backend, repeats=args.repeats, reference=reference)
    print(result.table())
    if args.json:
        with atomic_output(args.json, overwrite=True) as tmp:
            tmp.write_text(json.dumps(result.to_dict(), indent=1))
    return 0
