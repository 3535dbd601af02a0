"""What a wakeup costs the server with and without a priority or a limit: one `make_ready`,
`next_ready` and `done` after another on each Redis scheduler, against a server of your own
(its counters are reset: never point it at a shared one).

    redis-server --port 6391 --save '' --daemonize yes
    python -m benchmarks.policy_cost --port 6391 --cycles 4000 [--shards 4]

prints, per scheduler and policy, the commands the server ran a cycle (`INFO commandstats`, a
script's own commands counted inside it), its CPU a cycle and the cycles a second. Run it on
two checkouts in one sitting to compare them.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from datetime import timedelta
from typing import Any

from redis.asyncio import Redis

from durability.redis import RedisSetScheduler, RedisStreamScheduler
from durability.values import Limit

#: (label, make_ready's keywords): the common path, one other level, and a limit with room.
POLICIES: list[tuple[str, dict[str, Any]]] = [
    ("priority 0", {}),
    ("priority 5", {"priority": 5}),
    ("limit 1000", {"limit": Limit("bench", 1000)}),
]


async def _cpu(redis: Redis) -> float:
    info = await redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def cycles(
    port: int, kind: Any, count: int, keywords: dict[str, Any], shards: int = 1
) -> str:
    """One row: `count` cycles of `kind` (of `shards` shards) with `keywords` on the server at
    `port`."""
    redis = Redis(port=port, decode_responses=True)
    try:
        namespace = f"bench-{uuid.uuid4().hex[:8]}"
        scheduler = kind(redis=redis, namespace=namespace, shards=shards)
        await scheduler.prepare()

        async def cycle(n: int) -> None:
            await scheduler.make_ready(f"w{n}", **keywords)
            delivery = await scheduler.next_ready(timedelta(seconds=1))
            assert delivery is not None
            await scheduler.done(delivery)

        for n in range(200):  # warm: scripts loaded, connections open
            await cycle(n)
        await redis.config_resetstat()
        before, started = await _cpu(redis), time.perf_counter()
        for n in range(count):
            await cycle(n)
        wall = time.perf_counter() - started
        used = await _cpu(redis) - before
        stats = await redis.info("commandstats")
        calls = sum(
            int(value["calls"]) for name, value in stats.items()
            if name not in ("cmdstat_info", "cmdstat_config")
        )
        return (
            f"{kind.__name__:22} {calls / count:9.2f} {used * 1e6 / count:12.1f}"
            f" {count / wall:9.0f}"
        )
    finally:
        await redis.aclose()


async def main(port: int, count: int, shards: int = 1) -> None:
    heads = ("cmds/cycle", "server µs/cycle", "cycles/s")
    print(f"{'scheduler':22} {'policy':12} {heads[0]:>9} {heads[1]:>12} {heads[2]:>9}")
    for kind in (RedisStreamScheduler, RedisSetScheduler):
        for label, keywords in POLICIES:
            row = await cycles(port, kind, count, keywords, shards)
            print(row[:22], f"{label:12}", row[23:])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cycles", type=int, default=4000)
    parser.add_argument("--shards", type=int, default=1)
    options = parser.parse_args()
    asyncio.run(main(options.port, options.cycles, options.shards))
