"""`work` over the memory stores, on the real clock with short ticks and leases.

The real clock is the point here: leases lapse, budgets run out and timers fire. Every worker a
test starts is cancelled before the test ends. A worker's death is simulated by wrapping the
stores it talks through so that, once it is dead, every call it makes hangs (and what it had
sent before is all the stores ever heard from it).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, NoReturn, TypeVar

import pytest

from durability.codec import as_int, as_text
from durability.endings import ENDING, completion
from durability.failures import ONCE, Retry
from durability.interfaces import (
    Checkpointer,
    Delivery,
    Durable,
    Effect,
    Entry,
    Pass,
    Reclaimed,
    Recorded,
    Scheduler,
    Settling,
    Taken,
    TakingMany,
    Written,
    claimed,
)
from durability.memory import MemoryCheckpointer, MemoryScheduler
from durability.split import SplitDurable
from durability.stepwise import Blocked, Completed, Run, Sleeping
from durability.testing import Observed
from durability.worker import GRACE, work

R = TypeVar("R")
LEASE = timedelta(milliseconds=500)
TICK = timedelta(milliseconds=50)
WITHIN = timedelta(milliseconds=200)
_ids = itertools.count()


def workflow_id() -> str:
    return f"worker-test-{next(_ids)}-{time.monotonic_ns()}"


@contextlib.asynccontextmanager
async def working(
    durable: Durable,
    body: Callable[[Run], Awaitable[object]],
    observer: Observed,
    **settings: Any,
) -> AsyncIterator[asyncio.Task[None]]:
    """A running `work` task, always cancelled on the way out."""
    options: dict[str, Any] = {"tick": TICK, "within": WITHIN, "contended": TICK} | settings
    task = asyncio.create_task(work(durable, body, observer=observer, **options))
    try:
        yield task
    finally:
        await stop(task)


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task



def stores(lease: timedelta = LEASE) -> tuple[MemoryCheckpointer, MemoryScheduler]:
    return MemoryCheckpointer(), MemoryScheduler(lease=lease)


async def forever() -> NoReturn:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


# --- wrappers -----------------------------------------------------------------------------


class CountingScheduler:
    """Delegates to a scheduler and counts calls (and deliveries handed out) by method."""

    def __init__(self, inner: Scheduler) -> None:
        self.inner = inner
        self.lease = inner.lease
        self.calls: Counter[str] = Counter()
        self.delivered = 0
        self.reclaimed = 0

    async def prepare(self) -> None:
        self.calls["prepare"] += 1
        await self.inner.prepare()

    async def make_ready(self, workflow: str) -> None:
        self.calls["make_ready"] += 1
        await self.inner.make_ready(workflow)

    async def next_ready(self, within: timedelta) -> Delivery | None:
        self.calls["next_ready"] += 1
        delivery = await self.inner.next_ready(within)
        self.delivered += delivery is not None
        return delivery

    async def done(self, delivery: Delivery) -> None:
        self.calls["done"] += 1
        await self.inner.done(delivery)

    async def wake_at(self, delivery: Delivery, when: datetime) -> bool:
        self.calls["wake_at"] += 1
        return await self.inner.wake_at(delivery, when)

    async def wake_due(self, now: datetime | None = None) -> datetime | None:
        self.calls["wake_due"] += 1
        return await self.inner.wake_due(now)

    async def reclaiming(self, idle: timedelta) -> Reclaimed:
        self.calls["reclaim"] += 1
        look = await self.inner.reclaiming(idle)
        self.delivered += look.delivery is not None
        self.reclaimed += look.delivery is not None
        return look

    async def extend(self, delivery: Delivery, within: timedelta) -> Delivery | None:
        self.calls["extend"] += 1
        return await self.inner.extend(delivery, within)

    async def cancel(self, workflow: str) -> int:
        self.calls["cancel"] += 1
        return await self.inner.cancel(workflow)


Plan = Literal["when told", "after a write", "after a write and its renewal"]


class Mortal:
    """The fate one simulated worker process shares across both of its stores.

    Once `dead`, every call hangs: nothing more reaches a store and no reply comes back, which is
    what a killed process looks like from the stores. `last_sign` is the wall-clock time of the
    last call that reached a store as a sign of life (a claim, write, renewal or extension).
    `bury` ends the hung calls with an error so the test can shut the corpse down.
    """

    def __init__(self, plan: Plan = "when told") -> None:
        self.plan = plan
        self.dead = False
        self.wrote = False
        self.last_sign = 0.0
        self._buried = asyncio.Event()

    def bury(self) -> None:
        self._buried.set()

    async def hang(self) -> NoReturn:
        await self._buried.wait()
        raise ConnectionError("this worker is dead")

    async def call(
        self,
        call: Coroutine[Any, Any, R],
        *,
        sign: bool = False,
        write: bool = False,
        renewal: bool = False,
    ) -> R:
        if self.dead:
            call.close()
            await self.hang()
        result = await call
        if sign:
            self.last_sign = time.time()
        if write:
            self.wrote = True
            if self.plan == "after a write":
                self.dead = True
        if renewal and self.wrote and self.plan == "after a write and its renewal":
            self.dead = True
        if self.dead:  # it landed, but the process died before hearing back
            await self.hang()
        return result


class MortalCheckpointer:
    def __init__(self, inner: Checkpointer, mortal: Mortal) -> None:
        self.inner = inner
        self.mortal = mortal

    async def claim(self, workflow: str, budget: timedelta, alive: timedelta) -> Pass | None:
        return await self.mortal.call(self.inner.claim(workflow, budget, alive), sign=True)

    async def load(self, workflow: str) -> dict[str, object]:
        return await self.mortal.call(self.inner.load(workflow))

    async def history(self, workflow: str) -> list[Written]:
        return await self.mortal.call(self.inner.history(workflow))

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        call = self.inner.record(holder, key, value)
        return await self.mortal.call(call, sign=True, write=True)

    async def transact(self, holder: Pass, key: str, effect: Effect) -> Recorded:
        call = self.inner.transact(holder, key, effect)
        return await self.mortal.call(call, sign=True, write=True)

    async def supply(self, workflow: str, key: str, value: object) -> Recorded:
        return await self.mortal.call(self.inner.supply(workflow, key, value))

    async def append(self, workflow: str, value: object) -> Entry:
        return await self.mortal.call(self.inner.append(workflow, value))

    async def extend(self, holder: Pass, budget: timedelta, alive: timedelta) -> Pass:
        return await self.mortal.call(self.inner.extend(holder, budget, alive), sign=True)

    async def renew(self, holder: Pass, alive: timedelta) -> None:
        await self.mortal.call(self.inner.renew(holder, alive), sign=True)

    async def discard(self, workflow: str) -> int:
        return await self.mortal.call(self.inner.discard(workflow))

    async def release(self, holder: Pass) -> None:
        await self.mortal.call(self.inner.release(holder))


class MortalScheduler:
    def __init__(self, inner: Scheduler, mortal: Mortal) -> None:
        self.inner = inner
        self.mortal = mortal
        self.lease = inner.lease

    async def prepare(self) -> None:
        await self.mortal.call(self.inner.prepare())

    async def make_ready(self, workflow: str) -> None:
        await self.mortal.call(self.inner.make_ready(workflow))

    async def next_ready(self, within: timedelta) -> Delivery | None:
        return await self.mortal.call(self.inner.next_ready(within))

    async def done(self, delivery: Delivery) -> None:
        await self.mortal.call(self.inner.done(delivery))

    async def wake_at(self, delivery: Delivery, when: datetime) -> bool:
        return await self.mortal.call(self.inner.wake_at(delivery, when))

    async def wake_due(self, now: datetime | None = None) -> datetime | None:
        return await self.mortal.call(self.inner.wake_due(now))

    async def reclaiming(self, idle: timedelta) -> Reclaimed:
        return await self.mortal.call(self.inner.reclaiming(idle))

    async def extend(self, delivery: Delivery, within: timedelta) -> Delivery | None:
        call = self.inner.extend(delivery, within)
        return await self.mortal.call(call, sign=True, renewal=True)

    async def cancel(self, workflow: str) -> int:
        return await self.mortal.call(self.inner.cancel(workflow))


# --- the lifecycle --------------------------------------------------------------------------


async def test_the_observer_sees_delivered_started_and_outcome_in_order() -> None:
    durable = SplitDurable(*stores())
    observed = Observed()
    workflow = workflow_id()

    async def body(run: Run) -> int:
        return await run.step("one", lambda: 1, as_int)

    async with working(durable, body, observed):
        await durable.arrive(workflow, "go", True)
        await observed.until(lambda: observed.completed(workflow))

    assert observed.kinds(workflow) == ["delivered", "started", "outcome"]
    assert observed.outcomes(workflow) == [Completed(1)]
    times = [event.at for event in observed.of(workflow)]
    assert times == sorted(times)


async def test_a_blocked_workflow_runs_again_when_its_input_arrives() -> None:
    durable = SplitDurable(*stores())
    observed = Observed()
    workflow = workflow_id()

    async def body(run: Run) -> str:
        return await run.awaiting("approved-by", as_text)

    async with working(durable, body, observed):
        await durable.arrive(workflow, "order", 1)
        await observed.until(lambda: len(observed.outcomes(workflow)) == 1)
        await durable.arrive(workflow, "approved-by", "ada")
        await observed.until(lambda: observed.completed(workflow))

    assert observed.outcomes(workflow) == [
        Blocked(waiting=frozenset({"approved-by"})),
        Completed("ada"),
    ]


# --- 11. the pool, the timer, the budget, failures, shutdown ----------------------------------


class Holding:
    """A body whose one step waits at `gate`, counting the bodies inside it at once."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.inside = 0
        self.most = 0

    async def hold(self) -> int:
        self.inside += 1
        self.most = max(self.most, self.inside)
        try:
            await self.gate.wait()
        finally:
            self.inside -= 1
        return 1

    async def body(self, run: Run) -> int:
        return await run.step("held", self.hold, as_int)


