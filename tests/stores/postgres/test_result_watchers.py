"""Postgres tells a workflow's ending only while somebody waits for it (`watchers`, schema.sql):
a finish nobody waits for sends no notification, one somebody waits for does, and a waiter
that comes while a finish is between its look at the watchers and its commit still gets the
ending, at once, not a `LOOK` later."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from durability import endings
from durability.checks import detail_text
from durability.endings import completion, ending_key, result
from durability.interfaces import Taken
from durability.postgres import PostgresDurable, PostgresScheduler, watching
from durability.postgres.migrate import migrate
from durability.postgres.policy import giving_back
from durability.postgres.statements import ended_channel, statements

LEASE = timedelta(seconds=30)
SHORT = timedelta(milliseconds=500)
WITHIN = timedelta(seconds=60)
PATIENCE = 20.0
FIRST = ending_key({})


@pytest.fixture
def durable(lone_durable: PostgresDurable) -> PostgresDurable:
    return lone_durable


@pytest.fixture
def no_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A waiter that is not rung waits out `within` (an hour), never a look: so a lost
    wakeup fails the test rather than arriving a `LOOK` late."""
    hour = timedelta(hours=1)
    monkeypatch.setattr(endings, "LOOK", hour)
    monkeypatch.setattr(watching, "LOOK", hour)


async def _taken(durable: PostgresDurable, workflow: str) -> Taken:
    await durable.arrive(workflow, "order", {"n": 1})
    while True:
        got = await durable.take(SHORT, LEASE, LEASE)
        assert got is not None and got.holder is not None
        if got.delivery.workflow == workflow:
            return got


async def _heard(listener: psycopg.AsyncConnection[Any], quiet: float) -> list[str]:
    """The payloads `listener` was told until `quiet` seconds passed with none."""
    return [note.payload async for note in listener.notifies(timeout=quiet)]


async def _until(count: Callable[[], Awaitable[int]]) -> None:
    """Wait (up to `PATIENCE`) until `count()` is above 0."""
    async with asyncio.timeout(PATIENCE):
        while True:
            if await count() > 0:
                return
            await asyncio.sleep(0.02)


async def _rows(durable: PostgresDurable, workflow: str) -> list[Any]:
    """When each of `workflow`'s waiter rows was last marked."""
    async with durable.checkpointer.pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT at FROM durability.watchers WHERE workflow = %s", (workflow,))
        return [row[0] for row in await cursor.fetchall()]


async def _watchers(durable: PostgresDurable, workflow: str) -> int:
    return len(await _rows(durable, workflow))


async def test_an_ending_is_told_only_while_somebody_waits_for_one(
    durable: PostgresDurable, database_url: str, no_looks: None
) -> None:
    tag = uuid.uuid4().hex[:8]
    alone, awaited = f"alone-{tag}", f"awaited-{tag}"
    async with durable.checkpointer.pool.connection() as conn:  # rows an earlier test left
        await conn.execute("DELETE FROM durability.watchers")
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as listener:
        await listener.execute(f"LISTEN {ended_channel('durability')}")

        taken = await _taken(durable, alone)
        assert taken.holder is not None
        assert await durable.finish_ended(taken.holder, taken.delivery, FIRST, completion(1),
                                          "completed", {})
        assert alone not in await _heard(listener, 1.0)  # nobody waited: nothing told

        together = [f"{alone}-{n}" for n in range(3)]  # one statement for the three
        taken_together = [await _taken(durable, workflow) for workflow in together]
        assert await asyncio.gather(*(
            durable.finish_ended(t.holder, t.delivery, FIRST, completion(n), "completed", {})  # type: ignore[arg-type]
            for n, t in enumerate(taken_together)
        )) == [True] * 3
        assert not set(together) & set(await _heard(listener, 1.0))

        taken = await _taken(durable, awaited)
        assert taken.holder is not None
        waiting = asyncio.create_task(result(durable.checkpointer, awaited, WITHIN))
        await _until(lambda: _watchers(durable, awaited))  # its row is written
        assert await durable.finish_ended(taken.holder, taken.delivery, FIRST, completion(2),
                                          "completed", {})
        async with asyncio.timeout(PATIENCE):
            assert await waiting == 2
        assert awaited in await _heard(listener, 1.0)
    assert await _watchers(durable, awaited) == 0  # the waiter's row goes with it


