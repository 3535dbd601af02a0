"""Closing the memory store ends what it started: a read cancelled while it waits leaves no
timer or task behind, so nothing is pending once the store is closed and nothing warns."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from durability.connect import open_durable
from tests.closing import watched

LONG = timedelta(seconds=30)


async def test_closing_the_memory_store_mid_read_leaves_no_task_and_no_warning() -> None:
    with watched() as after:
        async with open_durable("memory://") as durable:
            await durable.arrive("w", "k", 1)
            taken = await durable.take(timedelta(seconds=1), LONG, LONG)
            assert taken is not None and taken.holder is not None
            waiting = asyncio.ensure_future(durable.take(timedelta(seconds=5), LONG, LONG))
            reading = asyncio.ensure_future(durable.scheduler.next_ready(timedelta(seconds=5)))
            await asyncio.sleep(0.05)
            assert not waiting.done() and not reading.done()  # both wait for a wakeup
            for call in (waiting, reading):
                call.cancel()
            await asyncio.gather(waiting, reading, return_exceptions=True)
            assert waiting.cancelled() and reading.cancelled()
        assert after.pending() == set(), "a task of the store outlived it"
    assert after.said == []
