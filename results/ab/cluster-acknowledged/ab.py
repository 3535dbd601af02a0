"""The A/B behind README.md: a cluster's acknowledged writes through redis-py's cluster
pipeline (`old`) against one pipeline on one connection a write (`new`), on a private cluster
of 3 masters with a replica each, the sides in turn each round.

    python ab.py ROUNDS COUNT old=TREE new=TREE > ab.csv
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from experiments.harness.clusters import replicated

HERE = Path(__file__).resolve().parent


def main() -> None:
    rounds, count = int(sys.argv[1]), int(sys.argv[2])
    sides = [arg.split("=", 1) for arg in sys.argv[3:]]
    print("round,side,replicas,arrivals_per_s,passes_per_s,load")
    with tempfile.TemporaryDirectory() as scratch, replicated(Path(scratch)) as cluster:
        cluster.settled()
        for r in range(rounds):
            order = sides[r % len(sides):] + sides[: r % len(sides)]
            for replicas in (0, 1):
                for side, tree in order:
                    url = (f"{cluster.url}?cluster=on&shards=3&scheduler=stream"
                           f"&replicas={replicas}")
                    env = {**os.environ, "PYTHONPATH": tree}
                    done = subprocess.run(
                        [f"{tree}/.venv/bin/python", str(HERE / "one.py"), url, str(count)],
                        env=env, capture_output=True, text=True, check=True)
                    load = os.getloadavg()[0]
                    print(f"{r},{side},{replicas},{done.stdout.strip()},{load:.1f}", flush=True)


if __name__ == "__main__":
    main()
