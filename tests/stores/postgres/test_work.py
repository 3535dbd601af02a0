"""The hooks the worker's pass uses on `PostgresDurable`: a claim that brings the checkpoint
(so a pass needs no `load`) and `finish` (release and done in ONE statement).

`work()` end to end over this store is part of the Durable contract
(`test_postgres_conformance.py`), as on every store.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from durability.interfaces import Delivery, Pass
from durability.postgres import PostgresCheckpointer, PostgresDurable, PostgresScheduler
from durability.testing.conformance import taken_over_as_its_claim_lapses

if TYPE_CHECKING:
    from durability.postgres.statements import Pool

    from .conftest import Counting

MakePool = Callable[..., Awaitable["Pool"]]
TICK = timedelta(milliseconds=50)
LEASE = timedelta(seconds=2)


def _unique(what: str) -> str:
    return f"pg-work-{what}-{uuid.uuid4().hex}"


def durable_over(pool: Pool, queue: str | None = None) -> PostgresDurable:
    scheduler = PostgresScheduler(pool=pool, lease=LEASE, queue=queue or _unique("q"))
    return PostgresDurable(PostgresCheckpointer(pool=pool), scheduler)


async def _queued(pool: Pool, queue: str, workflow: str) -> int:
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM durability.queue WHERE queue = %s AND workflow = %s",
            (queue, workflow),
        )
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])


async def test_a_claim_brings_the_checkpoint_it_found(pool: Pool) -> None:
    durable = durable_over(pool)
    checkpointer = durable.checkpointer
    workflow, fresh = _unique("found"), _unique("fresh")
    await durable.arrive(workflow, "b", {"n": 2})
    await checkpointer.supply(workflow, "a", [1])
    await durable.deliver(workflow, "mail")

    holder = await checkpointer.claim(workflow, LEASE, LEASE)
    assert holder is not None
    assert holder.records is not None
    # The same mapping `load` gives, in first-recorded order.
    assert list(holder.records.items()) == list((await checkpointer.load(workflow)).items())
    assert list(holder.records) == ["b", "a", "inbox:00000000000000000001"]
    assert holder.records["b"] == {"n": 2}
    # A claim that finds the workflow held returns nothing; a fresh workflow finds nothing.
    assert await checkpointer.claim(workflow, LEASE, LEASE) is None
    first = await checkpointer.claim(fresh, LEASE, LEASE)
    assert first is not None and first.records == {}
    # After a pass: a released claim is taken again, and finds what the pass wrote.
    await checkpointer.record(first, "done", True)
    await checkpointer.release(first)
    again = await checkpointer.claim(fresh, LEASE, LEASE)
    assert again is not None and again.records == {"done": True}


async def test_a_write_committed_under_the_claim_s_snapshot_is_never_missed(
    pool: Pool, make_pool: MakePool
) -> None:
    """The claim reads records from its snapshot but takes the claim row's newest version: a
    write that commits while the claim waits for that row must not vanish from Pass.records."""
    checkpointer = PostgresCheckpointer(pool=pool)
    workflow = _unique("late")
    old = await checkpointer.claim(workflow, LEASE, LEASE)
    assert old is not None
    await checkpointer.release(old)  # not live: the next claim will succeed
    writer = await make_pool(size=1)
    async with writer.connection() as conn, conn.transaction():
        # What a record does: lock the claim row, then add a record; commit comes later.
        await conn.execute(
            "UPDATE durability.claims SET until = until WHERE workflow = %s", (workflow,)
        )
        await conn.execute(
            "INSERT INTO durability.records (workflow, key, value) VALUES (%s, 'late', '1')",
            (workflow,),
        )
        claiming = asyncio.create_task(checkpointer.claim(workflow, LEASE, LEASE))
        await asyncio.sleep(0.3)  # the claim is now waiting for the row lock
        assert not claiming.done()
    holder = await claiming
    assert holder is not None
    # Either the claim says it does not know (and the pass loads), or it knows the write.
    assert holder.records is None or holder.records == {"late": 1}
    assert await checkpointer.load(workflow) == {"late": 1}




async def _delivered_and_claimed(durable: PostgresDurable, workflow: str) -> tuple[Delivery, Pass]:
    """Make `workflow` ready, take its delivery and claim it, as a pass begins."""
    await durable.scheduler.make_ready(workflow)
    delivery = await durable.scheduler.next_ready(timedelta(milliseconds=200))
    assert delivery is not None and delivery.workflow == workflow
    holder = await durable.checkpointer.claim(workflow, LEASE, LEASE)
    assert holder is not None
    return delivery, holder


async def test_finish_releases_and_answers_in_one_statement(
    make_pool: MakePool, counting: type[Counting]
) -> None:
    counted = await make_pool(size=1, cursor_factory=counting)
    durable = durable_over(counted)
    workflow = _unique("one")
    delivery, holder = await _delivered_and_claimed(durable, workflow)

    counting.sent.clear()
    await durable.finish(holder, delivery)
    sent = list(counting.sent)
    await durable.scheduler.close()

    assert len(sent) == 1
    assert "durability.claims" in sent[0] and "durability.queue" in sent[0]
    # Both halves happened: the claim is free and the delivery is gone.
    assert await durable.checkpointer.claim(workflow, LEASE, LEASE) is not None
    assert await durable.scheduler.next_ready(timedelta(milliseconds=50)) is None


async def test_finish_keeps_a_wakeup_that_landed_mid_pass(pool: Pool) -> None:
    durable = durable_over(pool)
    workflow = _unique("mid")
    delivery, holder = await _delivered_and_claimed(durable, workflow)
    await durable.arrive(workflow, "input", 1)  # lands while the pass runs

    await durable.finish(holder, delivery)

    again = await durable.scheduler.next_ready(timedelta(milliseconds=200))
    await durable.scheduler.close()
    assert again is not None and again.workflow == workflow
    assert await durable.checkpointer.claim(workflow, LEASE, LEASE) is not None


async def test_finish_with_a_stale_token_leaves_the_newer_claim(pool: Pool) -> None:
    durable = durable_over(pool)
    workflow = _unique("stale")
    delivery, old = await _delivered_and_claimed(durable, workflow)
    await durable.checkpointer.release(old)
    newer = await durable.checkpointer.claim(workflow, LEASE, LEASE)
    assert newer is not None and newer.token > old.token

    await durable.finish(old, delivery)

    await durable.scheduler.close()
    assert await durable.checkpointer.claim(workflow, LEASE, LEASE) is None  # still held


async def test_a_row_taken_again_after_its_lease_asks_for_the_claim_as_it_lapses(
    pool: Pool,
) -> None:
    lease = timedelta(milliseconds=600)
    scheduler = PostgresScheduler(pool=pool, lease=lease, queue=_unique("takeover"))
    durable = PostgresDurable(PostgresCheckpointer(pool=pool), scheduler)
    await taken_over_as_its_claim_lapses(durable)
