"""The worker end to end over every store: submit-to-first-pass latency, throughput, idle cost.

    .venv/bin/python benchmarks/bench_worker.py [--stores memory,redis-stream,...] [--quick]
        [--scenarios latency,throughput,idle]
    .venv/bin/python benchmarks/bench_worker.py --profile redis-stream   # cProfile, no files

`redis-set` is the set scheduler as shipped (with its doorbell); `redis-set-polled` the same
store with `doorbell=off`, i.e. the design as published, polling alone (latency and idle only:
a busy worker never waits, so its throughput is redis-set's).

Each store is opened through `open_durable`, isolated per run (its own Redis namespace, SQLite
file, Postgres queue in a throwaway database). Except on memory, the worker runs in a process
of its own (spawn) with the URL, so every number includes crossing processes.

1. Latency, open loop: this process calls `arrive` 20 times a second on average (Poisson
   arrivals from a fixed seed) for 45 s (900 submissions), while one worker runs;
   latency = the worker's "started" `Event.at` minus `time.time()` just before `arrive`.
2. Throughput: N workflows made ready first, then one worker process with `pool` 16/32/64
   runs a one-step body; passes a second = outcomes / (last outcome - first start). Round
   trips per pass from the server (Redis INFO commandstats; Postgres pg_stat_database) and
   from the worker process itself (Redis commands and Postgres statements it sent, store
   calls through a counting proxy of the checkpointer and scheduler).
3. Idle: a worker with default `work()` settings and nothing to do; store calls, server
   commands and the worker process's CPU per second. All stores idle at once (idle workers
   do not compete), which keeps a full run near five minutes.
0. Baseline: one trivial request to the server hot and after 50 ms idle (Redis PING,
   Postgres SELECT 1 and a committed INSERT), the floor under every hop of an open-loop
   submission on this machine.

SQLite statements are counted through the database's own `trace` hook, Postgres statements
by wrapping psycopg's cursor, Redis commands by wrapping the client: all in the worker process.

Redis: by default each Redis store gets a private `redis-server` (same binary as the shared
one, no persistence) so the server's counters hold only this benchmark's commands; pass
`--redis-url` to use a shared server instead (its counters then include other clients).
Redis 7.0 counts the commands a Lua script runs inside it in both `commandstats` and
`total_commands_processed`, so the server's totals are commands executed, not requests: the
round trips are the worker's own count (`worker_redis_*`: every command its clients sent).
Postgres' server totals are transactions (`xact_commit` + `xact_rollback`); its backends report
counts lazily, so the throughput run reads them after the worker process has exited.

Prints a table with the issues' targets beside each number and writes
results/bench_worker.csv (one row per store x scenario x metric x statistic) and
results/bench_worker.json (metadata). Never asserts a number.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import csv
import hashlib
import io
import json
import math
import multiprocessing
import os
import platform
import pstats
import random
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
# Run as a plain script from the repo: the package is not installed, so put its root first
# (spawned workers inherit sys.path from this process).
sys.path.insert(0, str(ROOT))

from durability import (  # noqa: E402
    Checkpointer,
    Delivery,
    Durable,
    Entry,
    Event,
    Pass,
    Recorded,
    Run,
    Scheduler,
    Taken,
    as_dict,
    work,
)
from durability.connect import open_durable  # noqa: E402

STORES = ("memory", "redis-stream", "redis-set", "redis-set-polled", "postgres", "sqlite")
# The set scheduler as the design publishes it (no doorbell: it polls alone). Its busy path is
# the set's with the doorbell, so only its latency and idle cost are measured.
NO_THROUGHPUT = ("redis-set-polled",)
RESULTS = ROOT / "results"
LEASE = timedelta(seconds=30)
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
POOLS = (16, 32, 64)
# Which poll intervals to measure latency at (None: the store's own default).
LATENCY_POLLS: dict[str, tuple[float | None, ...]] = {
    "memory": (None,),
    "redis-stream": (None,),
    "redis-set": (None,),
    "redis-set-polled": (50.0, 10.0),
    "postgres": (None,),
    "sqlite": (50.0,),
}


@dataclass(frozen=True, slots=True)
class Params:
    rate: float  # submissions a second, open loop
    latency_seconds: float
    workflows: int  # pre-loaded for the throughput run
    idle_seconds: float
    pools: tuple[int, ...]


SCENARIOS = ("latency", "throughput", "idle")
ARRIVAL_SEED = 20  # the open loop's Poisson schedule (see `submit_open_loop`)
FULL = Params(rate=20, latency_seconds=45, workflows=3000, idle_seconds=20, pools=POOLS)
QUICK = Params(rate=20, latency_seconds=5, workflows=1500, idle_seconds=8, pools=POOLS)


@dataclass(frozen=True, slots=True)
class Row:
    store: str
    scenario: str  # latency / throughput / idle, plus the poll when it matters
    metric: str
    statistic: str
    value: float
    unit: str
    pool: int | None = None
    poll_ms: float | None = None


# -- the body and the counting proxy ------------------------------------------------------


async def one_step(run: Run) -> object:
    """The workload: one step returning a small value."""
    return await run.step("charge", lambda: {"charged": True, "cents": 1250}, as_dict)


class Counting:
    """Forwards to a checkpointer or scheduler, counting each method call by name."""

    def __init__(self, target: object, counts: Counter[str], prefix: str) -> None:
        self._target = target
        self._counts = counts
        self._prefix = prefix

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)  # AttributeError keeps isinstance() honest
        if not callable(attribute):
            return attribute
        counts, label = self._counts, f"{self._prefix}.{name}"

        def counted(*args: Any, **kwargs: Any) -> Any:
            counts[label] += 1
            return attribute(*args, **kwargs)

        setattr(self, name, counted)  # later look-ups skip __getattr__
        return counted


class CountedDurable:
    """The store's own Durable, counted: its cross-store moves (arrive, deliver, delete,
    finish) go to the store's implementation, which may do each in one round trip, rather
    than being split into checkpointer and scheduler calls."""

    def __init__(self, durable: Durable, counts: Counter[str]) -> None:
        self._durable = cast(Durable, Counting(durable, counts, "durable"))
        self.checkpointer = cast(
            Checkpointer, Counting(durable.checkpointer, counts, "checkpointer")
        )
        self.scheduler = cast(Scheduler, Counting(durable.scheduler, counts, "scheduler"))
        if hasattr(durable, "readers"):  # what the store asks `work` for, counted or not
            self.readers = durable.readers

    async def arrive(self, workflow: str, key: str, value: object) -> Recorded:
        return await self._durable.arrive(workflow, key, value)

    async def deliver(self, workflow: str, value: object) -> Entry:
        return await self._durable.deliver(workflow, value)

    async def delete(self, workflow: str) -> int:
        return await self._durable.delete(workflow)

    async def take(self, within: timedelta, budget: timedelta, alive: timedelta) -> Taken | None:
        return await self._durable.take(within, budget, alive)

    async def finish(self, holder: Pass, delivery: Delivery) -> None:
        await self._durable.finish(holder, delivery)


def counted_durable(durable: Durable, counts: Counter[str]) -> Durable:
    return CountedDurable(durable, counts)


def count_redis_commands(counts: Counter[str]) -> None:
    """Count every command this process's redis.asyncio clients send, naming scripts by their
    file, whether sent alone, inside a pipeline or on a `Lane`; `round trips` counts each
    send-and-wait (a lone command, or a whole pipeline), which is what batching saves."""
    from redis.asyncio.client import Pipeline, Redis

    from durability.redis.lane import Lane
    from durability.redis.lua import source

    scripts: dict[str, str] = {}
    for path in (ROOT / "durability" / "redis").glob("*.lua"):
        for text in (source(path.stem), source("prelude") + source(path.stem)):
            scripts[hashlib.sha1(text.encode()).hexdigest()] = path.stem
    # The scripts `RedisDurable` composes from two bodies are named after their template.
    for template in ("take", "joined"):
        scripts.update(_composed_digests(template))

    def name_of(args: tuple[Any, ...]) -> str:
        name = str(args[0]).upper()
        if name == "EVALSHA":
            name = f"EVALSHA {scripts.get(str(args[1]), '?')}"
        return name

    original = Redis.execute_command
    original_pipeline = Pipeline.execute

    async def execute_command(self: Redis, *args: Any, **options: Any) -> Any:
        if isinstance(self, Pipeline):  # queued, counted when the pipeline is sent
            return await original(self, *args, **options)  # type: ignore[no-untyped-call]
        counts[name_of(args)] += 1
        counts["round trips"] += 1
        return await original(self, *args, **options)  # type: ignore[no-untyped-call]

    async def execute(self: Pipeline, raise_on_error: bool = True) -> Any:
        for command in self.command_stack:
            counts[name_of(command[0])] += 1
        if self.command_stack:
            counts["round trips"] += 1
        return await original_pipeline(self, raise_on_error)

    original_lane = Lane.execute

    async def lane_execute(self: Lane, commands: Any, **options: Any) -> list[Any]:
        for command in commands:
            counts[name_of(tuple(command))] += 1
        counts["round trips"] += 1
        return await original_lane(self, commands, **options)

    Redis.execute_command = execute_command  # type: ignore[method-assign]
    Pipeline.execute = execute  # type: ignore[method-assign]
    Lane.execute = lane_execute  # type: ignore[method-assign]


def _composed_digests(template: str) -> dict[str, str]:
    """Digests of the scripts `RedisDurable` composes on `template`, named `template:<parts>`."""
    from durability.redis.lua import source

    found: dict[str, str] = {}
    stems = [p.stem for p in (ROOT / "durability" / "redis").glob("*.lua")]
    for first in stems:
        for then in stems:
            if template == "take":
                text = (source("take").replace("--[[TAKE]]", source(first))
                        .replace("--[[CLAIM]]", source("prelude") + source(then)))
            else:
                text = source("prelude") + (source("joined").replace("--[[FIRST]]", source(first))
                                            .replace("--[[THEN]]", source(then)))
            found[hashlib.sha1(text.encode()).hexdigest()] = f"{first}+{then}"
    return found


def count_pg_statements(counts: Counter[str]) -> None:
    """Count every statement this process sends (through psycopg's cursors, and through
    `wire.exchange`), named by its .sql entry."""
    from psycopg import AsyncCursor

    from durability.postgres.statements import statements

    named: dict[str, str] = {}
    for sql_file in ("checkpointer.sql", "scheduler.sql", "durable.sql"):
        for name, text in statements(sql_file).items():
            named[text] = f"{sql_file.removesuffix('.sql')}.{name}"
    original = AsyncCursor.execute

    async def execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        text = query if isinstance(query, str) else str(query)
        counts[named.get(text, text.split(None, 1)[0].upper() if text.strip() else "?")] += 1
        return await original(self, query, params, **kwargs)

    AsyncCursor.execute = execute  # type: ignore[method-assign]

    # Most statements are written with libpq's calls, not through cursors: count there too
    # (a statement `exchange` hands back to a cursor is then counted twice: it was sent twice).
    from durability.postgres import wire

    exchange = wire.exchange

    async def exchanged(conn: Any, sent: Any, *more: Any) -> Any:
        for text, _ in sent:
            counts[named.get(text, text.split(None, 1)[0].upper() if text.strip() else "?")] += 1
        return await exchange(conn, sent, *more)

    wire.exchange = exchanged  # type: ignore[assignment]


async def count_sqlite_statements(
    durable: Durable, counts: Counter[str]
) -> Callable[[], None] | None:
    """Count every statement the store's SQLite connections run, through the database's own
    trace hook; return the function that names what was traced so far into `counts`.

    The hook runs on the connections' threads inside every statement, so it only appends the
    text (one atomic list append); naming (by the .sql entry whose text before its first
    parameter matches) waits until a snapshot, outside the measured span."""
    from durability.sqlite.database import SqliteDatabase, queries

    database = getattr(durable.checkpointer, "database", None)
    if not isinstance(database, SqliteDatabase):
        return None
    prefixes = []
    for file in ("checkpointer", "scheduler"):
        for name, text in queries(file).items():
            flat = " ".join(text.split())
            cut = min((i for i in (flat.find(":"), flat.find("?")) if i >= 0), default=len(flat))
            prefixes.append((flat[:cut], f"{file}.{name}"))
    prefixes.sort(key=lambda pair: -len(pair[0]))
    traced: list[str] = []
    named = 0

    def flush() -> None:
        nonlocal named
        upto = len(traced)
        for sql in traced[named:upto]:
            flat = " ".join(sql.split())
            name = next((n for prefix, n in prefixes if flat.startswith(prefix)), None)
            counts[name or flat.split(" ", 1)[0].upper()] += 1
        named = upto

    await database.trace(traced.append)
    return flush


# -- one worker, observed -------------------------------------------------------------------


def cpu_calibration(n: int = 10_000_000, repeat: int = 3) -> float:
    """Seconds this machine takes for a fixed pure-Python loop (best of `repeat`): this VM's
    CPU speed differs from day to day by 2x, so runs from different days are compared
    through it (a run whose calibration is twice as long had half the CPU)."""
    best = math.inf
    for _ in range(repeat):
        began = time.perf_counter()
        total = 0
        for i in range(n):
            total += i
        best = min(best, time.perf_counter() - began)
    return round(best, 4)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(slots=True)
class WorkerRun:
    """One `work()` task with an observer that keeps start times and counts outcomes."""

    durable: Durable
    pool: int | None
    expect: int | None
    counts: dict[str, Counter[str]]
    profile: bool = False
    before_snapshot: Callable[[], None] | None = None
    started: dict[str, float] = field(default_factory=dict)
    delivered: dict[str, float] = field(default_factory=dict)
    kinds: Counter[str] = field(default_factory=Counter)
    first_started: float | None = None
    last_outcome: float | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    profiler: cProfile.Profile | None = None

    def observe(self, event: Event) -> None:
        self.kinds[event.kind] += 1
        if event.kind == "delivered":
            self.delivered.setdefault(event.workflow, event.at)
        elif event.kind == "started":
            self.started.setdefault(event.workflow, event.at)
            if self.first_started is None:
                self.first_started = event.at
        elif event.kind == "outcome":
            self.last_outcome = event.at
            if self.expect is not None and self.kinds["outcome"] >= self.expect:
                self.finished.set()

    def start(self) -> None:
        calls = self.counts.setdefault("calls", Counter())
        options: dict[str, Any] = {} if self.pool is None else {"pool": self.pool}
        if self.profile:
            self.profiler = cProfile.Profile()
            self.profiler.enable()
        self.task = asyncio.create_task(
            work(counted_durable(self.durable, calls), one_step, observer=self.observe, **options)
        )

    def snapshot(self) -> dict[str, Any]:
        if self.before_snapshot is not None:
            self.before_snapshot()
        return {
            "at": time.time(),
            "cpu": cpu_seconds(),
            "counts": {name: dict(counter) for name, counter in self.counts.items()},
            "outcomes": self.kinds["outcome"],
            "first_started": self.first_started,
            "last_outcome": self.last_outcome,
        }

    async def stop(self) -> dict[str, Any]:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        profile = None
        if self.profiler is not None:
            self.profiler.disable()
            out = io.StringIO()
            stats = pstats.Stats(self.profiler, stream=out).strip_dirs()
            stats.sort_stats("cumulative").print_stats(25)
            stats.sort_stats("tottime").print_stats(15)
            profile = out.getvalue()
        return {"started": self.started, "delivered": self.delivered, "kinds": dict(self.kinds),
                "profile": profile}


# -- the worker process ---------------------------------------------------------------------


def _worker_process(conn: Connection, spec: dict[str, Any]) -> None:
    asyncio.run(_worker_main(conn, spec))


async def _worker_main(conn: Connection, spec: dict[str, Any]) -> None:
    counts: dict[str, Counter[str]] = {"calls": Counter()}
    url: str = spec["url"]
    if url.startswith("redis"):
        count_redis_commands(counts.setdefault("redis", Counter()))
    elif url.startswith("postgres"):
        count_pg_statements(counts.setdefault("statements", Counter()))
    poll = None if spec["poll_ms"] is None else timedelta(milliseconds=spec["poll_ms"])
    async with open_durable(url, lease=LEASE, poll=poll, housekeeping=True) as durable:
        flush = None
        if url.startswith("sqlite"):
            statements = counts.setdefault("statements", Counter())
            flush = await count_sqlite_statements(durable, statements)
        if spec.get("preload"):
            await preload(durable, spec["prefix"], spec["preload"])
        run = WorkerRun(durable, spec["pool"], spec.get("expect"), counts, spec["profile"], flush)
        conn.send(("ready", None))
        await _receive(conn, "go")
        conn.send(("going", run.snapshot()))
        run.start()
        announce = asyncio.create_task(_announce_done(conn, run))
        while (await asyncio.to_thread(conn.recv))[0] == "mark":
            conn.send(("marked", run.snapshot()))
        announce.cancel()
        result = await run.stop()
    conn.send(("result", result))
    conn.close()


async def _announce_done(conn: Connection, run: WorkerRun) -> None:
    if run.expect is None:
        return
    await run.finished.wait()
    await asyncio.sleep(0.2)  # let the last passes' release/done land before counting
    conn.send(("done", run.snapshot()))


async def _receive(conn: Connection, kind: str, patience: float = 120.0) -> Any:
    def wait() -> Any:
        if not conn.poll(patience):
            raise TimeoutError(f"no {kind!r} from the worker process in {patience} s")
        return conn.recv()

    message = await asyncio.to_thread(wait)
    if message[0] != kind:
        raise RuntimeError(f"expected {kind!r} from the worker process, got {message[0]!r}")
    return message[1]


class WorkerProcess:
    """A worker in a spawned process, spoken to through a pipe: ours by default, or whatever
    `target` runs (bench_rivals starts the rivals' workers through it), speaking the same
    messages (ready, going, marked, done, result)."""

    def __init__(
        self,
        spec: dict[str, Any],
        target: Callable[[Connection, dict[str, Any]], None] | None = None,
        patience: float = 180,
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, theirs = context.Pipe()
        self.patience = patience
        run = target or _worker_process
        self.process = context.Process(target=run, args=(theirs, spec), daemon=True)
        self.process.start()
        theirs.close()

    async def ready(self) -> None:
        await _receive(self.conn, "ready")

    async def go(self) -> dict[str, Any]:
        """Start `work()`; what the worker had counted just before."""
        self.conn.send(("go", None))
        return cast(dict[str, Any], await _receive(self.conn, "going"))

    async def mark(self) -> dict[str, Any]:
        self.conn.send(("mark", None))
        return cast(dict[str, Any], await _receive(self.conn, "marked"))

    async def done(self) -> dict[str, Any]:
        return cast(dict[str, Any], await _receive(self.conn, "done", self.patience))

    async def stop(self) -> dict[str, Any]:
        self.conn.send(("stop", None))
        result = cast(dict[str, Any], await _receive(self.conn, "result"))
        await asyncio.to_thread(self.process.join, 30)
        return result

    async def kill(self) -> None:
        """End it without its shutdown (which would talk to the server)."""
        self.process.kill()
        await asyncio.to_thread(self.process.join, 30)


# -- servers and isolation ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server of our own on a spare port, without persistence; stopped after."""
    port = _free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--loglevel", "warning"],
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                break
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(10)


@dataclass(slots=True)
class Stores:
    """Where each store lives for this run, and how to open a fresh corner of it."""

    redis: dict[str, str]  # store -> base URL
    pg_database: str | None
    sqlite_dir: Path
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    def url(self, store: str, phase: str) -> str:
        name = f"bw-{self.tag}-{phase}"
        if store == "memory":
            return "memory://"
        if store == "redis-stream":
            return f"{self.redis[store]}?scheduler=stream&namespace={name}"
        if store in ("redis-set", "redis-set-polled"):
            doorbell = "off" if store == "redis-set-polled" else "on"
            return f"{self.redis[store]}?scheduler=set&doorbell={doorbell}&namespace={name}"
        if store == "postgres":
            return f"postgresql://postgres@127.0.0.1:5432/{self.pg_database}?queue={name}"
        return f"sqlite://{self.sqlite_dir / name}.db"  # an absolute path: sqlite:///tmp/...


async def redis_counters(url: str) -> dict[str, int]:
    from redis.asyncio import Redis

    client = Redis.from_url(url, decode_responses=True)
    try:
        stats = await client.info("commandstats")
        total = (await client.info("stats"))["total_commands_processed"]
    finally:
        await client.aclose()
    counters = {name.removeprefix("cmdstat_"): int(s["calls"]) for name, s in stats.items()}
    counters["TOTAL"] = int(total)
    return counters


def redis_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Commands the server ran between two readings, without this benchmark's own INFO calls
    (and the CLIENT SETINFO / HELLO a fresh connection of ours sends)."""
    ours = ("info", "client|setinfo", "hello", "client", "ping")
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after if k not in ("TOTAL", *ours)}
    delta = {k: v for k, v in delta.items() if v}
    delta["TOTAL"] = sum(delta.values())
    return delta


PG_COLUMNS = ("xact_commit", "xact_rollback", "tup_returned", "tup_fetched", "tup_inserted",
              "tup_updated", "tup_deleted")


async def pg_counters(database: str) -> dict[str, int]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(PG_ADMIN, autocommit=True) as conn:
        cursor = await conn.execute(
            f"select {', '.join(PG_COLUMNS)} from pg_stat_database where datname = %s",
            (database,),
        )
        row = await cursor.fetchone()
    assert row is not None
    return dict(zip(PG_COLUMNS, (int(v) for v in row), strict=True))


@contextlib.contextmanager
def throwaway_database() -> Iterator[str]:
    import psycopg

    name = f"bench_worker_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- the measurements ------------------------------------------------------------------------


async def preload(durable: Durable, prefix: str, n: int, concurrency: int = 32) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            await durable.arrive(f"{prefix}-{i}", "order", {"sku": "A-1", "qty": 1, "n": i})

    await asyncio.gather(*(one(i) for i in range(n)))


def percentile(ordered: list[float], q: float) -> float:
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


async def submit_open_loop(
    durable: Durable, prefix: str, rate: float, seconds: float, arrived: dict[str, float]
) -> dict[str, float]:
    """`arrive` `rate` times a second on average, each submission its own task so a slow one
    delays none; when each was submitted (and, into `arrived`, when its `arrive` returned).

    The gaps are exponential (Poisson arrivals, from a fixed seed, so every run and every store
    gets the same schedule): at a fixed 50 ms gap a polling worker's 50 ms beat locks onto the
    submissions' phase, and its latency is wherever that phase happens to fall rather than the
    wait of a submission made at a random moment."""
    loop = asyncio.get_running_loop()
    submitted: dict[str, float] = {}
    gaps = random.Random(ARRIVAL_SEED)

    async def one(i: int) -> None:
        workflow = f"{prefix}-{i}"
        submitted[workflow] = time.time()
        await durable.arrive(workflow, "order", {"sku": "A-1", "qty": 1, "n": i})
        arrived[workflow] = time.time()

    tasks = []
    at = loop.time() + 0.05
    for i in range(round(rate * seconds)):
        delay = at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
        at += gaps.expovariate(rate)
    await asyncio.gather(*tasks)
    return submitted


async def latency(stores: Stores, store: str, poll_ms: float | None, p: Params) -> list[Row]:
    url = stores.url(store, f"lat{'' if poll_ms is None else int(poll_ms)}")
    prefix = f"lat-{uuid.uuid4().hex[:8]}"
    poll = None if poll_ms is None else timedelta(milliseconds=poll_ms)
    grace = 1.0 + 3 * (poll_ms or 0) / 1000
    # 900 submissions in a full run: a polled store's latency is spread evenly over a whole
    # poll, so its median scatters by about +-0.8 ms at a 50 ms poll (300 left +-1.5), and a
    # p99 is then the ninth slowest, not the third.
    seconds = p.latency_seconds
    arrived: dict[str, float] = {}
    if store == "memory":  # one process: submitter and worker share the store object
        async with open_durable(url, lease=LEASE) as durable:
            run = WorkerRun(durable, None, None, {"calls": Counter()})
            run.start()
            await submit_open_loop(durable, f"{prefix}-warm", 20, 0.5, {})
            submitted = await submit_open_loop(durable, prefix, p.rate, seconds, arrived)
            await asyncio.sleep(grace)
            result = await run.stop()
    else:
        worker = WorkerProcess(_spec(url, poll_ms, None, prefix))
        await worker.ready()
        await worker.go()
        async with open_durable(url, lease=LEASE, poll=poll) as durable:
            await submit_open_loop(durable, f"{prefix}-warm", 20, 0.5, {})
            await asyncio.sleep(0.5)
            submitted = await submit_open_loop(durable, prefix, p.rate, seconds, arrived)
            await asyncio.sleep(grace)
            result = await worker.stop()
    started: dict[str, float] = result["started"]
    delivered: dict[str, float] = result["delivered"]
    scenario = "latency" if poll_ms is None else f"latency poll={poll_ms:g}ms"
    # The headline, then its parts: the arrive call itself, the wait until the worker held a
    # delivery, and the claim between delivery and the pass starting.
    spans = {
        "submit_to_first_pass": (submitted, started),
        "arrive_call": (submitted, arrived),
        "submit_to_delivered": (submitted, delivered),
        "delivered_to_started": (delivered, started),
    }
    rows = []
    for metric, (begin, end) in spans.items():
        ms = sorted((end[w] - begin[w]) * 1000 for w in submitted if w in begin and w in end)
        stats = {"p50": percentile(ms, 0.5), "p90": percentile(ms, 0.9),
                 "p99": percentile(ms, 0.99), "max": ms[-1], "mean": sum(ms) / len(ms)}
        rows += [Row(store, scenario, metric, k, v, "ms", poll_ms=poll_ms)
                 for k, v in stats.items()]
    begun = [w for w in submitted if w in started]
    rows.append(Row(store, scenario, "submissions", "n", len(submitted), "count", None, poll_ms))
    rows.append(Row(store, scenario, "submissions", "never_started",
                    len(submitted) - len(begun), "count", None, poll_ms))
    return rows


def _spec(url: str, poll_ms: float | None, pool: int | None, prefix: str) -> dict[str, Any]:
    return {"url": url, "poll_ms": poll_ms, "pool": pool, "prefix": prefix, "profile": False}


def _per(counts: dict[str, int], by: float, unit: str, store: str, scenario: str,
         metric: str, pool: int | None) -> list[Row]:
    rows = [Row(store, scenario, metric, name, n / by, unit, pool)
            for name, n in sorted(counts.items()) if name != "TOTAL"]
    # "round trips" counts sends, not commands: it is a row of its own, not part of the total.
    total = counts.get("TOTAL", sum(n for name, n in counts.items() if name != "round trips"))
    rows.append(Row(store, scenario, metric, "total", total / by, unit, pool))
    return rows


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


async def server_counters(stores: Stores, store: str) -> dict[str, int] | None:
    if store in stores.redis:
        return await redis_counters(stores.redis[store])
    if store == "postgres" and stores.pg_database is not None:
        return await pg_counters(stores.pg_database)
    return None


def server_delta(store: str, before: dict[str, int] | None, after: dict[str, int] | None
                 ) -> dict[str, int] | None:
    if before is None or after is None:
        return None
    if store.startswith("redis"):
        return redis_delta(before, after)
    delta = _delta(before, after)
    delta["TOTAL"] = delta.get("xact_commit", 0) + delta.get("xact_rollback", 0)  # transactions
    return delta


async def throughput(stores: Stores, store: str, pool: int, p: Params,
                     profile: bool = False) -> tuple[list[Row], str | None]:
    url = stores.url(store, f"tp{pool}")
    prefix = f"tp-{uuid.uuid4().hex[:8]}"
    n = p.workflows
    extra: dict[str, Any] = {"expect": n, "profile": profile}
    if store == "memory":
        extra["preload"] = n  # the store lives in the worker's process
    else:
        loading = time.perf_counter()
        async with open_durable(url, lease=LEASE) as durable:
            await preload(durable, prefix, n)
        print(f"  preloaded {n} into {store} in {time.perf_counter() - loading:.1f} s", flush=True)
        await asyncio.sleep(0.3)  # let Postgres count the loader's exits before the baseline
    worker = WorkerProcess({**_spec(url, None, pool, prefix), **extra})
    await worker.ready()
    server_before = await server_counters(stores, store)
    before = await worker.go()
    after = await worker.done()
    server_after = await server_counters(stores, store) if store != "postgres" else None
    result = await worker.stop()
    if store == "postgres":  # its backends report their counts on exit
        await asyncio.sleep(0.5)
        server_after = await server_counters(stores, store)
    passes = after["outcomes"]
    seconds = after["last_outcome"] - after["first_started"]
    scenario = "throughput"
    rows = [
        Row(store, scenario, "passes_per_second", "rate", passes / seconds, "1/s", pool),
        Row(store, scenario, "passes", "n", passes, "count", pool),
        Row(store, scenario, "worker_cpu_per_pass", "mean",
            (after["cpu"] - before["cpu"]) / passes * 1000, "ms", pool),
        # CPU over the passes' span (start-up and the settling pause add a little CPU only).
        Row(store, scenario, "worker_cpu_busy", "fraction",
            (after["cpu"] - before["cpu"]) / seconds, "cpu/s", pool),
    ]
    for name, counted in after["counts"].items():
        was = before["counts"].get(name, {})
        rows += _per(_delta(was, counted), passes, "per pass", store, scenario,
                     f"worker_{name}_per_pass", pool)
    delta = server_delta(store, server_before, server_after)
    if delta is not None:
        rows += _per(delta, passes, "per pass", store, scenario, "server_per_pass", pool)
    # Anything but delivered/started/outcome means passes were repeated or stopped.
    rows += [Row(store, scenario, "events", kind, n, "count", pool)
             for kind, n in sorted(result["kinds"].items())]
    return rows, result["profile"]


async def idle(stores: Stores, selected: list[str], p: Params) -> list[Row]:
    """Every selected store's idle worker at once: idle workers do not compete."""
    workers = {s: WorkerProcess(_spec(stores.url(s, "idle"), None, None, "idle"))
               for s in selected}
    for worker in workers.values():
        await worker.ready()
        await worker.go()
    await asyncio.sleep(2.0)  # past start-up: prepare, the first reads, LISTEN
    server_before = {s: await server_counters(stores, s) for s in selected}
    marks_before = {s: await w.mark() for s, w in workers.items()}
    await asyncio.sleep(p.idle_seconds)
    server_after = {s: await server_counters(stores, s) for s in selected}
    marks_after = {s: await w.mark() for s, w in workers.items()}
    for worker in workers.values():
        await worker.stop()
    rows: list[Row] = []
    for s in selected:
        before, after = marks_before[s], marks_after[s]
        seconds = after["at"] - before["at"]
        scenario = "idle"
        rows.append(Row(s, scenario, "window", "seconds", seconds, "s"))
        rows.append(Row(s, scenario, "worker_cpu", "seconds", after["cpu"] - before["cpu"], "s"))
        rows.append(Row(s, scenario, "worker_cpu", "per_second",
                        (after["cpu"] - before["cpu"]) / seconds, "cpu/s"))
        for name, counted in after["counts"].items():
            rows += _per(_delta(before["counts"].get(name, {}), counted), seconds, "per s",
                         s, scenario, f"worker_{name}_per_second", None)
        delta = server_delta(s, server_before[s], server_after[s])
        if delta is not None:
            rows += _per(delta, seconds, "per s", s, scenario, "server_per_second", None)
    return rows


async def baseline(stores: Stores, store: str, samples: int = 40) -> list[Row]:
    """This machine's floor under any latency: one trivial request hot (back to back) and after
    50 ms idle, as the open loop's requests are. A VM's idle cores wake slowly, so the second
    is several times the first, and every hop of a submission pays it."""
    probes: dict[str, Callable[[], Awaitable[object]]] = {}
    closing: list[Callable[[], Awaitable[object]]] = []
    if store in stores.redis:
        from redis.asyncio import Redis

        client = Redis.from_url(stores.redis[store])
        probes["ping_rtt"] = client.ping
        closing.append(client.aclose)
    elif store == "postgres" and stores.pg_database is not None:
        import psycopg

        conn = await psycopg.AsyncConnection.connect(
            f"postgresql://postgres@127.0.0.1:5432/{stores.pg_database}", autocommit=True
        )
        await conn.execute("create table if not exists bench_rtt (x int)")
        probes["select1_rtt"] = lambda: conn.execute("select 1")
        # A committed write waits for the WAL flush, as every write of the store does.
        probes["insert_commit_rtt"] = lambda: conn.execute("insert into bench_rtt values (1)")
        closing.append(conn.close)
    rows = []
    try:
        for metric, probe in probes.items():
            for label, gap in (("p50_hot", 0.0), ("p50_after_50ms_idle", 0.05)):
                ms = []
                for _ in range(samples if gap else samples * 5):
                    if gap:
                        await asyncio.sleep(gap)
                    begin = time.perf_counter()
                    await probe()
                    ms.append((time.perf_counter() - begin) * 1000)
                rows.append(Row(store, "baseline", metric, label, percentile(sorted(ms), 0.5),
                                "ms"))
    finally:
        for close in closing:
            await close()
    return rows


# -- the table and the targets ---------------------------------------------------------------


def target(row: Row) -> tuple[str, bool | None]:
    """The issues' target for a headline number, and whether this number meets it."""
    s, m, stat, v = row.store, row.metric, row.statistic, row.value
    poll = row.poll_ms if row.poll_ms is not None else 50.0
    bounds: dict[tuple[str, str, str], tuple[str, float]] = {
        ("memory", "submit_to_first_pass", "p50"): ("<=", 0.3),
        ("redis-stream", "submit_to_first_pass", "p50"): ("<=", 1.0),
        ("redis-stream", "submit_to_first_pass", "p99"): ("<=", 2.0),
        ("redis-set", "submit_to_first_pass", "p50"): ("<=", poll / 2 + 1),
        ("redis-set-polled", "submit_to_first_pass", "p50"): ("<=", poll / 2 + 1),
        ("postgres", "submit_to_first_pass", "p50"): ("<=", 2.0),
        ("postgres", "submit_to_first_pass", "p99"): ("<=", 4.0),
        ("sqlite", "submit_to_first_pass", "p50"): ("<=", poll / 2 + 2),
        ("redis-stream", "passes_per_second", "rate"): (">=", 2000),
        ("redis-set", "passes_per_second", "rate"): (">=", 2000),
        ("postgres", "passes_per_second", "rate"): (">=", 1500),
        ("sqlite", "passes_per_second", "rate"): (">=", 1000),
        ("memory", "worker_calls_per_second", "total"): ("<=", 2),
        ("redis-stream", "worker_redis_per_second", "total"): ("<=", 2),
        ("postgres", "worker_statements_per_second", "total"): ("<=", 1),
    }
    found = bounds.get((s, m, stat))
    if found is None:
        return "", None
    op, bound = found
    return f"{op} {bound:g}", v <= bound if op == "<=" else v >= bound


HEADLINES = {
    ("submit_to_first_pass", s) for s in ("p50", "p90", "p99", "max")
} | {
    ("arrive_call", "p50"),
    ("ping_rtt", "p50_hot"),
    ("ping_rtt", "p50_after_50ms_idle"),
    ("select1_rtt", "p50_hot"),
    ("select1_rtt", "p50_after_50ms_idle"),
    ("insert_commit_rtt", "p50_hot"),
    ("insert_commit_rtt", "p50_after_50ms_idle"),
    ("submit_to_delivered", "p50"),
    ("delivered_to_started", "p50"),
    ("submissions", "never_started"),
    ("passes_per_second", "rate"),
    ("worker_cpu_busy", "fraction"),
    ("worker_calls_per_pass", "total"),
    ("worker_redis_per_pass", "total"),
    ("worker_statements_per_pass", "total"),
    ("server_per_pass", "total"),
    ("server_per_pass", "xact_commit"),
    ("worker_calls_per_second", "total"),
    ("worker_redis_per_second", "total"),
    ("worker_statements_per_second", "total"),
    ("server_per_second", "total"),
    ("server_per_second", "xact_commit"),
    ("worker_cpu", "per_second"),
}


def table(rows: list[Row]) -> str:
    lines = [f"{'store':<13} {'scenario':<24} {'metric':<28} {'stat':<19} {'value':>10}"
             f"  {'unit':<8} {'target':<9} ok"]
    for r in rows:
        if (r.metric, r.statistic) not in HEADLINES:
            continue
        goal, ok = target(r)
        scenario = r.scenario + (f" pool={r.pool}" if r.pool else "")
        mark = "" if ok is None else ("yes" if ok else "NO")
        lines.append(f"{r.store:<13} {scenario:<24} {r.metric:<28} {r.statistic:<19} "
                     f"{r.value:>10.3f}  {r.unit:<8} {goal:<9} {mark}")
    return "\n".join(lines)


def detail(rows: list[Row]) -> str:
    """Where the round trips go: every per-pass count by name at each store's best pool, and
    every idle count by name."""
    best = {r.store: r.pool for r in rows if r.scenario == "throughput best"}
    lines = []
    for r in rows:
        wanted = r.scenario == "idle" or (r.scenario == "throughput" and r.pool == best[r.store])
        named = r.metric.startswith(("worker_", "server_")) and r.statistic != "total"
        if wanted and named and r.metric.endswith(("_per_pass", "_per_second")):
            lines.append(f"  {r.store:<13} {r.scenario:<10} {r.pool or '':<4} {r.metric:<30} "
                         f"{r.statistic:<34} {r.value:8.3f}")
    return "\n".join(lines)


# -- running it ------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def environment(selected: list[str], redis_url: str | None) -> AsyncIterator[Stores]:
    with contextlib.ExitStack() as stack:
        redis = {}
        for store in selected:
            if store.startswith("redis"):
                redis[store] = redis_url or stack.enter_context(private_redis())
        database = stack.enter_context(throwaway_database()) if "postgres" in selected else None
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-worker-")))
        yield Stores(redis, database, directory)


async def versions(stores: Stores) -> dict[str, Any]:
    import sqlite3

    import psycopg
    import psycopg_pool
    import redis as redis_py

    found: dict[str, Any] = {
        "python": platform.python_version(),
        "redis_py": redis_py.__version__,
        "psycopg": psycopg.__version__,
        "psycopg_pool": psycopg_pool.__version__,
        "sqlite": sqlite3.sqlite_version,
    }
    with contextlib.suppress(ImportError):
        import aiosqlite

        found["aiosqlite"] = aiosqlite.__version__
    for store, url in stores.redis.items():
        from redis.asyncio import Redis

        client = Redis.from_url(url, decode_responses=True)
        found[f"{store}_server"] = (await client.info("server"))["redis_version"]
        await client.aclose()
    if stores.pg_database is not None:
        async with await psycopg.AsyncConnection.connect(PG_ADMIN) as conn:
            row = await (await conn.execute("show server_version")).fetchone()
            found["postgres_server"] = row[0] if row else None
    return found


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=False).stdout.strip()


