"""The claim's two deadlines, `SplitDurable`'s moves across both stores, and the refusal of
every duration that is not positive, over the memory stores with a hand-moved clock."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from durability.codec import as_int
from durability.interfaces import (
    Delivery,
    Effect,
    Entry,
    Fenced,
    Pass,
    Reclaimed,
    Recorded,
    Written,
    claimed,
)
from durability.memory import MemoryCheckpointer, MemoryScheduler
from durability.split import SplitDurable
from durability.stepwise import Completed, Run, resume

T0 = datetime(2030, 1, 1, tzinfo=UTC)
_ids = itertools.count()


def workflow_id() -> str:
    return f"durable-test-{next(_ids)}"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, by: timedelta) -> None:
        self.now += by


@pytest.fixture
def clock() -> Clock:
    return Clock()


class LoggedCheckpointer:
    """Delegates to a memory checkpointer, writing each call's name into a shared log."""

    def __init__(self, inner: MemoryCheckpointer, log: list[str]) -> None:
        self.inner = inner
        self.log = log

    async def claim(self, workflow: str, budget: timedelta, alive: timedelta) -> Pass | None:
        self.log.append("claim")
        return await self.inner.claim(workflow, budget, alive)

    async def load(self, workflow: str) -> dict[str, object]:
        self.log.append("load")
        return await self.inner.load(workflow)

    async def history(self, workflow: str) -> list[Written]:
        self.log.append("history")
        return await self.inner.history(workflow)

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        self.log.append("record")
        return await self.inner.record(holder, key, value)

    async def transact(self, holder: Pass, key: str, effect: Effect) -> Recorded:
        self.log.append("transact")
        return await self.inner.transact(holder, key, effect)

    async def supply(self, workflow: str, key: str, value: object) -> Recorded:
        self.log.append("supply")
        return await self.inner.supply(workflow, key, value)

    async def append(self, workflow: str, value: object) -> Entry:
        self.log.append("append")
        return await self.inner.append(workflow, value)

    async def extend(self, holder: Pass, budget: timedelta, alive: timedelta) -> Pass:
        self.log.append("extend")
        return await self.inner.extend(holder, budget, alive)

    async def renew(self, holder: Pass, alive: timedelta) -> None:
        self.log.append("renew")
        await self.inner.renew(holder, alive)

    async def discard(self, workflow: str) -> int:
        self.log.append("discard")
        return await self.inner.discard(workflow)

    async def release(self, holder: Pass) -> None:
        self.log.append("release")
        await self.inner.release(holder)


class LoggedScheduler:
    """Delegates to a memory scheduler, logging each call; `cancel` can be made to fail."""

    def __init__(self, inner: MemoryScheduler, log: list[str]) -> None:
        self.inner = inner
        self.log = log
        self.lease = inner.lease
        self.cancel_fails = False

    async def prepare(self) -> None:
        await self.inner.prepare()

    async def make_ready(self, workflow: str) -> None:
        self.log.append("make_ready")
        await self.inner.make_ready(workflow)

    async def next_ready(self, within: timedelta) -> Delivery | None:
        self.log.append("next_ready")
        return await self.inner.next_ready(within)

    async def done(self, delivery: Delivery) -> None:
        self.log.append("done")
        await self.inner.done(delivery)

    async def wake_at(self, delivery: Delivery, when: datetime) -> bool:
        self.log.append("wake_at")
        return await self.inner.wake_at(delivery, when)

    async def wake_due(self, now: datetime | None = None) -> datetime | None:
        self.log.append("wake_due")
        return await self.inner.wake_due(now)

    async def reclaiming(self, idle: timedelta) -> Reclaimed:
        self.log.append("reclaim")
        return await self.inner.reclaiming(idle)

    async def extend(self, delivery: Delivery, within: timedelta) -> Delivery | None:
        self.log.append("extend")
        return await self.inner.extend(delivery, within)

    async def cancel(self, workflow: str) -> int:
        self.log.append("cancel")
        if self.cancel_fails:
            raise ConnectionError("the queue went away")
        return await self.inner.cancel(workflow)


QUICK = timedelta(milliseconds=1)


# --- 3. renew is bounded by the budget, extend is not -------------------------------------


async def test_renew_cannot_carry_a_claim_past_its_budget(clock: Clock) -> None:
    store = MemoryCheckpointer(clock=clock)
    workflow = workflow_id()
    holder = await claimed(store, workflow, timedelta(minutes=1), timedelta(seconds=20))

    for _ in range(5):  # renewed every 10 s, each time asking for 20 s more
        clock.advance(timedelta(seconds=10))
        await store.renew(holder, timedelta(seconds=20))
    assert clock.now == T0 + timedelta(seconds=50)
    await store.record(holder, "before-budget", 1)

    clock.advance(timedelta(seconds=10))  # exactly the budget: renewal could not lift it
    with pytest.raises(Fenced):
        await store.renew(holder, timedelta(seconds=20))
    with pytest.raises(Fenced):
        await store.record(holder, "after-budget", 2)
    assert await store.load(workflow) == {"before-budget": 1}


