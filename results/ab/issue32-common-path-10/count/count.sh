#!/usr/bin/env bash
# Instructions a Postgres pass costs at one revision, counted by callgrind:
#
#     count.sh TREE URL N     (URL: a database this may drop and create again)
#
# works off N and then 2N one-step workflows (`postgres_pass.py`), each in a new database,
# and prints (count(2N) - count(N)) / N. TREE is a checkout with its own .venv.
set -euo pipefail
tree=$1; url=$2; n=$3
here=$(cd "$(dirname "$0")" && pwd)
db=${url##*/}; admin=${url%/*}/postgres
declare -A total
for size in "$n" $((2 * n)); do
  psql "$admin" -qAt -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
  (cd "$tree" && .venv/bin/python "$here/postgres_pass.py" load "$url" q "$size")
  out=$(mktemp)
  (cd "$tree" && valgrind --tool=callgrind --callgrind-out-file="$out" \
      .venv/bin/python "$here/postgres_pass.py" work "$url" q "$size" >/dev/null 2>&1)
  total[$size]=$(grep '^totals:' "$out" | cut -d' ' -f2)
  rm -f "$out"
done
echo "$(( (total[$((2 * n))] - total[$n]) / n )) instructions a pass"
