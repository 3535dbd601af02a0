"""`Timetable`: what a store keeps of schedules, and `MemoryTimetable`, the one over a dict.

A store holds each schedule as opaque text under its name, with the moment it is next due
(or none: paused), indexed by that moment. It knows nothing of cron or of policies: the core
reads a record, decides, and writes it back with `swap`, a compare-and-set on the whole text,
so two workers that read one record cannot both act on it. An idle worker asks `earliest`, one
indexed read however many schedules there are, and sleeps until then.
"""

from __future__ import annotations

import asyncio
import bisect
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Protocol, runtime_checkable

__all__ = ["Announced", "MemoryTimetable", "Subscribing", "Timetable", "Timetabled"]


@runtime_checkable
class Timetable(Protocol):
    """A store's schedules: text records by name, indexed by when each is next due."""

    async def read(self, name: str) -> str | None:
        """The record of `name`, or None if there is none."""
        ...

    async def swap(self, name: str, old: str | None, new: str | None, due: datetime | None) -> bool:
        """Atomically: if the record of `name` is `old` (None: there is none), make it `new`
        (None: remove it) due at `due` (None: never), and say True; else change nothing."""
        ...

    async def due(self, now: datetime, limit: int) -> list[tuple[str, str]]:
        """Up to `limit` (name, record) pairs due at or before `now`, the earliest first."""
        ...

    async def earliest(self) -> datetime | None:
        """When the earliest record is due (None: none is), in one indexed read."""
        ...

    async def entries(self) -> list[tuple[str, str]]:
        """Every (name, record) pair, by name."""
        ...


@runtime_checkable
class Announced(Protocol):
    """A `Timetable` whose changes reach the firers of other processes, through the store's own
    wakeup (SQLite's doorbell, Postgres's `NOTIFY`, Redis's pub/sub): a schedule added by an
    API process wakes the workers at once, not at their next sweep."""

    async def changes(self) -> asyncio.Event:
        """An event the next `announce` sets, in this process or another: take it before
        looking at the timetable, so a change between the look and the wait still wakes."""
        ...

    async def announce(self) -> None:
        """Wake every firer of this timetable, here and in the other processes."""
        ...


@runtime_checkable
class Subscribing(Announced, Protocol):
    """An `Announced` timetable that hears other processes only through a subscription it
    holds open (Redis pub/sub): the firer holds one for as long as it runs, and `changes`
    works inside it."""

    def subscribed(self) -> AbstractAsyncContextManager[None]:
        """Listen for announcements until the block ends; entering never raises (a server
        that is down makes `changes` raise instead, and the firer falls back to its sweep)."""
        ...


@runtime_checkable
class Timetabled(Protocol):
    """A scheduler that keeps schedules beside its queue (every one this package ships)."""

    @property
    def timetable(self) -> Timetable: ...


class MemoryTimetable:
    """A `Timetable` in a dict, with a sorted list of (due, name) as its index."""

    __slots__ = ("_by_due", "_records")

    def __init__(self) -> None:
        self._records: dict[str, tuple[str, datetime | None]] = {}
        self._by_due: list[tuple[datetime, str]] = []

    async def read(self, name: str) -> str | None:
        await asyncio.sleep(0)  # a store's read yields, and so lets a racer in
        found = self._records.get(name)
        return None if found is None else found[0]

    async def swap(self, name: str, old: str | None, new: str | None, due: datetime | None) -> bool:
        await asyncio.sleep(0)
        found = self._records.get(name)
        if (None if found is None else found[0]) != old:
            return False
        if found is not None and found[1] is not None:
            self._by_due.remove((found[1], name))
        if new is None:
            self._records.pop(name, None)
            return True
        self._records[name] = (new, due)
        if due is not None:
            bisect.insort(self._by_due, (due, name))
        return True

    async def due(self, now: datetime, limit: int) -> list[tuple[str, str]]:
        await asyncio.sleep(0)
        end = bisect.bisect_right(self._by_due, (now, "\U0010ffff"))
        return [(name, self._records[name][0]) for _, name in self._by_due[:end][:limit]]

    async def earliest(self) -> datetime | None:
        await asyncio.sleep(0)
        return self._by_due[0][0] if self._by_due else None

    async def entries(self) -> list[tuple[str, str]]:
        await asyncio.sleep(0)
        return [(name, self._records[name][0]) for name in sorted(self._records)]
