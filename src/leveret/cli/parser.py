"""The ``leveret`` command line: its parser, flags and messages."""

from __future__ import annotations

import argparse
import re

from . import iterate, live, trajectory
from .flags import (
    OUTPUT_DTYPES,
    PRECISIONS,
    _center,
    _common,
    _cutoff,
    _device,
    _gpus,
    _output_range,
    _pixel_size,
    _positive_float,
    _positive_int,
    _precision,
    _shape3,
    _size,
    _strict,
)
from .config import apply_config, load_config
from .preprocessing import STRIPE_METHODS, phase_flags, stripe_flags

EXAMPLES = """examples:
  leveret demo                                   simulate, reconstruct, report: leveret-demo/demo.png
  leveret demo --real                            reconstruct the bundled real scan: leveret-demo/real.png
  leveret info                                   backends found (GPU, memory, versions)
  leveret recon proj/ rec.h5 --angles 0:180:720 --center 1023.5
  leveret recon raw/ rec.zarr --angles angles.txt --flat flat.tif --dark dark.tif --center auto
  leveret recon scan.nxs rec/ --center auto --host-memory 8G      NXtomo/DXchange: angles, flats inside
  leveret recon --config scan.toml --dry-run     print the memory plan only
  leveret center raw/ --angles angles.txt --flat flat.tif --dark dark.tif --sweep 5 --montage c.png
  leveret preview raw/ --angles angles.txt --flat flat.tif --dark dark.tif --center auto -o preview/
  leveret preview rec.h5 -o preview/             orthogonal slices of a volume
  leveret bench --backend cpu --size 128         a small built-in benchmark
  leveret rabbitct --size 512                    RabbitCT benchmark on a synthetic dataset

Run 'leveret COMMAND --help' for the options of each command.
"""


RECON_EXAMPLES = """examples:
  leveret recon proj.npy rec.tif --angles 0:180:900
  leveret recon savu/projections rec.h5 --angles savu/angles.txt --angle-lines 10:101 \\
      --flat savu/flat_00001.tiff --dark savu/dark_00001.tiff --center auto
  leveret recon big.h5:/exchange/data rec.zarr --angles 0:180:1800 --host-memory 4G --resume
  leveret recon big.h5:/exchange/data rec.zarr --angles 0:180:1800 --scheduler tcp://HOST:8786
  leveret recon scan.h5 rec.h5 --output-dtype uint16            16-bit volume, range from a middle slab
  leveret recon --config scan.toml --dry-run
  leveret recon proj/ rec.h5 --beam cone --angles 0:360:720 --sid 300 --sdd 600 --pixel-size 0.2
  leveret recon proj/ rec.h5 --matrices matrices.txt --flat f.tif --dark d.tif      cone, 3x4 per view
  leveret recon --xtekct scan.xtekct rec.h5                      Nikon XTek CT: geometry and TIFFs

The output's extension picks the format: .h5/.hdf5/.nxs (HDF5, Blosc lz4),
.zarr (zarr v3, Blosc lz4), .tif/.tiff (one BigTIFF), .npy, or a folder 'dir/'
(one TIFF per slice). Reading, reconstructing (on the GPU when there is one),
compressing and writing overlap slab by slab within the memory cap; the
progress line shows each stage's rate. With --resume an interrupted run
continues where it stopped. Reading Blosc HDF5 outside leveret needs
hdf5plugin (pip install hdf5plugin; import hdf5plugin before h5py opens it).
"""


