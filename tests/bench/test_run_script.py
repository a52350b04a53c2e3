"""bench/run.sh, checked without a GPU: every test it runs under compute-sanitizer exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_sanitized_tests_exist():
    """Each pytest node id in run.sh's default compute-sanitizer list names a
    test function defined in that file (a renamed or moved test would make
    pytest stop the memcheck run before it starts)."""
    script = (ROOT / "bench" / "run.sh").read_text()
    block = re.search(r"NODES=\((.*?)\)", script, re.S).group(1)
    nodes = block.split()
    assert len(nodes) >= 10
    for node in nodes:
        path, name = node.split("::")
        source = (ROOT / path).read_text()
        assert re.search(rf"^def {re.escape(name)}\(", source, re.M), node
