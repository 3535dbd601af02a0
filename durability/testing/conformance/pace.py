"""Real-time margins that hold on a loaded machine.

Some promises can only be checked on the store's own clock: a claim that a write kept alive, a
lease that an extend stretched. Such a test needs an upper bound ("the next write lands within
`alive`"), and a busy machine can stall a test past any fixed margin. So a scenario measures
itself instead: `Stopwatch` brackets each step by the host's monotonic clock, which bounds
when the store can have run it (no earlier than sent, no later than answered). When a step was
answered later than the promise allows, the run proves nothing either way and the scenario
raises `Stalled`; `at_any_pace` then runs it again with every timing doubled. A failure that
its timings cannot explain is a failure at once.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest

__all__ = ["Stalled", "Stopwatch", "at_any_pace"]

#: How many times a scenario is run, each at twice the pace of the last, before giving up.
TRIES = 4


class Stalled(Exception):
    """The machine was slower than the scenario's margins: this run proves nothing."""


class Stopwatch:
    """Seconds since it was started (or last `restart`ed), on the monotonic clock."""

    __slots__ = ("_start",)

    def __init__(self) -> None:
        self._start = time.monotonic()

    def restart(self) -> None:
        self._start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self._start

    def within(self, limit: float, what: str) -> None:
        """Raise `Stalled` unless fewer than `limit` seconds have passed."""
        took = self.elapsed()
        if took >= limit:
            raise Stalled(f"{what} took {took:.3f}s, past the {limit:.3f}s margin")


async def at_any_pace(scenario: Callable[[float], Awaitable[None]]) -> None:
    """Run `scenario(scale)` with scale 1, 2, 4, ...: it multiplies its timings by `scale` and
    raises `Stalled` when its own measurements say the run was too slow to conclude anything.
    """
    scale = 1.0
    stalls: list[str] = []
    for _ in range(TRIES):
        try:
            await scenario(scale)
        except Stalled as stalled:
            stalls.append(f"x{scale:g}: {stalled}")
            scale *= 2
        else:
            return
    pytest.fail("the machine stalled past every margin tried: " + "; ".join(stalls))
