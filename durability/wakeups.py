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


def _keywords(priority: int, limit: Limit | None) -> dict[str, object]:
    """The keywords a wakeup passes on: only those that are not the defaults."""
    given: dict[str, object] = {}
    if priority != 0 or limit is not None:
        given["priority"] = priority
    if limit is not None:
        given["limit"] = limit
    return given


async def make_ready(
    scheduler: Scheduler, workflow: str, priority: int = 0, limit: Limit | None = None
) -> None:
    """`scheduler.make_ready(workflow)`, with `priority` and `limit` if not the defaults."""
    await scheduler.make_ready(workflow, **_keywords(priority, limit))  # type: ignore[arg-type]


async def arrive(
    durable: Durable,
    workflow: str,
    key: str,
    value: object,
    priority: int = 0,
    limit: Limit | None = None,
) -> Recorded:
    """`durable.arrive(workflow, key, value)`, with `priority` and `limit` if not defaults."""
    return await durable.arrive(workflow, key, value, **_keywords(priority, limit))  # type: ignore[arg-type]


async def deliver(
    durable: Durable, workflow: str, value: object, priority: int = 0, limit: Limit | None = None
) -> Entry:
    """`durable.deliver(workflow, value)`, with `priority` and `limit` if not the defaults."""
    return await durable.deliver(workflow, value, **_keywords(priority, limit))  # type: ignore[arg-type]
