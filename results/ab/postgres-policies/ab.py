"""Reduce the lab runs of this A/B to per-run rows and ratios with 95% bootstrap intervals.

    python results/ab/postgres-policies/ab.py RUNS_DIR [PREFIX]

RUNS_DIR holds one lab result folder per run, named `<side><round>` (side `before`, `main`
or `after`), each from `experiments run latency throughput --backends postgres --quick`.
Writes PREFIXthroughput.csv and PREFIXlatency.csv beside this file and prints the tables the README
quotes: after over before and after over main, each a ratio of medians over the rounds with a
95% bootstrap interval.
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
NAME = re.compile(r"(before|main|after)(\d+)")
METRICS = ("passes_per_s", "worker_cpu_per_pass")
SIDES = ("before", "main", "after")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ratio(base: list[float], new: list[float], draws: int = 4000) -> str:
    """Median of `new` over median of `base`, with a 95% bootstrap interval over the rounds."""
    rng = random.Random(34)
    point = statistics.median(new) / statistics.median(base)
    made = sorted(
        statistics.median(rng.choices(new, k=len(new)))
        / statistics.median(rng.choices(base, k=len(base)))
        for _ in range(draws)
    )
    return f"{point:.2f} ({made[int(0.025 * draws)]:.2f} to {made[int(0.975 * draws) - 1]:.2f})"


def rows(runs: Path) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    tp: list[dict[str, object]] = []
    lat: list[dict[str, object]] = []
    for folder in sorted(runs.iterdir()):
        found = NAME.fullmatch(folder.name)
        if not found or not folder.is_dir():
            continue
        side, round_ = found.group(1), int(found.group(2))
        kept: dict[str, dict[str, object]] = {}
        with open(folder / "throughput.csv") as f:
            for row in csv.DictReader(f):
                if row["request"] or row["metric"] not in METRICS:
                    continue
                kept.setdefault(row["processes"], {
                    "side": side, "round": round_, "processes": int(row["processes"])
                })[row["metric"]] = float(row["value"])
        tp += kept.values()
        with open(folder / "latency.csv") as f:
            values = [float(r["value"]) for r in csv.DictReader(f)
                      if r["metric"] == "submit_to_first_pass"]
        lat.append({"side": side, "round": round_, "submissions": len(values),
                    "p50_ms": round(quantile(values, 0.5), 4),
                    "p90_ms": round(quantile(values, 0.9), 4)})
    return tp, lat


def main(runs: Path, prefix: str = "") -> None:
    tp, lat = rows(runs)
    for name, kept in (("throughput.csv", tp), ("latency.csv", lat)):
        kept.sort(key=lambda r: (r.get("processes", 0), SIDES.index(str(r["side"])), r["round"]))
        with open(HERE / f"{prefix}{name}", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(kept[0]))
            writer.writeheader()
            writer.writerows(kept)
    print("| measure | before | main | after | after/before (95%) | after/main (95%) |")
    print("|---|---|---|---|---|---|")

    def line(label: str, by_side: dict[str, list[float]], digits: int) -> None:
        medians = [f"{statistics.median(by_side[s]):,.{digits}f}" for s in SIDES]
        ratios = [ratio(by_side[base], by_side["after"]) for base in ("before", "main")]
        print(f"| {label} | " + " | ".join(medians + ratios) + " |")

    for metric in ("p50_ms", "p90_ms"):
        by_side: dict[str, list[float]] = defaultdict(list)
        for row in lat:
            by_side[str(row["side"])].append(float(str(row[metric])))
        line(f"latency {metric.removesuffix('_ms')} ms at 20/s", by_side, 2)
    for processes in sorted({int(str(r["processes"])) for r in tp}):
        for metric, digits in (("passes_per_s", 0), ("worker_cpu_per_pass", 3)):
            by_side = defaultdict(list)
            for row in tp:
                if row["processes"] == processes:
                    by_side[str(row["side"])].append(float(str(row[metric])))
            line(f"{metric}, {processes} processes", by_side, digits)


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:])
