"""`ClusterReads` on the local cluster: what a blocking read was given is handed out by the
wait that saw it end or by the next one, whether the wait stopped at another read's answer, at
its time, or by being cancelled; never dropped."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster

from durability.redis.cluster_reads import ClusterReads, Read

WITHIN = timedelta(seconds=10)


@pytest.fixture
async def keys(redis_cluster: RedisCluster) -> AsyncIterator[list[str]]:
    """Two list keys of this test's own, on two different nodes; deleted after."""
    tag = uuid.uuid4().hex[:12]
    found: dict[str, str] = {}
    n = 0
    while len(found) < 2:
        key = f"reads-{tag}-{n}"
        found.setdefault(redis_cluster.get_node_from_key(key).name, key)
        n += 1
    made = list(found.values())
    yield made
    for key in made:
        await redis_cluster.delete(key)


def _pops(keys: list[str]) -> list[Read]:
    return [Read(key, ("BLPOP", key, WITHIN.total_seconds())) for key in keys]


async def _blocked(client: RedisCluster, count: int) -> None:
    """Until `count` clients are blocked across the cluster's nodes (another test's reads,
    left to end at their block, are given time to)."""
    for _ in range(500):
        infos = await client.info("clients", target_nodes=RedisCluster.PRIMARIES)
        if sum(int(info["blocked_clients"]) for info in infos.values()) == count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never {count} blocked reads at once")


async def _waiting(
    client: RedisCluster, reads: ClusterReads, keys: list[str]
) -> asyncio.Future[list[Any]]:
    """A wait on a read of each key, once both reads are blocked."""
    waiting = asyncio.ensure_future(reads.first(_pops(keys), WITHIN))
    await _blocked(client, len(keys))
    return waiting


async def test_a_wait_ends_the_other_reads_at_the_first_answer(
    redis_cluster: RedisCluster, keys: list[str]
) -> None:
    reads = ClusterReads(redis_cluster)
    waiting = await _waiting(redis_cluster, reads, keys)
    await redis_cluster.rpush(keys[0], "one")
    assert await asyncio.wait_for(waiting, 5) == [(keys[0], "one")]
    assert reads.leaving
    assert await asyncio.wait_for(reads.left(), 5) == []  # unblocked, long before its block
    await _blocked(redis_cluster, 0)
    await reads.close()


async def test_what_a_cancelled_wait_was_given_is_the_next_wait_s(
    redis_cluster: RedisCluster, keys: list[str]
) -> None:
    """A wait cancelled just as Redis answers one of its reads (before, or after, the answer
    reaches it): the value comes back from the wait, or from the next, once."""
    reads = ClusterReads(redis_cluster)
    got: list[object] = []
    for n in range(20):
        waiting = await _waiting(redis_cluster, reads, keys)
        await redis_cluster.rpush(keys[n % 2], f"v{n}")
        waiting.cancel()
        done = await asyncio.gather(waiting, return_exceptions=True)
        if isinstance(done[0], list):
            got += done[0]
        got += await asyncio.wait_for(reads.left(), 5)
    await reads.close()
    assert got == [(keys[n % 2], f"v{n}") for n in range(20)]
    assert [await redis_cluster.llen(key) for key in keys] == [0, 0]


async def test_closing_ends_the_reads_a_wait_left(
    redis_cluster: RedisCluster, keys: list[str]
) -> None:
    reads = ClusterReads(redis_cluster)
    waiting = await _waiting(redis_cluster, reads, keys)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    await asyncio.wait_for(reads.close(), 5)
    assert not reads.leaving
    await _blocked(redis_cluster, 0)
