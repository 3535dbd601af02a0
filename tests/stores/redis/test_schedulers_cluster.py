"""Both Redis schedulers over a local three-node Redis Cluster (`redis_cluster` in conftest).

Every key of one queue carries the namespace as its hash tag, so the Lua scripts that touch two
of them (the stream and its sleepers) run on one node; these tests prove it by running the
contract and the multi-key moves over `RedisCluster`.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio.cluster import RedisCluster

from durability.interfaces import Scheduler
from durability.redis.set_scheduler import RedisSetScheduler
from durability.redis.stream_scheduler import RedisStreamScheduler
from durability.testing.conformance import MakeScheduler, SchedulerContract

WAIT = timedelta(milliseconds=500)


@pytest.fixture
async def namespaces(redis_cluster: RedisCluster) -> AsyncIterator[list[str]]:
    """Namespaces handed out to this test; every key of each is deleted afterwards."""
    made: list[str] = []
    yield made
    for namespace in made:
        for name in ("ready", "sleeping", "schedule"):
            await redis_cluster.delete(f"{{{namespace}}}:{name}")


def _namespace(made: list[str]) -> str:
    namespace = f"cluster-{uuid.uuid4().hex[:12]}"
    made.append(namespace)
    return namespace


class TestRedisStreamOnCluster(SchedulerContract):
    @pytest.fixture
    def make_scheduler(self, redis_cluster: RedisCluster, namespaces: list[str]) -> MakeScheduler:
        async def make(lease: timedelta) -> Scheduler:
            scheduler = RedisStreamScheduler(
                redis=redis_cluster, namespace=_namespace(namespaces), lease=lease
            )
            await scheduler.prepare()
            return scheduler

        return make


class TestRedisSetOnCluster(SchedulerContract):
    @pytest.fixture
    def make_scheduler(self, redis_cluster: RedisCluster, namespaces: list[str]) -> MakeScheduler:
        async def make(lease: timedelta) -> Scheduler:
            scheduler = RedisSetScheduler(
                redis=redis_cluster,
                namespace=_namespace(namespaces),
                lease=lease,
                poll=timedelta(milliseconds=10),
            )
            await scheduler.prepare()
            return scheduler

        return make


async def test_a_queues_keys_share_one_slot(
    redis_cluster: RedisCluster, namespaces: list[str]
) -> None:
    scheduler = RedisStreamScheduler(redis=redis_cluster, namespace=_namespace(namespaces))
    slots = {redis_cluster.keyslot(scheduler.ready), redis_cluster.keyslot(scheduler.sleeping)}
    assert len(slots) == 1


async def test_stream_moves_cancel_and_trim_on_a_cluster(
    redis_cluster: RedisCluster, namespaces: list[str]
) -> None:
    scheduler = RedisStreamScheduler(redis=redis_cluster, namespace=_namespace(namespaces))
    await scheduler.prepare()
    now = datetime.now(UTC).replace(microsecond=0)
    await scheduler.make_ready("sleeper")
    await scheduler.make_ready("cancelled")
    sleeper = await scheduler.next_ready(WAIT)
    assert sleeper is not None and sleeper.workflow == "sleeper"
    assert await scheduler.wake_at(sleeper, now + timedelta(hours=1))
    await scheduler.done(sleeper)
    assert await scheduler.cancel("cancelled") == 1

    # wake_due moves the sleeper from the ZSET into the stream in one script on one node.
    assert await scheduler.wake_due(now + timedelta(hours=2)) is None
    woken = await scheduler.next_ready(WAIT)
    assert woken is not None and woken.workflow == "sleeper"
    await scheduler.done(woken)
    assert await scheduler.trim() >= 1  # the version is read from every node's INFO
    assert await redis_cluster.xlen(scheduler.ready) == 0


async def test_set_scheduler_mid_pass_wakeup_on_a_cluster(
    redis_cluster: RedisCluster, namespaces: list[str]
) -> None:
    scheduler = RedisSetScheduler(
        redis=redis_cluster, namespace=_namespace(namespaces), poll=timedelta(milliseconds=10)
    )
    await scheduler.make_ready("w")
    first = await scheduler.next_ready(WAIT)
    assert first is not None
    await scheduler.make_ready("w")
    await scheduler.done(first)
    again = await scheduler.next_ready(WAIT)
    assert again is not None and again.workflow == "w"
    assert await scheduler.cancel("w") == 1
    assert not await scheduler.wake_at(again, datetime.now(UTC))
