"""A call cancelled while its statement runs (a worker stopping, a call past its bound): the
connection it was sent on goes back to the pool whole once its answer has come, rather than
closed, so the pool neither makes another nor warns of a closed connection handed back; and
one whose answer does not come within `libpq_pipeline.SETTLE` is closed, and the pool makes
another."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
from psycopg_pool import AsyncConnectionPool

from durability.postgres import libpq_pipeline
from durability.postgres.statements import one
from durability.storekit.outage import Unanswered

if TYPE_CHECKING:
    from durability.postgres.statements import Pool

PID = "SELECT pg_backend_pid()"
SLEEP = "SELECT pg_sleep(%(seconds)s), pg_backend_pid()"
DISCARDED = "discarding closed connection"


@pytest.fixture
async def single(database_url: str) -> AsyncIterator[Pool]:
    """A pool of one connection, so the next call shows which connection came back; its call
    bound (timeout, and a quarter more for the statements) is short enough to run out."""
    pool: Pool = AsyncConnectionPool(
        database_url, min_size=1, max_size=1, timeout=1.0, kwargs={"autocommit": True},
        open=False,
    )
    await pool.open(wait=True)
    yield pool
    await pool.close()


async def _pid(pool: Pool) -> int:
    row = await one(pool, PID, {})
    assert row is not None
    return int(row[0])


async def _cancelled_mid_statement(pool: Pool, seconds: float) -> None:
    call = asyncio.ensure_future(one(pool, SLEEP, {"seconds": seconds}))
    await asyncio.sleep(0.1)  # sent, and sleeping on the server
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


async def test_a_cancelled_call_gives_its_connection_back_whole(
    single: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    before = await _pid(single)
    with caplog.at_level(logging.INFO, logger="psycopg.pool"):
        await _cancelled_mid_statement(single, 0.3)
        # The one connection comes back once its answer is read: the same backend serves.
        assert await _pid(single) == before
        # The statement cancelled before its answer is usable again (prepared as it was, or
        # again): no answer of the cancelled call is taken for this one's.
        assert await one(single, SLEEP, {"seconds": 0}) == ("", before)
    assert DISCARDED not in caplog.text
    assert single.get_stats().get("returns_bad", 0) == 0


async def test_a_call_past_its_bound_is_unanswered_and_its_connection_comes_back(
    single: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    before = await _pid(single)
    with caplog.at_level(logging.INFO, logger="psycopg.pool"):
        with pytest.raises(Unanswered):
            await one(single, SLEEP, {"seconds": 1.5})  # the bound: 1 s, and a quarter more
        assert await _pid(single) == before
    assert DISCARDED not in caplog.text


async def test_a_connection_whose_answer_does_not_come_in_time_is_closed_and_replaced(
    single: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(libpq_pipeline, "SETTLE", timedelta(milliseconds=200))
    before = await _pid(single)
    await _cancelled_mid_statement(single, 3.0)
    await asyncio.sleep(0.3)  # past SETTLE: closed, handed back, replaced
    assert await _pid(single) != before
    assert single.get_stats().get("returns_bad", 0) == 1