# Library arguments that can name themselves in an error, and the flag a user of the
# command gives instead ("center: ..." -> "--center: ...", "pass overwrite=True" -> "pass --overwrite").
FLAGS = {
    "angles": "--angles",
    "path_or_values": "--angles",
    "center": "--center",
    "det_spacing": "--det-spacing",
    "row_spacing": "--row-spacing",
    "dataset": "--dataset",
    "flats": "--flat",
    "darks": "--dark",
    "stripes": "--stripes",
    "stripe_size": "--stripe-size",
    "filter": "--filter",
    "cutoff": "--cutoff",
    "interpolation": "--interpolation",
    "backend": "--backend",
    "kernel": "--kernel",
    "precision": "--precision",
    "slab_slices": "--slab-slices",
    "max_slices": "--slab-slices",
    "host_memory": "--host-memory",
    "gpu_memory": "--gpu-memory",
    "compression": "--compression",
    "resume": "--resume",
    "overwrite": "--overwrite",
    "method": "--method",
    "row": "--rows",
    "repeats": "--repeats",
    "size": "--size",
    "scheduler": "--scheduler",
    "client": "--scheduler",
    "devices": "--gpus",
    "output_dtype": "--output-dtype",
    "output_range": "--output-range",
    "io_threads": "--io-threads",
    "sync": "--no-sync",
    "xtekct": "--xtekct",
    "sid": "--sid",
    "sdd": "--sdd",
    "pixel_size": "--pixel-size",
    "volume_shape": "--volume-shape",
    "iterations": "--iterations",
    "tv": "--tv",
    "nonnegative": "--nonnegative",
    # phase retrieval, stripes, half acquisition
    "phase": "--phase",
    "energy": "--energy",
    "distance": "--distance",
    "delta_beta": "--delta-beta",
    "half_acquisition": "--half-acquisition",
    "snr": "--stripe-snr",
    "large_size": "--stripe-large-size",
    "wavelet": "--stripe-wavelet",
    "level": "--stripe-level",
    "sigma": "--stripe-sigma",
    # leveret live
    "matrices": "--matrices",
    "json": "--json",
    "max_views": "--max-views",
    "voxel_size": "--voxel-size",
    "allow_origins": "--allow-origin",
    "settle": "--settle",
    "storage": "--storage",
    "beam": "--beam",
}


def flag_message(message: str, parser: argparse.ArgumentParser | None = None) -> str:
    """``message`` with the library's argument names replaced by this command's flags.

    Only names whose flag ``parser`` (the subcommand's) has are replaced, so a
    name that means something else to this command is left alone.
    """
    known = None if parser is None else {s for a in parser._actions for s in a.option_strings}

    def flag(name):
        f = FLAGS.get(name)
        return f if f is not None and (known is None or f in known) else None

    head, sep, rest = message.partition(": ")
    if sep and flag(head):
        message = flag(head) + sep + rest

    def keyword(m):
        f = flag(m.group(1))
        if f is None:
            return m.group(0)
        value = m.group(2).strip("'")
        return f if value == "True" else f"{f} {value}"

    return re.sub(r"\b([a-z_]+)=(True|'[^']*'|[\w.]+)", keyword, message)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("leveret")
    except PackageNotFoundError:  # run from a source tree
        from .. import __version__

        return __version__


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every subcommand's help: descriptions as written, and "(default: X)"
    after an option's help only where it has a real default (not None/False)."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if (
            action.option_strings
            and action.nargs != 0
            and default not in (None, argparse.SUPPRESS)
            and "default" not in text
        ):
            text = (text + " " if text else "") + "(default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """argparse with the errors a newcomer can act on: one line (and the short
    usage), "did you mean" for a mistyped flag, negative numbers as values."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        # '-88.2:91.8:91' or '-3.5' after --angles/--center is a value, not an option.
        self._negative_number_matcher = re.compile(r"^-\.?\d")

    def error(self, message):
        usage = self.format_usage().strip()
        if "\n" in usage:  # the long generated one: a line that points to --help
            positionals = [
                a.dest if a.nargs is None else f"[{a.dest}]"
                for a in self._actions
                if not a.option_strings and a.dest != argparse.SUPPRESS
            ]
            usage = f"usage: {' '.join([self.prog, '[options]'] + positionals)} (options: {self.prog} --help)"
        self.exit(2, f"{usage}\n{self.prog}: error: {message}\n")

    def parse_args(self, args=None, namespace=None):
        args, extras = self.parse_known_args(args, namespace)
        if extras:
            sub = _subparser(self, args.command) if getattr(args, "command", None) else self
            sub.error(_unrecognized(extras, sub))
        return args


def _unrecognized(extras: list[str], parser: argparse.ArgumentParser) -> str:
    import difflib

    options = sorted({s for a in parser._actions for s in a.option_strings if s.startswith("--")})
    text = f"unrecognized arguments: {' '.join(extras)}"
    for word in extras:
        name = word.split("=", 1)[0]
        if name.startswith("-"):
            close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
            if close:
                return f"{text} (did you mean {close[0]}?)"
    return text


