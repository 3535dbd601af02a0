"""Both Redis schedulers keep a deadline in whole milliseconds: it must be rounded up, never
down, or a sleep would end up to a millisecond before the moment it was given (the worker's
own clock check would then see it early and put it to sleep again: a wasted pass)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis

from durability.interfaces import Scheduler
from durability.redis.set_scheduler import RedisSetScheduler
from durability.redis.stream_scheduler import RedisStreamScheduler

QUIET = timedelta(milliseconds=150)
WAIT = timedelta(seconds=2)


def _make(kind: str, redis: Redis, namespace: str) -> Scheduler:
    if kind == "set":
        return RedisSetScheduler(redis=redis, namespace=namespace,
                                 lease=timedelta(seconds=30), poll=timedelta(milliseconds=10))
    return RedisStreamScheduler(redis=redis, namespace=namespace)


@pytest.mark.parametrize("kind", ["stream", "set"])
async def test_a_wakeup_is_never_due_before_its_deadline(
    redis: Redis, namespace: str, kind: str
) -> None:
    scheduler = _make(kind, redis, namespace)
    workflow = f"{namespace}-sleeper"
    await scheduler.make_ready(workflow)
    delivery = await scheduler.next_ready(WAIT)
    assert delivery is not None
    later = datetime.now(UTC) + timedelta(seconds=30)
    when = later.replace(microsecond=later.microsecond // 1000 * 1000 + 500)  # mid-millisecond
    assert await scheduler.wake_at(delivery, when)
    await scheduler.done(delivery)
    await scheduler.wake_due(when - timedelta(microseconds=400))  # its millisecond, too soon
    assert await scheduler.next_ready(QUIET) is None
    await scheduler.wake_due(when + timedelta(milliseconds=1))
    woken = await scheduler.next_ready(WAIT)
    assert woken is not None and woken.workflow == workflow
