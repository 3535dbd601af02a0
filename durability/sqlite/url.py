"""`open_url`: a `sqlite:///path` URL to an open `SqliteDurable` over that file, migrated on
open (`open_durable`'s SQLite entry). `sqlite:///path` names an absolute path,
`sqlite://relative/file.db` one relative to the working directory; the file is the
application's own (its namespace). Its options (`open_url` lists them) are checked here.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

from durability.interfaces import Durable
from durability.opening import Opening
from durability.sqlite.checkpointer import SqliteCheckpointer
from durability.sqlite.database import open_database
from durability.sqlite.durable import SqliteDurable
from durability.sqlite.migrate import migrate
from durability.sqlite.scheduler import SqliteScheduler
from durability.storekit.outage import StoreUnavailable

__all__ = ["OPTIONS", "open_url"]

#: The options of a SQLite URL (it takes no driver's).
OPTIONS = ("queue", "call_timeout_ms", "doorbell")


@contextlib.asynccontextmanager
async def open_url(opening: Opening) -> AsyncIterator[Durable]:
    """The `SqliteDurable` a SQLite URL names, the file migrated and the scheduler prepared;
    the database closed when the block ends.

    | option | meaning |
    |---|---|
    | `queue` | the queue's name (`default`) |
    | `doorbell` | `on` (default): the processes on the file wake each other's idle readers; `off` |
    | `call_timeout_ms` | how long a call waits for another connection's lock (10 s) |
    """
    url = opening.url
    parts = urlsplit(url)
    ours, _ = opening.options(OPTIONS)
    doorbell = opening.switch(
        ours, "doorbell", f"doorbell must be 'on' or 'off': {opening.shown!r}"
    )
    path = parts.netloc + parts.path
    if not path or path == "/":
        raise ValueError(f"sqlite:// needs a file path (sqlite:///path/to/file.db), got {url!r}")
    queue = ours.get("queue", "default")
    # SQLite waits on nothing but another connection's lock: the call bound is that wait.
    busy_timeout = opening.call_timeout(ours)
    # Checked here because SQLite would only say "unable to open database file" (and aiosqlite
    # leaves the thread of a connection that failed to open to finish on its own).
    folder = Path(path).parent
    if not folder.is_dir():
        raise StoreUnavailable(f"the directory of the SQLite file {path!r} does not exist")
    try:
        database = await open_database(path, busy_timeout=busy_timeout, doorbell=doorbell)
    except sqlite3.OperationalError as error:  # not allowed to create or open it, say
        raise StoreUnavailable(f"could not open the SQLite file {path!r}: {error}") from error
    try:
        await migrate(database)
        extra = {} if opening.poll is None else {"poll": opening.poll}
        scheduler = SqliteScheduler(database, lease=opening.lease, queue=queue, **extra)
        await scheduler.prepare()
        yield SqliteDurable(SqliteCheckpointer(database), scheduler)
    finally:
        await database.close()