def _scan_options(p: argparse.ArgumentParser, *, angles_required: bool = False) -> None:
    """Input, angles and preprocessing: the same in recon, center and preview."""
    from ..filters import FILTERS

    p.add_argument(
        "input",
        nargs="?",
        default=None,
        help="projections: TIFF folder or glob, multi-page TIFF, .npy, .zarr, file.h5:/dataset, "
        "or an NXtomo/DXchange file (angles, flats and darks read from it)",
    )
    s = p.add_argument_group("scan")
    s.add_argument(
        "--angles",
        default=None,
        help="'start:stop:count' (stop excluded), 'start:stop:count:endpoint', or a text/.npy file",
    )
    s.add_argument(
        "--angle-lines",
        default=None,
        metavar="A:B",
        help="use entries A..B-1 of the angle list (e.g. 10:101 when the file also lists flat/dark frames)",
    )
    s.add_argument(
        "--angle-unit", default="degree", choices=("degree", "radian"), help="unit of --angles and of angle files"
    )
    s.add_argument(
        "--limited-angle", action="store_true", help="the scan covers less than 180 degrees on purpose (no warning)"
    )
    _strict(s)
    s.add_argument("--dataset", default=None, help="HDF5 dataset path (or give file.h5:/path)")
    s.add_argument(
        "--center",
        type=_center,
        default=None,
        help="rotation axis column in pixels, or 'auto' to estimate it (default: the detector middle)",
    )
    s.add_argument("--det-spacing", type=float, default=1.0, help="detector pixel pitch (length unit)")
    s.add_argument("--row-spacing", type=float, default=1.0, help="detector row pitch (length unit)")
    pre = p.add_argument_group("preprocessing")
    pre.add_argument("--flat", default=None, help="flat field(s) (image or stack, averaged): normalise, then -log")
    pre.add_argument("--dark", default=None, help="dark field(s), with --flat")
    pre.add_argument("--minus-log", action="store_true", help="input is transmission: take -log first")
    pre.add_argument(
        "--stripes",
        default=None,
        choices=STRIPE_METHODS,
        help="suppress stripes (rings): 'sort' (Vo et al. 2018), 'mean' (column offsets), 'all' "
        "(Vo et al. 2018: dead, large and small stripes) or 'wavelet-fft' (Muench et al. "
        "2009, needs PyWavelets)",
    )
    pre.add_argument(
        "--stripe-size",
        type=int,
        default=None,
        help="stripe filter width across columns (odd, >= 3; default: 5, and 21 for 'all')",
    )
    stripe_flags(pre)
    r = p.add_argument_group("reconstruction")
    r.add_argument("--filter", default="ram-lak", choices=FILTERS, help="FBP ramp filter window")
    r.add_argument("--cutoff", type=_cutoff, default=1.0, help="filter cutoff, fraction of Nyquist")
    r.add_argument(
        "--interpolation",
        default="linear",
        choices=("linear", "nearest", "linear8"),
        help="detector interpolation of the back-projection",
    )
    r.add_argument("--backend", default="auto", choices=("auto", "cuda", "cpu"), help="where to compute")
    r.add_argument(
        "--kernel",
        default="auto",
        choices=("auto", "texture", "texz", "alu", "hybrid"),
        help="CUDA back-projection kernel ('auto': the tuned choice, see 'leveret info')",
    )
    r.add_argument(
        "--precision",
        type=_precision,
        default="float32",
        metavar="{" + ",".join(PRECISIONS) + "}",
        help="float64: CPU only; float16: fp16 filtered sinograms on the GPU (2-4 slices per texture fetch)",
    )
    r.add_argument("--no-progress", action="store_true", help="no progress bar")


