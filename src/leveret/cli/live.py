"""``leveret live``: reconstruct while the scan runs, in a browser; ``leveret live simulate``
streams a phantom scan over ZeroMQ to try it."""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
import threading
import time

import numpy as np

log = logging.getLogger("leveret.live")

LIVE_EXAMPLES = """examples:
  leveret live simulate --rate 100                     stream a phantom scan to tcp://127.0.0.1:5555
  leveret live tcp://127.0.0.1:5555 --serve 127.0.0.1:8000      then open http://127.0.0.1:8000/
  leveret live simulate --beam cone                    a cone-beam scan (a 3x4 matrix per frame)
  leveret live acquisition/ --angles 0:180:1800 --flat flat.tif --dark dark.tif
  leveret live acquisition/ --matrices matrices.npy    cone beam: the matrix of frame i in row i
  leveret live tcp://detector:5555 --pattern sub --detector 2048,2048 --storage float16 --max-views 3600
  leveret live ipc:///tmp/det0,ipc:///tmp/det1,ipc:///tmp/det2,ipc:///tmp/det3 --detector 2160,2560
                                                       four parallel streams, a receiving thread each

SOURCE is a folder being written (TIFF/HDF5 frames; the last number in a file
name is the frame index; write each frame under another name, then rename it
into place), or a ZeroMQ address (tcp://, ipc://; several separated by commas
are parallel streams) sending the messages of leveret.live.sources: a JSON
header {index, angle | matrix, shape, dtype}, then the frame's bytes. The server listens on this machine only unless
--serve names another address (then every request needs the token in the
address printed, or --token), answers pages of its own address only unless
--allow-origin names another, and writes only into --output (and --json).
"""


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = str(text).rpartition(":")
    try:
        port_n = int(port)
    except ValueError:
        port_n = -1
    if not sep or not host or not 0 <= port_n < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT such as 127.0.0.1:8000, got {text!r}")
    return host, port_n


def _pair(text: str) -> tuple[int, int]:
    try:
        a, b = (int(t) for t in str(text).replace("x", ",").split(","))
        if a < 1 or b < 1:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ROWS,COLS such as 2048,2048, got {text!r}") from None
    return a, b


def _token(text: str) -> str:
    from ..live.server import check_token

    try:
        check_token(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).partition(": ")[2]) from None
    return text


