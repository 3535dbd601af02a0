"""Acknowledged writes: with `durable=Acknowledged(...)` a write returns only once replicas
have it, and too few acknowledgements are an error, never a quiet success.

Runs against a primary and a replica started here (never the shared server on 6379)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from durability.interfaces import claimed
from durability.redis import (
    Acknowledged,
    LuaEffect,
    NotAcknowledged,
    RedisCheckpointer,
    workflow_keys,
)

SHORT = timedelta(milliseconds=200)


async def _wait_linked(primary: Redis, replica: Redis) -> None:
    for _ in range(200):
        linked = (await replica.info("replication")).get("master_link_status") == "up"
        counted = (await primary.info("replication")).get("connected_slaves", 0) >= 1
        if linked and counted:
            return
        await asyncio.sleep(0.05)
    pytest.fail("the replica never finished its first sync")


@pytest.fixture
async def pair(
    spawn_redis: Callable[..., int], private_client: Callable[[int], Redis]
) -> AsyncIterator[tuple[Redis, Redis]]:
    """A fresh primary and one replica of it, both private to this test."""
    # No diskless-sync delay: the default holds the first sync back five seconds.
    primary_port = spawn_redis("--repl-diskless-sync-delay", "0")
    replica_port = spawn_redis("--replicaof", "127.0.0.1", str(primary_port))
    primary, replica = private_client(primary_port), private_client(replica_port)
    try:
        await _wait_linked(primary, replica)
        yield primary, replica
    finally:
        await primary.aclose()
        await replica.aclose()


async def test_acknowledged_writes_are_on_the_replica_when_they_return(
    pair: tuple[Redis, Redis],
) -> None:
    primary, replica = pair
    store = RedisCheckpointer(
        redis=primary, durable=Acknowledged(replicas=1, timeout=timedelta(seconds=5))
    )
    holder = await claimed(store, "wf")
    await store.record(holder, "a", 1)
    await store.supply("wf", "b", 2)
    await store.append("wf", 3)
    await store.transact(holder, "c", LuaEffect("return redis.call('INCR', KEYS[1])", ["n:{wf}"]))
    # No waiting here: WAIT already made sure the replica holds every write above.
    records, claim, _ = workflow_keys("wf")
    assert set(await replica.hkeys(records)) == {"a", "b", "c", "inbox:00000000000000000001"}
    assert int((await replica.hgetall(claim))["token"]) == holder.token
    assert await replica.get("n:{wf}") == "1"
    assert await RedisCheckpointer(redis=replica).load("wf") == await store.load("wf")


async def test_too_few_replicas_is_an_error(pair: tuple[Redis, Redis]) -> None:
    primary, _ = pair
    store = RedisCheckpointer(redis=primary, durable=Acknowledged(replicas=2, timeout=SHORT))
    # Two are asked for and only one exists: however many of them answered in time, too few.
    with pytest.raises(NotAcknowledged, match="of 2"):
        await store.supply("wf", "a", 1)
    holder = await RedisCheckpointer(redis=primary).claim("other", timedelta(minutes=1), SHORT)
    assert holder is not None
    with pytest.raises(NotAcknowledged):
        await store.record(holder, "k", 1)


async def test_a_primary_without_replicas_never_acknowledges(
    spawn_redis: Callable[..., int], private_client: Callable[[int], Redis]
) -> None:
    alone = private_client(spawn_redis())
    try:
        store = RedisCheckpointer(redis=alone, durable=Acknowledged(replicas=1, timeout=SHORT))
        with pytest.raises(NotAcknowledged, match="0 of 1"):
            await store.claim("wf", timedelta(minutes=1), timedelta(seconds=5))
        with pytest.raises(NotAcknowledged):
            await store.discard("wf")
    finally:
        await alone.aclose()


async def test_aof_on_an_old_server_warns_and_still_waits_for_replicas(
    pair: tuple[Redis, Redis], caplog: pytest.LogCaptureFixture
) -> None:
    primary, _ = pair
    version = (await primary.info("server"))["redis_version"]
    if tuple(int(p) for p in str(version).split(".")[:2]) >= (7, 2):
        pytest.skip(f"Redis {version} has WAITAOF; this test is about servers without it")
    store = RedisCheckpointer(
        redis=primary, durable=Acknowledged(replicas=1, timeout=timedelta(seconds=5), aof=True)
    )
    with caplog.at_level(logging.WARNING, logger="durability.redis.checkpointer"):
        assert (await store.supply("wf", "a", 1)).first
    assert "WAITAOF" in caplog.text
    strict = RedisCheckpointer(redis=primary, durable=Acknowledged(replicas=2, aof=True,
                                                                   timeout=SHORT))
    with pytest.raises(NotAcknowledged):
        await strict.supply("wf", "b", 2)


async def test_acknowledged_writes_survive_a_script_flush(pair: tuple[Redis, Redis]) -> None:
    primary, replica = pair
    store = RedisCheckpointer(
        redis=primary, durable=Acknowledged(replicas=1, timeout=timedelta(seconds=5))
    )
    await store.supply("wf", "a", 1)
    await primary.script_flush()
    assert (await store.supply("wf", "b", 2)).first
    assert await replica.hget(workflow_keys("wf")[0], "b") == "2"


def test_acknowledged_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        Acknowledged(replicas=-1)
    with pytest.raises(ValueError):
        Acknowledged(timeout=timedelta(0))
    with pytest.raises(TypeError):
        Acknowledged(replicas=True)


async def test_on_a_cluster_without_replicas_acknowledgement_fails_loudly(
    redis_cluster: RedisCluster, fresh_id: str
) -> None:
    # The WAIT is routed to the node owning the workflow's slot (the script's connection);
    # this cluster has no replicas, so one acknowledgement can never come.
    store = RedisCheckpointer(
        redis=redis_cluster, durable=Acknowledged(replicas=1, timeout=SHORT)
    )
    with pytest.raises(NotAcknowledged, match="0 of 1"):
        await store.supply(fresh_id, "a", 1)
    # aof=True asks each node's version (WAITAOF needs 7.2): the cluster answers per node.
    relaxed = RedisCheckpointer(redis=redis_cluster, durable=Acknowledged(replicas=0, aof=True))
    try:
        assert (await relaxed.supply(fresh_id, "b", 2)).first
    except NotAcknowledged as error:
        # On 7.2+ WAITAOF is sent, and a node without an AOF refuses a local fsync: loudly.
        assert error.refused is not None and "appendonly" in error.refused
        relaxed = RedisCheckpointer(redis=redis_cluster, durable=Acknowledged(replicas=0))
        assert (await relaxed.supply(fresh_id, "b", 2)).first
    assert await relaxed.load(fresh_id) == {"a": 1, "b": 2}
    await redis_cluster.delete(*workflow_keys(fresh_id))


# -- the URL's replicas option -----------------------------------------------------------------


@pytest.mark.parametrize(("query", "named"), [
    ("replicas=-1", "replicas"), ("replicas=one", "replicas"), ("replicas=1.5", "replicas"),
    ("replicas=17", "at most 16"), ("replicas_timeout_ms=500", "needs replicas"),
    ("replicas=1&replicas_timeout_ms=0", "positive"),
    ("replicas=1&replicas_timeout_ms=soon", "milliseconds"),
])
async def test_a_bad_replicas_option_is_refused_before_connecting(query: str, named: str
                                                                   ) -> None:
    from durability.connect import open_durable

    with pytest.raises(ValueError, match=named):
        async with open_durable(f"redis://127.0.0.1:1/0?{query}"):
            pass


@pytest.mark.parametrize("scheduler", ["stream", "set"])
async def test_replicas_on_the_url_make_an_arrive_wait_for_its_record_and_its_wakeup(
    pair: tuple[Redis, Redis], scheduler: str
) -> None:
    """With `replicas=1` both halves of an arrive travel with a WAIT on their connection, and
    both are on the replica when it returns; a count the server cannot meet is an error."""
    from durability.connect import open_durable

    primary, replica = pair
    port = primary.connection_pool.connection_kwargs["port"]
    url = f"redis://127.0.0.1:{port}/0?scheduler={scheduler}&namespace=waited"
    async with open_durable(f"{url}&replicas=1&replicas_timeout_ms=5000") as durable:
        await durable.arrive("wf-0", "order", {"n": 0})  # its scripts loaded (a NOSCRIPT is
        # answered by loading the script and sending it, and its WAIT, again)
        before = (await primary.info("commandstats"))["cmdstat_wait"]["calls"]
        assert (await durable.arrive("wf-1", "order", {"n": 1})).first
        after = (await primary.info("commandstats"))["cmdstat_wait"]["calls"]
    assert after - before == 2  # the record's, then the wakeup's
    assert await replica.hget(workflow_keys("wf-1", "waited")[0], "order") is not None
    queued = await replica.keys("{waited}:*")
    assert {"{waited}:ready", "{waited}:schedule"} & set(queued), queued
    async with open_durable(f"{url}&replicas=2&replicas_timeout_ms=200") as strict:
        with pytest.raises(NotAcknowledged, match="of 2"):
            await strict.arrive("wf-2", "order", {"n": 2})


def test_too_few_acknowledgements_are_worth_asking_again() -> None:
    """The write is on the primary; asked again once a replica is back, it is acknowledged:
    the worker's and the API's retries treat it as the store's passing trouble."""
    from durability.connect import unavailable

    assert unavailable(NotAcknowledged("WAIT", 1, 0))
    assert not unavailable(RuntimeError("a failure of the work"))


async def test_a_turns_acknowledged_writes_share_one_wait(pair: tuple[Redis, Redis]) -> None:
    """On a single node the writes one turn gathers travel as one pipeline ending in one
    `WAIT`, which counts them all: every one is on the replica when its call returns."""
    primary, replica = pair
    store = RedisCheckpointer(
        redis=primary, durable=Acknowledged(replicas=1, timeout=timedelta(seconds=5))
    )
    try:
        await store.supply("warm", "a", 0)  # its script loaded
        before = (await primary.info("commandstats"))["cmdstat_wait"]["calls"]
        await asyncio.gather(*(store.supply(f"wf-{n}", "a", n) for n in range(20)))
        waits = (await primary.info("commandstats"))["cmdstat_wait"]["calls"] - before
        assert 1 <= waits < 20
        for n in range(20):
            assert await replica.hget(workflow_keys(f"wf-{n}")[0], "a") == str(n)
    finally:
        await store.close()
