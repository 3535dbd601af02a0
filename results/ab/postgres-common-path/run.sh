#!/bin/sh
# Per-pass costs of the common path on Postgres, several checkouts in turn, ROUNDS rounds (the
# first side moves round to round), against one private server with pg_stat_statements.
#
#   SIDES="old=<checkout> main=<checkout> branch=<checkout>" ROUNDS=3 OUT=<dir> sh run.sh
#
# Each checkout needs its own .venv (python3 dev.py demo). Writes OUT/<side><round>.json
# (perpass.py's report), OUT/<side><round>-profile.json (the same with cProfile on, for the
# calls a pass) and OUT/load.txt (the 1-minute load average before each run).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
ROUNDS=${ROUNDS:-3}
WORKFLOWS=${WORKFLOWS:-3000}
mkdir -p "$OUT"
scratch=$(mktemp -d)
chown postgres "$scratch"
su postgres -s /bin/sh -c "initdb -D $scratch/data -U postgres --auth=trust --no-sync >/dev/null"
port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
su postgres -s /bin/sh -c "postgres -D $scratch/data -p $port -k $scratch \
    -c listen_addresses=127.0.0.1 -c shared_preload_libraries=pg_stat_statements \
    >$scratch/log 2>&1 & echo \$! >$scratch/pid"
trap 'kill -INT "$(cat "$scratch/pid")"; sleep 2; rm -rf "$scratch"' EXIT
sleep 4
url="postgresql://postgres@127.0.0.1:$port/postgres"
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
        (cd "$tree" && .venv/bin/python "$here/perpass.py" "$url" --workflows "$WORKFLOWS" \
            >"$OUT/$name$round.json")
        (cd "$tree" && .venv/bin/python "$here/perpass.py" "$url" --workflows "$WORKFLOWS" \
            --profile >"$OUT/$name$round-profile.json")
    done
    round=$((round + 1))
done
