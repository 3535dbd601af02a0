"""Two applications on one Redis: every key a store writes lies under its namespace.

Two durables opened with different namespaces share one server and one workflow id here, and
must neither see nor fence each other; cleaning one namespace (by the SCAN patterns the store
names) must leave nothing of it and nothing of the other disturbed. `move_checkpoints` brings
keys written before namespaces under one; it scans the whole server, so it runs on a private
one (the shared server holds other test runs' keys).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from durability.connect import open_durable
from durability.interfaces import claimed
from durability.redis import (
    LuaEffect,
    RedisCheckpointer,
    RedisDurable,
    RedisSetScheduler,
    RedisStreamScheduler,
    move_checkpoints,
    patterns,
    workflow_keys,
    workflow_tag,
)

TTL = timedelta(minutes=10)
WAIT = timedelta(milliseconds=300)
BUDGET = timedelta(minutes=1)
ALIVE = timedelta(seconds=30)
SCHEDULERS = ["stream", "set"]


async def _durable(kind: str, client: Redis, namespace: str) -> RedisDurable:
    scheduler: RedisStreamScheduler | RedisSetScheduler
    if kind == "stream":
        scheduler = RedisStreamScheduler(redis=client, namespace=namespace)
    else:
        scheduler = RedisSetScheduler(redis=client, namespace=namespace)
    await scheduler.prepare()
    checkpointer = RedisCheckpointer(redis=client, namespace=namespace, ttl=TTL)
    return RedisDurable(checkpointer, scheduler)


async def _keys_of(client: Redis, namespace: str) -> set[str]:
    found: set[str] = set()
    for pattern in patterns(namespace):
        found.update([key async for key in client.scan_iter(match=pattern, count=1000)])
    return found


@pytest.fixture
async def two(redis: Redis, namespace: str) -> AsyncIterator[tuple[str, str]]:
    """Two namespaces of this test (both under its prefix, so the fixture cleans them)."""
    yield f"{namespace}-a", f"{namespace}-b"


def test_a_namespace_stays_outside_the_hash_tag() -> None:
    records, claim, order = workflow_keys("order-1", "shop")
    assert (records, claim, order) == (
        "shop:workflow:{order-1}",
        "shop:workflow:{order-1}:pass",
        "shop:workflow:{order-1}:order",
    )
    # The tag is the id alone: a workflow's keys share a slot whatever the namespace, and it is
    # the slot an effect key tagged with the id lands on.
    slots = {key_slot(k.encode()) for k in (records, claim, order, "stock:{order-1}")}
    assert slots == {key_slot(b"order-1")}
    assert patterns("shop") == ("{shop}:*", "{shop:[0-9]*}:*", "shop:workflow:{*")
    assert patterns("a*b") == ("{a\\*b}:*", "{a\\*b:[0-9]*}:*", "a\\*b:workflow:{*")
    with pytest.raises(ValueError, match="hash tag"):
        RedisCheckpointer(redis=Redis(), namespace="a{b}")


@pytest.mark.parametrize("kind", SCHEDULERS)
async def test_the_same_id_in_two_namespaces_is_two_workflows(
    redis: Redis, two: tuple[str, str], kind: str
) -> None:
    first, second = [await _durable(kind, redis, ns) for ns in two]
    workflow = f"{two[0]}-order"  # one id, used by both applications
    await first.arrive(workflow, "order", {"cents": 100})
    assert await second.checkpointer.load(workflow) == {}
    assert await second.take(WAIT, BUDGET, ALIVE) is None  # the wakeup is first's alone

    taken = await first.take(WAIT, BUDGET, ALIVE)
    assert taken is not None and taken.holder is not None
    assert taken.holder.records == {"order": {"cents": 100}}
    # second claims the same id while first holds it: no contention, no fence.
    theirs = await claimed(second.checkpointer, workflow, BUDGET, ALIVE)
    await second.checkpointer.record(theirs, "order", {"cents": 999})
    assert (await first.checkpointer.record(taken.holder, "paid", True)).first
    await first.finish(taken.holder, taken.delivery)

    assert await first.checkpointer.load(workflow) == {"order": {"cents": 100}, "paid": True}
    assert await second.checkpointer.load(workflow) == {"order": {"cents": 999}}
    assert await second.delete(workflow) == 1
    assert await first.checkpointer.load(workflow) == {"order": {"cents": 100}, "paid": True}


@pytest.mark.parametrize("kind", SCHEDULERS)
async def test_cleaning_a_namespace_leaves_nothing_of_it_and_the_other_untouched(
    redis: Redis, two: tuple[str, str], kind: str
) -> None:
    gone, kept = two
    leaving, staying = [await _durable(kind, redis, ns) for ns in two]
    for durable in (leaving, staying):
        for n in range(3):
            await durable.arrive(f"{gone}-w{n}", "order", n)
        await durable.deliver(f"{gone}-w0", "hello")
        taken = await durable.take(WAIT, BUDGET, ALIVE)
        assert taken is not None and taken.holder is not None
        await durable.checkpointer.record(taken.holder, "step", "done")
        await durable.finish(taken.holder, taken.delivery)
    before = await _keys_of(redis, kept)

    doomed = await _keys_of(redis, gone)
    assert any(":workflow:{" in key for key in doomed)  # checkpoints are found by the patterns
    assert any(key.startswith(f"{{{gone}}}:") for key in doomed)  # and so is the queue
    await redis.delete(*doomed)

    assert await _keys_of(redis, gone) == set()
    # Nothing of it is left under any name: what still names its ids is the other's.
    everything = {key async for key in redis.scan_iter(match=f"*{gone}*", count=1000)}
    assert everything <= before
    assert await _keys_of(redis, kept) == before
    assert await staying.checkpointer.load(f"{gone}-w1") == {"order": 1}
    assert len(await staying.checkpointer.load(f"{gone}-w0")) == 3  # order, inbox, step
    assert await leaving.checkpointer.load(f"{gone}-w1") == {}
    assert await staying.take(WAIT, BUDGET, ALIVE) is not None  # its queue is as it was


async def test_open_durable_puts_checkpoints_under_the_url_namespace(
    redis: Redis, namespace: str
) -> None:
    url = f"redis://127.0.0.1:6379/0?scheduler=set&namespace={namespace}"
    workflow = f"{namespace}-w"
    async with open_durable(url) as durable:
        await durable.arrive(workflow, "order", 1)
    assert await redis.hgetall(f"{namespace}:workflow:{{{workflow}}}") == {"order": "1"}
    assert await redis.exists(f"workflow:{{{workflow}}}") == 0
    assert await redis.exists(f"durability:workflow:{{{workflow}}}") == 0


async def test_namespaced_keys_keep_one_slot_per_workflow_on_a_cluster(
    redis_cluster: RedisCluster, fresh_id: str
) -> None:
    store = RedisCheckpointer(redis=redis_cluster, namespace=f"{fresh_id}-ns", ttl=TTL)
    other = RedisCheckpointer(redis=redis_cluster, namespace=f"{fresh_id}-other", ttl=TTL)
    nodes: set[str] = set()
    incr = "return redis.call('INCRBY', KEYS[1], ARGV[1])"
    for n in range(12):
        workflow = f"{fresh_id}-{n}"
        holder = await claimed(store, workflow)
        # An effect key tagged with the id alone lies on the namespaced workflow's slot.
        counter = f"stock:{workflow_tag(workflow)}"
        done = await store.transact(holder, "reserved", LuaEffect(incr, [counter], [n + 1]))
        assert done.value == n + 1
        assert await other.load(workflow) == {}
        assert {key_slot(k.encode()) for k in store.keys(workflow)} == {
            key_slot(counter.encode())
        }
        node = redis_cluster.get_node_from_key(store.keys(workflow)[0])
        assert node is not None
        nodes.add(node.name)
        await redis_cluster.delete(counter, *store.keys(workflow))
    assert len(nodes) > 1, "12 workflows should not all land on one node of three"


async def test_move_checkpoints_brings_legacy_keys_under_the_namespace(
    spawn_redis: Callable[..., int], private_client: Callable[[int], Redis]
) -> None:
    client = private_client(spawn_redis())
    try:
        legacy = RedisCheckpointer(redis=client, namespace="staging", ttl=TTL)
        for workflow in ("a", "b"):
            holder = await claimed(legacy, workflow)
            await legacy.record(holder, "charged", workflow.upper())
            await legacy.release(holder)
            # What a checkpointer before namespaces wrote: the same keys without the prefix.
            for key in legacy.keys(workflow):
                await client.rename(key, key.removeprefix("staging:"))
        token = int(await client.hget("workflow:{a}:pass", "token") or 0)
        # "b" was already written again under the namespace: it is left for a person to merge.
        fresh = RedisCheckpointer(redis=client, namespace="shop", ttl=TTL)
        await fresh.supply("b", "order", "new")
        await client.set("workflow:{c}:note", "not ours")  # a lookalike key stays put

        moved = await move_checkpoints(client, "shop")

        assert (moved.workflows, moved.conflicts) == (1, ("b",))
        assert await fresh.load("a") == {"charged": "A"}
        assert await client.pttl("shop:workflow:{a}") > 0  # the expiry came along
        assert int(await client.hget("shop:workflow:{a}:pass", "token") or 0) == token
        assert await client.exists("workflow:{a}", "workflow:{a}:pass", "workflow:{a}:order") == 0
        assert await client.exists("workflow:{b}", "workflow:{c}:note") == 2
        assert await fresh.load("b") == {"order": "new"}
        again = await move_checkpoints(client, "shop")
        assert (again.workflows, again.conflicts) == (0, ("b",))
    finally:
        await client.aclose()


async def test_move_checkpoints_works_on_a_cluster(
    redis_cluster: RedisCluster, fresh_id: str
) -> None:
    namespace = f"{fresh_id}-moved"
    store = RedisCheckpointer(redis=redis_cluster, namespace=namespace, ttl=TTL)
    ids = [f"{fresh_id}-{uuid.uuid4().hex[:6]}" for _ in range(6)]
    for workflow in ids:
        await store.supply(workflow, "order", workflow)
        for key in store.keys(workflow):
            if await redis_cluster.exists(key):
                await redis_cluster.rename(key, key.removeprefix(f"{namespace}:"))
    moved = await move_checkpoints(redis_cluster, namespace)
    # Other runs' legacy keys on this cluster (if any) move too; ours all did.
    assert moved.workflows >= len(ids)
    for workflow in ids:
        assert await store.load(workflow) == {"order": workflow}
        await redis_cluster.delete(*store.keys(workflow))
