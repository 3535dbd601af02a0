"""arq on Redis: one sorted set of job ids per queue, scored by when each may run, polled.

How it waits: the worker's main loop reads the due ids (`ZRANGEBYSCORE ... LIMIT`) every
`poll_delay` (0.5 s by default) and sleeps in between; an enqueue wakes nobody. So
`poll_delay` is the floor under the submit-to-start latency (half a poll on average, one at
worst), and "tuned" turns it down (`SETTINGS`). How it is driven, and what an experiment's
`takeover` or `cleanup` sets: `Arq`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings
from arq.cron import cron
from arq.worker import Worker, func

from experiments.harness.rivals import footprint
from experiments.harness.rivals.common import JOB, Ledger, Opening, serve

#: The variants' worker settings. Default: `Worker(poll_delay=0.5, max_jobs=10)`. Tuned:
#: `Worker(poll_delay=0.01, max_jobs=10)`, 10 ms being one of the poll intervals the lab sweeps
#: for our own polled schedulers, at the cost of 100 reads a second from an idle worker.
SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "tuned": {"poll_delay": 0.01},
}


class Arq:
    """arq through its public API: a pool from `create_pool` to enqueue, and a `Worker` whose
    `max_jobs` is the lab's `pool`. The worker runs with `handle_signals=False` under
    `async_run()` and is stopped with `Worker.close()`, arq's way for a worker embedded in
    another program.

    A job stays in the queue's sorted set while it runs; what keeps other workers off it is
    its `arq:in-progress:<id>` key, set to expire after the longest job timeout plus a fixed
    10 s. A killed worker's job is run again once that key has expired, when a worker's poll
    next reads the queue. So the takeover time is set by `job_timeout` (300 s by default:
    about 310 s) and cannot be brought under 10 s; a job's own timeout also cuts a live run at
    that length.
    """

    def __init__(self) -> None:
        self.opening: Opening | None = None
        self.settings: dict[str, Any] = {}
        self.client: Any = None
        self.worker: Any = None
        self.running: asyncio.Task[None] | None = None

    async def open(self, opening: Opening) -> dict[str, Any]:
        """Connect, with the variant's settings and what the experiment asks:

        - `takeover=expiry`: `job_timeout` = the lease, so a job's in-progress key lives the
          lease + 10 s;
        - `cleanup=on`: `keep_result=0`, no result key (by default each is kept 3,600 s);
        - `cron=on`: the worker runs a cron job every second (`cron(second=0..59)`), arq's
          `unique` (its default) making each firing's job id `<name>:<its time in ms>`, so one
          job a firing however many workers enqueue it.
        """
        self.opening = opening
        self.settings = dict(SETTINGS[opening.variant])
        recovery = opening.option("takeover")
        if recovery is not None:
            if recovery != "expiry":
                raise ValueError(f"arq: no takeover={recovery}")
            self.settings["job_timeout"] = opening.lease_s
        if opening.option("cleanup") == "on":
            self.settings["keep_result"] = 0
        self.client = await create_pool(RedisSettings.from_dsn(opening.base),
                                        default_queue_name=opening.queue)
        return self.settings

    async def start(self, pool: int | None, ledger: Ledger) -> None:
        assert self.opening is not None

        async def lab_job(ctx: dict[str, Any], workflow: str) -> dict[str, object]:
            return await ledger.job(workflow)

        async def lab_cron(ctx: dict[str, Any]) -> dict[str, object]:
            at_ms = int(str(ctx["job_id"]).rsplit(":", 1)[-1])  # the firing's time
            return await ledger.cron(f"cron-{at_ms}", at_ms * 1_000_000)

        options = dict(self.settings)
        if pool is not None:
            options["max_jobs"] = pool
        if self.opening.option("cron") == "on":
            options["cron_jobs"] = [cron(lab_cron, name="lab_cron", second=set(range(60)))]
        # A worker per `work`: `close()` closes the pool it made, so it cannot run again.
        self.worker = Worker(functions=[func(lab_job, name=JOB)], queue_name=self.opening.queue,
                             redis_settings=RedisSettings.from_dsn(self.opening.base),
                             handle_signals=False, **options)
        self.running = asyncio.create_task(self.worker.async_run())

    async def halt(self) -> None:
        if self.worker is not None:
            await _close(self.worker)
        if self.running is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.running
        self.worker = self.running = None

    async def enqueue(self, key: str) -> None:
        await self.client.enqueue_job(JOB, key)

    async def enqueue_once(self, key: str) -> bool:
        # arq refuses a job id that is queued, running or has a result kept (None).
        return await self.client.enqueue_job(JOB, key, _job_id=key) is not None

    async def footprint(self) -> dict[str, Any]:
        """Every `arq:*` key on the server: job and result keys (`arq:job:`, `arq:result:`,
        ...) are not named after the queue, so this is the queue's own only on a server of its
        own (as `growth` gives it)."""
        assert self.opening is not None
        return await footprint.redis(self.opening.base, self.opening.queue, "arq:*",
                                     self.opening.queue)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()
            self.client = None


async def _close(worker: Any) -> None:
    """`Worker.close()`, which cancels the jobs still running and then gathers them without
    `return_exceptions`: a job it cut short comes out of it as that job's `CancelledError`
    before the pool is closed. Only a cancel of this task itself goes on up; otherwise the pool
    is closed here, as `close()` would have."""
    try:
        await worker.close()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        await asyncio.gather(*worker.tasks.values(), return_exceptions=True)
        await worker.pool.close(close_connection_pool=True)


if __name__ == "__main__":
    serve(Arq)
