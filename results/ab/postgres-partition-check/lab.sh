#!/bin/sh
# The lab's throughput on Postgres alone, the sides in turn (the first side moves each round):
#
#   sh lab.sh OUT ROUNDS old=<checkout> main=<checkout>
#
# Each checkout needs its own .venv (python3 dev.py demo). Reduce with
# `python ../common-path-quiet/ab.py OUT`.
out=$1; rounds=$2; shift 2
for r in $(seq 1 "$rounds"); do
  for pair in "$@"; do
    side=${pair%%=*}; tree=${pair#*=}
    (cd "$tree" && .venv/bin/python -m experiments run throughput --quick --backends postgres \
        --sources binary --no-figures --set workflows=1500 --results "$out/$side$r" >/dev/null 2>&1)
  done
  first=$1; shift; set -- "$@" "$first"
done
