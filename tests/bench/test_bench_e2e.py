"""bench/bench_e2e.py runs on the CPU at a small size: it writes the DXchange
scan once, reconstructs it into the formats asked for, and writes JSON with
each run's stage split and floor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args, cwd):
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_e2e.py"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "NUMBA_NUM_THREADS": "2"},
    )


def test_help_names_the_sizes_and_formats(tmp_path):
    run = _bench("--help", cwd=tmp_path)
    assert run.returncode == 0
    for flag in ("--size", "--views", "--rows", "--cols", "--formats", "--dir", "--input", "--gpus", "--probe-gb"):
        assert flag in run.stdout


def test_a_small_cpu_suite_writes_its_table_and_json(tmp_path):
    out = tmp_path / "e2e.json"
    run = _bench(
        "--views",
        "24",
        "--rows",
        "6",
        "--cols",
        "32",
        "--backend",
        "cpu",
        "--dir",
        str(tmp_path),
        "--formats",
        "npy,h5,h5-uint16",
        "--probe-gb",
        "0.02",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(out.read_text())
    assert result["problem"]["updates"] == 24 * 6 * 32 * 32
    runs = {r["format"]: r for r in result["runs"]}
    assert set(runs) == {"npy", "h5", "h5-uint16"}
    for r in runs.values():
        assert r["wall"] > 0 and r["floor"] > 0 and r["floor_stage"] in r["floors"]
        assert {"read", "reconstruct", "write"} <= set(r["stages"])
    assert runs["h5-uint16"]["stored_bytes"] < runs["npy"]["stored_bytes"]
    assert result["fbp_in_memory"] > 0 and "write" in result["rates"]
    # the scan is a DXchange file of uint16 counts with flats, darks and angles, kept for the next run
    (scan,) = tmp_path.glob("bench_e2e_24x6x32_frames.h5")
    with h5py.File(scan) as f:
        assert f["exchange/data"].dtype == np.uint16 and f["exchange/data"].chunks == (1, 6, 32)
        assert f["exchange/data_white"].shape == (10, 6, 32) and f["exchange/data_dark"].shape == (5, 6, 32)
        assert f["exchange/theta"].shape == (24,)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("rec")]  # each output removed
    assert "disk to disk / in memory" in run.stdout


def test_a_suite_stopped_part_way_keeps_the_rows_it_has(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_e2e

    ran = []
    real = bench_e2e.run_one

    def run_one(fmt, *args, **kwargs):
        if ran:
            raise KeyboardInterrupt  # as a time limit or Ctrl-C would, on the second format
        ran.append(fmt)
        return real(fmt, *args, **kwargs)

    monkeypatch.setattr(bench_e2e, "run_one", run_one)
    out = tmp_path / "e2e.json"
    argv = ["--views", "12", "--rows", "4", "--cols", "16", "--backend", "cpu", "--dir", str(tmp_path)]
    argv += ["--formats", "npy,h5", "--no-probe", "--no-warm", "--no-memory", "--out", str(out)]
    with pytest.raises(KeyboardInterrupt):
        bench_e2e.main(argv)
    assert [r["format"] for r in json.loads(out.read_text())["runs"]] == ["npy"]


def test_the_pipeline_is_warmed_once_for_each_output_dtype_of_the_suite(tmp_path, monkeypatch):
    """A uint16 output has kernels of its own: a suite that times one warms them too."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_e2e

    from leveret.execution import outofcore

    made = []

    original = outofcore.reconstruct_to_file

    def reconstruct_to_file(*args, **kwargs):
        made.append(kwargs.get("output_dtype"))
        return original(*args, **kwargs)

    monkeypatch.setattr(outofcore, "reconstruct_to_file", reconstruct_to_file)
    assert bench_e2e.warm_options(["npy", "h5-uint16", "h5", "npy-uint16"], {}) == [{}, {"output_dtype": "uint16"}]
    argv = ["--views", "12", "--rows", "4", "--cols", "16", "--backend", "cpu", "--dir", str(tmp_path)]
    argv += ["--formats", "npy,h5-uint16", "--no-probe", "--no-warm", "--no-memory", "--out", str(tmp_path / "e.json")]
    bench_e2e.main(argv)
    assert made[:2] == [None, "uint16"]  # the warm-up's two runs, before the timed ones


