"""A worker over any store stops every time it is cancelled, wherever in its loops the cancel
lands (the Redis suite's `test_cancelled_loops` covers the Redis loops one by one, under a
socket timeout); so does leaving a store opened with its housekeeping."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from durability import Run, work
from durability.connect import open_durable
from durability.testing import cancelling


async def _idle(run: Run) -> None:
    return None


async def test_a_worker_stops_every_time_it_is_cancelled(store_url: str) -> None:
    async with open_durable(
        store_url, lease=timedelta(seconds=2), poll=timedelta(milliseconds=2), housekeeping=True
    ) as durable:
        for name in ("a", "b", "c"):
            await durable.arrive(f"cancelled-{name}", "go", True)
        worked = await cancelling(
            lambda: work(durable, _idle, tick=timedelta(milliseconds=5)),
            times=120,
            after=(0.0, 0.03),
        )
    assert worked.made > 80 and worked.lost == 0, worked


async def test_leaving_a_store_opened_with_housekeeping_always_ends(store_url: str) -> None:
    async def opened() -> None:
        async with open_durable(store_url, housekeeping=True):
            await asyncio.Event().wait()

    left = await cancelling(opened, times=60, after=(0.0, 0.02))
    assert left.made > 30 and left.lost == 0, left
