"""What this release deprecates keeps working for one more, and says so: each use warns with a
`DeprecationWarning` that names what replaces it and the release it goes in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from durability.deprecation import GOES_IN
from durability.interfaces import Scheduler
from durability.memory import MemoryScheduler
from durability.values import Delivery, Reclaimed

T0 = datetime(2030, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


async def test_the_deprecated_reclaim_warns_and_still_takes_over_a_silent_delivery() -> None:
    clock = Clock()
    scheduler = MemoryScheduler(lease=timedelta(seconds=30), clock=clock)
    await scheduler.make_ready("w")
    held = await scheduler.next_ready(timedelta(seconds=1))
    assert held is not None
    with pytest.warns(DeprecationWarning, match="reclaiming") as told:
        assert await scheduler.reclaim(timedelta(seconds=5)) is None  # not silent long enough
    assert GOES_IN in str(told[0].message) and "reclaiming" in str(told[0].message)
    assert told[0].filename == __file__  # stacklevel: the warning points at the caller
    clock.now += timedelta(seconds=6)
    with pytest.warns(DeprecationWarning):
        taken = await scheduler.reclaim(timedelta(seconds=5))
    assert taken is not None and taken.workflow == "w" and taken.lapsed
    assert taken.receipt != held.receipt


async def test_the_deprecated_reclaim_still_refuses_a_duration_that_is_not_positive() -> None:
    scheduler = MemoryScheduler()
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="idle"):
        await scheduler.reclaim(timedelta(0))


class _OwnScheduler:
    """A scheduler of one's own, written to the protocol as it is now: no `reclaim`."""

    lease = timedelta(seconds=1)

    async def prepare(self) -> None: ...
    async def make_ready(self, workflow: str) -> None: ...
    async def next_ready(self, within: timedelta) -> Delivery | None:
        return None

    async def done(self, delivery: Delivery) -> None: ...
    async def wake_at(self, delivery: Delivery, when: datetime) -> bool:
        return False

    async def wake_due(self, now: datetime | None = None) -> datetime | None:
        return None

    async def reclaiming(self, idle: timedelta) -> Reclaimed:
        return Reclaimed(None, None)

    async def extend(self, delivery: Delivery, within: timedelta) -> Delivery | None:
        return None

    async def cancel(self, workflow: str) -> int:
        return 0


def test_a_scheduler_without_reclaim_is_a_scheduler() -> None:
    assert isinstance(_OwnScheduler(), Scheduler)
    assert "reclaim" not in Scheduler.__dict__
