"""``leveret live``: reconstruct while the scan runs, in a browser; ``leveret live simulate``
streams a phantom scan over ZeroMQ to try it."""
from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
import time

import numpy as np

log = logging.getLogger("leveret.live")

LIVE_EXAMPLES = """examples:
  leveret live simulate --rate 100                     stream a phantom scan to tcp://127.0.0.1:5555
  leveret live tcp://127.0.0.1:5555 --serve 127.0.0.1:8000      then open http://127.0.0.1:8000/
  leveret live acquisition/ --angles 0:180:1800 --flat flat.tif --dark dark.tif
  leveret live tcp://detector:5555 --pattern sub --detector 2048,2048 --storage float16

SOURCE is a folder being written (TIFF/HDF5 frames; the last number in a file
name is the frame index), or a ZeroMQ address (tcp://, ipc://) sending the
messages of leveret.live.sources: a JSON header {index, angle | matrix, shape,
dtype}, then the frame's bytes. The server listens on this machine only unless
--serve names another address, and writes only into --output.
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
    from . import _common, _positive_int

    p = subparsers.add_parser(
        "live", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=LIVE_EXAMPLES,
        help="reconstruct slices while the scan runs, shown in a browser ('live simulate': a test stream)",
        description="Filter and back-project every projection as it arrives into three orthogonal "
                    "slices (movable, rotatable) and any axial slices, shown on a web page updated "
                    "over a websocket. 'leveret live simulate' streams a phantom scan over ZeroMQ.")
    p.add_argument("source", help="a folder, a ZeroMQ address (tcp://host:port), or 'simulate'")
    s = p.add_argument_group("source")
    s.add_argument("--pattern", default=None, choices=("pull", "sub", "push", "pub"),
                   help="ZeroMQ pattern: pull (default) or sub to read; push (default) or pub to simulate")
    s.add_argument("--bind", action="store_true", help="bind the ZeroMQ address instead of connecting")
    s.add_argument("--angles", default=None,
                   help="folder source: 'start:stop:count' in degrees (stop excluded) or a text/.npy "
                        "file, the angle of frame index i")
    s.add_argument("--detector", type=_pair, default=None, metavar="ROWS,COLS",
                   help="detector size (default: from the first frame)")
    g = p.add_argument_group("reconstruction")
    g.add_argument("--volume", type=_triple, default=None, metavar="NZ,NY,NX",
                   help="volume grid (default: one slice per detector row, n_cols^2 pixels)")
    g.add_argument("--voxel-size", type=float, default=None, help="voxel edge (default: the detector pitch)")
    g.add_argument("--center", type=float, default=None, help="rotation axis column (default: the middle)")
    g.add_argument("--det-spacing", type=float, default=1.0)
    g.add_argument("--row-spacing", type=float, default=1.0)
    g.add_argument("--flat", default=None, help="flat field image(s): frames are raw counts")
    g.add_argument("--dark", default=None, help="dark field image(s), with --flat")
    g.add_argument("--minus-log", action="store_true", help="frames are transmission: take -log")
    g.add_argument("--filter", default="ram-lak", choices=FILTERS)
    g.add_argument("--storage", default="float32", choices=("float32", "float16"),
                   help="how filtered projections are kept for moved slices (float16: half the memory)")
    g.add_argument("--backend", default="auto", choices=("auto", "cuda", "cpu"))
    g.add_argument("--max-batch", type=_positive_int, default=None,
                   help="at most this many frames per filter + back-projection call (default: 16 on the CPU, "
                        "64 on a GPU)")
    v = p.add_argument_group("viewer")
    v.add_argument("--serve", type=_host_port, default=("127.0.0.1", 8000), metavar="HOST:PORT",
                   help="where the page is served (default 127.0.0.1:8000: this machine only)")
    v.add_argument("--output", default=None, metavar="DIR",
                   help="folder the page's 'save slices' button writes to (nothing is written without it)")
    v.add_argument("--exit-when-done", action="store_true",
                   help="stop when the source ends (a ZeroMQ end-of-scan message) instead of waiting for more")
    v.add_argument("--json", default=None, help="at exit, write the counters as JSON")
    m = p.add_argument_group("simulate (leveret live simulate)")
    m.add_argument("--address", default="tcp://127.0.0.1:5555",
                   help="where to send the frames (bound here; the viewer connects)")
    m.add_argument("--rate", type=float, default=100.0, help="frames per second (0: as fast as possible)")
    m.add_argument("--frames", type=_positive_int, default=360, help="projections over 180 degrees")
    m.add_argument("--size", type=_positive_int, default=128, help="detector columns (and rows)")
    m.add_argument("--turns", type=int, default=1,
                   help="half turns to send (0: until stopped; each continues the angles)")
    _common(p)
    return p


def run(args) -> int:
    if args.source == "simulate":
        return simulate(args)
    return serve(args)


def simulate(args) -> int:
    """Stream a Shepp-Logan scan (line integrals, float32) over ZeroMQ."""
    import leveret
    from ..live.reconstructor import Frame
    from ..live.sources import send_frames
    from ..phantom import shepp_logan_3d

    n = args.size
    angles = np.linspace(0, np.pi, args.frames, endpoint=False)
    geometry = leveret.ParallelGeometry(angles, n, n)
    projections = shepp_logan_3d(radius=0.45 * n).project(geometry).astype(np.float32)
    pattern = args.pattern or "push"
    turns = itertools.count() if args.turns == 0 else range(max(1, args.turns))

    def frames():
        for turn in turns:
            for i, a in enumerate(angles):
                yield Frame(projections[i], turn * args.frames + i, angle=float(a + turn * np.pi))

    print(f"leveret live simulate: {args.frames} frames of {n}x{n} per half turn at "
          f"{args.rate:g}/s to {args.address} ({pattern})", file=sys.stderr, flush=True)
    # the simulator binds, the viewer connects (either may start first)
    sent = send_frames(args.address, frames(), pattern=pattern, bind=True, rate=args.rate or None)
    print(f"leveret live simulate: sent {sent} frames", file=sys.stderr)
    return 0


def _source(args):
    from pathlib import Path

    from ..live.sources import FolderSource, ZmqSource

    if "://" in args.source:
        return ZmqSource(args.source, pattern=args.pattern or "pull", bind=args.bind,
                         stop_at_end=args.exit_when_done)
    if not Path(args.source).is_dir():
        raise ValueError(f"source: expected a folder, a ZeroMQ address (tcp://...) or 'simulate', "
                         f"got {args.source!r}")
    angles = None
    if args.angles:
        from ..io.angles import read_angles
        angles = read_angles(args.angles, unit="degree")   # radians
    return FolderSource(args.source, angles=angles)


def _first_frame(source):
    """The source's first frame, and an iterator over it and the rest."""
    it = iter(source)
    for frame in it:
        if frame is not None:
            return frame, itertools.chain([frame], it)
    raise ValueError("source: ended before its first frame")


