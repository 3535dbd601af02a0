"""One-step workflows on the memory store, for a deterministic count: `arrive N` only arrives N
workflows; `work N` arrives them and works them all through `work` in this process; `calls N`
does that under cProfile and prints Python calls a pass. Garbage collection is off, so the
difference of two callgrind counts (work minus arrive) over N is the cost of a pass:

    PYTHONPATH=<tree> PYTHONHASHSEED=0 python one_step.py work|arrive|calls [N]
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import gc
import pstats
import sys

from durability import Event, Run, as_dict, work
from durability.connect import open_durable


async def one_step(run: Run) -> object:
    return await run.step("charge", lambda: {"charged": True, "cents": 1250}, as_dict)


async def main(mode: str, count: int) -> None:
    async with open_durable("memory://") as durable:
        for n in range(count):
            await durable.arrive(f"w{n}", "order", {"n": n})
        if mode == "arrive":
            return
        finished = asyncio.Event()
        ended = 0

        def observer(event: Event) -> None:
            nonlocal ended
            if event.kind == "outcome":
                ended += 1
                if ended >= count:
                    finished.set()

        profile = cProfile.Profile() if mode == "calls" else None
        if profile is not None:
            profile.enable()
        task = asyncio.create_task(work(durable, one_step, observer=observer))
        await finished.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if profile is not None:
            profile.disable()
            stats = pstats.Stats(profile)
            calls = sum(row[1] for row in stats.stats.values())  # type: ignore[attr-defined]
            print(f"{calls / count:.1f} calls a pass")
            if len(sys.argv) > 3:
                stats.sort_stats("ncalls").print_stats(int(sys.argv[3]))


if __name__ == "__main__":
    gc.disable()
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2000))
