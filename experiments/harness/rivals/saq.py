"""saq on Redis: a list of queued job ids per queue, each job a key of its own.

How it waits: each of a worker's `concurrency` slots blocks in `BLMOVE queued active` on a
connection of its own (`dequeue_timeout=0`: no timeout), so a job is taken the moment it is
pushed; nothing is polled on the way to a start, and `poll_interval` is for saq's Postgres
queue only. So no setting decides the submit-to-start latency, and "tuned" turns the one that
most decides an idle worker's cost instead (`SETTINGS`). How it is driven, and what an
experiment's `takeover` or `cleanup` sets: `Saq`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from typing import Any

from saq import CronJob, Queue, Worker

from experiments.harness.rivals import footprint
from experiments.harness.rivals.common import JOB, Ledger, Opening, serve

#: The variants' worker settings. Default: `Worker(concurrency=10)`, timers `schedule` 1 s,
#: `worker_info` 10 s, `sweep` 60 s. Tuned: the same with `timers={"schedule": 10}`, the upkeep
#: timer from 1 s to 10 s (saq runs its scheduling script every second, for delayed and cron
#: jobs, whether or not there are any).
SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "tuned": {"timers": {"schedule": 10}},
}


class Saq:
    """saq through its public API: a `Queue.from_url`, and a `Worker` whose `concurrency` is
    the lab's `pool`, stopped with `Worker.stop()` as saq's own signal handler does.

    Taking over a dead worker's job is the sweep's: every `timers["sweep"]` one worker reads
    the active list, and a job past its `heartbeat` (seconds without `job.update()`) or
    `timeout` is aborted, waited for 5 s (`sweep(abort=5)`, the dead worker never answers) and
    retried if `retries` allows, else finished as aborted. So by default (timeout 10 s, sweep
    60 s, `retries=1`: one attempt) a killed worker's job is never run again.
    """

    def __init__(self) -> None:
        self.opening: Opening | None = None
        self.queue: Any = None
        self.settings: dict[str, Any] = {}
        self.job: dict[str, Any] = {}  # the job's own settings, given at enqueue
        self.worker: Any = None
        self.running: asyncio.Task[None] | None = None

    async def open(self, opening: Opening) -> dict[str, Any]:
        """Connect, with the variant's settings and what the experiment asks:

        - `takeover=sweep`: job `heartbeat=<lease>` (whole seconds), `timeout=0`, `retries=2`;
          the sweep every lease;
        - `takeover=sweep-default-retries`: the same with saq's `retries=1`;
        - `cleanup=on`: job `ttl=-1`, so its key is deleted when it finishes (by default it
          is kept 600 s);
        - `cron=on`: the worker runs a `CronJob` every second (`* * * * * *`, croniter's
          seconds field last), saq's own key for it (`unique`, its default) keeping one job
          a firing however many workers schedule it.
        """
        self.opening = opening
        self.settings = dict(SETTINGS[opening.variant])
        recovery = opening.option("takeover")
        if recovery is not None:
            if recovery not in ("sweep", "sweep-default-retries"):
                raise ValueError(f"saq: no takeover={recovery}")
            seconds = max(1, math.ceil(opening.lease_s))
            self.job = {"heartbeat": seconds, "timeout": 0,
                        "retries": 2 if recovery == "sweep" else 1}
            timers = dict(self.settings.get("timers", {}))
            timers["sweep"] = seconds
            self.settings["timers"] = timers
        if opening.option("cleanup") == "on":
            self.job["ttl"] = -1
        self.queue = Queue.from_url(opening.base, name=opening.queue)
        await self.queue.connect()
        return {**self.settings, "job": self.job}

    async def start(self, pool: int | None, ledger: Ledger) -> None:
        async def lab_job(ctx: dict[str, Any], *, workflow: str) -> dict[str, object]:
            # Under a `heartbeat` (the takeover's), the job beats (`job.update()`) every tick of
            # the experiment, as saq leaves the heartbeat to the job.
            job = ctx["job"]
            return await ledger.job(workflow, beat=job.update if job.heartbeat else None)

        async def lab_cron(ctx: dict[str, Any]) -> dict[str, object]:
            scheduled = int(ctx["job"].scheduled)  # the firing's time, in whole seconds
            return await ledger.cron(f"cron-{scheduled}", scheduled * 1_000_000_000)

        options = dict(self.settings)
        if pool is not None:
            options["concurrency"] = pool
        assert self.opening is not None
        if self.opening.option("cron") == "on":
            options["cron_jobs"] = [CronJob(lab_cron, cron="* * * * * *")]
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
        await self.queue.enqueue(JOB, workflow=key, **self.job)

    async def enqueue_once(self, key: str) -> bool:
        # saq refuses a job whose key is queued or running (it answers None).
        job = await self.queue.enqueue(JOB, workflow=key, key=key, **self.job)
        return job is not None

    async def footprint(self) -> dict[str, Any]:
        assert self.opening is not None
        return await footprint.redis(self.opening.base, self.opening.queue,
                                     f"saq:*{self.opening.queue}*")

    async def close(self) -> None:
        if self.queue is not None:
            await self.queue.disconnect()
            self.queue = None


if __name__ == "__main__":
    # Every stop cancels the slots blocked in BLMOVE, and saq warns of each: not news here.
    serve(Saq, quiet=("saq",))
