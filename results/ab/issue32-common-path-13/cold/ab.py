"""Cold drains of several arms in turn (the first arm moves each round), and each measure's
median per arm with its ratio to the last arm and that ratio's 95% bootstrap interval:

    python ab.py ROUNDS PROCS N DATADIR URL ARM [ARM ...]

An ARM is a tree (a checkout with its own .venv), or a tree followed by `+collect` for
`COLLECT=1` (see drain.py). Every run's line goes to standard error as it ends.
"""

from __future__ import annotations

import os
import random
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MEASURES = ("rate", "span", "first", "cpu", "server")
RESAMPLES = 4000


def interval(arm: list[float], last: list[float]) -> tuple[float, float]:
    """The 95% percentile bootstrap interval of median(arm) / median(last), each arm's runs
    resampled on its own (a fixed seed: the same runs give the same interval)."""
    draw = random.Random(32)
    ratios = sorted(
        statistics.median(draw.choices(arm, k=len(arm)))
        / statistics.median(draw.choices(last, k=len(last)))
        for _ in range(RESAMPLES)
    )
    return ratios[int(RESAMPLES * 0.025)], ratios[int(RESAMPLES * 0.975) - 1]


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
    print("| measure | " + " | ".join(arms) + " | ratios to the last (95%) |")
    print("|---" * (len(arms) + 2) + "|")
    for measure in MEASURES:
        values = [[run[measure] for run in runs[arm]] for arm in arms]
        medians = [statistics.median(one) for one in values]
        ratios = ", ".join(
            f"{m / medians[-1]:.3f} ({low:.2f} to {high:.2f})"
            for m, (low, high) in zip(
                medians[:-1], (interval(one, values[-1]) for one in values[:-1]), strict=True
            )
        )
        print(f"| {measure} | " + " | ".join(f"{m:.1f}" for m in medians) + f" | {ratios} |")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:])
