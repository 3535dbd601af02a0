"""Closing a Postgres store ends what it started: a call cancelled mid-exchange leaves its
connection to a task that reads the answers still owed (`libpq_pipeline.give_back`), and
closing the store waits for that task, at most `libpq_pipeline.SETTLE`, then cancels what is
left, before the pool goes. No task of the store outlives it, and nothing warns of one."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from durability.connect import open_durable
from durability.endings import completion, ending_key
from durability.postgres import libpq_pipeline
from durability.postgres.statements import one
from tests.closing import watched


def _url(database_url: str, schema: str) -> str:
    where = conninfo_to_dict(database_url)
    base = f"postgresql://{where['user']}@{where['host']}:{where['port']}/{where['dbname']}"
    return f"{base}?schema={schema}"


async def _locking(database_url: str, table: str) -> psycopg.AsyncConnection[Any]:
    """Another session, holding `table` locked until it rolls back."""
    locker = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    await locker.execute("BEGIN")
    await locker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
    return locker


async def _stuck_behind(locker: psycopg.AsyncConnection[Any]) -> None:
    """Until a statement of another session waits on the lock: sent, and not yet answered."""
    async with asyncio.timeout(10):
        while True:
            cursor = await locker.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
            row = await cursor.fetchone()
            if row is not None and row[0] > 0:
                return
            await asyncio.sleep(0.02)


async def test_closing_a_store_waits_for_a_cancelled_call_s_connection_to_settle(
    database_url: str,
) -> None:
    schema = f"closing_{uuid.uuid4().hex[:8]}"
    with watched() as after:
        async with open_durable(_url(database_url, schema)) as durable:
            locker = await _locking(database_url, f"{schema}.queue")
            call = asyncio.ensure_future(durable.scheduler.make_ready("w"))
            await _stuck_behind(locker)
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
            assert call.cancelled()
            assert after.pending(), "the cancelled call's connection is being settled"

            async def release() -> None:
                await asyncio.sleep(0.2)  # while the store closes
                await locker.execute("ROLLBACK")

            releasing = asyncio.ensure_future(release())
            after.own(releasing)
        # Closed: it waited for the answer owed to come (the lock went meanwhile), so the
        # connection was settled and handed back before the pool closed.
        assert after.pending() == set(), "a task of the store outlived it"
        await releasing
        await locker.close()
    assert after.said == []


async def test_a_connection_that_does_not_settle_in_time_is_closed_when_its_pool_is(
    database_url: str, pool: AsyncConnectionPool[Any]
) -> None:
    with watched() as after:
        call = asyncio.ensure_future(one(pool, "SELECT pg_sleep(5)", {}))
        await asyncio.sleep(0.2)  # sent, and sleeping on the server
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
        assert after.pending(), "the cancelled call's connection is being settled"
        # Its answer is 5 s away: past the bound the task is cancelled, closes the
        # connection (the server ends its statement) and hands it back.
        async with asyncio.timeout(5):
            await libpq_pipeline.settled(pool, timedelta(milliseconds=200))
        assert after.pending() == set()
        assert await one(pool, "SELECT 1", {}) == (1,)  # the pool made another
    assert after.said == []


async def test_closing_a_store_just_after_a_result_ends_what_the_result_left_behind(
    database_url: str,
) -> None:
    # A `result` returns before its waiter's row is deleted and its listener closed (both go
    # on behind it); a store closed at once waits for them, so neither outlives it.
    schema = f"closing_{uuid.uuid4().hex[:8]}"
    with watched() as after:
        async with open_durable(_url(database_url, schema)) as durable:
            workflow = f"ended-{uuid.uuid4().hex[:8]}"
            waiting = asyncio.ensure_future(durable.result(workflow, within=timedelta(seconds=30)))
            after.own(waiting)
            await asyncio.sleep(0.2)  # listening, its row written, its first look taken
            await durable.checkpointer.conclude(workflow, ending_key({}), completion(7))
            assert await waiting == 7
            assert after.pending(), "the waiter's row and listener are left to tasks"
        assert after.pending() == set(), "a task of the store outlived it"
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            cursor = await conn.execute(f"SELECT count(*) FROM {schema}.watchers")
            assert await cursor.fetchone() == (0,)  # the delete was waited for, not cancelled
    assert after.said == []
