"""The A/B behind README.md: `replicas=0` against `replicas=1` on one primary with one replica.

    python results/ab/redis-replicas/ab.py redis://127.0.0.1:PORT/0 2000 3

Each round, each side in turn: a fresh namespace, 2,000 `arrive`s (64 at a time), then one
`work()` (pool 32, the lab's one-step body) in the same process until all are done.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import uuid

from durability.connect import open_durable
from durability.worker import work
from experiments.harness import bodies


async def one(url: str, count: int) -> tuple[float, float]:
    """Arrivals a second, then passes a second, on the store `url` names."""
    tag = uuid.uuid4().hex[:6]
    async with open_durable(f"{url}&namespace=ab{tag}") as durable:
        gate = asyncio.Semaphore(64)

        async def arrive(i: int) -> None:
            async with gate:
                await durable.arrive(f"w{tag}-{i}", "order", {"n": i})

        began = time.perf_counter()
        await asyncio.gather(*(arrive(i) for i in range(count)))
        arrivals = count / (time.perf_counter() - began)
        done, finished = 0, asyncio.Event()

        def seen(event: object) -> None:
            nonlocal done
            if getattr(event, "kind", "") == "outcome":
                done += 1
                if done >= count:
                    finished.set()

        began = time.perf_counter()
        task = asyncio.create_task(work(durable, bodies.one_step, observer=seen, pool=32))
        await asyncio.wait_for(finished.wait(), 300)
        passes = count / (time.perf_counter() - began)
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
    return arrivals, passes


async def main() -> None:
    base, count, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print("round,side,arrivals_per_s,passes_per_s")
    for r in range(rounds):
        for side in ("replicas=0", "replicas=1"):
            arrivals, passes = await one(f"{base}?scheduler=stream&{side}", count)
            print(f"{r},{side},{arrivals:.0f},{passes:.0f}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
