"""Sharded Redis queues (`shards=N`): the contracts at four shards on one node and on the local
cluster, and what is specific to shards: where keys land, fair reads, the count a namespace
remembers, listings across shards, and the bad counts refused."""

from __future__ import annotations

import uuid
import zlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from durability.connect import open_durable
from durability.interfaces import Durable, Scheduler
from durability.redis import (
    RedisCheckpointer,
    RedisDurable,
    RedisSetScheduler,
    RedisStreamScheduler,
)
from durability.redis.sharded import ShardedSetScheduler, ShardedStreamScheduler
from durability.redis.shards import MOST_SHARDS, shard_of
from durability.testing.conformance import (
    DurableContract,
    MakeDurables,
    MakeScheduler,
    PolicyContract,
    SchedulerContract,
)
from durability.values import Delivery, Limit, Pass

SHARDS = 4
TTL = timedelta(minutes=10)
Kind = type[RedisStreamScheduler] | type[RedisSetScheduler]


def _scheduler(kind: Kind, client: Any, namespace: str, lease: timedelta) -> Any:
    if kind is RedisSetScheduler:
        return RedisSetScheduler(
            redis=client, namespace=namespace, lease=lease, poll=timedelta(milliseconds=10),
            shards=SHARDS,
        )
    return RedisStreamScheduler(redis=client, namespace=namespace, lease=lease, shards=SHARDS)


def _maker(kind: Kind, client: Any, namespace: str) -> MakeScheduler:
    made = 0

    async def make(lease: timedelta) -> Scheduler:
        nonlocal made
        made += 1  # a namespace of its own per scheduler; the fixtures delete its keys
        scheduler = _scheduler(kind, client, f"{namespace}-{made}", lease)
        await scheduler.prepare()
        return scheduler  # type: ignore[no-any-return]

    return make


async def _durable(kind: Kind, client: Any, namespace: str) -> RedisDurable:
    scheduler = _scheduler(kind, client, namespace, timedelta(seconds=5))
    await scheduler.prepare()
    checkpointer = RedisCheckpointer(redis=client, namespace=namespace, ttl=TTL, shards=SHARDS)
    return RedisDurable(checkpointer, scheduler)


@pytest.fixture
async def cluster_namespace(redis_cluster: RedisCluster) -> AsyncIterator[str]:
    """A namespace of this test's own on the cluster; its keys are deleted after."""
    namespace = f"shards-{uuid.uuid4().hex[:12]}"
    yield namespace
    for node in redis_cluster.get_primaries():
        keys = [
            key async for key in redis_cluster.scan_iter(
                match=f"*{namespace}*", count=1000, target_nodes=node
            )
        ]
        for key in keys:
            await redis_cluster.delete(key)


# --- the contracts at four shards --------------------------------------------------------


class TestShardedStream(SchedulerContract):
    @pytest.fixture
    def make_scheduler(self, redis: Redis, namespace: str) -> MakeScheduler:
        return _maker(RedisStreamScheduler, redis, namespace)


class TestShardedSet(SchedulerContract):
    @pytest.fixture
    def make_scheduler(self, redis: Redis, namespace: str) -> MakeScheduler:
        return _maker(RedisSetScheduler, redis, namespace)


class TestShardedStreamOnACluster(SchedulerContract):
    @pytest.fixture
    def make_scheduler(self, redis_cluster: RedisCluster, cluster_namespace: str) -> MakeScheduler:
        return _maker(RedisStreamScheduler, redis_cluster, cluster_namespace)


class TestShardedSetOnACluster(SchedulerContract):
    @pytest.fixture
    def make_scheduler(self, redis_cluster: RedisCluster, cluster_namespace: str) -> MakeScheduler:
        return _maker(RedisSetScheduler, redis_cluster, cluster_namespace)


