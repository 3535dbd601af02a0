"""`work` over `SqliteDurable`, and the two hooks the worker's pass uses on this store.

A pass costs the store `next_ready`, `claim` (which brings the checkpoint with it, so there is
no `load`), `record` and `finish` (release and done in one transaction). The full run goes
through a step, a sleep, an awaited value and an inbox receive on a real file and the real
clock, with short ticks so it ends quickly.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import timedelta

import pytest

pytest.importorskip("aiosqlite", reason="aiosqlite is not installed")

from durability.codec import as_int, as_text
from durability.interfaces import Delivery
from durability.sqlite import SqliteCheckpointer, SqliteDatabase, SqliteDurable, SqliteScheduler
from durability.stepwise import Blocked, Completed, Run, Sleeping
from durability.worker import Event, work

TICK = timedelta(milliseconds=50)
LEASE = timedelta(seconds=2)


def durable_over(database: SqliteDatabase) -> SqliteDurable:
    return SqliteDurable(
        SqliteCheckpointer(database),
        SqliteScheduler(database, lease=LEASE, poll=timedelta(milliseconds=20)),
    )


async def queued(database: SqliteDatabase) -> int:
    """How many wakeups the file holds, in any queue."""
    rows = await database.read(
        lambda connection: connection.execute("SELECT count(*) FROM durability_queue").fetchall()
    )
    return int(rows[0][0])


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

    async def until(self, condition: Callable[[], bool], seconds: float = 5.0) -> None:
        async with asyncio.timeout(seconds):
            while not condition():
                self._changed.clear()
                await self._changed.wait()


async def test_a_workflow_steps_sleeps_awaits_and_receives_through_work(
    database: SqliteDatabase,
) -> None:
    durable = durable_over(database)
    observed = Observed()
    workflow = "work-full-run"
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
        # The step, then the sleep; the timer wakes it; then it blocks on the approval.
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
        # The last pass finishes just after its outcome: then no wakeup is left.
        for _ in range(250):
            left = await queued(database)
            if not left:
                break
            await asyncio.sleep(0.02)
        assert left == 0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

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
    # Every pass finished and released its claim.
    assert await durable.checkpointer.claim(workflow, LEASE, LEASE) is not None


async def test_a_claim_brings_the_checkpoint_it_found(database: SqliteDatabase) -> None:
    durable = durable_over(database)
    checkpointer = durable.checkpointer
    await durable.arrive("found", "b", {"n": 2})
    await checkpointer.supply("found", "a", [1])
    await durable.deliver("found", "mail")

    holder = await checkpointer.claim("found", LEASE, LEASE)
    assert holder is not None
    assert holder.records is not None
    # The same mapping `load` gives, in first-recorded order.
    assert list(holder.records.items()) == list((await checkpointer.load("found")).items())
    assert list(holder.records) == ["b", "a", "inbox:00000000000000000001"]
    assert holder.records["b"] == {"n": 2}
    # A claim that finds the workflow held returns nothing, and a fresh workflow finds nothing.
    assert await checkpointer.claim("found", LEASE, LEASE) is None
    fresh = await checkpointer.claim("fresh", LEASE, LEASE)
    assert fresh is not None and fresh.records == {}


async def test_finish_releases_and_answers_in_one_transaction(database: SqliteDatabase) -> None:
    durable = durable_over(database)
    await durable.scheduler.make_ready("one-txn")
    delivery = await durable.scheduler.next_ready(timedelta(milliseconds=100))
    assert delivery is not None
    holder = await durable.checkpointer.claim("one-txn", LEASE, LEASE)
    assert holder is not None

    traced: list[str] = []
    await database.trace(traced.append)
    try:
        await durable.finish(holder, delivery)
    finally:
        await database.trace(None)

    words = [" ".join(sql.split()).split(" ", 1)[0].upper() for sql in traced]
    assert words == ["BEGIN", "UPDATE", "DELETE", "COMMIT"]
    assert "durability_workflows" in traced[1] and "durability_queue" in traced[2]
    assert await durable.checkpointer.claim("one-txn", LEASE, LEASE) is not None
    assert await durable.scheduler.next_ready(timedelta(milliseconds=50)) is None


async def test_a_finish_that_fails_halfway_keeps_the_claim(database: SqliteDatabase) -> None:
    durable = durable_over(database)
    holder = await durable.checkpointer.claim("halfway", LEASE, LEASE)
    assert holder is not None
    # The release runs first; the foreign receipt then fails `done`, rolling the release back.
    with pytest.raises(ValueError, match="receipt"):
        await durable.finish(holder, Delivery("halfway", "not-a-receipt"))
    assert await durable.checkpointer.claim("halfway", LEASE, LEASE) is None


async def test_finish_keeps_a_wakeup_that_landed_mid_pass(database: SqliteDatabase) -> None:
    durable = durable_over(database)
    await durable.scheduler.make_ready("mid-pass")
    delivery = await durable.scheduler.next_ready(timedelta(milliseconds=100))
    assert delivery is not None
    holder = await durable.checkpointer.claim("mid-pass", LEASE, LEASE)
    assert holder is not None
    await durable.arrive("mid-pass", "input", 1)  # lands while the pass runs

    await durable.finish(holder, delivery)

    again = await durable.scheduler.next_ready(timedelta(milliseconds=100))
    assert again is not None and again.workflow == "mid-pass"
    assert await durable.checkpointer.claim("mid-pass", LEASE, LEASE) is not None
