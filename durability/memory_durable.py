"""`MemoryDurable`: the memory stores as one `Durable` that takes many at once (`TakingMany`),
as the server stores do, so a busy worker fills its free slots in one read and one loop turn
rather than a reader, a wait and a future a delivery. What `memory://` opens."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from durability.interfaces import Taken
from durability.memory import MemoryCheckpointer
from durability.memory_scheduler import MemoryScheduler
from durability.split import SplitDurable, take_then_claim
from durability.storekit.traffic import Traffic

__all__ = ["MemoryDurable"]


class MemoryDurable(SplitDurable):
    """`SplitDurable` over `MemoryCheckpointer` and `MemoryScheduler`, with `take_up_to`."""

    __slots__ = ("_memory_scheduler",)

    def __init__(
        self,
        checkpointer: MemoryCheckpointer,
        scheduler: MemoryScheduler,
        traffic: Traffic | None = None,
    ) -> None:
        super().__init__(checkpointer, scheduler, traffic)
        self._memory_scheduler = scheduler  # typed as itself: `glance` is the memory queue's

    async def take_up_to(
        self, room: Callable[[], int], within: timedelta, budget: timedelta, alive: timedelta
    ) -> list[Taken]:
        """The first as `take` (waiting up to `within`), then as many more as are ready now
        and `room()` allows, each taken and claimed as `take` does it. Each take holds its
        limit's slot at once, so a batch holds no more of one limit than it has room for."""
        checkpointer, scheduler = self.checkpointer, self._memory_scheduler
        first = await take_then_claim(checkpointer, scheduler, within, budget, alive)
        if first is None:
            return []
        taken = [first]
        wanted = room()
        while len(taken) < wanted:
            delivery = await scheduler.glance()
            if delivery is None:
                break
            holder = await checkpointer.claim(delivery.workflow, budget, alive)
            taken.append(Taken(delivery, holder))
        return taken
