"""What is specific to `PostgresCheckpointer` and `PostgresEffect`: how an effect's result is read,
that a refused result undoes the effect, that values are the codec's own text (so any codec
works), that ids are bound rather than spliced, and that the database's clock is the clock."""

from __future__ import annotations

import ast
import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from durability.codec import Unencodable
from durability.interfaces import Fenced, Recorded
from durability.postgres import (
    PostgresCheckpointer,
    PostgresDurable,
    PostgresEffect,
    PostgresScheduler,
)

if TYPE_CHECKING:
    from durability.postgres.statements import Pool

MakePool = Callable[..., Awaitable["Pool"]]
LONG = timedelta(minutes=1)


def _workflow() -> str:
    return f"pg-cp-{uuid.uuid4().hex}"


async def _db_ms(pool: Pool) -> int:
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
        )
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])


@pytest.fixture
async def table(pool: Pool) -> str:
    async with pool.connection() as conn:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS pg_effect_rows (workflow text, n bigint, amount numeric)"
        )
    return "pg_effect_rows"


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        pytest.param("SELECT 41 + 1", 42, id="first-column-of-first-row"),
        pytest.param("SELECT 'a' UNION ALL SELECT 'b'", "a", id="first-row-only"),
        pytest.param("SELECT 1 WHERE false", None, id="no-rows-is-none"),
        pytest.param("SELECT '100%'", "100%", id="literal-percent-without-params"),
    ],
)
async def test_an_effect_s_result_is_its_first_value(
    pool: Pool, sql: str, expected: object
) -> None:
    checkpointer = PostgresCheckpointer(pool=pool)
    holder = await checkpointer.claim(_workflow(), LONG, LONG)
    assert holder is not None
    assert await checkpointer.transact(holder, "result", PostgresEffect(sql)) == Recorded(
        expected, True
    )


async def test_a_statement_without_rows_records_its_rowcount(pool: Pool, table: str) -> None:
    checkpointer = PostgresCheckpointer(pool=pool)
    workflow = _workflow()
    holder = await checkpointer.claim(workflow, LONG, LONG)
    assert holder is not None
    insert = PostgresEffect(
        "INSERT INTO pg_effect_rows (workflow, n) SELECT %(w)s, g FROM generate_series(1, 3) g",
        {"w": workflow},
    )
    assert await checkpointer.transact(holder, "inserted", insert) == Recorded(3, True)
    delete = PostgresEffect("DELETE FROM pg_effect_rows WHERE workflow = %s AND n > 1", [workflow])
    assert await checkpointer.transact(holder, "deleted", delete) == Recorded(2, True)


async def test_a_result_the_codec_refuses_undoes_the_effect(pool: Pool, table: str) -> None:
    checkpointer = PostgresCheckpointer(pool=pool)
    workflow = _workflow()
    holder = await checkpointer.claim(workflow, LONG, LONG)
    assert holder is not None
    numeric = PostgresEffect(
        "INSERT INTO pg_effect_rows (workflow, amount) VALUES (%s, 9.99) RETURNING amount",
        (workflow,),
    )
    with pytest.raises(Unencodable):  # a Decimal does not survive JSON
        await checkpointer.transact(holder, "charged", numeric)
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_effect_rows WHERE workflow = %s", (workflow,)
        )
        assert await cursor.fetchone() == (0,)
    assert await checkpointer.load(workflow) == {}
    cast = PostgresEffect(
        "INSERT INTO pg_effect_rows (workflow, amount) VALUES (%s, 9.99)"
        " RETURNING amount::float8",
        (workflow,),
    )
    assert await checkpointer.transact(holder, "charged", cast) == Recorded(9.99, True)


class _LiteralCodec:
    """A codec that is not JSON at all: Python literals, so tuples and sets come back."""

    def encode(self, value: object) -> str:
        text = repr(value)
        if ast.literal_eval(text) != value:
            raise Unencodable(repr(value))
        return text

    def decode(self, text: str) -> object:
        return ast.literal_eval(text)


