"""The common path's take (issue 34: no priority, no limit costs what it did): while a queue
holds no wakeup with a priority or a limit, every take is sent in its plain form; one that
finds such a wakeup takes nothing and the full take runs at once, so the order and the limits
hold across the switch; the queue plain again goes back to the plain form.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from durability import Limit
from durability.postgres import PostgresCheckpointer, PostgresDurable, PostgresScheduler
from durability.postgres.traffic import attach
from durability.storekit.traffic import Traffic

LEASE = timedelta(seconds=30)
SHORT = timedelta(milliseconds=300)


@pytest.fixture
async def durable(database_url: str) -> AsyncIterator[PostgresDurable]:
    """A durable on its own queue whose pool counts what it sends (`durable.traffic`)."""
    from psycopg_pool import AsyncConnectionPool

    traffic = Traffic()

    async def counted(conn: Any) -> None:
        attach(conn, traffic)

    pool: Any = AsyncConnectionPool(database_url, kwargs={"autocommit": True}, min_size=1,
                                    max_size=4, open=False, configure=counted)
    await pool.open(wait=True)
    scheduler = PostgresScheduler(pool=pool, lease=LEASE, queue=f"pg-plain-{uuid.uuid4().hex}")
    try:
        yield PostgresDurable(PostgresCheckpointer(pool=pool), scheduler, traffic)
    finally:
        await scheduler.close()
        await pool.close()


def _name(what: str) -> str:
    return f"plain-{what}-{uuid.uuid4().hex[:8]}"


async def test_a_plain_queue_is_taken_by_the_plain_statement_alone(
    durable: PostgresDurable,
) -> None:
    first, second = _name("a"), _name("b")
    await durable.scheduler.make_ready(first)
    await durable.scheduler.make_ready(second)
    before = durable.traffic.snapshot()
    one = await durable.scheduler.next_ready(SHORT)
    taken = await durable.take(SHORT, LEASE, LEASE)
    sent = durable.traffic.snapshot() - before
    assert one is not None and one.workflow == first
    assert taken is not None and taken.delivery.workflow == second
    assert sent.requests.get("scheduler.take_plain") == 1
    assert sent.requests.get("durable.take_plain") == 1
    assert "scheduler.take" not in sent.requests and "durable.take" not in sent.requests


async def test_a_priority_arriving_on_a_plain_queue_is_taken_first_then_the_queue_is_plain(
    durable: PostgresDurable,
) -> None:
    scheduler = durable.scheduler
    warm = _name("warm")
    await scheduler.make_ready(warm)
    found = await scheduler.next_ready(SHORT)  # the queue seen plain
    assert found is not None and found.workflow == warm
    await scheduler.done(found)
    low, high = _name("low"), _name("high")
    await scheduler.make_ready(low)
    await scheduler.make_ready(high, priority=5)
    before = durable.traffic.snapshot()
    got = await scheduler.next_ready(SHORT)
    sent = durable.traffic.snapshot() - before
    # The plain take stood aside (it would have taken `low`, the earlier) and the full one ran.
    assert got is not None and (got.workflow, got.priority) == (high, 5)
    assert sent.requests.get("scheduler.take_plain") == 1
    assert sent.requests.get("scheduler.take") == 1
    await scheduler.done(got)
    before = durable.traffic.snapshot()
    rest = await scheduler.next_ready(SHORT)  # full: `high` was still in the queue when seen
    again = _name("again")
    await scheduler.make_ready(again)
    last = await scheduler.next_ready(SHORT)  # plain again: the full take saw no such row
    sent = durable.traffic.snapshot() - before
    assert rest is not None and rest.workflow == low
    assert last is not None and last.workflow == again
    assert sent.requests.get("scheduler.take_plain") == 1
    assert sent.requests.get("scheduler.take") == 1


async def test_a_limit_arriving_on_a_plain_queue_is_kept_by_every_take(
    durable: PostgresDurable,
) -> None:
    scheduler = durable.scheduler
    gate = Limit(_name("gate"), 1)
    first, second = _name("l1"), _name("l2")
    await scheduler.make_ready(first, limit=gate)
    await scheduler.make_ready(second, limit=gate)
    taken = await durable.take_up_to(lambda: 8, SHORT, LEASE, LEASE)
    assert [t.delivery.workflow for t in taken] == [first]  # one slot, however many asked
    assert taken[0].delivery.limit == gate
    # Held: the second stays queued, whichever take is sent.
    assert await durable.take(SHORT, LEASE, LEASE) is None
    assert await scheduler.next_ready(SHORT) is None
