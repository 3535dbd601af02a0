#!/bin/sh
# Per-pass counters of the common path on Postgres, sides in turn (the first moving each
# round), against a private server with pg_stat_statements already running at URL:
#
#   sh perpass.sh URL OUT ROUNDS old=<checkout> main=<checkout> branch=<checkout> ...
#
# Writes OUT/<side><round>.json (../postgres-common-path/perpass.py's report, 3,000 one-step
# workflows) and OUT/load.txt; `python reduce.py OUT` prints the tables.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
url=$1; OUT=$2; ROUNDS=$3; shift 3
mkdir -p "$OUT"
sides="$*"
round=1
while [ "$round" -le "$ROUNDS" ]; do
  for side in $sides; do
    name=${side%%=*}; tree=${side#*=}
    echo "$name$round $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/load.txt"
    (cd "$tree" && .venv/bin/python "$here/../postgres-common-path/perpass.py" "$url" \
        --workflows 3000 >"$OUT/$name$round.json")
  done
  first=${sides%% *}; rest=${sides#* }; sides="$rest $first"
  round=$((round + 1))
done