def _policy_maker(kind: Kind, clients: list[Any], namespace: str) -> MakeDurables:
    """`count` sharded durables over a fresh namespace, on the clients given in turn."""
    made = 0

    async def make(lease: timedelta, count: int) -> list[Durable]:
        nonlocal made
        made += 1
        queue = f"{namespace}-{made}"
        durables: list[Durable] = []
        for n in range(count):
            client = clients[n % len(clients)]
            scheduler = _scheduler(kind, client, queue, lease)
            await scheduler.prepare()
            checkpointer = RedisCheckpointer(redis=client, namespace=queue, ttl=TTL, shards=SHARDS)
            durables.append(RedisDurable(checkpointer, scheduler))
        return durables

    return make


@pytest.fixture
async def clients() -> AsyncIterator[list[Redis]]:
    """Four clients of the shared server: four workers' connections."""
    made = [Redis(host="127.0.0.1", port=6379, decode_responses=True) for _ in range(4)]
    yield made
    for client in made:
        await client.aclose()


def _offline(kind: Kind) -> Durable:
    # A port nothing listens on, tried once: anything sent would fail at once.
    nowhere = Redis(host="127.0.0.1", port=1, decode_responses=True, retry=Retry(NoBackoff(), 0))
    scheduler = _scheduler(kind, nowhere, "offline", timedelta(seconds=5))
    return RedisDurable(RedisCheckpointer(redis=nowhere, shards=SHARDS), scheduler)


class TestShardedStreamPolicies(PolicyContract):
    ordered = False  # each shard in priority order; the shards read in turn

    @pytest.fixture
    def make_durables(self, clients: list[Redis], namespace: str) -> MakeDurables:
        return _policy_maker(RedisStreamScheduler, clients, namespace)

    @pytest.fixture
    def offline(self) -> Durable:
        return _offline(RedisStreamScheduler)


class TestShardedSetPolicies(PolicyContract):
    ordered = False  # each shard in priority order; the shards read in turn

    @pytest.fixture
    def make_durables(self, clients: list[Redis], namespace: str) -> MakeDurables:
        return _policy_maker(RedisSetScheduler, clients, namespace)

    @pytest.fixture
    def offline(self) -> Durable:
        return _offline(RedisSetScheduler)


class TestShardedStreamPoliciesOnACluster(PolicyContract):
    ordered = False  # each shard in priority order; the shards read in turn

    @pytest.fixture
    def make_durables(
        self, redis_cluster: RedisCluster, cluster_namespace: str
    ) -> MakeDurables:
        return _policy_maker(RedisStreamScheduler, [redis_cluster], cluster_namespace)

    @pytest.fixture
    def offline(self) -> Durable:
        return _offline(RedisStreamScheduler)


class TestShardedDurableOnTheStream(DurableContract):
    @pytest.fixture
    async def durable(self, redis: Redis, namespace: str) -> Durable:
        made = await _durable(RedisStreamScheduler, redis, namespace)
        assert made.joined
        return made


class TestShardedDurableOnTheSet(DurableContract):
    @pytest.fixture
    async def durable(self, redis: Redis, namespace: str) -> Durable:
        return await _durable(RedisSetScheduler, redis, namespace)


class TestShardedDurableOnACluster(DurableContract):
    @pytest.fixture
    async def durable(self, redis_cluster: RedisCluster, cluster_namespace: str) -> Durable:
        return await _durable(RedisStreamScheduler, redis_cluster, cluster_namespace)


class TestShardedSetDurableOnACluster(DurableContract):
    @pytest.fixture
    async def durable(self, redis_cluster: RedisCluster, cluster_namespace: str) -> Durable:
        return await _durable(RedisSetScheduler, redis_cluster, cluster_namespace)


# --- what is specific to shards ------------------------------------------------------------


