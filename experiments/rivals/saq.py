"""saq on Redis: a list of queued job ids per queue, each job a key of its own.

How it waits: each of a worker's `concurrency` slots blocks in `BLMOVE queued active` on a
connection of its own (`dequeue_timeout=0`: no timeout), so a job is taken the moment it is
pushed; nothing is polled on the way to a start, and `poll_interval` is for saq's Postgres
queue only. No setting decides the submit-to-start latency, so "tuned" turns the one that
most decides an idle worker's cost: the upkeep timer `schedule` (saq runs its scheduling script
every second, for delayed and cron jobs, whether or not there are any), from 1 s to 10 s.

| variant | settings |
|---|---|
| default | `Worker(concurrency=10)`, timers `schedule` 1 s, `worker_info` 10 s, `sweep` 60 s |
| tuned | the same with `timers={"schedule": 10}` |

`pool` sets `concurrency`. Stopped with `Worker.stop()`, as saq's own signal handler does.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from saq import Queue, Worker

from experiments.rivals.common import JOB, Ledger, Opening, serve

SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "tuned": {"timers": {"schedule": 10}},
}


class Saq:
    def __init__(self) -> None:
        self.queue: Any = None
        self.settings: dict[str, Any] = {}
        self.worker: Any = None
        self.running: asyncio.Task[None] | None = None

    async def open(self, opening: Opening) -> dict[str, Any]:
        self.settings = dict(SETTINGS[opening.variant])
        self.queue = Queue.from_url(opening.base, name=opening.queue)
        await self.queue.connect()
        return self.settings

    async def start(self, pool: int | None, ledger: Ledger) -> None:
        async def lab_job(ctx: dict[str, Any], *, workflow: str) -> dict[str, object]:
            return ledger.run(workflow)

        options = dict(self.settings)
        if pool is not None:
            options["concurrency"] = pool
        self.worker = Worker(self.queue, functions=[(JOB, lab_job)], **options)
        self.running = asyncio.create_task(self.worker.start())

    async def halt(self) -> None:
        if self.worker is not None:
            await self.worker.stop()
        if self.running is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.running
        self.worker = self.running = None

    async def enqueue(self, key: str) -> None:
        await self.queue.enqueue(JOB, workflow=key)

    async def close(self) -> None:
        if self.queue is not None:
            await self.queue.disconnect()
            self.queue = None


if __name__ == "__main__":
    # Every stop cancels the slots blocked in BLMOVE, and saq warns of each: not news here.
    serve(Saq, quiet=("saq",))
