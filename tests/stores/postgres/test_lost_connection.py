"""A pass's record whose backend is terminated while it is in flight, in a throwaway database;
and a worker started before its database exists.

`cut` has an operator's connection lock the workflow's claim row, which the record must update,
so the record waits on the server; it then ends exactly the backends waiting on that lock
(`pg_terminate_backend`, which is what an administrator or a failover does to a connection),
and lets the lock go. The record never committed; the pass must write it again rather than
report the step as failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from durability import as_text, work
from durability.interfaces import Durable
from durability.stepwise import Run
from durability.testing import Observed
from durability.testing.conformance import Cut, StoreFaultContract
from tests.stores.postgres.conftest import create_database, drop_database, url_for

if TYPE_CHECKING:
    from psycopg import AsyncConnection

    from durability.postgres.statements import Pool
    from tests.stores.postgres.conftest import MakePool

WAITING = """
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()
"""


class TerminateMidRecord:
    """`cut` for Postgres (see the module doc). `terminated` lists the backends it ended."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.terminated: list[int] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def __call__(self) -> None:
        import psycopg

        operator = await psycopg.AsyncConnection.connect(self.url)
        # Every claim row: the only one live now is the workflow this pass holds.
        await operator.execute("SELECT 1 FROM durability.claims FOR UPDATE")
        self.tasks.append(asyncio.create_task(self._terminate_the_waiters(operator)))

    async def _terminate_the_waiters(self, operator: AsyncConnection) -> None:
        try:
            async with asyncio.timeout(5):
                while True:
                    waiting = [row[0] for row in await (await operator.execute(WAITING)).fetchall()]
                    if waiting:
                        break
                    await asyncio.sleep(0.01)
            for pid in waiting:
                await operator.execute("SELECT pg_terminate_backend(%s)", (pid,))
                self.terminated.append(pid)
        finally:
            await operator.rollback()  # the lock goes: the next try of the record gets through
            await operator.close()


class TestPostgresTerminatedMidRecord(StoreFaultContract):
    @pytest.fixture
    def url(self, scratch_database: Callable[[], str]) -> str:
        return scratch_database()

    @pytest.fixture
    async def durable(self, url: str, make_pool: MakePool) -> AsyncIterator[Durable]:
        from durability.postgres import (
            PostgresCheckpointer,
            PostgresDurable,
            PostgresScheduler,
            migrate,
        )

        pool = await make_pool(url, size=4)
        await migrate(pool)
        scheduler = PostgresScheduler(pool=pool, lease=timedelta(seconds=5))
        await scheduler.prepare()
        yield PostgresDurable(PostgresCheckpointer(pool=pool), scheduler)
        await scheduler.close()

    @pytest.fixture
    async def cut(self, url: str) -> AsyncIterator[Cut]:
        terminate = TerminateMidRecord(url)
        yield terminate
        await asyncio.gather(*terminate.tasks)
        assert terminate.terminated, "no backend was terminated with the record waiting on it"


async def test_a_worker_started_before_its_database_exists_waits_for_it(
    server: str, caplog: pytest.LogCaptureFixture
) -> None:
    from psycopg_pool import AsyncConnectionPool

    from durability.postgres import (
        PostgresCheckpointer,
        PostgresDurable,
        PostgresScheduler,
        migrate,
    )

    name = f"durability_{uuid.uuid4().hex[:12]}"  # not created yet
    url = url_for(server, name)
    # A short wait for a connection, so each try of the worker fails promptly while nothing is
    # there; the pool keeps trying to connect on its own meanwhile.
    pool: Pool = AsyncConnectionPool(
        url, min_size=1, max_size=4, kwargs={"autocommit": True}, open=False, timeout=1.0
    )
    await pool.open(wait=False)
    scheduler = PostgresScheduler(pool=pool, lease=timedelta(seconds=5))
    durable = PostgresDurable(PostgresCheckpointer(pool=pool), scheduler)
    observed = Observed(20.0)

    async def body(run: Run) -> str:
        return await run.step("ran", lambda: "ran", as_text)

    tick = timedelta(milliseconds=100)
    created = False
    try:
        with caplog.at_level(logging.WARNING, logger="durability.worker"):
            task = asyncio.create_task(
                work(durable, body, observer=observed, tick=tick, sweep=5 * tick)
            )
            try:
                await asyncio.sleep(1.5)
                assert not task.done(), "the worker must wait for its database, not exit"
                await asyncio.to_thread(create_database, server, name)
                created = True
                # Migrated after the worker started, then an order from an API of its own.
                async with AsyncConnectionPool(
                    url, min_size=1, max_size=1, kwargs={"autocommit": True}, open=False
                ) as api_pool:
                    await migrate(api_pool)
                    api = PostgresDurable(
                        PostgresCheckpointer(pool=api_pool), PostgresScheduler(pool=api_pool)
                    )
                    await api.arrive("late-1", "go", True)
                    await observed.until(lambda: observed.completed("late-1"))
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    finally:
        await scheduler.close()
        await pool.close()
        if created:
            await asyncio.to_thread(drop_database, server, name)
    waited = [r for r in caplog.records if "the store is not ready" in r.getMessage()]
    assert len(waited) >= 2