def test_one_shard_keeps_the_layout_key_for_key(redis: Redis) -> None:
    stream = RedisStreamScheduler(redis=redis, namespace="shop")
    assert type(stream) is RedisStreamScheduler
    assert (stream.ready, stream.sleeping, stream.marker.key) == (
        "{shop}:ready", "{shop}:sleeping", "{shop}:marker"
    )
    queue = RedisSetScheduler(redis=redis, namespace="shop")
    assert (queue.schedule, queue.doorbell) == ("{shop}:schedule", "{shop}:doorbell")
    assert RedisCheckpointer(redis=redis, namespace="shop").calls.standing_keys("w")[0] == (
        "{shop}:standings"
    )


def test_each_shard_has_a_tag_of_its_own_and_a_workflow_one_shard(redis: Redis) -> None:
    stream = RedisStreamScheduler(redis=redis, namespace="shop", shards=SHARDS)
    assert isinstance(stream, ShardedStreamScheduler)
    assert [part.ready for part in stream.parts] == [f"{{shop:{i}}}:ready" for i in range(4)]
    queue = RedisSetScheduler(redis=redis, namespace="shop", shards=SHARDS)
    assert isinstance(queue, ShardedSetScheduler)
    assert [part.schedule for part in queue.parts] == [
        f"{{shop:{i}}}:schedule" for i in range(4)
    ]
    # The stated hash: CRC-32 of the UTF-8 id, modulo the count.
    for workflow in ("order-1", "order-2", "ünïcode"):
        index = zlib.crc32(workflow.encode()) % SHARDS
        assert shard_of(workflow, SHARDS) == index
        assert stream.part(workflow) is stream.parts[index]
        assert stream.wakeup_call(workflow).keys == (f"{{shop:{index}}}:ready",)
        ledger = RedisCheckpointer(redis=redis, namespace="shop", shards=SHARDS)
        assert ledger.calls.standing_keys(workflow)[0] == f"{{shop:{index}}}:standings"


@pytest.mark.parametrize("bad", [0, -1, MOST_SHARDS + 1])
def test_a_count_out_of_range_is_refused(redis: Redis, bad: int) -> None:
    with pytest.raises(ValueError, match=f"shards must be 1 to {MOST_SHARDS}, got {bad}"):
        RedisStreamScheduler(redis=redis, shards=bad)
    with pytest.raises(ValueError, match="shards must be 1 to"):
        RedisSetScheduler(redis=redis, shards=bad)
    with pytest.raises(ValueError, match="shards must be 1 to"):
        RedisCheckpointer(redis=redis, shards=bad)


@pytest.mark.parametrize("bad", ["4", 2.0, True, None])
def test_a_count_that_is_not_an_int_is_refused(redis: Redis, bad: object) -> None:
    with pytest.raises(TypeError, match="shards must be an int"):
        RedisStreamScheduler(redis=redis, shards=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="shards must be an int"):
        RedisCheckpointer(redis=redis, shards=bad)  # type: ignore[arg-type]


def test_a_checkpointer_and_a_queue_split_differently_are_refused(redis: Redis) -> None:
    with pytest.raises(ValueError, match="shards=4 and the scheduler shards=1"):
        RedisDurable(
            RedisCheckpointer(redis=redis, shards=4), RedisStreamScheduler(redis=redis)
        )


@pytest.mark.parametrize(
    "option", ["shards=0", "shards=257", "shards=four", "shards=2.5", "shards=", "shards=-1"]
)
async def test_a_bad_shards_option_in_a_url_is_refused(option: str) -> None:
    with pytest.raises(ValueError, match="shards must be a whole number from 1 to 256"):
        async with open_durable(f"redis://127.0.0.1:6379/0?{option}"):
            pass


async def test_shards_on_a_store_that_has_none_is_refused(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="shards"):
        async with open_durable(f"sqlite:///{tmp_path}/db.sqlite?shards=4"):
            pass


async def test_a_namespace_opened_with_another_count_is_refused(
    redis: Redis, namespace: str
) -> None:
    made = RedisStreamScheduler(redis=redis, namespace=namespace, shards=SHARDS)
    await made.prepare()
    await made.prepare()  # the same count again is fine
    for kind in (RedisStreamScheduler, RedisSetScheduler):
        other = kind(redis=redis, namespace=namespace)
        with pytest.raises(ValueError, match=r"was made with shards=4.*opened with shards=1"):
            await other.prepare()
    with pytest.raises(ValueError, match=r"was made with shards=4.*opened with shards=8"):
        await RedisSetScheduler(redis=redis, namespace=namespace, shards=8).prepare()


