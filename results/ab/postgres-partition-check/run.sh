#!/bin/sh
# Per-pass counters of the common path on Postgres, the sides in turn, ROUNDS rounds, against a
# private server with pg_stat_statements (the one ../postgres-common-path/run.sh starts):
#
#   URL=postgresql://postgres@127.0.0.1:PORT/postgres ROUNDS=4 OUT=perpass \
#       sh run.sh old=<checkout> base=<checkout> new=<checkout>
#
# Each checkout's code is imported from the checkout itself (perpass.py puts it first).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
round=1
while [ "$round" -le "$ROUNDS" ]; do
    for side in "$@"; do
        name=${side%%=*}; tree=${side#*=}
        (cd "$tree" && "${PYTHON:-python3}" "$here/../postgres-common-path/perpass.py" "$URL" \
            --workflows 3000 >"$OUT/$name$round.json")
    done
    round=$((round + 1))
done
