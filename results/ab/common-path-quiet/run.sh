#!/usr/bin/env bash
# One sitting of the common-path A/B: every side's throughput and latency, the sides in turn
# each round (the first side moves each round so none always runs first).
#
#     results/ab/common-path-quiet/run.sh RUNS_DIR FIRST LAST old=TREE seam=TREE main=TREE
#
# runs rounds FIRST to LAST (a later sitting can add rounds to the same RUNS_DIR).
#
# BACKENDS (comma-separated) narrows the stores. Each TREE is a checkout of that side's
# revision with its own .venv (python3 dev.py demo).
set -euo pipefail
runs=$1; first=$2; last=$3; shift 3
mkdir -p "$runs"
sides=("$@")
backends=${BACKENDS:-memory,redis-stream,redis-set,postgres,sqlite}
for ((r = first; r <= last; r++)); do
  for ((i = 0; i < ${#sides[@]}; i++)); do
    pair=${sides[$(((i + r - 1) % ${#sides[@]}))]}
    side=${pair%%=*}; tree=${pair#*=}
    echo "$(date -u +%H:%M:%S) $side round $r load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$runs/load.txt"
    (cd "$tree" && .venv/bin/python -m experiments run throughput --quick --backends "$backends" \
        --sources binary --no-figures --set workflows=1500 --results "$runs/$side$r-tp" >/dev/null 2>&1)
    (cd "$tree" && .venv/bin/python -m experiments run latency --quick --backends "$backends" \
        --sources binary --no-figures --set seconds=5 --results "$runs/$side$r-lat" >/dev/null 2>&1)
  done
done
