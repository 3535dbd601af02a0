"""`PostgresDurable.take`: next_ready and claim as ONE statement that also brings the
checkpoint, waiting for work the way `next_ready` does (a notification ends the wait; an idle
reader sends nothing while nothing is announced), and locking the queue row before the claim
row like every other statement that touches both.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from durability.interfaces import Taken
from durability.postgres import PostgresCheckpointer, PostgresDurable, PostgresScheduler

if TYPE_CHECKING:
    from durability.postgres.statements import Pool

    from .conftest import Counting

MakePool = Callable[..., Awaitable["Pool"]]
LEASE = timedelta(seconds=2)
BUDGET = timedelta(seconds=10)
SHORT = timedelta(milliseconds=200)
LONG_POLL = timedelta(seconds=30)  # longer than any wait below: only a notification can help


def _unique(what: str) -> str:
    return f"pg-take-{what}-{uuid.uuid4().hex}"


def _durable(
    pool: Pool, queue: str | None = None, poll: timedelta | None = None
) -> PostgresDurable:
    scheduler = PostgresScheduler(pool=pool, lease=LEASE, queue=queue or _unique("q"), poll=poll)
    return PostgresDurable(PostgresCheckpointer(pool=pool), scheduler)




async def test_take_hands_out_the_delivery_and_a_claim_carrying_the_checkpoint(
    pool: Pool,
) -> None:
    durable = _durable(pool)
    workflow = _unique("found")
    try:
        await durable.arrive(workflow, "b", {"n": 2})
        await durable.checkpointer.supply(workflow, "a", [1])
        await durable.deliver(workflow, "mail")

        taken = await durable.take(SHORT, BUDGET, LEASE)
        assert taken is not None and taken.delivery.workflow == workflow
        holder = taken.holder
        assert holder is not None and holder.workflow == workflow and holder.alive == LEASE
        assert holder.records is not None
        loaded = await durable.checkpointer.load(workflow)
        assert list(holder.records.items()) == list(loaded.items())
        assert list(holder.records) == ["b", "a", "inbox:00000000000000000001"]
        # The claim is real and live: another claim fails, and the pass can write.
        assert await durable.checkpointer.claim(workflow, LEASE, LEASE) is None
        assert (await durable.checkpointer.record(holder, "step", 3)).first
        # The delivery is real: hidden from the queue, and finish answers for it.
        assert await durable.scheduler.next_ready(timedelta(milliseconds=50)) is None
        await durable.finish(holder, taken.delivery)
        again = await durable.checkpointer.claim(workflow, LEASE, LEASE)
        assert again is not None and again.token > holder.token
        assert again.records == {**loaded, "step": 3}
    finally:
        await durable.scheduler.close()


async def test_a_fresh_workflow_is_taken_with_an_empty_checkpoint(pool: Pool) -> None:
    durable = _durable(pool)
    workflow = _unique("fresh")
    try:
        await durable.scheduler.make_ready(workflow)
        taken = await durable.take(SHORT, BUDGET, LEASE)
        assert taken is not None and taken.holder is not None
        assert taken.holder.records == {}
        assert await durable.take(timedelta(milliseconds=50), BUDGET, LEASE) is None
    finally:
        await durable.scheduler.close()


async def test_take_of_a_workflow_a_live_pass_holds_hands_out_no_claim(pool: Pool) -> None:
    durable = _durable(pool)
    workflow = _unique("held")
    try:
        live = await durable.checkpointer.claim(workflow, BUDGET, LEASE)
        assert live is not None
        await durable.scheduler.make_ready(workflow)

        taken = await durable.take(SHORT, BUDGET, LEASE)
        assert taken is not None and taken.delivery.workflow == workflow
        assert taken.holder is None
        # The live pass still holds it: its writes go through, and its token did not move.
        assert (await durable.checkpointer.record(live, "k", 1)).first
        # Once released, the same delivery's workflow can be claimed (with a higher token).
        await durable.checkpointer.release(live)
        after = await durable.checkpointer.claim(workflow, LEASE, LEASE)
        assert after is not None and after.token > live.token
    finally:
        await durable.scheduler.close()


async def test_take_is_one_statement(make_pool: MakePool, counting: type[Counting]) -> None:
    counted = await make_pool(size=1, cursor_factory=counting)
    durable = _durable(counted)
    workflow = _unique("one")
    try:
        await durable.arrive(workflow, "order", 1)
        counting.sent.clear()
        taken = await durable.take(SHORT, BUDGET, LEASE)
        sent = list(counting.sent)
    finally:
        await durable.scheduler.close()
    assert taken is not None and taken.holder is not None
    assert taken.holder.records == {"order": 1}
    assert len(sent) == 1, sent
    assert all(table in sent[0] for table in ("queue", "claims", "records"))


async def test_an_idle_take_reads_once_until_something_is_announced(
    make_pool: MakePool, counting: type[Counting]
) -> None:
    counted = await make_pool(cursor_factory=counting)
    queue, workflow = _unique("q"), _unique("late")
    idle = _durable(counted, queue=queue, poll=LONG_POLL)
    other = PostgresScheduler(pool=await make_pool(size=1), queue=queue, notify=False)
    try:
        counting.sent.clear()
        for _ in range(3):
            assert await idle.take(timedelta(milliseconds=100), BUDGET, LEASE) is None
            assert await idle.scheduler.wake_due() is None
        assert len(counting.sent) == 1, counting.sent  # one read; the quiet after it is known
        # A blocked take is ended by the notification, not by the 30 s poll.
        reader = asyncio.create_task(idle.take(timedelta(seconds=5), BUDGET, LEASE))
        await asyncio.sleep(0.2)
        assert not reader.done()
        assert len(counting.sent) == 1, counting.sent
        await other.make_ready(workflow)
        taken = await reader
        assert taken is not None and taken.delivery.workflow == workflow
        assert taken.holder is not None
        assert len(counting.sent) == 2, counting.sent
    finally:
        await idle.scheduler.close()


async def test_take_and_finish_or_deliver_on_one_workflow_never_deadlock(pool: Pool) -> None:
    """take locks the queue row then the claim row; finish and deliver lock both too, in the
    same order, so racing them many times ends every statement without a deadlock error."""
    durable = _durable(pool)
    workflow = _unique("race")
    try:
        await durable.scheduler.make_ready(workflow)
        for _ in range(30):
            taken = await durable.take(SHORT, BUDGET, LEASE)
            assert taken is not None and taken.holder is not None
            # A wakeup lands mid-pass, so the row is visible to a take racing the finish.
            await durable.scheduler.make_ready(workflow)
            results = await asyncio.gather(
                durable.finish(taken.holder, taken.delivery),
                durable.deliver(workflow, "x"),
                durable.take(SHORT, BUDGET, LEASE),
                return_exceptions=True,
            )
            assert not [r for r in results if isinstance(r, BaseException)], results
            raced = results[2]
            if isinstance(raced, Taken) and raced.holder is not None:
                await durable.finish(raced.holder, raced.delivery)
            await durable.scheduler.make_ready(workflow)
    finally:
        await durable.scheduler.close()


async def test_a_take_lost_in_a_crash_never_hands_its_receipt_out_again(pool: Pool) -> None:
    """take commits without waiting for the WAL flush, so a crash may lose it: the row goes back
    to how it was before. The receipt the lost take handed out must not come out of a later
    take, or the stale holder's finish would answer for the new delivery."""
    durable = _durable(pool)
    workflow = _unique("lost")
    try:
        await durable.scheduler.make_ready(workflow)
        before = await _row(pool, durable.scheduler.queue, workflow)
        assert before is not None
        lost = await durable.take(SHORT, BUDGET, LEASE)
        assert lost is not None and lost.holder is not None
        # What the crash leaves: the queue row and the claim as they were before the take.
        async with pool.connection() as conn:
            await conn.execute(
                "UPDATE durability.queue SET visible_at = %s, receipt = %s"
                " WHERE queue = %s AND workflow = %s",
                (*before, durable.scheduler.queue, workflow),
            )
            await conn.execute(
                "UPDATE durability.claims SET until = '-infinity', token = token - 1"
                " WHERE workflow = %s",
                (workflow,),
            )
            # ...and the receipt sequence back where make_ready left it, as a crash can (its
            # steps are logged ahead, and the log of an unflushed commit is lost). This
            # database is this session's own and its tests run one at a time.
            await conn.execute("SELECT setval('durability.receipts', %s)", (before[1],))
        again = await durable.take(SHORT, BUDGET, LEASE)
        assert again is not None and again.holder is not None
        assert again.delivery.receipt != lost.delivery.receipt
        # The stale holder answers for nothing: the new delivery is still there.
        await durable.finish(lost.holder, lost.delivery)
        assert await _row(pool, durable.scheduler.queue, workflow) is not None
        # And the scheduler's own take mints receipts the same way.
        await durable.finish(again.holder, again.delivery)
        await durable.scheduler.make_ready(workflow)
        delivery = await durable.scheduler.next_ready(SHORT)
        assert delivery is not None and delivery.receipt not in {
            lost.delivery.receipt, again.delivery.receipt
        }
    finally:
        await durable.scheduler.close()


