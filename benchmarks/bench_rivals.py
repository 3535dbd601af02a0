"""The job queues people would pick instead of durability, measured as bench_worker measures us.

    PYTHONPATH=. <venv>/bin/python benchmarks/bench_rivals.py [--rivals saq,pgqueuer,...] [--quick]

The rivals are not dependencies of durability: give them a virtualenv of their own, outside
the repository, with

    pip install saq pgqueuer procrastinate "psycopg[binary]" psycopg-pool asyncpg redis hiredis

(run from the repository root: the helpers are imported from benchmarks/bench_worker.py, which
needs only the repository on the path, not an installed durability).

Rivals: saq (Redis), pgqueuer (Postgres, over asyncpg, run as its `PgQueuer` app as its
documentation shows) and procrastinate (Postgres, over psycopg). Each is driven only through
its public API; the job is one trivial async function returning a small dict.

Same method as benchmarks/bench_worker.py, on the same servers (a private `redis-server` per
run; a throwaway Postgres database per run), with the worker in a process of its own (spawn):

1. Latency, open loop: one worker with the rival's defaults; this process enqueues 20 jobs a
   second (on average: bench_worker's Poisson schedule) for 15 s after a short warm-up;
   latency = `time.time()` as the job function starts in the worker minus `time.time()` just
   before the enqueue call (`submit_to_first_pass`, to keep bench_worker's metric names;
   `arrive_call` is the enqueue call itself).
2. Throughput: 3000 jobs enqueued first, then one worker process with concurrency 16/32/64
   through the rival's own knob (saq `Worker(concurrency=)`, procrastinate
   `run_worker_async(concurrency=)`, pgqueuer `run(max_concurrent_tasks=)` with
   `batch_size=min(10, n // 2)`, since pgqueuer wants at least twice the batch); jobs a second =
   jobs run / (last job function return - first job function start). As with our "outcome"
   event, the end is the job function's return, before the queue records the job done.
   After the preload the Postgres rivals' database is ANALYZEd (see `analyze`).
3. Idle: every rival's worker at once, rival defaults, nothing to do, for 20 s after a 12 s
   settling pause (long enough for Postgres to have reported the start-up's transactions):
   requests a second and the worker process's CPU a second. At the end of the window the worker
   is killed rather than stopped, so its shutdown sends nothing, and Postgres is read after its
   backends have exited (they report lazily, and at exit).
0. Baseline: bench_worker's round trip to each server hot and after 50 ms idle.

Requests are counted twice. In the worker process: every Redis command (a pipeline is one
round trip) or Postgres statement its clients sent, named by the rival's function that sent it
(LISTEN and NOTIFY included: they are statements). On the server: Redis INFO commandstats
(commands executed, a Lua script's inner commands included) and, for Postgres,
pg_stat_database xact_commit + xact_rollback of the throwaway database (an idle LISTEN costs
nothing there until a notification). A Postgres backend may hold back its last second or so of
counts when the idle window opens, so the server's idle figure can run a transaction or two high.

Reading the breakdown: bench_worker's metric names are kept (a "pass" is one job run). Some
defaults show in it: saq blocks in BLMOVE without a timeout, but redis-py 8 gives every socket a
5 s timeout, so each of its 10 slots sends BLMOVE again every 5 s; pgqueuer's `PgQueuer.run`
also runs its scheduler, which reads the schedule table once a second even with no schedule;
procrastinate's pool checks each connection it lends with an empty query (`EMPTY` rows).

Writes results/bench_rivals.csv (bench_worker.csv's columns; `store` holds the rival, `pool`
the concurrency) and results/bench_rivals.json (versions, servers, parameters, git revision,
load averages, and `cpu_calibration()` at start and end so runs on different days can be
normalised). Never asserts a number.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import dataclasses
import importlib.metadata
import importlib.util
import json
import logging
import os
import platform
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a plain script too: `benchmarks` is a folder of the repo

from benchmarks.bench_worker import (  # noqa: E402
    PG_ADMIN,
    Row,
    Stores,
    WorkerProcess,
    _receive,
    baseline,
    cpu_calibration,
    cpu_seconds,
    percentile,
    pg_counters,
    preload,
    private_redis,
    redis_counters,
    server_delta,
    submit_open_loop,
    throwaway_database,
)

RIVALS = ("saq", "pgqueuer", "procrastinate")
RESULTS = ROOT / "results"
QUEUE = "bench"  # queue / entrypoint / task name, alone on its server or database
JOB = "bench_job"
IDLE_SETTLE = 12.0  # > Postgres' 10 s idle-stats interval, so start-up is reported before
POOLS = (16, 32, 64)


@dataclass(frozen=True, slots=True)
class Params:
    rate: float
    latency_seconds: float
    jobs: int
    idle_seconds: float
    pools: tuple[int, ...]


FULL = Params(rate=20, latency_seconds=15, jobs=3000, idle_seconds=20, pools=POOLS)
QUICK = Params(rate=20, latency_seconds=5, jobs=1500, idle_seconds=8, pools=POOLS)


# -- the job and what the worker process sees ----------------------------------------------------


@dataclass(slots=True)
class Observer:
    """Start and end of every job function run, in the worker process."""

    expect: int | None
    started: dict[str, float] = field(default_factory=dict)
    runs: int = 0
    first_started: float | None = None
    last_finished: float | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)

    def job(self, key: str) -> dict[str, object]:
        now = time.time()
        self.started.setdefault(key, now)
        if self.first_started is None:
            self.first_started = now
        result: dict[str, object] = {"charged": True, "cents": 1250}
        self.runs += 1
        self.last_finished = time.time()
        if self.expect is not None and self.runs >= self.expect:
            self.finished.set()
        return result


def _caller(package: str, skip: tuple[str, ...]) -> str:
    """The innermost function of the rival's own code (not its driver) on the current stack."""
    frame = sys._getframe(2)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module.startswith(package) and not module.startswith(skip):
            return frame.f_code.co_name
        frame = frame.f_back
    return "?"


