"""The hooks the worker's pass uses on `SqliteDurable`: a claim that brings the checkpoint
(so a pass needs no `load`) and `finish` (release and done in one transaction).

`work()` end to end over this store is part of the Durable contract (`test_conformance.py`),
as on every store.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

pytest.importorskip("aiosqlite", reason="aiosqlite is not installed")

from durability.interfaces import Delivery
from durability.sqlite import SqliteCheckpointer, SqliteDatabase, SqliteDurable, SqliteScheduler
from durability.testing.conformance import taken_over_as_its_claim_lapses

TICK = timedelta(milliseconds=50)
LEASE = timedelta(seconds=2)


def durable_over(database: SqliteDatabase) -> SqliteDurable:
    return SqliteDurable(
        SqliteCheckpointer(database),
        SqliteScheduler(database, lease=LEASE, poll=timedelta(milliseconds=20)),
    )


async def queued(database: SqliteDatabase) -> int:
    """How many wakeups the file holds, in any queue."""
    rows = await database.read(
        lambda connection: connection.execute("SELECT count(*) FROM durability_queue").fetchall()
    )
    return int(rows[0][0])


async def test_a_claim_brings_the_checkpoint_it_found(database: SqliteDatabase) -> None:
    durable = durable_over(database)
    checkpointer = durable.checkpointer
    await durable.arrive("found", "b", {"n": 2})
    await checkpointer.supply("found", "a", [1])
    await durable.deliver("found", "mail")

    holder = await checkpointer.claim("found", LEASE, LEASE)
    assert holder is not None
    assert holder.records is not None
    # The same mapping `load` gives, in first-recorded order.
    assert list(holder.records.items()) == list((await checkpointer.load("found")).items())
    assert list(holder.records) == ["b", "a", "inbox:00000000000000000001"]
    assert holder.records["b"] == {"n": 2}
    # A claim that finds the workflow held returns nothing, and a fresh workflow finds nothing.
    assert await checkpointer.claim("found", LEASE, LEASE) is None
    fresh = await checkpointer.claim("fresh", LEASE, LEASE)
    assert fresh is not None and fresh.records == {}


async def test_finish_releases_and_answers_in_one_transaction(database: SqliteDatabase) -> None:
    durable = durable_over(database)
    await durable.scheduler.make_ready("one-txn")
    delivery = await durable.scheduler.next_ready(timedelta(milliseconds=100))
    assert delivery is not None
    holder = await durable.checkpointer.claim("one-txn", LEASE, LEASE)
    assert holder is not None

    traced: list[str] = []
    await database.trace(traced.append)
    try:
        await durable.finish(holder, delivery)
    finally:
        await database.trace(None)

    words = [" ".join(sql.split()).split(" ", 1)[0].upper() for sql in traced]
    assert words == ["BEGIN", "UPDATE", "DELETE", "COMMIT"]
    assert "durability_workflows" in traced[1] and "durability_queue" in traced[2]
    assert await durable.checkpointer.claim("one-txn", LEASE, LEASE) is not None
    assert await durable.scheduler.next_ready(timedelta(milliseconds=50)) is None


async def test_a_finish_that_fails_halfway_keeps_the_claim(database: SqliteDatabase) -> None:
    durable = durable_over(database)
    holder = await durable.checkpointer.claim("halfway", LEASE, LEASE)
    assert holder is not None
    # The release runs first; the foreign receipt then fails `done`, rolling the release back.
    with pytest.raises(ValueError, match="receipt"):
        await durable.finish(holder, Delivery("halfway", "not-a-receipt"))
    assert await durable.checkpointer.claim("halfway", LEASE, LEASE) is None


async def test_finish_keeps_a_wakeup_that_landed_mid_pass(database: SqliteDatabase) -> None:
    durable = durable_over(database)
    await durable.scheduler.make_ready("mid-pass")
    delivery = await durable.scheduler.next_ready(timedelta(milliseconds=100))
    assert delivery is not None
    holder = await durable.checkpointer.claim("mid-pass", LEASE, LEASE)
    assert holder is not None
    await durable.arrive("mid-pass", "input", 1)  # lands while the pass runs

    await durable.finish(holder, delivery)

    again = await durable.scheduler.next_ready(timedelta(milliseconds=100))
    assert again is not None and again.workflow == "mid-pass"
    assert await durable.checkpointer.claim("mid-pass", LEASE, LEASE) is not None


async def test_a_row_taken_again_after_its_lease_asks_for_the_claim_as_it_lapses(
    database: SqliteDatabase,
) -> None:
    lease = timedelta(milliseconds=600)
    scheduler = SqliteScheduler(database, lease=lease)
    await taken_over_as_its_claim_lapses(SqliteDurable(SqliteCheckpointer(database), scheduler))