async def _row(pool: Pool, queue: str, workflow: str) -> tuple[object, int] | None:
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT visible_at, receipt FROM durability.queue WHERE queue = %s AND workflow = %s",
            (queue, workflow),
        )
        row = await cursor.fetchone()
        return None if row is None else (row[0], int(row[1]))


async def test_the_takes_of_one_turn_are_one_statement_and_each_gets_its_own_workflow(
    make_pool: MakePool, counting: type[Counting]
) -> None:
    counted = await make_pool(size=1, cursor_factory=counting)
    durable = _durable(counted)
    workflows = sorted(_unique("many") for _ in range(3))
    busy = _unique("busy")
    try:
        for n, workflow in enumerate([*workflows, busy]):
            await durable.arrive(workflow, "order", n)
        held = await durable.checkpointer.claim(busy, BUDGET, BUDGET)  # a live pass holds it
        assert held is not None
        assert await durable.take(SHORT, BUDGET, LEASE) is not None  # the first read: alone
        counting.sent.clear()
        # Five readers ask in one turn: the three left, the held one, and nothing.
        glance = timedelta(milliseconds=1)
        taken = await asyncio.gather(*(durable.take(glance, BUDGET, LEASE) for _ in range(5)))
        first = list(counting.sent)
    finally:
        await durable.scheduler.close()
    assert len(first) == 1, first  # one statement answered all five
    got = [t for t in taken if t is not None]
    assert len(got) == 3 and taken[3:] == [None, None]
    by_workflow = {t.delivery.workflow: t for t in got}
    assert len(by_workflow) == 3  # nobody was handed another's workflow
    assert by_workflow[busy].holder is None  # queued, but a live pass holds it
    for t in got:
        if t.delivery.workflow != busy:
            assert t.holder is not None and t.holder.workflow == t.delivery.workflow
            assert t.holder.records == {"order": workflows.index(t.delivery.workflow)}


