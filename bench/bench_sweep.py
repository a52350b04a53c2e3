"""Fast on every geometry, not on the benchmark's: leveret against ASTRA over swept geometries.

A base point per family and one-axis-at-a-time variations around it, plus a few
corners (not the cartesian product):

  cone     the matched projectors (Projector, Joseph and Siddon): A, A.T (the
           exact transpose), one SIRT and one CGLS iteration, against ASTRA's
           FP3D / BP3D (direct_FP3D / direct_BP3D on device arrays) and
           SIRT3D_CUDA / CGLS3D_CUDA; and the unmatched adjoint
           (Projector(..., adjoint="unmatched").T, "A.T unmatched") against BP3D.
           Base: the problem of Thompson and Lionheart (2014): 720 views
           of 512^2 from 512^3, source-isocentre 1000 mm, source-detector
           1500 mm, circular, 2.0 mm pixels (0.75 detector pixels per
           voxel at the isocentre, cone half-angle 18.9 degrees). Axes:
           detector pixels per voxel 0.5 to 2.5, cone half-angle 2 to 15
           degrees (the source moves, the detector field stays), volumes
           256^3 to 1024^3, 180 to 1440 views, a short scan, a detector
           offset by a quarter of its width, a non-circular trajectory
           (per-view source-distance wobble and detector shifts).
  fdk      ConeBackprojection (device arrays) against direct_BP3D, and FDK
           (NumPy in and out) against FDK_CUDA: the same sampling range, 128
           to 1000 views, 256^3 to 1024^3; and FDK streamed under GPU memory
           budgets (fdk(..., gpu_memory=2 GiB, 8 GiB), up to 4096^2 x 640
           from 124 views), where the row also gives the transfer + compute
           bound (the input's bytes over the measured pinned host->device
           bandwidth, the volume's over the slower of device->host and the
           host's rate of writing fresh NumPy pages, plus FDK of the same
           volume in one piece on device arrays) and the time over it (the
           median of three calls after a warm-up, the host's state moving
           them by up to 20 %; the process's first call of that size
           beside it); also
           with two workers sharing the GPU asked for (devices=DeviceSet([d,
           d], shared=True), "FDK streamed, 2 workers"; fdk's default where
           half the cap holds a slab).
  parallel ParallelBackprojection (device arrays) against direct_BP3D
           (parallel3d), and FBP (NumPy in and out) against FBP_CUDA (2D:
           one slice's time times the slices): 1 to 2048
           slices, 180 to 6000 angles, widths 512 to 4096, ROI on and off,
           precision float32 and float16.
  radon3d  radon3d_fbp (NumPy in and out), 64^3 to 256^3, 100 to 4000
           directions (no ASTRA counterpart).

Every row: the operation, the swept parameters, leveret's and ASTRA's time,
their ratio (leveret / ASTRA: below 1 is faster) and, for A.T, the ratio
A.T / A. The summary gives per operation the worst and median ratio and the
worst A.T / A, and flags every point where leveret is slower than ASTRA or
A.T takes more than twice A. Points that would not fit the GPU (or host)
memory are skipped with the reason, from estimates made before allocating.
Points run in order of information: every family's base point, the
one-axis variations at the base size, then larger sizes, streamed volumes
and corners; --budget stops starting points after that many seconds.

    PYTHONPATH=src python3 bench/bench_sweep.py --dry-run                   # the points, no GPU
    PYTHONPATH=src python3 bench/bench_sweep.py --check                     # ASTRA's geometry = leveret's
    PYTHONPATH=src python3 bench/bench_sweep.py --quick --out sweep.json --plot sweep.png
    PYTHONPATH=src python3 bench/bench_sweep.py --budget 480 --out bench_sweep.json --plot bench_sweep.png \\
        --compare bench/results/h200/bench_sweep.json
    PYTHONPATH=src python3 bench/bench_sweep.py --budget 480 --resume bench_sweep.json --out bench_sweep.json

--resume keeps an earlier run's measured points (same GPU model) and runs the
rest, so a sweep longer than one sitting is measured in parts; --part K/N runs
one share of them, one process per GPU, and a last --resume of every part's
file with --budget 0 merges them:

    CUDA_VISIBLE_DEVICES=0 ... bench_sweep.py --resume old.json --part 1/2 --out p1.json &
    CUDA_VISIBLE_DEVICES=1 ... bench_sweep.py --resume old.json --part 2/2 --out p2.json
    ... bench_sweep.py --resume p1.json --resume p2.json --budget 0 --out bench_sweep.json
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import math
import statistics
import sys
import time
from itertools import zip_longest
from pathlib import Path

import numpy as np


def _load_common():
    """bench/common.py by path, so that this file also imports from tests."""
    path = Path(__file__).resolve().with_name("common.py")
    spec = importlib.util.spec_from_file_location("bench_common", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


common = _load_common()

GiB = 1 << 30
SID, SDD, EXTENT = 1000.0, 1500.0, 512.0
# The detector's field at the isocentre spans 4/3 of the volume's extent on each
# axis (the base problem: 512 columns of 2.0 mm at magnification 1.5 over 512 mm).
FIELD = 4.0 / 3.0
BASE_SAMPLING = 0.75  # detector pixels per voxel at the isocentre (2.0 mm / 1.5 over 1 mm voxels)
OPS = {
    "cone": (
        "A joseph",
        "A.T joseph",
        "SIRT joseph",
        "CGLS joseph",
        "A siddon",
        "A.T siddon",
        "SIRT siddon",
        "CGLS siddon",
        "A.T unmatched",
    ),
    "fdk": ("cone BP", "FDK"),
    "fdk-streamed": ("FDK streamed", "FDK streamed, 2 workers"),
    "parallel": ("parallel BP", "FBP"),
    "radon3d": ("radon3d FBP",),
}
SLOWER_THAN_ASTRA = 1.0  # flag: leveret / ASTRA above this
TRANSPOSE_LIMIT = 2.0  # flag: A.T / A above this
REGRESSION = 0.10  # --compare: slower than stored by more than this fraction
REGRESSION_FLOOR = 0.5e-3  # ... and by more than this many seconds (timer noise on sub-ms points)
STREAMED_REPS = 3  # timed calls of a streamed FDK row, after its first


# -- the points ------------------------------------------------------------------------


def _sizes(quick: bool) -> dict:
    """Every axis' values; --quick divides sizes by 4 (views, detector, volumes) and
    GPU budgets by 64 (the volume's factor) so the whole sweep runs in a minute."""
    if quick:
        return dict(
            n=128,
            views=180,
            n_axis=(64, 256),
            views_axis=(45, 90, 360),
            fdk_views=(32, 62, 250),
            streamed=[(256, 256, 64, 2 / 64), (1024, 1024, 160, 2 / 64), (1024, 1024, 160, 8 / 64)],
            par=dict(width=512, angles=512, slices=16),
            par_slices=(1, 4, 64, 512),
            par_angles=(45, 180, 1500),
            par_width=(128, 256, 1024),
            radon=dict(n=32, dirs=250),
            radon_n=(16, 64),
            radon_dirs=(25, 1000),
            corners_n=256,
            corners_views=360,
        )
    return dict(
        n=512,
        views=720,
        n_axis=(256, 768, 1024),
        views_axis=(180, 360, 1440),
        fdk_views=(128, 248, 1000),
        streamed=[(1024, 1024, 1024, 2.0), (4096, 4096, 640, 2.0), (4096, 4096, 640, 8.0)],
        par=dict(width=2048, angles=2048, slices=64),
        par_slices=(1, 16, 256, 2048),
        par_angles=(180, 720, 6000),
        par_width=(512, 1024, 4096),
        radon=dict(n=128, dirs=1000),
        radon_n=(64, 256),
        radon_dirs=(100, 4000),
        corners_n=1024,
        corners_views=1440,
    )


def _point(family, axis, **params) -> dict:
    return {"family": family, "axis": axis, "params": params}


def cone_base(quick: bool = False) -> dict:
    s = _sizes(quick)
    return dict(
        n=s["n"],
        nz=s["n"],
        views=s["views"],
        sampling=BASE_SAMPLING,
        half_angle=None,
        scan="full",
        offset=0.0,
        trajectory="circular",
    )


def points(quick: bool = False) -> list[dict]:
    """The sweep, most informative first: each family's base point, the one-axis
    variations at the base size, then larger sizes, streamed volumes and corners."""
    s = _sizes(quick)
    cb = cone_base(quick)
    fb = dict(cb)
    pb = dict(s["par"], roi=False, precision="float32")
    rb = dict(s["radon"])

    def vary(family, base, axis, values):
        out = []
        for value in values:
            params = dict(base, **{axis: value})
            if axis == "n" and "nz" in params:
                params["nz"] = value
            out.append(_point(family, axis, **params))
        return out

    first = [
        _point("cone", "base", **cb),
        _point("fdk", "base", **fb),
        _point("parallel", "base", **pb),
        _point("radon3d", "base", **rb),
    ]
    small_n = [v for v in s["n_axis"] if v < cb["n"]]
    large_n = [v for v in s["n_axis"] if v > cb["n"]]
    views_small = [v for v in s["views_axis"] if v <= cb["views"]]
    views_large = [v for v in s["views_axis"] if v > cb["views"]]
    # one axis at a time, the most telling values first (geometries a benchmark's
    # circular scan never shows; the extremes of each range), families taken in turn
    # so that a budget cut leaves every family measured
    cone = (
        vary("cone", cb, "trajectory", ("wobble",))
        + vary("cone", cb, "offset", (0.25,))
        + vary("cone", cb, "scan", ("short",))
        + vary("cone", cb, "half_angle", (2.0,))
        + vary("cone", cb, "sampling", (0.5, 1.5))
        + vary("cone", cb, "half_angle", (15.0,))
        + vary("cone", cb, "views", views_small[:1])
        + vary("cone", cb, "sampling", (2.5,))
        + vary("cone", cb, "half_angle", (5.0, 10.0))
        + vary("cone", cb, "sampling", (1.0, 2.0))
        + vary("cone", cb, "views", views_small[1:])
    )
    fdk = (
        vary("fdk", fb, "trajectory", ("wobble",))
        + vary("fdk", fb, "scan", ("short",))
        + vary("fdk", fb, "sampling", (0.5, 2.5))
        + vary("fdk", fb, "views", s["fdk_views"])
        + vary("fdk", fb, "sampling", (1.0, 1.5))
    )
    par = (
        vary("parallel", pb, "roi", (True,))
        + vary("parallel", pb, "precision", ("float16",))
        + vary("parallel", pb, "angles", s["par_angles"])
        + vary("parallel", pb, "slices", [v for v in s["par_slices"] if v <= pb["slices"]])
        + vary("parallel", pb, "width", [v for v in s["par_width"] if v < pb["width"]])
    )
    radon = vary("radon3d", rb, "dirs", s["radon_dirs"]) + vary("radon3d", rb, "n", s["radon_n"])
    one_axis = [pt for group in zip_longest(cone, fdk, par, radon) for pt in group if pt is not None]
    sizes = (
        vary("cone", cb, "n", small_n)
        + vary("fdk", fb, "n", small_n)
        + vary("cone", cb, "views", views_large)
        + vary("cone", cb, "n", large_n)
        + vary("fdk", fb, "n", large_n)
        + vary("parallel", pb, "width", [v for v in s["par_width"] if v > pb["width"]])
        + vary("parallel", pb, "slices", [v for v in s["par_slices"] if v > pb["slices"]])
    )
    streamed = [
        _point("fdk-streamed", "budget", **dict(fb, n=nx, nz=nz, views=124, budget_gib=b))
        for nx, _, nz, b in s["streamed"]
    ]
    cn, cv = s["corners_n"], s["corners_views"]
    corners = [
        _point("cone", "corner", **dict(cb, scan="short", offset=0.25, trajectory="wobble")),
        _point("cone", "corner", **dict(cb, half_angle=2.0, sampling=2.5)),
        _point("cone", "corner", **dict(cb, n=cb["n"] // 2, nz=cb["n"] // 2, views=cb["views"] // 4, sampling=2.5)),
        _point("cone", "corner", **dict(cb, n=cn, nz=cn, views=cv)),
        _point("fdk", "corner", **dict(fb, n=cn, nz=cn, views=s["fdk_views"][-1], sampling=1.5)),
        _point("parallel", "corner", **dict(pb, width=s["par_width"][-1], angles=s["par_angles"][-1], slices=1)),
        _point(
            "parallel",
            "corner",
            **dict(pb, width=s["par_width"][0], angles=s["par_angles"][0], slices=s["par_slices"][-1], roi=True),
        ),
        _point("radon3d", "corner", n=s["radon_n"][-1], dirs=s["radon_dirs"][-1]),
    ]
    return first + one_axis + sizes + streamed + corners


def point_key(family: str, op: str, params: dict) -> str:
    """A row's identity across runs: operation and every swept parameter."""
    return f"{family} | {op} | " + ", ".join(f"{k}={params[k]}" for k in sorted(params))


def point_label(point: dict) -> str:
    p, f = point["params"], point["family"]
    if f in ("cone", "fdk", "fdk-streamed"):
        vol = f"{p['n']}^3" if p["nz"] == p["n"] else f"{p['n']}^2x{p['nz']}"
        extra = [f"{p['sampling']:g} px/voxel"]
        if p["half_angle"] is not None:
            extra.append(f"half-angle {p['half_angle']:g} deg")
        if p["scan"] != "full":
            extra.append(p["scan"])
        if p["offset"]:
            extra.append(f"offset {p['offset']:g} width")
        if p["trajectory"] != "circular":
            extra.append(p["trajectory"])
        if p.get("budget_gib"):
            extra.append(f"gpu_memory {p['budget_gib']:g} GiB")
        return f"{vol} from {p['views']} views, " + ", ".join(extra)
    if f == "parallel":
        roi = ", ROI" if p["roi"] else ""
        return f"{p['width']}^2 x {p['slices']} slices from {p['angles']} angles, {p['precision']}{roi}"
    return f"{p['n']}^3 from {p['dirs']} directions"


# -- geometries --------------------------------------------------------------------------


def cone_problem(p: dict):
    """(ConeGeometry, VolumeGeometry, derived) of a cone point.

    The volume spans EXTENT mm in x and y (voxel EXTENT / n, nz slices of the same
    voxel); the detector's field at the isocentre spans FIELD times the volume's
    extent on each axis, with ``sampling`` detector pixels per voxel there;
    magnification SDD / SID. ``half_angle`` (degrees, of the detector rows seen
    from the source) moves the source to ``field_z / 2 / tan(half_angle)`` and
    keeps the magnification; None keeps SID. ``derived`` has what the scan came
    out as: half-angle, distances, detector size.
    """
    import leveret

    n, nz, views, s = p["n"], p["nz"], p["views"], p["sampling"]
    voxel = EXTENT / n
    pixel_iso = voxel / s
    n_cols = max(1, round(FIELD * n * s))
    n_rows = max(1, round(FIELD * nz * s))
    half_field_z = n_rows * pixel_iso / 2
    half_field_x = n_cols * pixel_iso / 2
    sid = SID if p["half_angle"] is None else half_field_z / math.tan(math.radians(p["half_angle"]))
    sdd = sid * SDD / SID
    pixel = pixel_iso * sdd / sid
    fan = math.atan(half_field_x / sid)
    span = 2 * math.pi if p["scan"] == "full" else math.pi + 2 * fan
    angles = np.linspace(0.0, span, views, endpoint=False)
    kwargs = {}
    if p["offset"]:
        kwargs["det_offset"] = (p["offset"] * n_cols * pixel, 0.0)
    sid_v, sdd_v = sid, sdd
    if p["trajectory"] == "wobble":
        # 2 % source-distance wobble (the detector keeps its distance to the axis)
        # and detector shifts of a few pixels, different in every view
        sid_v = sid * (1.0 + 0.02 * np.sin(3 * angles))
        sdd_v = sdd + (sid_v - sid)
        shift = np.stack([2.0 * pixel * np.sin(5 * angles), 1.5 * pixel * np.cos(7 * angles)], axis=1)
        base = np.asarray(kwargs.get("det_offset", (0.0, 0.0)))
        kwargs["det_offset"] = shift + base
    elif p["trajectory"] != "circular":
        raise ValueError(f"trajectory: expected 'circular' or 'wobble', got {p['trajectory']!r}")
    g = leveret.ConeGeometry.circular(angles, sid_v, sdd_v, n_rows, n_cols, pixel, **kwargs)
    vol = leveret.VolumeGeometry((nz, n, n), voxel)
    derived = dict(
        half_angle=round(math.degrees(math.atan(half_field_z / sid)), 3),
        sid=round(sid, 3),
        sdd=round(sdd, 3),
        pixel=round(pixel, 6),
        n_rows=n_rows,
        n_cols=n_cols,
        sampling=s,
        fan_half_angle=round(math.degrees(fan), 3),
    )
    return g, vol, derived


def parallel_problem(p: dict):
    """(ParallelGeometry, VolumeGeometry, roi or None) of a parallel point: unit
    pixels, ``slices`` detector rows, the ROI the central half of each slice."""
    import leveret

    w = p["width"]
    angles = np.linspace(0.0, np.pi, p["angles"], endpoint=False)
    g = leveret.ParallelGeometry(angles, w, n_rows=p["slices"])
    roi = (w // 4, w // 4, w // 2, w // 2) if p["roi"] else None
    return g, g.default_volume(), roi


def radon_problem(p: dict):
    import leveret

    n = p["n"]
    g = leveret.RadonGeometry.uniform(p["dirs"], int(math.ceil(math.sqrt(3.0) * n)) + 1)
    return g, leveret.VolumeGeometry((n, n, n), 1.0)


# -- memory and time estimates (before allocating) ----------------------------------------


def array_bytes(point: dict) -> tuple[int, int]:
    """(volume bytes, projection bytes) of a point in float32, from its parameters alone."""
    p, f = point["params"], point["family"]
    if f in ("cone", "fdk", "fdk-streamed"):
        n_cols, n_rows = max(1, round(FIELD * p["n"] * p["sampling"])), max(1, round(FIELD * p["nz"] * p["sampling"]))
        return 4 * p["n"] ** 2 * p["nz"], 4 * p["views"] * n_rows * n_cols
    if f == "parallel":
        side = p["width"] // 2 if p["roi"] else p["width"]
        return 4 * p["slices"] * side * side, 4 * p["slices"] * p["angles"] * p["width"]
    n_samples = int(math.ceil(math.sqrt(3.0) * p["n"])) + 1
    return 4 * p["n"] ** 3, 8 * p["dirs"] * n_samples


def needs(point: dict, op: str) -> tuple[int, int]:
    """(GPU bytes, host bytes) that ``op`` of ``point`` needs at its peak, leveret's or
    ASTRA's (they run one after the other), with a working margin."""
    vol, proj = array_bytes(point)
    f = point["family"]
    if f == "cone":
        # leveret: x, A.T's output and SIRT/CGLS vectors (4 volumes), b, residual, weights
        # (4 projections), the structured path's volume copy and the gather transpose's
        # table (at most 2 GiB); ASTRA's SIRT holds about 3 of each
        return 5 * vol + 4 * proj + 2 * GiB, vol + 2 * proj
    if f == "fdk":
        if op == "cone BP":
            return vol + 2 * proj + GiB // 2, 0
        # host to host: leveret plans its GPU slabs itself; ASTRA holds volume and projections
        return min(vol + 2 * proj, 4 * GiB), 2 * (vol + proj)
    if f == "fdk-streamed":
        # the bound's FDK of the whole volume in one piece needs it on the device; the
        # streamed runs need their budget
        return vol + 2 * proj + GiB // 2, vol + 2 * proj
    if f == "parallel":
        if op == "parallel BP":
            return vol + 2 * proj + GiB // 2, 0
        return 2 * GiB, vol + 2 * proj
    return 3 * vol + 4 * proj + GiB // 2, 2 * vol + proj


# Rough rates (voxel updates per second, both codes' calls) for the ETA; the run
# rescales them by the ratio of measured to estimated time so far.
_RATE = {"cone": 2.5e11, "fdk": 1.0e12, "fdk-streamed": 1.0e12, "parallel": 5.0e11, "radon3d": 5.0e10}
_CALLS = {"cone": 72, "fdk": 14, "fdk-streamed": 12, "parallel": 16, "radon3d": 8}
LONG_POINT = 120.0  # s: a point whose calls take longer is timed once after its warm-up


def estimate_seconds(point: dict, ops=None) -> float:
    """A rough time for the point (all its calls, both codes, or the share of
    ``ops`` among its operations), for the ETA, --budget and --part."""
    share = 1.0 if ops is None else len(ops) / len(OPS[point["family"]])
    t = work_seconds(point)
    if t > LONG_POINT:  # one timed call after the warm-up instead of two or three (Sweep.reps)
        t *= 0.6
    return 1.0 + share * t


def work_seconds(point: dict) -> float:
    """The rough time of all the point's calls at the default repetitions."""
    p, f = point["params"], point["family"]
    if f in ("cone", "fdk", "fdk-streamed"):
        updates = (
            p["views"] * p["n"] ** 2 * p["nz"] * max(1.0, p["sampling"] ** 2 / BASE_SAMPLING**2 if f == "cone" else 1.0)
        )
    elif f == "parallel":
        side = p["width"] // 2 if p["roi"] else p["width"]
        updates = p["slices"] * p["angles"] * side * side
    else:
        updates = p["dirs"] * p["n"] ** 3
    vol, proj = array_bytes(point)
    host = 0.0 if f == "cone" else _CALLS[f] / 2 * (vol + proj) / 10e9  # host arrays at ~10 GB/s
    return _CALLS[f] * updates / _RATE[f] + host


# -- timing helpers (GPU) -------------------------------------------------------------------


def _sync():
    import cupy as cp

    cp.cuda.Device().synchronize()


def _free():
    import cupy as cp

    cp.get_default_memory_pool().free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()


def iteration_time(run, k: int = 1, sync=None) -> float:
    """(T(1 + k iterations) - T(1)) / k: one iteration without set-up (SIRT's weights).
    One call first compiles what the method itself launches (its vector updates):
    inside T(1), that made a first point's iteration come out near zero."""
    t1 = common.median_time(lambda: run(1), reps=1, warmup=1, sync=sync)
    tk = common.median_time(lambda: run(1 + k), reps=1, warmup=0, sync=sync)
    return max(tk - t1, 0.0) / k


def precision_names() -> dict:
    """This tree's spellings of fbp's / ParallelBackprojection's float32 and float16
    ("float32"/"float16" where the NumPy names are accepted, else "single"/"fast" and
    "exact"/"fast"), probed on a tiny CPU problem."""
    import leveret

    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 4, endpoint=False), 8)
    sino = np.zeros((4, 8), np.float32)
    names = {}
    for new, old_fbp, old_op in (("float32", "single", "exact"), ("float16", "fast", "fast")):
        try:
            leveret.fbp(sino, g, backend="cpu", precision=new)
            names[("fbp", new)] = new
        except ValueError:
            names[("fbp", new)] = old_fbp
        try:
            leveret.ParallelBackprojection(g, g.default_volume(), backend="cpu", precision=new)
            names[("op", new)] = new
        except ValueError:
            names[("op", new)] = old_op
    return names


def projector_options() -> dict:
    """transpose="auto" where Projector has the argument (it is passed only then)."""
    import leveret

    return {"transpose": "auto"} if "transpose" in inspect.signature(leveret.Projector).parameters else {}


class Astra:
    """ASTRA's calls on one GPU, or None-returning stand-ins when ASTRA is missing."""

    def __init__(self, enabled: bool):
        self.astra, self.reason = None, "--no-astra"
        if enabled:
            try:
                import astra
                import astra.experimental  # noqa: F401  (direct_FP3D / direct_BP3D)

                self.astra, self.reason = astra, ""
            except ImportError as exc:
                self.reason = f"ASTRA not available: {exc}"

    def fp_bp(self, pg, vg, vol_shape, proj_shape, reps=2, fp=True):
        """Median times of direct_FP3D (None unless ``fp``) and direct_BP3D on device
        arrays (GPULink); ``proj_shape`` is ASTRA's (rows, views, cols)."""
        import astra
        import astra.experimental as ae
        import cupy as cp

        vol_d = cp.random.random(vol_shape, dtype=cp.float32)
        proj_d = cp.zeros(proj_shape, cp.float32)
        projector = astra.create_projector("cuda3d", pg, vg)
        try:
            nz, ny, nx = vol_shape
            rows, views, cols = proj_shape
            vlink = astra.data3d.GPULink(vol_d.data.ptr, nx, ny, nz, nx * 4)
            plink = astra.data3d.GPULink(proj_d.data.ptr, cols, views, rows, cols * 4)
            t_fp = (
                common.median_time(lambda: ae.direct_FP3D(projector, vlink, plink), reps=reps, sync=_sync)
                if fp
                else None
            )
            t_bp = common.median_time(lambda: ae.direct_BP3D(projector, vlink, plink), reps=reps, sync=_sync)
        finally:
            astra.projector3d.delete(projector)
            del vol_d, proj_d
            _free()
        return t_fp, t_bp

    def iteration(self, name, pg, vg, proj_shape):
        """One iteration of SIRT3D_CUDA / CGLS3D_CUDA on ASTRA's own GPU copies."""
        astra = self.astra
        host = np.random.default_rng(0).random(proj_shape, dtype=np.float32)
        pid = astra.data3d.create("-proj3d", pg, host)
        vid = astra.data3d.create("-vol", vg, 0)
        cfg = astra.astra_dict(name)
        cfg["ProjectionDataId"], cfg["ReconstructionDataId"] = pid, vid
        aid = astra.algorithm.create(cfg)
        try:
            astra.algorithm.run(aid, 1)  # set-up: weights, GPU copies
            return iteration_time(lambda n: astra.algorithm.run(aid, n))
        finally:
            astra.algorithm.delete(aid)
            astra.data3d.delete([pid, vid])

    def algorithm_host(self, name, pg, vg, proj_shape, vol_shape, reps=2, gpu_memory=None, options=None):
        """Median time of an ASTRA algorithm (FDK_CUDA, BP3D_CUDA, FBP_CUDA) on host
        arrays linked without copies, and a note; ``gpu_memory`` caps ASTRA's GPU
        memory (astra.set_gpu_index(0, memory=...)) where this ASTRA can."""
        astra = self.astra
        proj = np.random.default_rng(0).random(proj_shape, dtype=np.float32)
        vol = np.zeros(vol_shape, np.float32)
        two_d = len(proj_shape) == 2
        data = astra.data2d if two_d else astra.data3d
        pid = data.link("-sino" if two_d else "-proj3d", pg, proj)
        vid = data.link("-vol", vg, vol)
        cfg = astra.astra_dict(name)
        cfg["ProjectionDataId"], cfg["ReconstructionDataId"] = pid, vid
        if options:
            cfg["option"] = dict(options)
        aid = astra.algorithm.create(cfg)
        note, capped = name, False
        if gpu_memory:
            try:
                astra.set_gpu_index(0, memory=int(gpu_memory))
                capped = True
                note += f" within {gpu_memory / GiB:g} GiB"
            except (TypeError, AttributeError, ValueError) as exc:
                note += f" (no memory cap: {exc})"
        try:
            t = common.median_time(lambda: astra.algorithm.run(aid), reps=reps, warmup=1 if reps > 1 else 0)
            return t, note
        finally:
            if capped:
                astra.set_gpu_index(0, memory=0)
            astra.algorithm.delete(aid)
            data.delete([pid, vid])


def pinned_bandwidth(nbytes: int = GiB // 2) -> tuple[float, float]:
    """Measured pinned host->device and device->host bandwidth (bytes/s)."""
    import cupy as cp

    mem = cp.cuda.alloc_pinned_memory(nbytes)
    host = np.frombuffer(mem, np.uint8, nbytes)
    host[:] = 1
    dev = cp.empty(nbytes, cp.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    h2d = common.median_time(lambda: dev.set(host, stream=stream), reps=3, sync=stream.synchronize)
    d2h = common.median_time(lambda: dev.get(out=host, stream=stream), reps=3, sync=stream.synchronize)
    del dev, host, mem
    _free()
    return nbytes / h2d, nbytes / d2h


def fresh_write_bandwidth(nbytes: int = 4 * GiB) -> float:
    """Measured rate (bytes/s) at which this process lands data in fresh NumPy
    memory, as a GPU result's download does: a new array's pages written
    from a pinned buffer by one thread per core this process may use (the
    first write of each page is a page fault: on the device hosts this, not
    PCIe, limits how fast a large volume reaches the host)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    import cupyx

    threads = len(os.sched_getaffinity(0))
    source = cupyx.empty_pinned(256 << 20, np.uint8)
    source[:] = 1
    n = source.size

    def fill():
        out = np.empty(nbytes, np.uint8)
        with ThreadPoolExecutor(threads) as pool:
            list(
                pool.map(
                    lambda a: out[a : a + n].__setitem__(Ellipsis, source[: min(n, nbytes - a)]), range(0, nbytes, n)
                )
            )

    return nbytes / common.median_time(fill, reps=3)


# -- running a point ----------------------------------------------------------------------


def _failed(what: str, exc: Exception) -> str:
    """A note for a peer call that raised (leveret's time still stands)."""
    _free()
    return f"{what} failed: {type(exc).__name__}: {exc}"[:200]


class Sweep:
    """Runs points and collects rows."""

    def __init__(self, astra: Astra, gpu_bytes: int, host_bytes: int):
        self.astra = astra
        self.gpu_bytes, self.host_bytes = gpu_bytes, host_bytes
        self.rows: list[dict] = []
        self._names = None
        self._bandwidth = None

    # rows
    def add(self, point, op, leveret_s=None, astra_s=None, *, note="", status="ok", reason="", **extra):
        ratio = leveret_s / astra_s if leveret_s and astra_s else None
        row = {
            "family": point["family"],
            "axis": point["axis"],
            "op": op,
            "params": point["params"],
            "derived": point.get("derived", {}),
            "key": point_key(point["family"], op, point["params"]),
            "leveret_s": leveret_s,
            "astra_s": astra_s,
            "ratio": ratio,
            "status": status,
            "reason": reason,
            "note": note,
            **extra,
        }
        if leveret_s is not None:  # the fields bench/common.py's table() reads
            row.update(problem=f"{op}: {point_label(point)}", code="leveret", seconds=leveret_s, GU_per_s=None)
        self.rows.append(row)
        print(format_row(row), flush=True)
        return row

    @staticmethod
    def reps(point, default: int) -> int:
        """Timed calls after the warm-up: one on a long point (its calls last seconds)."""
        return 1 if work_seconds(point) > LONG_POINT else default

    def fits(self, point, op) -> str:
        """'' if ``op`` fits the memory here, else the reason."""
        gpu, host = needs(point, op)
        if gpu > self.gpu_bytes:
            return f"needs ~{gpu / GiB:.1f} GiB of GPU memory, {self.gpu_bytes / GiB:.1f} GiB free"
        if host > self.host_bytes:
            return f"needs ~{host / GiB:.1f} GiB of host memory, {self.host_bytes / GiB:.1f} GiB available"
        return ""

    def run(self, point, done=frozenset()):
        """Measure the point's operations whose keys are not in ``done``."""
        family = point["family"]
        runner = {
            "cone": self.cone,
            "fdk": self.fdk,
            "fdk-streamed": self.fdk_streamed,
            "parallel": self.parallel,
            "radon3d": self.radon3d,
        }[family]
        todo = []
        for op in missing_ops(point, done):
            reason = self.fits(point, op)
            if reason:
                self.add(point, op, status="skipped", reason=reason)
            else:
                todo.append(op)
        if not todo:
            return
        n0 = len(self.rows)
        try:
            runner(point, todo)
        except Exception as exc:  # a point that fails is a row, the sweep goes on
            done = {r["op"] for r in self.rows[n0:]}
            for op in todo:
                if op not in done:
                    self.add(point, op, status="failed", reason=f"{type(exc).__name__}: {exc}"[:300])
        finally:
            _free()

    def cone(self, point, ops):
        import cupy as cp
        import leveret

        g, vol, point["derived"] = cone_problem(point["params"])
        n_views, n_rows, n_cols = g.projection_shape
        a_fp = a_bp = a_sirt = a_cgls = None
        a_note = self.astra.reason
        if self.astra.astra is not None:  # only the calls that ``ops`` compare with
            try:
                pg, vg = common.astra_cone_geometry(g, vol)
                if any(op.startswith("A") for op in ops):
                    a_fp, a_bp = self.astra.fp_bp(
                        pg,
                        vg,
                        vol.shape,
                        (n_rows, n_views, n_cols),
                        reps=self.reps(point, 2),
                        fp=any(op.startswith("A ") for op in ops),
                    )
                if any(op.startswith("SIRT") for op in ops):
                    a_sirt = self.astra.iteration("SIRT3D_CUDA", pg, vg, (n_rows, n_views, n_cols))
                if any(op.startswith("CGLS") for op in ops):
                    a_cgls = self.astra.iteration("CGLS3D_CUDA", pg, vg, (n_rows, n_views, n_cols))
                a_note = ""
            except Exception as exc:  # ASTRA's failure leaves leveret's rows standing
                a_note = _failed("ASTRA", exc)
        rng = cp.random.default_rng(0)
        for model in ("joseph", "siddon"):
            mine = [op for op in ops if op.endswith(" " + model)]
            if not mine:
                continue
            A = leveret.Projector(g, vol, model=model, backend="cuda", **projector_options())
            note = f"structured={A.structured}" + (f"; {a_note}" if a_note else "")
            x = rng.random(vol.shape, dtype=cp.float32)
            y = cp.empty(g.projection_shape, cp.float32)
            reps = self.reps(point, 2)
            t_a = common.median_time(lambda: A(x, out=y), reps=reps, sync=_sync)  # A.T's input and A.T / A
            if f"A {model}" in mine:
                self.add(point, f"A {model}", t_a, a_fp, note=note)
            back = cp.empty(vol.shape, cp.float32)
            if f"A.T {model}" in mine:
                t_at = common.median_time(lambda: A.T(y, out=back), reps=reps, sync=_sync)
                extra = {}
                if "transpose" in projector_options():  # the other transpose and the voxel-driven
                    other = "scatter" if A.transpose == "gather" else "gather"  # back-projection, for the rules
                    try:
                        B = leveret.Projector(g, vol, model=model, backend="cuda", transpose=other)
                        extra[f"at_{other}_s"] = common.median_time(lambda: B.T(y, out=back), reps=reps, sync=_sync)
                        del B
                    except ValueError:
                        pass
                    extra[f"at_{A.transpose}_s"] = t_at
                    if model == "joseph":
                        bp = leveret.ConeBackprojection(g, vol, backend="cuda")
                        extra["cone_bp_s"] = common.median_time(lambda: bp(y, back), reps=reps, sync=_sync)
                        del bp
                self.add(point, f"A.T {model}", t_at, a_bp, note=note, at_over_a=t_at / t_a, **extra)
            b = y
            del x, back
            if f"SIRT {model}" in mine:
                t = iteration_time(lambda n: leveret.sirt(b, A, n), 1, _sync)
                self.add(point, f"SIRT {model}", t, a_sirt, note=note)
            if f"CGLS {model}" in mine:
                t = iteration_time(lambda n: leveret.cgls(b, A, n), 1, _sync)
                self.add(point, f"CGLS {model}", t, a_cgls, note=note)
            del A, b, y
            _free()
        if "A.T unmatched" in ops:  # the unmatched adjoint: ASTRA's BP3D is voxel-driven too
            V = leveret.Projector(g, vol, model="joseph", backend="cuda", adjoint="unmatched")
            y = rng.random(g.projection_shape, dtype=cp.float32)
            back = cp.empty(vol.shape, cp.float32)
            t = common.median_time(lambda: V.T(y, out=back), reps=self.reps(point, 2), sync=_sync)
            self.add(
                point,
                "A.T unmatched",
                t,
                a_bp,
                note="Projector(adjoint='unmatched'): per-pixel weights, then "
                "ConeBackprojection" + (f"; {a_note}" if a_note else ""),
            )
            del V, y, back
            _free()

    def fdk(self, point, ops):
        import cupy as cp
        import leveret

        g, vol, point["derived"] = cone_problem(point["params"])
        n_views, n_rows, n_cols = g.projection_shape
        pg = vg = None
        if self.astra.astra is not None:
            pg, vg = common.astra_cone_geometry(g, vol)
        if "cone BP" in ops:
            proj = cp.random.random(g.projection_shape, dtype=cp.float32)
            out = cp.empty(vol.shape, cp.float32)
            op = leveret.ConeBackprojection(g, vol, backend="cuda")
            t = common.median_time(lambda: op(proj, out), reps=self.reps(point, 3), sync=_sync)
            del proj, out
            _free()
            a, a_note = None, self.astra.reason
            if pg is not None:
                try:
                    _, a = self.astra.fp_bp(
                        pg, vg, vol.shape, (n_rows, n_views, n_cols), reps=self.reps(point, 3), fp=False
                    )
                    a_note = "ASTRA direct_BP3D"
                except Exception as exc:
                    a_note = _failed("ASTRA direct_BP3D", exc)
            self.add(point, "cone BP", t, a, note=f"kernel {op.last_kernel}; device arrays; {a_note}")
        if "FDK" in ops:
            host = np.random.default_rng(0).random(g.projection_shape, dtype=np.float32)
            t = common.median_time(
                lambda: leveret.fdk(host, g, vol, backend="cuda"), reps=self.reps(point, 2), sync=_sync
            )
            del host
            _free()
            a, a_note = None, self.astra.reason
            if pg is not None:
                short = {"ShortScan": True} if point["params"]["scan"] == "short" else None
                try:
                    a, a_note = self.astra.algorithm_host(
                        "FDK_CUDA",
                        pg,
                        vg,
                        (n_rows, n_views, n_cols),
                        vol.shape,
                        reps=self.reps(point, 2),
                        options=short,
                    )
                    a_note = "ASTRA " + a_note
                except Exception as exc:
                    a_note = _failed("ASTRA FDK_CUDA", exc)
            self.add(point, "FDK", t, a, note=f"NumPy in and out (leveret allocates its output); {a_note}")

    def fdk_streamed(self, point, ops):
        import cupy as cp
        import leveret
        from leveret.cuda.devices import DeviceSet

        g, vol, point["derived"] = cone_problem(point["params"])
        n_views, n_rows, n_cols = g.projection_shape
        budget = int(point["params"]["budget_gib"] * GiB)
        a_note = self.astra.reason
        if self._bandwidth is None:
            self._bandwidth = pinned_bandwidth() + (fresh_write_bandwidth(),)
        h2d, d2h, fresh = self._bandwidth
        out_rate = min(d2h, fresh)
        # the compute part of the bound: FDK of the whole volume in one piece on device arrays
        proj_d = cp.random.random(g.projection_shape, dtype=cp.float32)
        t_compute = common.median_time(lambda: leveret.fdk(proj_d, g, vol, backend="cuda"), reps=1, sync=_sync)
        del proj_d
        _free()
        host = np.random.default_rng(0).random(g.projection_shape, dtype=np.float32)
        device = cp.cuda.Device().id
        calls = {
            "FDK streamed": {},  # fdk's default; and two workers sharing the GPU asked for (leveret.cuda.devices)
            "FDK streamed, 2 workers": {"devices": DeviceSet([device, device], shared=True)},
        }
        times, stages, first, calls_s = {}, {}, {}, {}
        for op in ops:
            split: dict = {}  # the last timed call's stages (fdk's stats: seconds in transfers and compute)

            def run():
                split.clear()
                leveret.fdk(host, g, vol, backend="cuda", gpu_memory=budget, stats=split, **calls[op])

            try:  # the median of calls after a warm-up (the host's state moves them by up to 20 %);
                # the first call (pinning, fresh pages) reported beside it
                first[op] = common.median_time(run, reps=1, warmup=0, sync=_sync)
                calls_s[op] = [common.median_time(run, reps=1, warmup=0, sync=_sync) for _ in range(STREAMED_REPS)]
                times[op] = statistics.median(calls_s[op])
                stages[op] = {k: round(float(x), 4) for k, x in split.items()}
            except Exception as exc:  # the other call's row still stands
                self.add(point, op, status="failed", reason=f"{type(exc).__name__}: {exc}"[:300])
            _free()
        del host
        # the same yardstick for both calls: the one-GPU plan's uploads
        bytes_in = streamed_input_bytes(g, vol, budget)
        bound = bytes_in / h2d + 4 * vol.size / out_rate + t_compute
        a = None
        if self.astra.astra is not None:
            try:
                pg, vg = common.astra_cone_geometry(g, vol)
                a, a_note = self.astra.algorithm_host(
                    "FDK_CUDA", pg, vg, (n_rows, n_views, n_cols), vol.shape, reps=1, gpu_memory=budget
                )
                a_note = "ASTRA " + a_note
            except Exception as exc:
                a_note = _failed("ASTRA FDK_CUDA", exc)
        for op, t in times.items():
            self.add(
                point,
                op,
                t,
                a,
                bound_s=bound,
                over_bound=t / bound,
                stages=stages[op],
                first_s=first[op],
                first_over_bound=first[op] / bound,
                calls_s=calls_s[op],
                note=(
                    f"calls {min(calls_s[op]):.2f}-{max(calls_s[op]):.2f} s, first call {first[op]:.2f} s; "
                    f"bound {bound:.2f} s = {bytes_in / 1e9:.2f} GB in at {h2d / 1e9:.1f} GB/s + "
                    f"{4 * vol.size / 1e9:.2f} GB out at {out_rate / 1e9:.1f} GB/s (device->host "
                    f"{d2h / 1e9:.1f}, fresh host pages {fresh / 1e9:.1f}) + FDK in one piece "
                    f"{t_compute:.2f} s; {a_note}"
                ),
            )

    def parallel(self, point, ops):
        import cupy as cp
        import leveret

        if self._names is None:
            self._names = precision_names()
        p = point["params"]
        g, vol, roi = parallel_problem(p)
        prec = p["precision"]
        point["derived"] = {"roi": list(roi) if roi else None}
        a_note = self.astra.reason
        if "parallel BP" in ops:
            op = leveret.ParallelBackprojection(g, vol, backend="cuda", roi=roi, precision=self._names[("op", prec)])
            sinos = cp.random.random((p["slices"], p["angles"], p["width"]), dtype=cp.float32)
            out = cp.empty((p["slices"],) + op.out_shape, cp.float32)
            t = common.median_time(lambda: op(sinos, out=out), reps=self.reps(point, 3), sync=_sync)
            del sinos, out
            _free()
            a = None
            if self.astra.astra is not None:
                astra = self.astra.astra
                vg = astra.create_vol_geom(*common.astra_volume_window(vol, roi))
                pg = astra.create_proj_geom("parallel3d", 1.0, 1.0, p["slices"], p["width"], g.angles)
                ny, nx = op.out_shape
                try:
                    _, a = self.astra.fp_bp(
                        pg,
                        vg,
                        (p["slices"], ny, nx),
                        (p["slices"], p["angles"], p["width"]),
                        reps=self.reps(point, 3),
                        fp=False,
                    )
                    a_note = "ASTRA direct_BP3D (parallel3d)"
                except Exception as exc:
                    a_note = _failed("ASTRA direct_BP3D", exc)
            self.add(point, "parallel BP", t, a, note=f"kernel {op.last_kernel}; device arrays; {a_note}")
        if "FBP" in ops:
            proj = np.random.default_rng(0).random(g.projection_shape, dtype=np.float32)
            t = common.median_time(
                lambda: leveret.fbp(proj, g, roi=roi, precision=self._names[("fbp", prec)]),
                reps=self.reps(point, 2),
                sync=_sync,
            )
            del proj
            a = None
            if self.astra.astra is not None:
                astra = self.astra.astra
                ny, nx = (roi[2], roi[3]) if roi else (vol.ny, vol.nx)
                window = common.astra_volume_window(vol, roi)
                vg = astra.create_vol_geom(ny, nx, *window[3:7])
                pg = astra.create_proj_geom("parallel", 1.0, p["width"], g.angles)
                # FBP_CUDA is 2D: one call per slice, its median time times the slices
                try:
                    t_slice, _ = self.astra.algorithm_host(
                        "FBP_CUDA", pg, vg, (p["angles"], p["width"]), (ny, nx), reps=3
                    )  # one slice: short
                    a = p["slices"] * t_slice
                    a_note = f"ASTRA FBP_CUDA: one slice's median time x {p['slices']}"
                except Exception as exc:
                    a_note = _failed("ASTRA FBP_CUDA", exc)
            self.add(point, "FBP", t, a, note=f"NumPy in and out; {a_note}")

    def radon3d(self, point, ops):
        import leveret

        g, vol = radon_problem(point["params"])
        proj = np.random.default_rng(0).random(g.projection_shape).astype(np.float32)
        t = common.median_time(
            lambda: leveret.radon3d_fbp(proj, g, vol, backend="cuda"), reps=self.reps(point, 3), sync=_sync
        )
        self.add(point, "radon3d FBP", t, None, note="NumPy in and out; no ASTRA counterpart")


def streamed_input_bytes(g, vol, budget: int) -> int:
    """Projection bytes FDK uploads under ``budget``: each z-slab its detector rows
    (leveret.algorithms.fdk's plan where it can be asked, else every row once)."""
    try:
        from leveret.algorithms.fdk import _plan_slabs
        from leveret.algorithms.fdk_weights import rows_seen

        slabs, _ = _plan_slabs(g, vol, "cuda", budget, None)
    except (ImportError, TypeError, ValueError):
        return 4 * int(np.prod(g.projection_shape))
    total = 0
    for k0, k1 in slabs:
        rows = rows_seen(g, vol.slab(k0, k1))
        if rows is not None:
            total += 4 * g.n_views * (rows[1] - rows[0]) * g.n_cols
    return total


# -- the report ------------------------------------------------------------------------------


def _ms(s) -> str:
    return f"{s * 1e3:10.1f}" if s is not None else f"{'-':>10s}"


def format_row(row: dict) -> str:
    ratio = f"{row['ratio']:6.2f}" if row.get("ratio") is not None else f"{'-':>6s}"
    at = f"{row['at_over_a']:5.2f}" if row.get("at_over_a") is not None else f"{'':5s}"
    label = point_label(row) if "params" in row else ""
    text = f"{row['op']:13s} {label:62s} {_ms(row['leveret_s'])} {_ms(row['astra_s'])} {ratio} {at}"
    if row["status"] != "ok":
        text += f"  [{row['status']}: {row['reason']}]"
    elif row.get("over_bound") is not None:
        text += f"  {row['over_bound']:.2f} x bound"
        if row.get("first_over_bound") is not None:
            text += f" (first call {row['first_over_bound']:.2f} x)"
    return text


def header() -> str:
    return f"{'operation':13s} {'point':62s} {'leveret ms':>10s} {'ASTRA ms':>10s} {'ratio':>6s} {'AT/A':>5s}"


def flags(row: dict) -> list[str]:
    """Why a row is flagged: slower than ASTRA, or A.T more than twice A."""
    out = []
    if row.get("ratio") is not None and row["ratio"] > SLOWER_THAN_ASTRA:
        out.append(f"{row['ratio']:.2f}x ASTRA's time")
    if row.get("at_over_a") is not None and row["at_over_a"] > TRANSPOSE_LIMIT:
        out.append(f"A.T = {row['at_over_a']:.2f} x A")
    return out


def summarize(rows: list[dict]) -> dict:
    """Per operation: points run, worst and median leveret/ASTRA ratio, worst A.T/A;
    and the flagged rows."""
    per_op: dict = {}
    for row in rows:
        if row["status"] != "ok":
            continue
        s = per_op.setdefault(row["op"], {"points": 0, "ratios": [], "at_over_a": []})
        s["points"] += 1
        if row.get("ratio") is not None:
            s["ratios"].append(row["ratio"])
        if row.get("at_over_a") is not None:
            s["at_over_a"].append(row["at_over_a"])
    summary = {}
    for op, s in per_op.items():
        summary[op] = {
            "points": s["points"],
            "worst_ratio": max(s["ratios"]) if s["ratios"] else None,
            "median_ratio": statistics.median(s["ratios"]) if s["ratios"] else None,
            "worst_at_over_a": max(s["at_over_a"]) if s["at_over_a"] else None,
        }
    flagged = [(row, flags(row)) for row in rows if row["status"] == "ok" and flags(row)]
    return {
        "per_op": summary,
        "flagged": [{"key": r["key"], "why": why} for r, why in flagged],
        "skipped": sum(r["status"] == "skipped" for r in rows),
        "failed": sum(r["status"] == "failed" for r in rows),
    }


def summary_text(summary: dict) -> str:
    f = lambda x: f"{x:8.2f}" if x is not None else f"{'-':>8s}"  # noqa: E731
    lines = [f"{'operation':13s} {'points':>6s} {'worst':>8s} {'median':>8s} {'AT/A max':>8s}   (leveret / ASTRA)"]
    for op, s in summary["per_op"].items():
        lines.append(
            f"{op:13s} {s['points']:6d} {f(s['worst_ratio'])} {f(s['median_ratio'])} {f(s['worst_at_over_a'])}"
        )
    lines.append(f"{len(summary['flagged'])} flagged, {summary['skipped']} skipped, {summary['failed']} failed")
    for item in summary["flagged"]:
        lines.append(f"  FLAG {item['key']}: {'; '.join(item['why'])}")
    return "\n".join(lines)


def compare(
    rows: list[dict], stored: list[dict], tolerance: float = REGRESSION, floor: float = REGRESSION_FLOOR
) -> list[dict]:
    """Rows whose leveret time exceeds the stored row of the same key by more than
    ``tolerance`` (a fraction) and by more than ``floor`` seconds."""
    before = {r["key"]: r["leveret_s"] for r in stored if r.get("status") == "ok" and r.get("leveret_s") and "key" in r}
    out = []
    for row in rows:
        old = before.get(row["key"])
        if (
            row["status"] == "ok"
            and old
            and row["leveret_s"] > old * (1.0 + tolerance)
            and row["leveret_s"] - old > floor
        ):
            out.append(
                {"key": row["key"], "stored_s": old, "now_s": row["leveret_s"], "slower": row["leveret_s"] / old - 1.0}
            )
    return out


# -- the plot --------------------------------------------------------------------------------


def _axis_value(row: dict, axis: str):
    """The row's value on ``axis``: the half-angle the scan came out with (the base
    point's is set by its distances), a streamed point's volume and budget."""
    if axis == "half_angle" and row.get("derived", {}).get("half_angle") is not None:
        return row["derived"]["half_angle"]
    if axis == "budget":
        p = row["params"]
        return f"{p['n']}^2x{p['nz']}\n{p['budget_gib']:g} GiB"
    return row["params"].get(axis)


def plot(rows: list[dict], path: str) -> None:
    """One panel per (family, swept axis): leveret / ASTRA per operation over the axis'
    values, the base point included; a dashed line at 1 (equal time)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [
        dict(r, op=f"{r['op']} / bound", ratio=r["over_bound"])
        for r in rows
        if r["status"] == "ok" and r.get("over_bound") is not None
    ]
    ok += [r for r in rows if r["status"] == "ok" and r.get("ratio") is not None]
    panels = sorted({(r["family"], r["axis"]) for r in ok if r["axis"] not in ("base", "corner")})
    if not panels:
        print(f"no ratios to plot; {path} not written")
        return
    cols = min(4, len(panels))
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.2 * nrows), squeeze=False)
    for ax, (family, axis) in zip(axes.flat, panels):
        members = [r for r in ok if r["family"] == family and r["axis"] in ("base", axis)]
        values = sorted(
            {_axis_value(r, axis) for r in members},
            key=lambda v: (isinstance(v, str), str(v) if isinstance(v, str) else v),
        )
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        pos = {v: (v if numeric else i) for i, v in enumerate(values)}
        for op in sorted({r["op"] for r in members}):
            pts = sorted((pos[_axis_value(r, axis)], r["ratio"]) for r in members if r["op"] == op)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=op, ms=4)
        ax.axhline(1.0, color="k", ls="--", lw=0.8)
        ax.set_yscale("log")
        if numeric and axis in ("n", "views", "slices", "angles", "width", "dirs"):
            ax.set_xscale("log", base=2)
        ax.set_title(f"{family}: {axis}", fontsize=9)
        if not numeric:
            ax.set_xticks(list(pos.values()), [str(v) for v in values])
        ax.set_ylabel("leveret / ASTRA time" if family != "fdk-streamed" else "leveret / (ASTRA, bound)", fontsize=8)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


# -- the consistency check of ASTRA's geometry ------------------------------------------------


def check_cases(n: int) -> list[tuple[str, dict]]:
    """--check's geometries: a circular scan of n^3 from 90 views and its variants."""
    cases = []
    for name, over in (
        ("base", {}),
        ("short scan", {"scan": "short"}),
        ("offset 1/4", {"offset": 0.25}),
        ("wobble", {"trajectory": "wobble"}),
        ("half-angle 5", {"half_angle": 5.0}),
    ):
        p = dict(n=n, nz=n, views=90, sampling=1.0, half_angle=None, scan="full", offset=0.0, trajectory="circular")
        p.update(over)
        cases.append((name, p))
    return cases


def check(quick_n: int = 96) -> int:
    """ASTRA's forward projection of a phantom against leveret's Joseph projector on
    the same geometry (base, short scan, offset detector, non-circular), both on
    the GPU. Passes when ASTRA matches best without any flip of the volume or the
    detector and its relative difference is small (the two interpolate
    differently). Returns the exit status."""
    import astra
    import astra.experimental  # noqa: F401
    import cupy as cp
    import leveret

    n = quick_n
    status = 0
    zz, yy, xx = np.mgrid[:n, :n, :n] / n - 0.5
    phantom = np.zeros((n, n, n), np.float32)  # asymmetric: an off-centre ball, a box, a rod
    phantom[(xx - 0.15) ** 2 + (yy + 0.1) ** 2 + (zz - 0.05) ** 2 < 0.15**2] = 1.0
    phantom[(np.abs(xx + 0.2) < 0.08) & (np.abs(yy - 0.2) < 0.05) & (np.abs(zz + 0.15) < 0.1)] += 2.0
    phantom[(np.abs(xx) < 0.03) & (np.abs(yy - 0.05) < 0.03) & (zz > 0.1)] += 3.0
    print(f"{'geometry':32s} {'rel. diff':>10s} {'scale':>8s}  best variant")
    for name, p in check_cases(n):
        g, vol, _ = cone_problem(p)
        A = leveret.Projector(g, vol, model="joseph", backend="cuda")
        ref = cp.asnumpy(A(cp.asarray(phantom)))  # (views, rows, cols)
        pg, vg = common.astra_cone_geometry(g, vol)
        variants = {
            "as is": phantom,
            "volume x flipped": phantom[:, :, ::-1],
            "volume y flipped": phantom[:, ::-1, :],
            "volume z flipped": phantom[::-1],
        }
        errors = {}
        scale = None
        for label, vol_arr in variants.items():
            sid = astra.data3d.create("-proj3d", pg, 0)
            vid = astra.data3d.create("-vol", vg, np.ascontiguousarray(vol_arr))
            cfg = astra.astra_dict("FP3D_CUDA")
            cfg["ProjectionDataId"], cfg["VolumeDataId"] = sid, vid
            aid = astra.algorithm.create(cfg)
            astra.algorithm.run(aid)
            out = np.swapaxes(astra.data3d.get(sid), 0, 1)  # to (views, rows, cols)
            astra.algorithm.delete(aid)
            astra.data3d.delete([sid, vid])
            for det, arr in (
                ("", out),
                (", detector u flipped", out[:, :, ::-1]),
                (", detector v flipped", out[:, ::-1, :]),
            ):
                s = float((arr * ref).sum() / max((arr * arr).sum(), 1e-30))
                errors[label + det] = (float(np.linalg.norm(s * arr - ref) / np.linalg.norm(ref)), s)
                if label == "as is" and not det:
                    scale = s
        best = min(errors, key=lambda k: errors[k][0])
        err = errors["as is"][0]
        ok = best == "as is" and err < 0.05
        status |= 0 if ok else 1
        print(f"{name:32s} {err:10.4f} {scale:8.4f}  {best} ({errors[best][0]:.4f})  {'ok' if ok else 'MISMATCH'}")
    print("check:", "passed" if status == 0 else "FAILED (the vectors or the volume window do not match)")
    return status


# -- main --------------------------------------------------------------------------------------


def dry_run(pts, gpu_bytes, host_bytes) -> None:
    print(f"{'#':>3s} {'family':12s} {'axis':10s} {'point':62s} {'GPU GiB':>8s} {'host GiB':>8s} {'est s':>7s}")
    total = 0.0
    for i, point in enumerate(pts):
        gpu = max(needs(point, op)[0] for op in OPS[point["family"]])
        host = max(needs(point, op)[1] for op in OPS[point["family"]])
        est = estimate_seconds(point)
        total += est
        where = []
        for op in OPS[point["family"]]:
            g_, h_ = needs(point, op)
            if g_ > gpu_bytes or h_ > host_bytes:
                where.append(f"{op} skipped")
        print(
            f"{i:3d} {point['family']:12s} {point['axis']:10s} {point_label(point):62s} {gpu / GiB:8.1f} "
            f"{host / GiB:8.1f} {est:7.1f}  {'; '.join(where)}"
        )
    print(f"{len(pts)} points, estimated {total / 60:.1f} min in all (rough: the run recalibrates)")


def missing_ops(point: dict, done) -> list[str]:
    """The point's operations whose rows are not among the keys ``done``."""
    return [op for op in OPS[point["family"]] if point_key(point["family"], op, point["params"]) not in done]


def part_of(pts: list[dict], part: int, parts: int, done=frozenset()) -> list[dict]:
    """The points of part ``part`` (0-based) of ``parts``: each point, in order, goes
    to the part with the least estimated time so far, so that runs on several GPUs
    end together; the same list always splits the same way."""
    load = [0.0] * parts
    mine = []
    for point in pts:
        k = min(range(parts), key=lambda i: (load[i], i))
        load[k] += estimate_seconds(point, missing_ops(point, done))
        if k == part:
            mine.append(point)
    return mine


def resumed_rows(path: str, meta: dict) -> list[dict]:
    """The rows of a stored run to keep (--resume): its measured points, all
    operations of a point measured ("ok" or "invalid"); refused where that
    run's GPU is another model than this one's."""
    with open(path) as fh:
        stored = json.load(fh)

    def gpu(m):
        names = [d.get("name") for d in m.get("devices", []) if d.get("available")]
        return names[0] if names else None

    if gpu(stored["meta"]) != gpu(meta):
        raise SystemExit(f"--resume: {path} was measured on {gpu(stored['meta'])}, this is {gpu(meta)}")
    by_point: dict = {}
    for row in stored["results"]:
        by_point.setdefault((row["family"], json.dumps(row["params"], sort_keys=True)), []).append(row)
    kept = []
    for rows in by_point.values():
        if all(r["status"] in ("ok", "invalid") for r in rows):
            kept.extend(rows)
    return kept


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (a minute)")
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds: start no point after this much wall time (or whose estimate exceeds "
        "what is left), and record what ran",
    )
    parser.add_argument(
        "--families", default=None, help="comma-separated subset of cone,fdk,fdk-streamed,parallel,radon3d"
    )
    parser.add_argument("--no-astra", action="store_true", help="leave ASTRA out")
    parser.add_argument("--out", default=None, help="write the rows and the summary as JSON here")
    parser.add_argument("--plot", default=None, help="write a PNG of leveret / ASTRA over the swept axes here")
    parser.add_argument(
        "--compare",
        default=None,
        help="a stored bench_sweep.json: flag every point more than 10 %% (and 0.5 ms) slower than there",
    )
    parser.add_argument("--strict", action="store_true", help="with --compare: exit 1 on any regression")
    parser.add_argument(
        "--dry-run", action="store_true", help="list the points with memory and time estimates; needs no GPU"
    )
    parser.add_argument(
        "--gpu-memory",
        type=float,
        default=None,
        help="GiB of GPU memory to plan for (default: what is free; --dry-run: 80)",
    )
    parser.add_argument(
        "--host-memory",
        type=float,
        default=None,
        help="GiB of host memory to plan for (default: what is available; --dry-run: 120)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="only compare ASTRA's and leveret's forward projections of a phantom "
        "(checks the ASTRA vectors); needs a GPU and ASTRA",
    )
    parser.add_argument(
        "--replot", default=None, metavar="JSON", help="only draw --plot (and the summary) from a stored result file"
    )
    parser.add_argument(
        "--resume",
        action="append",
        default=[],
        metavar="JSON",
        help="a result file of an earlier run on the same GPU model: keep its measured "
        "points, run the others (--out then holds both); repeat it to merge parts",
    )
    parser.add_argument(
        "--part",
        default=None,
        metavar="K/N",
        help="run only part K (1 to N) of the points left, split by estimated time, e.g. "
        "one part per GPU with CUDA_VISIBLE_DEVICES; merge with --resume",
    )
    args = parser.parse_args(argv)
    part = None
    if args.part:
        try:
            k, n = (int(x) for x in args.part.split("/"))
        except ValueError:
            k = n = 0
        if not 1 <= k <= n:
            parser.error(f"--part: expected K/N with 1 <= K <= N, got {args.part!r}")
        part = (k - 1, n)

    if args.check:
        return check()
    if args.replot:
        with open(args.replot) as fh:
            rows = json.load(fh)["results"]
        print(summary_text(summarize(rows)))
        if args.plot:
            plot(rows, args.plot)
        return 0
    pts = points(args.quick)
    if args.families:
        keep = {f.strip() for f in args.families.split(",")}
        bad = keep - set(OPS)
        if bad:
            parser.error(f"--families: unknown {sorted(bad)}; expected some of {sorted(OPS)}")
        pts = [p for p in pts if p["family"] in keep]
    if args.dry_run:
        gpu = (args.gpu_memory or 80.0) * GiB
        host = (args.host_memory or 120.0) * GiB
        dry_run(pts, gpu, host)
        return 0

    from leveret.cuda import gpu_free_bytes
    from leveret.resources import host_available_bytes

    meta = common.metadata(with_devices=True)
    gpu = args.gpu_memory * GiB if args.gpu_memory else 0.9 * gpu_free_bytes()
    host = args.host_memory * GiB if args.host_memory else 0.8 * host_available_bytes()
    astra = Astra(not args.no_astra)
    if astra.reason:
        print(astra.reason)
    sweep = Sweep(astra, int(gpu), int(host))
    done = set()
    for path in args.resume:  # parts measured on several GPUs share the rows they resumed from
        kept = [row for row in resumed_rows(path, meta) if row["key"] not in done]
        sweep.rows.extend(kept)
        done |= {row["key"] for row in kept}
        print(f"--resume: {len(kept)} measured rows kept from {path}")
    print(header())
    start = time.perf_counter()
    spent_est = spent = 0.0
    pts = [p for p in pts if missing_ops(p, done)]
    if part is not None:
        pts = part_of(pts, *part, done=done)
        print(f"--part {args.part}: {len(pts)} points")
    remaining_est = sum(estimate_seconds(p, missing_ops(p, done)) for p in pts)
    for i, point in enumerate(pts):
        est = estimate_seconds(point, missing_ops(point, done))
        elapsed = time.perf_counter() - start
        scale = spent / spent_est if spent_est else 1.0
        if args.budget is not None and (elapsed >= args.budget or est * scale > args.budget - elapsed):
            reason = (
                "budget spent"
                if elapsed >= args.budget
                else f"estimated {est * scale:.0f} s, budget left {args.budget - elapsed:.0f} s"
            )
            for op in missing_ops(point, done):
                sweep.add(point, op, status="skipped", reason=f"--budget: {reason}")
            remaining_est -= est
            continue
        print(
            f"[{i + 1}/{len(pts)}] {point['family']} {point['axis']}: {point_label(point)}  "
            f"(elapsed {elapsed:.0f} s, ETA {remaining_est * scale:.0f} s)",
            flush=True,
        )
        t0 = time.perf_counter()
        sweep.run(point, done)
        if args.out:  # after every point: a run cut short keeps what it measured
            common.RESULTS[:] = sweep.rows
            common.write_results(args.out, meta)
        spent += time.perf_counter() - t0
        spent_est += est
        remaining_est -= est
    print(f"\nsweep: {time.perf_counter() - start:.0f} s")
    summary = summarize(sweep.rows)
    print(summary_text(summary))
    regressions = []
    if args.compare:
        with open(args.compare) as fh:
            regressions = compare(sweep.rows, json.load(fh)["results"])
        print(f"{len(regressions)} points more than {REGRESSION:.0%} slower than {args.compare}")
        for r in regressions:
            print(f"  SLOWER {r['key']}: {r['stored_s'] * 1e3:.1f} -> {r['now_s'] * 1e3:.1f} ms (+{r['slower']:.0%})")
    if args.out:
        meta["summary"] = summary
        meta["regressions"] = regressions
        common.RESULTS[:] = sweep.rows
        common.write_results(args.out, meta)
    if args.plot:
        plot(sweep.rows, args.plot)
    return 1 if (args.strict and regressions) else 0


if __name__ == "__main__":
    sys.exit(main())
