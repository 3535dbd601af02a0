"""A limit key's `limits` row on Postgres (issue 34): one batched take admits as many wakeups
of a key as the limit has room for, never more, with takers on several connections; the row
goes when it holds nothing (with the last hold given back, or swept by a later take), and an
admission racing that removal neither errors nor loses a hold; `earliest` and `backlog` count
every level once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from psycopg import AsyncConnection

from durability import Limit
from durability.postgres import PostgresCheckpointer, PostgresDurable, PostgresScheduler
from durability.postgres.policy import giving_back
from durability.postgres.statements import statements
from durability.values import Delivery, Taken

if TYPE_CHECKING:
    from durability.postgres.statements import Pool

MakePool = Callable[..., Awaitable["Pool"]]
SHORT = timedelta(milliseconds=200)
BUDGET = timedelta(seconds=30)


def _unique(what: str) -> str:
    return f"pg-rows-{what}-{uuid.uuid4().hex[:12]}"


def _durable(pool: Pool, queue: str, **more: Any) -> PostgresDurable:
    scheduler = PostgresScheduler(pool=pool, queue=queue, **more)
    return PostgresDurable(PostgresCheckpointer(pool=pool), scheduler)


async def _holds(pool: Pool, queue: str, key: str) -> list[str] | None:
    """The workflows holding `key` in its limits row, or None if the key has no row."""
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT ARRAY(SELECT h.value ->> 0 FROM jsonb_each(held) AS h ORDER BY 1)"
            " FROM durability.limits WHERE queue = %s AND key = %s", [queue, key])
        row = await cursor.fetchone()
    return None if row is None else list(row[0])


async def test_one_take_of_many_admits_as_many_as_the_limit_has_room_for(pool: Pool) -> None:
    queue = _unique("q")
    durable = _durable(pool, queue)
    limit = Limit("four", 4)
    try:
        for n in range(8):
            await durable.arrive(f"{queue}-{n}", "go", n, limit=limit)
        batch = await durable.take_up_to(lambda: 10, SHORT, BUDGET, BUDGET)  # one statement
        held = await _holds(pool, queue, "four")
        again = await durable.take_up_to(lambda: 10, SHORT, BUDGET, BUDGET)
    finally:
        await durable.scheduler.close()
    assert len(batch) == 4  # the limit's room, all of it, in one take
    assert all(t.delivery.limit == limit and t.holder is not None for t in batch)
    # The first four in the order they became ready.
    assert sorted(t.delivery.workflow for t in batch) == [f"{queue}-{n}" for n in range(4)]
    assert held == sorted(t.delivery.workflow for t in batch)
    assert again == []  # full: the other four wait


async def test_one_take_admits_up_to_the_room_left_beside_the_holds_already_there(
    pool: Pool,
) -> None:
    queue = _unique("q")
    durable = _durable(pool, queue)
    limit = Limit("five", 5)
    try:
        for n in range(9):
            await durable.arrive(f"{queue}-{n}", "go", n, limit=limit)
        first = await durable.take_up_to(lambda: 2, SHORT, BUDGET, BUDGET)
        second = await durable.take_up_to(lambda: 10, SHORT, BUDGET, BUDGET)
    finally:
        await durable.scheduler.close()
    assert (len(first), len(second)) == (2, 3)


async def test_batched_takes_on_several_connections_never_overshoot_a_limit_of_four(
    make_pool: MakePool,
) -> None:
    queue = _unique("q")
    durables = [_durable(await make_pool(size=1), queue, notify=False) for _ in range(4)]
    try:
        counts = []
        for n in range(8):
            limit = Limit(f"race-{n}", 4)  # a fresh key each round
            for m in range(12):
                await durables[0].arrive(f"{queue}-{n}-{m}", "go", m, limit=limit)
            batches = await asyncio.gather(*(
                d.take_up_to(lambda: 8, timedelta(milliseconds=50), BUDGET, BUDGET)
                for d in durables))
            counts.append(sum(len(batch) for batch in batches))
            for m in range(12):
                await durables[0].delete(f"{queue}-{n}-{m}")
    finally:
        for durable in durables:
            await durable.scheduler.close()
    assert counts == [4] * 8  # each round: the four slots, and no more, however split


async def test_batched_workers_on_several_connections_hold_at_most_the_limit(
    make_pool: MakePool,
) -> None:
    queue = _unique("q")
    limit = Limit("workers", 3)
    workflows = {f"{queue}-{n}" for n in range(30)}
    durables = [_durable(await make_pool(size=2), queue) for _ in range(3)]
    holding: set[str] = set()
    finished: list[str] = []
    most = 0

    async def hold(durable: PostgresDurable, taken: Taken) -> None:
        nonlocal most
        holding.add(taken.delivery.workflow)
        most = max(most, len(holding))
        await asyncio.sleep(0.01)
        holding.discard(taken.delivery.workflow)
        finished.append(taken.delivery.workflow)
        assert taken.holder is not None
        await durable.finish_settled(taken.holder, taken.delivery, "completed", {})

    async def work(durable: PostgresDurable) -> None:
        while len(finished) < len(workflows):
            batch = await durable.take_up_to(
                lambda: 4, timedelta(milliseconds=200), BUDGET, BUDGET)
            await asyncio.gather(*(hold(durable, taken) for taken in batch))

    try:
        for workflow in sorted(workflows):
            await durables[0].arrive(workflow, "go", 1, limit=limit)
        await asyncio.wait_for(asyncio.gather(*(work(d) for d in durables)), 120)
        left = await _holds(durables[0].checkpointer.pool, queue, "workers")
    finally:
        for durable in durables:
            await durable.scheduler.close()
    assert sorted(finished) == sorted(workflows)  # every one ran, once
    assert most <= 3
    assert left is None  # the last finish took the key's row with it


async def test_the_last_hold_given_back_takes_its_key_s_row_with_it(pool: Pool) -> None:
    queue = _unique("q")
    durable = _durable(pool, queue)
    scheduler = durable.scheduler
    limit = Limit("gone", 3)
    try:
        for n in range(3):
            await durable.arrive(f"{queue}-{n}", "go", n, limit=limit)
        one, two, three = await durable.take_up_to(lambda: 3, SHORT, BUDGET, BUDGET)
        assert one.holder is not None and two.holder is not None and three.holder is not None
        await scheduler.done(one.delivery)  # done_limited: two holds are left
        after_one = await _holds(pool, queue, "gone")
        await asyncio.gather(  # finish_many, giving back the last two at once
            durable.finish_settled(two.holder, two.delivery, "completed", {}),
            durable.finish_settled(three.holder, three.delivery, "completed", {}),
        )
        after_all = await _holds(pool, queue, "gone")
        await durable.arrive(f"{queue}-again", "go", 1, limit=limit)
        again = await durable.take(SHORT, BUDGET, BUDGET)
        assert again is not None and again.holder is not None
        held_again = await _holds(pool, queue, "gone")
        await durable.finish_settled(again.holder, again.delivery, "completed", {})  # alone
        after_again = await _holds(pool, queue, "gone")
    finally:
        await scheduler.close()
    assert after_one == sorted([two.delivery.workflow, three.delivery.workflow])
    assert after_all is None
    assert held_again == [f"{queue}-again"]  # the key used anew: a row anew
    assert after_again is None


async def test_a_wake_at_giving_back_the_last_hold_removes_the_row(pool: Pool) -> None:
    queue = _unique("q")
    scheduler = PostgresScheduler(pool=pool, queue=queue)
    try:
        await scheduler.make_ready(f"{queue}-w", limit=Limit("sleeps", 1))
        delivery = await scheduler.next_ready(SHORT)
        assert delivery is not None
        assert await scheduler.wake_at(delivery, datetime.now(UTC) + timedelta(hours=1))
        held = await _holds(pool, queue, "sleeps")
    finally:
        await scheduler.close()
    assert held is None


async def test_a_rate_key_s_row_is_swept_by_a_later_take_once_its_window_passed(
    pool: Pool,
) -> None:
    queue = _unique("q")
    scheduler = PostgresScheduler(pool=pool, queue=queue)
    window = timedelta(milliseconds=300)
    try:
        await scheduler.make_ready(f"{queue}-rated", limit=Limit("rated", 1, window))
        rated = await scheduler.next_ready(SHORT)
        assert rated is not None
        await scheduler.done(rated)  # a rate's hold stays out its window
        during = await _holds(pool, queue, "rated")
        await asyncio.sleep(window.total_seconds() + 0.2)
        await scheduler.make_ready(f"{queue}-other", limit=Limit("other", 1))
        other = await scheduler.next_ready(SHORT)  # a take that reads limits: it sweeps
        after = await _holds(pool, queue, "rated")
    finally:
        await scheduler.close()
    assert during == [f"{queue}-rated"]
    assert other is not None and other.workflow == f"{queue}-other"
    assert after is None


def _take_params(queue: str, n: int) -> dict[str, object]:
    return {"queue": queue, "lease": timedelta(seconds=30), "n": n}


def _freeing_params(queue: str, delivery: Delivery, scheduler: PostgresScheduler
                    ) -> dict[str, object]:
    return {"queue": queue, "workflow": delivery.workflow, "channel": scheduler.channel,
            "receipt": int(delivery.receipt), **giving_back(delivery)}


async def test_an_admission_waiting_on_the_row_its_last_hold_left_inserts_it_anew(
    pool: Pool, database_url: str
) -> None:
    """The last hold is given back (the row deleted) in a transaction still open; a take of two
    more under the key waits for it, then admits both into a new row: no error, no overshoot."""
    queue = _unique("q")
    sql = statements("scheduler.sql")
    scheduler = PostgresScheduler(pool=pool, queue=queue)
    limit = Limit("anew", 2)
    try:
        for name in ("first", "second", "third"):
            await scheduler.make_ready(f"{queue}-{name}", limit=limit)
        first = await scheduler.next_ready(SHORT)
        assert first is not None and first.workflow == f"{queue}-first"
        async with await AsyncConnection.connect(database_url) as freeing, \
                await AsyncConnection.connect(database_url, autocommit=True) as taking:
            await freeing.execute(sql["done_limited"], _freeing_params(queue, first, scheduler))
            take = asyncio.create_task(taking.execute(sql["take"], _take_params(queue, 2)))
            await asyncio.sleep(0.3)
            blocked = not take.done()  # the admission waits for the row's lock
            await freeing.commit()
            await take
        held = await _holds(pool, queue, "anew")
    finally:
        await scheduler.close()
    assert blocked
    assert held == [f"{queue}-second", f"{queue}-third"]


async def test_a_hold_given_back_while_an_admission_is_open_keeps_the_admitted_hold(
    pool: Pool, database_url: str
) -> None:
    """A take admits a second wakeup in a transaction still open; the first holder's done waits
    for the row, then sees the new hold and keeps the row with it (not deleted as empty)."""
    queue = _unique("q")
    sql = statements("scheduler.sql")
    scheduler = PostgresScheduler(pool=pool, queue=queue)
    limit = Limit("kept", 2)
    try:
        await scheduler.make_ready(f"{queue}-first", limit=limit)
        first = await scheduler.next_ready(SHORT)
        assert first is not None
        await scheduler.make_ready(f"{queue}-second", limit=limit)
        async with await AsyncConnection.connect(database_url) as taking, \
                await AsyncConnection.connect(database_url, autocommit=True) as freeing:
            cursor = await taking.execute(sql["take"], _take_params(queue, 1))
            row = await cursor.fetchone()
            assert row is not None and row[0] == f"{queue}-second"
            done = asyncio.create_task(
                freeing.execute(sql["done_limited"], _freeing_params(queue, first, scheduler)))
            await asyncio.sleep(0.3)
            blocked = not done.done()
            await taking.commit()
            await done
        held = await _holds(pool, queue, "kept")
    finally:
        await scheduler.close()
    assert blocked
    assert held == [f"{queue}-second"]


async def test_earliest_and_backlog_count_each_row_once_across_levels(pool: Pool) -> None:
    queue = _unique("q")
    scheduler = PostgresScheduler(pool=pool, queue=queue)
    try:
        await scheduler.make_ready(f"{queue}-plain")
        await scheduler.make_ready(f"{queue}-limited", limit=Limit("once", 5))  # level 0, both
        await scheduler.make_ready(f"{queue}-high", priority=7)
        await scheduler.make_ready(f"{queue}-low", priority=-2)
        backlog = await scheduler.backlog()
        assert await scheduler.wake_due() is None  # nothing hidden
        await scheduler.make_ready(f"{queue}-sleeps-high", priority=9)
        await scheduler.make_ready(f"{queue}-sleeps-limited", limit=Limit("once", 5))
        taken = [await scheduler.next_ready(SHORT) for _ in range(2)]
        assert [d.workflow if d else None for d in taken] == [
            f"{queue}-sleeps-high", f"{queue}-high"]
        now = datetime.now(UTC)
        sleeping = [d for d in taken if d is not None and d.workflow.endswith("sleeps-high")]
        assert await scheduler.wake_at(sleeping[0], now + timedelta(hours=3))
        await scheduler.done(sleeping[0])
        earliest = await scheduler.wake_due()  # the taken "high": its lease end
        later = await scheduler.backlog()
    finally:
        await scheduler.close()
    assert backlog.ready == 4 and backlog.oldest is not None
    assert earliest is not None and now < earliest < now + timedelta(minutes=1)
    assert later.ready == 4  # plain, limited, low, sleeps-limited; high taken, one asleep
