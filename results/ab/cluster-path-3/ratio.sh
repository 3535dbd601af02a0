#!/bin/sh
# Cluster ÷ one node for the set, one worker process: rounds alternating which backend runs
# first, the one-minute load average written beside each round. DIR: a fresh folder.
set -e
DIR=${1:?a fresh results folder}
for round in 1 2 3 4 5 6; do
    if [ $((round % 2)) = 1 ]; then order=redis-set,redis-set-cluster
    else order=redis-set-cluster,redis-set; fi
    echo "round $round $order load $(cut -d' ' -f1 /proc/loadavg)" >> "$DIR/rounds.txt"
    python -m experiments run throughput --quick --sources binary --backends "$order" \
        --set processes=1 --set workflows=2000 --repeat 1 --no-figures \
        --results "$DIR/round-$round" > /dev/null
done
