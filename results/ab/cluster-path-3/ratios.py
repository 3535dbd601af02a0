"""Cluster ÷ one node per round of `ratio.sh` (paired), medians with bootstrap intervals."""

import csv
import pathlib
import sys

from experiments.readers.uncertainty import quantile

METRICS = ("passes_per_s", "worker_cpu_per_pass", "round_trips_per_pass", "requests_per_pass")


def main(folder: pathlib.Path) -> None:
    """Print each round's values, then the median ratio of each metric with its interval."""
    ratios: dict[str, list[float]] = {m: [] for m in METRICS}
    for path in sorted(folder.glob("round-*/throughput.csv")):
        with path.open() as f:
            rows = [r for r in csv.DictReader(f) if not r["request"]]
        value = {(r["backend"], r["metric"]): float(r["value"]) for r in rows}
        line = [path.parent.name]
        for metric in METRICS:
            one, cluster = value[("redis-set", metric)], value[("redis-set-cluster", metric)]
            ratios[metric].append(cluster / one)
            line.append(f"{metric} {one:.4g} -> {cluster:.4g}")
        print("; ".join(line))
    for metric, found in ratios.items():
        interval = quantile(found, 0.5)
        print(f"{metric}, cluster / one node: {interval.estimate:.3f} "
              f"({interval.lo:.3f}-{interval.hi:.3f}), n={interval.n}")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
