"""`Nudges`: the delivery renewals a worker's writes asked for (`passing.written`), each started
`delay` after its write unless its pass ends first, on one timer of the loop for them all.

Most passes end a moment after their last write, so most of these renewals are dropped. A
timer a write cost every pass a handle pushed onto the loop's heap and left there cancelled;
here a write costs an append. Every renewal waits the same `delay`, so the queue in write
order is in due order too, and the one timer is set for the earliest renewal still wanted.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from durability.worker.running import Running

__all__ = ["Nudges"]


class Nudges:
    """Renewals waiting for their moment: `add` one after a write; a pass that ends drops its
    own (`Running.unnudge`); `start` is called with each pass whose moment came."""

    __slots__ = ("_delay", "_due", "_loop", "_start", "_timer", "_until")

    def __init__(self, delay: float, start: Callable[[Running], None]) -> None:
        self._delay = delay
        self._start = start
        self._loop = asyncio.get_running_loop()
        self._due: deque[tuple[float, Running]] = deque()  # in write order, so in due order
        self._timer: asyncio.TimerHandle | None = None
        self._until = 0.0  # the moment the timer is set for

    def add(self, running: Running) -> None:
        """A write of `running`'s pass: renew its delivery `delay` from now, unless a renewal
        is already on its way (then once more after it) or already waiting."""
        extending = running.extending
        if extending is not None and not extending.done():
            running.again = True
            return
        if running.nudging is None:
            due = self._loop.time() + self._delay
            running.nudging = due
            self._due.append((due, running))
            if self._timer is None:
                self._arm(due)

    def _arm(self, due: float) -> None:
        self._until = due
        self._timer = self._loop.call_at(due, self._fire)

    def _fire(self) -> None:
        self._timer = None
        # Everything due by the moment the timer was set for: the loop runs a timer a little
        # before its moment (its clock's resolution), which must not leave it for another turn.
        now = max(self._loop.time(), self._until)
        pending = self._due
        while pending:
            due, running = pending[0]
            if running.nudging != due:  # dropped: its pass ended (or asked again since)
                pending.popleft()
                continue
            if due > now:
                self._arm(due)
                return
            pending.popleft()
            self._start(running)
