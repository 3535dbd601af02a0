"""Reduce the lab runs of this A/B to per-run rows and ratios with 95% bootstrap intervals:
`../common-path-quiet/ab.py`, whose sides include this folder's.

    python results/ab/postgres-ending/ab.py RUNS_DIR

RUNS_DIR holds a lab result folder per run, named `<side><round>`: side `old` (a839310),
`main`, `hack` (main without the ending's write, never committed) or `branch`, each with that
run's throughput.csv and latency.csv (`../common-path-quiet/run.sh` writes the two to
`<side><round>-tp` and `-lat`; this folder keeps them put together). Prints the tables the
README quotes: each side against every later one, of those RUNS_DIR holds."""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).resolve().parent.parent / "common-path-quiet" / "ab.py"),
               run_name="__main__")
