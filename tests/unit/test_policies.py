"""Priorities and limits beyond the store: a scheduler written before them still works, the
worker keeps a delivery's priority and limit through sleeps and retries, a child inherits its
parent's priority, a limit holds under `work`, and the memory scheduler waits without a poll.
The store's own part is the conformance suite's `PolicyContract` (test_memory_conformance)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from durability import Limit, Retry
from durability.bodies import start
from durability.codec import as_int
from durability.interfaces import Durable
from durability.memory import MemoryCheckpointer, MemoryScheduler
from durability.split import SplitDurable
from durability.stepwise import Run
from durability.testing import Observed
from durability.testing.conformance.working import working
from durability.values import Delivery

PATIENCE = 10.0


class _Recording(MemoryScheduler):
    """The memory scheduler, noting every delivery it hands out and every `make_ready`."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.handed: list[Delivery] = []
        self.asked: list[tuple[str, int, Limit | None]] = []

    async def make_ready(
        self, workflow: str, *, priority: int = 0, limit: Limit | None = None
    ) -> None:
        self.asked.append((workflow, priority, limit))
        await super().make_ready(workflow, priority=priority, limit=limit)

    async def next_ready(self, within: timedelta) -> Delivery | None:
        delivery = await super().next_ready(within)
        if delivery is not None:
            self.handed.append(delivery)
        return delivery

    def of(self, workflow: str) -> list[tuple[int, Limit | None]]:
        return [(d.priority, d.limit) for d in self.handed if d.workflow == workflow]


class _Older(MemoryScheduler):
    """A scheduler of one's own written before priorities: `make_ready` takes no keywords."""

    async def make_ready(self, workflow: str) -> None:  # type: ignore[override]
        await super().make_ready(workflow)


def _durable(scheduler: MemoryScheduler) -> Durable:
    return SplitDurable(MemoryCheckpointer(), scheduler)


async def test_an_older_scheduler_without_the_keywords_still_works() -> None:
    durable = _durable(_Older())
    await durable.arrive("a", "order", 1)
    await durable.deliver("b", "hello")
    assert await start(durable, "report", 1, "c")
    observed = Observed(PATIENCE)

    async def body(run: Run) -> str:
        return run.workflow

    async with working(durable, body, observed, pool=2):
        await observed.until(lambda: all(observed.completed(w) for w in "abc"))
    # Asking it for a priority is what it cannot do: said by Python, not lost quietly.
    with pytest.raises(TypeError, match="priority"):
        await durable.arrive("d", "order", 1, priority=3)


async def test_a_sleep_and_a_retry_keep_the_deliverys_priority_and_limit() -> None:
    scheduler = _Recording()
    durable = _durable(scheduler)
    limit = Limit("sleepy", 2)
    failed = [False]

    def flaky() -> int:
        if not failed[0]:
            failed[0] = True
            raise RuntimeError("the first try fails")
        return 1

    async def body(run: Run) -> int:
        await run.sleep("nap", timedelta(milliseconds=20))
        return await run.step("flaky", flaky, as_int)

    assert await start(durable, "job", None, "w", priority=7, limit=limit)
    observed = Observed(PATIENCE)
    retry = Retry(attempts=3, initial=timedelta(milliseconds=20), jitter=0.0)
    async with working(durable, {"job": body}, observed, pool=2, retry=retry):
        await observed.until(lambda: observed.completed("w"))
    passes = scheduler.of("w")
    assert len(passes) == 3  # the first, after the nap, after the retry's pause
    assert passes == [(7, limit)] * 3


async def test_a_child_inherits_its_parents_priority_and_tells_it_at_that_priority() -> None:
    scheduler = _Recording()
    durable = _durable(scheduler)

    async def order(run: Run) -> int:
        return await run.child("refund", "refund", 5, as_int) + 1

    async def refund(run: Run) -> int:
        return -run.input(as_int)

    assert await start(durable, "order", None, "p", priority=9, limit=Limit("orders", 1))
    observed = Observed(PATIENCE)
    async with working(durable, {"order": order, "refund": refund}, observed, pool=2):
        await observed.until(lambda: observed.completed("p"))
    assert scheduler.of("p.refund") == [(9, None)]  # the priority, not the parent's limit
    # The parent's first wakeup, then the one its child's ending gave it.
    assert [(p, lim) for w, p, lim in scheduler.asked if w == "p"] == [
        (9, Limit("orders", 1)),
        (9, None),
    ]