async def test_at_most_pool_passes_run_and_nothing_is_read_while_full() -> None:
    checkpointer, memory = stores()
    scheduler = CountingScheduler(memory)
    durable = SplitDurable(checkpointer, scheduler)
    observed = Observed()
    held = Holding()

    workflows = [workflow_id() for _ in range(10)]
    async with working(durable, held.body, observed, pool=2):
        for workflow in workflows:
            await durable.arrive(workflow, "go", True)
        await observed.until(lambda: len([e for e in observed.events if e.kind == "started"]) == 2)
        # Several ticks and reads' worth of time with both slots taken.
        await asyncio.sleep(6 * TICK.total_seconds())
        assert held.inside == 2
        assert scheduler.calls["next_ready"] == 2
        assert scheduler.delivered == 2
        assert scheduler.calls["make_ready"] - scheduler.delivered == 8  # still in the queue

        held.gate.set()
        await observed.until(lambda: all(observed.completed(w) for w in workflows))

    assert held.most == 2
    assert scheduler.delivered == 10


class StaleLook(CountingScheduler):
    """Its first `wake_due` reads the store, then answers only once a `wake_at` has been made:
    an answer read before a pass scheduled its sleep, arriving after it (a slow round trip,
    two nodes of a cluster)."""

    def __init__(self, inner: Scheduler) -> None:
        super().__init__(inner)
        self.slept = asyncio.Event()

    async def wake_at(self, delivery: Delivery, when: datetime) -> bool:
        changed = await super().wake_at(delivery, when)
        self.slept.set()
        return changed

    async def wake_due(self, now: datetime | None = None) -> datetime | None:
        answer = await super().wake_due(now)
        if self.calls["wake_due"] == 1:
            await asyncio.wait_for(self.slept.wait(), timeout=10)
        return answer


# `stale`: the store's answer to the timer's first look was read before the pass scheduled
# its sleep and arrives after it; the deadline the timer heard meanwhile must still wake it.
@pytest.mark.parametrize("look", [CountingScheduler, StaleLook], ids=["fresh", "stale"])
async def test_a_sleeping_workflow_is_woken_by_the_timer(look: type[CountingScheduler]) -> None:
    checkpointer, memory = stores()
    scheduler = look(memory)
    durable = SplitDurable(checkpointer, scheduler)
    observed = Observed()
    workflow = workflow_id()

    async def body(run: Run) -> str:
        await run.sleep("nap", timedelta(milliseconds=150))
        return await run.step("after", lambda: "awake", as_text)

    # A sweep far longer than the test: only the worker's own deadline can wake it in time.
    async with working(durable, body, observed, sweep=timedelta(minutes=1)):
        await durable.arrive(workflow, "go", True)
        await observed.until(lambda: observed.completed(workflow))

    first, last = observed.outcomes(workflow)
    assert isinstance(first, Sleeping) and first.key == "nap"
    assert last == Completed("awake")
    assert observed.of(workflow, "started")[1].at >= first.due.timestamp()
    assert scheduler.calls["make_ready"] == 1  # the arrival; the wakeup came from the timer


async def test_a_worker_cancelled_as_a_pass_schedules_its_sleep_stops_at_once() -> None:
    """The timer is waiting when the pass's deadline wakes it and `work` is cancelled in the
    same turn. `asyncio.wait_for` on 3.11 swallowed that cancellation, and the timer waited out
    a whole `sweep` (here a minute) before it noticed."""
    durable = SplitDurable(*stores())
    observed = Observed()
    workflow = workflow_id()

    async def body(run: Run) -> None:
        await run.sleep("nap", timedelta(days=1))

    sweep = timedelta(minutes=1)
    task = asyncio.create_task(
        work(durable, body, pool=1, observer=observed, tick=TICK, sweep=sweep)
    )
    await durable.arrive(workflow, "go", True)
    await observed.until(lambda: bool(observed.outcomes(workflow)))
    task.cancel()
    await asyncio.wait({task}, timeout=15)
    try:
        assert task.done(), "work() still running 15 s after it was cancelled"
        assert task.cancelled()
    finally:
        with contextlib.suppress(asyncio.CancelledError):
            await task  # with the defect, a whole sweep later


async def test_a_deadline_set_by_another_worker_is_found_by_the_sweep() -> None:
    checkpointer, scheduler = stores()
    durable = SplitDurable(checkpointer, scheduler)
    observed = Observed()
    workflow = workflow_id()
    # Another worker took the workflow, scheduled a wakeup, and answered for it.
    await scheduler.make_ready(workflow)
    delivery = await scheduler.next_ready(WITHIN)
    assert delivery is not None
    assert await scheduler.wake_at(delivery, datetime.now().astimezone() + 3 * TICK)
    await scheduler.done(delivery)

    async def body(run: Run) -> str:
        return "woken"

    async with working(durable, body, observed, sweep=4 * TICK):
        await asyncio.sleep(0)  # the first look happens at start: let it find nothing due
        await observed.until(lambda: observed.completed(workflow))
    assert observed.outcomes(workflow) == [Completed("woken")]


async def test_a_pass_stuck_past_its_budget_is_stopped_and_the_workflow_handed_back() -> None:
    # A lease far longer than the budget: on a loaded machine a stalled loop could otherwise let
    # the claim lapse first, and the second pass be a takeover rather than the budget's doing.
    durable = SplitDurable(*stores(lease=timedelta(seconds=10)))
    observed = Observed()
    workflow = workflow_id()
    attempts: list[int] = []

    async def transcode() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            await forever()  # wedged: only the budget can end this
        return "transcoded"

    async def body(run: Run) -> str:
        return await run.step("transcode", transcode, as_text)

    async with working(durable, body, observed, budget=timedelta(milliseconds=300)):
        await durable.arrive(workflow, "go", True)
        await observed.until(lambda: observed.completed(workflow))

    assert len(attempts) == 2
    kinds = observed.kinds(workflow)
    assert kinds.index("expired") < kinds.index("outcome")
    assert kinds.count("started") == 2
    assert await durable.checkpointer.load(workflow) == {
        "go": True, "transcode": "transcoded", f"{ENDING}000000": completion("transcoded")
    }


