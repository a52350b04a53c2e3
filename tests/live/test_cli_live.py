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
    live = subprocess.Popen([sys.executable, "-m", "leveret", "live", address, "--serve", "127.0.0.1:0",
                             "--backend", "cpu", "--exit-when-done", "--json", str(summary)],
                            env=_env(), cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    sim = subprocess.run([sys.executable, "-m", "leveret", "live", "simulate", "--address", address,
                          "--frames", "24", "--size", "16", "--rate", "200"],
                         env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert sim.returncode == 0, sim.stderr
    assert "sent 24 frames" in sim.stderr
    _, err = live.communicate(timeout=120)
    assert live.returncode == 0, err
    assert "open http://127.0.0.1:" in err
    result = json.loads(summary.read_text())
    assert result["received"] == 24 and result["rejected"] == 0 and result["missing"] == []
    assert sorted(os.listdir(tmp_path)) == ["summary.json"]   # nothing else written


def test_live_reads_a_folder_source_with_angles(tmp_path):
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(3):
        tifffile.imwrite(frames / f"proj_{i:04d}.tif", np.zeros((4, 8), np.float32))
    from leveret.cli.live import _source
    args = parse(["live", str(frames), "--angles", "0:180:3"])
    src = _source(args)
    got = []
    for f in src:
        if f is not None:
            got.append(f)
        if len(got) == 3:
            break
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
    p = subprocess.Popen([sys.executable, "-m", "leveret", "live", address, "--serve", "127.0.0.1:0",
                          "--detector", "8,8", "--backend", "cpu"], env=_env(), cwd=tmp_path,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    line = ""
    while "open http" not in line and time.monotonic() < deadline:
        line = p.stderr.readline()
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130
    assert "interrupted" in err and "Traceback" not in err
