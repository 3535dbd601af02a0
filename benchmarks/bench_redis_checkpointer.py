"""The cost of the Redis checkpointer's operations: one claim+record+release, one load.

Runs against the Redis on 127.0.0.1:6379 (or REDIS_URL) with workflow ids of its own, deleted
afterwards. Each operation is timed closed-loop from one client (latency per call, not
throughput), and its requests are counted on the client (other clients share the server, so
the server's counters would not be ours alone). A pipeline counts as one round trip.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_redis_checkpointer.py [--iterations 2000]

Prints a table and writes results/bench_redis_checkpointer.json. Never asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis as redis_py
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from durability.interfaces import claimed
from durability.redis import Acknowledged, LuaEffect, RedisCheckpointer, workflow_tag
from durability.redis.lane import Lane

RESULTS = Path(__file__).resolve().parent.parent / "results" / "bench_redis_checkpointer.json"
BUDGET = timedelta(minutes=1)
ALIVE = timedelta(seconds=30)
INCR = "return redis.call('INCRBY', KEYS[1], ARGV[1])"


class CountingRedis(Redis):
    """A client that counts what it sends: each command, and each pipeline as one."""

    sent: Counter[str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent = Counter()

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent[str(args[0]).upper()] += 1
        return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        self.sent["PIPELINE"] += 1
        return super().pipeline(transaction=transaction, shard_hint=shard_hint)


def count_lanes(client: CountingRedis) -> None:
    """Count what the checkpointer's `Lane` sends on `client`'s pool too: a lone command by its
    name, several as one pipeline (the lane writes them in one send and waits once)."""
    original = Lane.execute

    async def execute(self: Lane, commands: Any, **options: Any) -> list[Any]:
        if self._pool is client.connection_pool:
            name = str(commands[0][0]).upper() if len(commands) == 1 else "PIPELINE"
            client.sent[name] += 1
        return await original(self, commands, **options)

    Lane.execute = execute  # type: ignore[method-assign]


def _percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


async def _time(
    name: str,
    client: CountingRedis,
    n: int,
    operation: Callable[[int], Awaitable[object]],
) -> dict[str, Any]:
    for i in range(min(50, n)):  # warm up: scripts loaded, connection open
        await operation(-1 - i)
    durations: list[float] = []
    before = sum(client.sent.values())
    kinds_before = Counter(client.sent)
    for i in range(n):
        start = time.perf_counter()
        await operation(i)
        durations.append((time.perf_counter() - start) * 1000)
    sent = sum(client.sent.values()) - before
    kinds = Counter(client.sent)
    kinds.subtract(kinds_before)
    ordered = sorted(durations)
    return {
        "operation": name,
        "iterations": n,
        "p50_ms": _percentile(ordered, 0.5),
        "p99_ms": _percentile(ordered, 0.99),
        "mean_ms": statistics.fmean(durations),
        "round_trips_per_operation": sent / n,
        "requests": {kind: count / n for kind, count in kinds.items() if count},
    }


async def main(iterations: int) -> None:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    client = CountingRedis.from_url(url, decode_responses=True)
    assert isinstance(client, CountingRedis)
    count_lanes(client)
    prefix = f"bench-ckpt-{uuid.uuid4().hex[:8]}"
    store = RedisCheckpointer(redis=client, ttl=timedelta(minutes=10))
    waited = RedisCheckpointer(
        redis=client, ttl=timedelta(minutes=10), durable=Acknowledged(replicas=0)
    )
    rows: list[dict[str, Any]] = []
    try:

        async def cycle(i: int) -> None:
            holder = await claimed(store, f"{prefix}-cycle-{i}", BUDGET, ALIVE)
            await store.record(holder, "step", {"n": i})
            await store.release(holder)

        rows.append(await _time("claim+record+release", client, iterations, cycle))

        held = await claimed(store, f"{prefix}-records", BUDGET, ALIVE)

        async def record(i: int) -> None:
            await store.record(held, f"step-{i}", i)

        rows.append(await _time("record", client, iterations, record))

        async def record_waited(i: int) -> None:
            await waited.record(held, f"waited-{i}", i)

        rows.append(
            await _time("record, Acknowledged(replicas=0)", client, iterations, record_waited)
        )

        counter = f"stock:{workflow_tag(held.workflow)}"

        async def transact(i: int) -> None:
            await store.transact(held, f"effect-{i}", LuaEffect(INCR, [counter], [1]))

        rows.append(await _time("transact (LuaEffect INCRBY)", client, iterations, transact))

        for size in (10, 200):
            workflow = f"{prefix}-load-{size}"
            loader = await claimed(store, workflow, BUDGET, ALIVE)
            for k in range(size):
                await store.record(loader, f"step-{k}", {"k": k, "text": "x" * 32})

            async def load(i: int, workflow: str = workflow) -> None:
                await store.load(workflow)

            rows.append(await _time(f"load ({size} records)", client, iterations, load))
    finally:
        leftovers = [key async for key in client.scan_iter(match=f"*{prefix}*", count=1000)]
        if leftovers:
            await client.delete(*leftovers)
        server = (await client.info("server"))["redis_version"]
        await client.aclose()

    print(f"{'operation':36} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'round trips':>12}")
    for row in rows:
        print(
            f"{row['operation']:36} {row['p50_ms']:8.3f} {row['p99_ms']:8.3f} "
            f"{row['mean_ms']:8.3f} {row['round_trips_per_operation']:12.2f}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "RedisCheckpointer operations, closed loop, one client",
                "started": datetime.now(UTC).isoformat(timespec="seconds"),
                "python": platform.python_version(),
                "redis_py": redis_py.__version__,
                "redis_server": server,
                "cores": os.cpu_count(),
                "notes": (
                    "claim, record, release, transact and load are one EVALSHA each; an"
                    " Acknowledged write is one pipeline (EVALSHA + WAIT) on one connection."
                ),
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=2000)
    asyncio.run(main(parser.parse_args().iterations))