async def test_a_step_that_raises_is_logged_and_the_worker_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    durable = SplitDurable(*stores())
    observed = Observed()
    bad, good = workflow_id(), workflow_id()

    def charge() -> str:
        raise RuntimeError("card declined")

    async def body(run: Run) -> str:
        if run.workflow == bad:
            return await run.step("charged", charge, as_text)
        return await run.step("charged", lambda: "ok", as_text)

    with caplog.at_level(logging.ERROR, logger="durability.worker"):
        async with working(durable, body, observed, pool=1):
            await durable.arrive(bad, "go", True)
            await observed.until(lambda: bool(observed.of(bad, "dead")))
            await durable.arrive(good, "go", True)
            await observed.until(lambda: observed.completed(good))

    failed = observed.of(bad, "failed")
    assert len(failed) == 1 and isinstance(failed[0].error, RuntimeError)
    logged = [
        r for r in caplog.records if r.name == "durability.worker" and r.levelno >= logging.ERROR
    ]
    assert any(
        bad in r.getMessage() and r.exc_info and isinstance(r.exc_info[1], RuntimeError)
        for r in logged
    )
    assert "charged" not in await durable.checkpointer.load(bad)


async def test_a_worker_cancelled_mid_pass_loses_nothing() -> None:
    checkpointer, memory = stores()
    durable = SplitDurable(checkpointer, memory)
    watched = CountingScheduler(memory)
    first_seen, second_seen = Observed(), Observed()
    workflow = workflow_id()
    calls: Counter[str] = Counter()
    entered = asyncio.Event()

    def reserve() -> str:
        calls["reserve"] += 1
        return "reserved"

    async def ship() -> str:
        calls["ship"] += 1
        if calls["ship"] == 1:
            entered.set()
            await forever()  # the first worker is shut down while inside this step
        return "shipped"

    async def body(run: Run) -> list[str]:
        reserved = await run.step("reserved", reserve, as_text)
        return [reserved, await run.step("shipped", ship, as_text)]

    async with working(durable, body, first_seen) as first:
        await durable.arrive(workflow, "go", True)
        await entered.wait()
        await stop(first)
    assert first_seen.kinds(workflow) == ["delivered", "started"]

    async with working(SplitDurable(checkpointer, watched), body, second_seen):
        await second_seen.until(lambda: second_seen.completed(workflow))

    # Handed back at shutdown: released and queued again, not left for a lease to run out.
    assert watched.reclaimed == 0
    assert second_seen.kinds(workflow) == ["delivered", "started", "outcome"]
    assert second_seen.outcomes(workflow) == [Completed(["reserved", "shipped"])]
    assert calls == {"reserve": 1, "ship": 2}  # the step that had finished did not run again
    assert await durable.checkpointer.load(workflow) == {
        "go": True,
        "reserved": "reserved",
        "shipped": "shipped",
        f"{ENDING}000000": completion(["reserved", "shipped"]),
    }


async def test_a_write_renews_the_delivery_without_waiting_for_a_tick() -> None:
    checkpointer, memory = stores(lease=timedelta(minutes=5))  # room for a tick of a minute
    scheduler = CountingScheduler(memory)
    durable = SplitDurable(checkpointer, scheduler)
    observed = Observed()
    workflow = workflow_id()
    inside = asyncio.Event()

    async def hold() -> int:
        inside.set()
        await forever()

    async def body(run: Run) -> int:
        await run.step("written", lambda: 1, as_int)
        return await run.step("held", hold, as_int)

    # A tick longer than the test: the keeper never runs, so only the write can extend. The
    # renewal follows the write by NUDGE (well inside a tick), because the pass is still on.
    async with working(durable, body, observed, tick=timedelta(minutes=1)):
        await durable.arrive(workflow, "go", True)
        await inside.wait()
        await asyncio.sleep(0.5)  # NUDGE is 100 ms; the tick (a minute) never comes
        assert scheduler.calls["extend"] == 1


async def test_a_pass_that_ends_right_after_its_write_skips_the_delivery_renewal() -> None:
    checkpointer, memory = stores(lease=timedelta(minutes=5))  # room for a tick of a minute
    scheduler = CountingScheduler(memory)
    durable = SplitDurable(checkpointer, scheduler)
    observed = Observed()
    workflows = [workflow_id() for _ in range(20)]

    async def body(run: Run) -> int:
        return await run.step("only", lambda: 1, as_int)

    async with working(durable, body, observed, tick=timedelta(minutes=1)):
        for workflow in workflows:
            await durable.arrive(workflow, "go", True)
        await observed.until(lambda: all(observed.completed(w) for w in workflows))
    # `done` followed each write at once, which made renewing the delivery pointless.
    assert scheduler.calls["extend"] == 0


async def test_renewals_writes_asked_for_start_at_their_moment_unless_their_pass_ended() -> None:
    # One timer serves every pass's renewal: each still wanted starts once, at its own moment
    # (not before it, not with the one before it), and a dropped one never starts.
    from durability.worker.nudging import Nudges
    from durability.worker.running import Running

    loop = asyncio.get_running_loop()
    delay = 0.05
    started: list[tuple[str, float]] = []

    def start(running: Running) -> None:
        running.nudging = None
        started.append((running.delivery.workflow, loop.time()))

    nudges = Nudges(delay, start)
    passes = {name: Running(Delivery(name, "1")) for name in ("early", "dropped", "late", "again")}
    due: dict[str, float] = {}

    def write(name: str) -> None:
        nudges.add(passes[name])
        due.setdefault(name, loop.time() + delay)

    write("early")
    write("dropped")
    passes["dropped"].unnudge()  # its pass ended a moment after the write
    write("again")
    passes["again"].unnudge()
    await asyncio.sleep(delay / 2)
    write("early")  # a second write waits for the first's renewal, not a moment of its own
    write("late")
    del due["again"]
    write("again")  # asked again after it was dropped: starts from this write
    await asyncio.sleep(delay * 3)

    assert [name for name, _ in started] == ["early", "late", "again"]
    for name, at in started:
        assert at >= due[name] - 0.001, name


async def test_a_pass_running_during_a_delete_is_fenced_and_not_rescheduled() -> None:
    durable = SplitDurable(*stores())
    observed = Observed()
    workflow = workflow_id()
    gate = asyncio.Event()
    inside = asyncio.Event()

    async def wait_then_ship() -> str:
        inside.set()
        await gate.wait()
        return "shipped"

    async def body(run: Run) -> str:
        await run.step("charged", lambda: "charged", as_text)
        return await run.step("shipped", wait_then_ship, as_text)

    async with working(durable, body, observed):
        await durable.arrive(workflow, "go", True)
        await inside.wait()
        await durable.delete(workflow)
        gate.set()
        await observed.until(lambda: bool(observed.of(workflow, "fenced")))
        await asyncio.sleep(6 * TICK.total_seconds())  # time for any wakeup to come round

    assert observed.kinds(workflow) == ["delivered", "started", "fenced"]
    assert await durable.checkpointer.load(workflow) == {}


