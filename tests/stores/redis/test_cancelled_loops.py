"""Every loop the library runs over Redis stops when cancelled, even under a `socket_timeout`.

With a socket timeout redis-py writes each command through `asyncio.wait_for`, which on Python
3.11 returns normally when it is cancelled just as the write finishes: the cancel is gone. Each
test cancels a loop a couple of hundred times in the middle of its calls and counts the
cancellations it lost (`durability.testing.cancelling`); before `stop_if_cancelled` the
trimmer alone lost about one in ten.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from redis.asyncio import Redis

from durability import Run, work
from durability.connect import open_durable
from durability.redis import RedisCheckpointer, RedisDurable
from durability.redis.set_scheduler import RedisSetScheduler
from durability.redis.stream_scheduler import RedisStreamScheduler
from durability.redis.trimming import sweeping, trimming
from durability.testing import cancelling

from .conftest import HOST, PORT

BUSY = timedelta(milliseconds=1)
LONG = timedelta(seconds=30)


@pytest.fixture
async def impatient(redis: Redis) -> AsyncIterator[Redis]:
    """A client with a socket timeout, as a user's own client or `?socket_timeout=` has."""
    client = Redis(host=HOST, port=PORT, decode_responses=True, socket_timeout=5)
    try:
        yield client
    finally:
        await client.aclose()


async def test_the_trimmer_and_the_sweeper_stop_every_time_they_are_cancelled(
    impatient: Redis, namespace: str
) -> None:
    scheduler = RedisStreamScheduler(redis=impatient, namespace=namespace, consumer="c")
    await scheduler.prepare()
    checkpointer = RedisCheckpointer(redis=impatient, namespace=namespace)
    trims = await cancelling(lambda: trimming(scheduler, BUSY))
    sweeps = await cancelling(lambda: sweeping(checkpointer, every=BUSY, step=BUSY))
    assert trims.made > 150 and trims.lost == 0, trims
    assert sweeps.made > 150 and sweeps.lost == 0, sweeps


@pytest.mark.parametrize("kind", ["stream", "set"])
async def test_a_waiting_take_stops_every_time_it_is_cancelled(
    impatient: Redis, namespace: str, kind: str
) -> None:
    scheduler: RedisStreamScheduler | RedisSetScheduler
    if kind == "stream":
        scheduler = RedisStreamScheduler(redis=impatient, namespace=namespace, lease=LONG)
    else:
        # A short poll keeps the set's reader going round its loop of looks and pauses.
        scheduler = RedisSetScheduler(
            redis=impatient, namespace=namespace, lease=LONG, poll=BUSY, doorbell=False
        )
    await scheduler.prepare()
    durable = RedisDurable(RedisCheckpointer(redis=impatient, namespace=namespace), scheduler)
    found = await cancelling(lambda: durable.take(LONG, LONG, LONG), after=(0.0, 0.01))
    assert found.made > 150 and found.lost == 0, found


async def _idle(run: Run) -> None:
    return None


@pytest.mark.parametrize("kind", ["stream", "set"])
async def test_a_worker_and_its_housekeeping_stop_every_time_they_are_cancelled(
    namespace: str, kind: str
) -> None:
    """`work()` (its readers, reclaimer, keeper and timer on a 5 ms tick) and leaving
    `open_durable(housekeeping=True)` while it trims every millisecond."""
    url = (
        f"redis://{HOST}:{PORT}/0?scheduler={kind}&namespace={namespace}&socket_timeout=5"
        "&trim_every_ms=1"
    )
    if kind == "set":
        url = url.replace("&trim_every_ms=1", "")
    async with open_durable(url, lease=timedelta(seconds=2), housekeeping=True) as durable:
        worked = await cancelling(
            lambda: work(durable, _idle, tick=timedelta(milliseconds=5), sweep=BUSY * 5),
            times=150,
            after=(0.0, 0.03),
        )
    assert worked.made > 100 and worked.lost == 0, worked

    async def opened() -> None:
        async with open_durable(url, housekeeping=True):
            await asyncio.Event().wait()

    left = await cancelling(opened, times=100, after=(0.0, 0.02))
    assert left.lost == 0, left
