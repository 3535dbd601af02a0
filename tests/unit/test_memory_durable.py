"""`memory://` takes many at once (`MemoryDurable.take_up_to`): as many as there is room for,
highest priority first, no more of one limit than it has room for, each claimed; and a read
of an empty queue waits `within` for one, as `take` does."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from durability.connect import open_durable
from durability.interfaces import TakingMany
from durability.values import Limit

LEASE = timedelta(seconds=30)
SHORT = timedelta(milliseconds=50)


async def test_a_read_takes_as_many_as_there_is_room_for_best_first_each_claimed() -> None:
    async with open_durable("memory://") as durable:
        assert isinstance(durable, TakingMany)
        for n in range(6):
            await durable.arrive(f"w{n}", "order", n, priority=1 if n == 4 else 0)
        taken = await durable.take_up_to(lambda: 4, SHORT, LEASE, LEASE)
        assert [t.delivery.workflow for t in taken] == ["w4", "w0", "w1", "w2"]
        assert all(t.holder is not None and t.holder.workflow == t.delivery.workflow
                   for t in taken)
        rest = await durable.take_up_to(lambda: 4, SHORT, LEASE, LEASE)
        assert [t.delivery.workflow for t in rest] == ["w3", "w5"]
        assert await durable.take_up_to(lambda: 4, SHORT, LEASE, LEASE) == []


async def test_a_read_holds_no_more_of_a_limit_than_it_has_room_for() -> None:
    async with open_durable("memory://") as durable:
        limit = Limit("gateway", 2)
        for n in range(5):
            await durable.arrive(f"l{n}", "order", n, limit=limit)
        await durable.arrive("free", "order", 0)
        taken = await durable.take_up_to(lambda: 8, SHORT, LEASE, LEASE)
        assert sorted(t.delivery.workflow for t in taken) == ["free", "l0", "l1"]
        assert await durable.take_up_to(lambda: 8, SHORT, LEASE, LEASE) == []  # full
        [first] = [t for t in taken if t.delivery.workflow == "l0"]
        assert first.holder is not None
        await durable.finish(first.holder, first.delivery)  # one slot of the two frees
        again = await durable.take_up_to(lambda: 8, SHORT, LEASE, LEASE)
        assert [t.delivery.workflow for t in again] == ["l2"]


async def test_a_read_of_an_empty_queue_waits_for_the_first_arrival() -> None:
    async with open_durable("memory://") as durable:
        reading = asyncio.create_task(
            durable.take_up_to(lambda: 4, timedelta(seconds=30), LEASE, LEASE))
        await asyncio.sleep(0.05)
        assert not reading.done()
        await durable.arrive("late", "order", 1)
        async with asyncio.timeout(10):
            taken = await reading
        assert [t.delivery.workflow for t in taken] == ["late"]
