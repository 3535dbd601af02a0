"""`contention`: what bounds one Postgres at this workload, from the server's own accounts.

On a private server per configuration, two phases: `arrive` (one client submits, 64 at a time:
many writers, each commit a NOTIFY) and `work` (1, 2 or 4 worker processes drain it with a
body that sleeps once, its `wake_at` notifying). Per operation: the rate, statements by what
they write, WAL bytes, writing transactions, server CPU, and the waits sampled every 20 ms
(the NOTIFY commit lock apart). Arms: `notify` (the store as it is), `silent` (`pg_notify`
shadowed by a no-op in the run's database, the readers polling every 50 ms) and `partitioned`
(the queue table hash-partitioned by workflow, made before the store migrates).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

from experiments.harness.accounts import OURS, Accounts, Reading, Waits
from experiments.harness.backends import Backend
from experiments.harness.lab import Agent, AgentFailed, Lab
from experiments.harness.servers import Server

NAME = "contention"
TITLE = "what bounds one Postgres: statements, WAL and waits per pass"

PROCESSES = (1, 2, 4)
ARMS = ("notify", "silent", "partitioned")
#: `--set arm=partitioned` runs one arm alone, and with `--merge` replaces only its rows.
SELECTORS = ("arm",)
#: The partitions of the partitioned arm's queue table, and the processes it runs at.
PARTITIONS, PARTITIONED_AT = 4, (4,)
#: How long each workflow sleeps between its two passes: long enough that the first pass
#: ends sleeping (a `wake_at`, which notifies), short enough that the queue never idles.
NAP_MS = 50
#: How many submit at once in the `arrive` phase.
WRITERS = 64
#: How often the silenced arm's readers look for work another process made visible.
SILENT_POLL_MS = 50
#: The channel the store's default schema notifies on.
CHANNEL = "durability_ready"
#: What a run may set beside the configurations' own parameters (`experiments.commands.overrides`).
SETTINGS = {"workflows": "workflows submitted (and drained) per configuration"}


def workload(quick: bool) -> int:
    return 300 if quick else 2000


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    if backend.name != "postgres":  # the store's own accounts, on its own server
        return []
    processes = (1, 4) if quick else PROCESSES
    found = [{"arm": arm, "partitions": 1, "processes": n} for arm in ARMS[:2]
             for n in processes]
    return found + [{"arm": "partitioned", "partitions": PARTITIONS, "processes": n}
                    for n in PARTITIONED_AT]


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    with lab.servers.fresh("postgres") as server:
        if server is None or not server.private:
            raise AgentFailed("contention needs a Postgres server of its own (a container or"
                              " the initdb/postgres binaries): the WAL and waits are counted"
                              " server-wide")
        return await _measure(lab, backend, params, server)


async def _measure(lab: Lab, backend: Backend, params: dict[str, Any], server: Server
                   ) -> list[dict[str, Any]]:
    arm, processes = str(params["arm"]), int(params["processes"])
    count = int(params.get("workflows") or workload(lab.quick))
    prefix = f"ct{uuid.uuid4().hex[:6]}"
    rows: list[dict[str, Any]] = []
    async with lab.place(backend, server) as (place, _), contextlib.AsyncExitStack() as stack:
        await asyncio.to_thread(_prepare, place.base, arm, int(params["partitions"]))
        accounts = Accounts(place.base)
        # Silenced, a reader hears of no other process's wakeup: it polls instead, or the last
        # sleepers of a run would wait out the 15 s fallback and the rate would measure that.
        poll = SILENT_POLL_MS if arm == "silent" else None
        starting = [lab.agent(backend, place, poll_ms=poll) for _ in range(processes)]
        starting.append(lab.agent(backend, place, role="client", housekeeping=False))
        settled = await asyncio.gather(*(stack.enter_async_context(a) for a in starting),
                                       return_exceptions=True)
        for outcome in settled:
            if isinstance(outcome, BaseException):
                raise outcome
        started = [outcome for outcome in settled if isinstance(outcome, Agent)]
        workers, loader = started[:processes], started[-1]

        async def arrive() -> int:
            await loader.request("preload", prefix=prefix, count=count, concurrency=WRITERS,
                                 value={"nap_ms": NAP_MS}, timeout=900)
            return count

        rows += await _phase("arrive", accounts, server, [loader], arrive)

        async def work() -> int:
            await asyncio.gather(*(w.request("work", body="soak", pool=32) for w in workers))
            return await _until(workers, place.base, count)

        rows += await _phase("work", accounts, server, workers, work)
        for worker in workers:
            await worker.request("stop")
    return rows


def _prepare(url: str, arm: str, partitions: int) -> None:
    """Make the run's database what the arm asks, before the store opens and migrates it."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        if arm == "silent":
            # Found before pg_catalog's on the database's search path: the store's statements,
            # unchanged, call this and nothing is queued or locked at commit.
            conn.execute("CREATE FUNCTION public.pg_notify(text, text) RETURNS void"
                         " LANGUAGE plpgsql AS $$ BEGIN END $$")
            database = url.rsplit("/", 1)[-1]
            conn.execute(f'ALTER DATABASE "{database}" SET search_path = public, pg_catalog')
        elif arm == "partitioned":
            # The store's own columns and key; `migrate` finds the table there and adds its
            # index, which Postgres makes on every partition.
            conn.execute("CREATE SCHEMA durability")
            conn.execute("CREATE TABLE durability.queue (queue text NOT NULL, workflow text"
                         " NOT NULL, visible_at timestamptz NOT NULL, receipt bigint NOT NULL,"
                         " PRIMARY KEY (queue, workflow)) PARTITION BY HASH (workflow)")
            for n in range(partitions):
                conn.execute(f"CREATE TABLE durability.queue_{n} PARTITION OF durability.queue"
                             f" FOR VALUES WITH (MODULUS {partitions}, REMAINDER {n})")


