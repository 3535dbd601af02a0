"""Reduce this A/B's runs to per-run rows and after/before ratios with 95% bootstrap intervals.

    python results/ab/sqlite-common-path/ab.py RUNS_DIR

RUNS_DIR holds one lab result folder per run, named `<side><round>` (side `pre`, `before` or
`after`), each written by `python -m experiments run latency ... --results RUNS_DIR/<name>`.
Writes latency.csv beside this file (one row per run and configuration: SQLite's default poll
and the quick poll sweep's 10 ms) and prints the tables the README quotes (each ratio is the
second side's median over the first's, with a bootstrap interval over the runs; the last
column is the median, lowest and highest of the p50 ratios of the runs of one round, which
ran within two minutes of each other).
"""

from __future__ import annotations

import csv
import random
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME = re.compile(r"(pre|before|after)(\d+)")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ratio(before: list[float], after: list[float], draws: int = 4000) -> tuple[float, float, float]:
    """Median of `after` over median of `before`, and a 95% bootstrap interval over the runs."""
    rng = random.Random(34)
    point = statistics.median(after) / statistics.median(before)
    made = sorted(
        statistics.median(rng.choices(after, k=len(after)))
        / statistics.median(rng.choices(before, k=len(before)))
        for _ in range(draws)
    )
    return point, made[int(0.025 * draws)], made[int(0.975 * draws) - 1]


def main(runs: Path) -> None:
    rows: list[dict[str, object]] = []
    for folder in sorted(runs.iterdir()):
        found = NAME.fullmatch(folder.name)
        if not found or not folder.is_dir():
            continue
        samples: dict[str, list[float]] = defaultdict(list)
        with open(folder / "latency.csv") as f:
            for row in csv.DictReader(f):
                if row["backend"] == "sqlite" and row["metric"] == "submit_to_first_pass":
                    samples[row["poll_ms"] or "default"].append(float(row["value"]))
        for poll, values in samples.items():
            rows.append({"side": found.group(1), "round": int(found.group(2)), "poll_ms": poll,
                         "submissions": len(values),
                         "p50_ms": round(quantile(values, 0.5), 4),
                         "p90_ms": round(quantile(values, 0.9), 4),
                         "p99_ms": round(quantile(values, 0.99), 4)})
    rows.sort(key=lambda r: (str(r["poll_ms"]), str(r["side"]), int(str(r["round"]))))
    with open(HERE / "latency.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    groups: dict[str, dict[str, list[dict[str, object]]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        groups[str(row["poll_ms"])][str(row["side"])].append(row)
    for first, second in (("before", "after"), ("pre", "before"), ("pre", "after")):
        print(f"\n{second} against {first}\n")
        print(f"| poll | runs | p50 ms {first} | {second} | p50 ratio (95%) |"
              f" p90 ms {first} | {second} | p90 ratio (95%) | p50 ratio in each round |")
        print("|---|---|---|---|---|---|---|---|---|")
        for poll, sides in sorted(groups.items()):
            if not sides[first] or not sides[second]:
                continue
            cells = [poll, f"{len(sides[first])}/{len(sides[second])}"]
            for metric in ("p50_ms", "p90_ms"):
                b = [float(str(r[metric])) for r in sides[first]]
                a = [float(str(r[metric])) for r in sides[second]]
                point, low, high = ratio(b, a)
                cells += [f"{statistics.median(b):.2f}", f"{statistics.median(a):.2f}",
                          f"{point:.2f} ({low:.2f} to {high:.2f})"]
            paired = sorted(
                float(str(a["p50_ms"])) / float(str(b["p50_ms"]))
                for a in sides[second] for b in sides[first] if a["round"] == b["round"]
            )
            cells.append(f"{statistics.median(paired):.2f} ({paired[0]:.2f} to {paired[-1]:.2f})")
            print("| " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main(Path(sys.argv[1]))
