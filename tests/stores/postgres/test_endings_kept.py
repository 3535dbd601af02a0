"""Where Postgres keeps a workflow's ending: a finish writes it into the standing's own row
(one row written, not two), and every read of the checkpoint sees it in its place among the
records: the take's, the claim's, `load`, `history`, `result`, `status`, the delete's count.
An ending an older version wrote as a row of `records` reads as it did, and is the one read
when a later writer put the same epoch's in the standing; a second epoch's ending (after a
retry) is a record again, in its place."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest

from durability.endings import (
    CANCELLED,
    ENDING,
    WorkflowCancelled,
    completion,
    ended,
    ending_key,
    result,
)
from durability.failures import RETRY
from durability.interfaces import Taken
from durability.postgres import PostgresDurable
from durability.postgres.statements import statements

LEASE = timedelta(seconds=30)
SHORT = timedelta(milliseconds=500)
WITHIN = timedelta(seconds=10)
FIRST = ending_key({})


@pytest.fixture
def durable(lone_durable: PostgresDurable) -> PostgresDurable:
    return lone_durable


async def _rows(durable: PostgresDurable, sql: str, *params: object) -> list[tuple[Any, ...]]:
    async with durable.checkpointer.pool.connection() as conn:
        cursor = await conn.execute(sql, params)
        return list(await cursor.fetchall())


async def _endings_as_records(durable: PostgresDurable, workflow: str) -> list[str]:
    rows = await _rows(durable, "SELECT key FROM durability.records WHERE workflow = %s"
                       " AND key LIKE %s ORDER BY seq", workflow, f"{ENDING}%")
    return [str(row[0]) for row in rows]


async def _taken(durable: PostgresDurable, workflow: str) -> Taken:
    while True:
        got = await durable.take(SHORT, LEASE, LEASE)
        assert got is not None and got.holder is not None
        if got.delivery.workflow == workflow:
            return got


@pytest.mark.parametrize("together", [1, 3], ids=["alone", "in-one-turn"])
async def test_a_finish_keeps_its_ending_in_the_standing_and_every_read_sees_it(
    durable: PostgresDurable, together: int
) -> None:
    names = [f"kept-{uuid.uuid4().hex[:8]}-{n}" for n in range(together)]
    for name in names:
        await durable.arrive(name, "order", {"n": name})
    taken = [await _taken(durable, name) for name in names]
    assert await asyncio.gather(*(
        durable.finish_ended(t.holder, t.delivery, FIRST, completion(i), "completed", {})  # type: ignore[arg-type]
        for i, t in enumerate(taken)
    )) == [True] * together

    for i, name in enumerate(names):
        assert await _endings_as_records(durable, name) == []  # one row written, not two
        [(key, value)] = await _rows(
            durable, "SELECT ending_key, ending FROM durability.standings WHERE workflow = %s", name
        )
        assert key == FIRST and durable.checkpointer.codec.decode(value) == completion(i)

        loaded = await durable.checkpointer.load(name)
        assert list(loaded) == ["order", FIRST]  # in its place: after the input
        assert loaded[FIRST] == completion(i)
        assert [w.key for w in await durable.checkpointer.history(name)] == ["order", FIRST]
        assert await result(durable.checkpointer, name, WITHIN) == i
        assert (await durable.status(name)).state == "completed"

        # A take after the ending hands it back with the claim; so does a claim of its own.
        await durable.arrive(name, "late", 1)
        again = await _taken(durable, name)
        assert again.holder is not None and again.holder.records is not None
        assert list(again.holder.records) == ["order", FIRST, "late"]
        await durable.finish_settled(again.holder, again.delivery, "completed", {})
        claimed = await durable.checkpointer.claim(name, LEASE, LEASE)
        assert claimed is not None and claimed.records is not None
        assert ended(claimed.records) is not None
        await durable.checkpointer.release(claimed)

        # A cancel after it changes nothing and hears the ending that won.
        assert (await durable.checkpointer.conclude(name, FIRST, CANCELLED)).first is False
        assert (await durable.status(name)).state == "completed"
        assert await durable.delete(name) == 3  # the input, the late input, the ending
        assert await durable.checkpointer.load(name) == {}


async def test_an_ending_an_older_version_wrote_as_a_record_reads_and_wins_as_before(
    durable: PostgresDurable,
) -> None:
    name = f"kept-old-{uuid.uuid4().hex[:8]}"
    await durable.arrive(name, "order", 1)
    taken = await _taken(durable, name)
    old = durable.checkpointer.codec.encode(completion("old"))
    async with durable.checkpointer.pool.connection() as conn:  # as a839310's finish wrote it
        await conn.execute("INSERT INTO durability.records (workflow, key, value)"
                           " VALUES (%s, %s, %s)", (name, FIRST, old))

    loaded = await durable.checkpointer.load(name)
    assert list(loaded) == ["order", FIRST] and loaded[FIRST] == completion("old")
    assert await result(durable.checkpointer, name, WITHIN) == "old"
    # A finish of a pass that ran beside it brings the same epoch's ending (a finish does not
    # look in `records`): every read still gives the record, the first written.
    assert taken.holder is not None
    await durable.finish_ended(taken.holder, taken.delivery, FIRST, completion("new"),
                               "completed", {})
    assert await durable.checkpointer.load(name) == loaded
    assert [w.value for w in await durable.checkpointer.history(name)] == list(loaded.values())
    assert await result(durable.checkpointer, name, WITHIN) == "old"
    claimed = await durable.checkpointer.claim(name, LEASE, LEASE)
    assert claimed is not None and claimed.records == loaded
    await durable.checkpointer.release(claimed)
    await durable.arrive(name, "late", 1)
    again = await _taken(durable, name)
    assert again.holder is not None and again.holder.records is not None
    assert again.holder.records[FIRST] == completion("old")
    await durable.finish_settled(again.holder, again.delivery, "completed", {})
    held = await durable.checkpointer.conclude(name, FIRST, CANCELLED)
    assert held.first is False and held.value == completion("old")


async def test_a_cancel_keeps_its_ending_in_the_standing_and_a_retry_s_ending_is_a_record(
    durable: PostgresDurable,
) -> None:
    name = f"kept-retry-{uuid.uuid4().hex[:8]}"
    await durable.arrive(name, "order", 1)
    concluded = await durable.checkpointer.conclude(name, FIRST, CANCELLED)
    assert concluded.first is True
    assert await _endings_as_records(durable, name) == []
    # The row a cancel makes reads as no standing did (records, no standing: queued).
    assert (await durable.status(name)).state == "queued"
    with pytest.raises(WorkflowCancelled):
        await result(durable.checkpointer, name, WITHIN)

    assert await durable.retry(name, cancelled=True)
    taken = await _taken(durable, name)
    assert taken.holder is not None and taken.holder.records is not None
    records = taken.holder.records
    keys = list(records)
    assert keys[:2] == ["order", FIRST] and keys[2].startswith(RETRY)  # the order kept
    assert ended(records) is None  # a new epoch
    second = ending_key(records)
    assert second != FIRST
    await durable.finish_ended(taken.holder, taken.delivery, second, completion(2),
                               "completed", {})

    assert await _endings_as_records(durable, name) == [second]
    loaded = await durable.checkpointer.load(name)
    assert list(loaded) == [*keys, second]
    assert await result(durable.checkpointer, name, WITHIN) == 2
    held = await durable.checkpointer.conclude(name, second, CANCELLED)
    assert held.first is False and held.value == completion(2)


def test_the_ending_s_sequence_follows_the_schema() -> None:
    text = statements("durable.sql", "shop")["finish_settled"]
    assert "shop.records_seq_seq" in text and "durability." not in text
    assert "shop.records_seq_seq" in statements("checkpointer.sql", "shop")["conclude"]


async def test_a_standings_table_from_before_the_ending_columns_gains_them(
    scratch_database: Any, make_pool: Any
) -> None:
    from durability.postgres import migrate

    pool = await make_pool(scratch_database())
    await migrate(pool)
    async with pool.connection() as conn:  # the table as the code before these columns made it
        await conn.execute("ALTER TABLE durability.standings DROP COLUMN ending_key,"
                           " DROP COLUMN ending, DROP COLUMN ending_seq, DROP COLUMN ending_at")
    await migrate(pool)
    await migrate(pool)  # and again: a no-op
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = 'durability.standings'::regclass"
            " AND attname LIKE 'ending%%' AND NOT attisdropped")
        assert await cursor.fetchone() == (4,)
