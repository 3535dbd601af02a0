"""Races at a concurrency limit between several schedulers over one queue, for a store's suite.

Each scheduler stands for another worker (give each connections of its own), and every one
takes at the same moment, so a store whose count of a key's holders and its take are two steps
hands out more than the limit here. The contract runs its own races over durables
(`conformance.limits`); these are the ones a store runs over its schedulers directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta

from durability.interfaces import Scheduler
from durability.values import Limit

__all__ = ["most_held_at_once", "taken_at_a_limit_of_one"]

#: How long each taker waits for a wakeup in one race.
RACE = timedelta(milliseconds=50)


async def taken_at_a_limit_of_one(
    schedulers: Sequence[Scheduler], workflows: tuple[str, str], key: str
) -> int:
    """Both `workflows` made ready under `Limit(key, 1)`, then every scheduler taking at once:
    how many were handed out (none answered in between; 1 is right). Both are cancelled after,
    so a next race on the queue starts clear."""
    limit = Limit(key, 1)
    for workflow in workflows:
        await schedulers[0].make_ready(workflow, limit=limit)
    found = await asyncio.gather(*(scheduler.next_ready(RACE) for scheduler in schedulers))
    for workflow in workflows:
        await schedulers[0].cancel(workflow)
    return sum(delivery is not None for delivery in found)


async def most_held_at_once(
    schedulers: Sequence[Scheduler],
    workflows: Sequence[str],
    limit: Limit,
    *,
    holding: timedelta = timedelta(milliseconds=20),
    patience: timedelta = timedelta(seconds=60),
) -> tuple[int, list[str]]:
    """Every one of `workflows` made ready under `limit`, then all `schedulers` taking until
    each was answered, holding each delivery `holding` before its `done`: the most held at
    once (at most `limit.at_most` is right), and the workflows in the order they were answered
    (each once is right). Gives up with `TimeoutError` after `patience`."""
    for workflow in workflows:
        await schedulers[0].make_ready(workflow, limit=limit)
    held: set[str] = set()
    answered: list[str] = []
    most = 0

    async def take(scheduler: Scheduler) -> None:
        nonlocal most
        while len(answered) < len(workflows):
            delivery = await scheduler.next_ready(timedelta(milliseconds=300))
            if delivery is None:
                continue
            held.add(delivery.workflow)  # counted once the store handed it out ...
            most = max(most, len(held))
            await asyncio.sleep(holding.total_seconds())
            held.discard(delivery.workflow)  # ... and no longer before the store hears the answer
            answered.append(delivery.workflow)
            await scheduler.done(delivery)

    takers = asyncio.gather(*(take(scheduler) for scheduler in schedulers))
    await asyncio.wait_for(takers, patience.total_seconds())
    return most, answered