def test_probe_each_holds_a_case_to_its_own_bytes_taken_to_disk_beside_it(tmp_path, monkeypatch):
    """A virtual disk's rate drifts within a call: with --probe-each a case's sync floor is the
    time its stored bytes take to disk, written alone right after it, not the call's first probe."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_e2e

    asked = []
    monkeypatch.setattr(bench_e2e, "durable_rate", lambda folder, threads, nbytes, files: asked.append(nbytes) or 4e6)
    out = tmp_path / "e.json"
    argv = ["--views", "12", "--rows", "4", "--cols", "16", "--backend", "cpu", "--dir", str(tmp_path)]
    argv += ["--formats", "npy", "--no-probe", "--no-warm", "--no-memory", "--probe-each", "--out", str(out)]
    bench_e2e.main(argv)
    (row,) = json.loads(out.read_text())["runs"]
    assert asked == [row["stored_bytes"]] and row["durable_rate"] == 4e6 and row["stored_files"] == 1
    assert row["floors"]["sync"] == pytest.approx(row["stored_bytes"] / 4e6)


@pytest.mark.parametrize("files, sizes", [(1, [1 << 20, 2 << 20, 2 << 20]), (3, [1747627, 1747627, 1747626])])
def test_the_durable_probe_writes_the_bytes_asked_in_the_files_asked_and_leaves_nothing(
    tmp_path, monkeypatch, files, sizes
):
    """A folder output's floor is its bytes in as many files: each flushed, and the folder."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_e2e

    written, flushed = [], []
    real_write, real_fsync = os.pwrite, os.fsync
    monkeypatch.setattr(
        bench_e2e.os, "pwrite", lambda fd, data, at: written.append(len(data)) or real_write(fd, data, at)
    )
    monkeypatch.setattr(bench_e2e.os, "fsync", lambda fd: flushed.append(fd) or real_fsync(fd))
    assert bench_e2e.durable_rate(tmp_path, 2, 5 << 20, files, piece=2 << 20) > 0
    assert sorted(written) == sorted(sizes) and len(flushed) == files + 1 and list(tmp_path.iterdir()) == []


def test_repeats_with_probe_each_keep_the_run_of_median_ratio_to_its_own_floor(monkeypatch):
    """Each repeat is held to the disk's rate measured right after it: the kept run is the median
    ratio, not the fastest wall (which a slow disk beside a lucky run would flatter)."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_e2e

    walls, rates = iter([10.0, 8.0, 12.0]), iter([1.0, 0.5, 1.0])  # own floors 10, 20, 10 s
    row = bench_e2e.held_to_own_bytes(
        lambda: {"wall": next(walls), "stored_bytes": 10}, lambda r: next(rates), repeats=3
    )
    assert [r["sync_ratio"] for r in row["repeats"]] == [1.0, 0.4, 1.2]
    assert row["wall"] == 10.0 and row["durable_rate"] == 1.0  # the median run with its own rate


def test_the_disk_during_a_run_is_its_pace_while_work_waited_for_it(monkeypatch):
    """The disk's rate during a run counts only the time in which the page cache held work for
    it (a stretch where the run kept it waiting is left out); steal is the share of all CPU ticks
    the hypervisor took over the whole run."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_e2e

    samples, written, weighted = [], 0.0, 0.0
    for k in range(101):  # every 0.1 s for 10 s: nothing for 1 s, 1 GB/s, waiting on the run 5-6 s, 1 GB/s
        t = k / 10
        samples.append((t, written, weighted, 0 if t < 1 or 5 <= t < 6 else 1 << 30, 5 * k, 100 * k))
        if 1 <= t < 5 or 6 <= t < 10:
            written += 1e8
            weighted += 32 * 100  # 32 requests in flight for 100 ms
    disk = bench_e2e.host_during(samples)
    assert disk["first"] == pytest.approx(1.1) and disk["written"] == pytest.approx(8e9)
    assert disk["rate"] == pytest.approx(1e9) and disk["depth"] == pytest.approx(32)
    assert disk["fed"] == pytest.approx(7.9 / 8.9) and disk["steal"] == pytest.approx(0.05)
    assert disk["timeline"][11] == [1.1, int(1e8), 3200, 1 << 30]
    assert bench_e2e.host_during(samples[:2]) == {}
    assert bench_e2e.host_during([(t, 1e6, 0, 0, 0, 1) for t, *_ in samples]) == {}  # the journal alone


def test_the_host_watch_sees_bytes_flushed_in_its_block(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_e2e

    if bench_e2e.block_stat(tmp_path) is None:
        pytest.skip("the temporary folder has no block device's counters (tmpfs, overlay, not Linux)")
    with bench_e2e.HostWatch(tmp_path, every=0.005) as watch:
        with open(tmp_path / "x", "wb") as f:
            f.write(np.random.default_rng(0).integers(0, 255, 32 << 20, dtype=np.uint8).tobytes())
            os.fsync(f.fileno())
    first, last = watch.samples[0], watch.samples[-1]
    assert len(watch.samples) >= 2 and last[1] - first[1] >= 32 << 20
    assert [s[0] for s in watch.samples] == sorted(s[0] for s in watch.samples)
    assert last[5] > first[5] and 0 <= last[4] - first[4] <= last[5] - first[5]  # CPU ticks: stolen within all
    monkeypatch.setattr(bench_e2e, "block_stat", lambda folder: None)
    with bench_e2e.HostWatch(tmp_path) as none:
        pass
    assert none.samples == [] and none.summary() == {}
