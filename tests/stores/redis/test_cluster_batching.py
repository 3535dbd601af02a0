"""A cluster's turn of script calls batched per node (`ScriptBatcher` over `NodeLanes`), on the
local three-node cluster: one connection a node carries a burst, a call sent to a node that
no longer holds its slot is redirected and lands once, and a lane whose connection the server
killed opens again."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from redis.asyncio.cluster import RedisCluster

from durability.interfaces import claimed
from durability.redis import RedisCheckpointer, workflow_keys

HOST = "127.0.0.1"


@pytest.fixture
async def named(cluster_ports: list[int]) -> AsyncIterator[tuple[RedisCluster, str]]:
    """A cluster client of this test's own, its connections named so the nodes can count them."""
    name = f"batch-{uuid.uuid4().hex[:8]}"
    client = RedisCluster(
        host=HOST, port=cluster_ports[0], decode_responses=True, client_name=name
    )
    await client.initialize()
    try:
        yield client, name
    finally:
        with contextlib.suppress(Exception):
            await client.aclose()


async def _scripting(client: RedisCluster, name: str) -> dict[str, int]:
    """How many connections named `name` each primary has whose last command ran a script."""
    counts = {}
    for node in client.get_primaries():
        listed = await client.client_list(target_nodes=node)
        counts[node.name] = sum(
            1 for one in listed if one.get("name") == name and one.get("cmd") == "evalsha"
        )
    return counts


async def test_a_turn_s_calls_reach_each_node_on_one_connection(
    named: tuple[RedisCluster, str],
) -> None:
    client, name = named
    store = RedisCheckpointer(redis=client, ttl=timedelta(minutes=10))
    ids = [f"{name}-{n}" for n in range(60)]
    nodes = {client.get_node_from_key(workflow_keys(w)[0]).name for w in ids}
    assert len(nodes) == 3
    try:
        # Sixty supplies asked for in one turn: sent one by one, the cluster client would check
        # out a connection per call in flight on each node.
        written = await asyncio.gather(*(store.supply(w, "order", n) for n, w in enumerate(ids)))
        assert all(one.first for one in written)
        # Every node ran the burst's scripts on one connection.
        assert await _scripting(client, name) == dict.fromkeys(nodes, 1)
        assert [await store.load(w) for w in ids] == [{"order": n} for n in range(60)]
    finally:
        await asyncio.gather(*(store.discard(w) for w in ids))
        await store.close()


async def test_a_call_sent_to_a_node_that_no_longer_holds_its_slot_lands_once(
    named: tuple[RedisCluster, str],
) -> None:
    client, name = named
    store = RedisCheckpointer(redis=client, ttl=timedelta(minutes=10))
    workflow = f"{name}-moved"
    key = workflow_keys(workflow)[0]
    owner = client.get_node_from_key(key)
    other = next(node for node in client.get_primaries() if node.name != owner.name)
    # The client's map now says the slot is on another node: that node answers MOVED, so the
    # call did not run there, and the batcher hands it to the cluster client, which follows it.
    slot = client.keyslot(key)
    client.nodes_manager.slots_cache[slot] = [other]
    try:
        holder = await claimed(store, workflow)
        done = await store.record(holder, "step", 1)
        assert (done.value, done.first) == (1, True)
        assert await store.load(workflow) == {"step": 1}
        # Redirected, the client learnt the slot's owner again.
        assert client.get_node_from_key(key).name == owner.name
    finally:
        await store.discard(workflow)
        await store.close()


async def test_a_lane_whose_connection_was_killed_opens_again(
    named: tuple[RedisCluster, str],
) -> None:
    client, name = named
    store = RedisCheckpointer(redis=client, ttl=timedelta(minutes=10))
    ids = [f"{name}-{n}" for n in range(12)]
    try:
        await asyncio.gather(*(store.supply(w, "order", n) for n, w in enumerate(ids)))
        for node in client.get_primaries():
            listed = await client.client_list(target_nodes=node)
            for one in listed:
                if one.get("name") == name and one.get("cmd") != "client|list":
                    with contextlib.suppress(Exception):
                        await client.client_kill_filter(_id=one["id"], target_nodes=node)
        await asyncio.sleep(0.1)  # the lanes' connections sit closed by the servers
        loaded = await asyncio.gather(*(store.load(w) for w in ids))
        assert loaded == [{"order": n} for n in range(12)]
    finally:
        await asyncio.gather(*(store.discard(w) for w in ids))
        await store.close()


async def _two_nodes(client: RedisCluster, name: str) -> tuple[str, str, int]:
    """A workflow on one primary, one on another, and the process id of the second's node."""
    first = f"{name}-a"
    owner = client.get_node_from_key(workflow_keys(first)[0]).name
    n = 0
    while True:
        second = f"{name}-b{n}"
        node = client.get_node_from_key(workflow_keys(second)[0])
        if node.name != owner:
            break
        n += 1
    info = await client.info("server", target_nodes=node)
    return first, second, int(info["process_id"])


async def test_a_turn_s_replies_from_several_nodes_are_handed_out_together(
    named: tuple[RedisCluster, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """So the passes that asked in one turn go on in one turn (their next calls one batch)."""
    import os
    import signal

    from durability.redis import batching

    monkeypatch.setattr(batching, "JOIN", 60.0)  # held until every node has answered
    client, name = named
    store = RedisCheckpointer(redis=client, ttl=timedelta(minutes=10))
    first, second, pid = await _two_nodes(client, name)
    # Both lanes open, and the scripts loaded on every node (loading waits on all of them),
    # before the node stops.
    await asyncio.gather(*(store.supply(w, "warm", 0) for w in (first, second)))
    await asyncio.gather(*(store.load(w) for w in (first, second)))
    os.kill(pid, signal.SIGSTOP)
    try:
        near = asyncio.ensure_future(store.supply(first, "order", 1))
        far = asyncio.ensure_future(store.supply(second, "order", 2))
        await asyncio.sleep(0.1)  # both sent, in one turn (not a timing: the turn has gone)
        # A later call to the first node alone: its reply comes behind the turn's, in order on
        # that node's one connection, so once it is back the turn's reply has come too.
        async with asyncio.timeout(30):  # a bound on a hang, not a timing
            assert (await store.load(first))["warm"] == 0
        assert not near.done()  # held for the stopped node's answer
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        async with asyncio.timeout(30):
            assert (await near).first and (await far).first
    finally:
        await asyncio.gather(store.discard(first), store.discard(second))
        await store.close()


async def test_a_stopped_node_holds_the_others_replies_only_a_moment(
    named: tuple[RedisCluster, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import signal

    from durability.redis import batching

    monkeypatch.setattr(batching, "JOIN", 0.05)
    client, name = named
    store = RedisCheckpointer(redis=client, ttl=timedelta(minutes=10))
    first, second, pid = await _two_nodes(client, name)
    await asyncio.gather(*(store.supply(w, "warm", 0) for w in (first, second)))
    os.kill(pid, signal.SIGSTOP)
    try:
        near = asyncio.ensure_future(store.supply(first, "order", 1))
        far = asyncio.ensure_future(store.supply(second, "order", 2))
        async with asyncio.timeout(30):  # a bound on a hang, not a timing
            assert (await near).first
        assert not far.done()
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        async with asyncio.timeout(30):
            assert (await far).first
    finally:
        await asyncio.gather(store.discard(first), store.discard(second))
        await store.close()
