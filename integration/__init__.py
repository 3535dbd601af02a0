"""The worked example: an order service built only on the public API of `durability`.

Two processes: `api`, an HTTP API (FastAPI) that writes values into workflows and never runs
one, and `worker`, which runs `work` over the store `--store` names. A worker runs one body for
every order id (`workflow`), which picks `payout`, `orders` (fulfilment and its rollback) or
`console` by what the client submitted (`submission`); the workflows act on a fake `effects`
world, and `cli` and `log` are what both processes share. Nothing here imports a store: both
get their `Durable` from `durability.connect.open_durable(url)`, so the same code runs over
memory, Redis, Postgres and SQLite.
"""
