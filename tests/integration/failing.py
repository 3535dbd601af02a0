"""What the command and page tests share: workflows failed by a real worker."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from datetime import timedelta

from durability import Durable, Run, as_int, work
from durability.testing import Observed

#: An id holding what a page or a terminal would act on: markup, quotes, an escape sequence,
#: a bidirectional override, a line break.
HOSTILE = '<script>alert("x")</script>\'&amp;\x1b[31m\u202eevil\nline'


def _broken() -> int:
    raise ValueError("the card was declined <b>twice</b>")


async def _body(run: Run) -> int:
    await run.step("reserve", lambda: 1, as_int)
    return await run.step("charge", _broken, as_int)


async def fail(durable: Durable, workflows: Iterable[str]) -> None:
    """Arrive each workflow and let a worker fail it for good (its "charge" step raises)."""
    wanted = list(workflows)
    observed = Observed(patience=30)
    task = asyncio.create_task(
        work(durable, _body, tick=timedelta(milliseconds=100), observer=observed)
    )
    try:
        for workflow in wanted:
            await durable.arrive(workflow, "order", {"amount": 12})
        await observed.until(lambda: all(observed.of(w, "dead") for w in wanted))
        # The failed standing is written after "dead": wait for it too.
        async with asyncio.timeout(30):
            for workflow in wanted:
                await _stands_failed(durable, workflow)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _stands_failed(durable: Durable, workflow: str) -> None:
    from durability.status import status

    pause = 0.01
    while (await status(durable.checkpointer, workflow)).state != "failed":
        await asyncio.sleep(pause)  # the store tells no one: look again, less often
        pause = min(pause * 2, 0.2)