async def test_a_waiter_that_comes_while_a_finish_commits_gets_its_ending_at_once(
    durable: PostgresDurable, database_url: str, no_looks: None
) -> None:
    workflow = f"racing-{uuid.uuid4().hex[:8]}"
    taken = await _taken(durable, workflow)
    holder, delivery = taken.holder, taken.delivery
    assert holder is not None
    scheduler = durable.scheduler
    assert isinstance(scheduler, PostgresScheduler)
    params = {
        "workflow": workflow, "queue": scheduler.queue, "channel": scheduler.channel,
        "token": holder.token, "receipt": int(delivery.receipt), "state": "completed",
        "detail": detail_text({}), "ending_key": FIRST,
        "ending_value": durable.checkpointer.codec.encode(completion(3)),
        "ended_channel": ended_channel("durability"), **giving_back(delivery),
    }
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as finisher:
        async with finisher.transaction():
            # The finish runs whole, past its look at the watchers (nobody yet), and holds its
            # claim row until it commits at the end of this block.
            cursor = await finisher.execute(statements("durable.sql")["finish_settled"], params)
            row = await cursor.fetchone()
            assert row is not None and row[0] == 1 and row[3] == 0  # stood; told nobody
            waiting = asyncio.create_task(result(durable.checkpointer, workflow, WITHIN))
            await _until(lambda: _blocked_on_a_lock(durable))  # it waits on the claim row
            assert not waiting.done()
        async with asyncio.timeout(PATIENCE):
            assert await waiting == 3


async def _blocked_on_a_lock(durable: PostgresDurable) -> int:
    async with durable.checkpointer.pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND query LIKE '%%durability.watchers%%'")
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])


async def test_a_dead_process_s_row_is_dropped_by_the_next_waiter_and_by_migrate(
    durable: PostgresDurable, no_looks: None
) -> None:
    tag = uuid.uuid4().hex[:8]
    dead, finished = f"dead-{tag}", f"finished-{tag}"
    pool = durable.checkpointer.pool

    async def died() -> None:  # a waiter whose process died 4 min ago, its row left behind
        async with pool.connection() as conn:
            await conn.execute(
                "INSERT INTO durability.watchers (workflow, watcher, at)"
                " VALUES (%s, %s, clock_timestamp() - interval '4 minutes')",
                (dead, uuid.uuid4()))

    await died()
    taken = await _taken(durable, finished)
    assert taken.holder is not None
    waiting = asyncio.create_task(result(durable.checkpointer, finished, WITHIN))
    await _until(lambda: _watchers(durable, finished))
    assert await _watchers(durable, dead) == 1  # left while the waiter waits
    assert await durable.finish_ended(taken.holder, taken.delivery, FIRST, completion(1),
                                      "completed", {})
    async with asyncio.timeout(PATIENCE):
        assert await waiting == 1
    await _until(lambda: _gone(durable, finished))
    assert await _watchers(durable, dead) == 0  # the waiter's own delete took it too

    await died()
    await migrate(pool)
    assert await _watchers(durable, dead) == 0


async def test_a_waiting_process_keeps_its_rows_alive(
    durable: PostgresDurable, monkeypatch: pytest.MonkeyPatch, no_looks: None
) -> None:
    monkeypatch.setattr(watching, "KEEP", timedelta(milliseconds=50))
    workflow = f"kept-{uuid.uuid4().hex[:8]}"
    waiting = asyncio.create_task(result(durable.checkpointer, workflow, WITHIN))
    await _until(lambda: _watchers(durable, workflow))
    first = await _at(durable, workflow)

    async def moved() -> int:
        return int(await _at(durable, workflow) != first)

    await _until(moved)  # marked alive again, while it waits
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    await _until(lambda: _gone(durable, workflow))  # its row goes once it stops


async def _at(durable: PostgresDurable, workflow: str) -> object:
    [at] = await _rows(durable, workflow)
    return at


async def _gone(durable: PostgresDurable, workflow: str) -> int:
    return int(await _watchers(durable, workflow) == 0)
