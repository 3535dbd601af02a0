"""The cost of the Postgres store's operations, and how fast an idle worker wakes.

Runs against the server at POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432) in a
database of its own (`durability_bench_<random>`), created, migrated and dropped here. Measures:

- one claim+record+release, one make_ready -> next_ready -> done, and one whole one-step pass
  as the worker runs it (arrive -> take -> record -> finish), closed loop (latency per cycle
  from one client);
- make_ready (from another pool) -> a blocked next_ready returning, open loop at 20/s, with
  notifications (LISTEN/NOTIFY) and without (the 50 ms poll);
- statements and server round trips per public operation, counted on the client: a cursor that
  counts `execute`, a connection that counts every exchange that actually waited on the
  server (BEGIN and COMMIT included), and `wire.exchange`, the libpq path most statements
  take (each call one round trip, however many statements it pipelines);
- what an idle worker costs: statements a second of a next_ready loop (plus its wake_due timer),
  and of a whole idle `work()`, counted on the client and from pg_stat_database (transactions
  committed in the benchmark's database, which nobody else uses).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_postgres.py [--iterations 1000] [--idle 10]

Prints a summary and writes results/bench_postgres.json. Never asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool
from psycopg import AsyncConnection, AsyncCursor
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from durability.interfaces import Delivery, Pass, claimed
from durability.postgres import (
    PostgresCheckpointer,
    PostgresDurable,
    PostgresScheduler,
    SqlEffect,
    migrate,
    wire,
)

RESULTS = Path(__file__).resolve().parent.parent / "results" / "bench_postgres.json"
BUDGET = timedelta(minutes=1)
ALIVE = timedelta(seconds=30)
RATE = 20.0  # open-loop arrivals a second for the wakeup latency


class Tally:
    """What the client sent: statements by their first word, and server round trips."""

    def __init__(self) -> None:
        self.statements: Counter[str] = Counter()
        self.round_trips = 0

    def snapshot(self) -> tuple[Counter[str], int]:
        return Counter(self.statements), self.round_trips


TALLY = Tally()


def _count_exchanges() -> None:
    """Count what `wire.exchange` sends on a counted pool's connections: the statements, and
    one round trip per call (its pipeline is written at once and read to its last Sync)."""
    exchange = wire.exchange

    async def counted(conn: Any, sent: Any, *more: Any) -> Any:
        if isinstance(conn, CountingConnection):
            for sql, _ in sent:
                TALLY.statements[_verb(sql)] += 1
            TALLY.round_trips += 1
        return await exchange(conn, sent, *more)

    wire.exchange = counted


def _verb(query: Any) -> str:
    text = str(query).lstrip()
    return (text.split(None, 1)[0] if text else "?").upper()


class CountingCursor(AsyncCursor[Any]):
    async def execute(self, query: Any, params: Any = None, **options: Any) -> Any:
        TALLY.statements[_verb(query)] += 1
        return await super().execute(query, params, **options)


class CountingConnection(AsyncConnection[Any]):
    """Counts each exchange with the server: a generator that had to wait for the socket."""

    # The signature is psycopg's own, overridden; the timeout is its parameter, not ours.
    async def wait(
        self,
        gen: Any,
        interval: float = 0.1,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> Any:
        def watched() -> Generator[Any, Any, Any]:
            counted = False
            sent: Any = None
            while True:
                try:
                    state = gen.send(sent)
                except StopIteration as stop:
                    return stop.value
                if not counted:
                    counted = True
                    TALLY.round_trips += 1
                sent = yield state

        return await super().wait(watched(), interval, timeout)


def _percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


def _summary(durations_ms: list[float]) -> dict[str, float]:
    ordered = sorted(durations_ms)
    return {
        "n": len(ordered),
        "p50_ms": round(_percentile(ordered, 0.5), 3),
        "p90_ms": round(_percentile(ordered, 0.9), 3),
        "p99_ms": round(_percentile(ordered, 0.99), 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
        "max_ms": round(ordered[-1], 3),
    }


@contextlib.asynccontextmanager
async def _database(server: str) -> AsyncIterator[str]:
    name = f"durability_bench_{uuid.uuid4().hex[:10]}"
    admin = make_conninfo(server, dbname="postgres")
    async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
        await conn.execute(f'CREATE DATABASE "{name}"')  # a generated name, nothing external
    try:
        yield make_conninfo(server, dbname=name)
    finally:
        async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _pool(url: str, size: int = 4, counted: bool = True) -> AsyncConnectionPool[Any]:
    kwargs: dict[str, Any] = {"autocommit": True}
    if counted:
        kwargs["cursor_factory"] = CountingCursor
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        url,
        min_size=size,
        max_size=size,
        kwargs=kwargs,
        connection_class=CountingConnection if counted else AsyncConnection,
        open=False,
    )
    await pool.open(wait=True)
    return pool


async def _closed_loop(
    n: int, cycle: Callable[[int], Awaitable[object]]
) -> tuple[dict[str, float], dict[str, float]]:
    for i in range(min(100, n)):  # warm up: connections open, statements prepared
        await cycle(-1 - i)
    before, trips_before = TALLY.snapshot()
    durations: list[float] = []
    for i in range(n):
        start = time.perf_counter()
        await cycle(i)
        durations.append((time.perf_counter() - start) * 1000)
    after, trips_after = TALLY.snapshot()
    after.subtract(before)
    per_op: dict[str, float] = {verb: count / n for verb, count in after.items() if count}
    per_op["statements"] = sum(after.values()) / n
    per_op["round_trips"] = (trips_after - trips_before) / n
    return _summary(durations), per_op


async def _per_operation(pool: AsyncConnectionPool[Any], prefix: str) -> dict[str, Any]:
    """Statements and round trips of one call of each public operation."""
    checkpointer = PostgresCheckpointer(pool=pool)
    scheduler = PostgresScheduler(pool=pool, queue=f"{prefix}-ops", notify=False)
    durable = PostgresDurable(checkpointer, scheduler)
    workflow = f"{prefix}-ops"
    await pool.wait()
    holder: Pass | None = None
    delivery: Delivery | None = None
    counts: dict[str, Any] = {}

    async def count(name: str, call: Callable[[], Awaitable[Any]]) -> Any:
        before, trips = TALLY.snapshot()
        result = await call()
        after, trips_after = TALLY.snapshot()
        after.subtract(before)
        counts[name] = {"statements": sum(after.values()), "round_trips": trips_after - trips}
        return result

    holder = await count("claim", lambda: checkpointer.claim(workflow, BUDGET, ALIVE))
    assert holder is not None
    await count("record", lambda: checkpointer.record(holder, "step", 1))
    await count("transact", lambda: checkpointer.transact(holder, "effect", SqlEffect("SELECT 1")))
    await count("load", lambda: checkpointer.load(workflow))
    await count("history", lambda: checkpointer.history(workflow))
    await count("supply", lambda: checkpointer.supply(workflow, "given", 1))
    await count("append", lambda: checkpointer.append(workflow, 1))
    await count("renew", lambda: checkpointer.renew(holder, ALIVE))
    await count("extend (checkpointer)", lambda: checkpointer.extend(holder, BUDGET, ALIVE))
    await count("release", lambda: checkpointer.release(holder))
    await count("make_ready", lambda: scheduler.make_ready(workflow))
    delivery = await count("next_ready (a row ready)", lambda: scheduler.next_ready(ALIVE))
    assert delivery is not None
    await count("extend (scheduler)", lambda: scheduler.extend(delivery, ALIVE))
    when = datetime.now(UTC) + timedelta(hours=1)
    await count("wake_at", lambda: scheduler.wake_at(delivery, when))
    await count("done", lambda: scheduler.done(delivery))
    await count("wake_due", lambda: scheduler.wake_due())
    await count("reclaim", lambda: scheduler.reclaim(ALIVE))
    await count("cancel", lambda: scheduler.cancel(workflow))
    await count("arrive", lambda: durable.arrive(workflow, "arrived", 1))
    taken = await count("take (durable, a row ready)", lambda: durable.take(ALIVE, BUDGET, ALIVE))
    assert taken is not None and taken.holder is not None
    await count("finish", lambda: durable.finish(taken.holder, taken.delivery))
    await count("deliver", lambda: durable.deliver(workflow, 1))
    await count("delete", lambda: durable.delete(workflow))
    await count("discard", lambda: checkpointer.discard(workflow))
    return counts


async def _reader(url: str, queue: str, notify: bool, n: int) -> None:
    """The blocked reader, run as its own process (`--reader`): a worker and the process that
    makes work ready are different processes, and sharing one event loop would charge each
    with the other's Python time. Prints `workflow perf_counter` for every delivery."""
    pool = await _pool(url, size=2, counted=False)
    reader = PostgresScheduler(pool=pool, queue=queue, notify=notify)
    try:
        await reader.next_ready(timedelta(milliseconds=100))  # start listening, warm up
        print("ready", flush=True)
        for _ in range(n):
            delivery = await reader.next_ready(timedelta(seconds=10))
            if delivery is None:
                break
            print(delivery.workflow, time.perf_counter(), flush=True)
            await reader.done(delivery)
    finally:
        await reader.close()
        await pool.close()


