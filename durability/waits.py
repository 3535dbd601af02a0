"""The library's two bounded waits: `beats`, when a polling reader looks (on a fixed beat
rather than a fixed gap), and `set_within`, an event waited on for at most a while.

A reader that sleeps `poll` after each empty look polls every `poll` plus the look's own round
trip plus the timer's lateness (the event loop wakes up to a millisecond late), so a workflow
made ready at a random moment waits half of that longer cycle. Looking at `start + k * poll`
keeps the cycle at `poll` whatever each look costs: the wait is half a poll and one look.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

__all__ = ["beats", "set_within"]


async def beats(
    poll: timedelta,
    within: timedelta,
    *,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> AsyncIterator[None]:
    """Yield at once, then at every beat `poll` apart, and a last time when `within` is up.

    A look that overran one or more beats is followed at the next beat still ahead, not by a
    burst of the missed ones. `clock` (seconds; the event loop's by default) and `sleep` are
    there for tests that run on a clock of their own.
    """
    now_of = clock or asyncio.get_running_loop().time
    start = now_of()
    deadline = start + within.total_seconds()
    step = poll.total_seconds()
    while True:
        yield
        now = now_of()
        if now >= deadline:
            return
        beat = start + (math.floor((now - start) / step) + 1) * step
        await sleep(min(beat, deadline) - now)


async def set_within(event: asyncio.Event, seconds: float) -> bool:
    """Whether `event` is set within `seconds` (waiting at most that long).

    `asyncio.timeout`, not `wait_for`: no task of its own (a set event wakes the waiter a turn
    of the loop sooner), and on Python 3.11 `wait_for` returns normally when it is cancelled
    just as the event is set, so a loop around it went on as if nothing had cancelled it."""
    if event.is_set():  # no timer to arm and cancel: every take asks this of a listener
        return True
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True