async def test_a_limit_holds_under_work_and_every_workflow_still_runs() -> None:
    durable = _durable(MemoryScheduler())
    limit = Limit("gateway", 2)
    running = most = 0

    async def body(run: Run) -> int:
        nonlocal running, most

        async def call() -> int:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await asyncio.sleep(0.02)
            running -= 1
            return 1

        return await run.step("call", call, as_int)

    names = [f"order-{n}" for n in range(10)]
    for name in names:
        await start(durable, "pay", None, name, limit=limit)
    observed = Observed(PATIENCE)
    async with working(durable, {"pay": body}, observed, pool=8):
        await observed.until(lambda: all(observed.completed(n) for n in names))
    assert most == 2  # never more than the limit, and the limit used


def _counting(scheduler: MemoryScheduler) -> Callable[[], int]:
    """Count the scheduler's looks at its line (each try to take), through its `_take`."""
    looks = [0]
    take = scheduler._take

    def counted() -> Delivery | None:
        looks[0] += 1
        return take()

    scheduler._take = counted  # type: ignore[method-assign]
    return lambda: looks[0]


async def test_a_reader_on_a_full_limit_sleeps_until_the_holders_lease_lapses() -> None:
    lease = timedelta(milliseconds=500)
    scheduler = MemoryScheduler(lease=lease)
    limit = Limit("lapsing", 1)
    await scheduler.make_ready("crashed", limit=limit)
    assert await scheduler.next_ready(timedelta(seconds=1)) is not None  # never answered
    await scheduler.make_ready("waiting", limit=limit)
    looks = _counting(scheduler)
    loop = asyncio.get_running_loop()
    began = loop.time()
    delivery = await scheduler.next_ready(timedelta(seconds=10))
    assert delivery is not None and delivery.workflow == "waiting"
    assert loop.time() - began >= 0.4  # not before the lapse
    assert looks() <= 3  # one look, one at the lapse (and one spare): no poll


async def test_a_reader_on_a_full_rate_sleeps_until_the_window_has_room() -> None:
    scheduler = MemoryScheduler()
    limit = Limit("rate", 1, per=timedelta(milliseconds=500))
    for name in ("a", "b"):
        await scheduler.make_ready(name, limit=limit)
    first = await scheduler.next_ready(timedelta(seconds=1))
    assert first is not None
    await scheduler.done(first)
    looks = _counting(scheduler)
    second = await scheduler.next_ready(timedelta(seconds=10))
    assert second is not None and second.workflow == "b"
    assert looks() <= 3


async def test_an_idle_worker_on_a_full_limit_sends_no_more_than_an_idle_one() -> None:
    # A wakeup whose limit is full costs an idle worker nothing: its reads wait, not poll.
    scheduler = MemoryScheduler()
    durable = _durable(scheduler)
    limit = Limit("held", 1)
    await scheduler.make_ready("holder", limit=limit)
    held = await scheduler.next_ready(timedelta(seconds=1))
    assert held is not None
    await start(durable, "job", None, "waits", limit=limit)
    observed = Observed(PATIENCE)

    async def body(run: Run) -> None:
        return None

    before = scheduler.traffic.snapshot()
    async with working(durable, body, observed, pool=4, within=timedelta(seconds=5)):
        await asyncio.sleep(1.0)
        asked = scheduler.traffic.snapshot() - before
        assert observed.of("waits") == []
        await scheduler.done(held)
        await observed.until(lambda: observed.completed("waits"))
    reads = asked.requests.get("MemoryScheduler.next_ready", 0)
    assert reads <= 2, f"{reads} reads in a second while the limit was full"