async def _wakeups(
    url: str, prefix: str, notify: bool, n: int, rate: float = RATE
) -> dict[str, Any]:
    """make_ready at RATE/s from this process; each sample is the time from just before the
    make_ready call to the blocked next_ready in the reader process returning that workflow
    (perf_counter is the system's monotonic clock, shared by both processes)."""
    queue = f"{prefix}-wake-{'notify' if notify else 'poll'}-{rate:g}"
    producers = await _pool(url, size=2, counted=False)
    producer = PostgresScheduler(pool=producers, queue=queue, notify=False)
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--reader", url, queue, str(int(notify)), str(n),
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdout is not None
    sent: dict[str, float] = {}
    latencies: list[float] = []
    try:
        assert (await child.stdout.readline()).strip() == b"ready"

        async def collect() -> None:
            assert child.stdout is not None
            while len(latencies) < n and (line := await child.stdout.readline()):
                workflow, at = line.decode().split()
                latencies.append((float(at) - sent[workflow]) * 1000)

        collecting = asyncio.create_task(collect())
        start = time.perf_counter()
        for i in range(n):
            # Open loop: arrivals on a fixed schedule, whatever the reader is doing.
            await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
            workflow = f"{queue}-{i}"
            sent[workflow] = time.perf_counter()
            await producer.make_ready(workflow)
        await asyncio.wait_for(collecting, 30)
    finally:
        await child.wait()
        await producers.close()
    poll = PostgresScheduler(pool=producers, notify=notify).poll
    return {
        "notify": notify,
        "poll_ms": poll / timedelta(milliseconds=1),
        "arrivals_per_second": rate,
        **_summary(latencies),
    }


