"""`SqliteDurable.take`: a ready row taken and its workflow claimed in one write transaction.

It waits as `next_ready` does (the scheduler's `when_ready`): an idle wait only reads, and a
`make_ready` in this process ends it at once. These tests check what the worker relies on: the
delivery, the claim with the checkpoint it found, `holder=None` when a live pass holds the
workflow, and that the take and the claim commit together or not at all.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta

import pytest

pytest.importorskip("aiosqlite", reason="aiosqlite is not installed")

from durability.interfaces import Taken
from durability.sqlite import SqliteCheckpointer, SqliteDatabase, SqliteDurable, SqliteScheduler

LEASE = timedelta(seconds=2)
BUDGET = timedelta(seconds=30)
SHORT = timedelta(milliseconds=100)


def durable_over(
    database: SqliteDatabase, poll: timedelta = timedelta(milliseconds=20), queue: str = "take"
) -> SqliteDurable:
    return SqliteDurable(
        SqliteCheckpointer(database),
        SqliteScheduler(database, lease=LEASE, poll=poll, queue=queue),
    )


def words(traced: list[str]) -> list[str]:
    """The first word of each traced statement (after its comment lines), upper-cased."""
    code = (
        " ".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
        for sql in traced
    )
    return [text.split(maxsplit=1)[0].upper() for text in code]


async def test_take_returns_the_delivery_and_a_claim_with_the_checkpoint(
    database: SqliteDatabase,
) -> None:
    durable = durable_over(database)
    await durable.arrive("taken", "b", {"n": 2})
    await durable.checkpointer.supply("taken", "a", [1])
    await durable.deliver("taken", "mail")

    taken = await durable.take(SHORT, BUDGET, LEASE)

    assert taken is not None
    assert taken.delivery.workflow == "taken"
    holder = taken.holder
    assert holder is not None and holder.workflow == "taken"
    assert holder.records is not None
    assert list(holder.records.items()) == list(
        (await durable.checkpointer.load("taken")).items()
    )
    assert list(holder.records) == ["b", "a", "inbox:00000000000000000001"]
    # The claim is live and ours: a record under it lands, a second claim is refused.
    assert (await durable.checkpointer.record(holder, "step", 1)).first
    assert await durable.checkpointer.claim("taken", BUDGET, LEASE) is None
    # The row is held by the delivery: nobody else takes it, and finish answers it.
    assert await durable.take(SHORT, BUDGET, LEASE) is None
    await durable.finish(holder, taken.delivery)
    assert await durable.scheduler.next_ready(SHORT) is None
    assert await durable.checkpointer.claim("taken", BUDGET, LEASE) is not None


async def test_take_of_a_workflow_a_live_pass_holds_returns_no_holder(
    database: SqliteDatabase,
) -> None:
    durable = durable_over(database)
    running = await durable.checkpointer.claim("held", BUDGET, LEASE)
    assert running is not None
    await durable.arrive("held", "input", 1)  # a wakeup lands while that pass runs

    taken = await durable.take(SHORT, BUDGET, LEASE)

    assert taken is not None
    assert taken.delivery.workflow == "held"
    assert taken.holder is None
    assert taken == Taken(taken.delivery, None)
    # The running pass keeps its claim (the take wrote no claim), and the row was taken.
    assert (await durable.checkpointer.record(running, "still-mine", True)).first
    assert await durable.scheduler.next_ready(SHORT) is None


async def test_take_is_one_write_transaction(database: SqliteDatabase) -> None:
    durable = durable_over(database)
    await durable.arrive("one-txn", "input", 1)

    traced: list[str] = []
    await database.trace(traced.append)
    try:
        taken = await durable.take(SHORT, BUDGET, LEASE)
    finally:
        await database.trace(None)

    assert taken is not None and taken.holder is not None
    said = words(traced)
    # At most an unlocked look first, then the take, the claim and its read as one commit.
    assert said[-5:] == ["BEGIN", "UPDATE", "INSERT", "SELECT", "COMMIT"]
    assert said[:-5] in ([], ["SELECT"])
    assert "durability_queue" in traced[-4]
    assert "durability_workflows" in traced[-3]
    assert "durability_records" in traced[-2]


async def test_a_take_that_fails_after_taking_the_row_leaves_it(
    database: SqliteDatabase,
) -> None:
    durable = durable_over(database)
    await durable.scheduler.make_ready("rolled-back")
    # A trigger that refuses every claim fails the take's claim after its UPDATE took the row.
    # (A budget too large is no way to fail it: that is refused before the transaction.)
    await database.write(
        lambda connection: connection.execute(
            "CREATE TRIGGER refuse_claims BEFORE INSERT ON durability_workflows"
            " BEGIN SELECT RAISE(ABORT, 'claims refused'); END"
        )
    )
    with pytest.raises(sqlite3.IntegrityError, match="claims refused"):
        await durable.take(SHORT, BUDGET, LEASE)
    await database.write(lambda connection: connection.execute("DROP TRIGGER refuse_claims"))
    taken = await durable.take(SHORT, BUDGET, LEASE)
    assert taken is not None and taken.delivery.workflow == "rolled-back"
    assert taken.holder is not None


async def test_an_idle_take_never_takes_the_write_lock(database: SqliteDatabase) -> None:
    durable = durable_over(database, poll=timedelta(milliseconds=10))
    traced: list[str] = []
    await database.trace(traced.append)
    try:
        assert await durable.take(SHORT, BUDGET, LEASE) is None
    finally:
        await database.trace(None)

    assert len(traced) >= 2  # it looked more than once while it waited
    assert set(words(traced)) == {"SELECT"}


async def test_a_make_ready_in_this_process_ends_a_blocked_take(
    database: SqliteDatabase,
) -> None:
    # A poll longer than the wait: only the in-process wakeup can end it with a delivery.
    durable = durable_over(database, poll=timedelta(seconds=30))
    waiting = asyncio.create_task(durable.take(timedelta(seconds=3), BUDGET, LEASE))
    await asyncio.sleep(0.05)  # let it look once and start waiting
    assert not waiting.done()
    await durable.scheduler.make_ready("woken")
    taken = await waiting
    assert taken is not None and taken.delivery.workflow == "woken"
    assert taken.holder is not None


async def test_take_and_next_ready_share_one_queue_without_doubling(
    database: SqliteDatabase,
) -> None:
    durable = durable_over(database)
    for n in range(6):
        await durable.scheduler.make_ready(f"shared-{n}")

    async def by_take() -> str | None:
        taken = await durable.take(SHORT, BUDGET, LEASE)
        return None if taken is None else taken.delivery.workflow

    async def by_next_ready() -> str | None:
        delivery = await durable.scheduler.next_ready(SHORT)
        return None if delivery is None else delivery.workflow

    got = await asyncio.gather(*(by_take() for _ in range(4)), *(by_next_ready() for _ in range(4)))
    names = [name for name in got if name is not None]
    assert sorted(names) == [f"shared-{n}" for n in range(6)]


async def test_take_refuses_a_non_positive_timing(database: SqliteDatabase) -> None:
    durable = durable_over(database)
    with pytest.raises(ValueError, match="within"):
        await durable.take(timedelta(0), BUDGET, LEASE)
    with pytest.raises(ValueError, match="budget"):
        await durable.take(SHORT, timedelta(0), LEASE)
    with pytest.raises(ValueError, match="alive"):
        await durable.take(SHORT, BUDGET, timedelta(seconds=-1))