async def test_a_queue_made_before_shards_counts_as_one_shard(
    redis: Redis, namespace: str
) -> None:
    await redis.xadd(f"{{{namespace}}}:ready", {"workflow": "old"})  # a queue of an old release
    with pytest.raises(ValueError, match=r"was made with shards=1.*opened with shards=4"):
        await RedisStreamScheduler(redis=redis, namespace=namespace, shards=SHARDS).prepare()
    old = RedisStreamScheduler(redis=redis, namespace=namespace)
    await old.prepare()
    delivered = await old.next_ready(timedelta(milliseconds=100))
    assert delivered is not None and delivered.workflow == "old"


def _in_shard(shard: int, count: int, tag: str) -> list[str]:
    found = []
    n = 0
    while len(found) < count:
        workflow = f"{tag}-{n}"
        if shard_of(workflow, SHARDS) == shard:
            found.append(workflow)
        n += 1
    return found


@pytest.mark.parametrize("kind", [RedisStreamScheduler, RedisSetScheduler])
async def test_a_busy_shard_does_not_starve_another(
    redis: Redis, namespace: str, kind: Kind
) -> None:
    scheduler = _scheduler(kind, redis, namespace, timedelta(seconds=30))
    await scheduler.prepare()
    busy = _in_shard(0, 40, "busy")
    for workflow in busy:
        await scheduler.make_ready(workflow)
    quiet = _in_shard(3, 1, "quiet")[0]
    await scheduler.make_ready(quiet)
    taken = []
    for _ in range(SHARDS):
        delivery = await scheduler.next_ready(timedelta(milliseconds=100))
        assert delivery is not None
        taken.append(delivery.workflow)
    # Forty wakeups wait in shard 0; the one in shard 3 is still taken within a rotation.
    assert quiet in taken


@pytest.mark.parametrize("kind", [RedisStreamScheduler, RedisSetScheduler])
async def test_an_idle_reader_wakes_for_any_shard(
    redis: Redis, namespace: str, kind: Kind
) -> None:
    import asyncio

    scheduler = _scheduler(kind, redis, namespace, timedelta(seconds=30))
    await scheduler.prepare()
    other = _scheduler(kind, redis, namespace, timedelta(seconds=30))
    for shard in range(SHARDS):
        workflow = _in_shard(shard, 1, f"late-{shard}")[0]
        reading = asyncio.ensure_future(scheduler.next_ready(timedelta(seconds=20)))
        await asyncio.sleep(0.3)  # the reader has looked and is waiting
        assert not reading.done()
        await other.make_ready(workflow)
        delivery = await asyncio.wait_for(reading, 10)
        assert delivery is not None and delivery.workflow == workflow
        await scheduler.done(delivery)


@pytest.mark.parametrize("kind", [RedisStreamScheduler, RedisSetScheduler])
async def test_idle_readers_on_a_cluster_lose_no_wakeup_that_comes_to_two_shards_at_once(
    redis_cluster: RedisCluster, cluster_namespace: str, kind: Kind
) -> None:
    """On a cluster an idle reader waits on every shard with a read each; when wakeups come to
    several shards at once, what every read brought is handed out, none left pending unseen
    until a lease lapses (the lease here outlasts the test)."""
    import asyncio

    lease = timedelta(minutes=10)
    readers = [_scheduler(kind, redis_cluster, cluster_namespace, lease) for _ in range(3)]
    for reader in readers:
        await reader.prepare()
    rounds = 40
    waves = [[_in_shard(s, rounds, f"wave-{s}")[n] for s in range(SHARDS)] for n in range(rounds)]
    taken: list[str] = []

    async def read(reader: Scheduler) -> None:
        while True:
            delivery = await reader.next_ready(timedelta(seconds=1))
            if delivery is not None:
                taken.append(delivery.workflow)
                await reader.done(delivery)

    reading = [asyncio.ensure_future(read(reader)) for reader in readers]
    try:
        for wave in waves:
            await asyncio.sleep(0.02)  # the readers are waiting again
            await asyncio.gather(*(readers[0].make_ready(workflow) for workflow in wave))
        for _ in range(300):  # 30 s at most
            if len(taken) >= rounds * SHARDS:
                break
            await asyncio.sleep(0.1)
    finally:
        for task in reading:
            task.cancel()
        await asyncio.gather(*reading, return_exceptions=True)
        for reader in readers:
            await reader.close()
    assert sorted(taken) == sorted(workflow for wave in waves for workflow in wave)


