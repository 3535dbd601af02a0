"""The cost of one wakeup on each Redis scheduler: make_ready -> next_ready -> done.

Runs against the Redis on 127.0.0.1:6379 (or REDIS_URL) under a namespace of its own, which it
deletes afterwards. For each scheduler it times many closed-loop round trips of the three calls
(latency per wakeup, not throughput under load: the lab's `latency` experiment is the open-loop
measure) and counts the requests each call sends, by counting the client's commands rather
than the server's (other clients share the server). It also counts what an idle
`next_ready(1 s)` costs: one blocking read on the stream and on the set with its doorbell, one
attempt per poll on the set without it.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_redis_schedulers.py [--iterations 2000]

Prints a table and writes results/bench_redis_schedulers.json. Never asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis as redis_py
from redis.asyncio import Redis

from durability.interfaces import Scheduler
from durability.redis.sortedset import RedisSetScheduler
from durability.redis.stream import RedisStreamScheduler

RESULTS = Path(__file__).resolve().parent.parent / "results" / "bench_redis_schedulers.json"
WITHIN = timedelta(seconds=1)


class CountingRedis(Redis):
    """A client that counts every command it sends (one command = one round trip here)."""

    sent: Counter[str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent = Counter()

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent[str(args[0]).upper()] += 1
        return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


def _percentile(ordered: list[float], fraction: float) -> float:
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


async def _measure(
    name: str, scheduler: Scheduler, client: CountingRedis, n: int
) -> dict[str, Any]:
    await scheduler.prepare()
    workflow = f"bench-{uuid.uuid4().hex[:8]}"
    # Warm up: loads the scripts (NOSCRIPT once each) and the connection pool.
    for _ in range(50):
        await scheduler.make_ready(workflow)
        delivery = await scheduler.next_ready(WITHIN)
        assert delivery is not None
        await scheduler.done(delivery)

    durations: list[float] = []
    calls = {"make_ready": 0, "next_ready": 0, "done": 0}
    for _ in range(n):
        start = time.perf_counter()
        before = sum(client.sent.values())
        await scheduler.make_ready(workflow)
        after_ready = sum(client.sent.values())
        delivery = await scheduler.next_ready(WITHIN)
        after_next = sum(client.sent.values())
        assert delivery is not None
        await scheduler.done(delivery)
        durations.append(time.perf_counter() - start)
        after_done = sum(client.sent.values())
        calls["make_ready"] += after_ready - before
        calls["next_ready"] += after_next - after_ready
        calls["done"] += after_done - after_next
    per_call = {call: count / n for call, count in calls.items()}

    # Idle: a read with nothing to take, for one second.
    before = sum(client.sent.values())
    idle_start = time.perf_counter()
    assert await scheduler.next_ready(WITHIN) is None
    idle_seconds = time.perf_counter() - idle_start
    idle_requests = sum(client.sent.values()) - before

    ordered = sorted(durations)
    ms = 1000.0
    return {
        "scheduler": name,
        "iterations": n,
        "p50_ms": _percentile(ordered, 0.50) * ms,
        "p99_ms": _percentile(ordered, 0.99) * ms,
        "mean_ms": statistics.fmean(durations) * ms,
        "max_ms": ordered[-1] * ms,
        "round_trips_per_call": per_call,
        "round_trips_per_wakeup": sum(per_call.values()),
        "idle_next_ready_requests_per_second": idle_requests / idle_seconds,
    }


async def main(iterations: int) -> dict[str, Any]:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    client = CountingRedis.from_url(url, decode_responses=True)
    assert isinstance(client, CountingRedis)
    namespace = f"bench-{uuid.uuid4().hex[:10]}"
    stream = RedisStreamScheduler(redis=client, namespace=f"{namespace}-stream")
    sorted_set = RedisSetScheduler(redis=client, namespace=f"{namespace}-set")
    polled = RedisSetScheduler(redis=client, namespace=f"{namespace}-polled", doorbell=False)
    try:
        info = await client.info("server")
        rows = [
            await _measure("redis-stream", stream, client, iterations),
            await _measure("redis-set (doorbell)", sorted_set, client, iterations),
            await _measure("redis-set (no doorbell, poll 50 ms)", polled, client, iterations),
        ]
        trimmed = await stream.trim()
    finally:
        await client.delete(
            stream.ready, stream.sleeping, sorted_set.schedule, polled.schedule,
            sorted_set.doorbell or "",
        )
        await client.aclose()
    return {
        "benchmark": "make_ready -> next_ready -> done, closed loop, one client",
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "redis_py": redis_py.__version__,
        "redis_server": info.get("redis_version"),
        "cores": os.cpu_count(),
        "stream_entries_trimmed_after": trimmed,
        "rows": rows,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    result = asyncio.run(main(parser.parse_args().iterations))
    result["git_revision"] = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'scheduler':<24}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}{'trips':>7}{'idle/s':>8}")
    for row in result["rows"]:
        print(
            f"{row['scheduler']:<24}{row['p50_ms']:>9.3f}{row['p99_ms']:>9.3f}"
            f"{row['mean_ms']:>9.3f}{row['round_trips_per_wakeup']:>7.1f}"
            f"{row['idle_next_ready_requests_per_second']:>8.1f}"
        )
    print(f"wrote {RESULTS}")
