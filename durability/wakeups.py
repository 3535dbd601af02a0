"""A wakeup's priority and limit passed on: `make_ready`, `arrive` and `deliver` over any
scheduler or durable, with the keywords only when they are not the defaults.

Not to undo: a scheduler or durable of one's own written before priorities and limits takes no
such keywords, and must go on working for every wakeup that asks for neither; so every caller
in the library goes through here rather than passing `priority=0, limit=None` itself.
"""

from __future__ import annotations

from durability.interfaces import Durable, Scheduler
from durability.values import Entry, Limit, Recorded

__all__ = ["arrive", "deliver", "make_ready"]


async def make_ready(
    scheduler: Scheduler, workflow: str, priority: int = 0, limit: Limit | None = None
) -> None:
    """`scheduler.make_ready(workflow)`, with `priority` and `limit` if not the defaults."""
    if priority == 0 and limit is None:
        await scheduler.make_ready(workflow)
    elif limit is None:
        await scheduler.make_ready(workflow, priority=priority)
    else:
        await scheduler.make_ready(workflow, priority=priority, limit=limit)


async def arrive(
    durable: Durable,
    workflow: str,
    key: str,
    value: object,
    priority: int = 0,
    limit: Limit | None = None,
) -> Recorded:
    """`durable.arrive(workflow, key, value)`, with `priority` and `limit` if not defaults."""
    if priority == 0 and limit is None:
        return await durable.arrive(workflow, key, value)
    if limit is None:
        return await durable.arrive(workflow, key, value, priority=priority)
    return await durable.arrive(workflow, key, value, priority=priority, limit=limit)


async def deliver(
    durable: Durable, workflow: str, value: object, priority: int = 0, limit: Limit | None = None
) -> Entry:
    """`durable.deliver(workflow, value)`, with `priority` and `limit` if not the defaults."""
    if priority == 0 and limit is None:
        return await durable.deliver(workflow, value)
    if limit is None:
        return await durable.deliver(workflow, value, priority=priority)
    return await durable.deliver(workflow, value, priority=priority, limit=limit)
