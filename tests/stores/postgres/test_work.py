"""`work` over `PostgresDurable`, and the two hooks the worker's pass uses on this store.

A pass costs the store `next_ready` (the take), `claim` (which brings the checkpoint with it,
so there is no `load`), `record` and `finish` (release and done in ONE statement). The full run
goes through a step, a sleep, an awaited value and an inbox receive against the real server
and the real clock, with short ticks so it ends quickly.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from psycopg import AsyncCursor

from durability.codec import as_int, as_text
from durability.postgres import PostgresCheckpointer, PostgresDurable, PostgresScheduler
from durability.stepwise import Blocked, Completed, Run, Sleeping
from durability.worker import Event, work

if TYPE_CHECKING:
    from durability.postgres.statements import Pool

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


class Observed:
    """Keeps the worker's events and lets the test wait for one."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._changed = asyncio.Event()

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        self._changed.set()

    def outcomes(self, workflow: str) -> list[object]:
        return [e.outcome for e in self.events if e.workflow == workflow and e.kind == "outcome"]

    def kinds(self) -> set[str]:
        return {event.kind for event in self.events}

    async def until(self, condition: Callable[[], bool], seconds: float = 10.0) -> None:
        async with asyncio.timeout(seconds):
            while not condition():
                self._changed.clear()
                await self._changed.wait()


async def test_a_workflow_steps_sleeps_awaits_and_receives_through_work(pool: Pool) -> None:
    durable = durable_over(pool)
    observed = Observed()
    workflow = _unique("full")
    performed: list[str] = []

    async def body(run: Run) -> dict[str, object]:
        def charge() -> int:
            performed.append("charge")
            return 42

        charged = await run.step("charge", charge, as_int)
        await run.sleep("cool-off", timedelta(milliseconds=150))
        approver = await run.awaiting("approved-by", as_text)
        mail = await run.receive("mail")
        return {"charged": charged, "approver": approver, "mail": [e.value for e in mail]}

    task = asyncio.create_task(
        work(durable, body, tick=TICK, within=timedelta(milliseconds=200), observer=observed)
    )
    try:
        await durable.arrive(workflow, "order", 7)
        await observed.until(
            lambda: Blocked(waiting=frozenset({"approved-by"})) in observed.outcomes(workflow)
        )
        await durable.arrive(workflow, "approved-by", "ada")
        await observed.until(
            lambda: Blocked(listening=frozenset({"mail"})) in observed.outcomes(workflow)
        )
        await durable.deliver(workflow, "hello")
        await observed.until(
            lambda: any(isinstance(o, Completed) for o in observed.outcomes(workflow))
        )
        # The outcome is announced before `finish`; stopping the worker before it would hand
        # the workflow back. Wait (reading only) until the last pass has answered for it.
        async with asyncio.timeout(5):
            while await _queued(pool, durable.scheduler.queue, workflow):  # noqa: ASYNC110
                await asyncio.sleep(0.02)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await durable.scheduler.close()

    outcomes = observed.outcomes(workflow)
    assert isinstance(outcomes[0], Sleeping)
    assert outcomes[1:] == [
        Blocked(waiting=frozenset({"approved-by"})),
        Blocked(listening=frozenset({"mail"})),
        Completed({"charged": 42, "approver": "ada", "mail": ["hello"]}),
    ]
    assert performed == ["charge"]  # replayed from the checkpoint on every later pass
    assert not observed.kinds() & {"failed", "fenced", "expired", "contended"}
    keys = [written.key for written in await durable.checkpointer.history(workflow)]
    assert keys[:3] == ["order", "charge", "cool-off"]
    assert keys[3:5] == ["approved-by", "inbox:00000000000000000001"] and keys[-1] == "mail"
    # Every pass finished: no wakeup left, and the claim was released.
    assert await durable.scheduler.next_ready(timedelta(milliseconds=50)) is None
    assert await durable.checkpointer.claim(workflow, LEASE, LEASE) is not None


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


class _Counting(AsyncCursor[Any]):
    """Keeps the text of every statement executed through it."""

    sent: ClassVar[list[str]] = []

    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        type(self).sent.append(str(query))
        return await super().execute(query, params, **kwargs)


async def test_finish_releases_and_answers_in_one_statement(make_pool: MakePool) -> None:
    counted = await make_pool(size=1, cursor_factory=_Counting)
    durable = durable_over(counted)
    workflow = _unique("one")
    await durable.scheduler.make_ready(workflow)
    delivery = await durable.scheduler.next_ready(timedelta(milliseconds=200))
    assert delivery is not None and delivery.workflow == workflow
    holder = await durable.checkpointer.claim(workflow, LEASE, LEASE)
    assert holder is not None

    _Counting.sent.clear()
    await durable.finish(holder, delivery)
    sent = list(_Counting.sent)
    await durable.scheduler.close()

    assert len(sent) == 1
    assert "durability.claims" in sent[0] and "durability.queue" in sent[0]
    # Both halves happened: the claim is free and the delivery is gone.
    assert await durable.checkpointer.claim(workflow, LEASE, LEASE) is not None
    assert await durable.scheduler.next_ready(timedelta(milliseconds=50)) is None


async def test_finish_keeps_a_wakeup_that_landed_mid_pass(pool: Pool) -> None:
    durable = durable_over(pool)
    workflow = _unique("mid")
    await durable.scheduler.make_ready(workflow)
    delivery = await durable.scheduler.next_ready(timedelta(milliseconds=200))
    assert delivery is not None
    holder = await durable.checkpointer.claim(workflow, LEASE, LEASE)
    assert holder is not None
    await durable.arrive(workflow, "input", 1)  # lands while the pass runs

    await durable.finish(holder, delivery)

    again = await durable.scheduler.next_ready(timedelta(milliseconds=200))
    await durable.scheduler.close()
    assert again is not None and again.workflow == workflow
    assert await durable.checkpointer.claim(workflow, LEASE, LEASE) is not None


async def test_finish_with_a_stale_token_leaves_the_newer_claim(pool: Pool) -> None:
    durable = durable_over(pool)
    workflow = _unique("stale")
    await durable.scheduler.make_ready(workflow)
    delivery = await durable.scheduler.next_ready(timedelta(milliseconds=200))
    assert delivery is not None
    old = await durable.checkpointer.claim(workflow, LEASE, LEASE)
    assert old is not None
    await durable.checkpointer.release(old)
    newer = await durable.checkpointer.claim(workflow, LEASE, LEASE)
    assert newer is not None and newer.token > old.token

    await durable.finish(old, delivery)

    await durable.scheduler.close()
    assert await durable.checkpointer.claim(workflow, LEASE, LEASE) is None  # still held
