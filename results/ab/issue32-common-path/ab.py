"""Reduce the runs of this A/B to per-run rows and ratios with 95% bootstrap intervals.

    python results/ab/issue32-common-path/ab.py RUNS_DIR [PREFIX]

RUNS_DIR holds one lab result folder per run, named `<side><round>-tp` (throughput) and
`<side><round>-lat` (latency), side `before` or `after`. Writes PREFIXthroughput.csv and
PREFIXlatency.csv (when it has such runs) beside this file and prints the tables the README
quotes.
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
NAME = re.compile(r"(before|after)(\d+)-(tp|lat)")
METRICS = ("passes_per_s", "worker_cpu_per_pass", "requests_per_pass")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ratio(before: list[float], after: list[float], draws: int = 4000) -> tuple[float, float, float]:
    """Median of `after` over median of `before`, and a 95% bootstrap interval over the runs."""
    rng = random.Random(32)
    point = statistics.median(after) / statistics.median(before)
    made = sorted(
        statistics.median(rng.choices(after, k=len(after)))
        / statistics.median(rng.choices(before, k=len(before)))
        for _ in range(draws)
    )
    return point, made[int(0.025 * draws)], made[int(0.975 * draws) - 1]


def main(runs: Path, prefix: str = "") -> None:
    tp_rows: list[dict[str, object]] = []
    lat_rows: list[dict[str, object]] = []
    for folder in sorted(runs.iterdir()):
        found = NAME.fullmatch(folder.name)
        if not found or not folder.is_dir():
            continue
        side, round_, kind = found.group(1), int(found.group(2)), found.group(3)
        if kind == "tp":
            kept: dict[tuple[str, str], dict[str, object]] = {}
            with open(folder / "throughput.csv") as f:
                for row in csv.DictReader(f):
                    if row["request"] or row["metric"] not in METRICS:
                        continue
                    key = (row["backend"], row["processes"])
                    kept.setdefault(key, {"side": side, "round": round_, "backend": key[0],
                                          "processes": int(key[1])})[row["metric"]] = float(
                        row["value"])
            tp_rows += kept.values()
        else:
            samples: dict[str, list[float]] = defaultdict(list)
            with open(folder / "latency.csv") as f:
                for row in csv.DictReader(f):
                    if row["metric"] == "submit_to_first_pass":
                        samples[row["backend"]].append(float(row["value"]))
            for backend, values in samples.items():
                lat_rows.append({"side": side, "round": round_, "backend": backend,
                                 "submissions": len(values),
                                 "p50_ms": round(quantile(values, 0.5), 4),
                                 "p90_ms": round(quantile(values, 0.9), 4),
                                 "p99_ms": round(quantile(values, 0.99), 4)})
    order = lambda r: (r["backend"], r.get("processes", 0), r["side"], r["round"])  # noqa: E731
    tp_rows.sort(key=order)
    lat_rows.sort(key=order)
    for name, rows in (("throughput.csv", tp_rows), ("latency.csv", lat_rows)):
        if not rows:
            continue
        with open(HERE / f"{prefix}{name}", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)

    print("| store | processes | passes/s before | after | after/before (95%) |"
          " worker CPU ms/pass before | after | after/before (95%) |")
    print("|---|---|---|---|---|---|---|---|")
    groups: dict[tuple[str, int], dict[str, list[dict[str, object]]]] = defaultdict(
        lambda: defaultdict(list))
    for row in tp_rows:
        groups[(str(row["backend"]), int(str(row["processes"])))][str(row["side"])].append(row)
    for (backend, processes), sides in sorted(groups.items()):
        cells = [backend, str(processes)]
        for metric, digits in (("passes_per_s", 0), ("worker_cpu_per_pass", 3)):
            b = [float(str(r[metric])) for r in sides["before"]]
            a = [float(str(r[metric])) for r in sides["after"]]
            point, low, high = ratio(b, a)
            cells += [f"{statistics.median(b):,.{digits}f}", f"{statistics.median(a):,.{digits}f}",
                      f"{point:.2f} ({low:.2f} to {high:.2f})"]
        print("| " + " | ".join(cells) + " |")
    if not lat_rows:
        return
    print()
    print("| store | p50 ms before | after | p50 after/before (95%) | p99 ms before | after |"
          " p99 after/before (95%) |")
    print("|---|---|---|---|---|---|---|")
    lat: dict[str, dict[str, list[dict[str, object]]]] = defaultdict(lambda: defaultdict(list))
    for row in lat_rows:
        lat[str(row["backend"])][str(row["side"])].append(row)
    for backend, sides in sorted(lat.items()):
        cells = [backend]
        for metric in ("p50_ms", "p99_ms"):
            b = [float(str(r[metric])) for r in sides["before"]]
            a = [float(str(r[metric])) for r in sides["after"]]
            point, low, high = ratio(b, a)
            cells += [f"{statistics.median(b):.2f}", f"{statistics.median(a):.2f}",
                      f"{point:.2f} ({low:.2f} to {high:.2f})"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:])