async def test_the_takes_of_one_turn_say_which_rows_had_lapsed(
    make_pool: MakePool, counting: type[Counting]
) -> None:
    counted = await make_pool(size=1, cursor_factory=counting)
    scheduler = PostgresScheduler(
        pool=counted, lease=timedelta(milliseconds=300), queue=_unique("q")
    )
    durable = PostgresDurable(PostgresCheckpointer(pool=counted), scheduler)
    dead, fresh = _unique("dead"), _unique("fresh")
    try:
        await durable.arrive(dead, "order", 1)
        taken = await durable.take(SHORT, BUDGET, SHORT)  # its worker dies holding it
        assert taken is not None and not taken.delivery.lapsed
        await durable.arrive(fresh, "order", 2)
        await asyncio.sleep(0.4)  # past the dead worker's lease
        counting.sent.clear()
        glance = timedelta(milliseconds=1)
        turn = await asyncio.gather(*(durable.take(glance, BUDGET, LEASE) for _ in range(3)))
        sent = list(counting.sent)
    finally:
        await durable.scheduler.close()
    assert len(sent) == 1, sent  # the turn's takes were one statement (`take_many`)
    lapsed = {t.delivery.workflow: t.delivery.lapsed for t in turn if t is not None}
    assert lapsed == {dead: True, fresh: False}


async def test_take_up_to_takes_as_many_as_there_is_room_for_in_one_statement(
    make_pool: MakePool, counting: type[Counting]
) -> None:
    counted = await make_pool(size=1, cursor_factory=counting)
    durable = _durable(counted)
    workflows = sorted(_unique("up-to") for _ in range(5))
    busy = workflows[-1]
    asked: list[int] = []

    def room(n: int) -> Callable[[], int]:
        def ask() -> int:
            asked.append(n)
            return n
        return ask

    try:
        for n, workflow in enumerate(workflows):
            await durable.arrive(workflow, "order", n)
        held = await durable.checkpointer.claim(busy, BUDGET, BUDGET)  # a live pass holds it
        assert held is not None
        counting.sent.clear()
        first = await durable.take_up_to(room(3), SHORT, BUDGET, LEASE)
        one_statement = list(counting.sent)
        rest = await durable.take_up_to(room(10), SHORT, BUDGET, LEASE)
        empty = await durable.take_up_to(room(10), timedelta(milliseconds=50), BUDGET, LEASE)
    finally:
        await durable.scheduler.close()
    assert len(one_statement) == 1, one_statement
    assert asked[:2] == [3, 10]
    assert [t.delivery.workflow for t in first] == workflows[:3]  # as many as there was room
    assert [t.delivery.workflow for t in rest] == workflows[3:]  # the rest, not one more
    assert empty == []
    for taken in first + rest:
        if taken.delivery.workflow == busy:
            assert taken.holder is None  # queued, but a live pass holds it
            continue
        assert taken.holder is not None and taken.holder.workflow == taken.delivery.workflow
        assert taken.holder.records == {"order": workflows.index(taken.delivery.workflow)}
        assert await durable.checkpointer.claim(taken.delivery.workflow, LEASE, LEASE) is None


async def test_take_up_to_waits_for_an_arrival_and_asks_for_room_again_when_woken(
    pool: Pool,
) -> None:
    queue = _unique("q")
    reader = _durable(pool, queue=queue, poll=LONG_POLL)
    writer = _durable(pool, queue=queue, poll=LONG_POLL)
    workflow = _unique("late")
    asked = 0

    def room() -> int:
        nonlocal asked
        asked += 1
        return 4

    try:
        waiting = asyncio.create_task(
            reader.take_up_to(room, timedelta(seconds=20), BUDGET, LEASE)
        )
        await asyncio.sleep(0.3)  # its first read found nothing; it waits for a notification
        assert not waiting.done() and asked == 1
        await writer.arrive(workflow, "order", 1)
        taken = await asyncio.wait_for(waiting, 10)  # woken, not polled (the poll is 30 s)
    finally:
        await reader.scheduler.close()
        await writer.scheduler.close()
    assert [t.delivery.workflow for t in taken] == [workflow]
    assert asked == 2  # asked again for the read after the wait
    assert taken[0].holder is not None and taken[0].holder.records == {"order": 1}
