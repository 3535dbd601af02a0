"""Priorities and limits on SQLite (issue 34): strict priority, the merge rule, a sleeper that
comes back as it went, limits that never overshoot with takers on several connections to one
file, a slot freed by done (rung as an arrival is), by a delete and by a lapsed lease (an idle
reader's next look covers it), a rate window (a cancel gives none of it back), and a file made
before any of this migrated with its rows kept.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from durability import Limit
from durability.sqlite import (
    SCHEMA_VERSION,
    SqliteCheckpointer,
    SqliteDatabase,
    SqliteDurable,
    SqliteScheduler,
    migrate,
    open_database,
)
from durability.sqlite.scheduler import take_step
from durability.testing.races import most_held_at_once, taken_at_a_limit_of_one
from durability.values import Delivery

SHORT = timedelta(milliseconds=200)
SLOW_POLL = timedelta(seconds=30)  # longer than any wait below: only a ring can help
BUDGET = timedelta(seconds=30)


async def _take_all(scheduler: SqliteScheduler) -> list[Delivery]:
    taken: list[Delivery] = []
    while (delivery := await scheduler.next_ready(timedelta(milliseconds=100))) is not None:
        taken.append(delivery)
    return taken


async def test_a_higher_priority_is_taken_first_and_equals_in_the_order_they_became_ready(
    database: SqliteDatabase,
) -> None:
    scheduler = SqliteScheduler(database)
    for name, priority in [("a", 0), ("b", 5), ("c", -3), ("d", 5), ("e", 100), ("f", 0)]:
        await scheduler.make_ready(name, priority=priority)
    taken = await _take_all(scheduler)
    assert [d.workflow for d in taken] == ["e", "b", "d", "a", "f", "c"]
    assert [d.priority for d in taken] == [100, 5, 5, 0, 0, -3]


async def test_a_queue_all_at_priority_0_takes_in_order_with_a_limited_row_among_them(
    database: SqliteDatabase,
) -> None:
    """The common path's shortcut (no level above 0) takes what the level walk would: a
    limited row at the head is taken while it has room and passed over once it has none."""
    scheduler = SqliteScheduler(database)
    limit = Limit("head", 1)
    for name in ("limited-1", "plain-1", "limited-2", "plain-2"):
        await scheduler.make_ready(name, limit=limit if name.startswith("limited") else None)
    taken = await _take_all(scheduler)
    assert [d.workflow for d in taken] == ["limited-1", "plain-1", "plain-2"]
    await scheduler.make_ready("low", priority=-1)  # below 0: found by the walk
    low = await scheduler.next_ready(SHORT)
    assert low is not None and low.workflow == "low"


async def test_a_pending_wakeup_keeps_the_higher_priority_and_its_own_limit(
    database: SqliteDatabase,
) -> None:
    scheduler = SqliteScheduler(database)
    first, second = Limit("first", 3), Limit("second", 1, timedelta(seconds=5))
    await scheduler.make_ready("plain", priority=1)
    await scheduler.make_ready("plain", priority=5, limit=first)  # it had none: takes this one
    await scheduler.make_ready("plain", priority=2, limit=second)  # keeps 5 and `first`
    await scheduler.make_ready("high", priority=9)
    await scheduler.make_ready("high", priority=-9)  # keeps 9
    taken = {d.workflow: d for d in await _take_all(scheduler)}
    assert (taken["plain"].priority, taken["plain"].limit) == (5, first)
    assert (taken["high"].priority, taken["high"].limit) == (9, None)
    await scheduler.done(taken["plain"])  # answered: the next wakeup brings its own
    await scheduler.make_ready("plain")
    again = await scheduler.next_ready(SHORT)
    assert again is not None and (again.priority, again.limit) == (0, None)


async def test_a_wakeup_landing_mid_pass_brings_its_own_priority_and_limit(
    database: SqliteDatabase,
) -> None:
    scheduler = SqliteScheduler(database)
    await scheduler.make_ready("w", priority=7, limit=Limit("k", 1))
    held = await scheduler.next_ready(SHORT)
    assert held is not None
    await scheduler.make_ready("w", priority=2)  # the held delivery is not a pending one
    await scheduler.done(held)  # the new wakeup survives it
    again = await scheduler.next_ready(SHORT)
    assert again is not None and (again.priority, again.limit) == (2, None)


async def test_a_delivery_woken_by_wake_at_keeps_its_priority_and_limit(
    database: SqliteDatabase,
) -> None:
    scheduler = SqliteScheduler(database)
    limit = Limit("sleepy", 2, timedelta(minutes=1))
    await scheduler.make_ready("sleeper", priority=7, limit=limit)
    await scheduler.make_ready("other", priority=3)
    delivery = await scheduler.next_ready(SHORT)
    assert delivery is not None and delivery.workflow == "sleeper"
    assert await scheduler.wake_at(delivery, datetime.now(UTC))  # due at once
    await scheduler.done(delivery)  # leaves the sleeper: the receipt moved on
    back = await scheduler.next_ready(SHORT)
    assert back is not None and back.workflow == "sleeper"  # 7 still beats 3
    assert (back.priority, back.limit) == (7, limit)


async def test_takers_on_several_connections_never_overshoot_a_limit_of_one(path: Path) -> None:
    databases = [await open_database(path) for _ in range(4)]
    try:
        await migrate(databases[0])
        schedulers = [SqliteScheduler(database) for database in databases]
        counts = [
            await taken_at_a_limit_of_one(schedulers, (f"x-{n}", f"y-{n}"), f"race-{n}")
            for n in range(15)
        ]
    finally:
        for database in databases:
            await database.close()
    assert counts == [1] * 15  # each race: the limit's one slot went to exactly one taker


async def test_many_takers_hold_at_most_the_limit_at_once(path: Path) -> None:
    databases = [await open_database(path) for _ in range(3)]
    workflows = [f"w-{n}" for n in range(10)]
    try:
        await migrate(databases[0])
        schedulers = [SqliteScheduler(database) for database in databases]
        most, answered = await most_held_at_once(schedulers, workflows, Limit("gateway", 2))
    finally:
        for database in databases:
            await database.close()
    assert sorted(answered) == sorted(workflows)  # every one ran, once
    assert most <= 2


async def test_a_full_limit_passes_its_wakeup_over_and_done_rings_a_waiting_reader(
    path: Path,
) -> None:
    here, there = await open_database(path), await open_database(path)
    limit = Limit("one-at-a-time", 1)
    try:
        await migrate(here)
        holder = SqliteScheduler(here)
        waiting = SqliteScheduler(there, poll=SLOW_POLL)
        await holder.make_ready("first", limit=limit)
        await holder.make_ready("second", limit=limit, priority=1)
        await holder.make_ready("free", priority=-5)
        held = await holder.next_ready(SHORT)
        assert held is not None and held.workflow == "second"
        other = await waiting.next_ready(SHORT)  # "first" waits; the row behind it is taken
        assert other is not None and other.workflow == "free"
        reader = asyncio.create_task(waiting.next_ready(timedelta(seconds=10)))
        await asyncio.sleep(0.3)
        assert not reader.done()  # the slot is held: nothing to take
        await holder.done(held)
        started = asyncio.get_running_loop().time()
        freed = await reader
        waited = asyncio.get_running_loop().time() - started
    finally:
        await here.close()
        await there.close()
    assert freed is not None and freed.workflow == "first"
    assert waited < 1.5  # rung at once, well before its look-again (2 s) or poll (30 s)


async def test_a_lapsed_holder_frees_its_slot_and_an_idle_reader_looks_then_not_before(
    database: SqliteDatabase,
) -> None:
    limit = Limit("lapses", 1)
    holder = SqliteScheduler(database, lease=timedelta(seconds=1))
    waiting = SqliteScheduler(database, lease=timedelta(seconds=30), poll=SLOW_POLL)
    await holder.make_ready("dies", limit=limit)
    await holder.make_ready("waits", limit=limit)
    dead = await holder.next_ready(SHORT)  # never answered, never extended
    assert dead is not None and dead.workflow == "dies"
    traced: list[str] = []
    await database.trace(traced.append)
    try:
        taken = await waiting.next_ready(timedelta(seconds=10))
    finally:
        await database.trace(None)
    assert taken is not None and taken.workflow in {"waits", "dies"}
    looks = sum(sql.lstrip().upper().startswith("SELECT") for sql in traced)
    assert looks <= 6, traced  # slept until the lapse: no busy poll


async def test_a_rate_limit_opens_again_when_its_window_moves_on(
    database: SqliteDatabase,
) -> None:
    per = timedelta(seconds=1)
    limit = Limit("rate", 2, per)
    scheduler = SqliteScheduler(database, poll=SLOW_POLL)
    for n in range(3):
        await scheduler.make_ready(f"r-{n}", limit=limit)
    started = asyncio.get_running_loop().time()
    first = await scheduler.next_ready(SHORT)
    second = await scheduler.next_ready(SHORT)
    assert first is not None and second is not None
    await scheduler.done(first)  # answering does not give a rate's slot back: the window does
    await scheduler.done(second)
    third = await scheduler.next_ready(timedelta(seconds=10))
    waited = asyncio.get_running_loop().time() - started
    assert third is not None and third.limit == limit
    assert waited >= 0.9 * per.total_seconds()


async def test_a_woken_workflow_retaken_holds_its_own_slot_once(database: SqliteDatabase) -> None:
    limit = Limit("own", 1)
    scheduler = SqliteScheduler(database)
    await scheduler.make_ready("mine", limit=limit)
    await scheduler.make_ready("theirs", limit=limit)
    held = await scheduler.next_ready(SHORT)
    assert held is not None
    await scheduler.make_ready(held.workflow, limit=limit)  # a wakeup lands mid-pass
    again = await scheduler.next_ready(SHORT)  # its own slot: taken again
    assert again is not None and again.workflow == held.workflow
    assert await scheduler.next_ready(SHORT) is None  # the other waits: the slot counts once


async def test_finish_and_extend_of_a_limited_pass_keep_then_free_its_slot(
    database: SqliteDatabase,
) -> None:
    scheduler = SqliteScheduler(database, lease=timedelta(seconds=1))
    durable = SqliteDurable(SqliteCheckpointer(database), scheduler)
    limit = Limit("finishing", 1)
    await durable.deliver("a", "hello", priority=3, limit=limit)
    await durable.arrive("b", "go", 1, limit=limit)
    first = await durable.take(SHORT, BUDGET, BUDGET)
    assert first is not None and first.holder is not None
    assert (first.delivery.workflow, first.delivery.priority) == ("a", 3)
    assert await scheduler.extend(first.delivery, timedelta(seconds=30)) is not None
    await asyncio.sleep(1.2)  # past the take's lease: the extend kept the slot
    assert await durable.take(SHORT, BUDGET, BUDGET) is None
    await durable.finish_settled(first.holder, first.delivery, "completed", {})
    second = await durable.take(SHORT, BUDGET, BUDGET)
    assert second is not None and second.delivery.workflow == "b"
    assert second.delivery.limit == limit


async def test_a_deleted_holder_frees_its_slot_and_a_cancelled_rate_take_still_counts(
    database: SqliteDatabase,
) -> None:
    scheduler = SqliteScheduler(database, poll=SLOW_POLL)
    durable = SqliteDurable(SqliteCheckpointer(database), scheduler)
    limit, rate = Limit("deleted", 1), Limit("rated", 1, timedelta(minutes=1))
    await durable.arrive("held", "go", 1, limit=limit)
    await durable.arrive("next", "go", 1, limit=limit)
    first = await durable.take(SHORT, BUDGET, BUDGET)
    assert first is not None and first.delivery.workflow == "held"
    assert await durable.take(SHORT, BUDGET, BUDGET) is None  # the slot is held
    assert await durable.delete("held") == 1
    second = await durable.take(SHORT, BUDGET, BUDGET)  # in the delete: not at the lease's end
    assert second is not None and second.delivery.workflow == "next"
    await scheduler.make_ready("r-1", limit=rate)
    await scheduler.make_ready("r-2", limit=rate)
    taken = await scheduler.next_ready(SHORT)
    assert taken is not None and taken.workflow == "r-1"
    await scheduler.cancel("r-1")  # a rate counts takes: its window is not given back
    assert await scheduler.next_ready(SHORT) is None


@pytest.mark.parametrize(
    ("priority", "limit", "error"),
    [
        (True, None, TypeError),
        (-101, None, ValueError),
        (1.5, None, TypeError),
        (0, Limit("k", 0), ValueError),
        (0, Limit("a{b}", 1), ValueError),
        (0, Limit("k", 1, timedelta(0)), ValueError),
    ],
)
async def test_a_bad_priority_or_limit_is_refused_before_anything_is_written(
    database: SqliteDatabase, priority: object, limit: object, error: type[Exception]
) -> None:
    scheduler = SqliteScheduler(database)
    durable = SqliteDurable(SqliteCheckpointer(database), scheduler)
    with pytest.raises(error):
        await scheduler.make_ready("w", priority=priority, limit=limit)  # type: ignore[arg-type]
    with pytest.raises(error):
        await durable.arrive("w", "k", 1, priority=priority, limit=limit)  # type: ignore[arg-type]
    with pytest.raises(error):
        await durable.deliver("w", 1, priority=priority, limit=limit)  # type: ignore[arg-type]
    assert await scheduler.next_ready(SHORT) is None
    assert await durable.checkpointer.load("w") == {}


#: The queue as a file made before priorities and limits held it (schema version 2).
_OLD = """
PRAGMA journal_mode = WAL;
CREATE TABLE durability_queue (
    queue TEXT NOT NULL, workflow TEXT NOT NULL, visible_us INTEGER NOT NULL,
    receipt INTEGER NOT NULL, PRIMARY KEY (queue, workflow));
