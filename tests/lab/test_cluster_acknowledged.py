"""On a Redis Cluster an acknowledged write is acknowledged only by the `WAIT` that followed it
on its own connection: when that connection is lost between the write's reply and `WAIT`'s,
the write fails as unanswered, never counted as on a replica. (Before, the cluster client sent
the lost `WAIT` alone again, where it counted nothing and answered at once, and the next
failover lost writes callers had been told were safe: the cluster chaos run's stranded
workflows.)

Runs on a private cluster of masters with a replica each (the chaos run's); skips without
`redis-server` and `redis-cli`, which CI has.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from durability.redis import Acknowledged, NotAcknowledged, RedisCheckpointer, workflow_keys
from durability.storekit.outage import Unanswered
from experiments.harness.clusters import Replicated, replicated

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Replicated]:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("no redis-server and redis-cli on PATH")
    with replicated(tmp_path) as nodes:
        yield nodes


async def _blocked_in_wait(admin: Redis) -> None:
    for _ in range(500):
        if any(client.get("cmd") == "wait" for client in await admin.client_list()):
            return
        await asyncio.sleep(0.01)
    pytest.fail("no client ever waited in WAIT on the write's primary")


async def test_a_wait_cut_off_from_its_write_never_acknowledges_it(cluster: Replicated) -> None:
    client = RedisCluster.from_url(cluster.url, decode_responses=True)
    store = RedisCheckpointer(
        redis=client, durable=Acknowledged(replicas=1, timeout=timedelta(seconds=10))
    )
    try:
        await client.initialize()
        records = workflow_keys("cut-off")[0]
        node = client.get_node_from_key(records)
        assert node is not None
        replica = cluster.replica_of(node.port)
        assert replica is not None
        admin = Redis(host=node.host, port=node.port, decode_responses=True)
        # The replica held still: the primary's WAIT for the write cannot be answered.
        cluster.pause(replica, paused=True)
        try:
            supplied = asyncio.create_task(store.supply("cut-off", "k", 1))
            await _blocked_in_wait(admin)
            # The write ran and is only on the primary; its connection goes now.
            await admin.client_kill_filter(_type="normal", skipme=True)
            with pytest.raises((Unanswered, NotAcknowledged)):
                await supplied
        finally:
            cluster.pause(replica, paused=False)
            await admin.aclose()
        # With the replica back, the same write is acknowledged, and the replica holds it.
        await store.supply("cut-off", "k", 1)
        copy = Redis(host=node.host, port=replica, decode_responses=True)
        try:
            await copy.execute_command("READONLY")  # a replica serves reads only when asked
            assert await copy.hget(records, "k") is not None
        finally:
            await copy.aclose()
    finally:
        await store.close()
        await client.aclose()


async def test_no_write_is_acknowledged_while_its_primary_has_no_replica(
    cluster: Replicated,
) -> None:
    """A primary killed, writes sent on and on through its replica's promotion: the new
    primary has no replica (the old one stays down), so not one of them may be acknowledged."""
    client = RedisCluster.from_url(cluster.url, decode_responses=True)
    store = RedisCheckpointer(
        redis=client, durable=Acknowledged(replicas=1, timeout=timedelta(milliseconds=300))
    )
    try:
        # The first write on a client not yet started (it learns the cluster's slots first).
        await store.supply("orphaned", "before", 0)
        records = workflow_keys("orphaned")[0]
        node = client.get_node_from_key(records)
        assert node is not None
        replica = cluster.replica_of(node.port)
        assert replica is not None
        cluster.kill(node.port)
        acknowledged, refused = [], 0
        promoted_at: float | None = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while loop.time() < deadline:
            key = f"k{len(acknowledged) + refused}"
            try:
                await store.supply("orphaned", key, 1)
                acknowledged.append(key)
            except (Unanswered, NotAcknowledged, RedisError):
                refused += 1
            if promoted_at is None and (await asyncio.to_thread(cluster.roles)).get(
                    replica) == "master":
                promoted_at = loop.time()
            if promoted_at is not None and loop.time() > promoted_at + 2:
                break
        assert promoted_at is not None, "the replica was never promoted"
        assert acknowledged == [], f"acknowledged with no replica to hold them: {acknowledged}"
        assert refused > 0
    finally:
        await store.close()
        await client.aclose()
