"""Reduce explain.csv (explain.py's rows, sides before/main/after, several rounds) to medians.

    python results/ab/postgres-policies/reduce_explain.py [explain.csv]

Per scenario and side: the median planning time of the runs planned for their parameters
(runs 1 to 3: with each run's plain EXECUTE, the first five executions), the median planning
and execution times of the runs from the eleventh on (the kept plan), and the median round
trip; then after / before and after / main of the execution and round-trip medians.
"""

from __future__ import annotations

import csv
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(path: Path) -> None:
    custom: dict[tuple[str, str], list[float]] = defaultdict(list)
    kept_plan: dict[tuple[str, str], list[float]] = defaultdict(list)
    execution: dict[tuple[str, str], list[float]] = defaultdict(list)
    trip: dict[tuple[str, str], list[float]] = defaultdict(list)
    with open(path) as f:
        for row in csv.DictReader(f):
            side = re.sub(r"\d+$", "", row["side"])
            key = (row["scenario"], side)
            run = int(row["run"])
            if run <= 3:
                custom[key].append(float(row["planning_ms"]))
            elif run > 10:
                kept_plan[key].append(float(row["planning_ms"]))
                execution[key].append(float(row["execution_ms"]))
                trip[key].append(float(row["round_trip_ms"]))
    med = statistics.median
    print("| statement | side | planning, first runs | planning, kept plan | execution |"
          " round trip |")
    print("|---|---|---|---|---|---|")
    for scenario in dict.fromkeys(k[0] for k in custom):
        for side in ("before", "main", "after"):
            key = (scenario, side)
            if key not in custom:
                continue
            print(f"| {scenario} | {side} | {med(custom[key]):.3f} | {med(kept_plan[key]):.3f} "
                  f"| {med(execution[key]):.3f} | {med(trip[key]):.3f} |")
    print()
    print("| statement | execution after/before | after/main | round trip after/before |"
          " after/main | first-runs planning after/before | after/main |")
    print("|---|---|---|---|---|---|---|")
    for scenario in dict.fromkeys(k[0] for k in custom):
        cells = []
        for values in (execution, trip, custom):
            after = med(values[(scenario, "after")])
            for base in ("before", "main"):
                cells.append(f"{after / med(values[(scenario, base)]):.2f}")
        print(f"| {scenario} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "explain.csv")
