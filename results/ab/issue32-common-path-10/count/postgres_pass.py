"""One-step workflows on a Postgres store, for a count of a pass that timing does not move:
`load URL QUEUE N` arrives N workflows; `work URL QUEUE N` works them all off through `work` in
this process (pool 32) and prints the rate and the CPU a pass. The worker's timers are put out
of the way (a write's renewal `NUDGE` and the keeper's `tick` far past the run), since under
callgrind a pass is fifty times slower and those timers would fire for every pass. The
difference of two callgrind counts of `work` (N and 2N workflows) over N is the cost of a pass:

    python postgres_pass.py load|work URL QUEUE N    (from the tree measured, its .venv)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from datetime import timedelta

import durability.worker.passing as passing
from durability import Event, work
from durability.connect import open_durable

sys.path.insert(0, os.getcwd())
from experiments.harness.bodies import BODIES  # the tree measured

LONG = timedelta(seconds=60)


async def main(mode: str, url: str, queue: str, count: int) -> None:
    async with open_durable(f"{url}?queue={queue}", lease=2 * LONG) as durable:
        if mode == "load":
            gate = asyncio.Semaphore(64)

            async def one(n: int) -> None:
                async with gate:
                    await durable.arrive(f"{queue}-{n}", "order", {"sku": "A-1"})

            await asyncio.gather(*(one(n) for n in range(count)))
            return
        done, seen = asyncio.Event(), [0]

        def observe(event: Event) -> None:
            if event.kind == "outcome":
                seen[0] += 1
                if seen[0] >= count:
                    done.set()

        passing.NUDGE = LONG  # type: ignore[attr-defined]
        cpu, began = time.process_time(), time.perf_counter()
        worker = asyncio.create_task(
            work(durable, BODIES["one-step"], observer=observe, pool=32, tick=LONG)
        )
        await done.wait()
        spent, took = time.process_time() - cpu, time.perf_counter() - began
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker
    print(f"{count / took:.0f} passes/s, CPU a pass {1e3 * spent / count:.4f} ms")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
