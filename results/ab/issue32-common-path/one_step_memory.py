"""One-step workflows through `work` on the memory store, in this process: passes a second and
the process's CPU per pass. Run it with PYTHONPATH naming the revision's tree:

    PYTHONPATH=<tree> python results/ab/issue32-common-path/one_step_memory.py [N]
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time

from durability import Event, Run, as_dict, work
from durability.connect import open_durable


async def one_step(run: Run) -> object:
    return await run.step("charge", lambda: {"charged": True, "cents": 1250}, as_dict)


async def main(count: int) -> None:
    async with open_durable("memory://") as durable:
        for n in range(count):
            await durable.arrive(f"w{n}", "order", {"n": n})
        finished = asyncio.Event()
        ended = 0

        def observer(event: Event) -> None:
            nonlocal ended
            if event.kind == "outcome":
                ended += 1
                if ended >= count:
                    finished.set()

        cpu, wall = time.process_time(), time.perf_counter()
        task = asyncio.create_task(work(durable, one_step, observer=observer))
        await finished.wait()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        print(f"{count / wall:.0f},{cpu / count * 1e6:.1f}")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000))
