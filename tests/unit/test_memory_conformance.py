"""The conformance suite over the memory stores, which pin the semantics the others match."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import pytest

from durability.interfaces import Checkpointer, Durable, Effect, Scheduler
from durability.memory import MemoryCheckpointer, MemoryEffect, MemoryScheduler
from durability.split import SplitDurable
from durability.testing.conformance import (
    BoundsContract,
    CheckpointerContract,
    CheckpointerModelContract,
    DurableContract,
    EffectKit,
    MakeDurables,
    MakeScheduler,
    PolicyContract,
    SchedulerContract,
    SchedulerModelContract,
)
from durability.testing.conformance.timeline import FakeTime


class _Counters:
    """Counters kept beside the memory store; a `MemoryEffect` adds to one."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def effect(self, workflow: str, value: int) -> Effect:
        def add() -> object:
            self._counts[workflow] = self._counts.get(workflow, 0) + value
            return self._counts[workflow]

        return MemoryEffect(add)

    async def counter(self, workflow: str) -> int:
        return self._counts.get(workflow, 0)


class TestMemoryCheckpointer(CheckpointerContract):
    @pytest.fixture
    def checkpointer(self) -> Checkpointer:
        return MemoryCheckpointer()

    @pytest.fixture
    def effect_kit(self) -> EffectKit:
        return _Counters()


class TestMemoryScheduler(SchedulerContract):
    @pytest.fixture
    def make_scheduler(self) -> MakeScheduler:
        async def make(lease: timedelta) -> Scheduler:
            scheduler = MemoryScheduler(lease=lease)
            await scheduler.prepare()
            return scheduler

        return make


class TestMemoryDurable(DurableContract):
    @pytest.fixture
    def durable(self) -> Durable:
        return SplitDurable(MemoryCheckpointer(), MemoryScheduler())


class TestMemoryPolicies(PolicyContract):
    @pytest.fixture
    def make_durables(self) -> MakeDurables:
        async def make(lease: timedelta, count: int) -> Sequence[Durable]:
            checkpointer, scheduler = MemoryCheckpointer(), MemoryScheduler(lease=lease)
            return [SplitDurable(checkpointer, scheduler) for _ in range(count)]

        return make

    @pytest.fixture
    def offline(self) -> Durable:
        return SplitDurable(MemoryCheckpointer(), MemoryScheduler())


class TestMemoryBounds(BoundsContract):
    """The memory store does no I/O to come before; its refusals must still be the same."""

    @pytest.fixture
    def offline(self) -> Durable:
        return SplitDurable(MemoryCheckpointer(), MemoryScheduler())


class TestMemoryCheckpointerModel(CheckpointerModelContract):
    """The model-based test on a clock it moves by hand: lapses are exact and free."""

    @pytest.fixture
    def timeline(self) -> FakeTime:
        return FakeTime()

    @pytest.fixture
    def checkpointer(self, timeline: FakeTime) -> Checkpointer:
        return MemoryCheckpointer(clock=timeline.now)

    @pytest.fixture
    def effect_kit(self) -> EffectKit:
        return _Counters()


class TestMemorySchedulerModel(SchedulerModelContract):
    @pytest.fixture
    def timeline(self) -> FakeTime:
        return FakeTime()

    @pytest.fixture
    def make_scheduler(self, timeline: FakeTime) -> MakeScheduler:
        async def make(lease: timedelta) -> Scheduler:
            return MemoryScheduler(lease=lease, clock=timeline.now)

        return make


def test_the_suite_imports_no_store_driver() -> None:
    # Every store's suite imports the contract, so it must not drag in another store's driver.
    probe = (
        "import sys, durability.testing.conformance\n"
        "drivers = ('redis', 'psycopg', 'psycopg_pool', 'aiosqlite')\n"
        "stores = ('durability.redis', 'durability.postgres', 'durability.sqlite')\n"
        "print(sorted(m for m in sys.modules"
        " if m.split('.')[0] in drivers or m.startswith(stores)))"
    )
    root = Path(__file__).resolve().parents[2]
    loaded = subprocess.run(
        [sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"


async def test_a_transact_of_a_key_recorded_before_still_renews_the_claim() -> None:
    # Found by the checkpoint model (TestMemoryCheckpointerModel) in a fresh clone: the memory
    # store answered such a transact early without renewing, and the pass was fenced later.
    from datetime import UTC, datetime

    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    store = MemoryCheckpointer(clock=lambda: now[0])
    holder = await store.claim("renewed", timedelta(minutes=10), timedelta(seconds=10))
    assert holder is not None
    await store.supply("renewed", "a", 0)
    now[0] += timedelta(seconds=9)
    await store.transact(holder, "a", MemoryEffect(lambda: 1))
    now[0] += timedelta(seconds=3)  # 12 s after the claim, 3 s after the transact
    await store.record(holder, "b", 1)  # Fenced if the transact did not renew
