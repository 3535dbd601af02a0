"""Idle wake on a sharded stream queue (4 shards) over a local Redis Cluster: the time from
`make_ready` to the blocked reader's `next_ready` returning, N times, and the commands the
nodes served around one idle 3-second `next_ready` (less the three `INFO`s of the count).

    PYTHONPATH=TREE python wake.py N PORT    (PORT: a node of the cluster)
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from datetime import timedelta

from redis.asyncio.cluster import RedisCluster

from durability.redis import RedisStreamScheduler


async def served(client: RedisCluster) -> int:
    stats = await client.info("stats", target_nodes=RedisCluster.PRIMARIES)
    return sum(int(one["total_commands_processed"]) for one in stats.values())


async def main(n: int, port: int) -> None:
    client = RedisCluster(host="127.0.0.1", port=port, decode_responses=True)
    await client.initialize()
    namespace = f"wake-{uuid.uuid4().hex[:8]}"
    reader = RedisStreamScheduler(redis=client, namespace=namespace, shards=4)
    writer = RedisStreamScheduler(redis=client, namespace=namespace, shards=4)
    await reader.prepare()
    took = []
    for i in range(n):
        reading = asyncio.ensure_future(reader.next_ready(timedelta(seconds=5)))
        await asyncio.sleep(0.01)  # the reader is waiting
        began = time.perf_counter()
        await writer.make_ready(f"w{i}")
        delivery = await reading
        took.append((time.perf_counter() - began) * 1e3)
        assert delivery is not None and delivery.workflow == f"w{i}", delivery
        await reader.done(delivery)
    before = await served(client)
    await reader.next_ready(timedelta(seconds=3))
    idle = await served(client) - before - 3
    took.sort()
    print(f"p50={statistics.median(took):.3f} p90={took[int(0.9 * n)]:.3f}"
          f" p99={took[int(0.99 * n)]:.3f} idle_commands_3s={idle}")
    close = getattr(reader, "close", None)
    if close is not None:
        await close()
    await client.aclose()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