async def test_a_workflow_held_by_a_live_pass_is_looked_at_again_later() -> None:
    checkpointer, scheduler = stores()
    durable = SplitDurable(checkpointer, scheduler)
    observed = Observed()
    workflow = workflow_id()
    holder = await claimed(checkpointer, workflow, timedelta(minutes=1), timedelta(minutes=1))

    async def body(run: Run) -> str:
        return "ran"

    async with working(durable, body, observed):
        await durable.arrive(workflow, "go", True)
        await observed.until(lambda: bool(observed.of(workflow, "contended")))
        await checkpointer.release(holder)
        await observed.until(lambda: observed.completed(workflow))
    assert observed.kinds(workflow)[:2] == ["delivered", "contended"]


# --- 12. timings --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["budget", "tick", "within", "contended", "sweep", "grace"])
@pytest.mark.parametrize("bad", [timedelta(0), timedelta(milliseconds=-1)])
async def test_work_refuses_a_timing_that_is_not_positive(name: str, bad: timedelta) -> None:
    durable = SplitDurable(*stores())

    async def body(run: Run) -> None:
        return None

    settings: dict[str, Any] = {name: bad}
    with pytest.raises(ValueError, match=name):
        await asyncio.wait_for(work(durable, body, **settings), 1)


@pytest.mark.parametrize("pool", [0, -1])
async def test_work_refuses_a_pool_that_is_not_positive(pool: int) -> None:
    async def body(run: Run) -> None:
        return None

    with pytest.raises(ValueError, match="pool"):
        await asyncio.wait_for(work(SplitDurable(*stores()), body, pool=pool), 1)


# --- 13. taking over from a dead worker -------------------------------------------------------

TAKEOVER_LEASE = timedelta(milliseconds=600)
TAKEOVER_TICK = timedelta(milliseconds=100)
SLACK = TAKEOVER_TICK  # event-loop scheduling on a shared machine, not a design allowance


@pytest.mark.parametrize("plan", ["when told", "after a write", "after a write and its renewal"])
async def test_a_dead_workers_workflow_is_taken_over_within_a_lease_and_a_tick(
    plan: Plan,
) -> None:
    checkpointer, scheduler = stores(TAKEOVER_LEASE)
    mortal = Mortal(plan)
    doomed = SplitDurable(
        MortalCheckpointer(checkpointer, mortal), MortalScheduler(scheduler, mortal)
    )
    survivor = SplitDurable(checkpointer, scheduler)
    doomed_seen, survivor_seen = Observed(), Observed()
    workflow = workflow_id()
    calls: Counter[str] = Counter()
    in_step = asyncio.Event()

    async def prepare() -> str:
        calls["prepare"] += 1
        # Long enough for several renewals before the write lands.
        await asyncio.sleep(2.5 * TAKEOVER_TICK.total_seconds())
        return "prepared"

    async def finish() -> str:
        calls["finish"] += 1
        if not mortal.dead:  # the doomed worker never gets out of this step
            in_step.set()
            await forever()
        return "finished"

    async def body(run: Run) -> list[str]:
        prepared = await run.step("prepare", prepare, as_text)
        return [prepared, await run.step("finish", finish, as_text)]

    # `contended` at work's default: how eagerly a worker re-looks at a held workflow is a
    # preference, and the takeover bound must not depend on it.
    settings: dict[str, Any] = {
        "tick": TAKEOVER_TICK,
        "within": TAKEOVER_TICK,
        "contended": timedelta(seconds=1),
    }
    first = asyncio.create_task(work(doomed, body, observer=doomed_seen, **settings))
    try:
        await doomed.arrive(workflow, "go", True)
        await doomed_seen.until(lambda: bool(doomed_seen.of(workflow, "started")))
        async with working(survivor, body, survivor_seen, **settings):
            if plan == "when told":
                await in_step.wait()
                await asyncio.sleep(2.5 * TAKEOVER_TICK.total_seconds())  # a few renewals
                mortal.dead = True
            await survivor_seen.until(lambda: bool(survivor_seen.of(workflow, "started")), 5)
            await survivor_seen.until(lambda: survivor_seen.completed(workflow), 5)
    finally:
        first.cancel()
        await asyncio.sleep(0)
        mortal.bury()
        with contextlib.suppress(asyncio.CancelledError):
            await first

    assert mortal.dead
    took_over = survivor_seen.of(workflow, "started")[0].at
    waited = took_over - mortal.last_sign
    bound = (TAKEOVER_LEASE + TAKEOVER_TICK + SLACK).total_seconds()
    assert waited <= bound, f"taken over {waited:.3f}s after the last sign of life"
    assert survivor_seen.outcomes(workflow) == [Completed(["prepared", "finished"])]
    assert calls["prepare"] == 1


async def test_a_body_that_finds_another_workflow_held_is_looked_at_again_not_fatal() -> None:
    checkpointer, scheduler = stores()
    durable = SplitDurable(checkpointer, scheduler)
    observed = Observed()
    other = workflow_id()
    blocker = await claimed(checkpointer, other, alive=timedelta(milliseconds=300))

    async def body(run: Run) -> str:
        # Like a rollback: the pass claims a second workflow, which a live pass holds at first.
        inner = await claimed(checkpointer, other)
        await checkpointer.release(inner)
        return "done"

    workflow = workflow_id()
    async with working(durable, body, observed):
        await durable.scheduler.make_ready(workflow)
        await observed.until(lambda: observed.completed(workflow))
    assert "contended" in observed.kinds(workflow)
    assert blocker.token < (await checkpointer.claim(other, LEASE, LEASE) or blocker).token