async def _until(workers: list[Agent], url: str, count: int, patience: float = 600) -> int:
    """Wait until every workflow finished (each passed at least once and the queue is empty);
    how many passes the workers ran."""
    async with asyncio.timeout(patience):
        while True:
            marks = await asyncio.gather(*(w.request("mark") for w in workers))
            done = sum(m["outcomes"] for m in marks)
            if done >= count and await asyncio.to_thread(_queued, url) == 0:
                return int(done)
            await asyncio.sleep(0.1)


def _queued(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(OURS + "SELECT count(*) FROM durability.queue").fetchone()
    return int(row[0]) if row else 0


async def _phase(phase: str, accounts: Accounts, server: Server, agents: list[Agent],
                 run: Any) -> list[dict[str, Any]]:
    """Run one phase and account for it: rows of `phase`, per operation it did."""
    before = [await a.request("mark") for a in agents]
    server_cpu = server.cpu()
    lsn, xid = await asyncio.to_thread(_positions, accounts.url)
    counted = await accounts.read()
    began = time.perf_counter()
    async with Waits(accounts.url, listen=CHANNEL).sampling() as waits:
        operations = await run()
    elapsed = time.perf_counter() - began
    after = [await a.request("mark") for a in agents]
    done = Accounts.delta(counted, await accounts.read())
    lsn_after, xid_after = await asyncio.to_thread(_positions, accounts.url)
    cpu_after = server.cpu()
    if phase == "work":  # from the first pass's start to the last one's end, as throughput
        starts = [a["first_started"] for a in after if a["first_started"]]
        ends = [a["last_outcome"] for a in after if a["last_outcome"]]
        elapsed = (max(ends) - min(starts)) / 1e9
    per = float(operations)
    rows: list[dict[str, Any]] = [
        {"metric": "rate", "value": per / elapsed, "unit": "1/s"},
        {"metric": "operations", "value": per, "unit": "count"},
        {"metric": "span", "value": elapsed, "unit": "s"},
        {"metric": "client_cpu_per_op",
         "value": sum(a["cpu"] - b["cpu"] for a, b in zip(after, before, strict=True))
         / per * 1000, "unit": "ms"},
        {"metric": "wal_bytes_per_op", "value": (lsn_after - lsn) / per, "unit": "B"},
        {"metric": "writes_per_op", "value": (xid_after - xid) / per, "unit": "1"},
        {"metric": "statements_per_op",
         "value": sum(c for c, _, _ in done.statements.values()) / per, "unit": "1"},
        {"metric": "samples", "value": waits.samples, "unit": "count"},
        {"metric": "notifications_per_op", "value": waits.heard / per, "unit": "1"},
    ]
    if server_cpu is not None and cpu_after is not None:
        rows.append({"metric": "server_cpu_per_op", "value": (cpu_after - server_cpu) / per
                     * 1000, "unit": "ms"})
    rows += _statements(done, per)
    rows += [{"metric": "waiting", "wait": name, "value": mean, "unit": "backends"}
             for name, mean in waits.mean(waits.waiting).items()]
    rows += [{"metric": "lock_waits", "lock": name, "value": mean, "unit": "locks"}
             for name, mean in waits.mean(waits.locks).items()]
    rows.append({"metric": "deadlocks", "value": done.database.get("deadlocks", 0),
                 "unit": "count"})
    return [{"phase": phase, **row} for row in rows]


def _statements(done: Reading, per: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, (calls, wal, ms) in sorted(done.statements.items(), key=lambda kv: -kv[1][0]):
        rows += [{"metric": "statement_calls", "statement": name, "value": calls / per,
                  "unit": "1"},
                 {"metric": "statement_wal_bytes", "statement": name, "value": wal / per,
                  "unit": "B"},
                 {"metric": "statement_ms", "statement": name, "value": ms / per,
                  "unit": "ms"}]
    return rows


def _positions(url: str) -> tuple[int, int]:
    """The server's WAL position in bytes and its next transaction id: the WAL written and the
    transactions that wrote between two readings, exactly and at once (the statistics views
    reach them up to seconds late). Server-wide: the server is this run's alone."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            OURS + "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,"
            " pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])
