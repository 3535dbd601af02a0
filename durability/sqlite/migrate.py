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

#: The `PRAGMA user_version` a file carries once `schema.sql` has run on it.
SCHEMA_VERSION = 2


@cache
def _schema() -> str:
    return files(__package__ or "durability.sqlite").joinpath("schema.sql").read_text("utf-8")


def _migrate(connection: sqlite3.Connection) -> None:
    """One attempt, on the writer's thread.

    The schema (`schema.sql`) is idempotent and runs in one `BEGIN IMMEDIATE` transaction, then
    `PRAGMA user_version` records it, so a later `migrate` on a ready file only reads two pragmas.
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
        connection.executescript(
            f"BEGIN IMMEDIATE;\n{_schema()}\nPRAGMA user_version = {SCHEMA_VERSION};\nCOMMIT;"
        )
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
