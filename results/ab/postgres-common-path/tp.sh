#!/bin/sh
# The lab's throughput experiment (Postgres, 1 and 2 worker processes, 1,500 one-step
# workflows, a private server each run), ROUNDS rounds, the sides in turn (the first side moves
# round to round), each from its own checkout and .venv:
#
#   SIDES="old=<checkout> main=<checkout> branch=<checkout>" ROUNDS=6 OUT=<dir> sh tp.sh
set -eu
ROUNDS=${ROUNDS:-6}
mkdir -p "$OUT"
set -- $SIDES
count=$#
round=1
while [ "$round" -le "$ROUNDS" ]; do
    shift_by=$(( (round - 1) % count ))
    order="$*"
    i=0
    while [ "$i" -lt "$shift_by" ]; do
        first=${order%% *}; order="${order#* } $first"; i=$((i + 1))
    done
    for side in $order; do
        name=${side%%=*}; tree=${side#*=}
        echo "$name$round $(cut -d' ' -f1 /proc/loadavg)" >>"$OUT/load.txt"
        (cd "$tree" && .venv/bin/python -m experiments run throughput --quick --backends postgres \
            --sources binary --set workflows=1500 --no-figures --results "$OUT/$name$round" \
            >/dev/null)
    done
    round=$((round + 1))
done
