"""The throughput A/B of a `tp.sh` folder: each side's median over its rounds, and ratios of
medians with a 95% bootstrap interval (10,000 resamples, seed 0).

    python tpreduce.py <folder>
"""

from __future__ import annotations

import csv
import random
import re
import statistics
import sys
from pathlib import Path

METRICS = ("passes_per_s", "worker_cpu_per_pass", "server_cpu_per_pass", "round_trips_per_pass",
           "requests_per_pass", "server_commits_per_pass")


def _ratio(a: list[float], b: list[float]) -> tuple[float, float, float]:
    rng = random.Random(0)
    point = statistics.median(b) / statistics.median(a)
    draws = sorted(statistics.median(rng.choices(b, k=len(b)))
                   / statistics.median(rng.choices(a, k=len(a))) for _ in range(10_000))
    return point, draws[250], draws[9_750]


def main(folder: Path) -> None:
    values: dict[tuple[str, str, str], list[float]] = {}
    for path in sorted(folder.glob("*/throughput.csv")):
        side = re.sub(r"\d+$", "", path.parent.name)
        with path.open() as f:
            for row in csv.DictReader(f):
                if row["metric"] in METRICS and not row["request"]:
                    key = (side, row["processes"], row["metric"])
                    values.setdefault(key, []).append(float(row["value"]))
    sides = [s for s in ("old", "main", "branch") if any(k[0] == s for k in values)]
    pairs = [("old", "main"), ("old", "branch"), ("main", "branch")]
    for metric in METRICS:
        print(f"\n{metric}\n")
        print("| processes | " + " | ".join(sides) + " | "
              + " | ".join(f"{b}/{a} (95%)" for a, b in pairs) + " |")
        print("|---|" + "---|" * (len(sides) + len(pairs)))
        for processes in ("1", "2"):
            got = {s: values.get((s, processes, metric), []) for s in sides}
            if not all(got.values()):
                continue
            cells = [f"{statistics.median(got[s]):.4g}" for s in sides]
            for a, b in pairs:
                point, low, high = _ratio(got[a], got[b])
                cells.append(f"{point:.2f} ({low:.2f} to {high:.2f})")
            print(f"| {processes} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