def _triple(text: str) -> tuple[int, int, int]:
    try:
        out = tuple(int(t) for t in str(text).replace("x", ",").split(","))
        if len(out) != 3 or min(out) < 1:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NZ,NY,NX such as 256,512,512, got {text!r}") from None
    return out


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``leveret live`` on the top-level subcommand parsers."""
    from ..filters import FILTERS
    from .flags import _common, _positive_int

    p = subparsers.add_parser(
        "live",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=LIVE_EXAMPLES,
        help="reconstruct slices while the scan runs, shown in a browser ('live simulate': a test stream)",
        description="Filter and back-project every projection as it arrives into three orthogonal "
        "slices (movable, rotatable) and any axial slices, shown on a web page updated "
        "over a websocket. 'leveret live simulate' streams a phantom scan over ZeroMQ.",
    )
    p.add_argument(
        "source",
        help="a folder, a ZeroMQ address (tcp://host:port, ipc:///path; several separated by "
        "commas: parallel streams), or 'simulate'",
    )
    s = p.add_argument_group("source")
    s.add_argument(
        "--pattern",
        default=None,
        choices=("pull", "sub", "push", "pub"),
        help="ZeroMQ pattern: pull (default) or sub to read; push (default) or pub to simulate",
    )
    s.add_argument("--bind", action="store_true", help="bind the ZeroMQ address instead of connecting")
    s.add_argument(
        "--zmq-threads",
        type=_positive_int,
        default=None,
        metavar="N",
        help="threads receiving ZeroMQ messages, a socket each (default: one per endpoint of SOURCE); "
        "more than the endpoints: PULL sockets sharing an endpoint, among which its sender deals "
        "the frames",
    )
    s.add_argument(
        "--zmq-processes",
        action="store_true",
        help="read each ZeroMQ socket in a child process instead of a thread: several streams of large "
        "frames then add up (threads of one process stay near 4 GB/s together); POSIX only",
    )
    s.add_argument(
        "--angles",
        default=None,
        help="the planned scan: 'start:stop:count' in degrees (stop excluded) or a text/.npy "
        "file, the angle of frame index i, for frames that carry none",
    )
    s.add_argument(
        "--matrices",
        default=None,
        metavar="FILE",
        help="the planned scan, cone beam: the 3x4 projection matrix of frame index i, for frames "
        "that carry none, as a .npy (n, 3, 4) or a text file of 12 numbers per line (row by row)",
    )
    s.add_argument(
        "--settle",
        type=float,
        default=0.2,
        metavar="SECONDS",
        help="folder source: read a file once its size and time stamp stayed the same this long "
        "(default 0.2; 0 when the writer renames complete files into place)",
    )
    s.add_argument(
        "--detector",
        type=_pair,
        default=None,
        metavar="ROWS,COLS",
        help=f"detector size; frames of another size are bad messages (default: the size that "
        f"{AGREE} of the first frames agree on)",
    )
    g = p.add_argument_group("reconstruction")
    g.add_argument(
        "--beam",
        default=None,
        choices=("parallel", "cone"),
        help="parallel (an angle per frame) or cone (a 3x4 matrix per frame); default: cone "
        "with --matrices or when the first frame carries a matrix, else parallel",
    )
    g.add_argument(
        "--volume",
        type=_triple,
        default=None,
        metavar="NZ,NY,NX",
        help="volume grid (default: one slice per detector row, n_cols^2 pixels)",
    )
    g.add_argument(
        "--voxel-size",
        type=float,
        default=None,
        help="voxel edge (default: the detector pitch; cone beam: the pitch at the rotation axis, "
        "from the first matrix)",
    )
    g.add_argument("--center", type=float, default=None, help="rotation axis column (default: the middle)")
    g.add_argument("--det-spacing", type=float, default=1.0)
    g.add_argument("--row-spacing", type=float, default=1.0)
    g.add_argument("--flat", default=None, help="flat field image(s): frames are raw counts")
    g.add_argument("--dark", default=None, help="dark field image(s), with --flat")
    g.add_argument("--minus-log", action="store_true", help="frames are transmission: take -log")
    g.add_argument("--filter", default="ram-lak", choices=FILTERS)
    g.add_argument(
        "--storage",
        default="float32",
        choices=("float32", "float16"),
        help="how filtered projections are kept for moved slices (float16: half the memory)",
    )
    g.add_argument("--backend", default="auto", choices=("auto", "cuda", "cpu"))
    g.add_argument(
        "--max-views",
        type=_positive_int,
        default=None,
        metavar="N",
        help="keep at most N projections (the memory of the stored filtered views: N x rows x cols "
        "x 4 bytes, 2 with --storage float16); later frames are counted as dropped. "
        "Default: no bound",
    )
    g.add_argument(
        "--max-batch",
        type=_positive_int,
        default=None,
        help="at most this many frames per filter + back-projection call (default: 16 on the CPU, 64 on a GPU)",
    )
    v = p.add_argument_group("viewer")
    v.add_argument(
        "--serve",
        type=_host_port,
        default=("127.0.0.1", 8000),
        metavar="HOST:PORT",
        help="where the page is served (default 127.0.0.1:8000: this machine only)",
    )
    v.add_argument(
        "--token",
        type=_token,
        default=None,
        help="a secret every request to the page must carry (at least 16 characters of A-Z a-z 0-9 . _ "
        "~ -); default: none on a loopback --serve, else one made at start. The address printed "
        "carries it (?token=...)",
    )
    v.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="URL",
        help="also answer pages of this origin (scheme://host:port), e.g. a proxy's address; may be repeated",
    )
    v.add_argument(
        "--output",
        default=None,
        metavar="DIR",
        help="folder the page's 'save slices' button writes to (nothing is written without it)",
    )
    v.add_argument(
        "--exit-when-done",
        action="store_true",
        help="stop when the source ends (a ZeroMQ end-of-scan message) instead of waiting for more",
    )
    v.add_argument(
        "--json",
        default=None,
        metavar="FILE",
        help="at exit (also on Ctrl-C or SIGTERM), write the run's counters as JSON",
    )
    m = p.add_argument_group("simulate (leveret live simulate)")
    m.add_argument(
        "--address",
        default="tcp://127.0.0.1:5555",
        help="where to send the frames (bound here; the viewer connects); several endpoints separated "
        "by commas are parallel streams, frame i sent to the (i mod n)-th",
    )
    m.add_argument("--rate", type=float, default=100.0, help="frames per second (0: as fast as possible)")
    m.add_argument(
        "--frames",
        type=_positive_int,
        default=360,
        help="projections per turn: over 180 degrees (parallel), 360 (--beam cone)",
    )
    m.add_argument("--size", type=_positive_int, default=128, help="detector columns (and rows)")
    m.add_argument(
        "--turns",
        type=int,
        default=1,
        help="turns to send, half turns for parallel beam (0: until stopped; each continues the angles)",
    )
    _common(p)
    return p


def run(args) -> int:
    if args.source == "simulate":
        return simulate(args)
    return serve(args)


def simulate(args) -> int:
    """Stream a Shepp-Logan scan (line integrals, float32) over ZeroMQ: parallel
    beam over half turns, or (``--beam cone``) a circular cone-beam scan over
    full turns with magnification 2, each frame with its 3x4 matrix."""
    import leveret
    from ..live.reconstructor import Frame
    from ..live.sources import send_frames
    from ..phantom import shepp_logan_3d

    n = args.size
    cone = args.beam == "cone"
    turn = 2 * np.pi if cone else np.pi
    angles = np.linspace(0, turn, args.frames, endpoint=False)
    if cone:
        # the source 2n from the axis, the detector 4n: n pixels of 1 see 0.5 n at the axis
        geometry = leveret.ConeGeometry.circular(angles, 2.0 * n, 4.0 * n, n, n, 1.0)
        phantom = shepp_logan_3d(radius=0.2 * n)
    else:
        geometry = leveret.ParallelGeometry(angles, n, n)
        phantom = shepp_logan_3d(radius=0.45 * n)
    projections = phantom.project(geometry).astype(np.float32)
    pattern = args.pattern or "push"
    turns = itertools.count() if args.turns == 0 else range(max(1, args.turns))

    def frames():
        for t in turns:
            for i, a in enumerate(angles):
                index = t * args.frames + i
                if cone:  # the same circle again: the matrices repeat
                    yield Frame(projections[i], index, matrix=geometry.matrices[i])
                else:
                    yield Frame(projections[i], index, angle=float(a + t * np.pi))

    print(
        f"leveret live simulate: {args.beam or 'parallel'} beam, {args.frames} frames of {n}x{n} per "
        f"{'turn' if cone else 'half turn'} at {args.rate:g}/s to {args.address} ({pattern})",
        file=sys.stderr,
        flush=True,
    )
    # the simulator binds, the viewer connects (either may start first)
    # the projections never change once made: sent without a copy
    sent = send_frames(args.address, frames(), pattern=pattern, bind=True, rate=args.rate or None, copy=False)
    print(f"leveret live simulate: sent {sent} frames", file=sys.stderr)
    return 0


def read_matrices(path) -> np.ndarray:
    """Projection matrices (n, 3, 4) from a .npy/.tif/HDF5 array ((n, 3, 4) or
    (n, 12)) or a text file of 12 numbers per line, row by row."""
    from pathlib import Path

    from ..io import readers

    p = Path(path)
    if not p.exists():
        raise ValueError(f"matrices: {str(path)!r} does not exist")
    if p.suffix.lower() in (".txt", ".csv", ".dat", ""):
        try:
            m = np.loadtxt(p, delimiter="," if p.suffix.lower() == ".csv" else None, ndmin=2)
        except ValueError as exc:
            raise ValueError(f"matrices: {str(path)!r} is not a text file of numbers: {exc}") from None
    else:
        m = np.asarray(readers.read_array(p), np.float64)
    if m.size == 0 or m.size % 12 or not np.all(np.isfinite(m)) or m.shape[-1] not in (4, 12):
        raise ValueError(
            f"matrices: expected finite 3x4 matrices, (n, 3, 4) or 12 numbers per line, "
            f"got shape {m.shape} from {str(path)!r}"
        )
    return m.reshape(-1, 3, 4)


def cone_voxel_size(matrix) -> tuple[float, float]:
    """(row, column) voxel edge that a detector pixel spans at the world origin
    (the rotation axis) under the 3x4 ``matrix``: 1 / (pixels per length unit)
    along z and in the xy plane."""
    m = np.asarray(matrix, np.float64).reshape(3, 4)
    w0 = m[2, 3]
    u0, v0 = m[0, 3] / w0, m[1, 3] / w0
    du = (m[0, :3] - u0 * m[2, :3]) / w0  # pixels per length unit along x, y, z
    dv = (m[1, :3] - v0 * m[2, :3]) / w0
    return 1.0 / abs(dv[2]), 1.0 / float(np.hypot(du[0], du[1]))


def _plan(args):
    """The planned scan: (angles in radians or None, matrices (n, 3, 4) or None)."""
    if args.angles and (args.matrices or args.beam == "cone"):
        raise ValueError("angles: cone beam takes --matrices, not --angles")
    if args.matrices and args.beam == "parallel":
        raise ValueError("matrices: parallel beam takes --angles, not --matrices")
    angles = matrices = None
    if args.angles:
        from ..io.angles import read_angles

        angles = read_angles(args.angles, unit="degree")  # radians
    if args.matrices:
        matrices = read_matrices(args.matrices)
    return angles, matrices


def _source(args, plan=None):
    """The frame source SOURCE names; a folder's frames take their angle or
    matrix from ``plan`` (:func:`_plan`) where their file carries none."""
    from pathlib import Path

    from ..live.sources import FolderSource, ZmqSource

    if "://" in args.source:
        return ZmqSource(
            args.source,
            pattern=args.pattern or "pull",
            bind=args.bind,
            stop_at_end=args.exit_when_done,
            detector_shape=args.detector,
            threads=args.zmq_threads,
            processes=args.zmq_processes,
        )
    if not Path(args.source).is_dir():
        raise ValueError(f"source: expected a folder, a ZeroMQ address (tcp://...) or 'simulate', got {args.source!r}")
    if args.zmq_threads is not None:
        raise ValueError("zmq_threads: --zmq-threads reads a ZeroMQ source, not a folder")
    if args.zmq_processes:
        raise ValueError("zmq_processes: --zmq-processes reads a ZeroMQ source, not a folder")
    angles, matrices = _plan(args) if plan is None else plan
    return FolderSource(args.source, angles=angles, matrices=matrices, settle=args.settle, detector_shape=args.detector)


#: Frames of one shape that decide the detector when --detector is not given.
AGREE = 3
#: Frames held while waiting for AGREE of one shape (the oldest are let go beyond).
AGREE_KEEP = 64


def _agreed_frames(source, agree: int = AGREE, keep: int = AGREE_KEEP):
    """Read ``source`` until ``agree`` frames have one image shape: returns
    that shape, the first frame of it, and an iterator over the frames read
    (all of them: those of other shapes are rejected later, counted) and the
    rest. No single frame decides the detector. At most ``keep`` frames are
    held meanwhile (beyond, the oldest is let go, logged)."""
    it = iter(source)
    held: list = []
    counts: dict = {}
    for frame in it:
        if frame is None:
            continue
        shape = tuple(getattr(frame.data, "shape", ()))
        held.append(frame)
        counts[shape] = counts.get(shape, 0) + 1
        if len(shape) == 2 and counts[shape] >= agree:
            first = next(f for f in held if tuple(f.data.shape) == shape)
            return shape, first, itertools.chain(held, it)
        if len(held) > keep:
            old = held.pop(0)
            old_shape = tuple(getattr(old.data, "shape", ()))
            counts[old_shape] -= 1
            log.warning(
                "frame %s of shape %s let go: %d frames without %d of one shape (give --detector)",
                old.index,
                old_shape,
                keep,
                agree,
            )
    raise ValueError(f"source: ended before {agree} frames agreed on a detector shape; give --detector")


class _Summary:
    """Writes ``--json`` and the closing line once, on whichever exit comes
    first: the end of the run, an error, or Ctrl-C / SIGTERM (then from the
    CLI's clean-up, in the main thread, while the worker is left behind)."""

    def __init__(self, args, source):
        self.args, self.source = args, source
        self.session = self.server = None
        self._once = threading.Lock()

    def finish(self, interrupted: bool = False) -> None:
        if not self._once.acquire(blocking=False):
            return
        session = self.session
        if session is not None:
            session.stop()
            # a batch inside a kernel may hold the lock a while: counters as they are then
            locked = session.lock.acquire(timeout=5)
            try:
                summary = session.summary()
            finally:
                if locked:
                    session.lock.release()
        else:
            summary = {
                "received": 0,
                "rejected": 0,
                "rejected_reasons": {},
                "missing": 0,
                "missing_first": [],
                "views": 0,
                "dropped": 0,
                "dropped_reasons": {},
                "bad_messages": int(getattr(self.source, "bad_messages", 0)),
                "error": None,
            }
            close = getattr(self.source, "close", None)
            if close is not None:
                close()
        summary["interrupted"] = interrupted
        if self.server is not None and not interrupted:
            self.server.stop()
        if self.args.json:
            from ..io.atomic import atomic_output

            with atomic_output(self.args.json, overwrite=True) as tmp:
                tmp.write_text(json.dumps(summary, indent=2) + "\n")
        print(
            f"leveret live: {summary['received']} frames reconstructed, {summary['rejected']} rejected, "
            f"{summary['missing']} missing, {summary['dropped']} dropped, {summary['bad_messages']} bad "
            f"messages" + (f"; counters written to {self.args.json}" if self.args.json else ""),
            file=sys.stderr,
            flush=True,
        )


def serve(args) -> int:
    from pathlib import Path

    from ..io.atomic import register_cleanup, unregister_cleanup

    from ..live.server import normalise_origin

    if args.json and not Path(args.json).resolve().parent.is_dir():
        raise ValueError(f"json: the folder of {args.json!r} does not exist")
    for origin in args.allow_origin:  # checked before waiting for a first frame
        normalise_origin("allow_origins", origin)
    plan = _plan(args)
    source = _source(args, plan)
    summary = _Summary(args, source)
    register_cleanup(id(summary), lambda: summary.finish(interrupted=True))
    try:
        _serve(args, source, summary, plan)
    finally:
        unregister_cleanup(id(summary))
        summary.finish()
    if summary.session is not None and summary.session.error is not None:
        raise summary.session.error
    return 0


def _geometry_and_volume(args, beam, detector, angles, matrices, first_matrix):
    """The scan geometry for LiveReconstructor and the volume grid, from the
    flags: the planned angles (matrices) where given, else the detector with
    one view (the first frame's matrix for cone beam) that plans nothing."""
    import leveret

    n_rows, n_cols = detector
    shape = args.volume or (n_rows, n_cols, n_cols)
    if beam == "cone":
        first = np.asarray(first_matrix, np.float64).reshape(1, 3, 4)
        geometry = leveret.ConeGeometry(first if matrices is None else matrices, n_rows, n_cols)
        if args.voxel_size is not None:
            voxel = (args.voxel_size,) * 3
        else:
            dz, dxy = cone_voxel_size(first_matrix)
            voxel = (dz, dxy, dxy)
    else:
        geometry = leveret.ParallelGeometry(
            [0.0] if angles is None else angles, n_cols, n_rows, args.det_spacing, args.row_spacing, args.center
        )
        pitch = args.voxel_size or args.det_spacing
        voxel = (args.voxel_size or args.row_spacing, pitch, pitch)
    return geometry, leveret.VolumeGeometry(shape, voxel)


def _serve(args, source, summary: _Summary, plan) -> None:
    from ..io import readers
    from ..live import LiveReconstructor
    from ..live.server import LiveServer, LiveSession

    frames = None
    angles, matrices = plan
    detector, beam = args.detector, args.beam
    if beam is None and (matrices is not None or angles is not None):
        beam = "cone" if matrices is not None else "parallel"
    first_matrix = None if matrices is None else matrices[0]
    need_first = detector is None or (beam == "cone" and first_matrix is None)
    if need_first:
        print(
            f"leveret live: waiting for the first frames ({AGREE} of one shape decide the detector; give "
            "--detector, and for cone beam --matrices, to serve the page at once)",
            file=sys.stderr,
            flush=True,
        )
        shape, first, frames = _agreed_frames(source)
        detector = detector or shape
        if hasattr(source, "detector_shape"):
            source.detector_shape = detector  # from now on, frames of another shape are bad messages
        if beam is None:
            beam = "cone" if first.matrix is not None else "parallel"
        if first_matrix is None and first.matrix is not None:
            first_matrix = first.matrix
    beam = beam or "parallel"
    if beam == "cone" and first_matrix is None:
        raise ValueError("matrices: the first cone-beam frame carries no matrix; give --matrices")
    n_rows, n_cols = detector
    geometry, volume = _geometry_and_volume(args, beam, detector, angles, matrices, first_matrix)
    flat = None if args.flat is None else readers.read_array(args.flat)
    dark = None if args.dark is None else readers.read_array(args.dark)
    # planned: the frames without their own angle (matrix) take the one of --angles (--matrices)
    rec = LiveReconstructor(
        volume,
        geometry,
        planned=(matrices if beam == "cone" else angles) is not None,
        flat=flat,
        dark=dark,
        minus_log=True if args.minus_log else None,
        filter=args.filter,
        storage=args.storage,
        backend=args.backend,
        max_views=args.max_views,
    )
    if rec.backend == "cuda" and hasattr(source, "buffers"):
        source.buffers = rec.frame_pool  # frames in pinned memory (lent or copied): asynchronous uploads
    session = LiveSession(rec, source, frames=frames, max_batch=args.max_batch, max_views=args.max_views)
    summary.session = session
    host, port = args.serve
    server = LiveServer(
        session, host=host, port=port, output=args.output, allow_origins=args.allow_origin, token=args.token
    )
    url = server.start()
    summary.server = server
    session.start()
    print(
        f"leveret live: {beam} beam, detector {n_rows}x{n_cols}, volume {volume.shape}; open {url} (Ctrl-C stops)",
        file=sys.stderr,
        flush=True,
    )
    while not (args.exit_when_done and session.ended):
        time.sleep(0.1)
