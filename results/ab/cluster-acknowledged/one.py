"""One side of the A/B in README.md: arrivals a second, then passes a second, on the store a URL
names, from the tree this runs in (`PYTHONPATH`).

    python one.py 'redis://127.0.0.1:PORT/0?cluster=on&shards=3&replicas=1&scheduler=stream' 2000
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


if __name__ == "__main__":
    arrivals, passes = asyncio.run(one(sys.argv[1], int(sys.argv[2])))
    print(f"{arrivals:.0f},{passes:.0f}")
