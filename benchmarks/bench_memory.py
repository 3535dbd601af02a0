"""What the worker costs over the memory stores, and how fast it starts what it is given.

Two measurements, run as a script (`python benchmarks/bench_memory.py`), printed and written to
`results/bench_memory.json`. Numbers are reported, never asserted:

- idle: `work` with default settings and nothing to do, over stores that count every call;
  store calls per second, by method (the issue's target: at most 2 a second in all).
- submit-to-first-pass: open-loop arrivals (`durable.arrive` of a new workflow at a fixed rate,
  whatever the worker is doing) against a running `work` in the same process; the latency is
  from just before `arrive` to the observer's "started" event for that workflow, both on
  `time.perf_counter` (target: p50 at most 0.3 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

# Run as a script from a checkout: import the working tree, installed or not.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from durability import (  # noqa: E402
    Delivery,
    Effect,
    Entry,
    Event,
    MemoryCheckpointer,
    MemoryScheduler,
    Pass,
    Recorded,
    Run,
    SplitDurable,
    Written,
    as_int,
    work,
)


class CountingCheckpointer:
    """Delegates to a memory checkpointer and counts every call by method."""

    def __init__(self, inner: MemoryCheckpointer, calls: Counter[str]) -> None:
        self.inner = inner
        self.calls = calls

    async def claim(self, workflow: str, budget: timedelta, alive: timedelta) -> Pass | None:
        self.calls["claim"] += 1
        return await self.inner.claim(workflow, budget, alive)

    async def load(self, workflow: str) -> dict[str, object]:
        self.calls["load"] += 1
        return await self.inner.load(workflow)

    async def history(self, workflow: str) -> list[Written]:
        self.calls["history"] += 1
        return await self.inner.history(workflow)

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        self.calls["record"] += 1
        return await self.inner.record(holder, key, value)

    async def transact(self, holder: Pass, key: str, effect: Effect) -> Recorded:
        self.calls["transact"] += 1
        return await self.inner.transact(holder, key, effect)

    async def supply(self, workflow: str, key: str, value: object) -> Recorded:
        self.calls["supply"] += 1
        return await self.inner.supply(workflow, key, value)

    async def append(self, workflow: str, value: object) -> Entry:
        self.calls["append"] += 1
        return await self.inner.append(workflow, value)

    async def extend(self, holder: Pass, budget: timedelta, alive: timedelta) -> Pass:
        self.calls["extend"] += 1
        return await self.inner.extend(holder, budget, alive)

    async def renew(self, holder: Pass, alive: timedelta) -> None:
        self.calls["renew"] += 1
        await self.inner.renew(holder, alive)

    async def discard(self, workflow: str) -> int:
        self.calls["discard"] += 1
        return await self.inner.discard(workflow)

    async def release(self, holder: Pass) -> None:
        self.calls["release"] += 1
        await self.inner.release(holder)


class CountingScheduler:
    """Delegates to a memory scheduler and counts every call by method."""

    def __init__(self, inner: MemoryScheduler, calls: Counter[str]) -> None:
        self.inner = inner
        self.calls = calls
        self.lease = inner.lease

    async def prepare(self) -> None:
        self.calls["prepare"] += 1
        await self.inner.prepare()

    async def make_ready(self, workflow: str) -> None:
        self.calls["make_ready"] += 1
        await self.inner.make_ready(workflow)

    async def next_ready(self, within: timedelta) -> Delivery | None:
        self.calls["next_ready"] += 1
        return await self.inner.next_ready(within)

    async def done(self, delivery: Delivery) -> None:
        self.calls["done"] += 1
        await self.inner.done(delivery)

    async def wake_at(self, delivery: Delivery, when: datetime) -> bool:
        self.calls["wake_at"] += 1
        return await self.inner.wake_at(delivery, when)

    async def wake_due(self, now: datetime | None = None) -> datetime | None:
        self.calls["wake_due"] += 1
        return await self.inner.wake_due(now)

    async def reclaim(self, idle: timedelta) -> Delivery | None:
        self.calls["reclaim"] += 1
        return await self.inner.reclaim(idle)

    async def extend(self, delivery: Delivery, within: timedelta) -> Delivery | None:
        self.calls["extend"] += 1
        return await self.inner.extend(delivery, within)

    async def cancel(self, workflow: str) -> int:
        self.calls["cancel"] += 1
        return await self.inner.cancel(workflow)


async def accept(run: Run) -> int:
    return await run.step("accepted", lambda: 1, as_int)


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def idle_cost(seconds: float) -> dict[str, object]:
    """Store calls per second of a default-configured worker with nothing to do."""
    calls: Counter[str] = Counter()
    durable = SplitDurable(
        CountingCheckpointer(MemoryCheckpointer(), calls),
        CountingScheduler(MemoryScheduler(), calls),
    )
    task = asyncio.create_task(work(durable, accept))
    started = time.perf_counter()
    await asyncio.sleep(seconds)
    elapsed = time.perf_counter() - started
    await stop(task)
    # Count what the worker did while running, not the calls its shutdown makes (none, idle).
    per_second = {name: round(count / elapsed, 3) for name, count in sorted(calls.items())}
    return {
        "seconds": round(elapsed, 3),
        "settings": "work() defaults: tick 1 s, within 5 s, sweep 5 s; MemoryScheduler lease 30 s",
        "calls": dict(sorted(calls.items())),
        "calls_per_second": per_second,
        "total_calls_per_second": round(sum(calls.values()) / elapsed, 3),
        "target_calls_per_second": 2.0,
    }


def percentile(ordered: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, round(fraction * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


async def submit_to_first_pass(arrivals: int, rate: float) -> dict[str, object]:
    """Open-loop arrivals at `rate` a second; latency from `arrive` to "started"."""
    durable = SplitDurable(MemoryCheckpointer(), MemoryScheduler())
    submitted: dict[str, float] = {}
    started: dict[str, float] = {}
    all_started = asyncio.Event()

    def observer(event: Event) -> None:
        if event.kind == "started" and event.workflow not in started:
            started[event.workflow] = time.perf_counter()
            if len(started) == arrivals:
                all_started.set()

    task = asyncio.create_task(work(durable, accept, observer=observer))
    await asyncio.sleep(0.2)  # let the worker reach its first read
    origin = time.perf_counter()
    late = 0
    for n in range(arrivals):
        due = origin + n / rate
        wait = due - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        else:
            late += 1
        workflow = f"order-{n}"
        submitted[workflow] = time.perf_counter()
        await durable.arrive(workflow, "order", {"n": n})
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_started.wait(), 10)
    await stop(task)

    latencies = sorted(
        (started[workflow] - submitted[workflow]) * 1000
        for workflow in submitted
        if workflow in started
    )
    return {
        "arrivals": arrivals,
        "rate_per_second": rate,
        "arrivals_behind_schedule": late,
        "started": len(latencies),
        "latency_ms": {
            "p50": round(percentile(latencies, 0.50), 4),
            "p90": round(percentile(latencies, 0.90), 4),
            "p99": round(percentile(latencies, 0.99), 4),
            "max": round(latencies[-1], 4),
            "mean": round(sum(latencies) / len(latencies), 4),
        },
        "target_p50_ms": 0.3,
    }


def revision() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "durability"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}{'+dirty' if dirty else ''}"


async def main(arguments: argparse.Namespace) -> dict[str, object]:
    begun = datetime.now(UTC).isoformat()
    idle = await idle_cost(arguments.idle_seconds)
    print(f"idle worker: {idle['total_calls_per_second']} store calls/s (target <= 2)")
    print(f"  by method: {idle['calls_per_second']}")
    latency = await submit_to_first_pass(arguments.arrivals, arguments.rate)
    percentiles = latency["latency_ms"]
    print(
        f"submit-to-first-pass, {arguments.arrivals} arrivals at {arguments.rate}/s:"
        f" {percentiles} (target p50 <= 0.3 ms)"
    )
    return {
        "benchmark": "bench_memory",
        "started_at": begun,
        "git_revision": revision(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cores": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "idle": idle,
        "submit_to_first_pass": latency,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--arrivals", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench_memory.json")
    options = parser.parse_args()
    report = asyncio.run(main(options))
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {options.out}")
