#!/bin/sh
# Interpreted instructions a pass of one revision: callgrind's total for `work N` minus `arrive N`,
# over N. Usage: sh count.sh <label> <tree> <python> [N]   (run from this directory)
label=$1; tree=$2; python=$3; n=${4:-2000}; out=$(mktemp -d)
for mode in arrive work; do
    PYTHONPATH=$tree PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=$out/$mode \
        "$python" one_step.py $mode $n 2>$out/$mode.log >/dev/null
done
a=$(sed -n 's/^summary: //p' $out/arrive); w=$(sed -n 's/^summary: //p' $out/work)
echo "$label: $(( (w - a) / n )) instructions a pass ($w - $a over $n)"
rm -r "$out"
