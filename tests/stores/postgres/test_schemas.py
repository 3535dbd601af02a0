"""Two applications on one Postgres database: each in a schema of its own.

Every statement names its tables through the schema the store was built with, so two
durables in two schemas of one database, with the same workflow id and the same queue name,
neither see nor fence nor wake each other; dropping one schema leaves nothing of it and the
other (and the default schema) untouched. The contract runs whole in a schema of its own too,
so no statement is left pointing at the default one.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from durability.connect import open_durable
from durability.interfaces import Durable, NotMigrated, claimed
from durability.postgres import (
    PostgresCheckpointer,
    PostgresDurable,
    PostgresScheduler,
    migrate,
)
from durability.postgres.statements import channel, check_schema, statements
from durability.testing.conformance import DurableContract

if TYPE_CHECKING:
    from durability.postgres.statements import Pool

WAIT = timedelta(milliseconds=300)
BUDGET = timedelta(minutes=1)
ALIVE = timedelta(seconds=30)


def _schema() -> str:
    return f"app_{uuid.uuid4().hex[:12]}"


async def _drop(pool: Pool, schema: str) -> None:
    # A statement the test's worker sent as it stopped may still be committing on the shared
    # pool, and a DROP that locks the schema's tables one by one can deadlock with it (the
    # server then cancels one of the two): try again once the other has finished.
    for attempt in range(5):
        try:
            async with pool.connection() as conn:
                # A name this test made and check_schema passed: nothing else is interpolated.
                await conn.execute(f"DROP SCHEMA IF EXISTS {check_schema(schema)} CASCADE")
            return
        except psycopg.errors.DeadlockDetected:
            if attempt == 4:
                raise
            await asyncio.sleep(0.2)


async def _tables(pool: Pool, schema: str) -> set[str]:
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s",
            (schema,),
        )
        return {row[0] for row in await cursor.fetchall()}


@pytest.fixture
async def schemas(pool: Pool) -> AsyncIterator[Callable[[], str]]:
    """Make migrated schemas on demand (in the session database); all dropped after."""
    made: list[str] = []

    def make() -> str:
        made.append(_schema())
        return made[-1]

    yield make
    for schema in made:
        await _drop(pool, schema)


async def _durable(pool: Pool, schema: str, queue: str) -> PostgresDurable:
    await migrate(pool, schema)
    scheduler = PostgresScheduler(pool=pool, queue=queue, schema=schema)
    await scheduler.prepare()
    return PostgresDurable(PostgresCheckpointer(pool=pool, schema=schema), scheduler)


def test_a_schema_is_a_plain_identifier() -> None:
    assert check_schema("shop_2") == "shop_2"
    assert channel("durability") == "durability_ready"  # the default keeps its old channel
    assert channel("shop") == "shop_ready"
    for bad in ("Shop", "2shop", "shop-a", 'x"; DROP', "pg_catalog", "", "a" * 58):
        with pytest.raises(ValueError, match="schema"):
            check_schema(bad)
    with pytest.raises(ValueError, match="schema"):
        PostgresCheckpointer(pool=None, schema="Bad")
    # Only the qualified names move: the same statement text otherwise.
    default, other = statements("durable.sql"), statements("durable.sql", "shop")
    assert default.keys() == other.keys()
    for name, text in other.items():
        assert "durability." not in text, name
        assert text.replace("shop.", "durability.") == default[name]


async def test_the_same_id_in_two_schemas_is_two_workflows(
    pool: Pool, schemas: Callable[[], str]
) -> None:
    queue = "default"  # the same queue name in both applications
    first, second = [await _durable(pool, schemas(), queue) for _ in range(2)]
    try:
        workflow = f"order-{uuid.uuid4().hex[:8]}"
        await first.arrive(workflow, "order", {"cents": 100})
        assert await second.checkpointer.load(workflow) == {}
        assert await second.take(WAIT, BUDGET, ALIVE) is None

        taken = await first.take(WAIT, BUDGET, ALIVE)
        assert taken is not None and taken.holder is not None
        assert taken.holder.records == {"order": {"cents": 100}}
        theirs = await claimed(second.checkpointer, workflow, BUDGET, ALIVE)  # not contended
        await second.checkpointer.record(theirs, "order", {"cents": 999})
        assert (await first.checkpointer.record(taken.holder, "paid", True)).first
        await first.finish(taken.holder, taken.delivery)

        assert await first.checkpointer.load(workflow) == {"order": {"cents": 100}, "paid": True}
        assert await second.checkpointer.load(workflow) == {"order": {"cents": 999}}
        assert await second.delete(workflow) == 1
        assert await first.checkpointer.load(workflow) == {"order": {"cents": 100}, "paid": True}
    finally:
        await first.scheduler.close()
        await second.scheduler.close()


async def test_dropping_a_schema_leaves_nothing_of_it_and_the_others_untouched(
    pool: Pool, schemas: Callable[[], str]
) -> None:
    gone, kept = schemas(), schemas()
    queue = f"q-{uuid.uuid4().hex[:8]}"
    leaving, staying = await _durable(pool, gone, queue), await _durable(pool, kept, queue)
    default = await _durable(pool, "durability", queue)
    workflow = f"w-{uuid.uuid4().hex[:8]}"
    try:
        for durable in (leaving, staying, default):
            await durable.arrive(workflow, "order", 1)
            await durable.deliver(workflow, "hello")
        assert await _tables(pool, gone) >= {"records", "claims", "queue", "receipts"}

        await _drop(pool, gone)

        assert await _tables(pool, gone) == set()
        with pytest.raises(NotMigrated):
            await leaving.checkpointer.load(workflow)
        for durable in (staying, default):
            assert len(await durable.checkpointer.load(workflow)) == 2
            taken = await durable.take(WAIT, BUDGET, ALIVE)
            assert taken is not None and taken.delivery.workflow == workflow
            assert taken.holder is not None
            await durable.finish(taken.holder, taken.delivery)
        await default.delete(workflow)
    finally:
        for durable in (leaving, staying, default):
            await durable.scheduler.close()


async def test_a_schema_s_notifications_wake_only_its_own_workers(
    pool: Pool, database_url: str, schemas: Callable[[], str]
) -> None:
    mine, theirs = schemas(), schemas()
    queue = "default"
    ours, others = await _durable(pool, mine, queue), await _durable(pool, theirs, queue)
    listener = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    try:
        await listener.execute(f"LISTEN {channel(mine)}")
        await others.arrive(f"w-{uuid.uuid4().hex[:8]}", "order", 1)
        await ours.arrive(f"w-{uuid.uuid4().hex[:8]}", "order", 1)
        heard = [note async for note in listener.notifies(timeout=5, stop_after=1)]
        assert [(note.channel, note.payload) for note in heard] == [(channel(mine), queue)]
        # Nothing else arrives on this channel: the other schema's arrival went to its own.
        assert [note async for note in listener.notifies(timeout=0.3)] == []
    finally:
        await listener.close()
        await ours.scheduler.close()
        await others.scheduler.close()


async def test_a_schema_never_migrated_is_reported_as_such(pool: Pool) -> None:
    scheduler = PostgresScheduler(pool=pool, schema=_schema())
    with pytest.raises(NotMigrated):
        await scheduler.prepare()
    with pytest.raises(NotMigrated):
        await PostgresCheckpointer(pool=pool, schema=scheduler.schema).load("w")
    with pytest.raises(ValueError, match="one schema"):
        PostgresDurable(PostgresCheckpointer(pool=pool), scheduler)


async def test_open_durable_takes_the_schema_from_the_url(
    pool: Pool, database_url: str, schemas: Callable[[], str]
) -> None:
    schema = schemas()
    workflow = f"w-{uuid.uuid4().hex[:8]}"
    where = conninfo_to_dict(database_url)
    url = f"postgresql://{where['user']}@{where['host']}:{where['port']}/{where['dbname']}"
    async with open_durable(f"{url}?schema={schema}") as durable:
        await durable.arrive(workflow, "order", 1)
    async with pool.connection() as conn:
        cursor = await conn.execute(
            f"SELECT key FROM {schema}.records WHERE workflow = %s",
            (workflow,),
        )
        assert await cursor.fetchall() == [("order",)]
        cursor = await conn.execute(
            "SELECT count(*) FROM durability.records WHERE workflow = %s", (workflow,)
        )
        assert await cursor.fetchone() == (0,)


async def test_a_bad_schema_in_the_url_is_refused_before_connecting() -> None:
    # Port 1 answers nothing: had a connection been tried, the error would be the pool's.
    with pytest.raises(ValueError, match="schema"):
        async with open_durable("postgresql://postgres@127.0.0.1:1/none?schema=Bad-Name"):
            pass


class TestPostgresDurableInASchemaOfItsOwn(DurableContract):
    @pytest.fixture
    async def durable(self, pool: Pool, schemas: Callable[[], str]) -> AsyncIterator[Durable]:
        made = await _durable(pool, schemas(), f"q-{uuid.uuid4().hex}")
        yield made
        await made.scheduler.close()