def serve(args) -> int:
    import leveret
    from ..io import readers
    from ..live import LiveReconstructor
    from ..live.server import LiveServer, LiveSession

    source = _source(args)
    frames = source
    detector = args.detector
    beam = None
    if detector is None:
        print("leveret live: waiting for the first frame (give --detector to serve the page at once)",
              file=sys.stderr, flush=True)
        first, frames = _first_frame(source)
        detector = tuple(first.data.shape)
        beam = "cone" if first.matrix is not None else "parallel"
    beam = beam or "parallel"
    n_rows, n_cols = detector
    voxel = args.voxel_size or args.det_spacing
    shape = args.volume or (n_rows, n_cols, n_cols)
    volume = leveret.VolumeGeometry(shape, (args.voxel_size or args.row_spacing, voxel, voxel))
    flat = None if args.flat is None else readers.read_array(args.flat)
    dark = None if args.dark is None else readers.read_array(args.dark)
    rec = LiveReconstructor(volume, detector, beam=beam, det_spacing=args.det_spacing,
                            row_spacing=args.row_spacing, center=args.center, flat=flat, dark=dark,
                            minus_log=True if args.minus_log else None, filter=args.filter,
                            storage=args.storage, backend=args.backend)
    if rec.backend == "cuda" and hasattr(source, "buffers"):
        source.buffers = rec.frame_buffer   # messages copied into pinned buffers: asynchronous uploads
    session = LiveSession(rec, frames, max_batch=args.max_batch)
    host, port = args.serve
    server = LiveServer(session, host=host, port=port, output=args.output)
    url = server.start()
    session.start()
    print(f"leveret live: {beam} beam, detector {n_rows}x{n_cols}, volume {shape}; open {url} "
          "(Ctrl-C stops)", file=sys.stderr, flush=True)
    try:
        while not (args.exit_when_done and session.ended):
            time.sleep(0.1)
    finally:
        session.stop()
        server.stop()
        summary = {"received": rec.stats.received, "rejected": rec.stats.rejected,
                   "rejected_reasons": rec.stats.rejected_reasons, "missing": rec.stats.missing,
                   "views": rec.n_views}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(summary, f, indent=2)
        print(f"leveret live: {rec.stats.received} frames reconstructed, {rec.stats.rejected} rejected, "
              f"{len(rec.stats.missing)} missing", file=sys.stderr)
    if session.error is not None:
        raise session.error
    return 0
