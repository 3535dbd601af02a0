"""The workflow bodies the lab runs, by name: each experiment's workload, written once.

A body reads its parameters from the value it was submitted with (`order`), so one worker
process can run every variant an experiment asks for. `notify` is set by the agent that runs
the body, so a body can tell the lab the moment it reached a point worth measuring from (the
takeover experiment kills a worker there).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from datetime import timedelta

from durability import Run, as_dict, as_int

__all__ = ["BODIES", "notify"]


def _silent(event: str, workflow: str) -> None:
    return None


#: Called by a body as `notify("holding", workflow)`; the agent replaces it with its own.
notify: Callable[[str, str], None] = _silent


async def one_step(run: Run) -> object:
    """The smallest real workflow: one step that records a small result."""
    return await run.step("charge", lambda: {"charged": True, "cents": 1250}, as_dict)


async def waker(run: Run) -> object:
    """Sleeps `wakes` times for `nap_ms` each (one step between naps): a workload whose every
    wakeup goes through the queue again, which is what makes a stream grow."""
    order = await run.awaiting("order", as_dict)
    wakes, nap = int(str(order.get("wakes", 10))), int(str(order.get("nap_ms", 200)))
    for n in range(wakes):
        await run.step(f"work:{n}", functools.partial(int, n), as_int)
        await run.sleep(f"nap:{n}", timedelta(milliseconds=nap))
    return wakes


async def holder(run: Run) -> object:
    """For the takeover experiment: a step that takes `hold_s` seconds. With phase
    `after-write` a quick step is recorded first and the hold is the second step, so the lab
    can kill the worker the moment that write has landed; with `mid-step` the hold is the
    first step, and the lab kills the worker while it runs."""
    order = await run.awaiting("order", as_dict)
    hold = float(str(order.get("hold_s", 30)))
    workflow = run.workflow

    async def holding() -> int:
        notify("holding", workflow)
        await asyncio.sleep(hold)
        return 1

    if order.get("phase") == "after-write":
        await run.step("first", lambda: 1, as_int)
    return await run.step("held", holding, as_int)


BODIES: dict[str, Callable[[Run], Awaitable[object]]] = {
    "one-step": one_step,
    "waker": waker,
    "holder": holder,
}
