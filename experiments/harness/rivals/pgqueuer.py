"""pgqueuer on Postgres: a row per job, taken with `FOR UPDATE SKIP LOCKED` in batches, over
asyncpg; an insert trigger sends a NOTIFY.

How it waits: `QueueManager.run` dequeues until nothing is left, then waits for a
notification on its LISTEN connection, or for `dequeue_timeout` (30 s, the fallback for a
lost one) to pass, and dequeues again. A job is started on its NOTIFY, so no setting stands
between submit and start, and "tuned" turns what most decides its throughput instead
(`SETTINGS`). How it is driven, and what an experiment's `takeover` sets: `Pgqueuer`.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.errors import DuplicateJobError
from pgqueuer.queries import Queries

from experiments.harness.rivals import footprint
from experiments.harness.rivals.common import JOB, Ledger, Opening, serve

#: The variants. What most decides pgqueuer's throughput is `batch_size`, the jobs one dequeue
#: statement takes (10); "tuned" raises it to 32 where the concurrency allows: pgqueuer wants
#: `max_concurrent_tasks` at least twice the batch, so under a `pool` the batch is at most half
#: of it. Default: `PgQueuer.run(batch_size=10, dequeue_timeout=30 s,
#: max_concurrent_tasks=None)`. Tuned: the same with `batch_size=32`.
SETTINGS: dict[str, dict[str, Any]] = {
    "default": {"batch_size": 10, "dequeue_timeout_s": 30.0},
    "tuned": {"batch_size": 32, "dequeue_timeout_s": 30.0},
}
#: Every table pgqueuer's schema makes (what its footprint counts).
TABLES = ("pgqueuer", "pgqueuer_log", "pgqueuer_statistics", "pgqueuer_schedules")


async def install(base: str) -> None:
    """pgqueuer's schema, once: a worker and a client may open the database together, so
    the check and the install run under pgqueuer's own schema lock (an advisory lock)."""
    conn = await asyncpg.connect(base)
    try:
        queries = Queries.from_asyncpg_connection(conn)
        async with queries.schema_lock():
            if not await queries.schema_is_installed():
                await queries.install()
    finally:
        await conn.close()


class Pgqueuer:
    """pgqueuer through its public API, as its documentation builds it: the worker a
    `PgQueuer` (its queue manager, and its schedule manager, which looks at the schedule table
    once a second) on one asyncpg connection, with `max_concurrent_tasks` the lab's `pool`; a
    client enqueueing through `Queries` over a small pool. The worker is stopped by setting
    `PgQueuer.shutdown`, which lets the jobs running finish. When work turns up between two
    dequeues it re-checks after a fixed 0.1 s, which no setting changes.

    A picked job's row carries a `heartbeat` its worker renews every half `heartbeat_timeout`
    (30 s by default); a dequeue also takes picked jobs whose heartbeat is older than that.
    But an idle worker dequeues only on a NOTIFY or every `dequeue_timeout` (30 s), so a
    killed worker's job is run again at the first dequeue after its heartbeat went stale: 30
    to 60 s by default. A finished job's row leaves the queue table, and a row per status
    change goes to `pgqueuer_log`, kept until `Queries.clear_queue_log()` is called: pgqueuer
    has no setting that trims it.
    """

    def __init__(self) -> None:
        self.opening: Opening | None = None
        self.settings: dict[str, Any] = {}
        self.pool: Any = None
        self.queries: Any = None
        self.conn: Any = None
        self.app: Any = None
        self.running: asyncio.Task[None] | None = None

    async def open(self, opening: Opening) -> dict[str, Any]:
        """Connect (installing the schema once), with the variant's settings and what the
        experiment asks: `takeover=heartbeat` turns both timeouts to the lease,
        `run(heartbeat_timeout=<the lease>, dequeue_timeout=<the lease>)`; `cleanup` is
        refused, as pgqueuer has no setting for it. `priority=N`: every job this agent
        enqueues has that priority (pgqueuer's, higher first); `limit=N`: the worker's
        entrypoint has `concurrency_limit=N` (pgqueuer's, enforced in the database across
        workers)."""
        self.opening = opening
        self.settings = dict(SETTINGS[opening.variant])
        recovery = opening.option("takeover")
        if recovery is not None:
            if recovery != "heartbeat":
                raise ValueError(f"pgqueuer: no takeover={recovery}")
            self.settings["heartbeat_timeout_s"] = opening.lease_s
            self.settings["dequeue_timeout_s"] = opening.lease_s
        if opening.option("cleanup") is not None:
            raise ValueError("pgqueuer has no cleanup setting (its log is cleared by hand)")
        await install(opening.base)
        self.pool = await asyncpg.create_pool(opening.base, min_size=1, max_size=8)
        self.queries = Queries.from_asyncpg_pool(self.pool)
        return self.settings

    async def start(self, pool: int | None, ledger: Ledger) -> None:
        assert self.opening is not None
        batch = int(self.settings["batch_size"])
        if pool is not None:
            if pool < 2:
                raise ValueError("pgqueuer needs a pool of at least 2 (twice its batch)")
            batch = min(batch, pool // 2)

        async def lab_job(job: Any) -> None:
            await ledger.job((job.payload or b"").decode())

        self.conn = await asyncpg.connect(self.opening.base)
        self.app = PgQueuer.from_asyncpg_connection(self.conn)
        limit = int(self.opening.option("limit") or 0)
        self.app.entrypoint(JOB, accepts_context=False, concurrency_limit=limit)(lab_job)
        beat = timedelta(seconds=float(self.settings.get("heartbeat_timeout_s", 30.0)))
        self.running = asyncio.create_task(self.app.run(
            batch_size=batch, max_concurrent_tasks=pool, heartbeat_timeout=beat,
            dequeue_timeout=timedelta(seconds=float(self.settings["dequeue_timeout_s"]))))

    async def halt(self) -> None:
        if self.app is not None:
            self.app.shutdown.set()
        if self.running is not None:
            await self.running
        if self.conn is not None:
            await self.conn.close()
        self.app = self.running = self.conn = None

    async def enqueue(self, key: str) -> None:
        assert self.opening is not None
        priority = int(self.opening.option("priority") or 0)
        await self.queries.enqueue(JOB, key.encode(), priority)

    async def enqueue_once(self, key: str) -> bool:
        # A dedupe key is refused while a job holding it is queued or picked.
        try:
            await self.queries.enqueue(JOB, key.encode(), dedupe_key=key)
        except DuplicateJobError:
            return False
        return True

    async def footprint(self) -> dict[str, Any]:
        assert self.opening is not None
        return await footprint.postgres(self.opening.base, TABLES)

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
            self.pool = None


if __name__ == "__main__":
    serve(Pgqueuer)
