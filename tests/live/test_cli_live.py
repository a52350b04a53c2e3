"""``leveret live`` and ``leveret live simulate`` as subprocesses."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
from cases import take_frames

import leveret
from leveret.cli import main, parse

SRC = Path(leveret.__file__).resolve().parents[1]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_simulate_streams_a_scan_that_live_reconstructs(tmp_path):
    address = f"tcp://127.0.0.1:{_free_port()}"
    summary = tmp_path / "summary.json"
    live = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leveret",
            "live",
            address,
            "--serve",
            "127.0.0.1:0",
            "--backend",
            "cpu",
            "--exit-when-done",
            "--json",
            str(summary),
        ],
        env=_env(),
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    sim = subprocess.run(
        [
            sys.executable,
            "-m",
            "leveret",
            "live",
            "simulate",
            "--address",
            address,
            "--frames",
            "24",
            "--size",
            "16",
            "--rate",
            "200",
        ],
        env=_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sim.returncode == 0, sim.stderr
    assert "sent 24 frames" in sim.stderr
    _, err = live.communicate(timeout=120)
    assert live.returncode == 0, err
    assert "open http://127.0.0.1:" in err
    result = json.loads(summary.read_text())
    assert result["received"] == 24 and result["rejected"] == 0 and result["missing"] == 0
    assert sorted(os.listdir(tmp_path)) == ["summary.json"]  # nothing else written


def test_live_reads_a_folder_source_with_angles(tmp_path):
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(3):
        tifffile.imwrite(frames / f"proj_{i:04d}.tif", np.zeros((4, 8), np.float32))
    from leveret.cli.live import _source

    args = parse(["live", str(frames), "--angles", "0:180:3"])
    src = _source(args)
    got = take_frames(src, 3)
    src.close()
    np.testing.assert_allclose([f.angle for f in got], np.radians([0, 60, 120]))


def test_a_source_that_is_neither_folder_nor_address_is_a_clear_error(tmp_path, capsys):
    assert main(["live", str(tmp_path / "missing"), "--serve", "127.0.0.1:0"]) == 2
    assert "source: expected a folder" in capsys.readouterr().err


def test_serve_needs_host_and_port(capsys):
    with pytest.raises(SystemExit) as e:
        main(["live", "tcp://127.0.0.1:1", "--serve", "8000"])
    assert e.value.code == 2
    assert "HOST:PORT" in capsys.readouterr().err


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_ends_live_cleanly(tmp_path):
    import signal
    import time

    address = f"tcp://127.0.0.1:{_free_port()}"
    # SIGINT restored to its default: a background shell may start us with it ignored
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leveret",
            "live",
            address,
            "--serve",
            "127.0.0.1:0",
            "--detector",
            "8,8",
            "--backend",
            "cpu",
        ],
        env=_env(),
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    line = ""
    while "open http" not in line and time.monotonic() < deadline:
        line = p.stderr.readline()
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130
    assert "interrupted" in err and "Traceback" not in err


def _live(tmp_path, *args):
    """``leveret live ...`` started in ``tmp_path``; returns once it serves the page."""
    import signal
    import time

    # SIGINT restored to its default: a background shell may start us with it ignored
    p = subprocess.Popen(
        [sys.executable, "-m", "leveret", "live", *args],
        env=_env(),
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    lines = []
    while not any("open http" in line for line in lines) and time.monotonic() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        lines.append(line)
    assert any("open http" in line for line in lines), "".join(lines)
    return p


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("signame, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_json_summary_is_written_when_live_is_stopped_by_a_signal(tmp_path, signame, code):
    import signal

    address = f"tcp://127.0.0.1:{_free_port()}"
    p = _live(
        tmp_path, address, "--serve", "127.0.0.1:0", "--detector", "8,8", "--backend", "cpu", "--json", "summary.json"
    )
    p.send_signal(getattr(signal, signame))
    _, err = p.communicate(timeout=30)
    assert p.returncode == code, err
    assert "Traceback" not in err and "counters written to summary.json" in err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["received"] == 0 and summary["dropped"] == 0
    assert sorted(os.listdir(tmp_path)) == ["summary.json"]  # no temporary left behind


def _simulate(tmp_path, address, *args):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "leveret",
            "live",
            "simulate",
            "--address",
            address,
            "--size",
            "16",
            "--rate",
            "200",
            *args,
        ],
        env=_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_max_views_bounds_the_store_and_counts_the_frames_left_out(tmp_path):
    address = f"tcp://127.0.0.1:{_free_port()}"
    live = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leveret",
            "live",
            address,
            "--serve",
            "127.0.0.1:0",
            "--backend",
            "cpu",
            "--exit-when-done",
            "--max-views",
            "10",
            "--json",
            "s.json",
        ],
        env=_env(),
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    sim = _simulate(tmp_path, address, "--frames", "24")
    assert sim.returncode == 0, sim.stderr
    _, err = live.communicate(timeout=120)
    assert live.returncode == 0, err
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["views"] == 10 and summary["received"] == 10
    assert summary["dropped"] == 14 and summary["dropped_reasons"] == {"store full": 14}
    assert summary["interrupted"] is False


def test_simulate_streams_a_cone_scan_that_live_reconstructs_as_cone_beam(tmp_path):
    address = f"tcp://127.0.0.1:{_free_port()}"
    live = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leveret",
            "live",
            address,
            "--serve",
            "127.0.0.1:0",
            "--backend",
            "cpu",
            "--exit-when-done",
            "--json",
            "s.json",
        ],
        env=_env(),
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    sim = _simulate(tmp_path, address, "--frames", "24", "--beam", "cone")
    assert sim.returncode == 0, sim.stderr
    assert "cone beam" in sim.stderr and "sent 24 frames" in sim.stderr
    _, err = live.communicate(timeout=120)
    assert live.returncode == 0, err
    assert "cone beam, detector 16x16" in err
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["received"] == 24 and summary["rejected"] == 0 and summary["bad_messages"] == 0


def test_cone_voxel_size_is_the_detector_pitch_at_the_rotation_axis():
    from leveret.cli.live import cone_voxel_size

    # magnification 120 / 60 = 2: a pixel of 2 (columns) or 3 (rows) spans 1 or 1.5 at the axis
    g = leveret.ConeGeometry.circular(np.radians([0.0, 37.0]), 60.0, 120.0, 8, 10, 2.0, row_pixel_size=3.0)
    for m in g.matrices:
        np.testing.assert_allclose(cone_voxel_size(m), (1.5, 1.0), rtol=1e-12)
        np.testing.assert_allclose(cone_voxel_size(7.0 * m), (1.5, 1.0), rtol=1e-12)  # scale-free


@pytest.mark.parametrize("suffix", [".npy", ".txt"])
def test_a_folder_source_takes_cone_matrices_from_a_file(tmp_path, suffix):
    from leveret.cli.live import _source

    frames = tmp_path / "frames"
    frames.mkdir()
    g = leveret.ConeGeometry.circular(np.linspace(0, np.pi, 3), 60.0, 120.0, 4, 8, 2.0)
    for i in range(3):
        tifffile.imwrite(frames / f"proj_{i:04d}.tif", np.zeros((4, 8), np.float32))
    path = tmp_path / f"matrices{suffix}"
    if suffix == ".npy":
        np.save(path, g.matrices)
    else:
        np.savetxt(path, g.matrices.reshape(3, 12), fmt="%.17g")
    src = _source(parse(["live", str(frames), "--matrices", str(path), "--settle", "0"]))
    got = take_frames(src, 3)
    src.close()
    np.testing.assert_array_equal(np.stack([f.matrix for f in got]), g.matrices)
    assert all(f.angle is None for f in got)


def test_cone_and_parallel_inputs_that_do_not_fit_are_clear_errors(tmp_path, capsys):
    (tmp_path / "m.txt").write_text("1 2 3\n")
    assert main(["live", str(tmp_path), "--matrices", str(tmp_path / "m.txt")]) == 2
    assert "--matrices: expected finite 3x4 matrices" in capsys.readouterr().err
    assert main(["live", str(tmp_path), "--angles", "0:180:3", "--beam", "cone"]) == 2
    assert "--angles: cone beam takes --matrices" in capsys.readouterr().err
    assert main(["live", str(tmp_path), "--json", str(tmp_path / "no" / "s.json")]) == 2
    assert "--json: the folder" in capsys.readouterr().err
    assert main(["live", "tcp://127.0.0.1:1", "--allow-origin", "viewer.lab"]) == 2
    assert "--allow-origin: expected an origin such as http://host:8000, got 'viewer.lab'" in capsys.readouterr().err


def _frame(shape, index):
    from leveret.live import Frame

    return Frame(np.zeros(shape, np.float32), index, angle=0.01 * index)


def test_no_single_frame_decides_the_detector():
    """A stray first frame does not set the detector: three frames of one shape
    do, and every frame read meanwhile goes on (the stray one to be rejected)."""
    from leveret.cli.live import _agreed_frames

    frames = [
        _frame((1, 12000), 900),
        None,
        _frame((16, 16), 0),
        _frame((2, 2), 901),
        _frame((16, 16), 1),
        None,
        _frame((16, 16), 2),
        _frame((16, 16), 3),
    ]
    shape, first, it = _agreed_frames(frames)
    assert shape == (16, 16) and first.index == 0
    assert [f.index for f in it if f is not None] == [900, 0, 901, 1, 2, 3]
    with pytest.raises(ValueError, match="^source: ended before 3 frames agreed on a detector shape"):
        _agreed_frames([_frame((1, 12000), 0), _frame((16, 16), 1), _frame((16, 16), 2)])


def test_frames_held_while_the_detector_is_agreed_are_bounded():
    from leveret.cli.live import _agreed_frames

    stray = [_frame((1, 1 + k), 100 + k) for k in range(200)]
    shape, _, it = _agreed_frames(stray + [_frame((4, 4), i) for i in range(3)], keep=10)
    assert shape == (4, 4) and len(list(it)) <= 11


def test_a_stray_first_frame_leaves_the_detector_to_the_frames_that_agree(tmp_path):
    from leveret.live.sources import send_frames

    address = f"tcp://127.0.0.1:{_free_port()}"
    live = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leveret",
            "live",
            address,
            "--serve",
            "127.0.0.1:0",
            "--backend",
            "cpu",
            "--exit-when-done",
            "--json",
            "s.json",
        ],
        env=_env(),
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    frames = [_frame((1, 120), 500)] + [_frame((8, 8), i) for i in range(12)] + [_frame((1, 120), 501)]
    assert send_frames(address, frames, rate=200, connect_wait=0.5) == 14
    _, err = live.communicate(timeout=120)
    assert live.returncode == 0, err
    assert "detector 8x8" in err
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["received"] == 12
    # the stray frame read before the shape was agreed is rejected, the one after it a bad message
    assert summary["rejected"] == 1 and summary["bad_messages"] == 1


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_serving_on_all_interfaces_prints_an_address_with_a_token_that_every_request_needs(tmp_path):
    import re
    import signal
    import time
    import urllib.error
    import urllib.request

    address = f"tcp://127.0.0.1:{_free_port()}"
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leveret",
            "live",
            address,
            "--serve",
            "0.0.0.0:0",
            "--detector",
            "8,8",
            "--backend",
            "cpu",
        ],
        env=_env(),
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline, line = time.monotonic() + 60, ""
        while "open http" not in line and time.monotonic() < deadline:
            line = p.stderr.readline()
        m = re.search(r"open http://0\.0\.0\.0:(\d+)/\?token=([A-Za-z0-9_-]{20,}) ", line)
        assert m, line
        port, token = m.groups()

        def status(url):
            try:
                with urllib.request.urlopen(url, timeout=10) as r:
                    return r.status
            except urllib.error.HTTPError as exc:
                return exc.code

        assert status(f"http://127.0.0.1:{port}/") == 401
        assert status(f"http://127.0.0.1:{port}/static/app.js") == 401
        assert status(f"http://127.0.0.1:{port}/static/app.js?token={token}") == 200
    finally:
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=30)


def test_a_token_too_short_is_a_clear_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["live", "tcp://127.0.0.1:1", "--token", "short"])
    assert e.value.code == 2
    assert "--token: expected at least 16 characters" in capsys.readouterr().err


def test_a_live_run_outlives_bad_messages_and_reconstructs_every_frame(tmp_path):
    """The messages that ended the reader (an index or shape of 1e999, JSON
    nested 100k deep, a 400-digit index) and a far index (1e9) among the
    frames of a scan: all frames are reconstructed, the bad messages counted."""
    import time

    import zmq

    from leveret.live.sources import encode

    address = f"tcp://127.0.0.1:{_free_port()}"
    live = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leveret",
            "live",
            address,
            "--bind",
            "--serve",
            "127.0.0.1:0",
            "--backend",
            "cpu",
            "--exit-when-done",
            "--json",
            "s.json",
        ],
        env=_env(),
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    bad = [
        b'{"index": 1e999, "shape": [8, 8], "dtype": "float32", "angle": 0.0}',
        b'{"index": 3, "shape": [1e999, 8], "dtype": "float32", "angle": 0.0}',
        b'{"index": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        json.dumps({"index": int("9" * 400), "shape": [8, 8], "dtype": "float32", "angle": 0.0}).encode(),
    ]
    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.connect(address)
    try:
        time.sleep(0.5)
        for i in range(12):
            sock.send_multipart(encode(_frame((8, 8), i)))
            if i % 3 == 0:
                sock.send_multipart([bad[i // 3], b"\0" * 256])
        sock.send_multipart(encode(_frame((8, 8), 10**9)))
        sock.send_multipart([b'{"end": true}'])
        _, err = live.communicate(timeout=120)
    finally:
        sock.close(linger=0)
    assert live.returncode == 0, err
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["received"] == 13 and summary["bad_messages"] == 4 and summary["error"] is None
    assert summary["missing"] == 10**9 - 12 and summary["missing_first"][:2] == [12, 13]
    assert len(summary["missing_first"]) == 1000


def test_the_reconstructors_geometry_is_built_from_the_flags():
    from leveret.cli.live import _geometry_and_volume

    args = parse(["live", "tcp://127.0.0.1:1", "--det-spacing", "0.5", "--row-spacing", "2", "--center", "10.5"])
    g, vol = _geometry_and_volume(args, "parallel", (4, 24), None, None, None)
    assert isinstance(g, leveret.ParallelGeometry)
    assert (g.n_rows, g.n_cols, g.det_spacing, g.row_spacing, g.center) == (4, 24, 0.5, 2.0, 10.5)
    assert vol.shape == (4, 24, 24) and vol.voxel_size == (2.0, 0.5, 0.5)
    planned = np.radians([0.0, 1.0, 2.0])
    g, _ = _geometry_and_volume(args, "parallel", (4, 24), planned, None, None)
    np.testing.assert_array_equal(g.angles, planned)
    cone = leveret.ConeGeometry.circular(np.radians([0.0, 30.0]), 60.0, 120.0, 4, 8, 2.0)
    g, vol = _geometry_and_volume(args, "cone", (4, 8), None, cone.matrices, cone.matrices[0])
    assert isinstance(g, leveret.ConeGeometry) and (g.n_rows, g.n_cols) == (4, 8)
    np.testing.assert_array_equal(g.matrices, cone.matrices)
    np.testing.assert_allclose(vol.voxel_size, (1.0, 1.0, 1.0), rtol=1e-12)  # the pitch at the axis


def test_frames_without_an_angle_take_the_planned_angles_of_a_stream(tmp_path):
    """--angles plans the scan for a ZeroMQ stream too: frames whose header has
    no angle take the one of their index; one beyond the plan is rejected."""
    from leveret.live import Frame
    from leveret.live.sources import send_frames

    address = f"tcp://127.0.0.1:{_free_port()}"
    live = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leveret",
            "live",
            address,
            "--serve",
            "127.0.0.1:0",
            "--backend",
            "cpu",
            "--detector",
            "8,8",
            "--angles",
            "0:180:12",
            "--exit-when-done",
            "--json",
            "s.json",
        ],
        env=_env(),
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    frames = [Frame(np.ones((8, 8), np.float32), i) for i in [*range(12), 20]]
    assert send_frames(address, frames, rate=200, connect_wait=0.5) == 13
    _, err = live.communicate(timeout=120)
    assert live.returncode == 0, err
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["received"] == 12 and summary["rejected"] == 1
    assert summary["rejected_reasons"] == {"no angle, none planned": 1}


@pytest.mark.parametrize("extra", [[], ["--zmq-threads", "2"], ["--zmq-processes"]])
def test_simulate_streams_over_several_endpoints_that_live_reads_in_parallel(tmp_path, extra):
    endpoints = ",".join(f"tcp://127.0.0.1:{_free_port()}" for _ in range(3))
    live = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leveret",
            "live",
            endpoints,
            "--serve",
            "127.0.0.1:0",
            "--backend",
            "cpu",
            "--exit-when-done",
            "--json",
            "s.json",
            *extra,
        ],
        env=_env(),
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    sim = _simulate(tmp_path, endpoints, "--frames", "30")
    assert sim.returncode == 0, sim.stderr
    assert "sent 30 frames" in sim.stderr
    _, err = live.communicate(timeout=120)
    assert live.returncode == 0, err
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["received"] == 30 and summary["rejected"] == 0 and summary["missing"] == 0
    assert summary["bad_messages"] == 0 and summary["interrupted"] is False


def test_zmq_threads_for_a_source_that_cannot_take_them_is_a_clear_error(tmp_path, capsys):
    assert main(["live", str(tmp_path), "--zmq-threads", "2", "--serve", "127.0.0.1:0"]) == 2
    assert "zmq_threads: --zmq-threads reads a ZeroMQ source" in capsys.readouterr().err
    assert main(["live", str(tmp_path), "--zmq-processes", "--serve", "127.0.0.1:0"]) == 2
    assert "zmq_processes: --zmq-processes reads a ZeroMQ source" in capsys.readouterr().err
    assert (
        main(
            [
                "live",
                f"tcp://127.0.0.1:{_free_port()}",
                "--pattern",
                "sub",
                "--zmq-threads",
                "2",
                "--serve",
                "127.0.0.1:0",
            ]
        )
        == 2
    )
    assert "leveret live: error: threads: 2 threads for 1 endpoint(s) need PULL sockets" in capsys.readouterr().err
    assert main(["live", "tcp://127.0.0.1:1,tcp://127.0.0.1:1", "--serve", "127.0.0.1:0"]) == 2
    assert "leveret live: error: address: an endpoint is named twice" in capsys.readouterr().err
