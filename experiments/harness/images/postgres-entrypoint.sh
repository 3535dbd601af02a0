#!/bin/sh
# First start: initdb with the requested superuser and password, password logins from any
# host, the requested database; then run postgres in the foreground on every address.
set -eu
user="${POSTGRES_USER:-postgres}"
password="${POSTGRES_PASSWORD:-}"
database="${POSTGRES_DB:-$user}"
mkdir -p "$PGDATA" /run/postgresql
chown -R postgres:postgres "$PGDATA" /run/postgresql
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  method=scram-sha-256
  [ -n "$password" ] || method=trust
  secret="$(mktemp)"
  printf '%s' "${password:-unused}" > "$secret"
  chown postgres "$secret"
  runuser -u postgres -- initdb -D "$PGDATA" --username="$user" --pwfile="$secret" \
    --auth-local=trust --auth-host="$method" --encoding=UTF8 >/dev/null
  rm -f "$secret"
  echo "host all all 0.0.0.0/0 $method" >> "$PGDATA/pg_hba.conf"
  echo "host all all ::/0 $method" >> "$PGDATA/pg_hba.conf"
  if [ "$database" != "postgres" ]; then
    echo "CREATE DATABASE \"$database\" OWNER \"$user\";" \
      | runuser -u postgres -- postgres --single -D "$PGDATA" postgres >/dev/null
  fi
fi
exec runuser -u postgres -- postgres -D "$PGDATA" -c listen_addresses='*' \
  -c shared_preload_libraries=pg_stat_statements "$@"
