"""What an idle worker's looks send, as a server of the test's own counts them (`INFO
commandstats`, which counts each command a script runs as well as the script): the timer's and
the reclaimer's looks on the stream are plain reads, and the script only runs when there is
something to move or take over; on the set, the empty look reads no clock, and while a reader
waits on the doorbell the timer asks nothing at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis

from durability.redis import (
    RedisCheckpointer,
    RedisDurable,
    RedisSetScheduler,
    RedisStreamScheduler,
)
from durability.values import Reclaimed

from .conftest import HOST, Servers

LEASE = timedelta(seconds=30)
#: What the test itself sends to read and reset the counts.
_OURS = {"info", "config|resetstat", "config", "client|list", "client"}


@pytest.fixture
async def private(private_servers: Servers) -> AsyncIterator[Redis]:
    client = Redis(host=HOST, port=private_servers.start(), decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


async def _sent(redis: Redis) -> dict[str, int]:
    """The commands the server ran since the last reset, by name, the test's own left out."""
    stats = await redis.info("commandstats")
    found = {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}
    return {name: calls for name, calls in found.items() if name not in _OURS}


async def _blocked(redis: Redis) -> bool:
    """Whether a client of the server is blocked in a BLPOP (the waiting reader)."""
    return any(client.get("cmd") == "blpop" for client in await redis.client_list())


async def test_the_stream_s_idle_looks_are_plain_reads_and_its_scripts_run_only_when_needed(
    private: Redis,
) -> None:
    scheduler = RedisStreamScheduler(redis=private, namespace="idle", lease=LEASE)
    await scheduler.prepare()
    await private.config_resetstat()
    assert await scheduler.wake_due(datetime.now(UTC)) is None
    assert await scheduler.reclaiming(LEASE) == Reclaimed(None, None)
    assert await _sent(private) == {"get": 1, "zrange": 1, "xpending": 1}

    # A sleeper that is due: now the script moves it.
    await scheduler.make_ready("sleeper")
    taken = await scheduler.next_ready(timedelta(seconds=1))
    assert taken is not None
    assert await scheduler.wake_at(taken, datetime.now(UTC) - timedelta(seconds=1))
    await scheduler.done(taken)
    await private.config_resetstat()
    assert await scheduler.wake_due(datetime.now(UTC)) is None
    assert (await _sent(private)).get("xadd") == 1  # the script moved it to the stream
    woken = await scheduler.next_ready(timedelta(seconds=1))
    assert woken is not None and woken.workflow == "sleeper"

    # A delivery that lapsed: the plain look sees it, and the script takes it over.
    await private.config_resetstat()
    quick = timedelta(milliseconds=1)
    await asyncio.sleep(0.01)
    look = await scheduler.reclaiming(quick)
    assert look.delivery is not None and look.delivery.workflow == "sleeper"
    assert look.delivery.lapsed
    assert (await _sent(private)).get("xclaim") == 1


async def test_a_set_reader_waiting_on_the_doorbell_leaves_its_timer_nothing_to_ask(
    private: Redis,
) -> None:
    scheduler = RedisSetScheduler(redis=private, namespace="idle", lease=LEASE)
    await scheduler.prepare()
    durable = RedisDurable(RedisCheckpointer(redis=private, namespace="idle"), scheduler)
    budget = timedelta(minutes=1)

    # An empty look: the lowest member alone (none), the rings cleared, the marker read.
    assert await durable.take(timedelta(milliseconds=1), budget, LEASE) is None  # loads it
    await private.config_resetstat()
    assert await durable.take(timedelta(milliseconds=1), budget, LEASE) is None
    assert await _sent(private) == {"evalsha": 1, "zrange": 1, "del": 1, "get": 1}

    waiting = asyncio.create_task(durable.take(timedelta(seconds=20), budget, LEASE))
    try:
        async with asyncio.timeout(10):
            while not await _blocked(private):  # noqa: ASYNC110 - nothing announces a block
                await asyncio.sleep(0.01)
        await private.config_resetstat()
        for _ in range(3):
            assert await scheduler.wake_due(datetime.now(UTC)) is None
        assert await _sent(private) == {}, "the waiting reader's look is the timer's answer"
        await scheduler.make_ready("later")  # rings: the reader takes it, and is done waiting
        found = await waiting
        assert found is not None and found.delivery.workflow == "later"
        await private.config_resetstat()
        assert await scheduler.wake_due(datetime.now(UTC)) is None
        assert (await _sent(private)).get("evalsha", 0) >= 1, "with nobody waiting, it looks"
    finally:
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
