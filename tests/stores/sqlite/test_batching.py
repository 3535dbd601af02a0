"""Group commit: writes that wait for the writer's thread at the same time share one
transaction, each behind a savepoint, and each caller still gets its own answer."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from durability import NotMigrated
from durability.sqlite import SqliteDatabase, open_database
from durability.sqlite.batching import MOST


def _insert(name: str) -> Callable[[sqlite3.Connection], str]:
    def work(connection: sqlite3.Connection) -> str:
        connection.execute("INSERT INTO durability_standings VALUES (?, 'queued', '{}', 0)",
                           (name,))
        return name

    return work


def _insert_then_raise(name: str, error: BaseException) -> Callable[[sqlite3.Connection], str]:
    def work(connection: sqlite3.Connection) -> str:
        connection.execute("INSERT INTO durability_standings VALUES (?, 'queued', '{}', 0)",
                           (name,))
        raise error

    return work


async def _names(database: SqliteDatabase) -> set[str]:
    rows = await database.read(
        lambda connection: connection.execute("SELECT workflow FROM durability_standings")
        .fetchall())
    return {row[0] for row in rows}


async def test_writes_asked_for_together_share_one_hop_and_each_gets_its_own_answer(
        database: SqliteDatabase) -> None:
    before = database.traffic.snapshot()
    names = [f"w{i}" for i in range(20)]
    got = await asyncio.gather(*(database.write(_insert(n)) for n in names))
    sent = database.traffic.snapshot() - before
    assert got == names
    assert sent.round_trips == 1  # twenty writes, one transaction
    assert sent.requests.get("SAVEPOINT") == 20
    assert await _names(database) == set(names)


async def test_one_write_that_raises_is_rolled_back_alone(database: SqliteDatabase) -> None:
    class Refused(Exception):
        pass

    writes = [
        _insert("a"),
        _insert_then_raise("b", Refused("no")),
        _insert("c"),
        _insert("a"),  # breaks the primary key: its own error, its own rollback
    ]
    got = await asyncio.gather(*(database.write(w) for w in writes),
                               return_exceptions=True)
    assert got[0] == "a" and got[2] == "c"
    assert isinstance(got[1], Refused)
    assert isinstance(got[3], sqlite3.IntegrityError)
    assert await _names(database) == {"a", "c"}


async def test_a_library_interruption_is_rolled_back_alone_too(database: SqliteDatabase) -> None:
    """`Fenced` is a `BaseException`: a write that raises it must still leave the others."""
    from durability import Fenced

    fenced = Fenced("w", 1, "a newer claim exists")
    got = await asyncio.gather(database.write(_insert("x")),
                               database.write(_insert_then_raise("y", fenced)),
                               return_exceptions=True)
    assert got[0] == "x" and got[1] is fenced
    assert await _names(database) == {"x"}


async def test_an_error_that_ends_the_transaction_fails_every_member(
        database: SqliteDatabase) -> None:
    """Had SQLite rolled the whole transaction back (a full disk, an I/O error), the members
    that ran before it lost their writes too: each must hear so, none may be told it landed."""

    def ends_everything(connection: sqlite3.Connection) -> None:
        connection.execute("INSERT INTO durability_standings VALUES ('z', 'queued', '{}', 0)")
        connection.execute("ROLLBACK")  # what SQLite does itself on such an error
        raise sqlite3.OperationalError("disk I/O error")

    got = await asyncio.gather(database.write(_insert("p")),
                               database.write(ends_everything),
                               database.write(_insert("q")),
                               return_exceptions=True)
    assert all(isinstance(g, sqlite3.OperationalError) for g in got), got
    assert await _names(database) == set()
    assert await database.write(_insert("r")) == "r"  # carries on


async def test_a_burst_larger_than_a_transaction_takes_goes_in_several(
        database: SqliteDatabase) -> None:
    before = database.traffic.snapshot()
    names = [f"n{i:03}" for i in range(MOST * 2 + 5)]
    await asyncio.gather(*(database.write(_insert(n)) for n in names))
    sent = database.traffic.snapshot() - before
    assert sent.round_trips == 3
    assert await _names(database) == set(names)


async def test_a_cancelled_caller_does_not_undo_the_others(database: SqliteDatabase) -> None:
    first = asyncio.ensure_future(database.write(_insert("kept-1")))
    gone = asyncio.ensure_future(database.write(_insert("maybe")))
    last = asyncio.ensure_future(database.write(_insert("kept-2")))
    await asyncio.sleep(0)
    gone.cancel()
    assert await first == "kept-1" and await last == "kept-2"
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert {"kept-1", "kept-2"} <= await _names(database)


async def test_a_missing_table_in_a_shared_transaction_says_to_migrate(path: Path) -> None:
    unmigrated = await open_database(path)
    try:
        got = await asyncio.gather(*(unmigrated.write(_insert(n)) for n in "ab"),
                                   return_exceptions=True)
    finally:
        await unmigrated.close()
    assert all(isinstance(g, NotMigrated) for g in got), got


async def test_a_write_after_close_fails_at_once_and_does_not_hang(path: Path) -> None:
    closed = await open_database(path)
    await closed.close()
    with pytest.raises(ValueError, match="closed"):
        await asyncio.wait_for(closed.write(_insert("late")), 30)
