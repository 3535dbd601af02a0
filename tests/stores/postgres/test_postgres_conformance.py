"""The conformance suite, unchanged, over the Postgres store on this session's database."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from durability.interfaces import Checkpointer, Durable, Effect, Scheduler
from durability.testing.conformance import (
    BoundsContract,
    CheckpointerContract,
    CheckpointerModelContract,
    DurableContract,
    EffectKit,
    MakeDurables,
    MakeScheduler,
    PolicyContract,
    SchedulerContract,
    SchedulerModelContract,
    Twin,
    a_schedule_added_elsewhere_wakes_a_worker,
)

if TYPE_CHECKING:
    from durability.postgres.statements import Pool
    from tests.stores.postgres.conftest import MakePool

def queue_name() -> str:
    return f"q-{uuid.uuid4().hex}"


COUNTERS = """
CREATE TABLE IF NOT EXISTS conformance_counters (workflow text PRIMARY KEY, n bigint NOT NULL)
"""


class _Counters:
    """A user table the effects add to: the effect commits with its record or not at all."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def effect(self, workflow: str, value: int) -> Effect:
        from durability.postgres import PostgresEffect

        return PostgresEffect(
            "INSERT INTO conformance_counters AS c (workflow, n) VALUES (%s, %s)"
            " ON CONFLICT (workflow) DO UPDATE SET n = c.n + EXCLUDED.n RETURNING n",
            (workflow, value),
        )

    async def counter(self, workflow: str) -> int:
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT n FROM conformance_counters WHERE workflow = %s", (workflow,)
            )
            row = await cursor.fetchone()
            return 0 if row is None else int(row[0])


class TestPostgresCheckpointer(CheckpointerContract):
    @pytest.fixture
    def checkpointer(self, pool: Pool) -> Checkpointer:
        from durability.postgres import PostgresCheckpointer

        return PostgresCheckpointer(pool=pool)

    @pytest.fixture
    async def effect_kit(self, pool: Pool) -> EffectKit:
        async with pool.connection() as conn:
            await conn.execute(COUNTERS)
        return _Counters(pool)


class TestPostgresScheduler(SchedulerContract):
    @pytest.fixture
    async def make_scheduler(self, pool: Pool) -> AsyncIterator[MakeScheduler]:
        from durability.postgres import PostgresScheduler

        made: list[PostgresScheduler] = []

        async def make(lease: timedelta) -> Scheduler:
            scheduler = PostgresScheduler(pool=pool, lease=lease, queue=queue_name())
            await scheduler.prepare()
            made.append(scheduler)
            return scheduler

        yield make
        for scheduler in made:
            await scheduler.close()


class TestPostgresSchedulerPolling(SchedulerContract):
    """The same contract with notifications off: the poll alone must keep every promise."""

    @pytest.fixture
    async def make_scheduler(self, pool: Pool) -> AsyncIterator[MakeScheduler]:
        from durability.postgres import PostgresScheduler

        async def make(lease: timedelta) -> Scheduler:
            scheduler = PostgresScheduler(
                pool=pool, lease=lease, queue=queue_name(), notify=False
            )
            await scheduler.prepare()
            return scheduler

        yield make


class TestPostgresDurable(DurableContract):
    @pytest.fixture
    def queue(self) -> str:
        return queue_name()

    @pytest.fixture
    async def durable(self, pool: Pool, queue: str) -> AsyncIterator[Durable]:
        from durability.postgres import PostgresCheckpointer, PostgresDurable, PostgresScheduler

        scheduler = PostgresScheduler(pool=pool, queue=queue)
        await scheduler.prepare()
        yield PostgresDurable(PostgresCheckpointer(pool=pool), scheduler)
        await scheduler.close()

    @pytest.fixture
    async def twin(self, make_pool: MakePool, queue: str) -> AsyncIterator[Twin]:
        """Durables over the same queue, each on a pool of its own: other workers."""
        from durability.postgres import PostgresCheckpointer, PostgresDurable, PostgresScheduler

        schedulers: list[PostgresScheduler] = []

        async def twin() -> Durable:
            pool = await make_pool(size=2)
            schedulers.append(PostgresScheduler(pool=pool, queue=queue))
            return PostgresDurable(PostgresCheckpointer(pool=pool), schedulers[-1])

        yield twin
        for scheduler in schedulers:
            await scheduler.close()

    async def test_a_schedule_added_by_another_process_wakes_a_sleeping_worker(
        self, durable: Durable, twin: Twin
    ) -> None:
        await a_schedule_added_elsewhere_wakes_a_worker(durable, twin)


class TestPostgresBounds(BoundsContract):
    @pytest.fixture
    async def offline(self, database_url: str) -> AsyncIterator[Durable]:
        from psycopg_pool import AsyncConnectionPool

        from durability.postgres import PostgresCheckpointer, PostgresDurable, PostgresScheduler

        # Never opened: anything that asked it for a connection would get PoolClosed.
        pool: Pool = AsyncConnectionPool(database_url, kwargs={"autocommit": True}, open=False)
        scheduler = PostgresScheduler(pool=pool, queue=queue_name())
        yield PostgresDurable(PostgresCheckpointer(pool=pool), scheduler)
        await scheduler.close()


class TestPostgresPolicies(PolicyContract):
    @pytest.fixture
    async def make_durables(self, make_pool: MakePool) -> AsyncIterator[MakeDurables]:
        """`count` durables over a fresh queue, each on a pool of its own: other workers."""
        from durability.postgres import PostgresCheckpointer, PostgresDurable, PostgresScheduler

        schedulers: list[PostgresScheduler] = []

        async def make(lease: timedelta, count: int) -> list[Durable]:
            queue = queue_name()
            durables: list[Durable] = []
            for _ in range(count):
                pool = await make_pool(size=2)
                scheduler = PostgresScheduler(pool=pool, queue=queue, lease=lease)
                await scheduler.prepare()
                schedulers.append(scheduler)
                durables.append(PostgresDurable(PostgresCheckpointer(pool=pool), scheduler))
            return durables

        yield make
        for scheduler in schedulers:
            await scheduler.close()

    offline = TestPostgresBounds.offline


class TestPostgresCheckpointerModel(CheckpointerModelContract):
    checkpointer = TestPostgresCheckpointer.checkpointer
    effect_kit = TestPostgresCheckpointer.effect_kit


class TestPostgresSchedulerModel(SchedulerModelContract):
    make_scheduler = TestPostgresScheduler.make_scheduler
