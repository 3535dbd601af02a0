"""`Run` and `resume` over the memory checkpointer, with a hand-moved clock.

Each pass is driven by hand the way a worker drives one: claim, resume, release. Time is the
injected clock, so a three-day sleep or a lapsed claim costs nothing to reach.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest

from durability.codec import as_int, as_json, as_list, as_text
from durability.interfaces import (
    INBOX,
    Contended,
    Effect,
    Entry,
    Fenced,
    Pass,
    Recorded,
    Written,
    claimed,
    inbox_key,
)
from durability.memory import MemoryCheckpointer, MemoryEffect, MemoryScheduler
from durability.split import SplitDurable
from durability.stepwise import (
    Blocked,
    Completed,
    InputNeeded,
    Run,
    ScheduledWakeup,
    Sleeping,
    Suspended,
    Swallowed,
    resume,
)

T0 = datetime(2030, 1, 1, tzinfo=UTC)
BUDGET = timedelta(minutes=5)
ALIVE = timedelta(seconds=30)
_ids = itertools.count()


def workflow_id() -> str:
    return f"stepwise-test-{next(_ids)}"


class Clock:
    """A hand-moved clock shared by the store and the run."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, by: timedelta) -> None:
        self.now += by


class Watched:
    """A checkpointer that logs which methods were called, with their duration arguments."""

    def __init__(self, inner: MemoryCheckpointer) -> None:
        self.inner = inner
        self.calls: list[tuple[str, tuple[timedelta, ...]]] = []

    def count(self, name: str) -> int:
        return sum(1 for called, _ in self.calls if called == name)

    async def claim(self, workflow: str, budget: timedelta, alive: timedelta) -> Pass | None:
        self.calls.append(("claim", (budget, alive)))
        return await self.inner.claim(workflow, budget, alive)

    async def load(self, workflow: str) -> dict[str, object]:
        self.calls.append(("load", ()))
        return await self.inner.load(workflow)

    async def history(self, workflow: str) -> list[Written]:
        self.calls.append(("history", ()))
        return await self.inner.history(workflow)

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        self.calls.append(("record", ()))
        return await self.inner.record(holder, key, value)

    async def transact(self, holder: Pass, key: str, effect: Effect) -> Recorded:
        self.calls.append(("transact", ()))
        return await self.inner.transact(holder, key, effect)

    async def supply(self, workflow: str, key: str, value: object) -> Recorded:
        self.calls.append(("supply", ()))
        return await self.inner.supply(workflow, key, value)

    async def append(self, workflow: str, value: object) -> Entry:
        self.calls.append(("append", ()))
        return await self.inner.append(workflow, value)

    async def extend(self, holder: Pass, budget: timedelta, alive: timedelta) -> Pass:
        self.calls.append(("extend", (budget, alive)))
        return await self.inner.extend(holder, budget, alive)

    async def renew(self, holder: Pass, alive: timedelta) -> None:
        self.calls.append(("renew", (alive,)))
        await self.inner.renew(holder, alive)

    async def discard(self, workflow: str) -> int:
        self.calls.append(("discard", ()))
        return await self.inner.discard(workflow)

    async def release(self, holder: Pass) -> None:
        self.calls.append(("release", ()))
        await self.inner.release(holder)


Body = Callable[[Run], Awaitable[object]]


async def one_pass(
    checkpointer: MemoryCheckpointer, workflow: str, body: Body, clock: Clock
) -> Completed[object] | Sleeping | Blocked:
    """Claim, resume and release, as a worker's pass does."""
    holder = await claimed(checkpointer, workflow, BUDGET, ALIVE)
    try:
        return await resume(holder, checkpointer, body, clock=clock)
    finally:
        await checkpointer.release(holder)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> MemoryCheckpointer:
    return MemoryCheckpointer(clock=clock)


# --- 3. a step's window stretches the claim before its effect -----------------------------


async def test_step_within_extends_the_budget_before_the_effect_runs(clock: Clock) -> None:
    checkpointer = Watched(MemoryCheckpointer(clock=clock))
    holder = await claimed(checkpointer, workflow_id(), timedelta(minutes=1), ALIVE)
    run = Run(holder, checkpointer, {}, clock=clock)
    extends_seen_by_effect: list[int] = []

    def transcode() -> str:
        extends_seen_by_effect.append(checkpointer.count("extend"))
        # Far past the one-minute budget the pass was claimed with: only the stretch that
        # happened before this line lets the record below land.
        clock.advance(timedelta(minutes=8))
        return "transcoded"

    result = await run.step("transcode", transcode, as_text, within=timedelta(minutes=10))

    assert result == "transcoded"
    assert extends_seen_by_effect == [1]
    assert run.holder.budget_ends == T0 + timedelta(minutes=10)