async def test_shutdown_is_bounded_when_the_store_stops_answering(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import durability.worker as worker_module

    monkeypatch.setattr(worker_module, "SHUTDOWN", timedelta(milliseconds=200))
    checkpointer, scheduler = stores()
    durable = SplitDurable(checkpointer, scheduler)
    observed = Observed()
    started = asyncio.Event()

    async def body(run: Run) -> None:
        started.set()
        await run.step("stuck", forever, as_text)

    async def hang(*args: object, **kwargs: object) -> NoReturn:
        await forever()

    task = asyncio.create_task(work(durable, body, observer=observed, tick=TICK, within=WITHIN))
    await durable.scheduler.make_ready(workflow_id())
    await asyncio.wait_for(started.wait(), 5)
    # From here on every store call the hand-back would make hangs.
    monkeypatch.setattr(checkpointer, "release", hang)
    monkeypatch.setattr(scheduler, "wake_at", hang)
    task.cancel()
    async with asyncio.timeout(5):
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert task.done()


async def test_a_queue_that_fails_for_a_while_is_logged_and_read_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    checkpointer, scheduler = stores()
    durable = SplitDurable(checkpointer, scheduler)
    observed = Observed()
    failures = 3
    real = scheduler.next_ready

    async def flaky(within: timedelta) -> Delivery | None:
        nonlocal failures
        if failures:
            failures -= 1
            raise ConnectionError("the queue went away")
        return await real(within)

    scheduler.next_ready = flaky  # type: ignore[method-assign]

    async def body(run: Run) -> int:
        return await run.step("only", lambda: 1, as_int)

    workflow = workflow_id()
    await durable.arrive(workflow, "go", True)
    with caplog.at_level(logging.ERROR, logger="durability.worker"):
        async with working(durable, body, observed):
            await observed.until(lambda: observed.completed(workflow))
    assert failures == 0
    assert sum("reading the queue failed" in r.getMessage() for r in caplog.records) == 3


class _SlowReads:
    """Makes a memory scheduler's reads take a while, like a round trip (so readers overlap
    only if there are many), and counts how many are in flight, and the most at once."""

    def __init__(self, memory: MemoryScheduler) -> None:
        self.in_flight = 0
        self.most = 0
        self._real = memory.next_ready
        memory.next_ready = self.read  # type: ignore[method-assign]

    async def read(self, within: timedelta) -> Delivery | None:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(0.01)
            return await self._real(within)
        finally:
            self.in_flight -= 1


async def test_a_busy_queue_calls_up_extra_readers_and_an_idle_one_keeps_one() -> None:
    checkpointer, memory = stores()
    scheduler = CountingScheduler(memory)
    durable = SplitDurable(checkpointer, scheduler)
    observed = Observed()
    reads = _SlowReads(memory)
    workflows = [workflow_id() for _ in range(60)]
    for workflow in workflows:
        await durable.arrive(workflow, "go", True)

    async def body(run: Run) -> int:
        await asyncio.sleep(0.02)
        return 1

    async with working(durable, body, observed, pool=8, readers=3):
        await observed.until(lambda: all(observed.completed(w) for w in workflows))
        assert 1 < reads.most <= 3  # busy: more than one read in flight, never more than 3
        await asyncio.sleep(WITHIN.total_seconds() * 3)  # the extra readers find nothing
        assert reads.in_flight == 1  # idle: one read in flight


class _AsksForTwoReaders(SplitDurable):
    """A store that says how many takes it wants in flight (as `PostgresDurable` does)."""

    readers = 2


async def test_the_store_s_own_readers_is_the_default_and_an_argument_overrides_it() -> None:
    checkpointer, memory = stores()
    durable = _AsksForTwoReaders(checkpointer, memory)
    reads = _SlowReads(memory)

    async def body(run: Run) -> int:
        await asyncio.sleep(0.02)
        return 1

    for options, cap in (({}, 2), ({"readers": 4}, 4)):
        reads.most = 0
        observed = Observed()
        workflows = [workflow_id() for _ in range(60)]
        for workflow in workflows:
            await durable.arrive(workflow, "go", True)
        async with working(durable, body, observed, pool=8, **options):
            await observed.until(
                lambda seen=observed, ours=workflows: all(seen.completed(w) for w in ours)
            )
        assert reads.most == cap  # a busy queue fills the cap, and never passes it


async def test_only_the_primary_reader_waits_so_a_wakeup_wakes_one_read() -> None:
    checkpointer, memory = stores()
    durable = SplitDurable(checkpointer, memory)
    observed = Observed()
    waiting: list[timedelta] = []
    real = memory.next_ready

    async def read(within: timedelta) -> Delivery | None:
        waiting.append(within)
        try:
            await asyncio.sleep(0.005)
            return await real(within)
        finally:
            waiting.remove(within)

    memory.next_ready = read  # type: ignore[method-assign]
    workflows = [workflow_id() for _ in range(40)]
    for workflow in workflows:
        await durable.arrive(workflow, "go", True)

    async def body(run: Run) -> int:
        await asyncio.sleep(0.01)
        return 1

    long = timedelta(seconds=30)
    async with working(durable, body, observed, pool=8, readers=4, within=long):
        await observed.until(lambda: all(observed.completed(w) for w in workflows))
        await asyncio.sleep(0.1)  # far less than `within`: only a waiting read can remain
        # Had the extra readers waited `within` too, all four would still be waiting here, and
        # the next wakeup would set every one of them reading at once. (The primary waits
        # `within`, whole.)
        assert waiting == [long]
        late = workflow_id()
        await durable.arrive(late, "go", True)
        await observed.until(lambda: observed.completed(late))


async def test_readers_must_be_a_positive_count() -> None:
    durable = SplitDurable(*stores())

    async def body(run: Run) -> None:
        return None

    for bad in (0, -1, True):
        with pytest.raises(ValueError, match="readers"):
            await work(durable, body, readers=bad)


# --- 14. nothing a body raises stops the worker -------------------------------------------------


class Foreign(BaseException):
    """A third party's own BaseException, neither a failure type nor the library's."""


def _raises(what: BaseException) -> Callable[[Run], Awaitable[object]]:
    async def body(run: Run) -> object:
        raise what

    return body


async def _mixed(run: Run) -> object:
    def declined() -> int:
        raise LookupError("card declined")

    async with asyncio.TaskGroup() as group:
        group.create_task(run.step("charged", declined, as_int))
        group.create_task(run.awaiting("approved-by", as_text))
    return None


async def _stray(run: Run) -> object:
    other = MemoryCheckpointer()
    elsewhere = await claimed(other, workflow_id())
    return await Run(elsewhere, other, {}).awaiting("approval", as_text)


POISONS: dict[str, tuple[Callable[[Run], Awaitable[object]], type[BaseException]]] = {
    "failure-beside-a-suspension": (_mixed, ExceptionGroup),
    "exception-group": (
        _raises(ExceptionGroup("two", [ValueError("one"), KeyError("two")])),
        ExceptionGroup,
    ),
    "keyboard-interrupt": (_raises(KeyboardInterrupt()), KeyboardInterrupt),
    "system-exit": (_raises(SystemExit(3)), SystemExit),
    "foreign-base-exception": (_raises(Foreign("not ours")), Foreign),
    "unasked-cancellation": (_raises(asyncio.CancelledError()), asyncio.CancelledError),
    "suspension-of-another-run": (_stray, TypeError),
}


@pytest.mark.parametrize("poison", list(POISONS))
async def test_no_body_can_stop_the_worker(poison: str) -> None:
    checkpointer, memory = stores()
    durable = SplitDurable(checkpointer, memory)
    observed = Observed()
    bad, good = workflow_id(), workflow_id()
    poisoned, raised = POISONS[poison]

    async def body(run: Run) -> object:
        if run.workflow == bad:
            return await poisoned(run)
        return await run.step("fine", lambda: "fine", as_text)

    async with working(durable, body, observed, pool=1) as worker:
        await durable.arrive(bad, "go", True)
        await observed.until(lambda: bool(observed.of(bad, "failed")))
        await durable.arrive(good, "go", True)
        await observed.until(lambda: observed.completed(good))
        assert not worker.done()

    (failed,) = observed.of(bad, "failed")
    assert isinstance(failed.error, raised)
    # One attempt (the default retries nothing), so the workflow has failed: "dead".
    assert observed.kinds(bad) == ["delivered", "started", "failed", "dead"]
    # Settled: released and answered for, so no other worker inherits the poison.
    assert (await memory.reclaiming(timedelta(milliseconds=1))).delivery is None
    assert await checkpointer.claim(bad, LEASE, LEASE) is not None


async def test_a_failed_pass_that_reached_a_sleep_is_woken_at_its_deadline() -> None:
    durable = SplitDurable(*stores())
    observed = Observed()
    workflow = workflow_id()
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise LookupError("the gateway hiccuped")
        return "charged"

    async def body(run: Run) -> str:
        async with asyncio.TaskGroup() as group:
            group.create_task(run.sleep("cool-off", timedelta(milliseconds=200)))
            charged = group.create_task(run.step("charged", flaky, as_text))
        return charged.result()

    # No sweep within the test, and a retry far off: only the deadline the failed pass noted
    # can bring it back in time.
    later = Retry(initial=timedelta(minutes=1), jitter=0)
    async with working(durable, body, observed, sweep=timedelta(minutes=1), retry=later):
        await durable.arrive(workflow, "go", True)
        await observed.until(lambda: observed.completed(workflow))

    assert observed.kinds(workflow).count("failed") == 1
    assert observed.outcomes(workflow) == [Completed("charged")]
    noted = await durable.checkpointer.load(workflow)
    due = datetime.fromisoformat(str(noted["cool-off"]))
    assert observed.of(workflow, "started")[1].at >= due.timestamp()


class Shifted:
    """A clock a fixed offset from the wall clock, moved by hand."""

    def __init__(self, offset: timedelta) -> None:
        self.offset = offset

    def __call__(self) -> datetime:
        return datetime.now().astimezone() + self.offset


async def test_the_worker_s_clock_reaches_every_pass() -> None:
    durable = SplitDurable(*stores())
    observed = Observed()
    workflow = workflow_id()
    clock = Shifted(timedelta(days=3))

    async def body(run: Run) -> str:
        await run.sleep("settling", timedelta(days=1))
        return await run.step("paid", lambda: "paid", as_text)

    async with working(durable, body, observed, clock=clock, sweep=TICK):
        started = clock()
        await durable.arrive(workflow, "go", True)
        await observed.until(lambda: len(observed.outcomes(workflow)) == 1)
        (sleeping,) = observed.outcomes(workflow)
        assert isinstance(sleeping, Sleeping)
        # Recorded on the worker's clock, three days ahead of the wall's.
        assert sleeping.due - started >= timedelta(days=1)
        assert sleeping.due - clock() <= timedelta(days=1)
        recorded = (await durable.checkpointer.load(workflow))["settling"]
        assert datetime.fromisoformat(str(recorded)) == sleeping.due
        clock.offset += timedelta(days=1)  # the day passes, on that clock
        await observed.until(lambda: observed.completed(workflow))
    assert observed.outcomes(workflow)[-1] == Completed("paid")


class FailingWrites(MemoryCheckpointer):
    """Every record fails with a cut connection while `down` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True
        self.tries = 0

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        if self.down:
            self.tries += 1
            raise ConnectionResetError("the store went away")
        return await super().record(holder, key, value)


async def test_a_store_that_keeps_failing_a_write_gets_the_workflow_handed_back_not_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import durability.faults

    monkeypatch.setattr(durability.faults, "FIRST", timedelta(milliseconds=1))
    checkpointer = FailingWrites()
    durable = SplitDurable(checkpointer, MemoryScheduler(lease=LEASE))
    observed = Observed()
    workflow = workflow_id()
    ran: list[int] = []

    def charge() -> str:
        ran.append(1)
        if len(ran) == 1:
            return "charged"
        checkpointer.down = False  # back by the time the next pass runs
        return "charged"

    async def body(run: Run) -> str:
        return await run.step("charged", charge, as_text)

    async with working(durable, body, observed):
        await durable.arrive(workflow, "go", True)
        await observed.until(lambda: observed.completed(workflow))

    assert checkpointer.tries == durability.faults.ATTEMPTS
    assert "failed" not in observed.kinds(workflow)
    (unavailable,) = observed.of(workflow, "unavailable")
    assert isinstance(unavailable.error, durability.faults.StoreDown)
    # The effect whose record never landed ran again: at least once, as every outside effect.
    assert ran == [1, 1]
    assert (await checkpointer.load(workflow))["charged"] == "charged"


# --- 15. draining, and a store that is not there yet --------------------------------------------


async def test_a_drain_lets_running_passes_finish_their_steps_and_takes_nothing_new() -> None:
    checkpointer, scheduler = stores()
    durable = SplitDurable(checkpointer, scheduler)
    observed = Observed()
    drain = asyncio.Event()
    first, second, late = workflow_id(), workflow_id(), workflow_id()
    ran: Counter[str] = Counter()
    both_inside = asyncio.Event()

    async def capture(workflow: str) -> str:
        ran[workflow] += 1
        if len(ran) == 2:
            both_inside.set()
        await asyncio.sleep(0.3)  # mid-step when the drain begins
        return "captured"

    async def body(run: Run) -> str:
        captured = await run.step("captured", lambda: capture(run.workflow), as_text)
        return await run.step("paid", lambda: f"paid after {captured}", as_text)

    task = asyncio.create_task(
        work(durable, body, observer=observed, tick=TICK, within=WITHIN, stop=drain, pool=4)
    )
    try:
        await durable.arrive(first, "go", True)
        await durable.arrive(second, "go", True)
        await asyncio.wait_for(both_inside.wait(), 5)
        drain.set()
        await durable.arrive(late, "go", True)  # arrives while draining
        await asyncio.wait_for(task, 10)  # returns by itself, once both passes ended
    finally:
        await stop(task)

    assert ran == Counter({first: 1, second: 1})
    assert observed.completed(first) and observed.completed(second)
    assert observed.of(late) == []
    delivery = await scheduler.next_ready(WITHIN)  # still queued, for the next worker
    assert delivery is not None and delivery.workflow == late


async def test_a_drain_hands_back_a_pass_that_outlives_its_grace() -> None:
    checkpointer, scheduler = stores()
    durable = SplitDurable(checkpointer, scheduler)
    observed = Observed()
    drain = asyncio.Event()
    workflow = workflow_id()

    async def body(run: Run) -> str:
        return await run.step("stuck", forever, as_text)

    task = asyncio.create_task(
        work(
            durable,
            body,
            observer=observed,
            tick=TICK,
            within=WITHIN,
            stop=drain,
            grace=timedelta(milliseconds=200),
        )
    )
    try:
        await durable.arrive(workflow, "go", True)
        await observed.until(lambda: bool(observed.of(workflow, "started")))
        drain.set()
        await asyncio.wait_for(task, 5)
    finally:
        await stop(task)

    assert observed.kinds(workflow) == ["delivered", "started"]
    # Handed back: released, and queued again without waiting out a lease.
    assert await checkpointer.claim(workflow, LEASE, LEASE) is not None
    await scheduler.wake_due()
    delivery = await scheduler.next_ready(WITHIN)
    assert delivery is not None and delivery.workflow == workflow


class LateScheduler(MemoryScheduler):
    """A queue whose store does not answer `prepare` for its first `down` tries."""

    def __init__(self, down: int) -> None:
        super().__init__(lease=LEASE)
        self.down = down
        self.tries = 0

    async def prepare(self) -> None:
        self.tries += 1
        if self.tries <= self.down:
            raise ConnectionRefusedError("nothing listens there yet")


async def test_a_worker_started_before_its_store_waits_for_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scheduler = LateScheduler(down=3)
    durable = SplitDurable(MemoryCheckpointer(), scheduler)
    observed = Observed()
    workflow = workflow_id()

    async def body(run: Run) -> int:
        return await run.step("one", lambda: 1, as_int)

    with caplog.at_level(logging.WARNING, logger="durability.worker"):
        async with working(durable, body, observed, tick=timedelta(milliseconds=10)):
            await durable.arrive(workflow, "go", True)
            await observed.until(lambda: observed.completed(workflow))
    assert scheduler.tries == 4
    waits = [r for r in caplog.records if "the store is not ready" in r.getMessage()]
    assert len(waits) == 3


async def test_a_drain_while_the_store_is_not_there_yet_returns() -> None:
    durable = SplitDurable(MemoryCheckpointer(), LateScheduler(down=10**6))
    drain = asyncio.Event()

    async def body(run: Run) -> None:
        return None

    task = asyncio.create_task(work(durable, body, tick=TICK, stop=drain))
    await asyncio.sleep(3 * TICK.total_seconds())
    assert not task.done()
    drain.set()
    await asyncio.wait_for(task, 5)


async def test_a_read_waits_within_whole_and_an_abandoned_delivery_is_still_taken_over() -> None:
    # The read is not cut short to find a lapsed delivery: the reclaimer (on a visibility-scored
    # queue, the store's own look) comes at the lapse, so an idle worker's read can be long.
    checkpointer, memory = stores()
    durable = SplitDurable(checkpointer, memory)
    workflow = workflow_id()
    await memory.make_ready(workflow)
    assert await memory.next_ready(WITHIN) is not None  # a worker took it and died
    waits: list[timedelta] = []
    real = memory.next_ready

    async def read(within: timedelta) -> Delivery | None:
        waits.append(within)
        return await real(within)

    memory.next_ready = read  # type: ignore[method-assign]

    async def body(run: Run) -> int:
        return await run.step("ran", lambda: 1, as_int)

    observed = Observed()
    hour = timedelta(hours=1)
    async with working(durable, body, observed, within=hour):
        await observed.until(lambda: observed.completed(workflow))
    assert waits and set(waits) == {hour}


async def test_tick_follows_a_short_lease_so_a_long_step_keeps_its_claim() -> None:
    # A lease shorter than the default tick: renewed only every second, the claim of a pass in
    # a step of a second and a half would lapse, and the pass would be fenced or taken over.
    checkpointer, _ = stores()
    scheduler = MemoryScheduler(lease=timedelta(milliseconds=400))
    durable = SplitDurable(checkpointer, scheduler)
    workflow = workflow_id()

    async def body(run: Run) -> int:
        return await run.step("long", lambda: asyncio.sleep(1.5, result=1), as_int)

    observed = Observed(patience=20)
    await durable.arrive(workflow, "go", True)
    task = asyncio.create_task(work(durable, body, observer=observed))  # the default tick
    try:
        await observed.until(lambda: observed.completed(workflow))
    finally:
        await stop(task)
    kinds = [event.kind for event in observed.of(workflow)]
    assert kinds.count("started") == 1
    assert "fenced" not in kinds and "expired" not in kinds


async def _eventually(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    """Wait until `condition()` holds (polled: no event marks the end of a finish)."""
    async with asyncio.timeout(seconds):
        for _ in itertools.count():
            if condition():
                return
            await asyncio.sleep(0.01)


class _BrokenSettling(SplitDurable):
    """A durable whose one-step end of a pass fails every time (as a script the server
    refused would): the worker must still answer for the pass."""

    __slots__ = ("finished", "tried")

    def __init__(self, checkpointer: MemoryCheckpointer, scheduler: MemoryScheduler) -> None:
        super().__init__(checkpointer, scheduler)
        self.tried = 0
        self.finished = 0

    async def finish(self, holder: Pass, delivery: Delivery) -> None:
        await super().finish(holder, delivery)
        self.finished += 1

    async def finish_settled(
        self, holder: Pass, delivery: Delivery, state: str, detail: Mapping[str, object]
    ) -> bool:
        self.tried += 1
        raise RuntimeError("the finish's script was refused")

    async def finish_ended(
        self,
        holder: Pass,
        delivery: Delivery,
        key: str,
        value: object,
        state: str,
        detail: Mapping[str, object],
    ) -> bool:
        self.tried += 1
        raise RuntimeError("the finish's script was refused")


async def test_a_finish_with_its_standing_that_fails_still_finishes_the_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    checkpointer, scheduler = stores()
    durable = _BrokenSettling(checkpointer, scheduler)
    observed = Observed()
    workflow = workflow_id()

    async def body(run: Run) -> int:
        return await run.step("one", lambda: 1, as_int)

    with caplog.at_level(logging.ERROR, logger="durability.worker"):
        async with working(durable, body, observed):
            await durable.arrive(workflow, "go", True)
            await observed.until(lambda: observed.completed(workflow))
            await _eventually(lambda: durable.finished > 0)
            # Answered for: the delivery is gone, so no second pass ever comes.
            assert await scheduler.next_ready(timedelta(milliseconds=300)) is None
    assert (durable.tried, durable.finished) == (1, 1)
    assert observed.kinds(workflow) == ["delivered", "started", "outcome"]
    look = await checkpointer.look(workflow)
    assert look.standing is None and not look.claimed  # released, the standing left to later
    assert any(
        "finishing" in r.getMessage() and workflow in r.getMessage() for r in caplog.records
    )


class _Unsettling:
    """A `Durable` of someone else's with no `finish_settled`: the worker writes the standing
    itself, then finishes."""

    def __init__(self, inner: SplitDurable) -> None:
        self.inner = inner
        self.finished = 0

    @property
    def checkpointer(self) -> Checkpointer:
        return self.inner.checkpointer

    @property
    def scheduler(self) -> Scheduler:
        return self.inner.scheduler

    async def arrive(self, workflow: str, key: str, value: object) -> Recorded:
        return await self.inner.arrive(workflow, key, value)

    async def deliver(self, workflow: str, value: object) -> Entry:
        return await self.inner.deliver(workflow, value)

    async def delete(self, workflow: str) -> int:
        return await self.inner.delete(workflow)

    async def take(self, within: timedelta, budget: timedelta, alive: timedelta) -> Taken | None:
        return await self.inner.take(within, budget, alive)

    async def finish(self, holder: Pass, delivery: Delivery) -> None:
        await self.inner.finish(holder, delivery)
        self.finished += 1


async def test_a_durable_that_cannot_settle_as_it_finishes_gets_its_standing_first() -> None:
    checkpointer, scheduler = stores()
    durable = _Unsettling(SplitDurable(checkpointer, scheduler))
    assert not isinstance(durable, Settling)
    observed = Observed()
    workflow = workflow_id()

    async def body(run: Run) -> int:
        return await run.step("one", lambda: 1, as_int)

    async with working(durable, body, observed):
        await durable.arrive(workflow, "go", True)
        await observed.until(lambda: observed.completed(workflow))
        await _eventually(lambda: durable.finished > 0)
    look = await checkpointer.look(workflow)
    assert look.standing is not None and look.standing.state == "completed"
    assert not look.claimed


async def test_a_hand_back_the_store_fails_does_not_end_the_loop_that_took_it() -> None:
    # Found by the chaos run: the reclaimer took a delivery while the reader filled the last
    # slot, the hand-back met a cut connection, and the error ended `work()` (an
    # ExceptionGroup out of its TaskGroup): a dead worker.
    from durability.worker.crew import Crew
    from durability.worker.running import Running
    from durability.worker.settings import Settings

    class Cut(MemoryScheduler):
        async def wake_at(self, delivery: Delivery, when: datetime) -> bool:
            raise ConnectionError("the connection was cut under the hand-back")

    scheduler = Cut(lease=timedelta(seconds=5))
    durable = SplitDurable(MemoryCheckpointer(), scheduler)

    async def body(run: Run) -> None:
        return None

    settings = Settings(pool=1, budget=timedelta(minutes=1), tick=timedelta(seconds=1),
                        within=timedelta(seconds=1), contended=timedelta(seconds=1),
                        sweep=timedelta(seconds=5), readers=1, grace=GRACE, retry=ONCE)
    worker = Crew(durable, body, settings, observer=None, clock=lambda: datetime.now(UTC))
    await scheduler.make_ready("full")
    await scheduler.make_ready("late")
    first = await scheduler.next_ready(timedelta(seconds=1))
    late = await scheduler.next_ready(timedelta(seconds=1))
    assert first is not None and late is not None
    worker.running.add(Running(first))  # the pool is full
    await worker.admit(late)  # before: ConnectionError out of the loop that called it
    assert len(worker.running) == 1  # nothing started past the pool


# --- an idle worker: looks only when something can have changed ----------------------------


async def test_a_tick_above_half_the_lease_is_refused_naming_both() -> None:
    durable = SplitDurable(*stores(lease=timedelta(seconds=1)))

    async def body(run: Run) -> None:
        return None

    with pytest.raises(ValueError, match=r"tick \(0:00:00\.600000\).*lease \(0:00:01\)"):
        await work(durable, body, tick=timedelta(milliseconds=600))
    with pytest.raises(ValueError, match="tick"):
        await work(durable, body, tick=timedelta(seconds=1))


async def test_an_idle_reclaimer_looks_once_a_lease_not_every_tick() -> None:
    checkpointer, memory = stores(lease=timedelta(milliseconds=400))
    scheduler = CountingScheduler(memory)
    durable = SplitDurable(checkpointer, scheduler)

    async def body(run: Run) -> None:
        return None

    # Twenty ticks of idleness; with nothing held the store reports nothing to wait for, so the
    # reclaimer looks at the start and then once a lease (a loaded machine only looks less).
    async with working(durable, body, Observed(), tick=timedelta(milliseconds=50)):
        await asyncio.sleep(1.0)
    assert 1 <= scheduler.calls["reclaim"] <= 5, scheduler.calls


async def test_a_renewed_abandoned_delivery_is_taken_over_after_its_later_lapse() -> None:
    checkpointer, memory = stores(lease=timedelta(milliseconds=400))
    scheduler = CountingScheduler(memory)
    durable = SplitDurable(checkpointer, scheduler)
    observed = Observed()
    workflow = workflow_id()

    async def body(run: Run) -> int:
        return await run.step("ran", lambda: 1, as_int)

    # Another worker took the workflow and renewed its delivery once before dying: the
    # reclaimer, woken by the first lapse it was told of, must find the later one and wait.
    await memory.make_ready(workflow)
    abandoned = await memory.next_ready(WITHIN)
    assert abandoned is not None
    async with working(durable, body, observed, tick=timedelta(milliseconds=50)):
        await asyncio.sleep(0.2)
        assert await memory.extend(abandoned, memory.lease) is not None
        await observed.until(lambda: observed.completed(workflow))
    assert scheduler.reclaimed == 1
    assert observed.kinds(workflow).count("started") == 1


async def test_a_reclaimed_workflow_whose_claim_outlives_its_delivery_is_taken_as_it_lapses() -> (
    None
):
    checkpointer, memory = stores(lease=timedelta(milliseconds=400))
    scheduler = CountingScheduler(memory)
    durable = SplitDurable(checkpointer, scheduler)
    observed = Observed()
    workflow = workflow_id()

    async def body(run: Run) -> int:
        return await run.step("ran", lambda: 1, as_int)

    # A worker took the workflow, wrote (a sign of life for the claim, not yet for the
    # delivery) and died: its claim lapses after its delivery does, within a tick.
    await memory.make_ready(workflow)
    assert await memory.next_ready(WITHIN) is not None
    dead = await checkpointer.claim(workflow, timedelta(minutes=1), timedelta(milliseconds=550))
    assert dead is not None
    async with working(durable, body, observed, tick=timedelta(milliseconds=100)):
        await observed.until(lambda: observed.completed(workflow))
    assert scheduler.reclaimed == 1
    # Taken as the claim lapsed, by the pass that reclaimed it: not handed back to look again.
    assert scheduler.calls["wake_at"] == 0
    assert observed.kinds(workflow).count("started") == 1


class HeldDones(CountingScheduler):
    """A queue whose `done` waits for `gate`: a finish still on its way to the store."""

    def __init__(self, inner: Scheduler) -> None:
        super().__init__(inner)
        self.gate = asyncio.Event()
        self.held: list[str] = []

    async def done(self, delivery: Delivery) -> None:
        self.held.append(delivery.workflow)
        await self.gate.wait()
        await super().done(delivery)


async def test_a_pass_frees_its_slot_when_its_body_ends_not_when_its_finish_lands() -> None:
    checkpointer, memory = stores()
    scheduler = HeldDones(memory)
    durable = SplitDurable(checkpointer, scheduler)
    observed = Observed()
    first, second = workflow_id(), workflow_id()
    bodies = 0
    most = 0

    async def body(run: Run) -> str:
        nonlocal bodies, most
        bodies += 1
        most = max(most, bodies)
        try:
            return await run.step("one", lambda: run.workflow, as_text)
        finally:
            bodies -= 1

    async with working(durable, body, observed, pool=1):
        await durable.arrive(first, "go", True)
        await observed.until(lambda: scheduler.held == [first])
        await durable.arrive(second, "go", True)
        # The first's finish has not landed, yet the one slot runs the second's body.
        await observed.until(lambda: scheduler.held == [first, second])
        assert observed.kinds(second)[:2] == ["delivered", "started"]
        assert scheduler.calls["done"] == 0
        scheduler.gate.set()
        await observed.until(lambda: observed.completed(first) and observed.completed(second))
    assert most == 1  # still one body at a time
    assert scheduler.calls["done"] == 2


async def test_a_drain_waits_for_a_finish_on_its_way_and_hands_nothing_back() -> None:
    checkpointer, memory = stores()
    scheduler = HeldDones(memory)
    durable = SplitDurable(checkpointer, scheduler)
    observed = Observed()
    drain = asyncio.Event()
    workflow = workflow_id()

    async def body(run: Run) -> str:
        return await run.step("one", lambda: "done", as_text)

    task = asyncio.create_task(
        work(durable, body, observer=observed, tick=TICK, within=WITHIN, stop=drain, pool=1)
    )
    try:
        await durable.arrive(workflow, "go", True)
        await observed.until(lambda: scheduler.held == [workflow])
        drain.set()
        await asyncio.sleep(3 * TICK.total_seconds())
        assert not task.done()  # the finish is still on its way: the drain waits for it
        scheduler.gate.set()
        await asyncio.wait_for(task, 5)
    finally:
        await stop(task)
    assert observed.completed(workflow)
    assert scheduler.calls["done"] == 1 and scheduler.calls["wake_at"] == 0  # not handed back
    assert await memory.next_ready(timedelta(milliseconds=1)) is None


class ManyTaking(SplitDurable):
    """A durable that takes many in one move (`TakingMany`), over memory: each move is one
    take that waits, then glances for as many more as there is room for."""

    def __init__(self, checkpointer: MemoryCheckpointer, scheduler: MemoryScheduler) -> None:
        super().__init__(checkpointer, scheduler)
        self.rooms: list[int] = []
        self.alone = 0

    async def take(self, within: timedelta, budget: timedelta, alive: timedelta) -> Taken | None:
        self.alone += 1
        return await self._take(within, budget, alive)

    async def _take(self, within: timedelta, budget: timedelta, alive: timedelta) -> Taken | None:
        return await super().take(within, budget, alive)

    async def take_up_to(
        self, room: Callable[[], int], within: timedelta, budget: timedelta, alive: timedelta
    ) -> list[Taken]:
        wanted = room()
        self.rooms.append(wanted)
        first = await self._take(within, budget, alive)
        taken = [] if first is None else [first]
        while taken and len(taken) < wanted:
            more = await self._take(timedelta(milliseconds=1), budget, alive)
            if more is None:
                break
            taken.append(more)
        return taken


async def _arrived(kind: type[ManyTaking], count: int) -> tuple[ManyTaking, list[str]]:
    """A `kind` over fresh memory stores, with `count` workflows arrived."""
    durable = kind(*stores())
    workflows = [workflow_id() for _ in range(count)]
    for workflow in workflows:
        await durable.arrive(workflow, "go", True)
    return durable, workflows


async def test_a_store_that_takes_many_is_asked_for_as_many_as_there_are_free_slots() -> None:
    durable, workflows = await _arrived(ManyTaking, 6)
    assert isinstance(durable, TakingMany)
    observed = Observed()
    held = Holding()
    async with working(durable, held.body, observed, pool=4):
        await observed.until(lambda: held.inside == 4)
        await asyncio.sleep(3 * TICK.total_seconds())  # full: nothing more is asked for
        assert durable.rooms == [4] and held.inside == 4
        held.gate.set()
        await observed.until(lambda: all(observed.completed(w) for w in workflows))
    assert durable.alone == 0  # never one slot's take at a time
    assert held.most == 4
    assert durable.rooms[1] > 1  # the four ended together: the next ask is not one slot's


class ManyTakingWithFinishes(ManyTaking):
    """`ManyTaking` whose reads go with the finishes of their turn (as Redis's do)."""

    reads_with_finishes = True


async def test_a_store_that_reads_with_its_finishes_is_asked_for_half_the_pool_at_most() -> None:
    durable, workflows = await _arrived(ManyTakingWithFinishes, 10)
    observed = Observed()
    held = Holding()
    async with working(durable, held.body, observed, pool=4):
        await observed.until(lambda: held.inside == 4)  # two reads of two fill the pool
        await asyncio.sleep(3 * TICK.total_seconds())
        assert durable.rooms == [2, 2] and held.inside == 4
        held.gate.set()
        await observed.until(lambda: all(observed.completed(w) for w in workflows))
    assert max(durable.rooms) == 2 and held.most == 4
