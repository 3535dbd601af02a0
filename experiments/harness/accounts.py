"""What a private Postgres server says it spent: its statements, its WAL, its waits.

`Accounts(url)` reads, before and after a window, `pg_stat_statements` (each statement's calls,
WAL bytes and time, for the place's database), `pg_stat_wal` and `pg_stat_database`. `Waits`
samples meanwhile what the database's active backends wait on (`pg_stat_activity`) and the
locks not granted (`pg_locks`), and counts the notifications sent. A statement is named by
what it writes (`INSERT records + UPDATE queue`): the store's statements are each one CTE
chain, whose first words say nothing (`WITH now AS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OURS", "Accounts", "Reading", "Waits", "NOTIFY_LOCK", "written"]

#: What the lab's own statements begin with, so the accounts leave them out (the server keeps a
#: statement's comments in `pg_stat_statements`).
OURS = "/* lab */ "

#: What `pg_locks` shows for the lock a committing transaction that sent a NOTIFY holds until
#: its commit ends: a lock on database 0's catalogue entry, one for the whole server.
NOTIFY_LOCK = "notify (commit order)"

_WRITES = re.compile(r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(?:ONLY\s+)?(\w+)\.(\w+)",
                     re.IGNORECASE)
_READS = re.compile(r"\bFROM\s+(\w+)\.(\w+)", re.IGNORECASE)


def written(query: str) -> str:
    """A statement named by what it writes, in order (`UPDATE queue + INSERT standings`), or by
    what it reads where it writes nothing (`SELECT queue`)."""
    seen: list[str] = []
    for verb, _, table in _WRITES.findall(query):
        name = f"{verb.split()[0].upper()} {table}"
        if name not in seen:
            seen.append(name)
    if not seen:
        tables = list(dict.fromkeys(table for _, table in _READS.findall(query)))
        words = query.split()
        head = words[0].upper() if words else "?"
        seen = [f"{head} {' '.join(tables)}".strip()]
    if "pg_notify" in query:
        seen.append("NOTIFY")
    return " + ".join(seen)


@dataclass(frozen=True, slots=True)
class Reading:
    """The counters at one moment: per statement name, its calls, WAL bytes and execution
    milliseconds; the server's WAL; the database's commits and trouble."""

    statements: dict[str, tuple[int, int, float]]
    wal: dict[str, float]
    database: dict[str, int]


class Accounts:
    """The counters of a private Postgres server, for the database `url` names."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.database = url.rsplit("/", 1)[-1].split("?")[0]

    async def read(self) -> Reading:
        return await asyncio.to_thread(self._read)

    def _read(self) -> Reading:
        import psycopg

        base = self.url.rsplit("/", 1)[0]
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            statements: dict[str, tuple[int, int, float]] = {}
            for query, calls, wal, ms in conn.execute(
                OURS + "SELECT s.query, s.calls, s.wal_bytes, s.total_exec_time"
                " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
                " WHERE d.datname = %s", (self.database,)
            ).fetchall():
                if str(query).startswith(OURS.strip()):
                    continue
                name = written(str(query))
                was = statements.get(name, (0, 0, 0.0))
                statements[name] = (was[0] + int(calls), was[1] + int(wal),
                                    was[2] + float(ms))
            row = conn.execute(
                "SELECT wal_records, wal_fpi, wal_bytes, wal_write, wal_sync FROM pg_stat_wal"
            ).fetchone()
            wal = dict(zip(("records", "fpi", "bytes", "writes", "syncs"),
                           (float(v) for v in row or ()), strict=False))
            row = conn.execute(
                "SELECT xact_commit, xact_rollback, deadlocks, conflicts FROM pg_stat_database"
                " WHERE datname = %s", (self.database,)
            ).fetchone()
            database = dict(zip(("commits", "rollbacks", "deadlocks", "conflicts"),
                                (int(v) for v in row or ()), strict=False))
        return Reading(statements, wal, database)

    @staticmethod
    def delta(before: Reading, after: Reading) -> Reading:
        """What happened between two readings."""
        statements = {}
        for name, (calls, wal, ms) in after.statements.items():
            was = before.statements.get(name, (0, 0, 0.0))
            if calls - was[0]:
                statements[name] = (calls - was[0], wal - was[1], ms - was[2])
        return Reading(statements,
                       {k: v - before.wal.get(k, 0.0) for k, v in after.wal.items()},
                       {k: v - before.database.get(k, 0) for k, v in after.database.items()})


@dataclass
class Waits:
    """Samples of what the database's active backends wait on, and the locks not granted."""

    url: str
    every: float = 0.02
    #: A channel to listen on meanwhile, counting what is heard (`heard`).
    listen: str = ""
    samples: int = 0
    heard: int = 0
    waiting: Counter[str] = field(default_factory=Counter)
    locks: Counter[str] = field(default_factory=Counter)

    @contextlib.asynccontextmanager
    async def sampling(self) -> AsyncIterator[Waits]:
        """Sample every `every` seconds while the block runs."""
        import psycopg

        conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        if self.listen:
            conn.add_notify_handler(self._heard)
            await conn.execute(f"{OURS}LISTEN {self.listen}")  # a name of ours
        task = asyncio.create_task(self._sample(conn))
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await conn.execute(OURS + "SELECT 1")  # what was sent meanwhile arrives with it
            await conn.close()

    def _heard(self, _: Any) -> None:
        self.heard += 1

    async def _sample(self, conn: Any) -> None:
        while True:
            active = await (await conn.execute(
                OURS + "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'), count(*)"
                " FROM pg_stat_activity WHERE datname = current_database()"
                " AND state = 'active' AND pid <> pg_backend_pid() GROUP BY 1")).fetchall()
            blocked = await (await conn.execute(
                OURS + "SELECT CASE WHEN locktype = 'object' AND classid = 'pg_database'::regclass"
                " AND objid = 0 THEN %s ELSE locktype END, count(*)"
                " FROM pg_locks WHERE NOT granted GROUP BY 1", (NOTIFY_LOCK,))).fetchall()
            self.samples += 1
            for name, count in active:
                self.waiting[str(name)] += int(count)
            for name, count in blocked:
                self.locks[str(name)] += int(count)
            await asyncio.sleep(self.every)

    def mean(self, counts: Counter[str]) -> dict[str, float]:
        """Per name, how many backends were seen in it on average over the samples."""
        return {name: n / self.samples for name, n in counts.most_common()} if self.samples \
            else {}
