"""Priorities and limits on Postgres (issue 34): strict priority, the merge rule, a sleeper
that comes back as it went, limits that never overshoot with takers on several connections,
a slot freed by done (told as an arrival is), by a delete and by a lapsed lease (an idle
reader's next look covers it), a rate window (a cancel gives none of it back), `take_up_to`
within the room, and a database made before any of this migrated with its rows kept.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from durability import Limit
from durability.postgres import PostgresCheckpointer, PostgresDurable, PostgresScheduler, migrate
from durability.testing.races import most_held_at_once, taken_at_a_limit_of_one
from durability.values import Delivery

if TYPE_CHECKING:
    from durability.postgres.statements import Pool

    from .conftest import Counting

MakePool = Callable[..., Awaitable["Pool"]]
SHORT = timedelta(milliseconds=200)
LONG_POLL = timedelta(seconds=30)  # longer than any wait below: only a notification can help
BUDGET = timedelta(seconds=30)


def _unique(what: str) -> str:
    return f"pg-policy-{what}-{uuid.uuid4().hex[:12]}"


def _scheduler(
    pool: Pool, queue: str, lease: timedelta = timedelta(seconds=30), **more: object
) -> PostgresScheduler:
    return PostgresScheduler(pool=pool, queue=queue, lease=lease, **more)  # type: ignore[arg-type]


async def _take_all(scheduler: PostgresScheduler) -> list[Delivery]:
    taken: list[Delivery] = []
    while (delivery := await scheduler.next_ready(timedelta(milliseconds=100))) is not None:
        taken.append(delivery)
    return taken


async def test_a_higher_priority_is_taken_first_and_equals_in_the_order_they_became_ready(
    pool: Pool,
) -> None:
    queue = _unique("q")
    scheduler = _scheduler(pool, queue)
    try:
        for name, priority in [("a", 0), ("b", 5), ("c", -3), ("d", 5), ("e", 100), ("f", 0)]:
            await scheduler.make_ready(f"{queue}-{name}", priority=priority)
        taken = await _take_all(scheduler)
    finally:
        await scheduler.close()
    assert [d.workflow[-1] for d in taken] == ["e", "b", "d", "a", "f", "c"]
    assert [d.priority for d in taken] == [100, 5, 5, 0, 0, -3]


async def test_a_pending_wakeup_keeps_the_higher_priority_and_its_own_limit(pool: Pool) -> None:
    queue = _unique("q")
    scheduler = _scheduler(pool, queue)
    first, second = Limit("first", 3), Limit("second", 1)
    try:
        await scheduler.make_ready("plain", priority=1)
        await scheduler.make_ready("plain", priority=5, limit=first)  # it had none: takes this
        await scheduler.make_ready("plain", priority=2, limit=second)  # keeps 5 and `first`
        await scheduler.make_ready("high", priority=9)
        await scheduler.make_ready("high", priority=-9)  # keeps 9
        taken = {d.workflow: d for d in await _take_all(scheduler)}
        assert (taken["plain"].priority, taken["plain"].limit) == (5, first)
        assert (taken["high"].priority, taken["high"].limit) == (9, None)
        # Answered, they go with it: the next wakeup brings its own.
        await scheduler.done(taken["plain"])
        await scheduler.make_ready("plain")
        again = await scheduler.next_ready(SHORT)
    finally:
        await scheduler.close()
    assert again is not None and (again.priority, again.limit) == (0, None)


async def test_a_wakeup_landing_mid_pass_brings_its_own_priority_and_limit(pool: Pool) -> None:
    queue = _unique("q")
    scheduler = _scheduler(pool, queue)
    try:
        await scheduler.make_ready("w", priority=7, limit=Limit("k", 1))
        held = await scheduler.next_ready(SHORT)
        assert held is not None
        await scheduler.make_ready("w", priority=2)  # the held delivery is not a pending one
        await scheduler.done(held)  # the new wakeup survives it
        again = await scheduler.next_ready(SHORT)
    finally:
        await scheduler.close()
    assert again is not None and (again.priority, again.limit) == (2, None)


async def test_a_delivery_woken_by_wake_at_keeps_its_priority_and_limit(pool: Pool) -> None:
    queue = _unique("q")
    scheduler = _scheduler(pool, queue)
    limit = Limit("sleepy", 2, timedelta(minutes=1))
    try:
        await scheduler.make_ready("sleeper", priority=7, limit=limit)
        await scheduler.make_ready("other", priority=3)
        delivery = await scheduler.next_ready(SHORT)
        assert delivery is not None and delivery.workflow == "sleeper"
        assert await scheduler.wake_at(delivery, datetime.now(UTC))  # due at once
        await scheduler.done(delivery)  # leaves the sleeper: the receipt moved on
        back = await scheduler.next_ready(SHORT)
    finally:
        await scheduler.close()
    assert back is not None and back.workflow == "sleeper"  # 7 still beats 3
    assert (back.priority, back.limit) == (7, limit)


async def test_takers_on_several_connections_never_overshoot_a_limit_of_one(
    make_pool: MakePool,
) -> None:
    queue = _unique("q")
    schedulers = [_scheduler(await make_pool(size=1), queue, poll=LONG_POLL) for _ in range(4)]
    try:
        counts = [
            await taken_at_a_limit_of_one(schedulers, (f"{queue}-x", f"{queue}-y"), f"race-{n}")
            for n in range(15)
        ]
    finally:
        for scheduler in schedulers:
            await scheduler.close()
    assert counts == [1] * 15  # each race: the limit's one slot went to exactly one taker


async def test_many_takers_hold_at_most_the_limit_at_once(make_pool: MakePool) -> None:
    queue = _unique("q")
    workflows = [f"{queue}-{n}" for n in range(10)]
    schedulers = [_scheduler(await make_pool(size=1), queue) for _ in range(4)]
    try:
        most, answered = await most_held_at_once(schedulers, workflows, Limit("gateway", 2))
    finally:
        for scheduler in schedulers:
            await scheduler.close()
    assert sorted(answered) == sorted(workflows)  # every one ran, once
    assert most <= 2


async def test_a_full_limit_passes_its_wakeup_over_and_done_wakes_a_waiting_reader(
    pool: Pool, make_pool: MakePool
) -> None:
    queue = _unique("q")
    limit = Limit("one-at-a-time", 1)
    holder = _scheduler(await make_pool(size=1), queue, notify=False)
    waiting = _scheduler(pool, queue, poll=LONG_POLL)
    try:
        await holder.make_ready("first", limit=limit)
        await holder.make_ready("second", limit=limit, priority=1)
        await holder.make_ready("free", priority=-5)
        held = await holder.next_ready(SHORT)
        assert held is not None and held.workflow == "second"
        # "first" waits for the slot; the row behind it is still taken.
        other = await waiting.next_ready(SHORT)
        assert other is not None and other.workflow == "free"
        reader = asyncio.create_task(waiting.next_ready(timedelta(seconds=10)))
        await asyncio.sleep(0.3)
        assert not reader.done()  # the slot is held: nothing to take
        await holder.done(held)
        started = asyncio.get_running_loop().time()
        freed = await reader
        waited = asyncio.get_running_loop().time() - started
    finally:
        await holder.close()
        await waiting.close()
    assert freed is not None and freed.workflow == "first"
    assert waited < 5  # told at once, well before any poll (30 s) would have looked


async def test_a_lapsed_holder_frees_its_slot_and_an_idle_reader_looks_then_not_before(
    make_pool: MakePool, counting: type[Counting]
) -> None:
    queue = _unique("q")
    limit = Limit("lapses", 1)
    lease = timedelta(seconds=1)
    holder = _scheduler(await make_pool(size=1), queue, lease=lease)
    counted = await make_pool(size=1, cursor_factory=counting)
    waiting = _scheduler(counted, queue, lease=lease, poll=LONG_POLL)
    try:
        await holder.make_ready("dies", limit=limit)
        await holder.make_ready("waits", limit=limit)
        dead = await holder.next_ready(SHORT)  # never answered, never extended
        assert dead is not None
        counting.sent.clear()
        taken = await waiting.next_ready(timedelta(seconds=10))
        reads = len(counting.sent)
    finally:
        await holder.close()
        await waiting.close()
    # Either the waiter or the lapsed one: whichever comes first once the lease ran out.
    assert taken is not None and taken.workflow in {"waits", "dies"}
    assert reads <= 4, counting.sent  # slept until the lapse: no busy poll


async def test_a_rate_limit_opens_again_when_its_window_moves_on(pool: Pool) -> None:
    queue = _unique("q")
    per = timedelta(seconds=1)
    limit = Limit("rate", 2, per)
    scheduler = _scheduler(pool, queue, poll=LONG_POLL)
    try:
        for n in range(3):
            await scheduler.make_ready(f"{queue}-{n}", limit=limit)
        started = asyncio.get_running_loop().time()
        first = await scheduler.next_ready(SHORT)
        second = await scheduler.next_ready(SHORT)
        assert first is not None and second is not None
        # Answering does not give a rate's slot back: the window does.
        await scheduler.done(first)
        await scheduler.done(second)
        third = await scheduler.next_ready(timedelta(seconds=10))
        waited = asyncio.get_running_loop().time() - started
    finally:
        await scheduler.close()
    assert third is not None and third.limit == limit
    assert waited >= 0.9 * per.total_seconds()


async def test_a_woken_workflow_retaken_holds_its_own_slot_once(pool: Pool) -> None:
    queue = _unique("q")
    limit = Limit("own", 1)
    scheduler = _scheduler(pool, queue)
    try:
        await scheduler.make_ready("mine", limit=limit)
        await scheduler.make_ready("theirs", limit=limit)
        held = await scheduler.next_ready(SHORT)
        assert held is not None
        await scheduler.make_ready(held.workflow, limit=limit)  # a wakeup lands mid-pass
        again = await scheduler.next_ready(SHORT)  # its own slot: taken again
        blocked = await scheduler.next_ready(SHORT)
    finally:
        await scheduler.close()
    assert again is not None and again.workflow == held.workflow
    assert blocked is None  # the other still waits: the slot counts once


async def test_take_up_to_never_takes_more_than_a_limit_has_room_for(pool: Pool) -> None:
    queue = _unique("q")
    scheduler = _scheduler(pool, queue)
    durable = PostgresDurable(PostgresCheckpointer(pool=pool), scheduler)
    limit = Limit("batch", 2)
    try:
        for n in range(5):
            await durable.arrive(f"{queue}-limited-{n}", "go", n, limit=limit)
        for n in range(3):
            await durable.arrive(f"{queue}-free-{n}", "go", n)
        batches = []
        while batch := await durable.take_up_to(lambda: 10, SHORT, BUDGET, BUDGET):
            batches.append(batch)
    finally:
        await scheduler.close()
    taken = [t.delivery for batch in batches for t in batch]
    limited = [d for d in taken if d.limit is not None]
    assert len(limited) == 2  # the limit's room, across every batch (none answered)
    assert {d.workflow for d in taken if d.limit is None} == {f"{queue}-free-{n}" for n in range(3)}
    assert all(t.holder is not None for batch in batches for t in batch)


async def test_batched_takes_on_several_connections_never_overshoot_a_limit(
    make_pool: MakePool,
) -> None:
    queue = _unique("q")
    durables = []
    for _ in range(3):
        pool = await make_pool(size=1)
        durables.append(
            PostgresDurable(PostgresCheckpointer(pool=pool), _scheduler(pool, queue, notify=False))
        )
    try:
        counts = []
        for n in range(10):
            limit = Limit(f"batched-{n}", 1)  # a fresh slot each round
            for m in range(4):
                await durables[0].arrive(f"{queue}-{n}-{m}", "go", m, limit=limit)
            batches = await asyncio.gather(
                *(d.take_up_to(lambda: 8, timedelta(milliseconds=50), BUDGET, BUDGET)
                  for d in durables)
            )
            counts.append(sum(len(batch) for batch in batches))
            for m in range(4):
                await durables[0].delete(f"{queue}-{n}-{m}")
    finally:
        for durable in durables:
            await durable.scheduler.close()
    assert counts == [1] * 10


async def test_finish_of_a_limited_pass_frees_its_slot_for_the_next_take(pool: Pool) -> None:
    queue = _unique("q")
    scheduler = _scheduler(pool, queue)
    durable = PostgresDurable(PostgresCheckpointer(pool=pool), scheduler)
    limit = Limit("finishing", 1)
    try:
        await durable.deliver(f"{queue}-a", "hello", priority=3, limit=limit)
        await durable.deliver(f"{queue}-b", "hello", limit=limit)
        first = await durable.take(SHORT, BUDGET, BUDGET)
        assert first is not None and first.holder is not None
        assert first.delivery.workflow == f"{queue}-a" and first.delivery.priority == 3
        assert await durable.take(SHORT, BUDGET, BUDGET) is None  # the slot is held
        await durable.finish_settled(first.holder, first.delivery, "completed", {})
        second = await durable.take(SHORT, BUDGET, BUDGET)
    finally:
        await scheduler.close()
    assert second is not None and second.delivery.workflow == f"{queue}-b"
    assert second.delivery.limit == limit


async def test_finishes_of_one_turn_free_every_slot_they_held(
    counting: type[Counting], make_pool: MakePool
) -> None:
    queue = _unique("q")
    counted = await make_pool(size=2, cursor_factory=counting)
    scheduler = _scheduler(counted, queue)
    durable = PostgresDurable(PostgresCheckpointer(pool=counted), scheduler)
    limit = Limit("turn", 2)
    try:
        for n in range(4):
            await durable.arrive(f"{queue}-{n}", "go", n, limit=limit)
        first = await durable.take(SHORT, BUDGET, BUDGET)
        second = await durable.take(SHORT, BUDGET, BUDGET)
        assert first is not None and second is not None
        assert first.holder is not None and second.holder is not None
        assert await durable.take(SHORT, BUDGET, BUDGET) is None  # both slots held
        counting.sent.clear()
        await asyncio.gather(  # one turn: one finish_many statement for both
            durable.finish_settled(first.holder, first.delivery, "completed", {}),
            durable.finish_settled(second.holder, second.delivery, "completed", {}),
        )
        sent = list(counting.sent)
        third = await durable.take(SHORT, BUDGET, BUDGET)
        fourth = await durable.take(SHORT, BUDGET, BUDGET)
    finally:
        await scheduler.close()
    assert len(sent) == 1 and "jsonb_to_recordset" in sent[0], sent
    assert third is not None and fourth is not None  # both slots came back


async def test_a_deleted_holder_frees_its_slot_and_a_cancelled_rate_take_still_counts(
    pool: Pool,
) -> None:
    queue = _unique("q")
    scheduler = _scheduler(pool, queue, poll=LONG_POLL)
    durable = PostgresDurable(PostgresCheckpointer(pool=pool), scheduler)
    limit, rate = Limit("deleted", 1), Limit("rated", 1, timedelta(minutes=1))
    try:
        await durable.arrive(f"{queue}-held", "go", 1, limit=limit)
        await durable.arrive(f"{queue}-next", "go", 1, limit=limit)
        first = await durable.take(SHORT, BUDGET, BUDGET)
        assert first is not None and first.delivery.workflow == f"{queue}-held"
        assert await durable.take(SHORT, BUDGET, BUDGET) is None  # the slot is held
        assert await durable.delete(f"{queue}-held") == 1
        second = await durable.take(SHORT, BUDGET, BUDGET)  # in the delete: not at lease's end
        await scheduler.make_ready(f"{queue}-r-1", limit=rate)
        await scheduler.make_ready(f"{queue}-r-2", limit=rate)
        taken = await scheduler.next_ready(SHORT)
        assert taken is not None and taken.workflow == f"{queue}-r-1"
        await scheduler.cancel(taken.workflow)  # a rate counts takes: its window stays
        after = await scheduler.next_ready(SHORT)
    finally:
        await scheduler.close()
    assert second is not None and second.delivery.workflow == f"{queue}-next"
    assert after is None


@pytest.mark.parametrize(
    ("priority", "limit", "error"),
    [
        (True, None, TypeError),
        (101, None, ValueError),
        ("1", None, TypeError),
        (0, Limit("k", 0), ValueError),
        (0, Limit("", 1), ValueError),
        (0, ("k", 1), TypeError),
    ],
)
async def test_a_bad_priority_or_limit_is_refused_before_anything_is_written(
    pool: Pool, priority: object, limit: object, error: type[Exception]
) -> None:
    queue = _unique("q")
    scheduler = _scheduler(pool, queue)
    durable = PostgresDurable(PostgresCheckpointer(pool=pool), scheduler)
    try:
        with pytest.raises(error):
            await scheduler.make_ready("w", priority=priority, limit=limit)  # type: ignore[arg-type]
        with pytest.raises(error):
            await durable.arrive("w", "k", 1, priority=priority, limit=limit)  # type: ignore[arg-type]
        with pytest.raises(error):
            await durable.deliver("w", 1, priority=priority, limit=limit)  # type: ignore[arg-type]
        assert await scheduler.next_ready(SHORT) is None
        assert await durable.checkpointer.load("w") == {}
    finally:
        await scheduler.close()


#: The queue as it was made before priorities and limits (and its index).
_OLD = """
CREATE SCHEMA {s};
CREATE SEQUENCE {s}.receipts;
CREATE TABLE {s}.queue (
    queue text NOT NULL, workflow text NOT NULL, visible_at timestamptz NOT NULL,
    receipt bigint NOT NULL, PRIMARY KEY (queue, workflow));
