#!/bin/sh
# A/B of the policies lab's limit arm at 16 over two processes: what the limits rows'
# holders index (written on every take and finish that changes a row) costs. BEFORE and
# AFTER are checkouts (each first on PYTHONPATH), VENV the virtualenv both use, OUT a folder
# for the runs; ROUNDS rounds a side, alternating; BACKEND (postgres). Appends one line a
# run to limit16.csv beside this script.
set -eu
BEFORE=$1; AFTER=$2; VENV=$3; OUT=$4; ROUNDS=${5:-3}; BACKEND=${6:-postgres}
HERE=$(cd "$(dirname "$0")" && pwd)
[ -f "$HERE/limit16.csv" ] || echo "side,round,load_1min,passes_per_s,max_holders,overshoot" > "$HERE/limit16.csv"
for round in $(seq "$ROUNDS"); do
  for side in before after; do
    if [ "$side" = before ]; then TREE=$BEFORE; else TREE=$AFTER; fi
    DIR="$OUT/$side-$round"
    load=$(cut -d' ' -f1 /proc/loadavg)
    (cd "$TREE" && PYTHONPATH="$TREE" "$VENV/bin/python" -m experiments run policies --quick \
        --backends "$BACKEND" --no-figures --set at_most=16 --set processes=2 --set arm=limit \
        --set workflows=400 --results "$DIR" > "$DIR.log" 2>&1)
    pick() { awk -F, -v m="$1" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
                                 $c["metric"] == m { print $c["value"] }' "$DIR/policies.csv"; }
    rate=$(pick passes_per_s); most=$(pick max_holders); over=$(pick overshoot)
    echo "$side,$round,$load,$rate,$most,$over" >> "$HERE/limit16.csv"
  done
done
