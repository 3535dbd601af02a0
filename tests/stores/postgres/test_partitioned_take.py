"""Takes and finishes on a queue table hash-partitioned by workflow (the contention
experiment's `partitioned` arm): a ctid names a row only within one partition, so a statement
that finds its locked rows again by ctid alone also hits the rows at the same place in every
other partition, hides or deletes them, and waits on the ones other takers hold (the
DeadlockDetected that arm logged)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import psycopg

from durability.postgres import PostgresCheckpointer, PostgresDurable, PostgresScheduler

from .conftest import MakePool

LEASE = timedelta(seconds=30)
BUDGET = timedelta(seconds=60)
SHORT = timedelta(milliseconds=200)
PARTITIONS = 4


def _partitioned(url: str) -> None:
    """The queue table as the contention experiment's partitioned arm makes it."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA durability")
        conn.execute("CREATE TABLE durability.queue (queue text NOT NULL, workflow text"
                     " NOT NULL, visible_at timestamptz NOT NULL, receipt bigint NOT NULL,"
                     " PRIMARY KEY (queue, workflow)) PARTITION BY HASH (workflow)")
        for n in range(PARTITIONS):
            conn.execute(f"CREATE TABLE durability.queue_{n} PARTITION OF durability.queue"
                         f" FOR VALUES WITH (MODULUS {PARTITIONS}, REMAINDER {n})")


async def _store(scratch_database: Callable[[], str], make_pool: MakePool) -> PostgresDurable:
    from durability.postgres import migrate

    url = scratch_database()
    await asyncio.to_thread(_partitioned, url)
    pool = await make_pool(url)
    await migrate(pool)
    scheduler = PostgresScheduler(pool=pool, lease=LEASE, queue="q")
    return PostgresDurable(PostgresCheckpointer(pool=pool), scheduler)


async def _first_in_each_partition(durable: PostgresDurable) -> list[str]:
    """One ready workflow per partition, each the partition's first row (the same ctid)."""
    pool = durable.scheduler.pool
    found: dict[str, str] = {}
    n = 0
    while len(found) < PARTITIONS:
        workflow = f"w{n}"
        n += 1
        # Which partition a workflow lands in: insert it and look.
        await durable.scheduler.make_ready(workflow)
        async with pool.connection() as conn:
            place = await (await conn.execute(
                "SELECT tableoid::regclass::text FROM durability.queue"
                " WHERE queue = 'q' AND workflow = %s", (workflow,))).fetchone()
        assert place is not None
        if place[0] in found:
            await durable.scheduler.cancel(workflow)
        else:
            found[place[0]] = workflow
    return list(found.values())


async def test_a_take_of_one_row_hides_only_that_row(
    scratch_database: Callable[[], str], make_pool: MakePool
) -> None:
    durable = await _store(scratch_database, make_pool)
    try:
        workflows = await _first_in_each_partition(durable)
        taken = await durable.take_up_to(lambda: 1, SHORT, BUDGET, LEASE)
        assert [t.delivery.workflow for t in taken] == [taken[0].delivery.workflow]
        # Every other partition's row is still ready: a second take gets the rest.
        rest = await durable.take_up_to(lambda: PARTITIONS, SHORT, BUDGET, LEASE)
        assert sorted(t.delivery.workflow for t in taken + rest) == sorted(workflows)
    finally:
        await durable.scheduler.close()


async def test_a_take_never_waits_on_a_row_another_taker_holds(
    scratch_database: Callable[[], str], make_pool: MakePool
) -> None:
    """Another transaction holds one partition's first row, as a taker does between its lock
    and its commit: a take passes it over (SKIP LOCKED) and must not wait for it."""
    durable = await _store(scratch_database, make_pool)
    try:
        workflows = await _first_in_each_partition(durable)
        held = workflows[-1]
        async with durable.scheduler.pool.connection() as other, other.transaction():
            await other.execute("SELECT 1 FROM durability.queue WHERE queue = 'q'"
                                " AND workflow = %s FOR UPDATE", (held,))
            taken = await asyncio.wait_for(
                durable.take_up_to(lambda: PARTITIONS, SHORT, BUDGET, LEASE), 20)
        assert sorted(t.delivery.workflow for t in taken) == sorted(workflows[:-1])
    finally:
        await durable.scheduler.close()


async def test_finishes_sent_together_delete_only_their_own_rows(
    scratch_database: Callable[[], str], make_pool: MakePool
) -> None:
    """Two finishes of one turn go as one statement, which deletes its rows by where they lie:
    the rows at the same place in the other partitions (taken, not finished) stay queued."""
    durable = await _store(scratch_database, make_pool)
    try:
        workflows = await _first_in_each_partition(durable)
        taken = await durable.take_up_to(lambda: PARTITIONS, SHORT, BUDGET, LEASE)
        assert sorted(t.delivery.workflow for t in taken) == sorted(workflows)
        ending, staying = taken[:2], taken[2:]
        stood = await asyncio.gather(*(
            durable.finish_settled(t.holder, t.delivery, "completed", {})
            for t in ending if t.holder is not None))
        assert stood == [True, True]
        async with durable.scheduler.pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT workflow FROM durability.queue WHERE queue = 'q' ORDER BY workflow"
            )).fetchall()
        assert [row[0] for row in rows] == sorted(t.delivery.workflow for t in staying)
    finally:
        await durable.scheduler.close()
