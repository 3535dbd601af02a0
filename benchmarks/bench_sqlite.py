"""The cost of the SQLite store's operations, on a fresh file in a temp dir.

Measures, closed loop in one process (latency per operation, not throughput under load; the
lab's `latency` experiment is the open-loop measure):

- `claim` + `record` + `release`: one pass that writes one step;
- `make_ready` -> `next_ready` -> `done`: one wakeup;
- wakeup latency: `make_ready` -> a *blocked* `next_ready` returning, when the `make_ready`
  comes from this database object (the in-process signal) and from another connection to the
  file (as another process would: only the poll finds it), at the default 50 ms poll;
- one-step workflows a second: make_ready N, then take/claim/load/record/release/done each;
- an idle `next_ready`: statements a second.

Statements and transactions per operation are counted from SQLite's own trace of both
connections, in a separate run (tracing costs time). Run with each `synchronous` setting.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_sqlite.py [--iterations 2000]

Prints a table and writes results/bench_sqlite.json. Never asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiosqlite

from durability.sqlite import (
    SqliteCheckpointer,
    SqliteDatabase,
    SqliteScheduler,
    Synchronous,
    migrate,
    open_database,
)

RESULTS = Path(__file__).resolve().parent.parent / "results" / "bench_sqlite.json"
LONG = timedelta(seconds=30)
POLL = timedelta(milliseconds=50)


def _percentile(ordered: list[float], fraction: float) -> float:
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": _percentile(ordered, 0.5) * 1000,
        "p99_ms": _percentile(ordered, 0.99) * 1000,
        "mean_ms": statistics.fmean(ordered) * 1000,
        "max_ms": ordered[-1] * 1000,
    }


class Tally:
    """Counts the statements SQLite runs, by kind (BEGIN = one write transaction)."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()

    def __call__(self, sql: str) -> None:
        lines = [line for line in sql.strip().splitlines() if not line.lstrip().startswith("--")]
        words = " ".join(lines).split()
        self.kinds[words[0].upper() if words else "?"] += 1

    def per(self, operations: int) -> dict[str, float]:
        counted = {kind: count / operations for kind, count in sorted(self.kinds.items())}
        counted["statements"] = sum(self.kinds.values()) / operations
        counted["write_transactions"] = self.kinds["BEGIN"] / operations
        return counted


async def _counted(
    database: SqliteDatabase, operations: int, run: Callable[[], Awaitable[None]]
) -> dict[str, float]:
    tally = Tally()
    await database.trace(tally)
    await run()
    await database.trace(None)
    return tally.per(operations)


# --- the operations ---------------------------------------------------------------------


async def claim_record_release(checkpointer: SqliteCheckpointer, workflow: str) -> None:
    holder = await checkpointer.claim(workflow, LONG, LONG)
    assert holder is not None
    await checkpointer.record(holder, "step", {"n": 1})
    await checkpointer.release(holder)


async def wakeup(scheduler: SqliteScheduler, workflow: str) -> None:
    await scheduler.make_ready(workflow)
    delivery = await scheduler.next_ready(LONG)
    assert delivery is not None
    await scheduler.done(delivery)


async def one_step_pass(checkpointer: SqliteCheckpointer, scheduler: SqliteScheduler) -> bool:
    delivery = await scheduler.next_ready(timedelta(milliseconds=1))
    if delivery is None:
        return False
    holder = await checkpointer.claim(delivery.workflow, LONG, LONG)
    assert holder is not None
    await checkpointer.load(delivery.workflow)
    await checkpointer.record(holder, "step", True)
    await checkpointer.release(holder)
    await scheduler.done(delivery)
    return True


# --- the measurements -------------------------------------------------------------------


async def time_each(iterations: int, run: Callable[[int], Awaitable[None]]) -> list[float]:
    samples = []
    for n in range(iterations):
        started = time.perf_counter()
        await run(n)
        samples.append(time.perf_counter() - started)
    return samples


async def blocked_wakeup(
    waiter: SqliteScheduler, maker: SqliteScheduler, samples: int
) -> list[float]:
    """make_ready at a random moment -> the blocked next_ready returns (make_ready included)."""
    latencies = []
    for n in range(samples):
        reader = asyncio.create_task(waiter.next_ready(LONG))
        await asyncio.sleep(random.uniform(0.02, 0.12))  # uniform over the poll's phase
        started = time.perf_counter()
        await maker.make_ready(f"blocked-{n}")
        delivery = await reader
        latencies.append(time.perf_counter() - started)
        assert delivery is not None
        await waiter.done(delivery)
    return latencies


async def throughput(
    checkpointer: SqliteCheckpointer, scheduler: SqliteScheduler, count: int, tasks: int
) -> float:
    for n in range(count):
        await scheduler.make_ready(f"batch-{tasks}-{n}")

    async def drain() -> None:
        while await one_step_pass(checkpointer, scheduler):
            pass

    started = time.perf_counter()
    await asyncio.gather(*(drain() for _ in range(tasks)))
    return count / (time.perf_counter() - started)