async def test_values_are_the_codec_s_own_text_so_any_codec_works(pool: Pool) -> None:
    checkpointer = PostgresCheckpointer(pool=pool, codec=_LiteralCodec())
    workflow = _workflow()
    value = {"pair": (1, 2), "tags": {"a"}, "raw": b"\x00\xff"}
    assert await checkpointer.supply(workflow, "odd", value) == Recorded(value, True)
    assert await checkpointer.load(workflow) == {"odd": value}
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT value FROM durability.records WHERE workflow = %s", (workflow,)
        )
        assert await cursor.fetchone() == (repr(value),)


@pytest.mark.parametrize(
    "workflow",
    [
        "'; DROP TABLE durability.records; --",
        "%(workflow)s %s $1 :name",
        "ünïcødé ✓ 漢字 " + "x" * 200,  # with the uuid below, close to MAX_NAME
    ],
)
async def test_workflow_ids_are_bound_never_spliced(pool: Pool, workflow: str) -> None:
    checkpointer = PostgresCheckpointer(pool=pool)
    scheduler = PostgresScheduler(pool=pool, queue=f"q-{uuid.uuid4().hex}", notify=False)
    durable = PostgresDurable(checkpointer, scheduler)
    workflow = f"{workflow}-{uuid.uuid4().hex}"
    assert await durable.arrive(workflow, "k", "v") == Recorded("v", True)
    holder = await checkpointer.claim(workflow, LONG, LONG)
    assert holder is not None
    assert (await checkpointer.record(holder, "done", True)).first
    assert await checkpointer.load(workflow) == {"k": "v", "done": True}
    delivery = await scheduler.next_ready(timedelta(seconds=1))
    assert delivery is not None and delivery.workflow == workflow
    assert await durable.delete(workflow) == 2


async def test_tokens_and_times_come_from_the_database_clock(pool: Pool) -> None:
    checkpointer = PostgresCheckpointer(pool=pool)
    workflow = _workflow()
    before = await _db_ms(pool)
    holder = await checkpointer.claim(workflow, LONG, LONG)
    after = await _db_ms(pool)
    assert holder is not None
    assert before <= holder.token <= after
    assert holder.budget_ends.tzinfo == UTC
    await checkpointer.record(holder, "k", 1)
    (written,) = await checkpointer.history(workflow)
    assert written.at.tzinfo == UTC
    # Whole milliseconds on both sides, as _db_ms floors: X.9 ms is within millisecond X.
    at_ms = (written.at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    assert before <= at_ms <= await _db_ms(pool)


async def test_a_durable_needs_both_halves_on_one_pool(
    pool: Pool, make_pool: MakePool
) -> None:
    other = await make_pool(size=1)
    with pytest.raises(ValueError, match="same pool"):
        PostgresDurable(PostgresCheckpointer(pool=pool), PostgresScheduler(pool=other))


async def test_records_of_one_turn_share_one_commit_and_a_fenced_one_fails_alone(
    pool: Pool,
) -> None:
    checkpointer = PostgresCheckpointer(pool=pool)
    workflows = [_workflow() for _ in range(5)]
    holders = [await checkpointer.claim(workflow, LONG, LONG) for workflow in workflows]
    assert all(holder is not None for holder in holders)
    live = [holder for holder in holders if holder is not None]
    await checkpointer.discard(workflows[2])  # raises the fence under the third pass
    outcomes = await asyncio.gather(
        *(checkpointer.record(holder, "step", {"n": n}) for n, holder in enumerate(live)),
        return_exceptions=True,
    )
    assert isinstance(outcomes[2], Fenced)
    assert [outcomes[n] for n in (0, 1, 3, 4)] == [Recorded({"n": n}, True) for n in (0, 1, 3, 4)]
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT workflow, xmin::text FROM durability.records WHERE workflow = ANY(%s)",
            [workflows],
        )
        written = dict(await cursor.fetchall())
    assert sorted(written) == sorted(workflows[n] for n in (0, 1, 3, 4))
    assert len(set(written.values())) == 1  # one transaction: one commit, one WAL flush
