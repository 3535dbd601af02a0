"""streaq on Redis: a stream per priority read through a consumer group, tasks as keys.

How it waits: the worker's producer reads new entries with `XREADGROUP ... BLOCK idle_timeout`
(60 s), so a task is read the moment it is added; the submit-to-start path polls nothing.
No setting decides that latency, and its idle cost is a pipeline every 0.5 s (delayed tasks,
aborts, cron) that no setting changes, so "tuned" turns the read-ahead, a knob on the path of
throughput (`PREFETCH`). How it is driven, and what an experiment's `takeover` or `cleanup`
sets: `Streaq`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
import uuid
from typing import Any

from streaq import Worker

from experiments.harness.rivals import footprint
from experiments.harness.rivals.common import JOB, Ledger, Opening, serve

#: The worker's concurrency when `pool` does not say (streaq's own default).
CONCURRENCY = 16
#: The levels under `priorities=on`, lowest first (streaq's `Worker(priorities=...)`): the
#: default "normal" and one above it, which a job of `priority=N` (N > 0) is enqueued on.
LEVELS = ["normal", "urgent"]
#: The lab's cron job: every second (parse-crontab's seven fields, seconds first).
CRON, EVERY_SECOND = "lab_cron", "* * * * * * *"
#: Read-ahead as a multiple of the concurrency (None: streaq's default). Throughput is decided
#: by `concurrency`, which `pool` sets; the one other knob on that path is `prefetch` (tasks
#: buffered beyond those running, by default as many as run), so "tuned" raises it to 4x the
#: concurrency. Default: `Worker(concurrency=16, prefetch=None)`, 16 buffered beyond the 16
#: running. Tuned: `Worker(concurrency=16, prefetch=4 * concurrency)`.
PREFETCH: dict[str, int | None] = {"default": None, "tuned": 4}


class Streaq:
    """streaq through its public API: a `Worker` whose `concurrency` is the lab's `pool`
    (`CONCURRENCY` if it does not say), and another, never run, to enqueue through. Stopped by
    cancelling the task running `Worker.run_async()`, which is what streaq's own signal
    handler does (it cancels the worker's task group).

    A running task stays pending in the consumer group, and its worker claims it again every
    0.9 x `idle_timeout` to keep it fresh; a worker's read first takes (`XAUTOCLAIM`) entries
    idle longer than `idle_timeout`. A killed worker's task is so run again by the next read
    after it goes idle: an idle worker blocks for up to `idle_timeout` between reads (on Redis
    7, with no `XREADGROUP ... CLAIM`), so the takeover is one to two `idle_timeout`s (60 s by
    default).
    """

    def __init__(self) -> None:
        self.opening: Opening | None = None
        self.release = asyncio.Event()
        self.holding: asyncio.Task[None] | None = None
        self.task: Any = None
        self.worker: Any = None
        self.running: asyncio.Task[None] | None = None

    def _worker(self, concurrency: int | None = None, ledger: Ledger | None = None) -> Any:
        """A worker and the lab's task on it, with what the experiment asks:

        - `takeover=reclaim`: `Worker(idle_timeout=<the lease>)`;
        - `cleanup=on`: the task's `ttl=0`, no result kept (by default each is kept 5 minutes);
        - `priorities=on`: `Worker(priorities=LEVELS)`, a stream a level, read highest first
          (every agent of a queue must agree on them); with `priority=N` (N > 0) this agent
          enqueues on the higher one;
        - `cron=on`: the worker runs a cron job every second (`CRON`). streaq hands a cron job
          no firing time, but names each firing's job after it (`_firing`).
        """
        assert self.opening is not None
        options: dict[str, Any] = {}
        recovery = self.opening.option("takeover")
        if recovery is not None:
            if recovery != "reclaim":
                raise ValueError(f"streaq: no takeover={recovery}")
            options["idle_timeout"] = self.opening.lease_s
        if self.opening.option("priorities") == "on":
            options["priorities"] = list(LEVELS)
        if concurrency is not None:
            options["concurrency"] = concurrency
            factor = PREFETCH[self.opening.variant]
            if factor is not None:
                options["prefetch"] = factor * concurrency
        worker = Worker(redis_url=self.opening.base, queue_name=self.opening.queue,
                        handle_signals=False, **options)
        run = ledger.job if ledger is not None else _not_here

        async def lab_job(workflow: str) -> dict[str, object]:
            return await run(workflow)

        task: dict[str, Any] = {"ttl": 0} if self.opening.option("cleanup") == "on" else {}
        if ledger is not None and self.opening.option("cron") == "on":
            fired: Any = None

            async def lab_cron() -> dict[str, object]:
                second = _firing(fired.context.task_id, time.time())
                assert ledger is not None
                return await ledger.cron(f"cron-{second}", second * 1_000_000_000)

            fired = worker.cron(EVERY_SECOND, name=CRON)(lab_cron)
        return worker, worker.task(lab_job, name=JOB, **task)

    async def open(self, opening: Opening) -> dict[str, Any]:
        self.opening = opening
        # The submitting side is a Worker too, never run: streaq enqueues through one.
        client, self.task = self._worker()
        entered = asyncio.get_running_loop().create_future()
        self.holding = asyncio.create_task(self._hold(client, entered))
        await entered
        settings: dict[str, Any] = {"concurrency": CONCURRENCY,
                                    "prefetch_per_slot": PREFETCH[opening.variant]}
        if opening.option("takeover") is not None:
            settings["idle_timeout_s"] = opening.lease_s
        if opening.option("cleanup") == "on":
            settings["task_ttl"] = 0
        return settings

    async def start(self, pool: int | None, ledger: Ledger) -> None:
        self.worker, _ = self._worker(pool or CONCURRENCY, ledger)
        self.running = asyncio.create_task(self.worker.run_async())

    async def halt(self) -> None:
        if self.running is not None:
            self.running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.running
        self.worker = self.running = None

    async def enqueue(self, key: str) -> None:
        assert self.opening is not None
        if int(self.opening.option("priority") or 0) > 0:
            await self.task.enqueue(key).start(priority=LEVELS[-1])
        else:
            await self.task.enqueue(key)

    async def enqueue_once(self, key: str) -> bool:
        raise NotImplementedError("streaq has no key per job (`unique` is one per function)")

    async def footprint(self) -> dict[str, Any]:
        assert self.opening is not None
        return await footprint.redis(self.opening.base, self.opening.queue,
                                     f"streaq:{self.opening.queue}:*")

    async def close(self) -> None:
        self.release.set()
        if self.holding is not None:
            await self.holding
            self.holding = None

    async def _hold(self, client: Any, entered: asyncio.Future[None]) -> None:
        """Keep the client's connection open in one task from `open` to `close`: coredis
        ties it to the context it was entered in, and each request is a task of its own."""
        try:
            async with client:
                entered.set_result(None)
                await self.release.wait()
        except BaseException as error:
            if not entered.done():
                entered.set_exception(error)
                return
            raise


def _firing(task_id: str, now: float) -> int:
    """The second a cron job's firing was due, from its task id: streaq names a firing's job
    by a hash of the cron's name and the firing's time in ms (a 128-bit digest shaped as a
    UUID), so the seconds before `now` are tried until one gives the id; the second `now` is
    in if none of the last minute does (a firing's job, named some other way)."""
    for second in range(int(now), int(now) - 60, -1):
        digest = hashlib.sha256(f"{CRON}{second * 1000}".encode()).digest()
        if uuid.UUID(bytes=digest[:16], version=4).hex == task_id:
            return second
    return int(now)


async def _not_here(workflow: str) -> dict[str, object]:
    raise RuntimeError("the submitting side's worker never runs a job")


if __name__ == "__main__":
    serve(Streaq)