async def bench(directory: Path, synchronous: Synchronous, iterations: int) -> dict[str, Any]:
    path = directory / f"bench-{synchronous.lower()}.db"
    database = await open_database(path, synchronous=synchronous)
    other = await open_database(path, synchronous=synchronous)
    try:
        await migrate(database)
        checkpointer = SqliteCheckpointer(database)
        scheduler = SqliteScheduler(database, queue="wakeups", poll=POLL)
        row: dict[str, Any] = {"synchronous": synchronous, "iterations": iterations}

        passes = await time_each(iterations, lambda n: claim_record_release(checkpointer, f"p{n}"))
        row["claim_record_release"] = _summary(passes)
        trips = await time_each(iterations, lambda n: wakeup(scheduler, f"w{n}"))
        row["make_ready_next_ready_done"] = _summary(trips)

        counted = 200

        async def count_passes() -> None:
            for n in range(counted):
                await claim_record_release(checkpointer, f"counted-{n}")

        async def count_wakeups() -> None:
            for n in range(counted):
                await wakeup(scheduler, f"counted-{n}")

        row["claim_record_release"]["per_op"] = await _counted(database, counted, count_passes)
        row["make_ready_next_ready_done"]["per_op"] = await _counted(
            database, counted, count_wakeups
        )

        blocked = SqliteScheduler(database, queue="blocked", poll=POLL)
        samples = max(20, iterations // 20)
        row["blocked_wakeup_same_database"] = _summary(
            await blocked_wakeup(blocked, blocked, samples)
        )
        row["blocked_wakeup_other_connection_poll_50ms"] = _summary(
            await blocked_wakeup(blocked, SqliteScheduler(other, queue="blocked"), samples)
        )

        for tasks in (1, 4):
            work = SqliteScheduler(database, queue=f"throughput-{tasks}", poll=POLL)
            row[f"one_step_workflows_per_second_{tasks}_task"] = await throughput(
                checkpointer, work, iterations, tasks
            )
        pass_ops = SqliteScheduler(database, queue="counted-pass", poll=POLL)
        for n in range(counted):
            await pass_ops.make_ready(f"counted-pass-{n}")

        async def count_one_step() -> None:
            while await one_step_pass(checkpointer, pass_ops):
                pass

        row["one_step_workflow_per_op"] = await _counted(database, counted, count_one_step)

        idle = SqliteScheduler(database, queue="idle", poll=POLL)
        tally = Tally()
        await database.trace(tally)
        started = time.perf_counter()
        await idle.next_ready(timedelta(seconds=2))
        elapsed = time.perf_counter() - started
        await database.trace(None)
        row["idle_next_ready_statements_per_second"] = sum(tally.kinds.values()) / elapsed
        row["idle_next_ready_write_transactions"] = tally.kinds["BEGIN"]
        return row
    finally:
        await other.close()
        await database.close()


def _revision() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _print(row: dict[str, Any]) -> None:
    print(f"\nsynchronous={row['synchronous']}  ({row['iterations']} iterations)")
    for name in (
        "claim_record_release",
        "make_ready_next_ready_done",
        "blocked_wakeup_same_database",
        "blocked_wakeup_other_connection_poll_50ms",
    ):
        summary = row[name]
        line = f"  {name:44s} p50 {summary['p50_ms']:7.3f} ms  p99 {summary['p99_ms']:7.3f} ms"
        if "per_op" in summary:
            per = summary["per_op"]
            line += f"  {per['statements']:.1f} stmts, {per['write_transactions']:.1f} tx"
        print(line)
    for tasks in (1, 4):
        rate = row[f"one_step_workflows_per_second_{tasks}_task"]
        print(f"  one-step workflows/s, {tasks} task(s): {rate:8.0f}")
    per = row["one_step_workflow_per_op"]
    print(f"  per one-step workflow: {per['statements']:.1f} statements, "
          f"{per['write_transactions']:.1f} write transactions  {per}")
    print(f"  idle next_ready: {row['idle_next_ready_statements_per_second']:.1f} statements/s, "
          f"{row['idle_next_ready_write_transactions']} write transactions")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--synchronous", nargs="+", default=["NORMAL", "FULL"])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-sqlite-") as directory:
        for synchronous in args.synchronous:
            row = await bench(Path(directory), synchronous, args.iterations)
            _print(row)
            rows.append(row)
    report = {
        "benchmark": "SQLite store operations, closed loop, one process, a file in a temp dir",
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "aiosqlite": aiosqlite.__version__,
        "cores": os.cpu_count(),
        "poll_ms": POLL / timedelta(milliseconds=1),
        "rows": rows,
        "git_revision": _revision(),
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    asyncio.run(main())