async def test_a_listing_pages_across_shards_in_id_order(redis: Redis, namespace: str) -> None:
    checkpointer = RedisCheckpointer(redis=redis, namespace=namespace, ttl=TTL, shards=SHARDS)
    ids = [f"{namespace}-{n:02}" for n in range(23)]
    assert len({shard_of(workflow, SHARDS) for workflow in ids}) == SHARDS
    for workflow in ids:
        holder = await checkpointer.claim(workflow, timedelta(seconds=30), timedelta(seconds=30))
        assert isinstance(holder, Pass)
        assert await checkpointer.settle(holder, "completed", {})
        await checkpointer.release(holder)
    seen: list[str] = []
    after = None
    while True:
        page = await checkpointer.standings(None, None, 5, after)
        if not page:
            break
        seen += [one.workflow for one in page]
        after = page[-1].workflow
    assert seen == ids
    assert await checkpointer.tally() == {"completed": 23}
    completed = await checkpointer.standings("completed", f"{namespace}-1", 50, None)
    assert [one.workflow for one in completed] == ids[10:20]
    # A sweep walks every shard's hash once a round.
    rounds = 0
    for _ in range(100):
        _, round_ = await checkpointer.sweep(count=500)
        rounds += round_
        if round_:
            break
    assert rounds == 1


async def test_shards_spread_over_the_cluster_s_nodes(redis_cluster: RedisCluster) -> None:
    scheduler = RedisStreamScheduler(redis=redis_cluster, namespace="spread", shards=16)
    assert isinstance(scheduler, ShardedStreamScheduler)
    nodes = {redis_cluster.get_node_from_key(part.ready).name for part in scheduler.parts}
    assert len(nodes) > 1


async def test_a_url_opens_a_sharded_store(redis: Redis, namespace: str) -> None:
    url = f"redis://127.0.0.1:6379/0?namespace={namespace}&shards=4&scheduler=set"
    async with open_durable(url) as durable:
        assert isinstance(durable, RedisDurable)
        await durable.arrive(f"{namespace}-w", "order", 1)
        lease = timedelta(seconds=30)
        taken = await durable.take(timedelta(seconds=1), lease, lease)
        assert taken is not None and taken.delivery.workflow == f"{namespace}-w"
        await durable.finish(taken.holder, taken.delivery)
    assert await redis.get(f"{{{namespace}}}:shards") == "4"


def _apart(label: str) -> tuple[str, str]:
    """A workflow id and a limit key that land on two different shards."""
    while True:
        workflow, key = f"{label}-{uuid.uuid4().hex[:8]}", f"limit-{uuid.uuid4().hex[:8]}"
        if shard_of(workflow, SHARDS) != shard_of(key, SHARDS):
            return workflow, key


async def _all_taken(durable: RedisDurable) -> list[Delivery]:
    """Every workflow the durable takes until none is left, each finished as it comes."""
    got = []
    lease = timedelta(seconds=30)
    while (taken := await durable.take(timedelta(milliseconds=300), lease, lease)) is not None:
        got.append(taken.delivery)
        assert taken.holder is not None
        await durable.finish(taken.holder, taken.delivery)
    return got


