"""pgqueuer on Postgres: a row per job, taken with `FOR UPDATE SKIP LOCKED` in batches, over
asyncpg; an insert trigger sends a NOTIFY.

How it waits: `QueueManager.run` dequeues until nothing is left, then waits for a
notification on its LISTEN connection, or for `dequeue_timeout` (30 s, the fallback for a
lost one) to pass, and dequeues again. A job is started on its NOTIFY, so no setting stands
between submit and start (its 0.1 s re-check when work turns up between two dequeues is fixed).
What most decides its throughput is `batch_size`, the jobs one dequeue statement takes (10);
"tuned" raises it to 32 where the concurrency allows: pgqueuer wants `max_concurrent_tasks`
at least twice the batch, so under a `pool` the batch is at most half of it.

| variant | settings |
|---|---|
| default | `PgQueuer.run(batch_size=10, dequeue_timeout=30 s, max_concurrent_tasks=None)` |
| tuned | the same with `batch_size=32` |

`pool` sets `max_concurrent_tasks`. The worker is a `PgQueuer` (its queue manager, and its
schedule manager, which looks at the schedule table once a second) on one asyncpg connection,
as pgqueuer's documentation builds it; a client enqueues through `Queries` over a small pool.
Stopped by setting `PgQueuer.shutdown`, which lets the jobs running finish.

A picked job's row carries a `heartbeat` its worker renews every half `heartbeat_timeout`
(30 s by default); a dequeue also takes picked jobs whose heartbeat is older than that. But
an idle worker dequeues only on a NOTIFY or every `dequeue_timeout` (30 s), so a killed
worker's job is run again at the first dequeue after its heartbeat went stale: 30 to 60 s by
default. Both are turned to the lease for the takeover. A finished job's row leaves the
queue table, and a row per status change goes to `pgqueuer_log`, kept until
`Queries.clear_queue_log()` is called: pgqueuer has no setting that trims it.

| asked | settings |
|---|---|
| `takeover=heartbeat` | `run(heartbeat_timeout=<the lease>, dequeue_timeout=<the lease>)` |
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.errors import DuplicateJobError
from pgqueuer.queries import Queries

from experiments.rivals import footprint
from experiments.rivals.common import JOB, Ledger, Opening, serve

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
    def __init__(self) -> None:
        self.opening: Opening | None = None
        self.settings: dict[str, Any] = {}
        self.pool: Any = None
        self.queries: Any = None
        self.conn: Any = None
        self.app: Any = None
        self.running: asyncio.Task[None] | None = None

    async def open(self, opening: Opening) -> dict[str, Any]:
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
        self.app.entrypoint(JOB, accepts_context=False)(lab_job)
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
        await self.queries.enqueue(JOB, key.encode())

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
