"""procrastinate on Postgres: a row per job, fetched one at a time by a stored function, over
psycopg; an insert trigger sends a NOTIFY on the queue's channel.

How it waits: with `listen_notify` on (its default) a worker listens on its own connection
and fetches when a notification lands; `fetch_job_polling_interval` (5 s) is only the
fallback for a missed one, so no poll stands between submit and start. What decides the
latency is `concurrency`, 1 by default, which "tuned" raises (`SETTINGS`). How it is driven,
and what an experiment's `takeover` or `cleanup` sets: `Procrastinate`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import procrastinate
import psycopg

from experiments.harness.rivals import footprint
from experiments.harness.rivals.common import JOB, Ledger, Opening, serve

#: The variants. At `concurrency=1` the worker fetches the next job only once the one running
#: has finished and been recorded, so a queue forms as soon as jobs arrive faster than one
#: fetch-run-finish cycle; "tuned" raises it to 16, the pool our own worker runs by default.
#: Default: `run_worker_async(concurrency=1, listen_notify=True, fetch_job_polling_interval=5)`.
#: Tuned: the same with `concurrency=16`.
SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "tuned": {"concurrency": 16},
}
#: Every table procrastinate's schema makes (what its footprint counts).
TABLES = ("procrastinate_jobs", "procrastinate_events", "procrastinate_periodic_defers",
          "procrastinate_workers")
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
    """procrastinate through its public API: one `App(PsycopgConnector)` per agent, its pool
    opened once, and a worker whose `concurrency` is the lab's `pool`, stopped by cancelling
    the task running `run_worker_async()`, procrastinate's graceful stop (it finishes the jobs
    running, then unregisters the worker).

    A worker beats its row in `procrastinate_workers` every `update_heartbeat_interval`
    (10 s), but nothing in procrastinate runs a dead worker's job again on its own: its row
    stays `doing`. Its documentation's answer is a periodic task of the application's own
    that asks `job_manager.get_stalled_jobs()` (jobs of workers whose heartbeat is older than
    `seconds_since_heartbeat`, 30 s by default) and retries each (`_retrying`). A finished
    job's row stays in `procrastinate_jobs` (with its events) unless the worker is told
    `delete_jobs`.
    """

    def __init__(self) -> None:
        self.opening: Opening | None = None
        self.settings: dict[str, Any] = {}
        self.app: Any = None
        self.task: Any = None
        self.deferring: Any = None  # the task, configured as `open` was asked
        self.queue = "default"
        self.ledger = Ledger()
        self.running: asyncio.Task[None] | None = None

    async def open(self, opening: Opening) -> dict[str, Any]:
        """Open the app (installing the schema once), with the variant's settings and what the
        experiment asks:

        - `takeover=none`: `update_heartbeat_interval` a quarter of the lease, no retrying task;
        - `takeover=retry-stalled`: the same, and a periodic task each second that retries the
          jobs of `get_stalled_jobs(seconds_since_heartbeat=<the lease>)`;
        - `cleanup=on`: `run_worker_async(delete_jobs="always")`;
        - `cron=on`: a periodic task every second (`@app.periodic(cron="* * * * * *")`,
          croniter's seconds field last), called with its firing's `timestamp`; each worker's
          deferrer offers every firing, and procrastinate's table of periodic defers keeps
          one job a firing;
        - `priority=N`: every job this agent defers has that priority (procrastinate's,
          higher first);
        - `limit=1`: every job this agent defers holds one `lock`, so they run one at a time
          across workers (procrastinate has no limit above 1: a lock is one job at a time).
        """
        self.opening = opening
        self.settings = dict(SETTINGS[opening.variant])
        self.queue = opening.queue
        self.app = procrastinate.App(
            connector=procrastinate.PsycopgConnector(conninfo=opening.base))

        async def lab_job(workflow: str) -> dict[str, object]:
            return await self.ledger.job(workflow)

        self.task = self.app.task(name=JOB, queue=self.queue)(lab_job)
        recovery = opening.option("takeover")
        if recovery is not None:
            if recovery not in ("none", "retry-stalled"):
                raise ValueError(f"procrastinate: no takeover={recovery}")
            self.settings["update_heartbeat_interval"] = opening.lease_s / 4
            if recovery == "retry-stalled":
                self._retrying(opening.lease_s)
        if opening.option("cleanup") == "on":
            self.settings["delete_jobs"] = "always"
        if opening.option("cron") == "on":
            self._firing()
        options: dict[str, Any] = {}
        if int(opening.option("priority") or 0):
            options["priority"] = int(opening.option("priority") or 0)
        limit = int(opening.option("limit") or 0)
        if limit > 1:
            raise ValueError("procrastinate: a lock runs one job at a time, so no limit above 1")
        if limit:
            options["lock"] = f"lab-limit-{self.queue}"
        self.deferring = self.task.configure(**options) if options else self.task
        await self.app.open_async()
        await install(self.app, opening.base)
        return self.settings

    def _retrying(self, stale_s: float) -> None:
        """The periodic task procrastinate's documentation gives for stalled jobs."""
        manager = self.app.job_manager

        async def retry_stalled(timestamp: int) -> None:
            for job in await manager.get_stalled_jobs(queue=self.queue, task_name=JOB,
                                                      seconds_since_heartbeat=stale_s):
                await manager.retry_job(job)

        task = self.app.task(name="retry_stalled", queue=self.queue,
                             queueing_lock=f"retry-{self.queue}")(retry_stalled)
        self.app.periodic(cron="* * * * * *", periodic_id="lab")(task)

    def _firing(self) -> None:
        """The lab's cron: a periodic task every second, noting its firing's time."""

        async def lab_cron(timestamp: int) -> dict[str, object]:
            return await self.ledger.cron(f"cron-{timestamp}", timestamp * 1_000_000_000)

        task = self.app.task(name="lab_cron", queue=self.queue)(lab_cron)
        self.app.periodic(cron="* * * * * *", periodic_id="lab-cron")(task)

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
        await self.deferring.defer_async(workflow=key)

    async def enqueue_once(self, key: str) -> bool:
        # A queueing lock refuses a second job only while one waits (`todo`); the lock runs
        # jobs holding it one after another.
        try:
            await self.task.configure(queueing_lock=key, lock=key).defer_async(workflow=key)
        except procrastinate.exceptions.AlreadyEnqueued:
            return False
        return True

    async def footprint(self) -> dict[str, Any]:
        assert self.opening is not None
        return await footprint.postgres(self.opening.base, TABLES)

    async def close(self) -> None:
        if self.app is not None:
            await self.app.close_async()
            self.app = None


if __name__ == "__main__":
    # It warns that an App made in `__main__` cannot be found by import: ours is never looked up.
    serve(Procrastinate, quiet=("procrastinate.blueprints",))