async def test_a_write_renews_liveness_but_not_past_the_budget(clock: Clock) -> None:
    store = MemoryCheckpointer(clock=clock)
    workflow = workflow_id()
    holder = await claimed(store, workflow, timedelta(seconds=25), timedelta(seconds=10))

    clock.advance(timedelta(seconds=9))
    await store.record(holder, "a", 1)  # alive until 19 s
    clock.advance(timedelta(seconds=9))
    await store.record(holder, "b", 2)  # alive until 25 s: the budget, not 28 s
    clock.advance(timedelta(seconds=7))
    with pytest.raises(Fenced):
        await store.record(holder, "c", 3)
    assert await store.load(workflow) == {"a": 1, "b": 2}


async def test_extend_carries_a_claim_past_its_budget(clock: Clock) -> None:
    store = MemoryCheckpointer(clock=clock)
    workflow = workflow_id()
    holder = await claimed(store, workflow, timedelta(minutes=1), timedelta(seconds=20))

    for _ in range(5):
        clock.advance(timedelta(seconds=10))
        await store.renew(holder, timedelta(seconds=20))
    stretched = await store.extend(holder, timedelta(minutes=2), timedelta(seconds=20))
    assert stretched.budget_ends == T0 + timedelta(seconds=170)
    assert stretched.token == holder.token

    for _ in range(10):  # well past the original minute
        clock.advance(timedelta(seconds=10))
        await store.renew(stretched, timedelta(seconds=20))
    await store.record(stretched, "late", "fine")
    assert clock.now == T0 + timedelta(seconds=150)

    clock.advance(timedelta(seconds=20))  # now the stretched budget is spent
    with pytest.raises(Fenced):
        await store.renew(stretched, timedelta(seconds=20))


async def test_extend_never_shortens_the_budget(clock: Clock) -> None:
    store = MemoryCheckpointer(clock=clock)
    holder = await claimed(store, workflow_id(), timedelta(minutes=10), timedelta(minutes=10))
    kept = await store.extend(holder, timedelta(seconds=1), timedelta(seconds=1))
    assert kept.budget_ends == T0 + timedelta(minutes=10)
    clock.advance(timedelta(minutes=9))
    await store.record(kept, "still", True)


async def test_neither_revives_a_lapsed_claim(clock: Clock) -> None:
    store = MemoryCheckpointer(clock=clock)
    holder = await claimed(store, workflow_id(), timedelta(minutes=1), timedelta(seconds=20))
    clock.advance(timedelta(seconds=20))
    with pytest.raises(Fenced):
        await store.renew(holder, timedelta(seconds=20))
    with pytest.raises(Fenced):
        await store.extend(holder, timedelta(minutes=5), timedelta(seconds=20))


# --- 10. deleting a workflow ---------------------------------------------------------------


async def test_delete_cancels_wakeups_before_discarding_records(clock: Clock) -> None:
    log: list[str] = []
    checkpointer = LoggedCheckpointer(MemoryCheckpointer(clock=clock), log)
    scheduler = LoggedScheduler(MemoryScheduler(clock=clock), log)
    durable = SplitDurable(checkpointer, scheduler)
    workflow = workflow_id()
    await durable.arrive(workflow, "order", {"sku": "apple"})
    await durable.deliver(workflow, "hello")
    log.clear()

    assert await durable.delete(workflow) == 2

    assert log == ["cancel", "discard"]
    assert await checkpointer.load(workflow) == {}
    assert await scheduler.next_ready(QUICK) is None


async def test_a_delete_that_fails_to_cancel_leaves_the_records(clock: Clock) -> None:
    log: list[str] = []
    checkpointer = LoggedCheckpointer(MemoryCheckpointer(clock=clock), log)
    scheduler = LoggedScheduler(MemoryScheduler(clock=clock), log)
    durable = SplitDurable(checkpointer, scheduler)
    workflow = workflow_id()
    await durable.arrive(workflow, "order", 1)
    scheduler.cancel_fails = True

    with pytest.raises(ConnectionError):
        await durable.delete(workflow)
    # The survivable half of the crash window: records with a wakeup, not a wakeup for nothing.
    assert await checkpointer.load(workflow) == {"order": 1}
    assert "discard" not in log


async def test_arrive_and_deliver_write_before_they_wake(clock: Clock) -> None:
    log: list[str] = []
    checkpointer = LoggedCheckpointer(MemoryCheckpointer(clock=clock), log)
    durable = SplitDurable(checkpointer, LoggedScheduler(MemoryScheduler(clock=clock), log))
    workflow = workflow_id()
    await durable.arrive(workflow, "order", 1)
    entry = await durable.deliver(workflow, "note")
    assert log == ["supply", "make_ready", "append", "make_ready"]
    assert await checkpointer.load(workflow) == {"order": 1, entry.key: "note"}


