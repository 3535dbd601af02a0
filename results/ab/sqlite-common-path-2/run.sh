#!/bin/sh
# Every count of this folder, for each side: sh run.sh <python> old=<tree> main=<tree> branch=<tree>
# (run from this directory; the output is counts.txt's).
python=$1; shift
for side in "$@"; do
    label=${side%%=*}; tree=${side#*=}
    echo "== $label"
    PYTHONPATH=$tree PYTHONHASHSEED=0 "$python" one_step.py sql 2000
    PYTHONPATH=$tree PYTHONHASHSEED=0 "$python" one_step.py calls 2000
    sh syscalls.sh "$label" "$tree" "$python" 1000
    sh count.sh "$label" "$tree" "$python" 1000
done
