"""Test cases several test modules share (tests/ is on pytest's pythonpath:
``from cases import ...``). Each section belongs to one part of the package."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from leveret.geometry import ConeGeometry, ParallelGeometry, VolumeGeometry

# -- Ray-driven projector (leveret.operators.Projector, leveret.cuda.raytrace) -----------------

MODELS = ("siddon", "joseph")


def _projector_geometries():
    """Small, odd-sized set-ups; detectors wider than the volume (rays that miss),
    off-centre grids, non-square voxels, axis shifts, a ray on a voxel face."""
    a7 = np.linspace(0, np.pi, 7, endpoint=False)
    return {
        "parallel2d": (
            ParallelGeometry(a7, 23, det_spacing=1.3, center=10.2),
            VolumeGeometry((13, 17), (0.9, 1.1), center=(0.3, -0.2)),
        ),
        # 0 and 90 degrees with integer spacing: rays run exactly along voxel faces
        "parallel2d_graze": (ParallelGeometry([0.0, np.pi / 2, np.pi / 4], 12), VolumeGeometry((9, 9), 1.0)),
        "parallel3d": (
            ParallelGeometry(
                np.linspace(0, np.pi, 5, endpoint=False),
                15,
                n_rows=6,
                det_spacing=1.3,
                row_spacing=0.8,
                axis_shift=[0.3, -0.2, 0.0, 0.5, 0.1],
            ),
            VolumeGeometry((5, 9, 11), (0.9, 1.1, 1.0)),
        ),
        "cone_circular": (
            ConeGeometry.circular(
                np.linspace(0, 2 * np.pi, 6, endpoint=False), sid=30, sdd=50, n_rows=9, n_cols=13, pixel_size=2.0
            ),
            VolumeGeometry((7, 9, 11), 1.0, center=(0.5, 0.0, -0.3)),
        ),
        "cone_matrices": (
            ConeGeometry.circular(
                np.radians([0, 37, 101, 200]),
                sid=25,
                sdd=40,
                n_rows=8,
                n_cols=11,
                pixel_size=1.7,
                det_offset=(1.5, -0.7),
                det_tilt=(0.05, -0.03, 0.1),
            ),
            VolumeGeometry((6, 7, 9), (1.2, 1.0, 0.8)),
        ),
    }


GEOMETRIES = _projector_geometries()


def _structured_geometries():
    """Circular cone scans (no detector tilt) where the structured path
    applies: odd sizes, rays that miss (detector wider than the volume), views
    along the grid axes, non-cubic voxels, off-centre grids.

    Not here: a column whose xy line lies on a voxel face to rounding. The
    rows of a column share one xy line in the structured path, while the
    general path's per-row directions differ from it in the last bits
    (``M^-1``'s v column has ~1e-17 xy parts after inversion), so such a
    grazing ray can be put in either neighbouring voxel row: a 1e-15
    difference in the geometry, not in the operator."""
    return {
        "cone_small": (
            ConeGeometry.circular(
                np.linspace(0, 2 * np.pi, 6, endpoint=False), sid=30, sdd=50, n_rows=9, n_cols=13, pixel_size=2.0
            ),
            VolumeGeometry((7, 9, 11), 1.0, center=(0.5, 0.0, -0.3)),
        ),
        "cone_axes_wide": (
            ConeGeometry.circular(
                np.array([0.0, np.pi / 2, np.pi / 4, 1.0, 3.0]), sid=40, sdd=60, n_rows=33, n_cols=41, pixel_size=1.5
            ),
            VolumeGeometry((15, 18, 20), (1.5, 1.0, 0.9), center=(-0.13, 0.21, 0.37)),
        ),
        "cone_offset": (
            ConeGeometry.circular(
                np.linspace(0.1, 2 * np.pi, 7, endpoint=False),
                sid=50,
                sdd=90,
                n_rows=40,
                n_cols=37,
                pixel_size=1.0,
                det_offset=(2.5, -3.0),
            ),
            VolumeGeometry((23, 31, 29), 1.0, center=(1.0, -2.0, 0.5)),
        ),
        # rows numbered downwards (z falls as the row grows), 0.56 voxels apart at the axis, two warps of rows
        "cone_rows_down": (
            _rows_down(
                ConeGeometry.circular(
                    np.linspace(0.3, 2 * np.pi, 8, endpoint=False), sid=50, sdd=90, n_rows=45, n_cols=27, pixel_size=1.0
                )
            ),
            VolumeGeometry((21, 17, 19), 1.0, center=(0.4, -0.6, 0.2)),
        ),
    }


def _rows_down(geometry: ConeGeometry) -> ConeGeometry:
    """``geometry`` with its detector rows numbered the other way (row 0 at the top)."""
    n = geometry.n_rows
    flip = np.array([[1.0, 0.0, 0.0], [0.0, -1.0, n - 1.0], [0.0, 0.0, 1.0]])
    return ConeGeometry(flip @ geometry.matrices, n, geometry.n_cols, pixel_size=geometry.pixel_size)


STRUCTURED = _structured_geometries()

# Structured Joseph's gather transpose over several z chunks: 70 z voxels,
# anisotropic voxels, an off-centre detector, ~1.4 rows per voxel, odd nx, ny.
TALL = (
    ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 9, endpoint=False),
        sid=60,
        sdd=90,
        n_rows=61,
        n_cols=29,
        pixel_size=1.4,
        det_offset=(0.7, -1.3),
    ),
    VolumeGeometry((70, 17, 19), (1.0, 1.1, 0.6), center=(0.3, -0.4, 1.1)),
)
# A detector of 6 rows against 200 slices: the rows reach a band of the slices
# (slices ~94-105), which is all the gather transpose visits.
FEW_ROWS = (
    ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 9, endpoint=False),
        sid=60,
        sdd=90,
        n_rows=6,
        n_cols=30,
        pixel_size=1.4,
        det_offset=(0.7, -1.3),
    ),
    VolumeGeometry((200, 15, 17), 1.0, center=(0.2, -0.3, 3.0)),
)
# Rows 0.8 to ~6 per z voxel (voxels near the source see more): the voxel
# transpose's every row window from two rows up (one: the sparse-rows tests).
ROW_WINDOWS = (
    ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 7, endpoint=False), sid=28, sdd=36, n_rows=40, n_cols=100, pixel_size=0.98
    ),
    VolumeGeometry((8, 24, 24), 1.0),
)
# A tall volume (512 slices: one z tile of 16-deep lanes, none beyond nz) whose
# rows, 0.45-0.55 per z voxel, a detector of 300 rows holds with room to spare:
# the gather transpose's 2 x 2 build at 16 z voxels reads every (view, column,
# plane) on its unclamped row path.
UNCLAMPED_ROWS = (
    ConeGeometry.circular(np.linspace(0, 2 * np.pi, 9, endpoint=False), 400, 600, 300, 10, 3.0),
    VolumeGeometry((512, 4, 4), 1.0),
)


def _host(a) -> np.ndarray:
    """A NumPy or CuPy array as float64 NumPy."""
    return np.asarray(a.get() if hasattr(a, "get") else a, np.float64)


def adjoint_scale(lhs, Ax, y) -> float:
    """|<Ax, y>|, or its typical size for random y, ||Ax|| ||y|| / sqrt(m), if
    larger: the rounding errors of A x and of the sum scale with the latter, and
    a random y can make <Ax, y> cancel to a fraction of it (seen: 10x).
    NumPy or CuPy arrays."""
    Ax, y = _host(Ax), _host(y)
    typical = np.linalg.norm(Ax) * np.linalg.norm(y) / np.sqrt(Ax.size)
    return max(abs(lhs), typical)


def assert_close(got, ref, tol) -> None:
    """``got`` (NumPy or CuPy, poisoned with NaN before the call under test)
    has no NaN left and is within ``tol`` times the largest ``|ref|`` of ``ref``."""
    got, ref = _host(got), _host(ref)
    assert not np.isnan(got).any(), "unwritten outputs (NaN poison left)"
    err = np.abs(got - ref).max()
    scale = np.abs(ref).max()
    assert scale > 0
    assert err <= tol * scale, f"max error {err:.3g} > {tol:g} x {scale:.3g}"


# ---------------------------------------------------------------------------------------------
# Cone-beam back-projection (tests/operators/test_cone_backprojection.py,
# tests/cuda/test_backproject_cone_gpu.py)
# ---------------------------------------------------------------------------------------------

# Texture unit (8-bit fractions, corner weight rounded to 1/256) against exact
# bilinear weights on white noise, relative 2-norm: measured 4.3e-3 to 5.6e-3 on
# volumes of 255 voxels or more (a 35-voxel one spreads to 9e-3: too few samples).
TEXTURE_VS_EXACT_RANDOM = 8e-3


def rel(a, b) -> float:
    """Relative 2-norm of a - b against b, in float64."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def scrambled_scan(rng, n_views=70, n_rows=23, n_cols=31, perturb=0.005):
    """Views in random order over a full circle, matrices perturbed entry by
    entry (skewed detectors: 'random matrices'), odd detector sizes."""
    from leveret.geometry import ConeGeometry

    angles = rng.permutation(rng.uniform(0, 2 * np.pi, n_views))
    g = ConeGeometry.circular(angles, sid=60.0, sdd=100.0, n_rows=n_rows, n_cols=n_cols, pixel_size=1.7)
    matrices = g.matrices * (1 + perturb * rng.standard_normal(g.matrices.shape))
    return g, matrices


def smooth_noise(rng, shape):
    """White noise through a 3 x 3 box: the float32 coordinates' rounding
    (~8e-6 relative on raw white noise for these skewed matrices, the global
    kernel's own CPU mirror included) stays well inside 1e-5."""
    w = rng.standard_normal((shape[0], shape[1] + 2, shape[2] + 2))
    return (sum(w[:, a : a + shape[1], b : b + shape[2]] for a in range(3) for b in range(3)) / 3).astype(np.float32)


def parallel_phantom_scan(n, n_rows, n_views):
    """(angles, geometry, float32 projections) of a 3D Shepp-Logan phantom
    over a half circle: the live reconstructor's test scan."""
    from leveret.phantom import shepp_logan_3d

    angles = np.linspace(0, np.pi, n_views, endpoint=False)
    g = ParallelGeometry(angles, n, n_rows)
    return angles, g, shepp_logan_3d(radius=n / 2.2).project(g).astype(np.float32)


def take_frames(iterator, n, timeout=10.0):
    """The next n frames of a live source (skipping the None of quiet spells)."""
    import time

    out, t0 = [], time.monotonic()
    for f in iterator:
        if f is not None:
            out.append(f)
        if len(out) == n:
            return out
        if time.monotonic() - t0 > timeout:
            break
    raise AssertionError(f"got {len(out)} of {n} frames")


def live_scan(kind: str, i: int):
    """Thread ``i``'s own small scan for the live reconstructor's thread tests:
    (geometry, volume, float32 projections, a point (x, y, z) for the slices).
    Parallel beam: a detector, angles and rotation axis of its own; cone beam:
    a circle of its own."""
    from leveret.phantom import shepp_logan_3d

    if kind == "parallel":
        n_cols, n_rows, views = 28 + 4 * i, 6 + i, 30 + 6 * i
        g = ParallelGeometry(
            np.linspace(0, np.pi, views, endpoint=False) + 0.05 * i,
            n_cols,
            n_rows,
            det_spacing=1.0 + 0.1 * i,
            center=(n_cols - 1) / 2 + 0.3 * i,
        )
        vol = g.default_volume()
        radius = 0.4 * n_cols * g.det_spacing
    else:
        n, views = 16, 20 + 4 * i
        g = ConeGeometry.circular(
            np.linspace(0, 2 * np.pi, views, endpoint=False) + 0.1 * i, 60.0 + 5 * i, 120.0, n, n, 2.0
        )
        vol = VolumeGeometry((n, n, n), 1.0)
        radius = 6.0
    proj = shepp_logan_3d(radius=radius).project(g).astype(np.float32)
    point = tuple(vol.coordinates(a)[k] for a, k in (("x", vol.nx // 3), ("y", vol.ny // 2 + 1), ("z", vol.nz // 2)))
    return g, vol, proj, point


def live_job(kind: str, i: int, backend: str, device: int | None = None):
    """A live reconstruction of :func:`live_scan` ``(kind, i)`` from start to
    end, as a function of no arguments: a reconstructor of its own, frames
    in batches (``add`` with and without angles or matrices, ``add_frames``
    with and without), then the slices, and the slices moved to a rotated
    plane through the scan's point; returns the slices by name (the moved
    ones as "moved-xy", ...). ``device``: the GPU the reconstructor is made
    on (then called from a thread whose current GPU may be another one)."""
    import contextlib

    from leveret.live import Frame, LiveReconstructor

    g, vol, proj, point = live_scan(kind, i)
    own = g.angles if kind == "parallel" else g.matrices
    key = "angle" if kind == "parallel" else "matrix"

    def job():
        if device is None:
            made_on = contextlib.nullcontext()
        else:
            import cupy

            made_on = cupy.cuda.Device(device)
        with made_on:
            rec = LiveReconstructor(vol, g, backend=backend, max_batch=8)
        rec.watch_axial([vol.coordinates("z")[1]])
        for b, batch in enumerate(np.array_split(np.arange(len(proj)), 5)):
            if b % 2:
                rec.add(proj[batch], **({} if b == 1 else {"angles" if kind == "parallel" else "matrices": own[batch]}))
            else:
                rec.add_frames([Frame(proj[n], int(n), **{key: None if n % 3 == 0 else own[n]}) for n in batch])
        out = rec.slices()
        rec.watch_orthogonal(point, angles=(25.0, -10.0, 5.0))
        out.update({f"moved-{k}": s for k, s in rec.slices().items()})
        return out

    return job


def _live_feed(rec, proj, angles, batch):
    """One batch as ``add`` (with its indices) or as Frames, alternately, some without their angle."""
    from leveret.live import Frame

    if batch[0] % 2:
        rec.add(proj[batch], angles[batch], indices=batch)
    else:
        rec.add_frames([Frame(proj[n], int(n), angle=None if n % 3 == 0 else angles[n]) for n in batch])


def live_shared_instance_case(backend: str, tol: float = 2e-6, threads: int = 4) -> None:
    """One LiveReconstructor shared by ``threads`` threads that add disjoint
    batches of a scan (``add`` and ``add_frames``, some frames without their
    angle) while another thread moves and reads the slices: its slices equal
    those of the same batches added by one thread within ``tol`` of the peak
    (the batches come in another order, so each slice sums the same float32
    terms in another order), its counters exactly."""
    from leveret.live import LiveReconstructor

    n_views = 64
    angles, g, proj = parallel_phantom_scan(32, 8, n_views)
    vol = g.default_volume()
    point = (vol.coordinates("x")[11], vol.coordinates("y")[19], vol.coordinates("z")[2])
    batches = np.array_split(np.arange(n_views), 16)
    z = [vol.coordinates("z")[1], vol.coordinates("z")[5]]

    serial = LiveReconstructor(vol, g, backend=backend, max_batch=8)
    serial.watch_axial(z)
    for b in batches:
        _live_feed(serial, proj, angles, b)
    expected = serial.slices()  # z0, z1: accumulated batch by batch
    serial.watch_orthogonal(point, angles=(20.0, 0.0, 10.0))
    expected.update(serial.slices())  # xy, xz, yz: recomputed from the stored views

    shared = LiveReconstructor(vol, g, backend=backend, max_batch=8)
    shared.watch_axial(z)
    start = threading.Barrier(threads + 1)
    adding = threading.Event()
    adding.set()

    def add(t):
        start.wait()
        for b in batches[t::threads]:
            _live_feed(shared, proj, angles, b)

    def look():
        """Reads and moves the slices while frames arrive (the viewer's part)."""
        rng = np.random.default_rng(0)
        start.wait()
        moves = 0
        while adding.is_set() or moves < 3:
            shared.watch_orthogonal(tuple(rng.uniform(-5, 5, 3)), angles=tuple(rng.uniform(-30, 30, 3)))
            shared.slices()
            shared.sinogram()
            moves += 1
        return moves

    with ThreadPoolExecutor(threads + 1) as pool:
        viewer = pool.submit(look)
        adders = [pool.submit(add, t) for t in range(threads)]
        try:
            for f in adders:
                f.result()
        finally:
            adding.clear()  # the viewer stops, also when an adder failed
        assert viewer.result() >= 3
    shared.watch_orthogonal(point, angles=(20.0, 0.0, 10.0))
    got = shared.slices()

    assert shared.n_views == serial.n_views == n_views
    assert shared.stats.received == n_views and shared.stats.rejected == 0 and shared.stats.missing == 0
    assert shared.stats.batches == serial.stats.batches
    # the sinogram holds every frame's middle row, in the order the batches came
    rows = lambda r: sorted(map(bytes, r.sinogram()))  # noqa: E731
    assert rows(shared) == rows(serial)
    assert sorted(got) == sorted(expected)
    for name in expected:
        assert np.abs(got[name] - expected[name]).max() < tol * np.abs(expected[name]).max(), name


def live_own_instances_case(jobs, rounds: int = 2) -> None:
    """Jobs (:func:`live_job`) in threads of their own, started together,
    ``rounds`` times each: every result equals the job's one-thread result bit
    for bit where two one-thread runs agree bit for bit (else within ten times
    their spread plus float32 rounding of the peak)."""
    alone = [job() for job in jobs]
    again = [job() for job in jobs]
    barrier = threading.Barrier(len(jobs))

    def run(job):
        barrier.wait()
        return [job() for _ in range(rounds)]

    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(run, jobs))
    for i, runs in enumerate(results):
        for r, got in enumerate(runs):
            assert sorted(got) == sorted(alone[i])
            for name, image in alone[i].items():
                peak = np.abs(image).max()
                spread = np.abs(again[i][name] - image).max()
                bound = spread and 10 * spread + 2.0**-23 * peak
                off = np.abs(got[name] - image).max()
                assert off <= bound, (
                    f"job {i}, round {r}, slice {name}: {off / peak:.3g} of the peak from the "
                    f"one-thread result (one-thread spread {spread / peak:.3g})"
                )


# -- Out of core (leveret.execution.outofcore, leveret.execution.executors) ------------------------------------------

#: CuPy's out-of-memory error as leveret.execution.slab.is_gpu_out_of_memory knows it
#: (by name and module), without CuPy.
CupyOutOfMemoryError = type("OutOfMemoryError", (MemoryError,), {"__module__": "cupy.cuda.memory"})


# -- GPU memory budgets (leveret.fdk's gpu_memory) -------------------------------------------


def gpu_memory_for_arrays(array_bytes: int) -> int:
    """The smallest ``gpu_memory`` that leaves ``array_bytes`` for fdk's
    plans (the budget less its textures' and cuFFT's shares): tests of the
    slab planning give the plans this much, whatever the shares are."""
    from leveret.algorithms.fdk import _pool_share

    def share(cap):
        try:
            return _pool_share(cap)
        except ValueError:  # nothing left for arrays
            return 0

    lo, hi = array_bytes, 2 * array_bytes + (1 << 30)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if share(mid) < array_bytes else (lo, mid)
    return lo


# -- Consistency of data and geometry (leveret.preprocess.consistency, the scan commands) --------------------


class ToothScan(NamedTuple):
    """A simulated stand-in for tomopy's tooth scan (DXchange, which leveret does not ship): raw
    uint16 counts of an elongated, off-axis object over 0..180 degrees (both ends), rows x columns
    of a narrow synchrotron detector, an axis off the middle, Poisson noise, a flat with fixed
    pattern, 1 % beam drift per view."""

    counts: np.ndarray  # (n_angles, n_rows, n_cols) uint16
    flats: np.ndarray  # (10, n_rows, n_cols) uint16
    darks: np.ndarray  # (10, n_rows, n_cols) uint16
    angles: np.ndarray  # radians
    geometry: ParallelGeometry
    lines: np.ndarray  # the exact line integrals (float64)


def tooth_like_scan(
    n_angles=181, n_rows=8, n_cols=320, center=148.3, span_degrees=180.0, endpoint=True, seed=0
) -> ToothScan:
    from leveret.phantom import Ellipsoid, EllipsoidPhantom

    rng = np.random.default_rng(seed)
    angles = np.radians(np.linspace(0, span_degrees, n_angles, endpoint=endpoint))
    g = ParallelGeometry(angles, n_cols, n_rows=n_rows, center=center)
    s = n_cols / 640  # the shapes are set out for 640 columns
    tooth = EllipsoidPhantom(
        [
            Ellipsoid(0.012 / s, (170 * s, 110 * s, 400), (25 * s, -15 * s, 0), 0.4),
            Ellipsoid(-0.006 / s, (50 * s, 30 * s, 400), (40 * s, -10 * s, 0), 0.5),
            Ellipsoid(0.008 / s, (60 * s, 60 * s, 400), (-90 * s, 40 * s, 0), 0.0),
        ]
    )
    lines = tooth.project(g)
    flat = 20000 * (1 + 0.05 * np.sin(np.arange(n_cols) / 37.0))[None, :] * np.ones((n_rows, 1))
    drift = 1 + 0.01 * rng.standard_normal(n_angles)[:, None, None]
    counts = (rng.poisson(flat[None] * drift * np.exp(-lines)) + 100).astype(np.uint16)
    flats = (rng.poisson(np.repeat(flat[None], 10, 0)) + 100).astype(np.uint16)
    darks = (100 + rng.normal(0, 2, (10, n_rows, n_cols))).astype(np.uint16)
    return ToothScan(counts, flats, darks, angles, g, lines)


def write_dxchange(path, scan: ToothScan) -> None:
    """``scan`` as a DXchange HDF5 file: /exchange/data, data_white, data_dark, theta (degrees)."""
    import h5py

    with h5py.File(path, "w") as f:
        f["/exchange/data"] = scan.counts
        f["/exchange/data_white"] = scan.flats
        f["/exchange/data_dark"] = scan.darks
        f["/exchange/theta"] = np.degrees(scan.angles)
        f["/exchange/theta"].attrs["units"] = "degree"


# -- ZeroMQ streams on this host


def zmq_addresses(transport: str, n: int, folder) -> list[str]:
    """n ZeroMQ endpoints: ipc:// paths in ``folder`` (kept short: their paths are
    limited to ~100 bytes), or free TCP ports of 127.0.0.1."""
    import socket

    if transport == "ipc":
        return [f"ipc://{folder}/s{k}" for k in range(n)]
    out = []
    for _ in range(n):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            out.append(f"tcp://127.0.0.1:{s.getsockname()[1]}")
    return out


def zmq_sender(address, frames, **kwargs) -> threading.Thread:
    """``send_frames(address, frames, **kwargs)`` on a thread of its own, started."""
    from leveret.live.sources import send_frames

    kwargs.setdefault("connect_wait", 0.3)
    t = threading.Thread(target=send_frames, args=(address, frames), kwargs=kwargs)
    t.start()
    return t


def raw_counts_scan(views: int, n: int, rows: int):
    """A parallel scan of a Shepp-Logan phantom as a detector gives it: (geometry, volume geometry,
    uint16 counts (views, rows, n), flat, dark, the CPU ``fbp`` of the corrected counts)."""
    import leveret
    from leveret.preprocess import minus_log, normalize

    _, g, proj = parallel_phantom_scan(n, rows, views)
    vol = g.default_volume()
    rng = np.random.default_rng(0)
    dark = rng.uniform(90, 110, (rows, n))
    flat = dark + rng.uniform(3e4, 4e4, (rows, n))
    counts = np.round(dark + (flat - dark) * np.exp(-proj)).astype(np.uint16)
    return g, vol, counts, flat, dark, leveret.fbp(minus_log(normalize(counts, flat, dark)), g, vol, backend="cpu")


def numbered_frames(n: int, shape=(3, 4), dtype=np.uint16) -> list:
    """n frames, each filled with its index, at 0.01 rad steps."""
    from leveret.live import Frame

    return [Frame(np.full(shape, i, dtype), i, angle=0.01 * i) for i in range(n)]


def in_shared_ring(data) -> bool:
    """Whether ``data`` is a view of a ZeroMQ receiver's shared ring (an mmap), not a copy."""
    import mmap

    while data is not None and not isinstance(data, mmap.mmap):
        data = data.obj if isinstance(data, memoryview) else getattr(data, "base", None)
    return data is not None


def quiet_reader(source, quiet: int = 2, timeout: float = 10.0):
    """Iterate ``source`` on a thread of its own until it has yielded ``quiet``
    Nones (its timeouts: it is reading and idle), or ``timeout`` seconds pass.
    Returns the running thread, the items so far and the errors it raised."""
    import time

    items, errors = [], []

    def read():
        try:
            for item in source:
                items.append(item)
        except BaseException as exc:
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + timeout
    while len(items) < quiet and time.monotonic() < deadline:
        time.sleep(0.01)
    return reader, items, errors
