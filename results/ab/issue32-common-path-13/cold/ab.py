"""Cold drains of several arms in turn (the first arm moves each round), and each measure's
median per arm with its ratio to the last arm:

    python ab.py ROUNDS PROCS N DATADIR URL ARM [ARM ...]

An ARM is a tree (a checkout with its own .venv), or a tree followed by `+collect` for
`COLLECT=1` (see drain.py). Every run's line goes to standard error as it ends.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MEASURES = ("rate", "span", "first", "cpu", "server")


def main(rounds: int, procs: str, count: str, data: str, url: str, arms: list[str]) -> None:
    runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    for r in range(rounds):
        for arm in arms[r % len(arms):] + arms[: r % len(arms)]:
            tree, _, option = arm.partition("+")
            env = {**os.environ, **({"COLLECT": "1"} if option == "collect" else {})}
            done = subprocess.run([str(HERE / "drain.sh"), tree, count, procs, data, url],
                                  capture_output=True, text=True, env=env, check=True)
            print(arm, done.stdout.strip(), file=sys.stderr)
            runs[arm].append({k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", done.stdout)})
    print("| measure | " + " | ".join(arms) + " | ratios to the last |")
    print("|---" * (len(arms) + 2) + "|")
    for measure in MEASURES:
        medians = [statistics.median(run[measure] for run in runs[arm]) for arm in arms]
        ratios = ", ".join(f"{m / medians[-1]:.3f}" for m in medians[:-1])
        print(f"| {measure} | " + " | ".join(f"{m:.1f}" for m in medians) + f" | {ratios} |")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:])
