"""A scheduler of your own, the lab's example: SQLite's queue, taken on a steady poll.

`SteadySqliteScheduler` is our `SqliteScheduler` with one thing changed: how an idle reader
waits. Ours looks without the write lock, is woken by the doorbell the processes on the file
ring, and otherwise looks when the earliest hidden row shows; this one simply tries a take,
under the write lock, every `poll` (10 ms unless the lab asks for another), which is the first
design anyone writes. Everything else (rows, receipts, leases, the joined moves of
`SqliteDurable`) is ours, so the difference the lab measures is the wait alone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import TypeVar
from urllib.parse import parse_qsl, urlsplit

from durability.cancelling import stop_if_cancelled
from durability.interfaces import Durable, positive
from durability.sqlite import (
    SqliteCheckpointer,
    SqliteDurable,
    SqliteScheduler,
    migrate,
    open_database,
)

__all__ = ["POLL", "SteadySqliteScheduler", "open_store"]

T = TypeVar("T")

#: How often an idle reader tries a take unless told otherwise.
POLL = timedelta(milliseconds=10)


class SteadySqliteScheduler(SqliteScheduler):
    """`SqliteScheduler`, waiting by trying a take every `poll`: no unlocked look, no
    doorbell, no sleeping until the earliest hidden row shows."""

    async def when_ready(
        self,
        within: timedelta,
        take: Callable[..., T | None],
        *,
        alone: bool = False,
    ) -> T | None:
        positive("within", within)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + within.total_seconds()
        while True:
            found = await (self.database.alone(take) if alone else self.database.write(take))
            if found is not None:
                return found
            stop_if_cancelled()  # the driver's thread may have swallowed a cancel
            remaining = give_up - loop.time()
            if remaining <= 0:
                return None
            await asyncio.sleep(min(self.poll.total_seconds(), remaining))


@contextlib.asynccontextmanager
async def open_store(
    url: str,
    *,
    lease: timedelta = timedelta(seconds=30),
    poll: timedelta | None = None,
    housekeeping: bool = False,
) -> AsyncIterator[Durable]:
    """The SQLite store at `url` (`sqlite:///path/file.db[?queue=name]`) with a
    `SteadySqliteScheduler`; `housekeeping` has nothing to do here. It has `open_durable`'s
    signature: it is what `lab.register` names, and what each of the lab's agents imports and
    calls with the URL of the file it made for the run."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or not parts.path:
        raise ValueError(f"open_store takes sqlite:///path/file.db, not {url!r}")
    queue = dict(parse_qsl(parts.query)).get("queue", "default")
    database = await open_database(parts.netloc + parts.path, doorbell=False)
    try:
        await migrate(database)
        scheduler = SteadySqliteScheduler(database, lease=lease, poll=poll or POLL, queue=queue)
        await scheduler.prepare()
        yield SqliteDurable(SqliteCheckpointer(database), scheduler)
    finally:
        await database.close()
