"""RedisSetScheduler against the shared Redis: what is specific to one visibility-scored ZSET."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis

from durability.interfaces import Delivery, Scheduler
from durability.redis.set_scheduler import RedisSetScheduler
from durability.testing.conformance import MakeScheduler, SchedulerContract, SchedulerModelContract

WAIT = timedelta(milliseconds=200)
SHORT = timedelta(milliseconds=20)
POLL = timedelta(milliseconds=10)


def _scheduler(
    redis: Redis, namespace: str, *, lease: timedelta = timedelta(seconds=30)
) -> RedisSetScheduler:
    return RedisSetScheduler(redis=redis, namespace=namespace, lease=lease, poll=POLL)


async def _take(scheduler: RedisSetScheduler) -> Delivery:
    delivery = await scheduler.next_ready(WAIT)
    assert delivery is not None
    return delivery


async def test_one_member_per_workflow_however_many_wakeups(
    redis: Redis, namespace: str
) -> None:
    scheduler = _scheduler(redis, namespace)
    assert scheduler.schedule == f"{{{namespace}}}:schedule"
    for _ in range(5):
        await scheduler.make_ready(f"{namespace}-w")
    assert await redis.zcard(scheduler.schedule) == 1
    delivery = await _take(scheduler)
    assert await scheduler.next_ready(SHORT) is None
    await scheduler.done(delivery)
    assert await redis.zcard(scheduler.schedule) == 0


async def test_the_score_a_pass_took_is_its_receipt(redis: Redis, namespace: str) -> None:
    scheduler = _scheduler(redis, namespace)
    await scheduler.make_ready(f"{namespace}-w")
    delivery = await _take(scheduler)
    score = await redis.zscore(scheduler.schedule, delivery.workflow)
    assert score == float(delivery.receipt)
    server_ms = (await redis.time())[0] * 1000
    assert score > server_ms + 25_000  # hidden for about one lease


async def test_a_wakeup_landing_mid_pass_survives_done(redis: Redis, namespace: str) -> None:
    scheduler = _scheduler(redis, namespace)
    workflow = f"{namespace}-w"
    await scheduler.make_ready(workflow)
    first = await _take(scheduler)
    await scheduler.make_ready(workflow)  # lands while the pass holds it
    await scheduler.done(first)
    second = await _take(scheduler)
    assert second.workflow == workflow
    await scheduler.done(second)
    assert await scheduler.next_ready(SHORT) is None


async def test_a_pass_taken_again_in_the_same_millisecond_gets_a_receipt_of_its_own(
    redis: Redis, namespace: str
) -> None:
    # Take, wake, take again: on a quick server all three land within one millisecond, and
    # the two takes must still hand out different receipts, or the first pass's done would
    # delete the member the second take (and the wakeup it answers) still holds.
    scheduler = _scheduler(redis, namespace)
    for i in range(100):
        workflow = f"{namespace}-{i}"
        await scheduler.make_ready(workflow)
        first = await _take(scheduler)
        await scheduler.make_ready(workflow)
        second = await _take(scheduler)
        assert second.receipt != first.receipt
        await scheduler.done(first)
        assert await redis.zscore(scheduler.schedule, workflow) == float(second.receipt)
        await scheduler.done(second)


async def test_a_wakeup_after_the_lease_lapsed_survives_the_late_done(
    redis: Redis, namespace: str
) -> None:
    scheduler = _scheduler(redis, namespace, lease=timedelta(milliseconds=100))
    workflow = f"{namespace}-slow"
    await scheduler.make_ready(workflow)
    slow = await _take(scheduler)
    await asyncio.sleep(0.2)
    await scheduler.make_ready(workflow)  # the score is a lapsed receipt, already visible
    await scheduler.done(slow)
    assert (await _take(scheduler)).workflow == workflow


async def test_a_lapsed_lease_makes_the_workflow_visible_again(
    redis: Redis, namespace: str
) -> None:
    scheduler = _scheduler(redis, namespace, lease=timedelta(milliseconds=100))
    workflow = f"{namespace}-orphan"
    await scheduler.make_ready(workflow)
    orphan = await _take(scheduler)
    assert (await scheduler.reclaiming(timedelta(milliseconds=100))).delivery is None
    assert await scheduler.next_ready(SHORT) is None
    await asyncio.sleep(0.2)
    taken = await _take(scheduler)
    assert taken.workflow == workflow and taken.receipt != orphan.receipt
    # The first holder's answers no longer touch the member.
    await scheduler.done(orphan)
    assert await scheduler.extend(orphan, timedelta(seconds=1)) is None
    assert await redis.zscore(scheduler.schedule, workflow) == float(taken.receipt)


async def test_wake_at_replaces_its_own_receipt_and_keeps_an_earlier_wakeup(
    redis: Redis, namespace: str
) -> None:
    scheduler = _scheduler(redis, namespace)
    now = datetime.now(UTC).replace(microsecond=0)
    sleeper, woken = f"{namespace}-sleeper", f"{namespace}-woken"
    for workflow in (sleeper, woken):
        await scheduler.make_ready(workflow)
    first, second = await _take(scheduler), await _take(scheduler)
    deliveries = {first.workflow: first, second.workflow: second}
    await scheduler.make_ready(woken)  # a wakeup mid-pass: sooner than the sleep asked for

    assert await scheduler.wake_at(deliveries[sleeper], now + timedelta(hours=1))
    assert await scheduler.wake_at(deliveries[woken], now + timedelta(hours=1))
    await scheduler.done(deliveries[sleeper])
    await scheduler.done(deliveries[woken])

    assert await scheduler.wake_due() == now + timedelta(hours=1)
    assert (await _take(scheduler)).workflow == woken
    assert await scheduler.next_ready(SHORT) is None


async def test_wake_due_reports_sleepers_not_held_members(
    redis: Redis, namespace: str
) -> None:
    scheduler = _scheduler(redis, namespace)
    now = datetime.now(UTC).replace(microsecond=0)
    await scheduler.make_ready(f"{namespace}-held")
    await _take(scheduler)
    assert await scheduler.wake_due() is None
    await scheduler.make_ready(f"{namespace}-sleeps")
    sleeping = await _take(scheduler)
    assert await scheduler.wake_at(sleeping, now + timedelta(hours=2))
    assert await scheduler.wake_due() == now + timedelta(hours=2)
    # A `now` past the deadline (a test skipping time) makes the sleeper ready.
    assert await scheduler.wake_due(now + timedelta(hours=3)) is None
    assert (await _take(scheduler)).workflow == f"{namespace}-sleeps"


async def test_extend_moves_the_receipt_and_never_shortens(
    redis: Redis, namespace: str
) -> None:
    scheduler = _scheduler(redis, namespace, lease=timedelta(seconds=1))
    await scheduler.make_ready(f"{namespace}-w")
    delivery = await _take(scheduler)
    longer = await scheduler.extend(delivery, timedelta(minutes=5))
    assert longer is not None and float(longer.receipt) > float(delivery.receipt)
    assert await scheduler.extend(delivery, timedelta(minutes=5)) is None  # old receipt
    same = await scheduler.extend(longer, timedelta(seconds=1))
    assert same == longer
    await scheduler.done(longer)
    assert await redis.zcard(scheduler.schedule) == 0


async def test_wake_at_after_cancel_declines(redis: Redis, namespace: str) -> None:
    scheduler = _scheduler(redis, namespace)
    workflow = f"{namespace}-gone"
    await scheduler.make_ready(workflow)
    delivery = await _take(scheduler)
    assert await scheduler.cancel(workflow) == 1
    assert not await scheduler.wake_at(delivery, datetime.now(UTC) + timedelta(hours=1))
    assert await redis.zcard(scheduler.schedule) == 0
    assert await scheduler.cancel(workflow) == 0


async def test_next_ready_polls_until_a_wakeup_arrives(redis: Redis, namespace: str) -> None:
    scheduler = _scheduler(redis, namespace)
    waiting = asyncio.create_task(scheduler.next_ready(timedelta(seconds=1)))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await scheduler.make_ready(f"{namespace}-late")
    delivery = await waiting
    assert delivery is not None and delivery.workflow == f"{namespace}-late"


async def test_bad_inputs_are_refused(redis: Redis, namespace: str) -> None:
    with pytest.raises(ValueError):
        RedisSetScheduler(redis=redis, namespace=namespace, poll=timedelta(0))
    with pytest.raises(ValueError):
        RedisSetScheduler(redis=redis, namespace="a{b}")
    scheduler = _scheduler(redis, namespace)
    with pytest.raises(ValueError):
        await scheduler.make_ready("")
    with pytest.raises(ValueError):
        await scheduler.extend(Delivery("w", "1.5"), timedelta(0))
    assert await redis.zcard(scheduler.schedule) == 0


class TestRedisSetContract(SchedulerContract):
    """The core's scheduler contract, unchanged, on the shared server."""

    @pytest.fixture
    def make_scheduler(self, redis: Redis, namespace: str) -> MakeScheduler:
        made = 0

        async def make(lease: timedelta) -> Scheduler:
            nonlocal made
            made += 1  # a namespace of its own per scheduler; the fixture deletes its keys
            scheduler = RedisSetScheduler(
                redis=redis, namespace=f"{namespace}-{made}", lease=lease, poll=POLL
            )
            await scheduler.prepare()
            return scheduler

        return make


class TestRedisSetModel(SchedulerModelContract):
    make_scheduler = TestRedisSetContract.make_scheduler


async def test_the_deprecated_reclaim_warns_and_hands_nothing_over(
    redis: Redis, namespace: str
) -> None:
    # A visibility-scored queue's lapsed member is its reader's to take, then as now.
    scheduler = _scheduler(redis, namespace, lease=timedelta(milliseconds=100))
    await scheduler.make_ready(f"{namespace}-held")
    await _take(scheduler)
    await asyncio.sleep(0.2)
    with pytest.warns(DeprecationWarning, match="reclaiming"):
        assert await scheduler.reclaim(timedelta(milliseconds=100)) is None
    assert (await _take(scheduler)).workflow == f"{namespace}-held"
