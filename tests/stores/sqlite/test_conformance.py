"""The conformance suite over the SQLite stores, each test on a file of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

pytest.importorskip("aiosqlite", reason="aiosqlite is not installed")

from durability.interfaces import Checkpointer, Durable, Effect, Scheduler
from durability.sqlite import (
    SqliteCheckpointer,
    SqliteDatabase,
    SqliteDurable,
    SqliteEffect,
    SqliteScheduler,
)
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


class _Counters:
    """A counter table in the same file; the effect adds to a row and returns the new count."""

    def __init__(self, database: SqliteDatabase) -> None:
        self.database = database

    async def create(self) -> None:
        await self.database.write(
            lambda connection: connection.execute(
                "CREATE TABLE IF NOT EXISTS counters (workflow TEXT PRIMARY KEY, n INTEGER)"
            )
        )

    def effect(self, workflow: str, value: int) -> Effect:
        return SqliteEffect(
            "INSERT INTO counters (workflow, n) VALUES (?, ?)"
            " ON CONFLICT (workflow) DO UPDATE SET n = n + excluded.n RETURNING n",
            (workflow, value),
        )

    async def counter(self, workflow: str) -> int:
        rows = await self.database.read(
            lambda connection: connection.execute(
                "SELECT n FROM counters WHERE workflow = ?", (workflow,)
            ).fetchall()
        )
        return int(rows[0][0]) if rows else 0


class TestSqliteCheckpointer(CheckpointerContract):
    @pytest.fixture
    def checkpointer(self, database: SqliteDatabase) -> Checkpointer:
        return SqliteCheckpointer(database)

    @pytest.fixture
    async def effect_kit(self, database: SqliteDatabase) -> EffectKit:
        kit = _Counters(database)
        await kit.create()
        return kit


class TestSqliteScheduler(SchedulerContract):
    @pytest.fixture
    def make_scheduler(self, database: SqliteDatabase) -> MakeScheduler:
        made = 0

        async def make(lease: timedelta) -> Scheduler:
            nonlocal made
            made += 1
            scheduler = SqliteScheduler(database, lease=lease, queue=f"queue-{made}")
            await scheduler.prepare()
            return scheduler

        return make


class TestSqliteDurable(DurableContract):
    @pytest.fixture
    def durable(self, database: SqliteDatabase) -> Durable:
        return SqliteDurable(SqliteCheckpointer(database), SqliteScheduler(database))

    @pytest.fixture
    async def twin(self, path: Path) -> AsyncIterator[Twin]:
        """Durables over the same file, each with connections of its own: other processes."""
        from durability.sqlite import open_database

        opened: list[SqliteDatabase] = []

        async def twin() -> Durable:
            opened.append(await open_database(path))
            return SqliteDurable(SqliteCheckpointer(opened[-1]), SqliteScheduler(opened[-1]))

        yield twin
        for database in opened:
            await database.close()

    async def test_a_schedule_added_by_another_process_wakes_a_sleeping_worker(
        self, durable: Durable, twin: Twin
    ) -> None:
        await a_schedule_added_elsewhere_wakes_a_worker(durable, twin)


class TestSqliteBounds(BoundsContract):
    @pytest.fixture
    async def offline(self, database: SqliteDatabase) -> Durable:
        # Both connections closed under the database: any statement would raise
        # sqlite3.ProgrammingError ("Cannot operate on a closed database").
        await database.writer(lambda connection: connection.close())
        await database.read(lambda connection: connection.close())
        return SqliteDurable(SqliteCheckpointer(database), SqliteScheduler(database))


class TestSqlitePolicies(PolicyContract):
    @pytest.fixture
    async def make_durables(self, path: Path) -> AsyncIterator[MakeDurables]:
        """`count` durables over a fresh queue in one file, each with connections of its own:
        other processes."""
        from durability.sqlite import migrate, open_database

        opened: list[SqliteDatabase] = []
        made = 0

        async def make(lease: timedelta, count: int) -> list[Durable]:
            nonlocal made
            made += 1
            durables: list[Durable] = []
            for _ in range(count):
                opened.append(await open_database(path))
                await migrate(opened[-1])
                scheduler = SqliteScheduler(opened[-1], lease=lease, queue=f"policies-{made}")
                await scheduler.prepare()
                durables.append(SqliteDurable(SqliteCheckpointer(opened[-1]), scheduler))
            return durables

        yield make
        for database in opened:
            await database.close()

    offline = TestSqliteBounds.offline


class TestSqliteCheckpointerModel(CheckpointerModelContract):
    checkpointer = TestSqliteCheckpointer.checkpointer
    effect_kit = TestSqliteCheckpointer.effect_kit


class TestSqliteSchedulerModel(SchedulerModelContract):
    make_scheduler = TestSqliteScheduler.make_scheduler
