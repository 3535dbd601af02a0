"""Trimming the stream scheduler's stream: bounded by what is in flight, never past what a group
still owes, and a failing round never stops the loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from datetime import timedelta

import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from durability import work
from durability.codec import as_int
from durability.interfaces import Delivery
from durability.redis import RedisCheckpointer, RedisDurable
from durability.redis.stream_scheduler import GROUP, RedisStreamScheduler
from durability.redis.trimming import trimming
from durability.stepwise import Run
from durability.testing import Observed

WAIT = timedelta(milliseconds=200)


async def _scheduler(redis: Redis, namespace: str) -> RedisStreamScheduler:
    scheduler = RedisStreamScheduler(redis=redis, namespace=namespace, consumer="c")
    await scheduler.prepare()
    return scheduler


async def _take(scheduler: RedisStreamScheduler) -> Delivery:
    delivery = await scheduler.next_ready(WAIT)
    assert delivery is not None
    return delivery


def _entry(delivery: Delivery) -> str:
    return delivery.receipt.rpartition("/")[0]


async def _ids(redis: Redis, key: str) -> list[str]:
    return [str(entry_id) for entry_id, _ in await redis.xrange(key) or []]


async def test_many_wakeups_keep_the_stream_bounded_by_what_is_in_flight(
    redis: Redis, namespace: str
) -> None:
    scheduler = await _scheduler(redis, namespace)
    in_flight: deque[Delivery] = deque()
    window = 4
    longest = 0
    for round_ in range(300):
        await scheduler.make_ready(f"{namespace}-{round_ % 7}")
        in_flight.append(await _take(scheduler))
        if len(in_flight) > window:
            await scheduler.done(in_flight.popleft())
        if round_ % 10 == 9:
            await scheduler.trim()
            length = await redis.xlen(scheduler.ready)
            longest = max(longest, length)
            assert length <= len(in_flight)
    assert 0 < longest <= window  # 300 wakeups went through a stream never longer than this
    # Nothing that was still held was trimmed: every held delivery can still be answered.
    for delivery in in_flight:
        assert _entry(delivery) in await _ids(redis, scheduler.ready)
        await scheduler.done(delivery)
    await scheduler.trim()
    assert await redis.xlen(scheduler.ready) == 0


async def test_pending_and_undelivered_entries_survive_a_trim(
    redis: Redis, namespace: str
) -> None:
    scheduler = await _scheduler(redis, namespace)
    for name in ("acked", "pending", "acked-later"):
        await scheduler.make_ready(f"{namespace}-{name}")
    acked, pending, acked_later = [await _take(scheduler) for _ in range(3)]
    await scheduler.make_ready(f"{namespace}-undelivered")
    await scheduler.done(acked)
    await scheduler.done(acked_later)

    assert await scheduler.trim() == 1
    survivors = await _ids(redis, scheduler.ready)
    assert _entry(acked) not in survivors
    assert _entry(pending) in survivors and _entry(acked_later) in survivors
    assert len(survivors) == 3  # pending, acked-later (behind it), undelivered

    undelivered = await _take(scheduler)
    assert undelivered.workflow == f"{namespace}-undelivered"
    await scheduler.done(pending)
    assert await scheduler.trim() == 2
    assert await _ids(redis, scheduler.ready) == [_entry(undelivered)]


async def test_a_group_that_has_not_read_an_entry_keeps_it(
    redis: Redis, namespace: str
) -> None:
    scheduler = await _scheduler(redis, namespace)
    await redis.xgroup_create(scheduler.ready, "audit", id="0")
    await scheduler.make_ready(f"{namespace}-w")
    await scheduler.done(await _take(scheduler))
    assert await scheduler.trim() == 0
    assert await redis.xlen(scheduler.ready) == 1


async def test_a_stream_without_a_group_is_never_trimmed(redis: Redis, namespace: str) -> None:
    scheduler = RedisStreamScheduler(redis=redis, namespace=namespace)
    await scheduler.make_ready(f"{namespace}-w")  # queued before any worker prepared
    assert await scheduler.trim() == 0
    assert await redis.xlen(scheduler.ready) == 1
    await scheduler.prepare()
    assert (await _take(scheduler)).workflow == f"{namespace}-w"


async def test_trimming_logs_a_failed_round_and_carries_on(
    redis: Redis, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = RedisStreamScheduler(redis=redis, namespace=namespace)
    await redis.set(scheduler.ready, "not a stream")  # every trim now fails: WRONGTYPE
    every = timedelta(milliseconds=20)
    with caplog.at_level(logging.WARNING, logger="durability.redis.trimming"):
        task = asyncio.create_task(trimming(scheduler, every))
        try:
            for _ in range(100):
                await asyncio.sleep(0.02)
                if len(caplog.records) >= 2:
                    break
            assert len(caplog.records) >= 2 and not task.done()
            assert "WRONGTYPE" in caplog.text

            # Repair the key: the same loop trims again, with no restart.
            await redis.delete(scheduler.ready)
            await scheduler.prepare()
            await scheduler.make_ready(f"{namespace}-w")
            await scheduler.done(await _take(scheduler))
            for _ in range(100):
                if await redis.xlen(scheduler.ready) == 0:
                    break
                await asyncio.sleep(0.02)
            assert await redis.xlen(scheduler.ready) == 0
            assert not task.done()
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_trimming_survives_a_server_that_does_not_answer(
    namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing listens on port 1: every round fails to connect.
    # (no retries, so each round fails at once rather than after redis-py's backoff)
    gone = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    scheduler = RedisStreamScheduler(redis=gone, namespace=namespace)
    try:
        with caplog.at_level(logging.WARNING, logger="durability.redis.trimming"):
            task = asyncio.create_task(trimming(scheduler, timedelta(milliseconds=20)))
            for _ in range(100):
                await asyncio.sleep(0.02)
                if len(caplog.records) >= 2:
                    break
            assert len(caplog.records) >= 2 and not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    finally:
        await gone.aclose()


async def test_trim_picks_acked_only_where_the_server_has_it(
    redis: Redis, namespace: str
) -> None:
    # Runs on every version: the mode follows the server, and either mode keeps what is owed.
    version = tuple(int(p) for p in (await redis.info("server"))["redis_version"].split(".")[:2])
    scheduler = await _scheduler(redis, namespace)
    for name in ("acked", "pending", "acked-later"):
        await scheduler.make_ready(f"{namespace}-{name}")
    acked, pending, _ = [await _take(scheduler) for _ in range(3)]
    await scheduler.make_ready(f"{namespace}-undelivered")
    await scheduler.done(acked)
    await scheduler.trim()
    assert scheduler._acked is (version >= (8, 2))
    survivors = await _ids(redis, scheduler.ready)
    assert _entry(acked) not in survivors and _entry(pending) in survivors
    assert (await redis.xpending(scheduler.ready, GROUP))["pending"] == 2
    assert (await _take(scheduler)).workflow == f"{namespace}-undelivered"


async def test_a_worker_trims_the_stream_it_answers_and_an_idle_one_sends_no_trims(
    redis: Redis, namespace: str
) -> None:
    trims = 0

    class Counting(RedisStreamScheduler):
        async def trim(self) -> int:
            nonlocal trims
            trims += 1
            return await super().trim()

    scheduler = Counting(redis=redis, namespace=namespace, trim_every=timedelta(milliseconds=50))
    await scheduler.prepare()
    durable = RedisDurable(RedisCheckpointer(redis=redis, namespace=namespace), scheduler)
    observed = Observed()

    async def body(run: Run) -> int:
        return await run.step("ran", lambda: 1, as_int)

    workflows = [f"{namespace}-trimmed-{n}" for n in range(20)]
    task = asyncio.create_task(work(durable, body, observer=observed))
    try:
        for workflow in workflows:
            await durable.arrive(workflow, "go", True)
        await observed.until(lambda: all(observed.completed(w) for w in workflows))

        async def trimmed() -> bool:
            return await redis.xlen(scheduler.ready) == 0

        for _ in range(100):  # the passes are over: the trim after them empties the stream
            if await trimmed():
                break
            await asyncio.sleep(0.05)
        assert await trimmed()
        # Nothing more answered: an idle worker sends no trims, however long it waits.
        before = trims
        await asyncio.sleep(0.5)
        assert trims == before
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_worker_told_not_to_trim_leaves_the_stream(redis: Redis, namespace: str) -> None:
    scheduler = RedisStreamScheduler(redis=redis, namespace=namespace, trim_every=None)
    await scheduler.prepare()
    durable = RedisDurable(RedisCheckpointer(redis=redis, namespace=namespace), scheduler)
    observed = Observed()

    async def body(run: Run) -> int:
        return await run.step("ran", lambda: 1, as_int)

    workflow = f"{namespace}-untrimmed"
    task = asyncio.create_task(work(durable, body, observer=observed))
    try:
        await durable.arrive(workflow, "go", True)
        await observed.until(lambda: observed.completed(workflow))
        await asyncio.sleep(0.2)
        assert await redis.xlen(scheduler.ready) == 1  # answered, and kept
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
