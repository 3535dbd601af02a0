#!/bin/sh
# The two lab runs behind this folder's CSVs, from the repository's root (DIR: a fresh folder
# each). Private servers (one Redis node, a 3-master cluster) are started by the lab.
set -e
DIR=${1:?a fresh results folder}
python -m experiments run throughput --quick --sources binary \
    --backends redis-set,redis-set-cluster,redis-stream,redis-stream-cluster \
    --set processes=1 --set workflows=2000 --repeat 1 --no-figures --results "$DIR/one"
python -m experiments run throughput --quick --sources binary \
    --backends redis-set-cluster,redis-stream-cluster \
    --set processes=1 --set workflows=2000 --repeat 3 --no-figures --results "$DIR/cluster"
# preload-one-at-a-time.csv: the second run (--repeat 2) with one line changed in
# experiments/measures/throughput.py, the preload's `concurrency=64` made `concurrency=1`.
