"""`WalCheckpoints`: copying the WAL back into the database file, off the commits callers wait for.

Left to itself, SQLite checkpoints inside whichever `COMMIT` takes the WAL past 1,000 pages, so
one write in every few hundred (a submission's `arrive`, a pass's finish) waits for a copy of
the WAL and its fsyncs: the tail of submit → first pass. The writer turns that off
(`PRAGMA wal_autocheckpoint = 0`), and this runs a PASSIVE checkpoint on a connection and
thread of its own after every `EVERY` write transactions of this process. PASSIVE waits for no
lock and takes none a writer or reader waits on, so commits go on while it copies. Every
process on the file does the same for its own writes, which keeps the WAL bounded.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3

import aiosqlite

__all__ = ["EVERY", "WalCheckpoints"]

#: Write transactions of this process between two checkpoints: a few hundred WAL pages, so a
#: checkpoint copies a few milliseconds' worth.
EVERY = 64

log = logging.getLogger(__name__)


class WalCheckpoints:
    """This process's checkpoints of the WAL at `path`: `committed()` after each write
    transaction, `close()` at the end. Its connection is opened at the first checkpoint, so a
    process that writes little never holds one. A checkpoint that fails (a lock SQLite would not
    wait for, the file gone) is left for the next: the writes that follow meet the same fault
    and report it themselves."""

    __slots__ = (
        "_closed", "_connection", "_every", "_path", "_running", "_since", "_synchronous",
        "checkpoints",
    )

    def __init__(self, path: str, synchronous: str, *, every: int = EVERY) -> None:
        if every < 1:
            raise ValueError(f"every must be at least 1, not {every}")
        self._path = path
        self._synchronous = synchronous
        self._every = every
        self._since = 0
        self._connection: aiosqlite.Connection | None = None
        self._running: asyncio.Task[None] | None = None
        self._closed = False
        #: How many checkpoints ran to their end (failed ones are not counted).
        self.checkpoints = 0

    def committed(self) -> None:
        """Count one write transaction; start a checkpoint if it is the `every`th since the last
        one began and none is running."""
        self._since += 1
        if self._since < self._every or self._running is not None or self._closed:
            return
        self._since = 0
        self._running = asyncio.get_running_loop().create_task(self._checkpoint())

    async def _checkpoint(self) -> None:
        try:
            connection = self._connection
            if connection is None:
                connection = await aiosqlite.connect(self._path, timeout=0, isolation_level=None)
                self._connection = connection
                await connection.execute(f"PRAGMA synchronous = {self._synchronous}")
            await connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
            self.checkpoints += 1
        except sqlite3.Error as error:
            log.debug("a WAL checkpoint of %s failed (the next will try again): %s", self._path,
                      error)
        finally:
            self._running = None

    async def checkpoint(self) -> None:
        """Wait for the checkpoint running now, if any (for tests and `close`)."""
        running = self._running
        if running is not None:
            await asyncio.shield(running)

    async def close(self) -> None:
        """Let a running checkpoint finish, then close the connection (idempotent)."""
        self._closed = True
        await self.checkpoint()
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()
