"""bench/bench_live.py's ZeroMQ measurements run end to end on small frames."""

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("zmq")
BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize("transport, receivers", [("ipc", "threads"), ("tcp", "threads"), ("ipc", "processes")])
def test_bench_live_reports_frames_per_second_over_parallel_zeromq_streams(tmp_path, monkeypatch, transport, receivers):
    monkeypatch.syspath_prepend(str(BENCH))
    sys.modules.pop("bench_live", None)
    import bench_live

    out = tmp_path / "live.json"
    assert (
        bench_live.main(
            [
                "--zmq-only",
                "--rows",
                "16",
                "--cols",
                "24",
                "--frames",
                "12",
                "--streams",
                "1,3",
                "--zmq-frames",
                "60",
                "--transport",
                transport,
                "--out",
                str(out),
                *(["--zmq-processes"] if receivers == "processes" else []),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert [r["streams"] for r in result["zmq_receive"]] == [1, 3]
    assert all(r["fps"] > 0 and r["GB_per_s"] > 0 and r["receiver_cpu_ms_per_frame"] > 0 for r in result["zmq_receive"])
    assert result["zmq_live_streams"] == 3 and result["zmq_live_fps"] > 0
    assert result["zmq_receivers"] == receivers
    assert result["zmq_transport"] == transport and result["zmq_MB_per_s"] > 0 and result["backend"] == "cpu"