async def test_step_within_is_not_sent_to_the_store_when_the_budget_covers_it(
    clock: Clock,
) -> None:
    checkpointer = Watched(MemoryCheckpointer(clock=clock))
    long_lived = timedelta(minutes=10)
    holder = await claimed(checkpointer, workflow_id(), timedelta(minutes=10), long_lived)
    run = Run(holder, checkpointer, {}, clock=clock)

    await run.step("cheap", lambda: 1, as_int, within=timedelta(minutes=2))
    clock.advance(timedelta(minutes=5))
    # Five minutes of ten left: exactly enough, still no need to ask.
    await run.step("cheap-too", lambda: 2, as_int, within=timedelta(minutes=5))

    assert checkpointer.count("extend") == 0
    assert run.holder.budget_ends == T0 + timedelta(minutes=10)


async def test_step_within_shorter_than_what_is_left_never_shortens_the_budget(
    clock: Clock,
) -> None:
    checkpointer = Watched(MemoryCheckpointer(clock=clock))
    long_lived = timedelta(minutes=10)
    holder = await claimed(checkpointer, workflow_id(), timedelta(minutes=10), long_lived)
    run = Run(holder, checkpointer, {}, clock=clock)
    clock.advance(timedelta(minutes=9))

    await run.step("short", lambda: 1, as_int, within=timedelta(minutes=3))
    # The claim now reaches 12 minutes; a later window of 1 minute must leave it there.
    await run.step("shorter", lambda: 2, as_int, within=timedelta(minutes=1))
    clock.advance(timedelta(minutes=2, seconds=30))

    assert checkpointer.count("extend") == 1
    assert run.holder.budget_ends == T0 + timedelta(minutes=12)
    renewed = await checkpointer.inner.extend(run.holder, timedelta(seconds=1), ALIVE)
    assert renewed.budget_ends == T0 + timedelta(minutes=12)


async def test_a_window_is_the_sign_of_life_when_nobody_renews_the_claim(clock: Clock) -> None:
    checkpointer = Watched(MemoryCheckpointer(clock=clock))
    holder = await claimed(checkpointer, workflow_id(), timedelta(minutes=1), ALIVE)
    run = Run(holder, checkpointer, {}, clock=clock)

    def slow() -> int:
        clock.advance(timedelta(minutes=4))  # far past the 30 s a claim is alive for
        return 4

    assert await run.step("slow", slow, as_int, within=timedelta(minutes=5)) == 4
    assert checkpointer.calls[-2] == ("extend", (timedelta(minutes=5), timedelta(minutes=5)))


async def test_under_a_worker_a_window_leaves_liveness_to_the_renewals(clock: Clock) -> None:
    checkpointer = Watched(MemoryCheckpointer(clock=clock))
    holder = await claimed(checkpointer, workflow_id(), timedelta(minutes=1), ALIVE)
    run = Run(holder, checkpointer, {}, clock=clock, kept=True)

    def wedged() -> int:
        clock.advance(timedelta(minutes=2))  # nobody renewed it meanwhile: the worker died
        return 2

    with pytest.raises(Fenced):
        await run.step("wedged", wedged, as_int, within=timedelta(minutes=5))
    names = [name for name, _ in checkpointer.calls]
    # the stretch came just before the refused record (then a look: was it a cancel?)
    stretched = ("extend", (timedelta(minutes=5), ALIVE))
    assert checkpointer.calls[names.index("record") - 1] == stretched


# --- 4. a step runs once ------------------------------------------------------------------


