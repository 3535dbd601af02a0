"""`migrate`: put a SQLite file in WAL mode and create the stores' tables, from any number of
processes at once.

Every worker process calls `migrate` at start-up, so ten of them often meet on a fresh file.
Two steps can then refuse with `database is locked` without waiting out the busy timeout:
switching to WAL (it needs the file to itself, and SQLite does not always wait for that) and
the first read of a schema another process is writing. Both are retried here with a short,
bounded, jittered backoff; anything else is raised at once.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from datetime import timedelta
from functools import cache
from importlib.resources import files

from durability.checks import positive
from durability.sqlite.database import SqliteDatabase, busy

__all__ = ["SCHEMA_VERSION", "migrate"]

#: The `PRAGMA user_version` a file carries once `schema.sql` and `policies.sql` have run on
#: it (3: the queue's priority and limit, issue 34).
SCHEMA_VERSION = 3

#: The queue's columns for a wakeup's priority and limit, added to a file made before them.
POLICY_COLUMNS = {
    "priority": "INTEGER NOT NULL DEFAULT 0",
    "limit_key": "TEXT",
    "limit_at_most": "INTEGER",
    "limit_per_us": "INTEGER",
}


@cache
def _text(name: str) -> str:
    return files(__package__ or "durability.sqlite").joinpath(name).read_text("utf-8")


def _script(connection: sqlite3.Connection) -> str:
    """The whole migration as one script: the tables, the queue's missing policy columns (read
    before the script runs: a migrator that meets another's columns fails on them, and
    `_migrate` then finds the file migrated), then what stands on those columns."""
    have = {row[1] for row in connection.execute("PRAGMA table_info(durability_queue)")}
    added = "".join(
        f"ALTER TABLE durability_queue ADD COLUMN {name} {kind};\n"
        for name, kind in POLICY_COLUMNS.items()
        if name not in have
    )
    return (
        f"BEGIN IMMEDIATE;\n{_text('schema.sql')}\n{added}{_text('policies.sql')}\n"
        f"PRAGMA user_version = {SCHEMA_VERSION};\nCOMMIT;"
    )


def _migrate(connection: sqlite3.Connection) -> None:
    """One attempt, on the writer's thread.

    The schema (`schema.sql`, the queue's policy columns a file made before them lacks, then
    `policies.sql`) runs in one `BEGIN IMMEDIATE` transaction, then `PRAGMA user_version`
    records it, so a later `migrate` on a ready file only reads two pragmas.
    """
    (mode,) = connection.execute("PRAGMA journal_mode = WAL").fetchone()
    if str(mode).lower() != "wal":
        # SQLite answers with the mode it kept when it could not switch.
        raise sqlite3.OperationalError(f"database is locked (journal mode stayed {mode})")
    (version,) = connection.execute("PRAGMA user_version").fetchone()
    if version >= SCHEMA_VERSION:
        return
    try:
        # executescript runs the text as is: the transaction is spelled out in it.
        connection.executescript(_script(connection))
    except sqlite3.OperationalError as error:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        (version,) = connection.execute("PRAGMA user_version").fetchone()
        if "duplicate column" in str(error) and version >= SCHEMA_VERSION:
            return  # another process added them, and finished the migration, first
        raise
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise


async def migrate(
    database: SqliteDatabase,
    *,
    within: timedelta = timedelta(seconds=30),
) -> None:
    """Make `database` ready for the stores (idempotent, safe from many processes at once).

    Retries a lock conflict with backoff (10 ms doubling to 500 ms, jittered) for up to
    `within`, then raises the last `sqlite3.OperationalError`.
    """
    positive("within", within)
    loop = asyncio.get_running_loop()
    give_up = loop.time() + within.total_seconds()
    delay = 0.01
    while True:
        try:
            await database.writer(_migrate)
            return
        except sqlite3.OperationalError as error:
            if not busy(error) or loop.time() + delay > give_up:
                raise
        # Jitter, so processes that collided once do not collide again in step.
        await asyncio.sleep(delay * random.uniform(0.5, 1.5))
        delay = min(delay * 2, 0.5)
