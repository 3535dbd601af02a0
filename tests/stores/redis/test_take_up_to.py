"""`RedisDurable.take_up_to`: a worker with k free slots takes and claims up to k workflows at
once, on one node (one script), sharded, and on the local cluster (the looks in one turn, then
the claims), and waits for one when none is there."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from durability.connect import open_durable
from durability.interfaces import TakingMany
from durability.redis import (
    RedisCheckpointer,
    RedisDurable,
    RedisSetScheduler,
    RedisStreamScheduler,
)

LEASE = timedelta(seconds=30)
KINDS = [RedisStreamScheduler, RedisSetScheduler]


async def _durable(kind: Any, client: Any, namespace: str, shards: int) -> RedisDurable:
    scheduler = kind(redis=client, namespace=namespace, lease=LEASE, shards=shards)
    await scheduler.prepare()
    checkpointer = RedisCheckpointer(
        redis=client, namespace=namespace, ttl=timedelta(minutes=10), shards=shards
    )
    return RedisDurable(checkpointer, scheduler)


async def _takes_up_to_room(durable: RedisDurable, prefix: str) -> None:
    assert isinstance(durable, TakingMany)
    ids = [f"{prefix}-{n}" for n in range(7)]
    for workflow in ids:
        await durable.arrive(workflow, "order", 1)
    taken: list[Any] = []
    sizes = []
    while len(taken) < len(ids):
        batch = await durable.take_up_to(lambda: 5, timedelta(seconds=1), LEASE, LEASE)
        assert 1 <= len(batch) <= 5
        sizes.append(len(batch))
        taken += batch
    # A read fills every free slot at once (after an idle read, one that looks apart from a
    # joined script may take one first).
    assert max(sizes) == 5
    assert sorted(one.delivery.workflow for one in taken) == sorted(ids)
    assert all(one.holder is not None and one.holder.records == {"order": 1} for one in taken)
    for one in taken:
        assert one.holder is not None
        await durable.finish(one.holder, one.delivery)
    # Nothing there: it waits for one, and takes it when it comes.
    waiting = asyncio.ensure_future(
        durable.take_up_to(lambda: 5, timedelta(seconds=10), LEASE, LEASE)
    )
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await durable.arrive(f"{prefix}-late", "order", 2)
    late = await asyncio.wait_for(waiting, 10)
    assert [one.delivery.workflow for one in late] == [f"{prefix}-late"]
    assert await durable.take_up_to(lambda: 5, timedelta(milliseconds=5), LEASE, LEASE) == []


@pytest.mark.parametrize("shards", [1, 4])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_worker_takes_as_many_as_it_has_room_for(
    redis: Redis, namespace: str, kind: Any, shards: int
) -> None:
    durable = await _durable(kind, redis, namespace, shards)
    try:
        await _takes_up_to_room(durable, namespace)
    finally:
        await durable.close()


async def test_one_node_takes_many_in_one_round_trip(namespace: str) -> None:
    url = f"redis://127.0.0.1:6379/0?namespace={namespace}"
    async with open_durable(url) as durable:
        assert isinstance(durable, RedisDurable)
        for n in range(6):
            await durable.arrive(f"{namespace}-{n}", "order", n)
        before = durable.traffic.snapshot()
        taken = await durable.take_up_to(lambda: 6, timedelta(seconds=1), LEASE, LEASE)
        sent = durable.traffic.snapshot() - before
        assert len(taken) == 6
        assert (sent.total, sent.round_trips) == (1, 1)
        for one in taken:
            assert one.holder is not None
            await durable.finish(one.holder, one.delivery)


@pytest.mark.parametrize("shards", [1, 4])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_worker_on_a_cluster_takes_as_many_as_it_has_room_for(
    redis_cluster: RedisCluster, kind: Any, shards: int
) -> None:
    namespace = f"many-{uuid.uuid4().hex[:10]}"
    durable = await _durable(kind, redis_cluster, namespace, shards)
    try:
        await _takes_up_to_room(durable, namespace)
    finally:
        await durable.close()