async def test_a_step_runs_once_and_later_passes_get_the_recorded_value(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    workflow = workflow_id()
    calls: list[int] = []

    def charge() -> str:
        calls.append(1)
        return f"charge-{len(calls)}"

    async def body(run: Run) -> str:
        return await run.step("charged", charge, as_text)

    first = await one_pass(store, workflow, body, clock)
    again = await one_pass(store, workflow, body, clock)
    third = await one_pass(store, workflow, body, clock)

    assert first == again == third == Completed("charge-1")
    assert calls == [1]
    assert await store.load(workflow) == {"charged": "charge-1"}


async def test_an_async_step_is_awaited_and_recorded(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    async def fetch() -> list[object]:
        await asyncio.sleep(0)
        return [1, "two"]

    async def body(run: Run) -> list[object]:
        return await run.step("fetched", fetch, as_list)

    workflow = workflow_id()
    assert await one_pass(store, workflow, body, clock) == Completed([1, "two"])
    assert await store.load(workflow) == {"fetched": [1, "two"]}


async def test_two_branches_asking_for_one_key_run_it_once(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    calls: list[int] = []

    async def reserve() -> int:
        calls.append(1)
        await asyncio.sleep(0)  # both branches are inside the step at once
        await asyncio.sleep(0)
        return 7

    async def body(run: Run) -> list[int]:
        return list(
            await asyncio.gather(
                run.step("reserved", reserve, as_int), run.step("reserved", reserve, as_int)
            )
        )

    assert await one_pass(store, workflow_id(), body, clock) == Completed([7, 7])
    assert calls == [1]


async def test_two_branches_asking_for_one_failing_key_run_it_once_and_both_see_it_fail(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    calls: list[int] = []

    async def reserve() -> int:
        calls.append(1)
        await asyncio.sleep(0)  # both branches are inside the step at once
        await asyncio.sleep(0)
        raise LookupError("out of stock")

    seen: list[BaseException] = []

    async def body(run: Run) -> None:
        results = await asyncio.gather(
            run.step("reserved", reserve, as_int),
            run.step("reserved", reserve, as_int),
            return_exceptions=True,
        )
        seen.extend(result for result in results if isinstance(result, BaseException))

    assert await one_pass(store, workflow_id(), body, clock) == Completed(None)
    assert calls == [1]
    assert [type(error) for error in seen] == [LookupError, LookupError]


async def test_transact_applies_the_effect_with_its_record_once(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    workflow = workflow_id()
    stock = {"sku": 10}

    def take() -> int:
        stock["sku"] -= 1
        return stock["sku"]

    async def body(run: Run) -> int:
        return await run.transact("reserved", MemoryEffect(take), as_int)

    assert await one_pass(store, workflow, body, clock) == Completed(9)
    assert await one_pass(store, workflow, body, clock) == Completed(9)
    assert stock == {"sku": 9}
    assert await store.load(workflow) == {"reserved": 9}


async def test_a_superseded_pass_applies_neither_effect_nor_record(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    workflow = workflow_id()
    stock = {"sku": 10}

    def take() -> int:
        stock["sku"] -= 1
        return stock["sku"]

    stale = await claimed(store, workflow, BUDGET, ALIVE)
    clock.advance(ALIVE)
    await claimed(store, workflow, BUDGET, ALIVE)  # a newer pass: the stale one is fenced

    async def body(run: Run) -> int:
        return await run.transact("reserved", MemoryEffect(take), as_int)

    with pytest.raises(Fenced):
        await resume(stale, store, body, clock=clock)
    assert stock == {"sku": 10}
    assert await store.load(workflow) == {}


async def test_a_lapsed_pass_applies_neither_effect_nor_record(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    workflow = workflow_id()
    applied: list[int] = []
    lapsed = await claimed(store, workflow, BUDGET, ALIVE)
    clock.advance(ALIVE)

    async def body(run: Run) -> object:
        return await run.transact("x", MemoryEffect(lambda: applied.append(1)), as_json)

    with pytest.raises(Fenced):
        await resume(lapsed, store, body, clock=clock)
    assert applied == []
    assert await store.load(workflow) == {}


async def test_transact_refuses_an_effect_of_another_store(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    class Foreign(Effect):
        __slots__ = ()

    async def body(run: Run) -> object:
        return await run.transact("x", Foreign(), as_json)

    with pytest.raises(TypeError):
        await one_pass(store, workflow_id(), body, clock)


# --- 5. sleep records a deadline ----------------------------------------------------------


async def test_sleep_records_the_deadline_and_a_resumed_pass_keeps_it(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    workflow = workflow_id()
    due = T0 + timedelta(days=3)

    async def body(run: Run) -> str:
        await run.sleep("settle", timedelta(days=3))
        return await run.step("paid", lambda: "paid", as_text)

    assert await one_pass(store, workflow, body, clock) == Sleeping("settle", due)
    recorded = (await store.load(workflow))["settle"]
    assert isinstance(recorded, str)
    assert datetime.fromisoformat(recorded) == due

    # The worker crashed; a day later another one resumes with a fresh Run.
    clock.advance(timedelta(days=1))
    assert await one_pass(store, workflow, body, clock) == Sleeping("settle", due)

    clock.advance(timedelta(days=2) - timedelta(seconds=1))
    assert await one_pass(store, workflow, body, clock) == Sleeping("settle", due)

    clock.advance(timedelta(seconds=1))
    assert await one_pass(store, workflow, body, clock) == Completed("paid")


async def test_sleep_until_records_the_moment_given(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    workflow = workflow_id()
    when = T0 + timedelta(hours=5)

    async def body(run: Run) -> str:
        await run.sleep_until("cutoff", when)
        return "after"

    assert await one_pass(store, workflow, body, clock) == Sleeping("cutoff", when)
    clock.advance(timedelta(hours=5))
    assert await one_pass(store, workflow, body, clock) == Completed("after")


@pytest.mark.parametrize("duration", [timedelta(0), timedelta(seconds=-1)])
async def test_sleep_refuses_a_duration_that_is_not_positive(
    store: MemoryCheckpointer, clock: Clock, duration: timedelta
) -> None:
    holder = await claimed(store, workflow_id(), BUDGET, ALIVE)
    run = Run(holder, store, {}, clock=clock)
    with pytest.raises(ValueError, match="duration"):
        await run.sleep("nap", duration)
    assert await store.load(holder.workflow) == {}


# --- 6. awaiting --------------------------------------------------------------------------


async def test_awaiting_blocks_until_the_value_arrives(clock: Clock) -> None:
    store = MemoryCheckpointer(clock=clock)
    durable = SplitDurable(store, MemoryScheduler(clock=clock))
    workflow = workflow_id()

    async def body(run: Run) -> str:
        approver = await run.awaiting("approved-by", as_text)
        return await run.step("paid", lambda: f"paid, approved by {approver}", as_text)

    waiting = Blocked(waiting=frozenset({"approved-by"}))
    assert await one_pass(store, workflow, body, clock) == waiting
    assert await one_pass(store, workflow, body, clock) == waiting

    await durable.arrive(workflow, "approved-by", "ada")
    delivery = await durable.scheduler.next_ready(timedelta(milliseconds=1))
    assert delivery is not None and delivery.workflow == workflow
    assert await one_pass(store, workflow, body, clock) == Completed("paid, approved by ada")


# --- 7. the inbox -------------------------------------------------------------------------


def test_inbox_keys_sort_in_append_order_across_every_width() -> None:
    numbers = [1, 9, 10, 11, 99, 100, 101, 999, 1000, 999_999, 10**6, 10**6 + 1, 10**12]
    keys = [inbox_key(n) for n in numbers]
    assert sorted(keys) == keys
    assert all(key.startswith(INBOX) for key in keys)
    assert len({len(key) for key in keys}) == 1


async def test_receive_suspends_on_an_empty_inbox(store: MemoryCheckpointer, clock: Clock) -> None:
    async def body(run: Run) -> list[Entry]:
        return await run.receive("heard")

    workflow = workflow_id()
    assert await one_pass(store, workflow, body, clock) == Blocked(
        listening=frozenset({"heard"})
    )
    assert await store.load(workflow) == {}  # a read that suspended records nothing


async def test_receive_takes_at_most_limit_and_replays_the_same_take(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    workflow = workflow_id()
    sent = [await store.append(workflow, f"message {n}") for n in range(3)]

    async def body(run: Run) -> list[object]:
        heard = await run.receive("heard", limit=2)
        return [entry.value for entry in heard]

    assert await one_pass(store, workflow, body, clock) == Completed(["message 0", "message 1"])
    assert (await store.load(workflow))["heard"] == sent[1].key
    await store.append(workflow, "message 3")
    assert await one_pass(store, workflow, body, clock) == Completed(["message 0", "message 1"])


async def test_receive_returns_only_entries_past_the_cursor(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    workflow = workflow_id()
    first = await store.append(workflow, "old")

    async def body(run: Run) -> list[object]:
        return [entry.value for entry in await run.receive("next", after=first.key)]

    assert await one_pass(store, workflow, body, clock) == Blocked(listening=frozenset({"next"}))
    await store.append(workflow, "new")
    assert await one_pass(store, workflow, body, clock) == Completed(["new"])


async def test_pending_never_suspends(store: MemoryCheckpointer, clock: Clock) -> None:
    workflow = workflow_id()

    async def body(run: Run) -> list[Entry]:
        return await run.pending("whatever")

    assert await one_pass(store, workflow, body, clock) == Completed([])
    # A read is a step: the later pass replays the empty take rather than reading anew.
    await store.append(workflow, "late")
    assert await one_pass(store, workflow, body, clock) == Completed([])


async def test_an_entry_appended_during_a_pass_waits_for_the_next_pass(clock: Clock) -> None:
    store = MemoryCheckpointer(clock=clock)
    durable = SplitDurable(store, MemoryScheduler(clock=clock))
    workflow = workflow_id()
    appended: list[Entry] = []

    async def body(run: Run) -> list[object]:
        if not appended:
            appended.append(await durable.deliver(workflow, "mid-pass"))
        peek = await run.pending("peek")
        heard = await run.receive("heard")
        return [[entry.value for entry in peek], [entry.value for entry in heard]]

    assert await one_pass(store, workflow, body, clock) == Blocked(
        listening=frozenset({"heard"})
    )
    ready = await durable.scheduler.next_ready(timedelta(milliseconds=1))
    assert ready is not None and ready.workflow == workflow
    assert await one_pass(store, workflow, body, clock) == Completed([[], ["mid-pass"]])


async def test_many_entries_come_back_in_append_order(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    workflow = workflow_id()
    sent = [await store.append(workflow, n) for n in range(120)]
    assert [entry.key for entry in sent] == sorted(entry.key for entry in sent)

    async def body(run: Run) -> list[object]:
        return [entry.value for entry in await run.receive("all")]

    assert await one_pass(store, workflow, body, clock) == Completed(list(range(120)))


async def test_a_console_threading_its_cursor_reads_every_entry_exactly_once(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    workflow = workflow_id()
    answered: list[object] = []

    async def console(run: Run) -> None:
        cursor: str | None = None
        for turn in itertools.count():
            heard = await run.receive(f"heard:{turn}", after=cursor, limit=2)
            cursor = heard[-1].key
            values = [entry.value for entry in heard]

            def answer(values: list[object] = values) -> int:
                answered.extend(values)
                return len(values)

            await run.step(f"answer:{turn}", answer, as_int)

    sent = 0
    for batch in [3, 0, 1, 5, 0, 2]:
        for _ in range(batch):
            await store.append(workflow, sent)
            sent += 1
        outcome = await one_pass(store, workflow, console, clock)
        assert isinstance(outcome, Blocked) and len(outcome.listening) == 1
    assert answered == list(range(sent))


# --- 8. what a pass reports, whatever combinator it used ----------------------------------


BOTH = Blocked(waiting=frozenset({"approved"}), listening=frozenset({"heard"}))


async def with_task_group(run: Run) -> object:
    async with asyncio.TaskGroup() as group:
        group.create_task(run.awaiting("approved", as_text))
        group.create_task(run.receive("heard"))
    return "unreachable"


async def with_gather(run: Run) -> object:
    return await asyncio.gather(run.awaiting("approved", as_text), run.receive("heard"))


async def with_gather_returning_exceptions(run: Run) -> object:
    results = await asyncio.gather(
        run.awaiting("approved", as_text), run.receive("heard"), return_exceptions=True
    )
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


async def with_wait(run: Run) -> object:
    tasks = [
        asyncio.create_task(run.awaiting("approved", as_text)),
        asyncio.create_task(run.receive("heard")),
    ]
    done, _ = await asyncio.wait(tasks)
    return [task.result() for task in done]


@pytest.mark.parametrize(
    "body",
    [with_task_group, with_gather, with_gather_returning_exceptions, with_wait],
    ids=["TaskGroup", "gather", "gather-return-exceptions", "wait"],
)
async def test_a_pass_waiting_on_two_things_reports_both(
    store: MemoryCheckpointer, clock: Clock, body: Body
) -> None:
    assert await one_pass(store, workflow_id(), body, clock) == BOTH


async def test_two_awaited_keys_are_both_reported(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    async def body(run: Run) -> object:
        async with asyncio.TaskGroup() as group:
            group.create_task(run.awaiting("finance", as_text))
            group.create_task(run.awaiting("legal", as_text))
            group.create_task(run.step("drafted", lambda: "draft", as_text))
        finance, legal = run.awaiting("finance", as_text), run.awaiting("legal", as_text)
        return await asyncio.gather(finance, legal)

    workflow = workflow_id()
    assert await one_pass(store, workflow, body, clock) == Blocked(
        waiting=frozenset({"finance", "legal"})
    )
    assert await store.load(workflow) == {"drafted": "draft"}
    await store.supply(workflow, "legal", "ok")
    assert await one_pass(store, workflow, body, clock) == Blocked(waiting=frozenset({"finance"}))
    await store.supply(workflow, "finance", "ok")
    assert await one_pass(store, workflow, body, clock) == Completed(["ok", "ok"])


async def test_a_sleep_beside_a_wait_reports_the_sleep(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    async def body(run: Run) -> object:
        async with asyncio.TaskGroup() as group:
            group.create_task(run.awaiting("approved", as_text))
            group.create_task(run.sleep("cool-off", timedelta(hours=1)))
            group.create_task(run.sleep("later", timedelta(hours=2)))
        return None

    workflow = workflow_id()
    assert await one_pass(store, workflow, body, clock) == Sleeping(
        "cool-off", T0 + timedelta(hours=1)
    )
    clock.advance(timedelta(hours=1))
    assert await one_pass(store, workflow, body, clock) == Sleeping(
        "later", T0 + timedelta(hours=2)
    )
    clock.advance(timedelta(hours=1))
    assert await one_pass(store, workflow, body, clock) == Blocked(
        waiting=frozenset({"approved"})
    )


async def test_a_body_that_returns_after_catching_a_suspension_is_refused(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    async def body(run: Run) -> str:
        try:
            await run.awaiting("approved", as_text)
        except BaseException:
            return "carried on"
        return "approved"

    with pytest.raises(Swallowed) as caught:
        await one_pass(store, workflow_id(), body, clock)
    assert caught.value.keys == frozenset({"approved"})


async def test_a_body_that_returns_what_gather_captured_is_refused(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    async def body(run: Run) -> int:
        results = await asyncio.gather(
            run.awaiting("approved", as_text), run.receive("heard"), return_exceptions=True
        )
        return len(results)

    with pytest.raises(Swallowed) as caught:
        await one_pass(store, workflow_id(), body, clock)
    assert caught.value.keys == frozenset({"approved", "heard"})


def test_signals_are_not_exceptions() -> None:
    for signal in (Suspended, Fenced, Contended):
        assert issubclass(signal, BaseException)
        assert not issubclass(signal, Exception)


async def test_except_exception_does_not_catch_a_suspension(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    async def body(run: Run) -> str:
        try:
            await run.awaiting("approved", as_text)
        except Exception:
            return "rolled back"
        return "approved"

    assert await one_pass(store, workflow_id(), body, clock) == Blocked(
        waiting=frozenset({"approved"})
    )


async def test_except_exception_does_not_catch_fenced(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    workflow = workflow_id()
    stale = await claimed(store, workflow, BUDGET, ALIVE)
    clock.advance(ALIVE)
    await claimed(store, workflow, BUDGET, ALIVE)
    compensated: list[str] = []

    async def body(run: Run) -> str:
        try:
            return await run.step("charged", lambda: "charged", as_text)
        except Exception:
            compensated.append("refund")
            return "rolled back"

    with pytest.raises(Fenced):
        await resume(stale, store, body, clock=clock)
    assert compensated == []


async def test_except_exception_does_not_catch_contended(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    other = workflow_id()
    await claimed(store, other, BUDGET, ALIVE)

    async def body(run: Run) -> str:
        try:
            await claimed(store, other)
        except Exception:
            return "caught"
        return "claimed"

    with pytest.raises(Contended):
        await one_pass(store, workflow_id(), body, clock)


async def test_fenced_inside_a_task_group_comes_out_unwrapped(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    workflow = workflow_id()
    stale = await claimed(store, workflow, BUDGET, ALIVE)
    clock.advance(ALIVE)
    await claimed(store, workflow, BUDGET, ALIVE)

    async def body(run: Run) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(run.step("a", lambda: 1, as_int))
            group.create_task(run.awaiting("b", as_text))

    with pytest.raises(Fenced) as caught:
        await resume(stale, store, body, clock=clock)
    assert type(caught.value) is Fenced
    assert await store.load(workflow) == {}


async def test_a_failure_inside_a_task_group_is_raised_not_reported(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    def broken() -> int:
        raise LookupError("no such sku")

    async def body(run: Run) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(run.step("a", broken, as_int))
            group.create_task(run.awaiting("b", as_text))

    with pytest.raises(BaseExceptionGroup) as caught:
        await one_pass(store, workflow_id(), body, clock)
    assert caught.group_contains(LookupError)


# --- every Run method, end to end ---------------------------------------------------------


async def test_a_body_using_every_run_method_resumes_to_completion(clock: Clock) -> None:
    store = MemoryCheckpointer(clock=clock)
    durable = SplitDurable(store, MemoryScheduler(clock=clock))
    workflow = workflow_id()
    effects: list[str] = []
    ledger: list[int] = []
    cutoff = T0 + timedelta(days=4)

    def capture(sku: str) -> Callable[[], str]:
        def charge() -> str:
            effects.append(f"capture {sku}")
            return f"captured {sku}"

        return charge

    def book() -> int:
        ledger.append(1)
        return len(ledger)

    def pay() -> str:
        effects.append("pay")
        return "paid"

    async def payout(run: Run) -> dict[str, object]:
        assert run.workflow == workflow
        items = await run.step("items", lambda: ["apple", "pear"], as_list)
        captured = [await run.step(f"capture:{sku}", capture(str(sku)), as_text) for sku in items]
        booked = await run.transact("booked", MemoryEffect(book), as_int)
        await run.sleep("settle", timedelta(days=3))
        await run.sleep_until("cutoff", cutoff)
        approver = await run.awaiting("approved-by", as_text)
        notes = await run.receive("notes", limit=1)
        more = await run.pending("more-notes", after=notes[-1].key)
        paid = await run.step("paid", pay, as_text, within=timedelta(minutes=20))
        assert run.now() == clock.now
        assert "paid" in run.records
        return {
            "captured": captured,
            "booked": booked,
            "approver": approver,
            "notes": [entry.value for entry in notes + more],
            "paid": paid,
        }

    outcomes: list[object] = [await one_pass(store, workflow, payout, clock)]
    clock.advance(timedelta(days=3))
    outcomes.append(await one_pass(store, workflow, payout, clock))
    clock.advance(timedelta(days=1))
    outcomes.append(await one_pass(store, workflow, payout, clock))
    await durable.arrive(workflow, "approved-by", "grace")
    outcomes.append(await one_pass(store, workflow, payout, clock))
    await durable.deliver(workflow, "first note")
    await durable.deliver(workflow, "second note")
    outcomes.append(await one_pass(store, workflow, payout, clock))
    outcomes.append(await one_pass(store, workflow, payout, clock))

    done = Completed(
        {
            "captured": ["captured apple", "captured pear"],
            "booked": 1,
            "approver": "grace",
            "notes": ["first note", "second note"],
            "paid": "paid",
        }
    )
    assert outcomes == [
        Sleeping("settle", T0 + timedelta(days=3)),
        Sleeping("cutoff", cutoff),
        Blocked(waiting=frozenset({"approved-by"})),
        Blocked(listening=frozenset({"notes"})),
        done,
        done,
    ]
    assert effects == ["capture apple", "capture pear", "pay"]
    assert ledger == [1]
    keys = [key for key in await store.load(workflow) if not key.startswith(INBOX)]
    assert keys == [
        "items",
        "capture:apple",
        "capture:pear",
        "booked",
        "settle",
        "cutoff",
        "approved-by",
        "notes",
        "more-notes",
        "paid",
    ]


# --- 12. a step's window ------------------------------------------------------------------


@pytest.mark.parametrize("within", [timedelta(0), timedelta(milliseconds=-5)])
async def test_a_step_refuses_a_window_that_is_not_positive(
    store: MemoryCheckpointer, clock: Clock, within: timedelta
) -> None:
    holder = await claimed(store, workflow_id(), BUDGET, ALIVE)
    run = Run(holder, store, {}, clock=clock)
    ran: list[int] = []
    with pytest.raises(ValueError, match="within"):
        await run.step("x", lambda: ran.append(1), as_json, within=within)
    assert ran == []


# --- 13. what a pass reports when it fails, and a suspension it did not raise ------------------


def no_such_sku() -> int:
    raise LookupError("no such sku")


async def test_a_failure_beside_a_suspension_is_raised_alone_as_an_exception_group(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    async def body(run: Run) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(run.step("a", no_such_sku, as_int))
            group.create_task(run.awaiting("b", as_text))
            group.create_task(run.sleep("c", timedelta(hours=1)))

    with pytest.raises(ExceptionGroup) as caught:
        await one_pass(store, workflow_id(), body, clock)
    # An ordinary ExceptionGroup of the failures alone: `except Exception` is the whole net.
    assert type(caught.value) is ExceptionGroup
    assert [type(leaf) for leaf in caught.value.exceptions] == [LookupError]
    assert not caught.group_contains(Suspended)


async def test_a_failure_is_raised_unchanged(store: MemoryCheckpointer, clock: Clock) -> None:
    async def body(run: Run) -> int:
        return await run.step("a", no_such_sku, as_int)

    with pytest.raises(LookupError, match="no such sku"):
        await one_pass(store, workflow_id(), body, clock)


class Foreign(BaseException):
    """A library's own BaseException: not a failure type the body's `except Exception` sees."""


async def test_a_foreign_base_exception_beside_a_suspension_keeps_its_kind(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    def foreign() -> int:
        raise Foreign("not ours")

    async def body(run: Run) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(run.step("a", foreign, as_int))
            group.create_task(run.awaiting("b", as_text))

    with pytest.raises(BaseExceptionGroup) as caught:
        await one_pass(store, workflow_id(), body, clock)
    assert [type(leaf) for leaf in caught.value.exceptions] == [Foreign]


class SlowWrites(Watched):
    """Records reach the store only when `release_writes` is set, and land even if the pass
    that asked was cancelled meanwhile (a write on the wire, its reply never read)."""

    def __init__(self, inner: MemoryCheckpointer) -> None:
        super().__init__(inner)
        self.in_flight = asyncio.Event()
        self.release_writes = asyncio.Event()
        self.landed: list[asyncio.Task[Recorded]] = []

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        async def land() -> Recorded:
            await self.release_writes.wait()
            return await self.inner.record(holder, key, value)

        task = asyncio.create_task(land())
        self.landed.append(task)
        self.in_flight.set()
        return await asyncio.shield(task)


@pytest.mark.parametrize("sibling", ["suspends", "fails"])
async def test_a_sleep_cut_short_while_its_deadline_is_written_is_still_reported(
    store: MemoryCheckpointer, clock: Clock, sibling: str
) -> None:
    slow = SlowWrites(store)
    workflow = workflow_id()
    seen: list[Run] = []

    async def then_stop(run: Run) -> None:
        await slow.in_flight.wait()  # the sleep's deadline is on its way to the store
        if sibling == "suspends":
            await run.awaiting("approved", as_text)
        raise LookupError("the sibling failed")

    async def body(run: Run) -> None:
        seen.append(run)
        async with asyncio.TaskGroup() as group:
            group.create_task(run.sleep("nap", timedelta(hours=1)))
            group.create_task(then_stop(run))

    holder = await claimed(store, workflow, BUDGET, ALIVE)
    due = T0 + timedelta(hours=1)
    if sibling == "suspends":
        assert await resume(holder, slow, body, clock=clock) == Sleeping("nap", due)
    else:
        with pytest.raises(ExceptionGroup):
            await resume(holder, slow, body, clock=clock)
    # Either way the pass still knows the deadline the store is about to hold.
    assert seen[0].deadline == Sleeping("nap", due)
    slow.release_writes.set()
    await asyncio.gather(*slow.landed)
    assert await store.load(workflow) == {"nap": due.isoformat()}


async def test_a_sleep_that_is_over_by_the_time_it_is_written_leaves_no_deadline(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    class SlowClock(Watched):
        async def record(self, holder: Pass, key: str, value: object) -> Recorded:
            clock.advance(timedelta(seconds=2))  # the write took longer than the sleep
            return await self.inner.record(holder, key, value)

    seen: list[Run] = []

    async def body(run: Run) -> str:
        seen.append(run)
        await run.sleep("blink", timedelta(seconds=1))
        return "awake"

    holder = await claimed(store, workflow_id(), BUDGET, ALIVE)
    assert await resume(holder, SlowClock(store), body, clock=clock) == Completed("awake")
    assert seen[0].deadline is None


async def test_a_suspension_another_run_raised_is_refused(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    other = await claimed(store, workflow_id(), BUDGET, ALIVE)

    async def nested(run: Run) -> str:
        inner = Run(other, store, {}, clock=clock)
        return await inner.awaiting("elsewhere", as_text)

    async def by_hand(run: Run) -> str:
        raise InputNeeded("made up")

    for body in (nested, by_hand):
        with pytest.raises(TypeError, match="did not raise"):
            await one_pass(store, workflow_id(), body, clock)


async def test_a_stray_suspension_among_this_run_s_own_is_refused(
    store: MemoryCheckpointer, clock: Clock
) -> None:
    async def stray() -> None:
        raise ScheduledWakeup("not mine", T0)

    async def body(run: Run) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(run.awaiting("mine", as_text))
            group.create_task(stray())

    with pytest.raises(TypeError, match="not mine") as caught:
        await one_pass(store, workflow_id(), body, clock)
    # Both reached the group: the pass's own suspension does not hide the stray one.
    assert isinstance(caught.value.__cause__, BaseExceptionGroup)
    assert len(caught.value.__cause__.exceptions) == 2


def test_a_blocked_outcome_names_at_least_one_key() -> None:
    with pytest.raises(ValueError, match="at least one key"):
        Blocked()
    with pytest.raises(ValueError):
        Blocked(waiting=frozenset(), listening=frozenset())
    assert Blocked(listening=frozenset({"mail"})).waiting == frozenset()


# --- 14. a store that fails under a pass ------------------------------------------------------


class Flaky(Watched):
    """Fails the first `failures` writes with a connection error; with `landing`, each failed
    write lands before its error (the reply lost on the way back)."""

    def __init__(self, inner: MemoryCheckpointer, failures: int, landing: bool = False) -> None:
        super().__init__(inner)
        self.failures = failures
        self.landing = landing

    async def _fault(self) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionResetError("the connection was cut")

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        self.calls.append(("record", ()))
        if self.landing and self.failures:
            await self.inner.record(holder, key, value)
        await self._fault()
        return await self.inner.record(holder, key, value)

    async def transact(self, holder: Pass, key: str, effect: Effect) -> Recorded:
        self.calls.append(("transact", ()))
        if self.landing and self.failures:
            await self.inner.transact(holder, key, effect)
        await self._fault()
        return await self.inner.transact(holder, key, effect)


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    import durability.faults

    monkeypatch.setattr(durability.faults, "FIRST", timedelta(milliseconds=1))


@pytest.mark.parametrize("landing", [False, True], ids=["lost-write", "lost-reply"])
async def test_a_write_the_store_failed_is_tried_again_and_the_step_runs_once(
    store: MemoryCheckpointer, clock: Clock, landing: bool, quick_retries: None
) -> None:
    flaky = Flaky(store, failures=2, landing=landing)
    workflow = workflow_id()
    ran: list[str] = []
    ledger: list[int] = []

    def charge() -> str:
        ran.append("charge")
        return "charged"

    def book() -> object:
        ledger.append(1)
        return len(ledger)

    async def body(run: Run) -> list[object]:
        charged = await run.step("charged", charge, as_text)
        booked = await run.transact("booked", MemoryEffect(book), as_int)
        return [charged, booked]

    holder = await claimed(store, workflow, BUDGET, ALIVE)
    assert await resume(holder, flaky, body, clock=clock) == Completed(["charged", 1])
    assert ran == ["charge"]
    assert ledger == [1]  # the effect the store performs ran once, even when its reply was lost
    assert flaky.count("record") == 3
    assert await store.load(workflow) == {"charged": "charged", "booked": 1}


async def test_a_store_that_keeps_failing_stops_the_pass_without_running_the_rollback(
    store: MemoryCheckpointer, clock: Clock, quick_retries: None
) -> None:
    from durability.faults import ATTEMPTS, StoreDown

    flaky = Flaky(store, failures=ATTEMPTS)
    compensated: list[str] = []

    async def body(run: Run) -> str:
        try:
            return await run.step("charged", lambda: "charged", as_text)
        except Exception:
            compensated.append("refund")
            raise

    holder = await claimed(store, workflow_id(), BUDGET, ALIVE)
    with pytest.raises(StoreDown) as caught:
        await resume(holder, flaky, body, clock=clock)
    assert isinstance(caught.value.cause, ConnectionResetError)
    assert flaky.count("record") == ATTEMPTS
    assert compensated == []


async def test_the_body_s_own_connection_error_is_its_failure_not_the_store_s(
    store: MemoryCheckpointer, clock: Clock, quick_retries: None
) -> None:
    ran: list[int] = []

    def call_the_gateway() -> str:
        ran.append(1)
        raise ConnectionRefusedError("the gateway is down")

    async def body(run: Run) -> str:
        return await run.step("charged", call_the_gateway, as_text)

    with pytest.raises(ConnectionRefusedError):
        await one_pass(store, workflow_id(), body, clock)
    assert ran == [1]


async def test_a_value_the_store_refuses_is_the_step_failing_and_is_not_tried_again(
    store: MemoryCheckpointer, clock: Clock, quick_retries: None
) -> None:
    from durability.codec import Unencodable

    watched = Watched(store)

    async def body(run: Run) -> object:
        return await run.step("pair", lambda: ("not", "json"), as_json)

    holder = await claimed(store, workflow_id(), BUDGET, ALIVE)
    with pytest.raises(Unencodable):
        await resume(holder, watched, body, clock=clock)
    assert watched.count("record") == 1
