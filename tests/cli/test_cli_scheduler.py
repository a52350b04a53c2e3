"""``leveret recon --scheduler`` (a Dask cluster) and ``--gpus``, through the
console entry point: a cluster run writes what a run in one process writes;
a bad or unreachable scheduler, or no ``distributed``, is one line and exit 2."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.io import read_array

SRC = Path(leveret.__file__).resolve().parents[1]


def recon(output, *flags) -> list[str]:
    """``recon proj.npy OUTPUT`` of the test scan, two slices per slab, then ``flags``."""
    return ["recon", "proj.npy", str(output), "--angles", "0:180:60", "--slab-slices", "2", "--no-progress", *flags]


def leveret_cmd(*args, cwd, prelude: str = ""):
    """``python -m leveret ARGS`` started in a subprocess (the entry point called
    after the Python ``prelude`` if one is given); the Popen."""
    start = (
        ["-m", "leveret"]
        if not prelude
        else ["-c", f"import sys; {prelude}; sys.argv = ['leveret'] + sys.argv[1:]; from leveret.cli import run; run()"]
    )
    return subprocess.Popen(
        [sys.executable, *start, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(SRC), CUDA_VISIBLE_DEVICES=""),
    )


def finished(proc) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_cmd(*args, cwd, prelude: str = "") -> subprocess.CompletedProcess:
    return finished(leveret_cmd(*args, cwd=cwd, prelude=prelude))


@pytest.fixture
def folder(tmp_path):
    """A small scan (60 angles over 180 degrees, 8 rows x 32 columns) as proj.npy."""
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 60, endpoint=False), 32, n_rows=8)
    np.save(tmp_path / "proj.npy", phantom.ball(9.0).project(g).astype(np.float32))
    return tmp_path


def test_scheduler_runs_on_a_running_cluster_and_on_a_local_one(folder):
    distributed = pytest.importorskip("distributed")
    pytest.importorskip("zarr")
    assert run_cmd(*recon("ref.zarr"), cwd=folder).returncode == 0
    ref = read_array(folder / "ref.zarr")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=logging.ERROR
    ) as cluster:
        r = run_cmd(*recon("a.zarr"), "--scheduler", cluster.scheduler_address, cwd=folder)
    assert r.returncode == 0, r.stderr
    assert "dask: 2 worker(s)" in r.stderr and "dashboard http" in r.stderr
    np.testing.assert_array_equal(read_array(folder / "a.zarr"), ref)
    r = run_cmd(*recon("b.h5"), "--scheduler", "local", cwd=folder)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(read_array(folder / "b.h5"), ref)


def test_bad_or_unreachable_scheduler_is_one_line_and_exit_2(folder):
    pytest.importorskip("distributed")
    silent = socket.socket()  # accepts connections, never answers: a cluster that does not respond
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    port = silent.getsockname()[1]
    try:  # run side by side: the unreachable ones wait out the connection timeout
        procs = {
            address: leveret_cmd(*recon("rec.zarr"), "--scheduler", address, cwd=folder)
            for address in ("nonsense", "foo://host:1", "tcp://127.0.0.1:1", f"tcp://127.0.0.1:{port}")
        }
        results = {address: finished(p) for address, p in procs.items()}
    finally:
        silent.close()
    for address in ("nonsense", "foo://host:1"):
        r = results[address]
        assert r.returncode == 2 and r.stderr.strip().splitlines() == [
            "leveret recon: error: --scheduler: expected 'local' or a Dask scheduler's address such as "
            f"tcp://HOST:8786, got {address!r}"
        ]
    for address in ("tcp://127.0.0.1:1", f"tcp://127.0.0.1:{port}"):
        r = results[address]
        assert r.returncode == 2 and r.stderr.strip().splitlines() == [
            f"leveret recon: error: --scheduler: no Dask scheduler answered at {address} within 5 s; "
            "start one with 'dask scheduler', or give 'local'"
        ]
    assert sorted(p.name for p in folder.iterdir()) == ["proj.npy"]


def test_scheduler_without_distributed_says_what_to_install(folder):
    r = run_cmd(
        *recon("rec.zarr"), "--scheduler", "local", cwd=folder, prelude="sys.modules['distributed'] = None"
    )  # import distributed fails
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "leveret recon: error: --scheduler: running on a Dask cluster needs the distributed package; "
        'pip install "leveret[cluster]"'
    ]


@pytest.mark.parametrize("text", ["", "1,x", "-1", "0,0", "some"])
def test_gpus_takes_all_or_gpu_numbers(folder, text):
    r = run_cmd(*recon("rec.npy"), "--gpus", text, cwd=folder)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].endswith(
        f"argument --gpus: expected 'all' or GPU ids such as 0,1, got {text!r}"
    )


def test_gpus_go_to_the_pipeline_and_need_cuda(folder, monkeypatch, capsys):
    """--gpus names the GPUs the pipeline's compute stages run on (one stage per GPU,
    each taking whole slabs): refused, naming the flag, for a CPU run."""
    from leveret.cli import main
    from leveret.cuda import devices

    monkeypatch.chdir(folder)
    monkeypatch.setattr(devices, "parse", lambda d: d)  # no CuPy here: the ids as given
    assert main([*recon("rec.npy"), "--gpus", "0,1", "--backend", "cpu"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "leveret recon: error: --gpus: runs on CUDA GPUs, but the backend is 'cpu'; use --backend cuda or --gpus None"
    )
    assert not (folder / "rec.npy").exists()
    assert main([*recon("rec2.npy"), "--gpus", "all", "--scheduler", "local"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "leveret recon: error: --gpus: give it without --scheduler; each Dask worker uses its own GPU"
    )