async def test_delete_removes_queued_sleeping_and_held_wakeups(clock: Clock) -> None:
    scheduler = MemoryScheduler(clock=clock)
    durable = SplitDurable(MemoryCheckpointer(clock=clock), scheduler)
    sleeper, held, queued = workflow_id(), workflow_id(), workflow_id()
    for workflow in (sleeper, held):
        await durable.arrive(workflow, "go", True)
    first = await scheduler.next_ready(QUICK)
    second = await scheduler.next_ready(QUICK)
    assert first is not None and second is not None
    assert await scheduler.wake_at(first, T0 + timedelta(hours=1))
    await scheduler.done(first)
    await durable.arrive(queued, "go", True)

    for workflow in (sleeper, held, queued):
        await durable.delete(workflow)

    assert await scheduler.wake_due(T0 + timedelta(days=1)) is None
    assert await scheduler.next_ready(QUICK) is None
    clock.advance(timedelta(days=1))
    assert (await scheduler.reclaiming(timedelta(seconds=1))).delivery is None


async def test_wake_at_on_a_cancelled_delivery_schedules_nothing(clock: Clock) -> None:
    scheduler = MemoryScheduler(clock=clock)
    durable = SplitDurable(MemoryCheckpointer(clock=clock), scheduler)
    workflow = workflow_id()
    await durable.arrive(workflow, "go", True)
    delivery = await scheduler.next_ready(QUICK)
    assert delivery is not None

    await durable.delete(workflow)  # while the pass that took the delivery is still running

    assert await scheduler.wake_at(delivery, T0 + timedelta(minutes=1)) is False
    await scheduler.done(delivery)
    assert await scheduler.wake_due(T0 + timedelta(days=1)) is None
    assert await scheduler.next_ready(QUICK) is None


async def test_a_pass_running_during_a_delete_is_fenced_at_its_next_write(clock: Clock) -> None:
    store = MemoryCheckpointer(clock=clock)
    durable = SplitDurable(store, MemoryScheduler(clock=clock))
    workflow = workflow_id()
    await durable.arrive(workflow, "order", 1)
    holder = await claimed(store, workflow)
    shipped: list[int] = []

    def ship() -> int:
        shipped.append(1)
        return 1

    async def body(run: Run) -> int:
        await run.step("charged", lambda: 10, as_int)
        await durable.delete(workflow)  # someone deletes it from outside, mid-pass
        return await run.step("shipped", ship, as_int)

    with pytest.raises(Fenced):
        await resume(holder, store, body, clock=clock)
    assert await store.load(workflow) == {}

    # The next claim outranks the stalled pass and starts from nothing.
    fresh = await claimed(store, workflow)
    assert fresh.token > holder.token
    with pytest.raises(Fenced):
        await store.record(holder, "shipped", 1)
    assert await resume(fresh, store, lambda run: run.step("x", lambda: 5, as_int)) == (
        Completed(5)
    )


# --- 12. durations that are not positive ---------------------------------------------------

BAD = [timedelta(0), timedelta(seconds=-1)]
OK = timedelta(seconds=1)


@pytest.mark.parametrize("bad", BAD)
def test_the_scheduler_refuses_a_lease_that_is_not_positive(bad: timedelta) -> None:
    with pytest.raises(ValueError, match="lease"):
        MemoryScheduler(lease=bad)


@pytest.mark.parametrize("bad", BAD)
async def test_claim_refuses_durations_that_are_not_positive(bad: timedelta) -> None:
    store = MemoryCheckpointer()
    workflow = workflow_id()
    with pytest.raises(ValueError, match="budget"):
        await store.claim(workflow, bad, OK)
    with pytest.raises(ValueError, match="alive"):
        await store.claim(workflow, OK, bad)
    assert await store.claim(workflow, OK, OK) is not None  # nothing was taken by the refusals


@pytest.mark.parametrize("bad", BAD)
async def test_extend_and_renew_refuse_durations_that_are_not_positive(bad: timedelta) -> None:
    store = MemoryCheckpointer()
    holder = await claimed(store, workflow_id())
    with pytest.raises(ValueError, match="budget"):
        await store.extend(holder, bad, OK)
    with pytest.raises(ValueError, match="alive"):
        await store.extend(holder, OK, bad)
    with pytest.raises(ValueError, match="alive"):
        await store.renew(holder, bad)


@pytest.mark.parametrize("bad", BAD)
async def test_scheduler_calls_refuse_durations_that_are_not_positive(bad: timedelta) -> None:
    scheduler = MemoryScheduler()
    workflow = workflow_id()
    await scheduler.make_ready(workflow)
    with pytest.raises(ValueError, match="within"):
        await scheduler.next_ready(bad)
    with pytest.raises(ValueError, match="idle"):
        await scheduler.reclaiming(bad)
    delivery = await scheduler.next_ready(OK)
    assert delivery is not None and delivery.workflow == workflow  # the refusal took nothing
    with pytest.raises(ValueError, match="within"):
        await scheduler.extend(delivery, bad)


def test_timings_must_be_timedeltas() -> None:
    with pytest.raises(TypeError, match="lease"):
        MemoryScheduler(lease=30)  # type: ignore[arg-type]
