"""Closing a Redis store ends what it started: a take cancelled while it waits (on the
connection kept for waiting, `SharedConnection`, or a blocking read of the scheduler's own),
the sweeper `housekeeping` runs, and the pool's connections all end with the store, so no task
of it is left pending and nothing warns of an unclosed connection or a task destroyed."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from durability.connect import open_durable
from tests.closing import watched

from .conftest import HOST, PORT

LONG = timedelta(seconds=30)


@pytest.mark.parametrize("kind", ["stream", "set"])
async def test_closing_a_store_mid_wait_leaves_no_task_and_no_warning(
    namespace: str, kind: str
) -> None:
    url = f"redis://{HOST}:{PORT}/0?namespace={namespace}&scheduler={kind}"
    with watched() as after:
        async with open_durable(url, housekeeping=True) as durable:
            await durable.arrive(f"{namespace}-w", "k", 1)  # the pool has a connection out
            taking = asyncio.ensure_future(durable.take(timedelta(seconds=5), LONG, LONG))
            assert await asyncio.wait_for(asyncio.shield(taking), 5) is not None
            waiting = asyncio.ensure_future(durable.take(timedelta(seconds=5), LONG, LONG))
            reading = asyncio.ensure_future(durable.scheduler.next_ready(timedelta(seconds=5)))
            await asyncio.sleep(0.2)  # both blocked inside Redis
            for call in (waiting, reading):
                call.cancel()
            await asyncio.gather(waiting, reading, return_exceptions=True)
            assert waiting.cancelled() and reading.cancelled()
        assert after.pending() == set(), "a task of the store outlived it"
    assert after.said == []


@pytest.mark.parametrize("kind", ["stream", "set"])
async def test_closing_a_store_mid_batch_leaves_no_task_and_no_warning(
    namespace: str, kind: str
) -> None:
    url = f"redis://{HOST}:{PORT}/0?namespace={namespace}&scheduler={kind}"
    with watched() as after:
        async with open_durable(url) as durable:
            calls = [
                asyncio.ensure_future(durable.arrive(f"{namespace}-{n}", "k", n)) for n in range(20)
            ]
            await asyncio.sleep(0)  # queued; the turn's batch is on its way
            for call in calls:
                call.cancel()
            await asyncio.gather(*calls, return_exceptions=True)
        assert after.pending() == set(), "a task of the store outlived it"
    assert after.said == []
