"""What one store operation costs, closed loop from one client, on every store (workloads: the lab).

| benchmark | what one round is |
|---|---|
| `claim_record_release` | claim a free workflow, record one step, release it: a pass's writes |
| `load` | read back a checkpoint of 10 / 100 / 1,000 records |
| `ready_take_done` | make_ready, next_ready, done: one wakeup through the queue |
| `wake_due` | the timer's look at a queue holding 1,000 sleepers, none due |
| `arrive` | supply a value and make the workflow ready: what an API call costs |
| `two_passes` | six steps and a sleep in two passes: a pass's bookkeeping beside its writes |
"""

from __future__ import annotations

import functools
import itertools
from datetime import UTC, datetime, timedelta

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from benchmarks.conftest import Opened
from durability import Completed, Run, Sleeping, as_int, claimed, resume

BUDGET, ALIVE = timedelta(minutes=5), timedelta(seconds=30)
#: Rounds per benchmark. A test here checks what an operation returned, never how long it took.
ROUNDS = 200


def test_claim_record_release(benchmark: BenchmarkFixture, store: Opened) -> None:
    checkpointer = store.durable.checkpointer
    ids = (f"{store.tag}-crr-{n}" for n in itertools.count())

    async def once() -> None:
        holder = await claimed(checkpointer, next(ids), BUDGET, ALIVE)
        await checkpointer.record(holder, "charged", {"cents": 1250})
        await checkpointer.release(holder)

    benchmark.pedantic(store.run, args=(once,), rounds=ROUNDS, warmup_rounds=20)


@pytest.mark.parametrize("records", [10, 100, 1000])
def test_load(benchmark: BenchmarkFixture, store: Opened, records: int) -> None:
    checkpointer = store.durable.checkpointer
    workflow = f"{store.tag}-load-{records}"

    async def build() -> None:
        holder = await claimed(checkpointer, workflow, BUDGET, ALIVE)
        for n in range(records):
            await checkpointer.record(holder, f"step:{n}", {"n": n})
        await checkpointer.release(holder)

    store.run(build)

    async def once() -> None:
        loaded = await checkpointer.load(workflow)
        assert len(loaded) == records

    benchmark.pedantic(store.run, args=(once,), rounds=ROUNDS // 2, warmup_rounds=5)


def test_ready_take_done(benchmark: BenchmarkFixture, store: Opened) -> None:
    scheduler = store.durable.scheduler
    workflow = f"{store.tag}-rtd"

    async def once() -> None:
        await scheduler.make_ready(workflow)
        delivery = await scheduler.next_ready(timedelta(seconds=5))
        assert delivery is not None and delivery.workflow == workflow
        await scheduler.done(delivery)

    benchmark.pedantic(store.run, args=(once,), rounds=ROUNDS, warmup_rounds=20)


def test_wake_due_of_a_thousand_sleepers(benchmark: BenchmarkFixture, store: Opened) -> None:
    scheduler = store.durable.scheduler
    later = datetime.now(UTC) + timedelta(days=1)

    async def build() -> None:
        for n in range(1000):
            await scheduler.make_ready(f"{store.tag}-sleeper-{n}")
        for n in range(1000):
            delivery = await scheduler.next_ready(timedelta(seconds=5))
            assert delivery is not None
            await scheduler.wake_at(delivery, later + timedelta(seconds=n))
            await scheduler.done(delivery)

    store.run(build)

    async def once() -> None:
        earliest = await scheduler.wake_due(datetime.now(UTC))
        assert earliest is not None and earliest > datetime.now(UTC)

    benchmark.pedantic(store.run, args=(once,), rounds=ROUNDS, warmup_rounds=10)


def test_arrive(benchmark: BenchmarkFixture, store: Opened) -> None:
    durable = store.durable
    ids = (f"{store.tag}-arrive-{n}" for n in itertools.count())

    async def once() -> None:
        await durable.arrive(next(ids), "order", {"sku": "A-1", "qty": 1})

    benchmark.pedantic(store.run, args=(once,), rounds=ROUNDS, warmup_rounds=20)


def _at(moment: datetime) -> datetime:
    return moment


async def _six_steps(run: Run) -> int:
    total = 0
    for n in range(6):
        if n == 3:
            await run.sleep("nap", timedelta(minutes=1))
        total += await run.step(f"step:{n}", functools.partial(int, n), as_int)
    return total


def test_two_passes(benchmark: BenchmarkFixture, store: Opened) -> None:
    checkpointer = store.durable.checkpointer
    ids = (f"{store.tag}-two-{n}" for n in itertools.count())

    async def once() -> None:
        workflow = next(ids)
        now = datetime.now(UTC)
        # The second pass on a clock past the sleep: its deadline is due, so it runs on.
        for expected, at in ((Sleeping, now), (Completed, now + timedelta(minutes=2))):
            holder = await claimed(checkpointer, workflow, BUDGET, ALIVE)
            clock = functools.partial(_at, at)
            outcome = await resume(holder, checkpointer, _six_steps, clock=clock)
            await checkpointer.release(holder)
            assert isinstance(outcome, expected)

    benchmark.pedantic(store.run, args=(once,), rounds=ROUNDS, warmup_rounds=20)
