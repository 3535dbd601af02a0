"""The Redis timetable's announcements: a change PUBLISHed by one client wakes the firer
subscribed through another, and a subscription whose connection is killed rings (so the firer
looks) and is made again by the next `changes`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from durability.redis.timetable import RedisTimetable

PATIENCE = 10.0


async def test_an_announcement_from_another_client_sets_the_event(
    redis: Redis, namespace: str
) -> None:
    mine, theirs = RedisTimetable(redis, namespace), None
    other = Redis(host="127.0.0.1", port=6379, decode_responses=True)
    try:
        theirs = RedisTimetable(other, namespace)
        async with mine.subscribed():
            heard = await mine.changes()
            assert not heard.is_set()
            await theirs.announce()
            await asyncio.wait_for(heard.wait(), PATIENCE)
            assert not (await mine.changes()).is_set()  # a fresh event for the next change
    finally:
        await other.aclose()


async def test_changes_outside_a_subscription_is_refused(redis: Redis, namespace: str) -> None:
    with pytest.raises(RuntimeError, match="inside subscribed"):
        await RedisTimetable(redis, namespace).changes()


async def test_a_killed_subscription_still_hears_the_next_announcement(
    spawn_redis: Callable[..., int],
) -> None:
    """On a private server, so killing every pub/sub connection touches no one else's."""
    port = spawn_redis()
    redis = Redis(host="127.0.0.1", port=port, decode_responses=True)
    try:
        timetable = RedisTimetable(redis, "tt")
        channel = "{tt}:schedules:changed"
        async with timetable.subscribed():
            heard = await timetable.changes()
            assert await redis.pubsub_numsub(channel) == [(channel, 1)]
            for client in await redis.client_list(_type="pubsub"):
                await redis.client_kill_filter(_id=client["id"])
            # The client reconnects and subscribes again by itself, or the failure rings and
            # the next `changes` subscribes again: either way the next change is heard.
            for _ in range(int(PATIENCE / 0.05)):
                if heard.is_set() or await redis.pubsub_numsub(channel) == [(channel, 1)]:
                    break
                await asyncio.sleep(0.05)
            heard = await timetable.changes()
            await RedisTimetable(redis, "tt").announce()
            await asyncio.wait_for(heard.wait(), PATIENCE)
        assert await redis.pubsub_numsub(channel) == [(channel, 0)]  # the block's end unsubscribed
    finally:
        await redis.aclose()


async def test_two_firers_asking_at_once_share_one_subscription(
    redis: Redis, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two workers on one durable ask for changes in the same turn: one subscribes, and the
    other waits for it, rather than closing its connection mid-subscribe (which left an unread
    reply on a connection of the shared pool) and reading the same one beside it."""
    timetable = RedisTimetable(redis, namespace)
    channel = f"{{{namespace}}}:schedules:changed"
    async with timetable.subscribed(), timetable.subscribed():
        first, second = await asyncio.gather(timetable.changes(), timetable.changes())
        assert first is second
        assert await redis.pubsub_numsub(channel) == [(channel, 1)]
        await RedisTimetable(redis, namespace).announce()
        await asyncio.wait_for(first.wait(), PATIENCE)
        for _ in range(20):  # the shared client's connections answer in step
            assert await redis.echo("in step") == "in step"
    assert "schedules channel failed" not in caplog.text
