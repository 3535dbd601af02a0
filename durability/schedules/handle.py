"""`Schedules`: adding, pausing, resuming, listing and removing schedules, over a durable.

Every change is a read then a compare-and-set of the record (`Timetable.swap`), tried again
if a worker's firing or another change came in between, so no change undoes a firing.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from datetime import datetime, timedelta

from durability.clock import Clock, utcnow
from durability.interfaces import Durable
from durability.schedules.cadence import Cadence
from durability.schedules.firing import fire_due, ring
from durability.schedules.schedule import BOUND, Missed, Schedule
from durability.schedules.timetable import Timetable, Timetabled

__all__ = ["Schedules"]


class Schedules:
    """The schedules kept in `durable`'s store (`durable.schedules`): any worker over the same
    store fires them, and each firing starts one workflow (`durability.schedules.firing`)."""

    __slots__ = ("_clock", "_durable", "_timetable")

    def __init__(self, durable: Durable, *, clock: Clock = utcnow) -> None:
        scheduler = durable.scheduler
        if not isinstance(scheduler, Timetabled):
            raise TypeError(f"{type(scheduler).__name__} keeps no schedules (no `timetable`)")
        self._durable = durable
        self._timetable: Timetable = scheduler.timetable
        self._clock = clock

    async def add(
        self,
        name: str,
        body: str,
        input: object = None,
        *,
        cron: str | None = None,
        every: timedelta | None = None,
        zone: str = "UTC",
        missed: Missed = "latest",
        bound: int = BOUND,
    ) -> Schedule:
        """Keep a schedule that starts a workflow of `body` with `input` on each firing: `cron`
        (five fields, or six with seconds, in `zone`) or `every` (from now). Adding it again
        unchanged keeps it as it stands (so a deploy may add its schedules at every start);
        adding it changed replaces it, its next firing counted from now. `missed` says what
        becomes of firings missed while no worker ran: `skip` them, run the `latest` once, or
        `all` (at most `bound`, the latest)."""
        now = self._clock()
        anchor = now.replace(microsecond=now.microsecond // 1000 * 1000)
        cadence = Cadence(cron, every, zone, anchor)
        schedule = Schedule(name, body, input, cadence, missed=missed, bound=bound)
        schedule = schedule.but(next=cadence.after(now))
        while True:
            record = await self._timetable.read(name)
            if record is not None:
                stored = Schedule.from_record(record)
                if stored.same_plan(schedule):
                    return stored
                schedule = schedule.but(
                    paused=stored.paused, next=None if stored.paused else schedule.next,
                    pending=stored.pending, held=stored.held, fired=stored.fired,
                )
            if await self._timetable.swap(name, record, schedule.to_record(), schedule.due):
                await ring(self._timetable)
                return schedule

    async def get(self, name: str) -> Schedule | None:
        """The schedule called `name`, as stored, or None."""
        record = await self._timetable.read(name)
        return None if record is None else Schedule.from_record(record)

    async def list(self) -> builtins.list[Schedule]:
        """Every schedule, by name."""
        return [Schedule.from_record(record) for _, record in await self._timetable.entries()]

    async def pause(self, name: str) -> Schedule:
        """Stop firing `name` until `resume` (firings it has taken to start still start)."""
        return await self._change(name, lambda stored: stored.but(paused=True, next=None))

    async def resume(self, name: str) -> Schedule:
        """Fire `name` again, from its next firing after now: what fell due while it was
        paused is skipped, whatever its `missed`."""
        now = self._clock()
        return await self._change(
            name, lambda stored: stored.but(paused=False, next=stored.cadence.after(now))
        )

    async def remove(self, name: str) -> bool:
        """Forget `name` (False if there was none); workflows it started are left alone."""
        while True:
            record = await self._timetable.read(name)
            if record is None:
                return False
            if await self._timetable.swap(name, record, None, None):
                await ring(self._timetable)
                return True

    async def fire_due(self, now: datetime | None = None) -> builtins.list[str]:
        """Start what is due by `now` (the clock's now by default) and return the workflow ids
        started: what a worker does when the earliest firing comes."""
        return await fire_due(self._durable, self._timetable, now or self._clock())

    async def earliest(self) -> datetime | None:
        """When the earliest schedule is next due (None: none is)."""
        return await self._timetable.earliest()

    async def _change(self, name: str, change: Callable[[Schedule], Schedule]) -> Schedule:
        while True:
            record = await self._timetable.read(name)
            if record is None:
                raise KeyError(f"no schedule is called {name!r}")
            changed = change(Schedule.from_record(record))
            if await self._timetable.swap(name, record, changed.to_record(), changed.due):
                await ring(self._timetable)
                return changed