CREATE INDEX durability_queue_visible ON durability_queue (queue, visible_us);
INSERT INTO durability_queue VALUES ('default', 'ready', 1, 2), ('default', 'asleep', {later}, 4);
PRAGMA user_version = 2;
"""


async def test_a_file_made_before_priorities_migrates_and_keeps_its_rows(path: Path) -> None:
    later = int((datetime.now(UTC) + timedelta(days=1)).timestamp() * 1_000_000)
    old = sqlite3.connect(path)
    old.executescript(_OLD.format(later=later))
    old.close()
    database = await open_database(path)
    try:
        await migrate(database)
        await migrate(database)  # and again: a no-op
        scheduler = SqliteScheduler(database)
        earliest = await scheduler.wake_due()  # the sleeper: nothing else is hidden yet
        ready = await scheduler.next_ready(SHORT)
        await scheduler.make_ready("new", priority=4, limit=Limit("k", 1))
        new = await scheduler.next_ready(SHORT)

        def schema(connection: sqlite3.Connection) -> tuple[int, list[str]]:
            (version,) = connection.execute("PRAGMA user_version").fetchone()
            names = connection.execute(
                "SELECT name FROM sqlite_schema WHERE tbl_name = 'durability_queue'"
                " AND type = 'index' ORDER BY 1"
            ).fetchall()
            return version, [name for (name,) in names]

        version, indexes = await database.read(schema)
    finally:
        await database.close()
    assert version == SCHEMA_VERSION
    assert "durability_queue_by_priority" in indexes and "durability_queue_visible" not in indexes
    assert ready is not None and ready.workflow == "ready"
    assert (ready.priority, ready.limit) == (0, None)
    assert earliest is not None and earliest > datetime.now(UTC) + timedelta(hours=23)
    assert new is not None and (new.priority, new.limit) == (4, Limit("k", 1))


async def _work_of_a_missed_take(database: SqliteDatabase, at_most: int, behind: int) -> int:
    """SQLite's virtual machine steps (in hundreds) of a take that finds `at_most` holds
    filling a limit, with `behind` more of its wakeups ready: every one is passed over."""
    queue = f"full-{at_most}"
    scheduler = SqliteScheduler(database, queue=queue)
    limit = Limit(f"key-{at_most}", at_most)
    for i in range(at_most + behind):
        await scheduler.make_ready(f"{queue}-{i}", limit=limit)
    for _ in range(at_most):
        assert await scheduler.next_ready(SHORT) is not None

    def work(connection: sqlite3.Connection) -> int:
        steps = 0

        def counted() -> int:
            nonlocal steps
            steps += 1
            return 0

        connection.set_progress_handler(counted, 100)
        try:
            assert take_step(connection, queue, BUDGET) is None
        finally:
            connection.set_progress_handler(None, 100)
        return steps

    return await database.write(work)


async def test_a_take_behind_a_full_limit_counts_its_holds_once_not_once_a_ready_row(
    database: SqliteDatabase,
) -> None:
    """A take that misses holds the file's write lock, so its work stalls every writer (the
    finishes that would free a slot among them): with 200 wakeups behind a full limit, a
    limit of 16 must cost about what a limit of 1 does, not sixteen holds read a row."""
    one = await _work_of_a_missed_take(database, 1, 200)
    sixteen = await _work_of_a_missed_take(database, 16, 200)
    assert sixteen < 2 * one, (one, sixteen)