async def _idle_gap_floor(url: str, gap: float, n: int = 100) -> dict[str, Any]:
    """The machine's floor: a bare SELECT 1 on a connection left idle for `gap` seconds first.
    On a VM the processes involved have gone to sleep by then, and waking them is most of the
    cost of any open-loop wakeup; a wakeup crosses several such hops."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        durations = []
        for _ in range(n):
            await asyncio.sleep(gap)
            start = time.perf_counter()
            await conn.execute("SELECT 1")
            durations.append((time.perf_counter() - start) * 1000)
    return {"idle_gap_ms": gap * 1000, **_summary(durations)}


async def _committed(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])


async def _idle(url: str, prefix: str, seconds: float, kind: str) -> dict[str, Any]:
    """Statements a second while idle: a reader loop plus its wake_due timer, or work()."""
    pool = await _pool(url, size=2)
    queue = f"{prefix}-idle-{kind}"
    notify = kind != "next_ready loop, notify=False"
    scheduler = PostgresScheduler(pool=pool, queue=queue, notify=notify)
    await asyncio.sleep(1.5)  # let earlier statistics settle before the first reading
    committed_before = await _committed(url)
    began = time.perf_counter()
    before = sum(TALLY.statements.values())

    async def reader_loop() -> None:
        while True:
            await scheduler.next_ready(timedelta(seconds=5))

    async def timer_loop() -> None:
        while True:
            await scheduler.wake_due()
            await asyncio.sleep(5)

    if kind.startswith("work()"):
        from durability.worker import work

        durable = PostgresDurable(PostgresCheckpointer(pool=pool), scheduler)

        async def body(run: Any) -> None:
            return None

        tasks = [asyncio.create_task(work(durable, body))]
    else:
        tasks = [asyncio.create_task(reader_loop()), asyncio.create_task(timer_loop())]
    await asyncio.sleep(seconds)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    elapsed = time.perf_counter() - began
    sent = sum(TALLY.statements.values()) - before
    await scheduler.close()
    await pool.close()
    await asyncio.sleep(1.5)  # backends report their counters when they go idle
    committed = await _committed(url) - committed_before - 1  # minus the first reading's own
    return {
        "kind": kind,
        "seconds": round(elapsed, 2),
        "client_statements_per_second": round(sent / elapsed, 3),
        "server_transactions_per_second": round(committed / elapsed, 3),
        "poll_ms": scheduler.poll / timedelta(milliseconds=1),
    }


async def main(iterations: int, idle_seconds: float) -> None:
    _count_exchanges()
    server = os.environ.get("POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432")
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    async with _database(server) as url:
        pool = await _pool(url)
        await migrate(pool)
        checkpointer = PostgresCheckpointer(pool=pool)
        scheduler = PostgresScheduler(pool=pool, queue=f"{prefix}-cycle", notify=False)
        async with pool.connection() as conn:
            cursor = await conn.execute("SHOW server_version")
            version = await cursor.fetchone()

        async def claim_record_release(i: int) -> None:
            holder = await claimed(checkpointer, f"{prefix}-crr-{i}", BUDGET, ALIVE)
            await checkpointer.record(holder, "step", {"n": i})
            await checkpointer.release(holder)

        async def ready_take_done(i: int) -> None:
            await scheduler.make_ready(f"{prefix}-rtd-{i}")
            delivery = await scheduler.next_ready(ALIVE)
            assert delivery is not None
            await scheduler.done(delivery)

        durable = PostgresDurable(
            checkpointer, PostgresScheduler(pool=pool, queue=f"{prefix}-pass", notify=False)
        )

        async def worker_pass(i: int) -> None:
            # A one-step pass as the worker runs it, after the arrive that asks for it.
            await durable.arrive(f"{prefix}-pass-{i}", "order", i)
            taken = await durable.take(ALIVE, BUDGET, ALIVE)
            assert taken is not None and taken.holder is not None
            await checkpointer.record(taken.holder, "step", {"n": i})
            await durable.finish(taken.holder, taken.delivery)

        held = await claimed(checkpointer, f"{prefix}-transact", BUDGET, ALIVE)

        async def transact(i: int) -> None:
            await checkpointer.transact(held, f"effect-{i}", SqlEffect("SELECT %s", (i,)))

        cycles: dict[str, Any] = {}
        for name, cycle in (
            ("claim+record+release", claim_record_release),
            ("make_ready+next_ready+done", ready_take_done),
            ("arrive+take+record+finish", worker_pass),
            ("transact (SqlEffect SELECT)", transact),
        ):
            timing, per_op = await _closed_loop(iterations, cycle)
            cycles[name] = {**timing, "per_cycle": per_op}
        operations = await _per_operation(pool, prefix)
        await pool.close()

        wakeups = [
            await _wakeups(url, prefix, notify=True, n=200),
            await _wakeups(url, prefix, notify=False, n=200),
            await _wakeups(url, prefix, notify=True, n=400, rate=200.0),
        ]
        floor = [await _idle_gap_floor(url, gap) for gap in (0.0, 1 / 200, 1 / RATE)]
        idle = [
            await _idle(url, prefix, idle_seconds, "next_ready loop + wake_due every 5 s"),
            await _idle(url, prefix, idle_seconds, "next_ready loop, notify=False"),
            await _idle(url, prefix, idle_seconds, "work() with its defaults"),
        ]

    result = {
        "benchmark": "Postgres store operations and wakeups, one process, a database of its own",
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "server": version[0] if version else None,
        "psycopg": psycopg.__version__,
        "psycopg_pool": psycopg_pool.__version__,
        "cores": os.cpu_count(),
        "pool": "autocommit (kwargs={'autocommit': True})",
        "iterations": iterations,
        "cycles": cycles,
        "per_operation": operations,
        "wakeup_open_loop_per_second": RATE,
        "wakeups": wakeups,
        "select_1_after_idle_gap": floor,
        "idle": idle,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    for name, row in cycles.items():
        print(f"{name:32} p50 {row['p50_ms']:.3f} ms  p99 {row['p99_ms']:.3f} ms  "
              f"{row['per_cycle']['statements']:.0f} statements, "
              f"{row['per_cycle']['round_trips']:.0f} round trips")
    for row in wakeups:
        print(f"make_ready -> blocked next_ready, notify={row['notify']!s:5} "
              f"at {row['arrivals_per_second']:g}/s "
              f"p50 {row['p50_ms']:.3f} ms  p99 {row['p99_ms']:.3f} ms")
    for row in floor:
        print(f"SELECT 1 after {row['idle_gap_ms']:.0f} ms idle: p50 {row['p50_ms']:.3f} ms")
    for row in idle:
        print(f"idle: {row['kind']:40} {row['client_statements_per_second']:.2f} statements/s "
              f"(server: {row['server_transactions_per_second']:.2f} transactions/s)")
    print("per operation:", json.dumps(operations))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reader"]:
        url, queue, notify, count = sys.argv[2:6]
        asyncio.run(_reader(url, queue, notify == "1", int(count)))
        raise SystemExit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds per idle measurement")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.iterations, arguments.idle))
