"""`StatementBatcher`: statements asked for in one turn of the event loop go down one connection,
each still its own transaction, each caller with exactly its own row or error."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import psycopg
import pytest

from durability.postgres.batching import StatementBatcher
from durability.postgres.statements import one

if TYPE_CHECKING:
    from durability.postgres.statements import Pool

    from .conftest import MakePool


@pytest.fixture
async def table(pool: Pool) -> AsyncIterator[str]:
    name = f"batch_{uuid.uuid4().hex[:12]}"
    async with pool.connection() as conn:
        await conn.execute(f"CREATE TABLE {name} (n int PRIMARY KEY)")
    yield name
    async with pool.connection() as conn:
        await conn.execute(f"DROP TABLE {name}")


async def _rows(pool: Pool, table: str) -> set[int]:
    async with pool.connection() as conn:
        cursor = await conn.execute(f"SELECT n FROM {table}")
        return {n for (n,) in await cursor.fetchall()}


async def test_one_turn_shares_a_connection_and_each_statement_is_its_own_transaction(
    pool: Pool,
) -> None:
    batcher = StatementBatcher(pool)
    sql = "SELECT %(i)s::int, pg_backend_pid(), txid_current()"
    rows = await asyncio.gather(*(batcher.one(sql, {"i": i}) for i in range(50)))
    assert [row[0] for row in rows if row is not None] == list(range(50))
    assert len({row[1] for row in rows if row is not None}) == 1  # one connection
    assert len({row[2] for row in rows if row is not None}) == 50  # fifty transactions


async def test_an_error_stays_with_its_statement_and_the_others_commit(
    pool: Pool, table: str
) -> None:
    batcher = StatementBatcher(pool)
    insert = f"INSERT INTO {table} (n) VALUES (%(n)s) RETURNING n"
    calls = [
        batcher.one("SELECT 1 / %(zero)s::int", {"zero": 0}) if n == 4
        else batcher.one(insert, {"n": 1}) if n == 7  # a duplicate of an earlier one
        else batcher.one(insert, {"n": n})
        for n in range(10)
    ]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(outcomes[4], psycopg.errors.DivisionByZero)
    assert isinstance(outcomes[7], psycopg.errors.UniqueViolation)
    good = [n for n in range(10) if n not in (4, 7)]
    assert [outcomes[n] for n in good] == [(n,) for n in good]
    # Had the batch been one transaction, the errors would have rolled every insert back.
    assert await _rows(pool, table) == set(good)


@pytest.mark.parametrize("together", [False, True], ids=["alone", "together"])
async def test_a_statement_whose_parameters_cannot_be_dumped_fails_alone(
    pool: Pool, table: str, together: bool
) -> None:
    batcher = StatementBatcher(pool)
    insert = f"INSERT INTO {table} (n) VALUES (%(n)s) RETURNING n, %(tag)s::text"
    bad = {0, 4, 5, 9}  # first, adjacent, last
    # A lone surrogate cannot be encoded for the server: that statement's parameters fail to
    # dump. It must fail for its own caller, without taking another's row or sinking the batch.
    calls = [
        batcher.one(insert, {"n": n, "tag": f"t{n}" + ("\ud800" if n in bad else "")},
                    together=together)
        for n in range(10)
    ]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    for n in bad:
        assert isinstance(outcomes[n], UnicodeEncodeError)
    good = [n for n in range(10) if n not in bad]
    assert [outcomes[n] for n in good] == [(n, f"t{n}") for n in good]
    assert await _rows(pool, table) == set(good)
    assert await batcher.one("SELECT %(x)s::int", {"x": 5}) == (5,)


async def test_a_pool_without_autocommit_still_commits_each(
    make_pool: MakePool, table: str, pool: Pool
) -> None:
    manual = await make_pool(autocommit=False)
    batcher = StatementBatcher(manual)
    insert = f"INSERT INTO {table} (n) VALUES (%(n)s) RETURNING n"
    rows = await asyncio.gather(*(batcher.one(insert, {"n": n}) for n in range(5)))
    assert rows == [(n,) for n in range(5)]
    assert await _rows(pool, table) == set(range(5))


async def test_a_connection_killed_mid_batch_fails_what_did_not_answer(
    pool: Pool, table: str
) -> None:
    batcher = StatementBatcher(pool)
    insert = f"INSERT INTO {table} (n) VALUES (%(n)s) RETURNING n"
    calls = [batcher.one(insert, {"n": n}) for n in range(3)]
    calls.append(batcher.one("SELECT pg_terminate_backend(pg_backend_pid())", {}))
    calls += [batcher.one(insert, {"n": n}) for n in range(4, 7)]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    stored = await _rows(pool, table)
    # Whatever answered a row is stored; nothing reported done is missing.
    for n, outcome in zip([0, 1, 2, None, 4, 5, 6], outcomes, strict=True):
        if n is None:
            assert isinstance(outcome, Exception), outcome
        elif isinstance(outcome, tuple):
            assert outcome == (n,) and n in stored
        else:
            assert isinstance(outcome, Exception), outcome
    assert {0, 1, 2} <= stored  # committed before the connection died
    # ... and answered before it died: their callers got their rows, not the break.
    assert outcomes[:3] == [(0,), (1,), (2,)]
    assert any(isinstance(o, Exception) for o in outcomes[4:])
    # The pool carries on with a fresh connection.
    assert await batcher.one("SELECT %(x)s::int", {"x": 5}) == (5,)


async def test_every_value_converts_as_it_does_through_a_cursor(pool: Pool) -> None:
    batcher = StatementBatcher(pool)
    sql = (
        "SELECT %(text)s::text, %(small)s::bigint, %(big)s::bigint, %(none)s::text,"
        " %(span)s::interval, %(moment)s::timestamptz, %(flag)s::bool,"
        " %(moment)s + %(span)s, %(text)s || %(text)s"
    )
    params = [
        {"text": "é{x}", "small": 3, "big": 2**62, "none": None, "span": timedelta(seconds=1.5),
         "moment": datetime(2026, 1, 2, 3, 4, 5, 600_000, tzinfo=UTC), "flag": True},
        {"text": "", "small": -1, "big": 0, "none": "set", "span": timedelta(days=-2),
         "moment": datetime(1999, 12, 31, tzinfo=UTC), "flag": False},
    ]
    batched = await asyncio.gather(*(batcher.one(sql, p) for p in params))
    alone = [await one(pool, sql, p) for p in params]
    assert batched == alone
    assert batched[0] is not None and batched[0][0] == "é{x}" and batched[0][2] == 2**62


async def test_statements_prepared_on_a_connection_survive_it_forgetting_them(
    make_pool: MakePool,
) -> None:
    single = await make_pool(size=1)
    batcher = StatementBatcher(single)
    sql = "SELECT %(i)s::int * 2"
    assert await asyncio.gather(*(batcher.one(sql, {"i": i}) for i in range(3))) == [
        (0,), (2,), (4,)
    ]
    async with single.connection() as conn:
        await conn.execute("DEALLOCATE ALL")  # what a pooler's reset or DISCARD ALL does
    assert await asyncio.gather(*(batcher.one(sql, {"i": i}) for i in range(3))) == [
        (0,), (2,), (4,)
    ]
    assert await asyncio.gather(*(batcher.one(sql, {"i": i}) for i in range(3, 5))) == [
        (6,), (8,)
    ]
    # Prepared again (not sent alone from then on): the batcher noticed what was forgotten.
    async with single.connection() as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'durability%'"
        )
        assert await cursor.fetchone() == (1,)


async def test_a_statement_with_a_literal_percent_is_still_sent(pool: Pool) -> None:
    batcher = StatementBatcher(pool)
    sql = "SELECT '5%%' || %(x)s::text"
    assert await asyncio.gather(batcher.one(sql, {"x": "a"}), batcher.one(sql, {"x": "b"})) == [
        ("5%a",), ("5%b",)
    ]


async def test_a_pool_that_must_not_prepare_gets_no_prepared_statements(
    make_pool: MakePool,
) -> None:
    # psycopg's switch for poolers (PgBouncer in transaction mode) that cannot keep them.
    unprepared = await make_pool(size=1, prepare_threshold=None)
    batcher = StatementBatcher(unprepared)
    sql = "SELECT %(i)s::int + 1"
    assert await asyncio.gather(*(batcher.one(sql, {"i": i}) for i in range(3))) == [
        (1,), (2,), (3,)
    ]
    assert await one(unprepared, sql, {"i": 9}) == (10,)
    grouped = "SELECT %(i)s::int + 1, txid_current()"
    rows = await asyncio.gather(*(batcher.one(grouped, {"i": i}, together=True) for i in range(3)))
    assert [row[0] for row in rows if row is not None] == [1, 2, 3]
    assert len({row[1] for row in rows if row is not None}) == 1  # still one transaction
    async with unprepared.connection() as conn:
        cursor = await conn.execute("SELECT count(*) FROM pg_prepared_statements")
        assert await cursor.fetchone() == (0,)


# Statements marked `together` (a worker's records): one transaction between them, one commit.


async def test_statements_marked_together_commit_as_one_transaction(
    pool: Pool, table: str
) -> None:
    batcher = StatementBatcher(pool)
    insert = f"INSERT INTO {table} (n) VALUES (%(n)s) RETURNING n, txid_current()"
    calls = [batcher.one(insert, {"n": n}, together=n < 6) for n in range(9)]
    rows = [row for row in await asyncio.gather(*calls) if row is not None]
    assert [n for n, _ in rows] == list(range(9))
    assert len({txid for _, txid in rows[:6]}) == 1  # the six marked: one transaction
    assert len({txid for _, txid in rows[6:]}) == 3  # the rest: one each
    assert rows[6][1] not in {txid for _, txid in rows[:6]}
    assert await _rows(pool, table) == set(range(9))


async def test_a_failure_in_a_together_group_sends_each_alone_and_only_it_fails(
    pool: Pool, table: str
) -> None:
    batcher = StatementBatcher(pool)
    insert = f"INSERT INTO {table} (n) VALUES (%(n)s) RETURNING n, txid_current()"
    calls = [
        batcher.one("SELECT 1 / %(zero)s::int, 0", {"zero": 0}, together=True) if n == 3
        else batcher.one(insert, {"n": n}, together=True)
        for n in range(6)
    ]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(outcomes[3], psycopg.errors.DivisionByZero)
    good = [0, 1, 2, 4, 5]
    rows = [outcomes[n] for n in good]
    assert [row[0] for row in rows if isinstance(row, tuple)] == good
    # The group rolled back whole, and each went again alone: five transactions, each once.
    assert len({row[1] for row in rows if isinstance(row, tuple)}) == 5
    assert await _rows(pool, table) == set(good)


async def test_a_connection_killed_inside_a_group_answers_no_member_with_a_row(
    pool: Pool, table: str
) -> None:
    batcher = StatementBatcher(pool)
    insert = f"INSERT INTO {table} (n) VALUES (%(n)s) RETURNING n"
    calls = [batcher.one(insert, {"n": n}, together=True) for n in range(3)]
    calls.append(batcher.one("SELECT pg_terminate_backend(pg_backend_pid())", {}, together=True))
    calls.append(batcher.one(insert, {"n": 9}))  # outside the group, sent (and committed) first
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    # The members answered rows before the kill, but their transaction never committed:
    # a row would say "written" of something that is not there.
    assert all(isinstance(outcome, psycopg.OperationalError) for outcome in outcomes[:4])
    assert outcomes[4] == (9,)
    assert await _rows(pool, table) == {9}
    assert await batcher.one("SELECT %(x)s::int", {"x": 5}, together=True) == (5,)


async def test_a_member_stuck_behind_a_lock_does_not_hold_the_others_back(
    pool: Pool, make_pool: MakePool, table: str
) -> None:
    async with pool.connection() as conn:
        await conn.execute(f"INSERT INTO {table} (n) VALUES (100)")
    holder_pool = await make_pool(autocommit=False)
    async with holder_pool.connection() as holder:
        await holder.execute(f"SELECT n FROM {table} WHERE n = 100 FOR UPDATE")  # held
        batcher = StatementBatcher(pool)
        insert = f"INSERT INTO {table} (n) VALUES (%(n)s) RETURNING n"
        free = [asyncio.ensure_future(batcher.one(insert, {"n": n}, together=True))
                for n in range(3)]
        stuck = asyncio.ensure_future(batcher.one(
            f"UPDATE {table} SET n = 101 WHERE n = 100 RETURNING n", {}, together=True
        ))
        # The group gives up on its lock wait, and each goes alone: the free ones commit
        # while the lock is still held (a generous bound: they would wait forever otherwise).
        assert await asyncio.wait_for(asyncio.gather(*free), 30) == [(0,), (1,), (2,)]
        assert not stuck.done()
        await holder.rollback()
    assert await asyncio.wait_for(stuck, 30) == (101,)
    assert await _rows(pool, table) == {0, 1, 2, 101}


async def test_a_statement_is_answered_before_the_turn_s_slow_group_commits(pool: Pool) -> None:
    """A take sent with a turn's grouped writes must not wait for their commit: here the group
    holds a member that sleeps, and the plain statement sent with it is answered while the
    group is still running (its answer is read first, and handed over at once)."""
    batcher = StatementBatcher(pool)
    grouped = [
        asyncio.ensure_future(batcher.one("SELECT pg_sleep(%(s)s), 1", {"s": 1.0}, together=True)),
        asyncio.ensure_future(batcher.one("SELECT %(n)s::int", {"n": 2}, together=True)),
    ]
    plain = asyncio.ensure_future(batcher.one("SELECT %(n)s::int, pg_backend_pid()", {"n": 7}))
    row = await plain
    assert row is not None and row[0] == 7
    assert not any(call.done() for call in grouped)
    assert [row[-1] for row in await asyncio.gather(*grouped) if row is not None] == [1, 2]
