"""Markdown table of one or more benchmark JSON files (bench_fbp.py / bench_cone.py --out).

    python3 bench/report.py bench/results/h200_*.json
"""
from __future__ import annotations

import json
import sys


def table(paths) -> str:
    lines = ["| code | problem | time | rate | note |", "|---|---|---|---|---|"]
    for path in paths:
        with open(path) as fh:
            data = json.load(fh)
        for row in data["results"]:
            rate = f"{row['GU_per_s']:.1f} GU/s" if row["GU_per_s"] else "-"
            problem = row["problem"].replace("|", "\\|")  # labels such as I|M|T
            lines.append(f"| {row['code']} | {problem} | {row['seconds'] * 1e3:.2f} ms | {rate} "
                         f"| {row['note']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(sys.argv[1:]))
