"""One process of a cold drain on Postgres: `load URL QUEUE N` arrives N one-step workflows;
`work URL QUEUE START_AT TOTAL SCRATCH` opens the store, waits for START_AT (a Unix time every
process of the drain shares), works until the processes' passes (each writes its count into
SCRATCH) add up to TOTAL, and prints its passes, first pass start, last outcome and CPU as one
JSON line. `COLLECT=1` makes a full garbage collection before START_AT (what
`durability.worker.collect_first` does, for a revision without it).

    python drain.py load|work ...    (from the tree measured, its .venv)
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
from pathlib import Path

from durability import Event, work
from durability.connect import open_durable

sys.path.insert(0, os.getcwd())
from experiments.harness.bodies import BODIES  # the tree measured


async def load(url: str, queue: str, count: int) -> None:
    async with open_durable(f"{url}?queue={queue}") as durable:
        gate = asyncio.Semaphore(64)

        async def one(n: int) -> None:
            async with gate:
                await durable.arrive(f"{queue}-{n}", "order", {"sku": "A-1"})

        await asyncio.gather(*(one(n) for n in range(count)))


def _passes_so_far(mine: Path, passes: int, scratch: Path) -> int:
    """Write this process's count; the sum of every process's."""
    mine.write_text(str(passes))
    return sum(int(p.read_text() or 0) for p in scratch.glob("n.*"))


async def drain(url: str, queue: str, start_at: float, total: int, scratch: Path) -> None:
    async with open_durable(f"{url}?queue={queue}") as durable:
        seen: dict[str, float | None] = {"first": None, "last": None}
        passes = [0]

        def observe(event: Event) -> None:
            if event.kind == "outcome":
                passes[0] += 1
                seen["last"] = time.time()
            elif event.kind == "started" and seen["first"] is None:
                seen["first"] = time.time()

        if os.environ.get("COLLECT"):
            gc.collect()
        ahead = start_at - time.time()  # negative: the store opened after START_AT
        await asyncio.sleep(max(0.0, ahead))
        cpu = time.process_time()
        worker = asyncio.create_task(work(durable, BODIES["one-step"], observer=observe, pool=32))
        mine = scratch / f"n.{os.getpid()}"
        while True:
            await asyncio.sleep(0.01)
            if _passes_so_far(mine, passes[0], scratch) >= total:
                break
        spent = time.process_time() - cpu
        print(json.dumps({"passes": passes[0], **seen, "cpu": spent, "start_at": start_at,
                          "ahead": ahead}), flush=True)
        worker.cancel()
        os._exit(0)  # not the shutdown's hand-backs: the drain is over


if __name__ == "__main__":
    mode, url, queue, *rest = sys.argv[1:]
    if mode == "load":
        asyncio.run(load(url, queue, int(rest[0])))
    else:
        asyncio.run(drain(url, queue, float(rest[0]), int(rest[1]), Path(rest[2])))
