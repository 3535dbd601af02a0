"""Waking whoever waits for a workflow's ending (`result`) on SQLite: the ending's commit
notifies a signal named for the workflow, in this process directly and in the others on the
file through the doorbell, as a commit that makes work ready wakes the readers of its queue.
Without a doorbell another process's ending is not heard, so the bell says its channel is down
and `result` looks now and then instead."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta

from durability.sqlite.database import Signal, SqliteDatabase

__all__ = ["SqliteBell", "ended_signal", "watch"]


def ended_signal(workflow: str) -> str:
    """The signal an ending of `workflow` sets (a name no queue has: queues are identifiers)."""
    return f"ended {workflow}"


class SqliteBell:
    """One watcher's bell over the database's signals (`Watching`)."""

    __slots__ = ("_database", "_name", "_signal")

    def __init__(self, database: SqliteDatabase, workflow: str) -> None:
        self._database = database
        self._name = ended_signal(workflow)
        self._signal: Signal = database.signal(self._name, ended=True)

    async def wait(self, within: timedelta) -> bool:
        if not self._database.hears_endings:
            raise ConnectionError("no doorbell: another process's ending would not be heard")
        signal = self._signal
        try:
            async with asyncio.timeout(within.total_seconds()):
                await signal.wait()
        except TimeoutError:
            return False
        # Taken before the caller looks again.
        self._signal = self._database.signal(self._name, ended=True)
        return True


@contextlib.asynccontextmanager
async def watch(database: SqliteDatabase, workflow: str) -> AsyncIterator[SqliteBell]:
    yield SqliteBell(database, workflow)