def count_redis(counts: Counter[str], package: str) -> None:
    """Count every request this process's redis.asyncio clients send: a command, or a pipeline
    as one round trip; each named by the command and the rival's function that sent it."""
    from redis.asyncio.client import Pipeline, Redis

    command = Redis.execute_command
    execute = Pipeline.execute

    async def execute_command(self: Redis, *args: Any, **options: Any) -> Any:
        counts[f"{str(args[0]).upper()} {_caller(package, ())}"] += 1
        return await command(self, *args, **options)  # type: ignore[no-untyped-call]

    async def pipeline(self: Pipeline, raise_on_error: bool = True) -> Any:
        counts[f"PIPELINE {_caller(package, ())}"] += 1
        return await execute(self, raise_on_error)

    Redis.execute_command = execute_command  # type: ignore[method-assign]
    Pipeline.execute = pipeline  # type: ignore[method-assign]


def count_postgres(counts: Counter[str], package: str, skip: tuple[str, ...]) -> None:
    """Count every statement this process's psycopg cursors and asyncpg connections execute,
    named by its first word and the rival's function that sent it."""

    def name(query: object) -> str:
        if isinstance(query, bytes | str):
            text = query.decode() if isinstance(query, bytes) else query
        else:  # a psycopg Composed: its first SQL() part
            found = re.search(r"SQL\(['\"]\s*(\w+)", repr(query))
            text = found.group(1) if found else "COMPOSED"
        words = text.split(None, 1)
        first = words[0].upper() if words else "EMPTY"  # EMPTY: psycopg_pool's connection check
        return f"{first} {_caller(package, skip)}"

    with contextlib.suppress(ImportError):
        from psycopg import AsyncCursor

        cursor_execute = AsyncCursor.execute

        async def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            counts[name(query)] += 1
            return await cursor_execute(self, query, *args, **kwargs)

        AsyncCursor.execute = execute  # type: ignore[method-assign]
    with contextlib.suppress(ImportError):
        from asyncpg.connection import Connection as AsyncpgConnection

        for method in ("execute", "executemany", "fetch", "fetchrow", "fetchval"):
            original = getattr(AsyncpgConnection, method)

            def wrap(original: Any) -> Any:
                async def counted(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
                    counts[name(query)] += 1
                    return await original(self, query, *args, **kwargs)

                return counted

            setattr(AsyncpgConnection, method, wrap(original))


# -- the rivals, through their public APIs ---------------------------------------------------------


class Running(Protocol):
    def start(self) -> None: ...

    async def stop(self) -> None: ...


Enqueue = Callable[[str], Awaitable[object]]


class Rival(Protocol):
    name: str
    kind: str  # "redis" or "postgres"
    package: str
    skip: tuple[str, ...]  # the rival's own driver modules: not a caller worth naming

    async def install(self, target: str) -> None: ...

    def client(self, target: str) -> contextlib.AbstractAsyncContextManager[Enqueue]: ...

    def worker(self, target: str, concurrency: int | None,
               observer: Observer) -> contextlib.AbstractAsyncContextManager[Running]: ...

    def knobs(self, concurrency: int | None) -> dict[str, Any]: ...


def dsn(database: str) -> str:
    return f"postgresql://postgres@127.0.0.1:5432/{database}"


class Saq:
    name, kind, package, skip = "saq", "redis", "saq", ()

    async def install(self, target: str) -> None:
        pass

    @contextlib.asynccontextmanager
    async def client(self, target: str) -> AsyncIterator[Enqueue]:
        from saq import Queue

        queue = Queue.from_url(target, name=QUEUE)
        await queue.connect()
        try:
            yield lambda key: queue.enqueue(JOB, ref=key)  # saq takes `key=` itself
        finally:
            await queue.disconnect()

    def knobs(self, concurrency: int | None) -> dict[str, Any]:
        return {} if concurrency is None else {"concurrency": concurrency}

    @contextlib.asynccontextmanager
    async def worker(self, target: str, concurrency: int | None,
                     observer: Observer) -> AsyncIterator[Running]:
        from saq import Queue, Worker

        async def bench_job(ctx: Any, *, ref: str) -> dict[str, object]:
            return observer.job(ref)

        queue = Queue.from_url(target, name=QUEUE)
        await queue.connect()
        worker = Worker(queue, functions=[(JOB, bench_job)], **self.knobs(concurrency))

        class Run:
            task: asyncio.Task[None] | None = None

            def start(self) -> None:
                self.task = asyncio.create_task(worker.start())

            async def stop(self) -> None:
                await worker.stop()
                if self.task is not None:
                    await asyncio.wait_for(self.task, 30)

        try:
            yield Run()
        finally:
            await queue.disconnect()


class PgQueuerRival:
    name, kind, package, skip = "pgqueuer", "postgres", "pgqueuer", ("pgqueuer.adapters.drivers",)

    async def install(self, target: str) -> None:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        conn = await asyncpg.connect(dsn(target))
        try:
            await Queries(AsyncpgDriver(conn)).install()
        finally:
            await conn.close()

    @contextlib.asynccontextmanager
    async def client(self, target: str) -> AsyncIterator[Enqueue]:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        conn = await asyncpg.connect(dsn(target))
        queries = Queries(AsyncpgDriver(conn))
        try:
            yield lambda key: queries.enqueue(JOB, key.encode())
        finally:
            await conn.close()

    def knobs(self, concurrency: int | None) -> dict[str, Any]:
        if concurrency is None:
            return {}
        return {"max_concurrent_tasks": concurrency, "batch_size": min(10, concurrency // 2)}

    @contextlib.asynccontextmanager
    async def worker(self, target: str, concurrency: int | None,
                     observer: Observer) -> AsyncIterator[Running]:
        import asyncpg
        from pgqueuer import PgQueuer
        from pgqueuer.models import Job

        conn = await asyncpg.connect(dsn(target))
        pgq = PgQueuer.from_asyncpg_connection(conn)

        @pgq.entrypoint(JOB)
        async def bench_job(job: Job) -> dict[str, object]:
            return observer.job((job.payload or b"").decode())

        knobs = self.knobs(concurrency)

        class Run:
            task: asyncio.Task[None] | None = None

            def start(self) -> None:
                self.task = asyncio.create_task(pgq.run(**knobs))

            async def stop(self) -> None:
                pgq.shutdown.set()
                if self.task is not None:
                    await asyncio.wait_for(self.task, 30)

        try:
            yield Run()
        finally:
            await conn.close()


class Procrastinate:
    name, kind, package = "procrastinate", "postgres", "procrastinate"
    skip = ("procrastinate.psycopg_connector", "procrastinate.connector", "procrastinate.utils")

    @staticmethod
    def app(target: str) -> Any:
        import procrastinate

        return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn(target)))

    async def install(self, target: str) -> None:
        app = self.app(target)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    @contextlib.asynccontextmanager
    async def client(self, target: str) -> AsyncIterator[Enqueue]:
        app = self.app(target)
        async with app.open_async():
            yield lambda key: app.configure_task(JOB).defer_async(key=key)

    def knobs(self, concurrency: int | None) -> dict[str, Any]:
        return {} if concurrency is None else {"concurrency": concurrency}

    @contextlib.asynccontextmanager
    async def worker(self, target: str, concurrency: int | None,
                     observer: Observer) -> AsyncIterator[Running]:
        app = self.app(target)

        @app.task(name=JOB)
        async def bench_job(key: str) -> dict[str, object]:
            return observer.job(key)

        knobs = self.knobs(concurrency)

        class Run:
            task: asyncio.Task[None] | None = None

            def start(self) -> None:
                self.task = asyncio.create_task(app.run_worker_async(**knobs))

            async def stop(self) -> None:
                if self.task is not None:
                    self.task.cancel()  # procrastinate's documented graceful stop
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.wait_for(self.task, 30)

        async with app.open_async():
            yield Run()


def rival(name: str) -> Rival:
    found: dict[str, Rival] = {"saq": Saq(), "pgqueuer": PgQueuerRival(),
                               "procrastinate": Procrastinate()}
    return found[name]


# -- the worker process ----------------------------------------------------------------------------


def _worker_process(conn: Connection, spec: dict[str, Any]) -> None:
    asyncio.run(_worker_main(conn, spec))


async def _worker_main(conn: Connection, spec: dict[str, Any]) -> None:
    chosen = rival(spec["rival"])
    logging.getLogger(chosen.package).setLevel(logging.ERROR)  # not its shutdown's warnings
    counts: Counter[str] = Counter()
    if chosen.kind == "redis":
        count_redis(counts, chosen.package)
    else:
        count_postgres(counts, chosen.package, chosen.skip)
    observer = Observer(spec.get("expect"))

    def snapshot() -> dict[str, Any]:
        return {"at": time.time(), "cpu": cpu_seconds(), "counts": dict(counts),
                "runs": observer.runs, "first_started": observer.first_started,
                "last_finished": observer.last_finished}

    async with chosen.worker(spec["target"], spec["concurrency"], observer) as running:
        conn.send(("ready", None))
        await _receive(conn, "go")
        conn.send(("going", snapshot()))
        running.start()

        async def announce() -> None:
            if observer.expect is None:
                return
            await observer.finished.wait()
            await asyncio.sleep(0.2)  # let the last jobs' completion writes land
            conn.send(("done", snapshot()))

        announcing = asyncio.create_task(announce())
        while (await asyncio.to_thread(conn.recv))[0] == "mark":
            conn.send(("marked", snapshot()))
        announcing.cancel()
        await running.stop()
    conn.send(("result", {"started": observer.started, "runs": observer.runs}))
    conn.close()


def _rival_process(spec: dict[str, Any]) -> WorkerProcess:
    """A rival's worker in a spawned process (bench_worker's harness, this file's target)."""
    return WorkerProcess(spec, target=_worker_process, patience=300)

    async def kill(self) -> None:
        """End it without its shutdown (which would talk to the server)."""
        self.process.kill()
        await asyncio.to_thread(self.process.join, 30)


# -- servers ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def server(kind: str) -> Iterator[str]:
    """A private redis-server URL or a throwaway database's name, gone afterwards."""
    with private_redis() if kind == "redis" else throwaway_database() as target:
        yield target


async def counters(kind: str, target: str) -> dict[str, int]:
    return await (redis_counters(target) if kind == "redis" else pg_counters(target))


async def server_version(kind: str, target: str) -> str | None:
    if kind == "redis":
        from redis.asyncio import Redis

        client = Redis.from_url(target, decode_responses=True)
        try:
            return str((await client.info("server"))["redis_version"])
        finally:
            await client.aclose()
    import psycopg

    async with await psycopg.AsyncConnection.connect(PG_ADMIN) as conn:
        row = await (await conn.execute("show server_version")).fetchone()
        return str(row[0]) if row else None


class Submitter:
    """bench_worker's open loop and preload call `arrive(workflow, key, value)`: here that is
    one enqueue of the job, keyed by the workflow name."""

    def __init__(self, enqueue: Enqueue) -> None:
        self._enqueue = enqueue

    async def arrive(self, workflow: str, key: str, value: object) -> None:
        await self._enqueue(workflow)


def _row(store: str, scenario: str, metric: str, statistic: str, value: float, unit: str,
         pool: int | None = None) -> Row:
    return Row(store=store, scenario=scenario, metric=metric, statistic=statistic,
               value=value, unit=unit, pool=pool)


def _per(counts: dict[str, int], by: float, unit: str, store: str, scenario: str, metric: str,
         pool: int | None) -> list[Row]:
    rows = [_row(store, scenario, metric, name, n / by, unit, pool)
            for name, n in sorted(counts.items()) if name != "TOTAL"]
    total = counts.get("TOTAL", sum(counts.values()))
    rows.append(_row(store, scenario, metric, "total", total / by, unit, pool))
    return rows


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def _worker_metric(kind: str) -> str:
    return "worker_redis" if kind == "redis" else "worker_statements"


# -- the measurements ------------------------------------------------------------------------------


async def baseline_rows(chosen: Rival, target: str) -> list[Row]:
    if chosen.kind == "redis":
        stores = Stores(redis={"redis": target}, pg_database=None, sqlite_dir=ROOT)
        rows = await baseline(stores, "redis")
    else:
        stores = Stores(redis={}, pg_database=target, sqlite_dir=ROOT)
        rows = await baseline(stores, "postgres")
    return [dataclasses.replace(r, store=chosen.name) for r in rows]


async def latency(chosen: Rival, p: Params, meta: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    with server(chosen.kind) as target:
        meta.setdefault("servers", {})[chosen.kind] = await server_version(chosen.kind, target)
        rows += await baseline_rows(chosen, target)
        await chosen.install(target)
        prefix = f"lat-{uuid.uuid4().hex[:8]}"
        worker = _rival_process({"rival": chosen.name, "target": target, "concurrency": None})
        await worker.ready()
        await worker.go()
        arrived: dict[str, float] = {}
        async with chosen.client(target) as enqueue:
            submitter = cast(Any, Submitter(enqueue))
            await asyncio.sleep(0.5)  # the worker's start-up (connect, LISTEN, register)
            await submit_open_loop(submitter, f"{prefix}-warm", 20, 0.5, {})
            await asyncio.sleep(0.5)
            submitted = await submit_open_loop(submitter, prefix, p.rate, p.latency_seconds,
                                               arrived)
            await asyncio.sleep(2.0)
        result = await worker.stop()
    started: dict[str, float] = result["started"]
    spans = {"submit_to_first_pass": (submitted, started), "arrive_call": (submitted, arrived)}
    for metric, (begin, end) in spans.items():
        ms = sorted((end[w] - begin[w]) * 1000 for w in submitted if w in begin and w in end)
        if not ms:
            continue
        stats = {"p50": percentile(ms, 0.5), "p90": percentile(ms, 0.9),
                 "p99": percentile(ms, 0.99), "max": ms[-1], "mean": sum(ms) / len(ms)}
        rows += [_row(chosen.name, "latency", metric, k, v, "ms") for k, v in stats.items()]
    begun = sum(1 for w in submitted if w in started)
    rows.append(_row(chosen.name, "latency", "submissions", "n", len(submitted), "count"))
    rows.append(_row(chosen.name, "latency", "submissions", "never_started",
                     len(submitted) - begun, "count"))
    return rows


async def analyze(database: str) -> None:
    """What autovacuum would have done by now on a database in service: without it a table
    created empty a moment ago is planned as empty, and procrastinate's fetch then reads every
    row of the backlog for each job (about half its rate here). durability's own queries keep
    to their indexes either way (bench_worker's tup_returned per pass), so this only helps the
    rivals."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn(database), autocommit=True) as conn:
        await conn.execute("ANALYZE")


async def throughput(chosen: Rival, pool: int, p: Params) -> list[Row]:
    n, name, scenario = p.jobs, chosen.name, "throughput"
    with server(chosen.kind) as target:
        await chosen.install(target)
        loading = time.perf_counter()
        async with chosen.client(target) as enqueue:
            await preload(cast(Any, Submitter(enqueue)), f"tp-{uuid.uuid4().hex[:8]}", n)
        print(f"  preloaded {n} into {name} in {time.perf_counter() - loading:.1f} s", flush=True)
        if chosen.kind == "postgres":
            await analyze(target)
        await asyncio.sleep(0.3 if chosen.kind == "redis" else 1.5)  # loader's stats reported
        worker = _rival_process({"rival": name, "target": target, "concurrency": pool,
                                "expect": n})
        await worker.ready()
        server_before = await counters(chosen.kind, target)
        before = await worker.go()
        after = await worker.done()
        server_after = await counters(chosen.kind, target) if chosen.kind == "redis" else None
        result = await worker.stop()
        if server_after is None:  # Postgres backends report their counts on exit
            await asyncio.sleep(0.5)
            server_after = await counters(chosen.kind, target)
    runs = after["runs"]
    seconds = after["last_finished"] - after["first_started"]
    cpu = after["cpu"] - before["cpu"]
    rows = [
        _row(name, scenario, "passes_per_second", "rate", runs / seconds, "1/s", pool),
        _row(name, scenario, "passes", "n", runs, "count", pool),
        _row(name, scenario, "worker_cpu_per_pass", "mean", cpu / runs * 1000, "ms", pool),
        _row(name, scenario, "worker_cpu_busy", "fraction", cpu / seconds, "cpu/s", pool),
    ]
    rows += _per(_delta(before["counts"], after["counts"]), runs, "per pass", name, scenario,
                 f"{_worker_metric(chosen.kind)}_per_pass", pool)
    delta = server_delta(chosen.kind, server_before, server_after)
    if delta is not None:
        rows += _per(delta, runs, "per pass", name, scenario, "server_per_pass", pool)
    rows.append(_row(name, scenario, "events", "started", len(result["started"]), "count", pool))
    rows.append(_row(name, scenario, "events", "outcome", result["runs"], "count", pool))
    return rows


async def idle(chosen_all: list[Rival], p: Params) -> list[Row]:
    """Every rival's idle worker at once, each on its own server: idle workers do not compete."""
    with contextlib.ExitStack() as stack:
        targets = {r.name: stack.enter_context(server(r.kind)) for r in chosen_all}
        for r in chosen_all:
            await r.install(targets[r.name])
        await asyncio.sleep(1.5)  # the installs' transactions reported before any reading
        workers = {r.name: _rival_process({"rival": r.name, "target": targets[r.name],
                                          "concurrency": None}) for r in chosen_all}
        for worker in workers.values():
            await worker.ready()
            await worker.go()
        await asyncio.sleep(IDLE_SETTLE)
        server_before = {r.name: await counters(r.kind, targets[r.name]) for r in chosen_all}
        marks_before = {name: await w.mark() for name, w in workers.items()}
        await asyncio.sleep(p.idle_seconds)
        marks_after = {name: await w.mark() for name, w in workers.items()}
        server_after = {r.name: await counters(r.kind, targets[r.name])
                        for r in chosen_all if r.kind == "redis"}
        for worker in workers.values():
            await worker.kill()
        await asyncio.sleep(0.5)  # the killed workers' backends exit and report
        for r in chosen_all:
            if r.kind != "redis":
                server_after[r.name] = await counters(r.kind, targets[r.name])
    rows: list[Row] = []
    for r in chosen_all:
        before, after = marks_before[r.name], marks_after[r.name]
        seconds = after["at"] - before["at"]
        cpu = after["cpu"] - before["cpu"]
        rows += [_row(r.name, "idle", "window", "seconds", seconds, "s"),
                 _row(r.name, "idle", "worker_cpu", "seconds", cpu, "s"),
                 _row(r.name, "idle", "worker_cpu", "per_second", cpu / seconds, "cpu/s")]
        rows += _per(_delta(before["counts"], after["counts"]), seconds, "per s", r.name,
                     "idle", f"{_worker_metric(r.kind)}_per_second", None)
        delta = server_delta(r.kind, server_before[r.name], server_after[r.name])
        if delta is not None:
            rows += _per(delta, seconds, "per s", r.name, "idle", "server_per_second", None)
    return rows


def mark_best(rows: list[Row]) -> list[Row]:
    extra = []
    for store in dict.fromkeys(r.store for r in rows):
        rates = [r for r in rows if r.store == store and r.metric == "passes_per_second"]
        if rates:
            top = max(rates, key=lambda r: r.value)
            extra.append(dataclasses.replace(top, scenario="throughput best"))
    return rows + extra


# -- the report ------------------------------------------------------------------------------------


def summary(rows: list[Row], pools: tuple[int, ...]) -> str:
    def value(store: str, scenario: str, metric: str, statistic: str,
              pool: int | None = None) -> str:
        for r in rows:
            if (r.store, r.scenario, r.metric, r.statistic, r.pool) == (
                    store, scenario, metric, statistic, pool):
                return f"{r.value:.3g}" if abs(r.value) < 100 else f"{r.value:.0f}"
        return "-"

    head = (f"{'rival':<14} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
            + " ".join(f"{f'jobs/s c={c}':>12}" for c in pools)
            + f" {'idle req/s':>10} {'idle srv/s':>10} {'idle cpu/s':>10}")
    lines = [head]
    for store in dict.fromkeys(r.store for r in rows):
        kind = _worker_metric(rival(store).kind)
        lines.append(
            f"{store:<14} {value(store, 'latency', 'submit_to_first_pass', 'p50'):>8} "
            f"{value(store, 'latency', 'submit_to_first_pass', 'p99'):>8} "
            f"{value(store, 'latency', 'submit_to_first_pass', 'max'):>8} "
            + " ".join(f"{value(store, 'throughput', 'passes_per_second', 'rate', c):>12}"
                       for c in pools)
            + f" {value(store, 'idle', f'{kind}_per_second', 'total'):>10}"
            f" {value(store, 'idle', 'server_per_second', 'total'):>10}"
            f" {value(store, 'idle', 'worker_cpu', 'per_second'):>10}")
    return "\n".join(lines)


def detail(rows: list[Row]) -> str:
    """Where the requests go: per job at the best concurrency, per second when idle."""
    best = {r.store: r.pool for r in rows if r.scenario == "throughput best"}
    lines = []
    for r in rows:
        wanted = r.scenario == "idle" or (r.scenario == "throughput" and r.pool == best[r.store])
        if wanted and r.metric.startswith(("worker_redis", "worker_statements", "server_")):
            lines.append(f"  {r.store:<14} {r.scenario:<10} {r.pool or '':<4} {r.metric:<30} "
                         f"{r.statistic:<40} {r.value:8.3f}")
    return "\n".join(lines)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=False).stdout.strip()


def versions(names: list[str]) -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for package in (*names, "redis", "hiredis", "asyncpg", "psycopg", "psycopg-pool"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found


async def main(args: argparse.Namespace) -> None:
    names = [s.strip() for s in args.rivals.split(",") if s.strip()]
    unknown = set(names) - set(RIVALS)
    if unknown:
        raise SystemExit(f"unknown rival(s) {sorted(unknown)}; choose from {RIVALS}")
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if missing:
        raise SystemExit(f"{missing} not installed here; see this script's docstring")
    for n in names:  # their info logging and procrastinate's "App in the main module" warning
        logging.getLogger(n).setLevel(logging.ERROR)
    p = QUICK if args.quick else FULL
    began, clock = datetime.now(UTC), time.perf_counter()
    loads: dict[str, list[float]] = {"start": list(os.getloadavg())}
    speeds: dict[str, float] = {}  # one calibration loop before each phase: the VM's speed drifts

    def phase(label: str) -> None:
        loads[label] = list(os.getloadavg())
        speeds[label] = round(cpu_calibration(repeat=1), 4)

    calibration_start = cpu_calibration()
    print(f"cpu_calibration: {calibration_start:.3f} s; load average {loads['start']}", flush=True)
    meta: dict[str, Any] = {}
    chosen = [rival(n) for n in names]
    rows: list[Row] = []
    for r in chosen:
        phase(f"{r.name} latency")
        found = await latency(r, p, meta)
        rows += found
        p50 = next((x.value for x in found if x.metric == "submit_to_first_pass"), float("nan"))
        print(f"[{time.perf_counter() - clock:5.0f} s] latency {r.name}: p50 {p50:.2f} ms",
              flush=True)
        for pool in p.pools:
            phase(f"{r.name} throughput {pool}")
            found = await throughput(r, pool, p)
            rows += found
            rate = next(x.value for x in found if x.metric == "passes_per_second")
            print(f"[{time.perf_counter() - clock:5.0f} s] throughput {r.name} c={pool}:"
                  f" {rate:.0f}/s", flush=True)
    phase("idle")
    rows += await idle(chosen, p)
    print(f"[{time.perf_counter() - clock:5.0f} s] idle done", flush=True)
    rows = mark_best(rows)
    loads["end"] = list(os.getloadavg())
    calibration_end = cpu_calibration()
    print()
    print(summary(rows, p.pools))
    print("\nwhere the requests go (per job at the best concurrency; per second when idle):")
    print(detail(rows))
    elapsed = time.perf_counter() - clock
    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / "bench_rivals.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=[*Row.__dataclass_fields__, "target"])
        writer.writeheader()
        for row in rows:
            writer.writerow({**dataclasses.asdict(row), "target": ""})
    info = {
        "benchmark": "bench_rivals: saq, pgqueuer and procrastinate, measured as bench_worker",
        "started": began.isoformat(timespec="seconds"),
        "elapsed_seconds": round(elapsed, 1),
        "git_revision": _git("rev-parse", "HEAD"),
        "git_dirty_paths": _git("status", "--porcelain", "--", "benchmarks").splitlines(),
        "cores": os.cpu_count(),
        "load_average_at_start": loads["start"],
        "load_average_at_end": loads["end"],
        "load_average_by_phase": loads,
        "cpu_calibration_seconds": {"start": round(calibration_start, 4),
                                    "end": round(calibration_end, 4),
                                    "loop": "for i in range(10_000_000): total += i; best of 3",
                                    "by_phase_one_loop": speeds},
        "platform": platform.platform(),
        "versions": versions(names),
        "servers": meta.get("servers", {}),
        "rivals": names,
        "mode": "quick" if args.quick else "full",
        "parameters": {
            **dataclasses.asdict(p),
            "idle_settle_seconds": IDLE_SETTLE,
            "throughput_postgres": "ANALYZE after the preload, before the worker starts",
            "job": "one async function returning a small dict",
            "latency_and_idle_worker": "each rival's defaults (saq concurrency 10, procrastinate 1,"
                                       " pgqueuer unlimited with batch_size 10)",
            "concurrency_knob": {r.name: {str(c): r.knobs(c) for c in p.pools} for r in chosen},
            "saq": "Queue.from_url(private redis-server), Worker(functions, concurrency)",
            "pgqueuer": "PgQueuer.from_asyncpg_connection(one asyncpg connection), run()",
            "procrastinate": "App(PsycopgConnector(conninfo)) with its default pool,"
                             " run_worker_async()",
            "servers": "a private redis-server per run; a throwaway Postgres database per run",
        },
    }
    (RESULTS / "bench_rivals.json").write_text(json.dumps(info, indent=2) + "\n")
    print(f"\nwrote results/bench_rivals.csv and .json in {elapsed:.0f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rivals", default=",".join(RIVALS))
    parser.add_argument("--quick", action="store_true", help="shorter runs, fewer jobs")
    asyncio.run(main(parser.parse_args()))
