"""A pass's record that meets the file locked by another process for longer than the store's
busy timeout (`database is locked`): the pass writes it again rather than report the step as
failed. `cut` has a second connection, as another process would, take the write lock and hold
it a while from a thread of its own."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from durability.interfaces import Durable
from durability.testing.conformance import Cut, StoreFaultContract

#: The store gives up waiting for a lock after this long...
BUSY = timedelta(milliseconds=100)
#: ...and the other process holds it for this long: several times over, fewer than the tries.
HELD = timedelta(milliseconds=400)


class LockTheFile:
    """`cut` for SQLite (see the module doc)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.threads: list[threading.Thread] = []
        self.held = 0

    async def __call__(self) -> None:
        taken = threading.Event()

        def hold() -> None:
            other = sqlite3.connect(self.path, isolation_level=None)
            try:
                other.execute("BEGIN IMMEDIATE")
                self.held += 1
                taken.set()
                threading.Event().wait(HELD.total_seconds())
                other.execute("ROLLBACK")
            finally:
                taken.set()
                other.close()

        thread = threading.Thread(target=hold)
        thread.start()
        self.threads.append(thread)
        await asyncio.to_thread(taken.wait)


class TestSqliteLockedMidRecord(StoreFaultContract):
    @pytest.fixture
    async def durable(self, path: Path) -> AsyncIterator[Durable]:
        from durability.sqlite import (
            SqliteCheckpointer,
            SqliteDurable,
            SqliteScheduler,
            migrate,
            open_database,
        )

        database = await open_database(path, busy_timeout=BUSY)
        try:
            await migrate(database)
            scheduler = SqliteScheduler(database, lease=timedelta(seconds=5))
            yield SqliteDurable(SqliteCheckpointer(database), scheduler)
        finally:
            await database.close()

    @pytest.fixture
    async def cut(self, path: Path) -> AsyncIterator[Cut]:
        lock = LockTheFile(path)
        yield lock
        for thread in lock.threads:
            await asyncio.to_thread(thread.join)
        assert lock.held, "the other connection never took the lock"


# --- a lock held inside the busy timeout ----------------------------------------------------


@pytest.mark.parametrize("write", ["transaction", "alone", "take"])
async def test_a_write_that_meets_another_process_s_lock_waits_for_it_and_lands(
    path: Path, write: str
) -> None:
    # The writer has no SQLite busy handler (it waits in finer steps itself): every kind of
    # write that takes the lock must still wait for it, and land once it is free.
    from durability.sqlite import SqliteScheduler, migrate, open_database

    database = await open_database(path, busy_timeout=timedelta(seconds=10))
    try:
        await migrate(database)
        scheduler = SqliteScheduler(database, lease=timedelta(seconds=5))
        await scheduler.make_ready("held")
        taken = await scheduler.next_ready(timedelta(seconds=1))
        assert taken is not None
        released = threading.Event()
        holding = threading.Event()

        def hold() -> None:
            other = sqlite3.connect(path, isolation_level=None)
            try:
                other.execute("BEGIN IMMEDIATE")
                holding.set()
                threading.Event().wait(0.2)
                released.set()
                other.execute("ROLLBACK")
            finally:
                holding.set()
                other.close()

        thread = threading.Thread(target=hold)
        thread.start()
        await asyncio.to_thread(holding.wait)
        if write == "transaction":
            await scheduler.make_ready("woken")  # BEGIN IMMEDIATE ... COMMIT
            landed = await scheduler.next_ready(timedelta(seconds=1))
            assert landed is not None and landed.workflow == "woken"
        elif write == "alone":
            await scheduler.done(taken)  # one statement, its own transaction
            assert await scheduler.next_ready(timedelta(milliseconds=50)) is None
        else:
            await scheduler.make_ready("late")
            await asyncio.to_thread(thread.join)
            thread = threading.Thread(target=hold)
            released.clear()
            holding.clear()
            thread.start()
            await asyncio.to_thread(holding.wait)
            landed = await scheduler.next_ready(timedelta(seconds=1))  # the take, alone
            assert landed is not None and landed.workflow == "late"
        assert released.is_set(), "the write went ahead while the other process held the lock"
        await asyncio.to_thread(thread.join)
    finally:
        await database.close()
