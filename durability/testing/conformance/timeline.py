"""Time as the model-based tests see it: a store's clock, bracketed.

A store either takes its clock from the test (memory: `FakeTime`, moved by hand, so a lapse
is exact and costs nothing) or reads a real one itself (Redis `TIME`, Postgres
`clock_timestamp()`, SQLite the host's: `RealTime`, moved by sleeping). The test cannot see
the moment a real store ran an operation, only bracket it, from just before it was sent to
just after it was answered: a `Span`. A deadline the store computed from that moment is a span
too, so "had it passed when the next operation ran?" has three answers: certainly, certainly
not, or the two brackets overlap (`None`), where the model accepts either outcome. That grey
window is what keeps a real-clock test strict everywhere else and never flaky.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["FakeTime", "RealTime", "Span", "Timeline", "passed"]


@dataclass(frozen=True, slots=True)
class Span:
    """Some moment of the store's clock, known to lie between `lo` and `hi`."""

    lo: datetime
    hi: datetime

    def __add__(self, by: timedelta) -> Span:
        return Span(self.lo + by, self.hi + by)

    def earlier(self, other: Span) -> Span:
        """The earlier of two moments, bound by bound."""
        return Span(min(self.lo, other.lo), min(self.hi, other.hi))

    def later(self, other: Span) -> Span:
        """The later of two moments, bound by bound."""
        return Span(max(self.lo, other.lo), max(self.hi, other.hi))


def passed(deadline: Span, at: Span, slack: timedelta) -> bool | None:
    """Whether `deadline` had passed when an operation bracketed by `at` ran: True, False, or
    None when the brackets (widened by `slack`, the clocks' rounding) overlap."""
    if at.lo >= deadline.hi + slack:
        return True
    if at.hi < deadline.lo - slack:
        return False
    return None


class Timeline(Protocol):
    """The clock a store under test runs on, and how a test moves it."""

    #: How far a store's reading may sit from ours: its rounding to milliseconds and the like.
    slack: timedelta
    #: A duration meant to run out within one example (a claim, a lease, a nap).
    short: timedelta
    #: The ways `advance` may move the clock in one step.
    steps: tuple[timedelta, ...]

    def now(self) -> datetime: ...

    async def advance(self, by: timedelta) -> None: ...


class RealTime:
    """The real clock, shared by the host and every server on it; moved by sleeping, so its
    durations are short (a sleep is the only way to let a server-side lease run out)."""

    slack = timedelta(milliseconds=3)

    def __init__(self, short: timedelta = timedelta(milliseconds=100)) -> None:
        self.short = short
        # A step inside `short` (a claim may or may not outlive two of them) and one past it.
        self.steps: tuple[timedelta, ...] = (short / 2, short * 1.2)

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def advance(self, by: timedelta) -> None:
        await asyncio.sleep(by.total_seconds())


class FakeTime:
    """A clock that moves only when told: pass its `now` as a store's `clock`. It may jump
    any distance, a day as cheaply as a millisecond."""

    #: Exact, but a deadline's own instant is left to either side: the contract says "for
    #: `alive`", not which side of the boundary the last microsecond falls on.
    slack = timedelta(microseconds=1)

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime.now(UTC)
        self.short = timedelta(seconds=10)
        self.steps: tuple[timedelta, ...] = (
            timedelta(seconds=3),
            timedelta(seconds=10),
            timedelta(minutes=5),
        )

    def now(self) -> datetime:
        return self._now

    async def advance(self, by: timedelta) -> None:
        self._now += by
