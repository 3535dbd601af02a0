"""Reduce the runs of this A/B to per-run rows and ratios with 95% bootstrap intervals.

    python results/ab/common-path-quiet/ab.py RUNS_DIR

RUNS_DIR holds a lab result folder per run, named `<side><round>`: side `old` (a839310), `seam`
(9ded57f) or `main`, each with that run's throughput.csv and latency.csv (run.sh writes the two
to `<side><round>-tp` and `-lat`; this folder keeps them put together).
Writes throughput.csv and latency.csv into RUNS_DIR and prints the tables the README quotes:
each side against every later one, of those RUNS_DIR holds.
"""

from __future__ import annotations

import csv
import random
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

#: Every side a sitting names, in the order they are compared (each against every later one):
#: this folder's `old`, `seam` and `main`, and `../postgres-ending/`'s `hack` and `branch`.
SIDES = ("old", "seam", "main", "hack", "branch")
NAME = re.compile(rf"({'|'.join(SIDES)})(\d+)")
METRICS = ("passes_per_s", "worker_cpu_per_pass", "server_cpu_per_pass")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ratio(base: list[float], other: list[float], draws: int = 4000) -> str:
    """Median of `other` over median of `base`, with a 95% bootstrap interval over the runs."""
    rng = random.Random(32)
    point = statistics.median(other) / statistics.median(base)
    made = sorted(
        statistics.median(rng.choices(other, k=len(other)))
        / statistics.median(rng.choices(base, k=len(base)))
        for _ in range(draws)
    )
    return f"{point:.2f} ({made[int(0.025 * draws)]:.2f} to {made[int(0.975 * draws) - 1]:.2f})"


def read(runs: Path) -> dict[str, list[dict[str, object]]]:
    rows: dict[str, list[dict[str, object]]] = defaultdict(list)
    for folder in sorted(runs.iterdir()):
        found = NAME.fullmatch(folder.name)
        if not found or not folder.is_dir():
            continue
        side, round_ = found.group(1), int(found.group(2))
        if (folder / "throughput.csv").exists():
            kept: dict[tuple[str, str], dict[str, object]] = {}
            with open(folder / "throughput.csv") as f:
                for row in csv.DictReader(f):
                    if row.get("request") or row["metric"] not in METRICS:  # none: no request rows
                        continue
                    key = (row["backend"], row["processes"])
                    kept.setdefault(key, {"side": side, "round": round_, "backend": key[0],
                                          "processes": int(key[1])})[row["metric"]] = float(
                        row["value"])
            rows["tp"] += kept.values()
        if (folder / "latency.csv").exists():
            samples: dict[str, list[float]] = defaultdict(list)
            with open(folder / "latency.csv") as f:
                for row in csv.DictReader(f):
                    if row["metric"] == "submit_to_first_pass":
                        samples[row["backend"]].append(float(row["value"]))
            for backend, values in samples.items():
                rows["lat"].append({"side": side, "round": round_, "backend": backend,
                                   "submissions": len(values),
                                   "p50_ms": round(quantile(values, 0.5), 4),
                                   "p99_ms": round(quantile(values, 0.99), 4)})
    return rows


def table(rows: list[dict[str, object]], base: str, others: list[str],
          metrics: list[tuple[str, int]], group: tuple[str, ...]) -> None:
    groups: dict[tuple[object, ...], dict[str, list[dict[str, object]]]] = defaultdict(
        lambda: defaultdict(list))
    for row in rows:
        groups[tuple(row[g] for g in group)][str(row["side"])].append(row)
    head = [*group]
    for metric, _ in metrics:
        head += [f"{metric} {base}"] + [f"{o}" for o in others]
        head += [f"{o}/{base} (95%)" for o in others]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for key, sides in sorted(groups.items()):
        cells = [str(k) for k in key]
        for metric, digits in metrics:
            b = [float(str(r[metric])) for r in sides[base]]
            os_ = {o: [float(str(r[metric])) for r in sides[o]] for o in others}
            cells.append(f"{statistics.median(b):,.{digits}f}")
            cells += [f"{statistics.median(os_[o]):,.{digits}f}" for o in others]
            cells += [ratio(b, os_[o]) for o in others]
        print("| " + " | ".join(cells) + " |")
    print()


def main(runs: Path) -> None:
    rows = read(runs)
    order = lambda r: (r["backend"], r.get("processes", 0), r["side"], r["round"])  # noqa: E731
    for kind in rows:  # a metric a backend does not report is left empty
        for row in rows[kind]:
            for metric in METRICS if kind != "lat" else ():
                row.setdefault(metric, "")
    for kind, name in (("tp", "throughput.csv"), ("lat", "latency.csv")):
        if not rows[kind]:
            continue
        rows[kind].sort(key=order)
        with open(runs / name, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[kind][0]))
            writer.writeheader()
            writer.writerows(rows[kind])
    tp = [("passes_per_s", 0), ("worker_cpu_per_pass", 4)]
    lat = [("p50_ms", 3), ("p99_ms", 2)]
    for kind, metrics, group in (("tp", tp, ("backend", "processes")), ("lat", lat, ("backend",))):
        present = [side for side in SIDES if any(r["side"] == side for r in rows[kind])]
        for n, base in enumerate(present[:-1]):  # each side against every later one
            table(rows[kind], base, present[n + 1:], metrics, group)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
