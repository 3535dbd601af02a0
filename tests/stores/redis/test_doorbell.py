"""The set scheduler's doorbell: a waiting reader blocks on `{ns}:doorbell` and is rung by the
script that makes a workflow visible, instead of polling. What each test would catch is said
beside it; each wait below is bounded far from the fallback look (`_UNANNOUNCED`, 2 s), so a
reader that was not rung cannot pass by luck."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis

from durability.interfaces import Scheduler
from durability.redis import RedisCheckpointer, RedisDurable
from durability.redis.set_scheduler import RedisSetScheduler
from durability.testing.conformance import MakeScheduler, SchedulerContract

LONG = timedelta(seconds=30)
WITHIN = timedelta(seconds=10)
#: A rung reader answers in milliseconds; one that was not rung waits for the fallback (2 s).
RUNG = 1.0
#: A poll so slow that a reader found by polling could not pass as rung.
SLOW_POLL = timedelta(seconds=30)


def _scheduler(redis: Redis, namespace: str, *, doorbell: bool = True) -> RedisSetScheduler:
    return RedisSetScheduler(
        redis=redis, namespace=namespace, lease=LONG, poll=SLOW_POLL, doorbell=doorbell
    )


async def _blocked_on(redis: Redis, doorbell: str) -> None:
    """Wait until some client sits in a BLPOP (on `doorbell`, as the keys show)."""
    for _ in range(200):
        clients = await redis.client_list()
        if any(c.get("cmd") == "blpop" for c in clients):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"nobody blocked on {doorbell}")


async def test_make_ready_from_another_client_rings_a_blocked_reader(
    redis: Redis, namespace: str
) -> None:
    scheduler = _scheduler(redis, namespace)
    other = Redis(host="127.0.0.1", port=6379, decode_responses=True)
    try:
        waiting = asyncio.create_task(scheduler.next_ready(WITHIN))
        assert scheduler.doorbell is not None
        await _blocked_on(redis, scheduler.doorbell)
        began = time.monotonic()
        await _scheduler(other, namespace).make_ready(f"{namespace}-w")
        delivery = await asyncio.wait_for(waiting, WITHIN.total_seconds())
        assert delivery is not None and delivery.workflow == f"{namespace}-w"
        assert time.monotonic() - began < RUNG  # rung, not found by a later look
    finally:
        await other.aclose()


async def test_a_member_written_without_a_ring_is_found_by_the_fallback_look(
    redis: Redis, namespace: str
) -> None:
    scheduler = _scheduler(redis, namespace)
    server_ms = int((await redis.time())[0]) * 1000
    await redis.zadd(scheduler.schedule, {f"{namespace}-quiet": server_ms})  # no ring
    await redis.delete(scheduler.doorbell or "")
    # Visible already: the first look finds it.
    assert await scheduler.next_ready(WITHIN) is not None
    waiting = asyncio.create_task(scheduler.next_ready(WITHIN))
    assert scheduler.doorbell is not None
    await _blocked_on(redis, scheduler.doorbell)
    server_ms = int((await redis.time())[0]) * 1000
    await redis.zadd(scheduler.schedule, {f"{namespace}-quieter": server_ms})
    delivery = await asyncio.wait_for(waiting, WITHIN.total_seconds())
    assert delivery is not None and delivery.workflow == f"{namespace}-quieter"


async def test_an_earlier_sleeper_rings_a_reader_waiting_for_a_later_one(
    redis: Redis, namespace: str
) -> None:
    scheduler = _scheduler(redis, namespace)
    for name in ("late", "soon"):
        await scheduler.make_ready(f"{namespace}-{name}")
    late = await scheduler.next_ready(WITHIN)
    soon = await scheduler.next_ready(WITHIN)
    assert late is not None and soon is not None
    now = datetime.now(UTC)
    assert await scheduler.wake_at(late, now + timedelta(seconds=20))
    waiting = asyncio.create_task(scheduler.next_ready(WITHIN))
    assert scheduler.doorbell is not None
    await _blocked_on(redis, scheduler.doorbell)
    # The reader waits on the ring or for 2 s; a sleeper due in 0.3 s must ring it.
    began = time.monotonic()
    assert await scheduler.wake_at(soon, datetime.now(UTC) + timedelta(milliseconds=300))
    delivery = await asyncio.wait_for(waiting, WITHIN.total_seconds())
    assert delivery is not None and delivery.workflow == soon.workflow
    assert time.monotonic() - began < RUNG


async def test_rings_are_capped_and_an_empty_look_clears_them(
    redis: Redis, namespace: str
) -> None:
    scheduler = _scheduler(redis, namespace)
    assert scheduler.doorbell is not None
    for i in range(100):
        await scheduler.make_ready(f"{namespace}-{i}")
    assert await redis.llen(scheduler.doorbell) == 64  # nobody waiting: capped
    taken = [await scheduler.next_ready(WITHIN) for _ in range(100)]
    assert len({d.workflow for d in taken if d is not None}) == 100
    assert await redis.llen(scheduler.doorbell) == 64  # looks that took something keep them
    assert await scheduler.next_ready(timedelta(milliseconds=50)) is None
    assert await redis.exists(scheduler.doorbell) == 0


async def test_without_the_doorbell_no_ring_is_written(redis: Redis, namespace: str) -> None:
    scheduler = _scheduler(redis, namespace, doorbell=False)
    assert scheduler.doorbell is None and scheduler.keys == (scheduler.schedule,)
    await scheduler.make_ready(f"{namespace}-w")
    delivery = await scheduler.next_ready(WITHIN)
    assert delivery is not None
    assert await scheduler.wake_at(delivery, datetime.now(UTC) - timedelta(seconds=1))
    assert sorted(await redis.keys(f"*{namespace}*")) == [scheduler.schedule]


async def _durable(client: Redis, namespace: str) -> RedisDurable:
    return RedisDurable(RedisCheckpointer(redis=client), _scheduler(client, namespace))


async def test_a_rung_durable_take_holds_its_claim(redis: Redis, namespace: str) -> None:
    durable = await _durable(redis, namespace)
    submitter = await _durable(redis, namespace)
    workflow = f"{namespace}-wf"
    assert await durable.take(timedelta(milliseconds=300), LONG, LONG) is None  # now waiting
    waiting = asyncio.create_task(durable.take(WITHIN, LONG, LONG))
    scheduler = durable.scheduler
    assert isinstance(scheduler, RedisSetScheduler) and scheduler.doorbell is not None
    await _blocked_on(redis, scheduler.doorbell)
    began = time.monotonic()
    await submitter.arrive(workflow, "k", 1)
    taken = await asyncio.wait_for(waiting, WITHIN.total_seconds())
    assert time.monotonic() - began < RUNG
    assert taken is not None and taken.holder is not None
    assert taken.delivery.workflow == workflow and taken.holder.records == {"k": 1}
    assert await durable.checkpointer.claim(workflow, LONG, LONG) is None  # held by the take
    await durable.finish(taken.holder, taken.delivery)
    assert await redis.zcard(scheduler.schedule) == 0


async def test_a_durable_take_cancelled_mid_wait_takes_nothing(
    redis: Redis, namespace: str
) -> None:
    # The look rides behind the BLPOP on one connection: were the connection left open, the
    # look would run at the next ring and hide a workflow for a take that is gone.
    durable = await _durable(redis, namespace)
    waiting = asyncio.create_task(durable.take(WITHIN, LONG, LONG))
    scheduler = durable.scheduler
    assert isinstance(scheduler, RedisSetScheduler) and scheduler.doorbell is not None
    await _blocked_on(redis, scheduler.doorbell)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await scheduler.make_ready(f"{namespace}-after")
    await asyncio.sleep(0.1)
    found = await scheduler.next_ready(timedelta(milliseconds=100))
    assert found is not None and found.workflow == f"{namespace}-after"
    # And the durable waits again on a fresh connection.
    await scheduler.done(found)
    again = asyncio.create_task(durable.take(WITHIN, LONG, LONG))
    await _blocked_on(redis, scheduler.doorbell)
    await scheduler.make_ready(f"{namespace}-again")
    taken = await asyncio.wait_for(again, WITHIN.total_seconds())
    assert taken is not None and taken.delivery.workflow == f"{namespace}-again"


class TestPolledSetContract(SchedulerContract):
    """The core's scheduler contract on the set as the design publishes it: no doorbell."""

    @pytest.fixture
    def make_scheduler(self, redis: Redis, namespace: str) -> MakeScheduler:
        made = 0

        async def make(lease: timedelta) -> Scheduler:
            nonlocal made
            made += 1
            scheduler = RedisSetScheduler(
                redis=redis,
                namespace=f"{namespace}-{made}",
                lease=lease,
                poll=timedelta(milliseconds=10),
                doorbell=False,
            )
            await scheduler.prepare()
            return scheduler

        return make
