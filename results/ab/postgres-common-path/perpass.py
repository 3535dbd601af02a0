"""What one pass of the common path costs on Postgres, counted rather than timed.

    cd <a checkout> && .venv/bin/python <this file> URL [--workflows N] [--pool 32] [--profile]

URL is a server with `pg_stat_statements` loaded (a private one: `run.sh` starts it); a fresh
database is made on it for the run. `N` one-step workflows (the lab's `one-step` body) are
arrived first, then one `work` in this process works them off. Over that window only, per pass:
each statement's calls, server execution time, rows, buffers and WAL (`pg_stat_statements`,
named by the checkout's own `.sql` files), the server's commits and WAL (`pg_stat_wal`,
`pg_stat_database`), the store's requests and round trips (`durable.traffic`), this process's
CPU, and with `--profile` the Python calls the window made (cProfile; CPU then reads high).
Run it from the checkout under test: it imports `durability` and `experiments` from there.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import re
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, os.getcwd())

import contextlib

import psycopg

from durability import work
from durability.connect import open_durable
from experiments.harness.bodies import one_step

_CTE = re.compile(r"(\w+)\s+AS\s+(?:NOT\s+)?(?:MATERIALIZED\s+)?\(", re.IGNORECASE)
_COMMENT = re.compile(r"--[^\n]*")


def _shape(sql: str) -> str:
    """A statement's CTE names in order (or its first words): the text the store sent and the
    one `pg_stat_statements` kept (its constants made parameters) come out alike."""
    text = _COMMENT.sub(" ", sql)
    ctes = _CTE.findall(text)
    return " ".join(ctes) if ctes else " ".join(text.split())[:60]


def _names() -> dict[str, str]:
    from durability.postgres import statements as loaded

    shapes: dict[str, str] = {}
    for file in ("durable.sql", "scheduler.sql", "checkpointer.sql"):
        for name, text in loaded.statements(file, "durability").items():
            if text.rstrip().endswith(","):  # a part other statements include, not sent alone
                continue
            shapes.setdefault(_shape(text), f"{file.removesuffix('.sql')}.{name}")
    return shapes


_COLUMNS = ("calls", "rows", "total_exec_time", "shared_blks_hit", "shared_blks_read",
            "shared_blks_dirtied", "wal_records", "wal_fpi", "wal_bytes")


def _server(admin: str, database: str) -> dict[str, Any]:
    with psycopg.connect(admin, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT s.query, " + ", ".join(f"s.{c}" for c in _COLUMNS)
            + " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
            " WHERE d.datname = %s", (database,)).fetchall()
        wal = conn.execute("SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal").fetchone()
        db = conn.execute("SELECT xact_commit, tup_inserted, tup_updated, tup_deleted,"
                          " tup_fetched, blks_hit FROM pg_stat_database WHERE datname = %s",
                          (database,)).fetchone()
        pids = [p for (p,) in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,)).fetchall()]
    assert wal is not None and db is not None
    return {"statements": {str(r[0]): [float(v or 0) for v in r[1:]] for r in rows},
            "wal": [float(v) for v in wal], "db": [float(v) for v in db], "cpu": _cpu(pids)}


def _cpu(pids: list[int]) -> dict[int, float]:
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / tick
    return out


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    database = f"pp_{uuid.uuid4().hex[:8]}"
    admin = args.url
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute(f"CREATE DATABASE {database}")
    url = admin.rsplit("/", 1)[0] + "/" + database
    outcomes = 0
    done = asyncio.Event()

    def observe(event: Any) -> None:
        nonlocal outcomes
        if event.kind == "outcome":
            outcomes += 1
            if outcomes >= args.workflows:
                done.set()

    async with open_durable(url, lease=timedelta(seconds=30), housekeeping=True) as durable:
        gate = asyncio.Semaphore(64)

        async def arrive(i: int) -> None:
            async with gate:
                await durable.arrive(f"pp-{i}", "order", {"sku": "A-1"})

        await asyncio.gather(*(arrive(i) for i in range(args.workflows)))
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")
            conn.execute("SELECT pg_stat_reset_shared('wal')")
        traffic = getattr(durable, "traffic", None)
        sent = traffic.snapshot() if traffic is not None else None
        before = _server(admin, database)
        profile = cProfile.Profile() if args.profile else None
        cpu0, wall0 = time.process_time(), time.perf_counter()
        if profile is not None:
            profile.enable()
        worker = asyncio.create_task(work(durable, one_step, pool=args.pool, observer=observe))
        await done.wait()
        await asyncio.sleep(0.3)  # the last finishes land
        if profile is not None:
            profile.disable()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        passes = outcomes
        after = _server(admin, database)
        sent_after = traffic.snapshot() if traffic is not None else None
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await worker
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {database} WITH (FORCE)")
    return _report(args, passes, cpu, wall, before, after, sent, sent_after, profile)


def _report(args: argparse.Namespace, passes: int, cpu: float, wall: float,
            before: dict[str, Any], after: dict[str, Any], sent: Any, sent_after: Any,
            profile: cProfile.Profile | None) -> dict[str, Any]:
    shapes = _names()
    per: dict[str, list[float]] = {}
    for query, values in after["statements"].items():
        was = before["statements"].get(query, [0.0] * len(_COLUMNS))
        delta = [a - b for a, b in zip(values, was, strict=True)]
        if delta[0] <= 0 or "pg_stat" in query:
            continue
        name = shapes.get(_shape(query), "? " + " ".join(query.split())[:70])
        total = per.setdefault(name, [0.0] * len(_COLUMNS))
        per[name] = [t + d for t, d in zip(total, delta, strict=True)]
    server_cpu = sum(c - before["cpu"].get(pid, 0.0) for pid, c in after["cpu"].items())
    report: dict[str, Any] = {
        "revision": os.popen("git rev-parse --short HEAD").read().strip(),
        "passes": passes,
        "worker_cpu_ms_per_pass": cpu / passes * 1000,
        "wall_ms_per_pass": wall / passes * 1000,
        "server_backend_cpu_ms_per_pass": server_cpu / passes * 1000,
        "statements_per_pass": {
            name: dict(zip(_COLUMNS, [round(v / passes, 4) for v in values], strict=True))
            for name, values in sorted(per.items())
        },
        "exec_ms_per_pass": round(sum(v[2] for v in per.values()) / passes, 4),
        "wal": dict(zip(("records", "fpi", "bytes"), [
            round((a - b) / passes, 2) for a, b in zip(after["wal"], before["wal"], strict=True)
        ], strict=True)),
        "database": dict(zip(("commits", "inserted", "updated", "deleted", "fetched",
                              "blks_hit"), [
            round((a - b) / passes, 3) for a, b in zip(after["db"], before["db"], strict=True)
        ], strict=True)),
    }
    if sent is not None and sent_after is not None:
        requests = {k: (sent_after.requests.get(k, 0) - sent.requests.get(k, 0)) / passes
                    for k in sent_after.requests}
        report["requests_per_pass"] = {k: round(v, 4) for k, v in sorted(requests.items()) if v}
        report["round_trips_per_pass"] = round(
            (sent_after.round_trips - sent.round_trips) / passes, 4)
    if profile is not None:
        stats = pstats.Stats(profile)
        report["python_calls_per_pass"] = round(stats.total_calls / passes, 1)  # type: ignore[attr-defined]
        report["python_primitive_calls_per_pass"] = round(stats.prim_calls / passes, 1)  # type: ignore[attr-defined]
        if args.profile_out:
            stats.dump_stats(args.profile_out)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--workflows", type=int, default=3000)
    parser.add_argument("--pool", type=int, default=32)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-out")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(_run(args)), indent=1))


if __name__ == "__main__":
    main()