CREATE INDEX queue_by_visibility ON {s}.queue (queue, visible_at);
INSERT INTO {s}.queue VALUES
    ('old', 'ready', now() - interval '1 minute', nextval('{s}.receipts')),
    ('old', 'asleep', now() + interval '1 day', nextval('{s}.receipts'));
"""


async def test_a_database_made_before_priorities_migrates_and_keeps_its_rows(pool: Pool) -> None:
    schema = f"old_{uuid.uuid4().hex[:10]}"
    async with pool.connection() as conn:
        await conn.execute(_OLD.format(s=schema))  # type: ignore[arg-type]
    scheduler = _scheduler(pool, "old", schema=schema)
    try:
        await migrate(pool, schema)
        await migrate(pool, schema)  # and again: a no-op
        async with pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = %s ORDER BY 1", [schema]
            )
            indexes = [name for (name,) in await cursor.fetchall()]
        earliest = await scheduler.wake_due()  # the sleeper: nothing else is hidden yet
        ready = await scheduler.next_ready(SHORT)
        await scheduler.make_ready("new", priority=4, limit=Limit("k", 1))
        new = await scheduler.next_ready(SHORT)
    finally:
        await scheduler.close()
        async with pool.connection() as conn:
            await conn.execute(f"DROP SCHEMA {schema} CASCADE")  # type: ignore[arg-type]
    assert "queue_by_priority" in indexes and "queue_by_visibility" not in indexes
    assert ready is not None and ready.workflow == "ready"
    assert (ready.priority, ready.limit) == (0, None)
    assert earliest is not None and earliest > datetime.now(UTC) + timedelta(hours=23)
    assert new is not None and (new.priority, new.limit) == (4, Limit("k", 1))
