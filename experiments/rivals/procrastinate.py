"""procrastinate on Postgres: a row per job, fetched one at a time by a stored function, over
psycopg; an insert trigger sends a NOTIFY on the queue's channel.

How it waits: with `listen_notify` on (its default) a worker listens on its own connection
and fetches when a notification lands; `fetch_job_polling_interval` (5 s) is only the
fallback for a missed one, so no poll stands between submit and start. What decides the
latency is `concurrency`, 1 by default: the worker fetches the next job only once the one
running has finished and been recorded, so a queue forms as soon as jobs arrive faster than
one fetch-run-finish cycle. "tuned" raises it to 16, the pool our own worker runs by default.

| variant | settings |
|---|---|
| default | `run_worker_async(concurrency=1, listen_notify=True, fetch_job_polling_interval=5)` |
| tuned | the same with `concurrency=16` |

`pool` sets `concurrency`. One `App(PsycopgConnector)` per agent, its pool opened once. The
worker is stopped by cancelling the task running `run_worker_async()`, procrastinate's
graceful stop (it finishes the jobs running, then unregisters the worker).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import procrastinate
import psycopg

from experiments.rivals.common import JOB, Ledger, Opening, serve

SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "tuned": {"concurrency": 16},
}
#: Any fixed number: it only has to be the same in every agent that installs the schema.
SCHEMA_LOCK = 4_711_503


async def install(app: Any, base: str) -> None:
    """procrastinate's schema, once. Its `apply_schema_async` is not idempotent and a worker
    and a client may open the database together, so the check and the install happen under
    an advisory lock held on a connection of its own."""
    async with await psycopg.AsyncConnection.connect(base, autocommit=True) as conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK,))
        try:
            found = await (await conn.execute(
                "SELECT to_regclass('procrastinate_jobs') IS NOT NULL")).fetchone()
            if not (found and found[0]):
                await app.schema_manager.apply_schema_async()
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK,))


class Procrastinate:
    def __init__(self) -> None:
        self.settings: dict[str, Any] = {}
        self.app: Any = None
        self.task: Any = None
        self.queue = "default"
        self.ledger = Ledger()
        self.running: asyncio.Task[None] | None = None

    async def open(self, opening: Opening) -> dict[str, Any]:
        self.settings = dict(SETTINGS[opening.variant])
        self.queue = opening.queue
        self.app = procrastinate.App(
            connector=procrastinate.PsycopgConnector(conninfo=opening.base))

        async def lab_job(workflow: str) -> dict[str, object]:
            return self.ledger.run(workflow)

        self.task = self.app.task(name=JOB, queue=self.queue)(lab_job)
        await self.app.open_async()
        await install(self.app, opening.base)
        return self.settings

    async def start(self, pool: int | None, ledger: Ledger) -> None:
        self.ledger = ledger
        options: dict[str, Any] = {**self.settings, "queues": [self.queue],
                                   "install_signal_handlers": False}
        if pool is not None:
            options["concurrency"] = pool
        self.running = asyncio.create_task(self.app.run_worker_async(**options))

    async def halt(self) -> None:
        if self.running is not None:
            self.running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.running
        self.running = None

    async def enqueue(self, key: str) -> None:
        await self.task.defer_async(workflow=key)

    async def close(self) -> None:
        if self.app is not None:
            await self.app.close_async()
            self.app = None


if __name__ == "__main__":
    # It warns that an App made in `__main__` cannot be found by import: ours is never looked up.
    serve(Procrastinate, quiet=("procrastinate.blueprints",))