@pytest.mark.parametrize("move", ["arrive", "deliver"])
@pytest.mark.parametrize("priority", [0, 4])
@pytest.mark.parametrize("kind", [RedisStreamScheduler, RedisSetScheduler])
async def test_a_joined_limited_move_merges_across_shards_as_make_ready_does(
    redis: Redis, namespace: str, kind: Kind, priority: int, move: str
) -> None:
    durable = await _durable(kind, redis, namespace)
    assert durable.joined  # one script: the write and the wakeup
    workflow, key = _apart("merged")
    limit = Limit(key, 3)
    await durable.scheduler.make_ready(workflow, priority=priority)  # on its own shard
    if move == "arrive":
        await durable.arrive(workflow, "order", 1, limit=limit)  # on the limit's shard
    else:
        await durable.deliver(workflow, "hello", limit=limit)
    got = await _all_taken(durable)
    # One wakeup, not one per shard: the limit's, at the higher priority of the two.
    assert [(d.workflow, d.priority, d.limit) for d in got] == [(workflow, priority, limit)]


@pytest.mark.parametrize("kind", [RedisStreamScheduler, RedisSetScheduler])
async def test_a_joined_limited_move_merges_into_a_wakeup_under_another_limit(
    redis: Redis, namespace: str, kind: Kind
) -> None:
    durable = await _durable(kind, redis, namespace)
    workflow, first = _apart("kept")
    where = shard_of(first, SHARDS)
    second = next(f"other-{n}" for n in range(1000) if shard_of(f"other-{n}", SHARDS) != where)
    await durable.scheduler.make_ready(workflow, limit=Limit(first, 2))
    await durable.arrive(workflow, "order", 1, priority=6, limit=Limit(second, 2))
    got = await _all_taken(durable)
    # Merged into the waiting one, which keeps its limit; the priority is the higher.
    assert [(d.workflow, d.priority, d.limit) for d in got] == [(workflow, 6, Limit(first, 2))]


async def test_a_plain_wakeup_behind_a_long_stream_is_still_withdrawn(
    redis: Redis, namespace: str
) -> None:
    scheduler = _scheduler(RedisStreamScheduler, redis, namespace, timedelta(seconds=30))
    await scheduler.prepare()
    workflow, key = _apart("late")
    home = shard_of(workflow, SHARDS)
    # 150 limited wakeups wait in front of it on its own shard (their limit key's shard).
    crowd = next(f"crowd-{n}" for n in range(1000) if shard_of(f"crowd-{n}", SHARDS) == home)
    ahead = Limit(crowd, 1000)
    for n in range(150):
        await scheduler.make_ready(f"{namespace}-ahead-{n}", limit=ahead)
    await scheduler.make_ready(workflow)  # plain, behind them
    await scheduler.make_ready(workflow, limit=Limit(key, 2))  # limited, on another shard
    seen = []
    while (delivery := await scheduler.next_ready(timedelta(milliseconds=300))) is not None:
        seen.append(delivery)
        await scheduler.done(delivery)
    mine = [(d.workflow, d.limit) for d in seen if d.workflow == workflow]
    assert mine == [(workflow, Limit(key, 2))], f"taken {len(mine)} times: {mine}"
    assert len(seen) == 151
    index = f"{{{namespace}:{home}}}:ready:plain"
    assert await redis.hlen(index) == 0  # withdrawn: its index entry went with it
    # A second plain wakeup merges into the one waiting; the answer drops its index entry.
    other = _in_shard(home, 1, f"{namespace}-plain")[0]
    await scheduler.make_ready(other)
    await scheduler.make_ready(other)
    assert await redis.hlen(index) == 1
    delivery = await scheduler.next_ready(timedelta(seconds=2))
    assert delivery is not None and delivery.workflow == other
    assert await scheduler.next_ready(timedelta(milliseconds=300)) is None
    await scheduler.done(delivery)
    assert await redis.hlen(index) == 0
