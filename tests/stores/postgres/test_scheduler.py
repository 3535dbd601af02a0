"""What is specific to `PostgresScheduler`: notifications end an idle wait, the poll catches
what nobody announced, a sleeper another worker schedules wakes a reader at its time, the
listening connection survives being killed, and an idle reader issues no statement it need not.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from durability.interfaces import Delivery
from durability.postgres import PostgresCheckpointer, PostgresScheduler

if TYPE_CHECKING:
    from durability.postgres.statements import Pool

    from .conftest import Counting

MakePool = Callable[..., Awaitable["Pool"]]
LONG_POLL = timedelta(seconds=30)  # longer than any wait below: only a notification can help
BLOCKED = timedelta(seconds=5)


def _names() -> tuple[str, str]:
    return f"q-{uuid.uuid4().hex}", f"pg-sched-{uuid.uuid4().hex}"


async def _blocked(scheduler: PostgresScheduler) -> asyncio.Task[Delivery | None]:
    """A reader blocked in next_ready, already past its first read and waiting."""
    reader = asyncio.create_task(scheduler.next_ready(BLOCKED))
    await asyncio.sleep(0.3)
    assert not reader.done()
    return reader


async def test_make_ready_from_another_connection_ends_a_blocked_next_ready(
    pool: Pool, make_pool: MakePool
) -> None:
    queue, workflow = _names()
    waiting = PostgresScheduler(pool=pool, queue=queue, poll=LONG_POLL)
    other = PostgresScheduler(pool=await make_pool(size=1), queue=queue, notify=False)
    try:
        reader = await _blocked(waiting)
        await other.make_ready(workflow)
        delivery = await reader
        assert delivery is not None, "the notification should have ended the wait"
        assert delivery.workflow == workflow
    finally:
        await waiting.close()


async def test_a_lost_notification_is_still_picked_up_by_the_poll(pool: Pool) -> None:
    queue, workflow = _names()
    waiting = PostgresScheduler(pool=pool, queue=queue, poll=timedelta(milliseconds=200))
    try:
        reader = await _blocked(waiting)
        async with pool.connection() as conn:  # a wakeup written by hand, announced to nobody
            await conn.execute(
                "INSERT INTO durability.queue (queue, workflow, visible_at, receipt)"
                " VALUES (%s, %s, clock_timestamp(), nextval('durability.receipts'))",
                (queue, workflow),
            )
        delivery = await reader
        assert delivery is not None
        assert delivery.workflow == workflow
    finally:
        await waiting.close()


async def test_a_sleeper_another_worker_schedules_wakes_a_blocked_reader_at_its_time(
    pool: Pool, make_pool: MakePool
) -> None:
    queue, workflow = _names()
    async with pool.connection() as conn:  # taken by a worker on another host: receipt 7
        await conn.execute(
            "INSERT INTO durability.queue (queue, workflow, visible_at, receipt)"
            " VALUES (%s, %s, clock_timestamp() + interval '1 hour', 7)",
            (queue, workflow),
        )
    waiting = PostgresScheduler(pool=pool, queue=queue, poll=LONG_POLL)
    other = PostgresScheduler(pool=await make_pool(size=1), queue=queue, notify=False)
    try:
        reader = await _blocked(waiting)
        soon = datetime.now(UTC) + timedelta(milliseconds=500)
        assert await other.wake_at(Delivery(workflow, "7"), soon)
        await other.done(Delivery(workflow, "7"))  # the row is a sleeper now, not ours
        delivery = await reader
        assert delivery is not None, "the reader should have woken for the sleeper"
        assert delivery.workflow == workflow
    finally:
        await waiting.close()


async def test_a_notification_for_another_queue_hands_out_nothing(
    pool: Pool, make_pool: MakePool
) -> None:
    queue, workflow = _names()
    elsewhere = f"q-{uuid.uuid4().hex}"
    waiting = PostgresScheduler(pool=pool, queue=queue, poll=LONG_POLL)
    other = PostgresScheduler(pool=await make_pool(size=1), queue=elsewhere, notify=False)
    try:
        reader = asyncio.create_task(waiting.next_ready(timedelta(milliseconds=600)))
        await asyncio.sleep(0.2)
        await other.make_ready(workflow)
        assert await reader is None
        taken = await other.next_ready(timedelta(milliseconds=100))
        assert taken is not None and taken.workflow == workflow
    finally:
        await waiting.close()


async def test_the_listener_reconnects_after_its_connection_is_killed(
    make_pool: MakePool,
) -> None:
    queue, workflow = _names()
    name = f"listen-{uuid.uuid4().hex[:16]}"
    pool = await make_pool(application_name=name)
    waiting = PostgresScheduler(pool=pool, queue=queue, poll=LONG_POLL)
    other = PostgresScheduler(pool=await make_pool(size=1), queue=queue, notify=False)

    async def listeners() -> list[int]:
        async with pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
                " AND query = 'LISTEN durability_ready'",
                (name,),
            )
            return [int(pid) for (pid,) in await cursor.fetchall()]

    try:
        assert await waiting.next_ready(timedelta(milliseconds=50)) is None  # starts listening
        (killed,) = await listeners()
        async with pool.connection() as conn:
            await conn.execute("SELECT pg_terminate_backend(%s)", (killed,))
        reader = asyncio.create_task(waiting.next_ready(BLOCKED))
        for _ in range(50):
            if (fresh := await listeners()) and killed not in fresh:
                break
            await asyncio.sleep(0.05)
        assert len(fresh) == 1 and killed not in fresh
        await asyncio.sleep(0.1)
        await other.make_ready(workflow)
        delivery = await reader
        assert delivery is not None, "a reconnected listener should still be woken"
        assert delivery.workflow == workflow
    finally:
        await waiting.close()


async def test_an_idle_reader_reads_once_until_something_is_announced(
    make_pool: MakePool, counting: type[Counting]
) -> None:
    statements = counting.sent
    queue, workflow = _names()
    pool = await make_pool(cursor_factory=counting)
    idle = PostgresScheduler(pool=pool, queue=queue, poll=LONG_POLL)
    other = PostgresScheduler(pool=await make_pool(size=1), queue=queue, notify=False)
    try:
        for _ in range(3):
            assert await idle.next_ready(timedelta(milliseconds=100)) is None
            assert await idle.wake_due() is None
        assert len(statements) == 1, statements  # one read; the quiet after it is known
        await other.make_ready(workflow)
        delivery = await idle.next_ready(BLOCKED)
        assert delivery is not None and delivery.workflow == workflow
        assert len(statements) == 2, statements
    finally:
        await idle.close()


async def test_an_arrival_wakes_the_readers_not_the_firer_and_a_schedule_change_the_firer(
    make_pool: MakePool, counting: type[Counting]
) -> None:
    # Both are told on the queue's channel; each payload wakes its own waiters alone, so a
    # worker's firer does not look at the timetable once per arrival (a statement beside every
    # take), nor do the readers read once per schedule change.
    statements = counting.sent
    queue, workflow = _names()
    mine = PostgresScheduler(pool=await make_pool(cursor_factory=counting), queue=queue,
                             poll=LONG_POLL)
    other = PostgresScheduler(pool=await make_pool(size=1), queue=queue)
    try:
        schedules_changed = await mine.timetable.changes()
        reader = await _blocked(mine)
        await other.make_ready(workflow)
        delivery = await reader
        assert delivery is not None and delivery.workflow == workflow
        await asyncio.sleep(0.3)
        assert not schedules_changed.is_set(), "an arrival woke the firer"

        reader = await _blocked(mine)
        read = len(statements)
        await other.timetable.announce()
        await asyncio.wait_for(schedules_changed.wait(), BLOCKED.total_seconds())
        await asyncio.sleep(0.3)
        assert not reader.done() and len(statements) == read, "a schedule change woke a reader"
        reader.cancel()
    finally:
        await mine.close()
        await other.close()


async def test_many_readers_on_many_connections_take_each_workflow_once(
    make_pool: MakePool,
) -> None:
    queue = f"q-{uuid.uuid4().hex}"
    readers = [
        PostgresScheduler(pool=await make_pool(size=1), queue=queue, notify=False)
        for _ in range(8)
    ]
    workflows = [f"pg-many-{uuid.uuid4().hex}" for _ in range(120)]
    await asyncio.gather(*(readers[i % 8].make_ready(w) for i, w in enumerate(workflows)))
    taken: list[str] = []

    async def read(scheduler: PostgresScheduler) -> None:
        while (delivery := await scheduler.next_ready(timedelta(milliseconds=300))) is not None:
            taken.append(delivery.workflow)
            await scheduler.done(delivery)

    await asyncio.gather(*(read(reader) for reader in readers))
    assert sorted(taken) == sorted(workflows)


async def test_many_connections_claiming_one_workflow_admit_exactly_one(
    make_pool: MakePool,
) -> None:
    checkpointers = [PostgresCheckpointer(pool=await make_pool(size=4)) for _ in range(4)]
    for _ in range(5):
        workflow = f"pg-claim-{uuid.uuid4().hex}"
        held = await asyncio.gather(
            *(
                checkpointers[i % 4].claim(workflow, timedelta(minutes=1), timedelta(minutes=1))
                for i in range(16)
            )
        )
        assert sum(holder is not None for holder in held) == 1


async def test_a_closed_scheduler_has_no_listening_connection(make_pool: MakePool) -> None:
    name = f"closed-{uuid.uuid4().hex[:16]}"
    pool = await make_pool(application_name=name)
    scheduler = PostgresScheduler(pool=pool, queue=f"q-{uuid.uuid4().hex}")
    assert await scheduler.next_ready(timedelta(milliseconds=50)) is None
    await scheduler.close()
    # The server's backend exits a moment after the client closed its end: wait for it.
    listening: tuple[object, ...] | None = None
    for _ in range(100):
        async with pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                " AND query LIKE 'LISTEN%%'",
                (name,),
            )
            listening = await cursor.fetchone()
        if listening == (0,):
            break
        await asyncio.sleep(0.05)
    assert listening == (0,)


async def test_a_cancel_is_seen_by_the_next_wake_due_though_it_announces_nothing(
    pool: Pool,
) -> None:
    # Found by the model-based test: an idle reader keeps its last empty read until a
    # notification says the queue changed, and cancel sends none, so the timer was told of a
    # sleeper that was already gone.
    queue, workflow = _names()
    scheduler = PostgresScheduler(pool=pool, queue=queue, poll=LONG_POLL)
    try:
        await scheduler.make_ready(workflow)
        delivery = await scheduler.next_ready(BLOCKED)
        assert delivery is not None
        assert await scheduler.wake_at(delivery, datetime.now(UTC) + timedelta(hours=1))
        await scheduler.done(delivery)
        assert await scheduler.next_ready(timedelta(milliseconds=50)) is None  # remembered
        assert await scheduler.wake_due() is not None
        assert await scheduler.cancel(workflow) == 1
        assert await scheduler.wake_due() is None
    finally:
        await scheduler.close()


async def test_its_own_make_ready_is_seen_before_the_notification_arrives(
    pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The notification of a commit reaches the listening connection a moment after the commit
    # returns; on a busy machine, later than a short next_ready waits. This object wrote the
    # wakeup itself, so it must not need to hear of it: the listener is kept deaf here.
    queue, workflow = _names()
    scheduler = PostgresScheduler(pool=pool, queue=queue, poll=LONG_POLL)
    try:
        assert await scheduler.next_ready(timedelta(milliseconds=50)) is None  # remembered
        listener = scheduler._listener
        assert listener is not None and listener.listening
        monkeypatch.setattr(listener, "_bump", lambda: None)
        await scheduler.make_ready(workflow)
        delivery = await scheduler.next_ready(timedelta(milliseconds=50))
        assert delivery is not None and delivery.workflow == workflow
    finally:
        await scheduler.close()