def _cone_options(p: argparse.ArgumentParser) -> None:
    """A cone-beam scan (lab CT): its geometry from 3x4 matrices, circular
    parameters or a scanner's file, and the volume to reconstruct."""
    c = p.add_argument_group("cone beam (FDK)")
    c.add_argument(
        "--beam",
        default=None,
        choices=("parallel", "cone"),
        help="the scan's beam (default: cone with --matrices, --xtekct or --sid, else parallel)",
    )
    c.add_argument(
        "--matrices",
        default=None,
        metavar="FILE",
        help="one 3x4 projection matrix per view: a text file of 12 numbers per line, row by row "
        "(P00 P01 P02 P03 P10 ... P23; not RabbitCT's column order), or .npy (n, 3, 4)",
    )
    c.add_argument(
        "--xtekct",
        default=None,
        metavar="FILE",
        help="a Nikon XTek CT parameter file: geometry, volume, white level (and the projection "
        "TIFFs beside it when no input is given)",
    )
    c.add_argument(
        "--sid",
        type=_positive_float,
        default=None,
        metavar="DIST",
        help="circular scan: source to rotation axis distance (with --sdd, --pixel-size, --angles)",
    )
    c.add_argument("--sdd", type=_positive_float, default=None, metavar="DIST", help="source to detector distance")
    c.add_argument(
        "--pixel-size",
        type=_pixel_size,
        default=None,
        metavar="SIZE",
        help="detector pixel pitch, one value or U,V (columns, rows), in the unit of the lengths "
        "given with it: of --sid/--sdd for cone beam, metres with --phase",
    )
    c.add_argument(
        "--det-offset-u",
        type=float,
        default=0.0,
        metavar="DIST",
        help="detector shift along its columns (the principal ray then meets column (n_cols-1)/2 - offset/pitch)",
    )
    c.add_argument("--det-offset-v", type=float, default=0.0, metavar="DIST", help="detector shift along its rows (up)")
    c.add_argument(
        "--volume-shape",
        type=_shape3,
        default=None,
        metavar="NZ,NY,NX",
        help="voxels of the volume (default: the detector's rows x columns x columns, or the xtekct file's)",
    )
    c.add_argument(
        "--voxel-size",
        type=_positive_float,
        default=None,
        metavar="SIZE",
        help="voxel edge (default: the detector pitch at the rotation axis, or the xtekct file's)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="leveret", description="Fast, quantitative tomographic reconstruction.", epilog=EXAMPLES)
    parser.add_argument("-V", "--version", action="version", version=f"leveret {_version()}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more messages (-vv: debug); tracebacks of unexpected errors"
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", default=False, help="only errors: no progress bars, no warnings"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    f = sub.add_parser(
        "recon",
        aliases=["fbp"],
        epilog=RECON_EXAMPLES,
        help="reconstruct a parallel-beam scan slab by slab into a file (alias: fbp)",
        description="Filtered back-projection of projections (n_angles, n_rows, n_cols) "
        "or a sinogram (n_angles, n_cols), with optional flat/dark "
        "normalisation and an automatic centre, written slab by slab "
        "within a memory cap.",
    )
    _scan_options(f)
    f.add_argument(
        "output", nargs="?", default=None, help=".h5, .zarr, .tif (BigTIFF), .npy, or a folder/ for one TIFF per slice"
    )
    phase_flags(f)
    o = f.add_argument_group("output and memory")
    o.add_argument(
        "--compression",
        default="default",
        help="HDF5: lz4 (default), zstd (Blosc, bit shuffle; readers need hdf5plugin), gzip (readable "
        "everywhere, slower), lzf, none; zarr: lz4 (default), zstd, none; TIFF folder: none "
        "(default), zlib",
    )
    o.add_argument(
        "--output-dtype",
        default="float32",
        choices=OUTPUT_DTYPES,
        help="store the volume as float16 (clips beyond +-65504) or as uint16/uint8 over "
        "--output-range (values outside clip); the range goes into the file's metadata",
    )
    o.add_argument(
        "--output-range",
        type=_output_range,
        default=None,
        metavar="LO:HI",
        help="value range of a uint8/uint16 output: LO is stored as 0, HI as the largest integer "
        "(default 'auto': the 0.01-99.99 percentiles of a middle slab, widened by 10%%)",
    )
    o.add_argument(
        "--io-threads",
        type=_positive_int,
        default=None,
        metavar="N",
        help="threads that read, compress and write each slab (default: one per core)",
    )
    o.add_argument(
        "--no-sync",
        action="store_true",
        help="count the volume as written once it is in the page cache, not on disk: faster where the "
        "disk is slower than memory; a power cut soon after may lose it, and a --resume after one may "
        "trust slices it lost (default: flushed to disk)",
    )
    o.add_argument(
        "--host-memory",
        type=_size,
        default=None,
        metavar="SIZE",
        help="host memory the run may use, e.g. 512M, 8G (default: 60%% of what is free)",
    )
    o.add_argument(
        "--gpu-memory",
        type=_size,
        default=None,
        metavar="SIZE",
        help="GPU memory the run may use (default: 60%% of what is free)",
    )
    o.add_argument(
        "--slab-slices",
        dest="slab_slices",
        type=int,
        default=None,
        metavar="N",
        help="at most this many slices per slab (default: planned)",
    )
    o.add_argument("--dry-run", action="store_true", help="print the memory plan and stop")
    o.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run of the same job; keep progress if this one stops",
    )
    o.add_argument("--overwrite", action="store_true", help="replace an existing output")
    w = f.add_argument_group("where to run")
    w.add_argument(
        "--gpus",
        type=_gpus,
        default=None,
        metavar="all|0,1,...",
        help="GPUs of this host to use together: slices are dealt to them and each streams its "
        "own (default: the current GPU)",
    )
    w.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="run the slabs on a Dask cluster: a scheduler's address (tcp://HOST:8786), or "
        "'local' for a cluster on this host (one worker per GPU, else CPU processes); "
        'needs pip install "leveret[cluster]"',
    )
    _cone_options(f)
    iterate.add_options(f)
    trajectory.add_options(f)
    _common(f)

    c = sub.add_parser(
        "center",
        help="estimate the rotation axis (with a confidence), optionally sweep it",
        description="Estimate the centre of rotation from 180-degree pairs (or a "
        "reconstruction sweep), print it with its confidence, and optionally "
        "score a sweep of trial centres and write a PNG montage.",
        epilog="examples:\n  leveret center raw/ --angles angles.txt --flat f.tif --dark d.tif\n"
        "  leveret center proj.npy --angles 0:180:900 --sweep 4 --step 0.5 "
        "--montage sweep.png\n",
    )
    _scan_options(c)
    c.add_argument(
        "--method",
        default="auto",
        choices=("auto", "pairs", "sweep"),
        help="180-degree pair registration, a reconstruction sweep, or pairs where the angles allow",
    )
    c.add_argument("--rows", default=None, metavar="A:B", help="detector rows to use (default: 16 middle rows)")
    c.add_argument(
        "--sweep",
        type=float,
        default=None,
        metavar="PIXELS",
        help="also score centres within +-PIXELS of the estimate (middle row)",
    )
    c.add_argument("--step", type=float, default=0.5, help="sweep step in pixels")
    c.add_argument("--montage", default=None, metavar="PNG", help="with --sweep: PNG of the trial slices")
    c.add_argument("--json", default=None, help="write the result as JSON")
    _common(c)

    pv = sub.add_parser(
        "preview",
        help="PNGs: orthogonal slices, a sinogram and the geometry figure",
        description="With --angles (or an NXtomo/DXchange file) the input is a scan: "
        "write sinogram.png, geometry.png and slices.png (orthogonal slices "
        "of a binned reconstruction). Without, the input is a volume: "
        "write slices.png.",
        epilog="examples:\n  leveret preview raw/ --angles angles.txt --center auto -o prev/\n"
        "  leveret preview rec.h5 -o prev/\n",
    )
    _scan_options(pv)
    pv.add_argument(
        "-o",
        "--output-dir",
        default="preview",
        help="folder for the PNGs, made if missing (a relative path is under the current folder)",
    )
    pv.add_argument(
        "--bin",
        type=_positive_int,
        default=None,
        help="bin detector pixels by this factor before reconstructing (default: to <= 256 columns)",
    )
    _common(pv)

    d = sub.add_parser(
        "demo",
        help="simulate a noisy scan of a 3D phantom, reconstruct it, report",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    d.add_argument("--size", type=int, default=256, help="slice width and height (pixels)")
    d.add_argument("--slices", type=int, default=32, help="number of slices")
    d.add_argument("--angles", type=int, default=None, help="projections over 180 degrees (default ~1.5 x size)")
    d.add_argument("--photons", type=float, default=1e5, help="incident photons per detector pixel (Poisson)")
    d.add_argument("--backend", default="auto", choices=("auto", "cuda", "cpu"))
    d.add_argument(
        "--real",
        action="store_true",
        help="reconstruct the real scan bundled with leveret instead (flat/dark, -log, centre, "
        "FBP); the simulation options are then unused",
    )
    d.add_argument(
        "-o",
        "--output",
        default=None,
        help="the PNG to write (default: leveret-demo/demo.png, or leveret-demo/real.png with --real)",
    )
    d.add_argument("--seed", type=int, default=None, help="noise seed")
    _common(d)

    r = sub.add_parser(
        "rabbitct",
        help="the RabbitCT back-projection benchmark (time, GUPS, HU errors)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Back-project a RabbitCT dataset (a .rct file, or a synthetic one "
        "made on the fly) into an L^3 volume over a 256 mm cube and score it "
        "against the float64 reference as RabbitCT does.",
    )
    r.add_argument("--size", type=int, default=512, help="volume edge L in voxels")
    r.add_argument("--input", default=None, help="a RabbitCT v2 .rct file (default: synthetic)")
    r.add_argument(
        "--small",
        action="store_true",
        help="synthetic: a quarter-size detector and views (minutes on a laptop, not hours)",
    )
    r.add_argument("--save", default=None, help="synthetic: also write the dataset to this .rct file")
    r.add_argument("--backend", default="auto", choices=("auto", "cuda", "cpu"))
    r.add_argument("--repeats", type=_positive_int, default=3, help="timed runs (the fastest is reported)")
    r.add_argument("--json", default=None, help="write the result as JSON")
    _common(r)

    b = sub.add_parser(
        "bench",
        help="a small built-in benchmark (parallel FBP and cone FDK), printed as a table",
        description="Time leveret.fbp and leveret.fdk on simulated data of a few sizes on "
        "one backend; print a table (best of --repeats, GU/s = voxel updates "
        "per second / 1e9) and optionally write JSON.",
        epilog="examples:\n  leveret bench --backend cpu --size 64\n"
        "  leveret bench --backend cuda --size 512 --json bench.json    "
        "writes leveret-bench/bench.json\n",
    )
    b.add_argument("--backend", default="auto", choices=("auto", "cuda", "cpu"))
    b.add_argument("--size", type=_positive_int, default=128, help="largest slice width (pixels)")
    b.add_argument("--slices", type=_positive_int, default=16, help="slices per volume")
    b.add_argument("--repeats", type=_positive_int, default=3, help="timed runs per case (best is kept)")
    b.add_argument(
        "-o",
        "--output-dir",
        default="leveret-bench",
        help="folder for --json (made if missing; a relative path is under the current folder)",
    )
    b.add_argument("--json", default=None, metavar="NAME", help="write the table as JSON into --output-dir")
    _common(b)

    t = sub.add_parser(
        "tune",
        help="measure this GPU's kernel choices and cache them (about a minute)",
        description="Measure the 'auto' choices that depend on the GPU (the cone transpose's "
        "cost model, the parallel-beam back-projection kernels of common problem "
        "sizes) and cache them for this GPU in the tuning file ('leveret info' "
        "shows it); later runs with kernel='auto' and transpose='auto' use them. "
        "Ctrl-C keeps what was measured so far.",
        epilog="examples:\n  leveret tune\n  leveret tune --budget 20 --device 1\n",
    )
    t.add_argument(
        "--budget",
        type=_positive_int,
        default=60,
        help="seconds for the parallel-beam classes; none starts after it (default: %(default)s)",
    )
    t.add_argument("--device", type=_device, default=0, help="CUDA device to tune (default: %(default)s)")
    _common(t)

    i = sub.add_parser("info", help="print the backends found")
    _common(i)
    live.add_parser(sub)
    for p in sub.choices.values():  # one help format for every subcommand
        p.formatter_class = HelpFormatter
        for a in p._actions:
            if not a.help and a.option_strings and a.nargs != 0 and a.default not in (None, argparse.SUPPRESS):
                a.help = "(default: %(default)s)"
    return parser


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[command]


def parse(argv=None) -> argparse.Namespace:
    """Parse ``argv``, with ``--config`` values as defaults that flags override."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "config", None):
        sub = _subparser(parser, args.command)
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
        values = apply_config(sub, args.command, load_config(args.config), args.config, commands=commands)
        sub.set_defaults(**values)
        args = parser.parse_args(argv)
        # parse_args puts explicit flags over defaults, so the config fills only the rest.
    return args
