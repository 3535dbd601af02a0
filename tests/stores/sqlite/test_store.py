"""What is specific to the SQLite store within one process: migration, the file lock, the
in-process wakeup, `SqliteEffect`, single-transaction moves, and cancelled callers."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

pytest.importorskip("aiosqlite", reason="aiosqlite is not installed")

from durability.codec import Unencodable
from durability.interfaces import NotMigrated
from durability.sqlite import (
    SqliteCheckpointer,
    SqliteDatabase,
    SqliteDurable,
    SqliteEffect,
    SqliteScheduler,
    migrate,
    open_database,
)
from durability.sqlite import durable as durable_module

LONG = timedelta(seconds=30)
HOUR = timedelta(hours=1)


# --- migration --------------------------------------------------------------------------


async def test_every_store_used_before_migrate_says_to_migrate(path: Path) -> None:
    database = await open_database(path)
    try:
        checkpointer = SqliteCheckpointer(database)
        scheduler = SqliteScheduler(database)
        durable = SqliteDurable(checkpointer, scheduler)
        for attempt in (
            checkpointer.claim("wf", LONG, LONG),
            checkpointer.load("wf"),
            checkpointer.supply("wf", "k", 1),
            scheduler.prepare(),
            scheduler.make_ready("wf"),
            scheduler.next_ready(timedelta(milliseconds=10)),
            durable.arrive("wf", "k", 1),
        ):
            with pytest.raises(NotMigrated, match="migrate"):
                await attempt
        await migrate(database)
        await scheduler.prepare()
        assert (await checkpointer.supply("wf", "k", 1)).first
    finally:
        await database.close()


async def test_migrate_puts_the_file_in_wal_mode(database: SqliteDatabase, path: Path) -> None:
    def mode(connection: sqlite3.Connection) -> str:
        connection.execute("SELECT count(*) FROM durability_records").fetchall()
        return str(connection.execute("PRAGMA journal_mode").fetchone()[0])

    # The reader was opened before the switch; its first read finds the file in WAL mode.
    assert await database.read(mode) == "wal"
    assert await database.writer(mode) == "wal"


@pytest.mark.parametrize("where", [":memory:", ""])
async def test_an_in_memory_database_is_refused(where: str) -> None:
    with pytest.raises(ValueError, match="file"):
        await open_database(where)


async def test_open_refuses_a_zero_busy_timeout(path: Path) -> None:
    with pytest.raises(ValueError, match="busy_timeout"):
        await open_database(path, busy_timeout=timedelta(0))


# --- the file lock ----------------------------------------------------------------------


def _hold_write_lock(path: Path, held: threading.Event, seconds: float) -> None:
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        held.set()
        threading.Event().wait(seconds)
        other.execute("COMMIT")
    finally:
        other.close()


async def test_a_write_waits_out_another_connection_s_lock(
    database: SqliteDatabase, path: Path
) -> None:
    checkpointer = SqliteCheckpointer(database)
    held = threading.Event()
    holder = asyncio.create_task(asyncio.to_thread(_hold_write_lock, path, held, 0.3))
    await asyncio.to_thread(held.wait)
    # Blocked by the other connection's transaction, then through once it commits.
    assert (await checkpointer.supply("patient", "k", 1)).first
    await holder
    assert await checkpointer.load("patient") == {"k": 1}


async def test_a_lock_held_past_the_busy_timeout_fails_and_writes_nothing(path: Path) -> None:
    setup = await open_database(path)
    await migrate(setup)
    await setup.close()
    database = await open_database(path, busy_timeout=timedelta(milliseconds=50))
    try:
        checkpointer = SqliteCheckpointer(database)
        held = threading.Event()
        holder = asyncio.create_task(asyncio.to_thread(_hold_write_lock, path, held, 0.5))
        await asyncio.to_thread(held.wait)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            await checkpointer.supply("impatient", "k", 1)
        await holder
        # The connection is usable again, and the failed write left nothing behind.
        assert await checkpointer.load("impatient") == {}
        assert (await checkpointer.supply("impatient", "k", 2)).first
    finally:
        await database.close()


async def test_many_connections_claiming_at_once_admit_exactly_one(path: Path) -> None:
    databases = [await open_database(path) for _ in range(4)]
    try:
        await migrate(databases[0])
        checkpointers = [SqliteCheckpointer(database) for database in databases]
        for round_ in range(5):
            workflow = f"contested-{round_}"
            passes = await asyncio.gather(
                *(
                    checkpointers[n % len(checkpointers)].claim(workflow, LONG, LONG)
                    for n in range(40)
                )
            )
            assert len([p for p in passes if p is not None]) == 1
    finally:
        for database in databases:
            await database.close()


# --- waking next_ready ------------------------------------------------------------------


async def test_make_ready_in_this_process_wakes_next_ready_without_a_poll(
    database: SqliteDatabase,
) -> None:
    scheduler = SqliteScheduler(database, poll=HOUR)  # a poll would never come in this test
    reader = asyncio.create_task(scheduler.next_ready(HOUR))
    await asyncio.sleep(0.1)
    assert not reader.done()
    await scheduler.make_ready("prompt")
    delivery = await asyncio.wait_for(reader, timeout=10)
    assert delivery is not None
    assert delivery.workflow == "prompt"


async def test_a_due_wake_at_in_this_process_wakes_next_ready_too(
    database: SqliteDatabase,
) -> None:
    scheduler = SqliteScheduler(database, poll=HOUR)
    await scheduler.make_ready("again")
    first = await scheduler.next_ready(LONG)
    assert first is not None
    reader = asyncio.create_task(scheduler.next_ready(HOUR))
    await asyncio.sleep(0.1)
    assert not reader.done()
    assert await scheduler.wake_at(first, datetime.now(UTC))
    await scheduler.done(first)
    delivery = await asyncio.wait_for(reader, timeout=10)
    assert delivery is not None
    assert delivery.workflow == "again"


async def test_a_reader_cancelled_as_the_signal_comes_ends_cancelled(
    database: SqliteDatabase,
) -> None:
    """`asyncio.wait_for` on 3.11 swallowed a cancellation that came just as the event it
    waited on was set, so the reader went on reading (for an hour here, or took a workflow that
    no pass would run). Cancelled at each loop turn after the signal, it must end cancelled."""
    scheduler = SqliteScheduler(database, poll=HOUR)
    for turns in range(6):
        reader = asyncio.create_task(scheduler.next_ready(HOUR))
        await asyncio.sleep(0.05)
        assert not reader.done()
        database.signal(scheduler.queue).set()
        for _ in range(turns):
            await asyncio.sleep(0)
        reader.cancel()
        await asyncio.wait({reader}, timeout=10)
        try:
            assert reader.cancelled(), f"cancelled {turns} turns after the signal, still reading"
        finally:
            reader.cancel()


async def test_another_connection_s_make_ready_is_found_by_the_poll(
    database: SqliteDatabase, path: Path
) -> None:
    other = await open_database(path)  # no shared signal: as good as another process
    try:
        scheduler = SqliteScheduler(database, poll=timedelta(milliseconds=20))
        reader = asyncio.create_task(scheduler.next_ready(timedelta(seconds=10)))
        await asyncio.sleep(0.1)
        assert not reader.done()
        await SqliteScheduler(other).make_ready("elsewhere")
        delivery = await reader
        assert delivery is not None
        assert delivery.workflow == "elsewhere"
    finally:
        await other.close()


async def test_queues_in_one_file_are_independent(database: SqliteDatabase) -> None:
    left = SqliteScheduler(database, queue="left")
    right = SqliteScheduler(database, queue="right")
    await left.make_ready("same-id")
    assert await right.next_ready(timedelta(milliseconds=100)) is None
    delivery = await left.next_ready(LONG)
    assert delivery is not None
    assert await right.cancel("same-id") == 0
    assert await right.extend(delivery, LONG) is None


# --- SqliteEffect -----------------------------------------------------------------------


@pytest.fixture
async def ledger(database: SqliteDatabase) -> SqliteDatabase:
    await database.write(
        lambda connection: connection.execute(
            "CREATE TABLE ledger (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL)"
        )
    )
    return database


async def _ledger_rows(database: SqliteDatabase) -> list[tuple[int, int]]:
    rows = await database.read(
        lambda connection: connection.execute("SELECT id, amount FROM ledger").fetchall()
    )
    return [(int(a), int(b)) for a, b in rows]


async def test_an_effect_s_result_is_its_first_column_or_its_rowcount(
    ledger: SqliteDatabase,
) -> None:
    checkpointer = SqliteCheckpointer(ledger)
    holder = await checkpointer.claim("effects", LONG, LONG)
    assert holder is not None
    inserted = await checkpointer.transact(
        holder, "insert", SqliteEffect("INSERT INTO ledger (amount) VALUES (?), (?)", (5, 7))
    )
    returned = await checkpointer.transact(
        holder,
        "returning",
        SqliteEffect("INSERT INTO ledger (amount) VALUES (:a) RETURNING amount * 2", {"a": 10}),
    )
    selected = await checkpointer.transact(
        holder, "select", SqliteEffect("SELECT sum(amount), count(*) FROM ledger")
    )
    nothing = await checkpointer.transact(
        holder, "none", SqliteEffect("SELECT amount FROM ledger WHERE amount < 0")
    )
    assert [r.value for r in (inserted, returned, selected, nothing)] == [2, 20, 22, None]
    assert await checkpointer.load("effects") == {
        "insert": 2,
        "returning": 20,
        "select": 22,
        "none": None,
    }


@pytest.mark.parametrize("statement", ["COMMIT", "BEGIN", "SAVEPOINT s", "ROLLBACK"])
async def test_an_effect_may_not_end_the_transaction(
    ledger: SqliteDatabase, statement: str
) -> None:
    checkpointer = SqliteCheckpointer(ledger)
    holder = await checkpointer.claim("sneaky", LONG, LONG)
    assert holder is not None
    with pytest.raises(sqlite3.DatabaseError, match="authorized"):
        await checkpointer.transact(holder, "step", SqliteEffect(statement))
    assert await checkpointer.load("sneaky") == {}
    # The store is still in order: the next transaction works.
    effect = SqliteEffect("INSERT INTO ledger (amount) VALUES (1)")
    await checkpointer.transact(holder, "step", effect)
    assert await _ledger_rows(ledger) == [(1, 1)]


async def test_an_effect_whose_result_the_codec_refuses_is_rolled_back(
    ledger: SqliteDatabase,
) -> None:
    checkpointer = SqliteCheckpointer(ledger)
    holder = await checkpointer.claim("blob", LONG, LONG)
    assert holder is not None
    effect = SqliteEffect("INSERT INTO ledger (amount) VALUES (3) RETURNING x'00ff'")
    with pytest.raises(Unencodable):
        await checkpointer.transact(holder, "blob", effect)
    assert await _ledger_rows(ledger) == []
    assert await checkpointer.load("blob") == {}


async def test_a_failing_effect_records_nothing(ledger: SqliteDatabase) -> None:
    checkpointer = SqliteCheckpointer(ledger)
    holder = await checkpointer.claim("failing", LONG, LONG)
    assert holder is not None
    with pytest.raises(sqlite3.IntegrityError):
        await checkpointer.transact(
            holder, "step", SqliteEffect("INSERT INTO ledger (amount) VALUES (NULL)")
        )
    assert await checkpointer.load("failing") == {}


async def test_an_effect_on_a_missing_table_is_the_effect_s_error_not_migration(
    database: SqliteDatabase,
) -> None:
    checkpointer = SqliteCheckpointer(database)
    holder = await checkpointer.claim("typo", LONG, LONG)
    assert holder is not None
    with pytest.raises(sqlite3.OperationalError, match="no such table: ledgre") as raised:
        await checkpointer.transact(holder, "step", SqliteEffect("DELETE FROM ledgre"))
    assert not isinstance(raised.value, NotMigrated)


# --- one transaction per move -----------------------------------------------------------


async def test_an_arrival_that_fails_halfway_leaves_neither_half(
    database: SqliteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    durable = SqliteDurable(SqliteCheckpointer(database), SqliteScheduler(database))

    def broken(*_: object) -> None:
        raise RuntimeError("the queue write failed")

    monkeypatch.setattr(durable_module, "ready_step", broken)
    with pytest.raises(RuntimeError):
        await durable.arrive("half", "order", 1)
    with pytest.raises(RuntimeError):
        await durable.deliver("half", "message")
    # The supply and the append ran first in each transaction, and were rolled back with it.
    assert await durable.checkpointer.load("half") == {}
    monkeypatch.undo()
    entry = await durable.deliver("half", "message")
    assert entry.key.endswith("1")  # the rolled-back append minted no number


async def test_a_delete_that_fails_halfway_cancels_nothing(
    database: SqliteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    durable = SqliteDurable(SqliteCheckpointer(database), SqliteScheduler(database))
    await durable.arrive("kept", "order", 1)

    def broken(*_: object) -> int:
        raise RuntimeError("the discard failed")

    monkeypatch.setattr(durable_module, "discard_step", broken)
    with pytest.raises(RuntimeError):
        await durable.delete("kept")
    assert await durable.checkpointer.load("kept") == {"order": 1}
    delivery = await durable.scheduler.next_ready(LONG)
    assert delivery is not None
    assert delivery.workflow == "kept"


async def test_the_durable_needs_one_database(database: SqliteDatabase, path: Path) -> None:
    other = await open_database(path)
    try:
        with pytest.raises(ValueError, match="one SqliteDatabase"):
            SqliteDurable(SqliteCheckpointer(database), SqliteScheduler(other))
    finally:
        await other.close()


# --- robustness -------------------------------------------------------------------------


async def test_a_cancelled_caller_leaves_no_transaction_open(database: SqliteDatabase) -> None:
    checkpointer = SqliteCheckpointer(database)
    holder = await checkpointer.claim("cancelled", LONG, LONG)
    assert holder is not None
    for n in range(20):
        task = asyncio.create_task(checkpointer.record(holder, f"step-{n}", n))
        await asyncio.sleep(0)
        task.cancel()
    await asyncio.sleep(0.1)
    # Each cancelled write either committed whole or never ran; the connection is clean.
    assert not database._writer_raw.in_transaction
    records = await checkpointer.load("cancelled")
    assert all(records[key] == int(key.split("-")[1]) for key in records)
    assert (await checkpointer.record(holder, "after", True)).first


@pytest.mark.parametrize(
    "workflow", ["'; DROP TABLE durability_records; --", 'quote"d', "emoji 🧾", "new\nline ?1 :x"]
)
async def test_workflow_ids_are_data_not_sql(database: SqliteDatabase, workflow: str) -> None:
    durable = SqliteDurable(SqliteCheckpointer(database), SqliteScheduler(database))
    await durable.arrive(workflow, "order", 1)
    holder = await durable.checkpointer.claim(workflow, LONG, LONG)
    assert holder is not None
    await durable.checkpointer.record(holder, "paid", True)
    assert await durable.checkpointer.load(workflow) == {"order": 1, "paid": True}
    delivery = await durable.scheduler.next_ready(LONG)
    assert delivery is not None
    assert delivery.workflow == workflow
    assert await durable.delete(workflow) == 2
