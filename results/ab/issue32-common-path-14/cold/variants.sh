#!/usr/bin/env bash
# Cold drains (1,500 workflows, two new worker processes) of a839310 and of three versions of
# main's durable.sql, in turn, with pg_stat_statements reset before each: one line a drain
# (drain.sh's, then the finish statement's calls, execution and planning ms, and every
# statement's execution ms in the drain's database, the load's included).
#
#     OLD=TREE MAIN=TREE DATA=DATADIR ADMIN=URL variants.sh ROUNDS old v0 v1 v2
#
# v0 is main's durable.sql as committed, v1 and v2 it with variant-v1.diff or variant-v2.diff
# applied (measurement only: v1 writes no ending's waiters' notification and no ending into
# `records`, v2 no ending at all). MAIN's durable.sql is overwritten: use a scratch checkout.
# The server needs shared_preload_libraries = pg_stat_statements and
# pg_stat_statements.track_planning = on; ADMIN is its `postgres` database.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
drain=$here/../../issue32-common-path-13/cold/drain.sh
rounds=$1; shift
sql=$MAIN/durability/postgres/durable.sql
git -C "$MAIN" show HEAD:durability/postgres/durable.sql > "$here/.v0.sql"
for v in v1 v2; do
  cp "$here/.v0.sql" "$here/.$v.sql"; patch -s "$here/.$v.sql" "$here/variant-$v.diff"
done
q() { psql "$ADMIN" -qAt -F ' ' -c "$1"; }
in_drain="FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname='drain'"
for ((r = 0; r < rounds; r++)); do
  for arm in "$@"; do
    if [ "$arm" = old ]; then tree=$OLD; else tree=$MAIN; cp "$here/.$arm.sql" "$sql"; fi
    q "SELECT pg_stat_statements_reset()" >/dev/null
    line=$("$drain" "$tree" 1500 2 "$DATA" "${ADMIN%/*}/drain")
    fin=$(q "SELECT sum(calls), round(sum(total_exec_time)::numeric,1),
             round(sum(total_plan_time)::numeric,1) $in_drain
             AND query LIKE '%INSERT INTO durability.standings AS s%'
             AND query LIKE '%jsonb_to_recordset%'")
    tot=$(q "SELECT round(sum(total_exec_time)::numeric,1) $in_drain")
    echo "$arm $line finish_calls_exec_plan=$fin total_exec=$tot"
  done
done
cp "$here/.v0.sql" "$sql"; rm -f "$here"/.v?.sql
