"""The worked example: an order service built only on the public API of `durability`.

| module | owns |
|---|---|
| `submission` | what a client submits (`Order`, `Line`) and how a recorded one is parsed back |
| `effects` | the fake outside world: a payment `Gateway` and a `Warehouse` that count their calls |
| `orders` | fulfilment as a `Graph` run by `run_durably`, and its rollback as a second workflow |
| `payout` | a stepwise payout: capture per line, a settlement sleep, a human approval, the payout |
| `console` | a workflow that reads its inbox turn by turn and answers each turn |
| `workflow` | the one body a worker runs for every order id, and the progress view of one |
| `api` | the HTTP API (FastAPI); it writes values into workflows and never runs one |
| `worker` | the worker process: `work` over the store named by `--store` |
| `cli`, `log` | the command-line options both processes share, and readable key=value log lines |

Nothing here imports a store: both processes get their `Durable` from
`durability.connect.open_durable(url)`, so the same code runs over memory, Redis, Postgres and
SQLite.
"""
