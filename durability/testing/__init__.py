"""Support for testing code built on durability, and for testing a store against the contract.

`durability.testing.conformance` holds the pytest classes every store's suite subclasses. This
package is not re-exported from `durability`, so a production import pulls in none of it (and
never pytest).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from durability.clock import utcnow
from durability.interfaces import Checkpointer
from durability.stepwise import Completed, Run
from durability.values import Pass
from durability.worker import Event


def passing(
    holder: Pass,
    checkpointer: Checkpointer,
    records: Mapping[str, object] | None = None,
    *,
    clock: Callable[[], datetime] = utcnow,
) -> Run:
    """A `Run` wired as `resume` wires one, for a test that drives a single method.

    The test says what it is about (this pass, this store, these records) instead of restating
    how a pass is assembled: `await passing(holder, store).transact("k", effect, as_int)`.
    """
    return Run(holder, checkpointer, records or {}, clock=clock)


__all__ = ["Cancels", "cancelling", "passing"]


class Observed:
    """A `work()` observer that keeps every event and lets a test wait for a condition on
    them (`until`), failing after `patience` seconds rather than hanging."""

    def __init__(self, patience: float = 5.0) -> None:
        self.events: list[Event] = []
        self.patience = patience
        self._changed = asyncio.Event()

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        self._changed.set()

    def of(self, workflow: str, kind: str | None = None) -> list[Event]:
        return [
            event
            for event in self.events
            if event.workflow == workflow and (kind is None or event.kind == kind)
        ]

    def kinds(self, workflow: str) -> list[str]:
        return [event.kind for event in self.of(workflow)]

    def outcomes(self, workflow: str) -> list[object]:
        return [event.outcome for event in self.of(workflow, "outcome")]

    def completed(self, workflow: str) -> bool:
        return any(isinstance(outcome, Completed) for outcome in self.outcomes(workflow))

    async def until(self, condition: Callable[[], bool], seconds: float | None = None) -> None:
        async with asyncio.timeout(self.patience if seconds is None else seconds):
            while not condition():
                self._changed.clear()
                await self._changed.wait()



@dataclass(frozen=True, slots=True)
class Cancels:
    """What `cancelling` found: cancellations `made` (of a task still running), and how many of
    them were `lost` (the task went on past `patience`, or returned as if never asked)."""

    made: int
    lost: int


async def cancelling(
    start: Callable[[], Awaitable[object]],
    *,
    times: int = 200,
    after: tuple[float, float] = (0.0, 0.004),
    patience: float = 5.0,
) -> Cancels:
    """Cancel a fresh `start()` task `times` times, each after a random `after` seconds (so in
    the middle of whatever call it is making), and count the cancellations it lost. A task that
    went on is cancelled again until it stops; one that raised anything else re-raises it."""
    made = lost = 0
    for _ in range(times):
        task = asyncio.ensure_future(start())
        await asyncio.sleep(random.uniform(*after))
        if not task.cancel():
            continue  # it had already ended: nothing was asked of it
        made += 1
        done, _ = await asyncio.wait([task], timeout=patience)
        while not task.done():
            task.cancel()
            await asyncio.wait([task], timeout=0.1)
        if not task.cancelled():
            error = task.exception()
            if error is not None and not isinstance(error, asyncio.CancelledError):
                raise error
        if not done or not task.cancelled():
            lost += 1
    return Cancels(made, lost)
