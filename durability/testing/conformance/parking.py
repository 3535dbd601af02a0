"""What a wakeup kept waiting by its priority or its limit is owed: a count in the queue's
footprint at every priority level and while it waits for a limit's room, and, when its limit's
slot frees, that slot before a wakeup of the same limit that came after it.

Part of `PolicyContract` (`durability.testing.conformance.limits`); needs `make_durables`.
"""

from __future__ import annotations

from durability.interfaces import Measured, Scheduler
from durability.testing.conformance.claims import LONG, fresh
from durability.testing.conformance.priorities import QUIET, MakeDurables, taken
from durability.values import Limit

__all__ = ["ParkingContract"]


async def _nothing(scheduler: Scheduler) -> None:
    delivery = await scheduler.next_ready(QUIET)
    assert delivery is None, f"{delivery} was handed out over its limit"


class ParkingContract:
    """Footprints that see every level and every parked wakeup; a parked wakeup's place."""

    async def test_the_footprint_counts_every_priority_level(
        self, make_durables: MakeDurables
    ) -> None:
        (durable,) = await make_durables(LONG, 1)
        scheduler = durable.scheduler
        if not isinstance(scheduler, Measured):
            return  # a footprint is optional (`Measured`): nothing to hold this store to
        before = (await scheduler.footprint()).entries
        for priority in (5, 5, -2, 9):
            await scheduler.make_ready(fresh(f"p{priority}"), priority=priority)
        after = (await scheduler.footprint()).entries
        assert after >= before + 4, f"{after - before} counted of 4 wakeups at three levels"
        # Held (taken, not yet answered) they are still the queue's, at their levels.
        held = [await taken(scheduler) for _ in range(4)]
        after = (await scheduler.footprint()).entries
        assert after >= before + 4, f"{after - before} counted of 4 held at three levels"
        for delivery in held:
            await scheduler.done(delivery)

    async def test_the_footprint_counts_wakeups_waiting_for_a_limits_room(
        self, make_durables: MakeDurables
    ) -> None:
        (durable,) = await make_durables(LONG, 1)
        scheduler = durable.scheduler
        if not isinstance(scheduler, Measured):
            return  # a footprint is optional (`Measured`)
        before = (await scheduler.footprint()).entries
        limit = Limit(fresh("limit"), 1)
        for _ in range(4):
            await scheduler.make_ready(fresh("limited"), limit=limit)
        held = await taken(scheduler)
        await _nothing(scheduler)  # the other three wait for room (parked, where a store parks)
        after = (await scheduler.footprint()).entries
        assert after >= before + 4, f"{after - before} counted of 1 held and 3 waiting"
        await scheduler.done(held)

    async def test_a_freed_slot_goes_to_the_wakeup_that_waited_for_it(
        self, make_durables: MakeDurables
    ) -> None:
        (durable,) = await make_durables(LONG, 1)
        scheduler = durable.scheduler
        limit = Limit(fresh("limit"), 1)
        holder, waiting, later = fresh("holder"), fresh("waiting"), fresh("later")
        await scheduler.make_ready(holder, limit=limit)
        held = await taken(scheduler, holder)
        await scheduler.make_ready(waiting, limit=limit)
        await _nothing(scheduler)  # a look finds the limit full: `waiting` waits for room
        await scheduler.make_ready(later, limit=limit)  # after it, under the same limit
        await scheduler.done(held)
        first = await taken(scheduler, waiting)  # the slot it waited for, not `later`'s
        await _nothing(scheduler)  # and `later` waits in turn
        await scheduler.done(first)
        await scheduler.done(await taken(scheduler, later))
