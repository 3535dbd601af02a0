"""Priorities and limits on both Redis schedulers, alone, sharded and on the local cluster:
strict priority, the merge rule, a limit's overshoot (0) under concurrent takers, its slot
freed by `done` and by a lapsed lease, the rate window, and `take_up_to` within the room."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from durability.redis import (
    RedisCheckpointer,
    RedisDurable,
    RedisSetScheduler,
    RedisStreamScheduler,
)
from durability.values import Delivery, Limit

KINDS = [RedisStreamScheduler, RedisSetScheduler]
SHORT = timedelta(milliseconds=300)
LONG = timedelta(seconds=5)
Make = Callable[..., Awaitable[Any]]


@pytest.fixture
def make(redis: Redis, namespace: str) -> Make:
    """A fresh prepared scheduler of `kind` over the shared server (its own namespace)."""

    async def made(kind: Any, shards: int = 1, lease: timedelta = LONG, **kw: Any) -> Any:
        scheduler = kind(redis=redis, namespace=namespace, lease=lease, shards=shards, **kw)
        await scheduler.prepare()
        return scheduler

    return made


async def _took(scheduler: Any, within: timedelta = SHORT) -> Delivery | None:
    delivery = await scheduler.next_ready(within)
    if delivery is None and isinstance(scheduler, RedisStreamScheduler):
        await scheduler.wake_due()  # the stream's timer puts back what a lapse made room for
        delivery = await scheduler.next_ready(within)
    return delivery


async def _drain(scheduler: Any) -> list[Delivery]:
    out = []
    while (delivery := await _took(scheduler)) is not None:
        out.append(delivery)
        await scheduler.done(delivery)
    return out


@pytest.mark.parametrize("shards", [1, 4])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_higher_priority_is_taken_first_and_equal_ones_in_order(
    make: Make, namespace: str, kind: Any, shards: int
) -> None:
    scheduler = await make(kind, shards)
    # One workflow id per shard position does not matter on one shard; sharded, priority is
    # strict within a shard, so every id here is placed on the same shard.
    ids = _same_shard(namespace, shards, 6)
    plan = [(ids[0], 0), (ids[1], 5), (ids[2], -3), (ids[3], 5), (ids[4], 100), (ids[5], 0)]
    for workflow, priority in plan:
        await scheduler.make_ready(workflow, priority=priority)
        await asyncio.sleep(0.002)  # readiness is kept to the millisecond
    taken = [(d.workflow, d.priority) for d in await _drain(scheduler)]
    assert taken == [
        (ids[4], 100), (ids[1], 5), (ids[3], 5), (ids[0], 0), (ids[5], 0), (ids[2], -3)
    ]


def _same_shard(namespace: str, shards: int, count: int) -> list[str]:
    from durability.redis.shards import shard_of

    found: list[str] = []
    n = 0
    while len(found) < count:
        workflow = f"{namespace}-{n}"
        if shard_of(workflow, shards) == 0:
            found.append(workflow)
        n += 1
    return found


@pytest.mark.parametrize("kind", KINDS)
async def test_a_second_wakeup_merges_into_the_waiting_one(
    make: Make, namespace: str, kind: Any
) -> None:
    scheduler = await make(kind)
    gateway = Limit(f"{namespace}-gw", 3)
    await scheduler.make_ready(namespace, priority=1, limit=gateway)
    await scheduler.make_ready(namespace, priority=7)
    await scheduler.make_ready(namespace, priority=2, limit=Limit(f"{namespace}-other", 1))
    delivery = await _took(scheduler)
    assert delivery is not None
    assert (delivery.priority, delivery.limit) == (7, gateway)
    await scheduler.done(delivery)
    assert await _took(scheduler) is None  # one wakeup, not three


@pytest.mark.parametrize("kind", KINDS)
async def test_a_sleeping_delivery_comes_back_with_its_priority_and_limit(
    make: Make, namespace: str, kind: Any
) -> None:
    scheduler = await make(kind)
    gateway = Limit(f"{namespace}-gw", 2)
    await scheduler.make_ready(namespace, priority=9, limit=gateway)
    delivery = await _took(scheduler)
    assert delivery is not None
    assert await scheduler.wake_at(delivery, datetime.now(UTC) - timedelta(seconds=1))
    await scheduler.wake_due()
    again = await _took(scheduler)
    assert again is not None and (again.priority, again.limit) == (9, gateway)
    await scheduler.done(again)
    # Answered: the next wakeup gives its own.
    await scheduler.make_ready(namespace)
    plain = await _took(scheduler)
    assert plain is not None and (plain.priority, plain.limit) == (0, None)


@pytest.mark.parametrize("shards", [1, 4])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_full_limit_leaves_its_wakeup_queued_and_takes_the_others(
    make: Make, namespace: str, kind: Any, shards: int
) -> None:
    scheduler = await make(kind, shards)
    gateway = Limit(f"{namespace}-gw", 1)
    await scheduler.make_ready(f"{namespace}-a", priority=5, limit=gateway)
    await scheduler.make_ready(f"{namespace}-b", priority=5, limit=gateway)
    await scheduler.make_ready(f"{namespace}-c")
    two = [await _took(scheduler), await _took(scheduler)]
    # (Sharded, the limited ones sit on their limit key's shard: the order across shards is
    # the readers' rotation, so only the set of the two is certain.)
    assert {one.workflow for one in two if one is not None} & {f"{namespace}-c"}
    held = [one for one in two if one is not None and one.limit == gateway]
    assert len(held) == 1
    first = held[0]
    assert await _took(scheduler) is None  # the other waits for the slot, not handed out
    # A reader blocked while the limit is full is woken by the holder's done.
    waiting = asyncio.ensure_future(scheduler.next_ready(timedelta(seconds=10)))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await scheduler.done(first)
    second = await asyncio.wait_for(waiting, 10)
    assert second is not None and second.workflow != first.workflow
    assert second.limit == gateway


@pytest.mark.parametrize("kind", KINDS)
async def test_a_lapsed_holder_frees_its_slot(make: Make, namespace: str, kind: Any) -> None:
    lease = timedelta(seconds=1)
    scheduler = await make(kind, lease=lease)
    gateway = Limit(f"{namespace}-gw", 1)
    for name in ("a", "b"):
        await scheduler.make_ready(f"{namespace}-{name}", limit=gateway)
    held = await _took(scheduler)
    assert held is not None
    assert await _took(scheduler) is None
    # The holder dies: after its lease the parked one is taken (or the holder's own wakeup
    # again, which then holds the slot itself).
    found: Delivery | None = None
    for _ in range(20):
        await asyncio.sleep(0.2)
        found = await _took(scheduler)
        if found is None:
            found = (await scheduler.reclaiming(lease)).delivery
        if found is not None:
            break
    assert found is not None and found.limit == gateway
    assert await _took(scheduler) is None  # still one at a time


@pytest.mark.parametrize("kind", KINDS)
async def test_a_rate_limit_takes_at_most_n_per_window(
    make: Make, namespace: str, kind: Any
) -> None:
    scheduler = await make(kind)
    rate = Limit(f"{namespace}-rate", 2, per=timedelta(seconds=1))
    for n in range(3):
        await scheduler.make_ready(f"{namespace}-{n}", limit=rate)
    taken = [await _took(scheduler), await _took(scheduler)]
    assert all(one is not None and one.limit == rate for one in taken)
    for one in taken:
        assert one is not None
        await scheduler.done(one)  # answering does not give a rate's room back
    assert await _took(scheduler, timedelta(milliseconds=200)) is None
    # The reader sleeps until the window has room, and takes the third then.
    third = await _took(scheduler, timedelta(seconds=3))
    assert third is not None and third.workflow == f"{namespace}-2"


@pytest.mark.parametrize("shards", [1, 4])
@pytest.mark.parametrize("kind", KINDS)
async def test_concurrent_takers_never_overshoot_a_limit_of_one(
    redis: Redis, namespace: str, kind: Any, shards: int
) -> None:
    gateway = Limit(f"{namespace}-gw", 1)
    readers = []
    for _ in range(4):  # four workers, each a scheduler of its own
        reader = kind(redis=redis, namespace=namespace, lease=LONG, shards=shards)
        await reader.prepare()
        readers.append(reader)
    for n in range(8):
        await readers[0].make_ready(f"{namespace}-{n}", limit=gateway)
    holding: set[str] = set()
    most = 0
    done: list[str] = []

    async def work(reader: Any) -> None:
        nonlocal most
        while len(done) < 8:
            delivery = await reader.next_ready(timedelta(milliseconds=500))
            if delivery is None:
                continue
            holding.add(delivery.workflow)
            most = max(most, len(holding))
            await asyncio.sleep(0.02)
            holding.discard(delivery.workflow)
            done.append(delivery.workflow)
            await reader.done(delivery)

    await asyncio.wait_for(asyncio.gather(*(work(reader) for reader in readers)), 60)
    assert most == 1
    assert sorted(done) == sorted(f"{namespace}-{n}" for n in range(8))


@pytest.fixture
async def durables(redis: Redis, namespace: str) -> AsyncIterator[list[RedisDurable]]:
    made: list[RedisDurable] = []
    yield made
    for durable in made:
        await durable.close()


@pytest.mark.parametrize("shards", [1, 4])
@pytest.mark.parametrize("kind", KINDS)
async def test_take_up_to_takes_no_more_than_the_limit_has_room_for(
    redis: Redis, namespace: str, kind: Any, shards: int, durables: list[RedisDurable]
) -> None:
    scheduler = kind(redis=redis, namespace=namespace, lease=LONG, shards=shards)
    await scheduler.prepare()
    checkpointer = RedisCheckpointer(
        redis=redis, namespace=namespace, ttl=timedelta(minutes=10), shards=shards
    )
    durable = RedisDurable(checkpointer, scheduler)
    durables.append(durable)
    gateway = Limit(f"{namespace}-gw", 2)
    for n in range(5):
        await durable.arrive(f"{namespace}-{n}", "order", n, priority=n, limit=gateway)
    taken = []
    for _ in range(3):
        taken += await durable.take_up_to(lambda: 5, SHORT, LONG, LONG)
    assert len(taken) == 2
    assert all(one.delivery.limit == gateway for one in taken)
    assert all(one.holder is not None and one.holder.records == {"order": int(
        one.delivery.workflow.rsplit("-", 1)[1])} for one in taken)
    first = taken[0]
    assert first.holder is not None
    await durable.finish(first.holder, first.delivery)
    more = await durable.take_up_to(lambda: 5, LONG, LONG, LONG)
    assert len(more) == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_bad_priorities_and_limits_are_refused_before_anything_is_sent(
    make: Make, namespace: str, kind: Any
) -> None:
    scheduler = await make(kind)
    with pytest.raises(ValueError, match="priority"):
        await scheduler.make_ready(namespace, priority=101)
    with pytest.raises(TypeError, match="priority"):
        await scheduler.make_ready(namespace, priority=True)
    with pytest.raises(ValueError, match="at_most"):
        await scheduler.make_ready(namespace, limit=Limit("gw", 0))
    with pytest.raises(TypeError, match="Limit"):
        await scheduler.make_ready(namespace, limit="gw")
    assert await _took(scheduler) is None


@pytest.mark.parametrize("kind", KINDS)
async def test_priority_zero_keeps_the_keys_a_queue_had(
    make: Make, redis: Redis, namespace: str, kind: Any
) -> None:
    scheduler = await make(kind)
    await scheduler.make_ready(namespace)
    queue = scheduler.ready if kind is RedisStreamScheduler else scheduler.schedule
    names = {key async for key in redis.scan_iter(match=f"{{{namespace}}}:*")}
    assert queue in names
    assert not any(name.startswith(f"{queue}:") for name in names)  # no policy key written


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("kind", KINDS)
async def test_priorities_and_a_limit_on_a_cluster(
    redis_cluster: RedisCluster, kind: Any, shards: int
) -> None:
    namespace = f"policy-{uuid.uuid4().hex[:10]}"
    scheduler = kind(redis=redis_cluster, namespace=namespace, lease=LONG, shards=shards)
    await scheduler.prepare()
    ids = _same_shard(namespace, shards, 3)
    await scheduler.make_ready(ids[0])
    await scheduler.make_ready(ids[1], priority=3)
    # A limited wakeup sits on its limit key's shard: one on the ids' shard, for one order.
    gateway = Limit(_same_shard(f"{namespace}-gw", shards, 1)[0], 1)
    await scheduler.make_ready(ids[2], priority=9, limit=gateway)
    await scheduler.make_ready(f"{namespace}-x", priority=9, limit=gateway)
    first = await _took(scheduler)
    assert first is not None and first.limit == gateway and first.priority == 9
    rest = [await _took(scheduler), await _took(scheduler)]
    assert [(one.workflow if one else None) for one in rest] == [ids[1], ids[0]]
    assert await _took(scheduler) is None  # the other limited one waits for the slot
    await scheduler.done(first)
    second = await _took(scheduler, LONG)
    assert second is not None and second.limit == gateway and second != first


@pytest.mark.parametrize("shards", [1, 4])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_reader_alone_takes_a_rate_limited_wakeup_when_the_window_opens(
    make: Make, namespace: str, kind: Any, shards: int
) -> None:
    # No timer runs here: the reader's own wait ends when the window has room.
    scheduler = await make(kind, shards)
    rate = Limit(f"{namespace}-rate", 1, per=timedelta(seconds=1))
    for n in range(2):
        await scheduler.make_ready(f"{namespace}-{n}", limit=rate)
    first = await scheduler.next_ready(SHORT)
    assert first is not None
    second = await scheduler.next_ready(timedelta(seconds=4))
    assert second is not None and {first.workflow, second.workflow} == {
        f"{namespace}-0", f"{namespace}-1"
    }


@pytest.mark.parametrize("kind", KINDS)
async def test_a_joined_take_waits_for_a_slot_and_takes_it_when_freed(
    redis: Redis, namespace: str, kind: Any, durables: list[RedisDurable]
) -> None:
    scheduler = kind(redis=redis, namespace=namespace, lease=LONG)
    await scheduler.prepare()
    checkpointer = RedisCheckpointer(redis=redis, namespace=namespace, ttl=timedelta(minutes=5))
    durable = RedisDurable(checkpointer, scheduler)
    durables.append(durable)
    assert durable.joined
    gateway = Limit(f"{namespace}-gw", 1)
    await durable.arrive(f"{namespace}-a", "order", 1, limit=gateway)
    await durable.deliver(f"{namespace}-b", "hello", priority=3, limit=gateway)
    first = await durable.take(SHORT, LONG, LONG)
    assert first is not None and first.delivery.workflow == f"{namespace}-b"
    assert (first.delivery.priority, first.delivery.limit) == (3, gateway)
    waiting = asyncio.ensure_future(durable.take(timedelta(seconds=10), LONG, LONG))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    assert first.holder is not None
    await durable.finish(first.holder, first.delivery)
    second = await asyncio.wait_for(waiting, 10)
    assert second is not None and second.delivery.workflow == f"{namespace}-a"


@pytest.mark.parametrize("kind", KINDS)
async def test_cancelling_a_held_limited_workflow_frees_its_slot(
    make: Make, namespace: str, kind: Any
) -> None:
    scheduler = await make(kind)
    gateway = Limit(f"{namespace}-gw", 1)
    for name in ("a", "b"):
        await scheduler.make_ready(f"{namespace}-{name}", limit=gateway)
    held = await _took(scheduler)
    assert held is not None and await _took(scheduler) is None
    assert await scheduler.cancel(held.workflow) >= 1
    # The cancelled pass's answer: declined, but its slot is not left held for a lease.
    assert not await scheduler.wake_at(held, datetime.now(UTC) + timedelta(hours=1))
    other = await _took(scheduler, timedelta(seconds=3))
    assert other is not None and other.workflow != held.workflow


@pytest.mark.parametrize("kind", KINDS)
async def test_where_a_parked_wakeup_comes_back_when_its_slot_frees(
    make: Make, namespace: str, kind: Any
) -> None:
    """The set puts a parked wakeup back in its old place: ahead of a plain wakeup at its level
    that came while it waited. A stream cannot put an entry back in its old place, so there it
    comes back at the back of its level, behind that plain one; but it keeps the slot that
    freed for it, so a later wakeup of its own limit cannot take it (`stream_put_back`)."""
    scheduler = await make(kind)
    gateway = Limit(f"{namespace}-gw", 1)
    holder, waiting, plain, later = (f"{namespace}-{n}" for n in ("h", "w", "p", "l"))
    await scheduler.make_ready(holder, limit=gateway)
    held = await _took(scheduler)
    assert held is not None and held.workflow == holder
    await scheduler.make_ready(waiting, limit=gateway)
    assert await _took(scheduler) is None  # the limit is full: `waiting` is parked
    await scheduler.make_ready(plain)
    await scheduler.make_ready(later, limit=gateway)
    await scheduler.done(held)
    got = [await _took(scheduler) for _ in range(2)]
    order = [d.workflow for d in got if d is not None]
    assert order == ([waiting, plain] if kind is RedisSetScheduler else [plain, waiting])
    assert await _took(scheduler) is None  # `later` waits for the slot `waiting` holds
    for delivery in got:
        assert delivery is not None
        await scheduler.done(delivery)
    last = await _took(scheduler)
    assert last is not None and last.workflow == later


@pytest.mark.parametrize("kind", KINDS)
async def test_cancelling_a_wakeup_put_back_for_a_freed_slot_frees_the_slot(
    make: Make, namespace: str, kind: Any
) -> None:
    scheduler = await make(kind, lease=timedelta(seconds=30))
    gateway = Limit(f"{namespace}-gw", 1)
    holder, waiting, after = (f"{namespace}-{n}" for n in ("h", "w", "a"))
    await scheduler.make_ready(holder, limit=gateway)
    held = await _took(scheduler)
    assert held is not None
    await scheduler.make_ready(waiting, limit=gateway)
    assert await _took(scheduler) is None  # parked
    await scheduler.done(held)  # the slot frees for `waiting` (on the stream: held for it)
    assert await scheduler.cancel(waiting) >= 1
    await scheduler.make_ready(after, limit=gateway)
    # The slot is free again at once, not after a lease held for a wakeup that is gone.
    got = await _took(scheduler)
    assert got is not None and got.workflow == after