async def main(args: argparse.Namespace) -> None:
    selected = [s.strip() for s in args.stores.split(",") if s.strip()]
    unknown = set(selected) - set(STORES)
    if unknown:
        raise SystemExit(f"unknown store(s) {sorted(unknown)}; choose from {STORES}")
    scenarios = {s.strip() for s in args.scenarios.split(",") if s.strip()}
    if scenarios - set(SCENARIOS):
        raise SystemExit(f"unknown scenario(s) {sorted(scenarios - set(SCENARIOS))}")
    p = QUICK if args.quick else FULL
    began, clock = datetime.now(UTC), time.perf_counter()
    load = os.getloadavg()
    calibration = cpu_calibration()
    print(f"cpu calibration: {calibration:.3f} s for the fixed loop", flush=True)
    async with environment(selected, args.redis_url) as stores:
        if args.profile:
            for store in selected:
                _, profile = await throughput(stores, store, 32, p, profile=True)
                print(f"== cProfile of the worker process, {store}, pool 32 ==\n{profile}")
            return
        meta_versions = await versions(stores)
        rows: list[Row] = []
        for store in selected:
            rows += await baseline(stores, store)
            for poll_ms in LATENCY_POLLS[store] if "latency" in scenarios else ():
                found = await latency(stores, store, poll_ms, p)
                rows += found
                p50 = next(r.value for r in found if r.statistic == "p50")
                print(f"[{time.perf_counter() - clock:5.0f} s] latency {store} poll={poll_ms}:"
                      f" p50 {p50:.2f} ms", flush=True)
            measured = "throughput" in scenarios and store not in NO_THROUGHPUT
            for pool in p.pools if measured else ():
                found, _ = await throughput(stores, store, pool, p)
                rows += found
                rate = next(r.value for r in found if r.metric == "passes_per_second")
                print(f"[{time.perf_counter() - clock:5.0f} s] throughput {store} pool={pool}:"
                      f" {rate:.0f}/s", flush=True)
        if "idle" in scenarios:
            rows += await idle(stores, selected, p)
    rows = _mark_best(rows)
    print()
    print(table(rows))
    print("\nwhere the round trips go (per pass at the best pool; per second when idle):")
    print(detail(rows))
    elapsed = time.perf_counter() - clock
    if scenarios != set(SCENARIOS):
        print(f"\nonly {sorted(scenarios)} ran: results/ left as it was ({elapsed:.0f} s)")
        return
    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / "bench_worker.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=[*Row.__dataclass_fields__, "target"])
        writer.writeheader()
        for r in rows:
            writer.writerow({**asdict(r), "target": target(r)[0]})
    meta = {
        "benchmark": "bench_worker: the worker end to end over every store",
        "started": began.isoformat(timespec="seconds"),
        "elapsed_seconds": round(elapsed, 1),
        "git_revision": _git("rev-parse", "HEAD"),
        "git_dirty_paths": _git("status", "--porcelain", "--", "durability").splitlines(),
        "cores": os.cpu_count(),
        "load_average_at_start": load,
        "load_average_at_end": os.getloadavg(),
        "cpu_calibration_seconds": {"at_start": calibration, "at_end": cpu_calibration(),
                                    "what": "best of 3 runs of a 10M-step pure-Python loop"},
        "platform": platform.platform(),
        "versions": meta_versions,
        "stores": selected,
        "mode": "quick" if args.quick else "full",
        "parameters": {**asdict(p), "lease_seconds": LEASE.total_seconds(),
                       "latency_polls_ms": {s: LATENCY_POLLS[s] for s in selected},
                       "worker": "work() defaults (pool 16) for latency and idle;"
                                 " open_durable(housekeeping=True) in the worker process",
                       "redis": "private redis-server per store" if not args.redis_url
                                else args.redis_url,
                       "body": "one step returning a small dict"},
    }
    (RESULTS / "bench_worker.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"\nwrote results/bench_worker.csv and .json in {elapsed:.0f} s")


def _mark_best(rows: list[Row]) -> list[Row]:
    """Add a `best` throughput row per store (the pool with the highest rate)."""
    extra = []
    for store in dict.fromkeys(r.store for r in rows):
        rates = [r for r in rows if r.store == store and r.metric == "passes_per_second"]
        if rates:
            top = max(rates, key=lambda r: r.value)
            extra.append(Row(store, "throughput best", top.metric, "rate", top.value, top.unit,
                             top.pool))
    return rows + extra


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--quick", action="store_true", help="shorter runs, fewer workflows")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help="run only these (results/ is written only when all three ran)")
    parser.add_argument("--profile", action="store_true",
                        help="only a cProfile of one throughput run per store; writes nothing")
    parser.add_argument("--redis-url", help="use this Redis instead of a private server each")
    if shutil.which("redis-server") is None and "--redis-url" not in sys.argv:
        print("redis-server not found: pass --redis-url", file=sys.stderr)
    asyncio.run(main(parser.parse_args()))
