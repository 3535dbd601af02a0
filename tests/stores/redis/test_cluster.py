"""`RedisCheckpointer` over a local three-node Redis Cluster (`redis.asyncio.cluster`).

The whole conformance contract runs here too, so every script is shown to touch only its own
workflow's slot. The cluster-only questions: do a workflow's keys land together while
workflows spread over nodes, is an effect reaching another slot refused before anything is
written, and does a flushed script cache on every node recover."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from durability.interfaces import claimed
from durability.redis import LuaEffect, RedisCheckpointer, workflow_keys, workflow_tag
from durability.testing.conformance import CheckpointerContract, EffectKit

INCR = "return redis.call('INCRBY', KEYS[1], ARGV[1])"


@pytest.fixture
def store(redis_cluster: RedisCluster) -> RedisCheckpointer:
    return RedisCheckpointer(redis=redis_cluster, ttl=timedelta(minutes=10))


class TestRedisCheckpointerOnACluster(CheckpointerContract):
    @pytest.fixture
    def checkpointer(self, store: RedisCheckpointer) -> RedisCheckpointer:
        return store

    @pytest.fixture
    def effect_kit(
        self, redis_cluster: RedisCluster, lua_counter: Callable[[RedisCluster], EffectKit]
    ) -> EffectKit:
        return lua_counter(redis_cluster)


async def test_a_workflow_s_keys_share_a_node_and_workflows_spread(
    store: RedisCheckpointer, redis_cluster: RedisCluster, fresh_id: str
) -> None:
    owners: set[str] = set()
    for n in range(24):
        workflow = f"{fresh_id}-{n}"
        holder = await claimed(store, workflow)
        await store.record(holder, "step", n)
        await store.append(workflow, "note")
        slots = {key_slot(key.encode()) for key in workflow_keys(workflow)}
        assert len(slots) == 1
        node = redis_cluster.get_node_from_key(workflow_keys(workflow)[0])
        assert node is not None
        owners.add(node.name)
        assert await store.load(workflow) == {"step": n, "inbox:00000000000000000001": "note"}
        await store.discard(workflow)
    assert len(owners) > 1, "24 workflows should not all hash to one node of three"


async def test_an_effect_reaching_another_slot_is_refused_and_writes_nothing(
    store: RedisCheckpointer, redis_cluster: RedisCluster, fresh_id: str
) -> None:
    workflow = f"{fresh_id}-here"
    elsewhere = f"stock:{workflow_tag(fresh_id + '-there')}"
    assert key_slot(elsewhere.encode()) != key_slot(workflow_keys(workflow)[0].encode())
    holder = await claimed(store, workflow)
    mine = f"stock:{workflow_tag(workflow)}"
    with pytest.raises(ValueError, match="hash tag"):
        await store.transact(holder, "reserved", LuaEffect(INCR, [mine, elsewhere], [1]))
    assert await redis_cluster.exists(mine) == 0
    assert await redis_cluster.exists(elsewhere) == 0
    assert await store.load(workflow) == {}
    # The same effect confined to the workflow's slot goes through.
    done = await store.transact(holder, "reserved", LuaEffect(INCR, [mine], [1]))
    assert (done.value, done.first) == (1, True)
    await redis_cluster.delete(mine)
    await store.discard(workflow)


async def test_scripts_come_back_after_every_node_forgets_them(
    store: RedisCheckpointer, redis_cluster: RedisCluster, fresh_id: str
) -> None:
    # This cluster is private to the test session, so flushing its script caches is ours to do.
    workflows = [f"{fresh_id}-{n}" for n in range(6)]
    for workflow in workflows:
        await store.supply(workflow, "a", 1)
    await redis_cluster.execute_command("SCRIPT FLUSH", target_nodes=RedisCluster.ALL_NODES)
    for workflow in workflows:
        holder = await claimed(store, workflow)
        assert (await store.record(holder, "b", 2)).first
        assert await store.load(workflow) == {"a": 1, "b": 2}
        await store.discard(workflow)


async def test_open_durable_reaches_a_cluster_by_url(cluster_ports: list[int]) -> None:
    from durability.connect import open_durable

    url = f"redis://127.0.0.1:{cluster_ports[0]}/0?cluster=on&scheduler=set&namespace=cl-url"
    async with open_durable(url) as durable:
        assert isinstance(durable.checkpointer.redis, RedisCluster)  # type: ignore[attr-defined]
        await durable.arrive("cl-url-1", "order", 1)
        taken = await durable.take(timedelta(seconds=2), timedelta(minutes=1),
                                   timedelta(seconds=5))
        assert taken is not None and taken.holder is not None
        assert taken.delivery.workflow == "cl-url-1"
        await durable.finish(taken.holder, taken.delivery)
        assert await durable.delete("cl-url-1") == 1


async def test_a_frozen_cluster_fails_calls_with_the_library_error_and_serves_again(
    redis_cluster: RedisCluster, cluster_ports: list[int]
) -> None:
    import os
    import signal

    from durability.connect import Unanswered, open_durable

    pids = []
    for node in redis_cluster.get_nodes():
        info = await redis_cluster.info("server", target_nodes=node)
        pids.append(int(info["process_id"]))
    url = (
        f"redis://127.0.0.1:{cluster_ports[0]}/0?cluster=on&scheduler=set&namespace=cl-frozen"
        "&call_timeout_ms=300"
    )
    async with open_durable(url) as durable:
        await durable.arrive("cl-frozen-1", "order", 1)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)  # every node: connections open, nothing answers
        try:
            for call in (
                lambda: durable.arrive("cl-frozen-2", "order", 2),
                lambda: durable.status("cl-frozen-1"),  # type: ignore[attr-defined]
                lambda: durable.checkpointer.load("cl-frozen-1"),
            ):
                async with asyncio.timeout(30):  # a bound on a hang, not a timing
                    with pytest.raises(Unanswered) as raised:
                        await call()
                assert raised.value.__cause__ is not None
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        async with asyncio.timeout(30):
            while True:
                try:
                    assert await durable.checkpointer.load("cl-frozen-1") == {"order": 1}
                    break
                except Unanswered:
                    await asyncio.sleep(0.1)
        await durable.delete("cl-frozen-1")
        await durable.delete("cl-frozen-2")


async def test_expired_standings_are_left_out_and_swept_across_the_nodes(
    redis_cluster: RedisCluster, fresh_id: str
) -> None:
    # The standings sit on the namespace's slot, the checkpoints on each workflow's, spread
    # over the nodes: the listing's check and the sweep ask each workflow's own node.
    namespace = f"ns-{fresh_id}"
    store = RedisCheckpointer(redis=redis_cluster, namespace=namespace,
                              ttl=timedelta(milliseconds=500))
    names = [f"{fresh_id}-{n:02d}" for n in range(12)]
    for name in names:
        holder = await claimed(store, name)
        await store.record(holder, "step", 1)
        assert await store.settle(holder, "completed", {})
        await store.release(holder)
        if name in names[1::2]:  # kept past their ttl, as a long sleep does
            await store.hold(name, datetime.now(UTC) + timedelta(hours=1))
    await asyncio.sleep(1.0)  # the others expire; every standing is older than the ttl
    listed = await store.standings("completed", None, 3, None)
    assert [s.workflow for s in listed] == names[1:6:2]
    while True:
        _, round_ = await store.sweep()
        if round_:
            break
    standings = f"{{{namespace}}}:standings"
    assert sorted(await redis_cluster.hkeys(standings)) == names[1::2]
    for name in names[1::2]:
        await store.discard(name)
    await redis_cluster.delete(standings, *(f"{{{namespace}}}:state:{s}" for s in
                                            ("all", "completed")))
