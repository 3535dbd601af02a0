# PostgreSQL 15 from Debian's archive, with an entrypoint that honours the official image's
# POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB, so testcontainers can drive it.
ARG BASE=durability-lab/debian:bookworm
FROM ${BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/*
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
RUN chmod 755 /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]
