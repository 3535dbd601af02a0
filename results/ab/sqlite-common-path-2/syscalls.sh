#!/bin/sh
# System calls a pass of one revision, every thread: strace's count for `work N` minus
# `arrive N`, over N, in all and by call. Usage: sh syscalls.sh <label> <tree> <python> [N]
label=$1; tree=$2; python=$3; n=${4:-2000}; out=$(mktemp -d)
for mode in arrive work; do
    PYTHONPATH=$tree PYTHONHASHSEED=0 strace -f -c -o $out/$mode "$python" one_step.py $mode $n \
        >/dev/null 2>&1
done
# a row: % time, seconds, usecs/call, calls, [errors], name (errors may be blank)
awk -v n="$n" -v label="$label" '
    $1 ~ /^[0-9.]+$/ { calls = $4; name = $NF; if (FILENAME ~ /work$/) w[name] += calls; else a[name] += calls }
    END {
        printf "%s: %.1f system calls a pass\n", label, (w["total"] - a["total"]) / n
        for (name in w) if (name != "total" && (w[name] - a[name]) / n >= 0.05)
            printf "  %-16s %.2f\n", name, (w[name] - a[name]) / n
    }' $out/arrive $out/work
rm -r "$out"
