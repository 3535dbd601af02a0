"""RedisStreamScheduler against the shared Redis: what is specific to a stream and its group."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis

from durability.interfaces import Delivery, Scheduler
from durability.redis import RedisCheckpointer, RedisSetScheduler
from durability.redis.stream_scheduler import GROUP, RedisStreamScheduler
from durability.testing.conformance import MakeScheduler, SchedulerContract, SchedulerModelContract

WAIT = timedelta(milliseconds=200)
SHORT = timedelta(milliseconds=20)


async def _scheduler(
    redis: Redis,
    namespace: str,
    *,
    lease: timedelta = timedelta(seconds=30),
    consumer: str | None = None,
) -> RedisStreamScheduler:
    scheduler = RedisStreamScheduler(
        redis=redis, namespace=namespace, lease=lease, consumer=consumer
    )
    await scheduler.prepare()
    return scheduler


async def _take(scheduler: RedisStreamScheduler) -> Delivery:
    delivery = await scheduler.next_ready(WAIT)
    assert delivery is not None
    return delivery


async def test_keys_share_the_namespace_hash_tag(redis: Redis, namespace: str) -> None:
    scheduler = await _scheduler(redis, namespace)
    assert scheduler.ready == f"{{{namespace}}}:ready"
    assert scheduler.sleeping == f"{{{namespace}}}:sleeping"
    groups = await redis.xinfo_groups(scheduler.ready)
    assert [group["name"] for group in groups] == [GROUP]


async def test_prepare_is_idempotent_and_keeps_wakeups_queued_before_it(
    redis: Redis, namespace: str
) -> None:
    scheduler = RedisStreamScheduler(redis=redis, namespace=namespace)
    await redis.xadd(scheduler.ready, {"workflow": f"{namespace}-early"})
    await scheduler.prepare()
    await scheduler.prepare()
    delivery = await _take(scheduler)
    assert delivery.workflow == f"{namespace}-early"


async def test_a_delivery_is_acknowledged_by_done(redis: Redis, namespace: str) -> None:
    scheduler = await _scheduler(redis, namespace)
    await scheduler.make_ready(f"{namespace}-a")
    delivery = await _take(scheduler)
    assert delivery.workflow == f"{namespace}-a"
    assert (await redis.xpending(scheduler.ready, GROUP))["pending"] == 1
    await scheduler.done(delivery)
    assert (await redis.xpending(scheduler.ready, GROUP))["pending"] == 0
    assert await scheduler.next_ready(SHORT) is None


async def test_a_wakeup_landing_mid_pass_survives_done(redis: Redis, namespace: str) -> None:
    scheduler = await _scheduler(redis, namespace)
    workflow = f"{namespace}-w"
    await scheduler.make_ready(workflow)
    first = await _take(scheduler)
    await scheduler.make_ready(workflow)
    await scheduler.done(first)
    second = await _take(scheduler)
    assert second.workflow == workflow
    assert second.receipt != first.receipt


async def test_a_block_longer_than_the_socket_timeout_is_not_cut_by_the_client(
    namespace: str, redis: Redis
) -> None:
    impatient = Redis(host="127.0.0.1", port=6379, decode_responses=True, socket_timeout=0.3)
    try:
        scheduler = await _scheduler(impatient, namespace)
        assert await scheduler.next_ready(timedelta(seconds=0.8)) is None
        # The connection survived the long wait and a later wakeup is still delivered.
        late = asyncio.get_running_loop().call_later(
            0.5, lambda: asyncio.ensure_future(redis.xadd(scheduler.ready, {"workflow": "x"}))
        )
        delivery = await scheduler.next_ready(timedelta(seconds=1.2))
        late.cancel()
        assert delivery is not None and delivery.workflow == "x"
    finally:
        await impatient.aclose()


async def test_reclaiming_takes_over_a_delivery_whose_worker_died(
    redis: Redis, namespace: str
) -> None:
    lease = timedelta(milliseconds=200)
    dead = await _scheduler(redis, namespace, lease=lease, consumer="dead")
    alive = await _scheduler(redis, namespace, lease=lease, consumer="alive")
    workflow = f"{namespace}-orphan"
    await dead.make_ready(workflow)
    orphan = await _take(dead)
    assert (await alive.reclaiming(lease)).delivery is None  # still within its lease

    await asyncio.sleep(0.3)
    taken = (await alive.reclaiming(lease)).delivery
    assert taken is not None and taken.workflow == workflow
    assert taken.receipt != orphan.receipt
    pending = await redis.xpending_range(alive.ready, GROUP, "-", "+", 10)
    assert [entry["consumer"] for entry in pending] == ["alive"]

    # The dead worker's late answers are refused: they must not act on the new delivery.
    await dead.done(orphan)
    assert await dead.extend(orphan, lease) is None
    assert not await dead.wake_at(orphan, datetime.now(UTC))
    assert (await redis.xpending(alive.ready, GROUP))["pending"] == 1
    assert await alive.wake_at(taken, datetime.now(UTC) + timedelta(hours=1))
    await alive.done(taken)
    assert (await redis.xpending(alive.ready, GROUP))["pending"] == 0


async def test_extend_keeps_a_delivery_from_being_reclaimed(
    redis: Redis, namespace: str
) -> None:
    lease = timedelta(milliseconds=400)
    worker = await _scheduler(redis, namespace, lease=lease, consumer="worker")
    other = await _scheduler(redis, namespace, lease=lease, consumer="other")
    await worker.make_ready(f"{namespace}-long")
    delivery = await _take(worker)
    await asyncio.sleep(0.3)
    kept = await worker.extend(delivery, lease)
    assert kept == delivery
    assert (await other.reclaiming(lease)).delivery is None
    await asyncio.sleep(0.5)
    assert (await other.reclaiming(lease)).delivery is not None


async def test_cancel_removes_queued_held_and_sleeping_wakeups(
    redis: Redis, namespace: str
) -> None:
    scheduler = await _scheduler(redis, namespace)
    workflow, bystander = f"{namespace}-gone", f"{namespace}-stays"
    await scheduler.make_ready(workflow)
    await scheduler.make_ready(workflow)
    await scheduler.make_ready(bystander)
    held = await _take(scheduler)
    assert held.workflow == workflow
    assert await scheduler.wake_at(held, datetime.now(UTC) + timedelta(hours=1))

    assert await scheduler.cancel(workflow) == 3  # held, queued, sleeping

    entries = await redis.xrange(scheduler.ready) or []
    assert [(fields or {}).get("workflow") for _, fields in entries] == [bystander]
    assert await redis.zcard(scheduler.sleeping) == 0
    assert (await redis.xpending(scheduler.ready, GROUP))["pending"] == 0
    # wake_at after cancel declines and schedules nothing.
    assert not await scheduler.wake_at(held, datetime.now(UTC))
    assert await redis.zcard(scheduler.sleeping) == 0
    assert (await _take(scheduler)).workflow == bystander
    assert await scheduler.next_ready(SHORT) is None
    assert await scheduler.cancel(workflow) == 0


async def test_cancel_does_not_count_acknowledged_entries(
    redis: Redis, namespace: str
) -> None:
    scheduler = await _scheduler(redis, namespace)
    workflow = f"{namespace}-finished"
    await scheduler.make_ready(workflow)
    await scheduler.done(await _take(scheduler))
    assert await scheduler.cancel(workflow) == 0
    assert await redis.xlen(scheduler.ready) == 0  # the acknowledged entry went too


async def test_wake_due_moves_due_sleepers_into_the_stream(
    redis: Redis, namespace: str
) -> None:
    scheduler = await _scheduler(redis, namespace)
    now = datetime.now(UTC).replace(microsecond=0)
    early, late = f"{namespace}-early", f"{namespace}-late"
    for workflow, hours in ((early, 1), (late, 3)):
        await scheduler.make_ready(workflow)
        delivery = await _take(scheduler)
        assert await scheduler.wake_at(delivery, now + timedelta(hours=hours))
        await scheduler.done(delivery)

    assert await scheduler.wake_due(now) == now + timedelta(hours=1)
    assert await scheduler.next_ready(SHORT) is None
    assert await scheduler.wake_due(now + timedelta(hours=2)) == now + timedelta(hours=3)
    assert (await _take(scheduler)).workflow == early
    assert await scheduler.wake_due(now + timedelta(hours=4)) is None
    assert (await _take(scheduler)).workflow == late
    assert await scheduler.wake_due() is None


async def test_wake_at_keeps_the_earlier_deadline(redis: Redis, namespace: str) -> None:
    scheduler = await _scheduler(redis, namespace)
    now = datetime.now(UTC).replace(microsecond=0)
    workflow = f"{namespace}-w"
    await scheduler.make_ready(workflow)
    await scheduler.make_ready(workflow)
    first, second = await _take(scheduler), await _take(scheduler)
    assert await scheduler.wake_at(first, now + timedelta(hours=2))
    assert await scheduler.wake_at(second, now + timedelta(hours=1))
    assert await scheduler.wake_at(first, now + timedelta(hours=5))
    assert await scheduler.wake_due(now) == now + timedelta(hours=1)


async def test_wake_due_with_no_sleepers_returns_none(redis: Redis, namespace: str) -> None:
    scheduler = await _scheduler(redis, namespace)
    assert await scheduler.wake_due() is None


@pytest.mark.parametrize("bad", ["", "a{b", "a}b"])
def test_a_namespace_that_cannot_be_a_hash_tag_is_refused(redis: Redis, bad: str) -> None:
    with pytest.raises(ValueError):
        RedisStreamScheduler(redis=redis, namespace=bad)


@pytest.mark.parametrize(
    "bad", ["a\x00b", "tab\there", "\x1b[31m", "del\x7f", "c1\x85", "n" * 201, "\ud800"]
)
def test_a_namespace_that_would_break_keys_is_refused_wherever_a_store_is_built(
    redis: Redis, bad: str
) -> None:
    for build in (
        lambda: RedisStreamScheduler(redis=redis, namespace=bad),
        lambda: RedisSetScheduler(redis=redis, namespace=bad),
        lambda: RedisCheckpointer(redis=redis, namespace=bad),
    ):
        with pytest.raises(ValueError, match="namespace"):
            build()
    RedisStreamScheduler(redis=redis, namespace="n" * 200)  # the longest allowed


async def test_bad_workflow_ids_and_timings_are_refused(redis: Redis, namespace: str) -> None:
    with pytest.raises(ValueError):
        RedisStreamScheduler(redis=redis, namespace=namespace, lease=timedelta(0))
    scheduler = await _scheduler(redis, namespace)
    with pytest.raises(ValueError):
        await scheduler.make_ready("")
    with pytest.raises(ValueError):
        await scheduler.next_ready(timedelta(0))
    with pytest.raises(ValueError):
        await scheduler.reclaiming(timedelta(seconds=-1))
    with pytest.raises(ValueError):
        await scheduler.done(Delivery("w", "not-a-receipt"))
    assert await redis.xlen(scheduler.ready) == 0


class TestRedisStreamContract(SchedulerContract):
    """The core's scheduler contract, unchanged, on the shared server."""

    @pytest.fixture
    def make_scheduler(self, redis: Redis, namespace: str) -> MakeScheduler:
        made = 0

        async def make(lease: timedelta) -> Scheduler:
            nonlocal made
            made += 1  # a namespace of its own per scheduler; the fixture deletes its keys
            scheduler = RedisStreamScheduler(
                redis=redis, namespace=f"{namespace}-{made}", lease=lease
            )
            await scheduler.prepare()
            return scheduler

        return make


class TestRedisStreamModel(SchedulerModelContract):
    make_scheduler = TestRedisStreamContract.make_scheduler


async def test_the_deprecated_reclaim_warns_and_still_takes_over(
    redis: Redis, namespace: str
) -> None:
    lease = timedelta(milliseconds=200)
    dead = await _scheduler(redis, namespace, lease=lease, consumer="dead")
    alive = await _scheduler(redis, namespace, lease=lease, consumer="alive")
    await dead.make_ready(f"{namespace}-orphan")
    orphan = await _take(dead)
    await asyncio.sleep(0.3)
    with pytest.warns(DeprecationWarning, match="reclaiming"):
        taken = await alive.reclaim(lease)
    assert taken is not None and taken.workflow == orphan.workflow
    assert taken.receipt != orphan.receipt
    await dead.done(orphan)  # the dead worker's receipt is refused: the entry stays alive's
    assert (await redis.xpending(alive.ready, GROUP))["pending"] == 1
    await alive.done(taken)
    assert (await redis.xpending(alive.ready, GROUP))["pending"] == 0
