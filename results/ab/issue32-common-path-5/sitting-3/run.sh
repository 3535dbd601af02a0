#!/bin/bash
# Memory alone, three revisions in turn, six rounds: OLD_TREE (a839310), PRE_TREE (725aab6: before
# pgending and memcpu2), MAIN_TREE (57c07f7 and later); set the three paths and RUNS before running.
for r in 1 2 3 4 5 6; do
  for pair in old=OLD_TREE pre=PRE_TREE main=MAIN_TREE; do
    side=${pair%%=*}; tree=${pair#*=}
    (cd $tree && .venv/bin/python -m experiments run throughput --quick --backends memory --sources binary --no-figures --set workflows=3000 --results RUNS/$side$r >/dev/null 2>&1)
    python3 -c "
import csv
for row in csv.DictReader(open('RUNS/$side$r/throughput.csv')):
    if row['metric'] in ('passes_per_s','worker_cpu_per_pass'): print('$side', $r, row['processes'], row['metric'], row['value'])
" >> RUNS/out.txt
  done
done
