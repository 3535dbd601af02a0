"""Firing what is due: each firing starts exactly one workflow, however many workers race.

A worker takes due firings by swapping the schedule's record for one that holds them as
`pending` (for `HOLD`) with `next` advanced: a compare-and-set, so of two workers that read one
record one takes and the other finds it taken. It starts each (`start`, the one place a firing
becomes a workflow, its id `firing_id`), then swaps `pending` away. One that dies after taking
leaves them due again when the hold lapses; the next worker starts them again, and since a
firing's workflow id is fixed and its input first-writer-wins, that finds the first's workflow.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from durability.bodies import STARTED
from durability.bodies import start as start_body
from durability.codec import as_dict
from durability.interfaces import Durable
from durability.schedules.schedule import Schedule, firing_id
from durability.schedules.timetable import Announced, Timetable
from durability.stepwise import Run

__all__ = ["FIRING", "HOLD", "Firing", "fire_due", "fired", "listening", "ring", "start"]

log = logging.getLogger("durability.schedules")

#: The key a firing's workflow finds its `Firing` under: the record of its start by name.
FIRING = STARTED
#: How long a worker holds the firings it took before another may start them instead.
HOLD = timedelta(seconds=30)
#: How many due schedules one look takes.
BATCH = 100


@dataclass(frozen=True, slots=True)
class Firing:
    """What a firing's workflow is started with: its schedule, the body it names, the firing's
    time and the schedule's input (what `run.input` reads)."""

    schedule: str
    body: str
    at: datetime
    input: object

    @classmethod
    def from_record(cls, value: object) -> Firing:
        """The firing a start record (`durability.bodies.STARTED`) tells of."""
        data = as_dict(value)
        if "schedule" not in data:
            raise LookupError("this workflow was not started by a schedule")
        return cls(str(data["schedule"]), str(data["body"]),
                   datetime.fromisoformat(str(data["at"])), data["value"])


async def fired(run: Run) -> Firing:
    """In a body a schedule starts: the firing that started it."""
    return await run.awaiting(FIRING, Firing.from_record)


async def start(durable: Durable, schedule: Schedule, at: datetime) -> str:
    """Start the workflow of `schedule`'s firing at `at` as the body it names, with its input
    (`durability.bodies.start`, so `work(durable, {name: body, ...})` runs it and `run.input`
    reads the input); return its id. The one place a firing becomes a workflow: its id is fixed
    by the firing and its start first-writer-wins, so a second start of one firing finds the
    first's workflow."""
    workflow = firing_id(schedule.name, at)
    try:
        await start_body(durable, schedule.body, schedule.input, workflow,
                         schedule=schedule.name, at=at.isoformat())
    except ValueError:
        # Started before as another body: the schedule's body changed between a worker taking
        # this firing and its start being repeated. That workflow is the firing's; keep it.
        log.warning("firing %s was started before as another body; left as it is", workflow)
    return workflow


async def fire_due(durable: Durable, timetable: Timetable, now: datetime) -> list[str]:
    """Start every firing due by `now`; the workflow ids this worker started."""
    started: list[str] = []
    for name, record in await timetable.due(now, BATCH):
        started += await _fire(durable, timetable, name, record, now)
    return started


async def _fire(
    durable: Durable, timetable: Timetable, name: str, record: str, now: datetime
) -> list[str]:
    schedule = Schedule.from_record(record)
    if schedule.pending:  # taken by a worker whose hold lapsed: start them in its stead
        firings, following = list(schedule.pending), schedule.next
    elif schedule.paused or schedule.next is None or schedule.next > now:
        return []
    else:
        firings, following = schedule.plan(now)
    held = schedule.but(pending=tuple(firings), held=now + HOLD if firings else None,
                        next=following)
    taken = held.to_record()
    if not await timetable.swap(name, record, taken, held.due):
        return []  # another worker took it, or it was changed: the next look sees it anew
    started = [await start(durable, schedule, at) for at in firings]
    if firings:
        await _settle(timetable, name, taken)
    return started


async def _settle(timetable: Timetable, name: str, taken: str) -> None:
    """Clear the pending firings just started, on the record as it is now (a pause may have
    come meanwhile); nothing if another worker took them over after our hold lapsed."""
    pending = Schedule.from_record(taken).pending
    record: str | None = taken
    for _ in range(8):
        if record is None:
            return
        schedule = Schedule.from_record(record)
        if schedule.pending != pending:
            return
        done = schedule.but(pending=(), held=None, fired=max(pending))
        if await timetable.swap(name, record, done.to_record(), done.due):
            return
        record = await timetable.read(name)
    log.warning("schedule %s: its started firings stay pending until the hold lapses", name)


_bells: dict[int, set[asyncio.Event]] = {}


@contextmanager
def listening(timetable: Timetable) -> Iterator[asyncio.Event]:
    """An event set whenever a schedule of `timetable` is added or changed in this process."""
    bell = asyncio.Event()
    _bells.setdefault(id(timetable), set()).add(bell)
    try:
        yield bell
    finally:
        bells = _bells.get(id(timetable), set())
        bells.discard(bell)
        if not bells:
            _bells.pop(id(timetable), None)


async def ring(timetable: Timetable) -> None:
    """Wake the firers of `timetable`: a schedule changed. Those of this process at once, and
    those of the others too where the store can tell them (`Announced`)."""
    for bell in _bells.get(id(timetable), ()):
        bell.set()
    if isinstance(timetable, Announced):
        await timetable.announce()
