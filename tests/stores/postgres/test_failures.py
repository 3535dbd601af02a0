"""Where the Postgres store meets a broken world: a database never migrated, migrations run
again, and connections killed by the server (`pg_terminate_backend`) in the middle of a
transaction. A killed transaction must leave nothing half-done, and the pool must carry on."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import psycopg
import pytest

from durability.interfaces import NotMigrated, Recorded
from durability.postgres import (
    PostgresCheckpointer,
    PostgresDurable,
    PostgresEffect,
    PostgresScheduler,
    migrate,
)

if TYPE_CHECKING:
    from durability.postgres.statements import Pool

MakePool = Callable[..., Awaitable["Pool"]]
LONG = timedelta(minutes=1)


def _workflow() -> str:
    return f"pg-fail-{uuid.uuid4().hex}"


async def _backend(pool: Pool, *, waiting_on: str, query_has: str) -> int:
    """The pid of the one backend of this database waiting on `waiting_on` in a query containing
    `query_has`, once it shows up in pg_stat_activity."""
    for _ in range(100):
        async with pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT pid FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND wait_event = %s AND position(%s in query) > 0",
                (waiting_on, query_has),
            )
            rows = await cursor.fetchall()
        if len(rows) == 1:
            return int(rows[0][0])
        await asyncio.sleep(0.05)
    raise AssertionError(f"no backend waiting on {waiting_on} in a query with {query_has!r}")


async def _terminate(pool: Pool, pid: int) -> None:
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        row = await cursor.fetchone()
        assert row == (True,)


# --- migration ------------------------------------------------------------------------------


async def test_every_store_used_before_migrate_says_to_migrate(
    scratch_database: Callable[[], str], make_pool: MakePool
) -> None:
    pool = await make_pool(scratch_database())
    checkpointer = PostgresCheckpointer(pool=pool)
    scheduler = PostgresScheduler(pool=pool, queue="never-migrated", notify=False)
    durable = PostgresDurable(checkpointer, scheduler)
    workflow = _workflow()
    attempts: list[Awaitable[object]] = [
        checkpointer.claim(workflow, LONG, LONG),
        checkpointer.load(workflow),
        checkpointer.supply(workflow, "k", 1),
        checkpointer.append(workflow, 1),
        checkpointer.discard(workflow),
        scheduler.prepare(),
        scheduler.make_ready(workflow),
        scheduler.next_ready(timedelta(milliseconds=50)),
        scheduler.wake_due(),
        durable.arrive(workflow, "k", 1),
        durable.deliver(workflow, 1),
        durable.delete(workflow),
    ]
    for attempt in attempts:
        with pytest.raises(NotMigrated, match=r"migrate\(pool\)"):
            await attempt


async def test_migrate_twice_changes_nothing(
    scratch_database: Callable[[], str], make_pool: MakePool
) -> None:
    pool = await make_pool(scratch_database())
    await migrate(pool)
    checkpointer = PostgresCheckpointer(pool=pool)
    workflow = _workflow()
    await checkpointer.supply(workflow, "kept", {"across": "migrations"})
    await migrate(pool)
    assert await checkpointer.load(workflow) == {"kept": {"across": "migrations"}}


async def test_an_effect_on_a_missing_user_table_is_not_called_a_missing_migration(
    pool: Pool,
) -> None:
    checkpointer = PostgresCheckpointer(pool=pool)
    workflow = _workflow()
    holder = await checkpointer.claim(workflow, LONG, LONG)
    assert holder is not None
    with pytest.raises(psycopg.errors.UndefinedTable):
        await checkpointer.transact(holder, "k", PostgresEffect("SELECT n FROM no_such_user_table"))
    assert await checkpointer.load(workflow) == {}


# --- connections killed mid-transaction -------------------------------------------------------


async def test_a_record_killed_while_it_waits_writes_nothing_and_can_be_retried(
    pool: Pool, database_url: str, make_pool: MakePool
) -> None:
    admin = await make_pool(size=2)
    checkpointer = PostgresCheckpointer(pool=pool)
    workflow = _workflow()
    holder = await checkpointer.claim(workflow, LONG, LONG)
    assert holder is not None
    async with await psycopg.AsyncConnection.connect(database_url) as locker:
        # Hold the claim row, so the record statement blocks inside its transaction.
        await locker.execute(
            "SELECT 1 FROM durability.claims WHERE workflow = %s FOR UPDATE", (workflow,)
        )
        writing = asyncio.create_task(checkpointer.record(holder, "charged", 42))
        pid = await _backend(admin, waiting_on="transactionid", query_has="durability.records")
        await _terminate(admin, pid)
        with pytest.raises(psycopg.OperationalError):
            await writing
        await locker.rollback()
    assert await checkpointer.load(workflow) == {}
    # The retry lands exactly once, and the pool has replaced the connection it lost.
    assert await checkpointer.record(holder, "charged", 42) == Recorded(42, True)
    for key in ("shipped", "billed", "closed"):
        assert (await checkpointer.record(holder, key, True)).first
    assert await checkpointer.load(workflow) == {
        "charged": 42,
        "shipped": True,
        "billed": True,
        "closed": True,
    }


async def test_a_transact_killed_inside_its_effect_leaves_neither_effect_nor_record(
    pool: Pool, make_pool: MakePool
) -> None:
    admin = await make_pool(size=2)
    async with pool.connection() as conn:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS pg_fail_counters (workflow text PRIMARY KEY, n bigint)"
        )
    marker = f"slow_{uuid.uuid4().hex}"
    bump = (
        "WITH bumped AS (INSERT INTO pg_fail_counters AS c (workflow, n) VALUES (%s, 1)"
        " ON CONFLICT (workflow) DO UPDATE SET n = c.n + 1 RETURNING n)"
    )
    checkpointer = PostgresCheckpointer(pool=pool)
    workflow = _workflow()
    holder = await checkpointer.claim(workflow, LONG, LONG)
    assert holder is not None
    slow = PostgresEffect(f"/* {marker} */ {bump} SELECT n FROM bumped, pg_sleep(30)", (workflow,))
    doing = asyncio.create_task(checkpointer.transact(holder, "bumped", slow))
    pid = await _backend(admin, waiting_on="PgSleep", query_has=marker)
    await _terminate(admin, pid)
    with pytest.raises(psycopg.OperationalError):
        await doing
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT n FROM pg_fail_counters WHERE workflow = %s", (workflow,)
        )
        assert await cursor.fetchone() is None  # the effect's write died with its transaction
    assert await checkpointer.load(workflow) == {}
    # Retried, the effect happens once and its result is recorded with it.
    quick = PostgresEffect(f"{bump} SELECT n FROM bumped", (workflow,))
    again = await checkpointer.transact(holder, "bumped", quick)
    assert again == Recorded(1, True)
    assert await checkpointer.load(workflow) == {"bumped": 1}
