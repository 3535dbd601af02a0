"""The priority half of the policy contract: strict priority, the merge rule, and what a wakeup
keeps through a sleep and through the durable's moves; and bad input refused before any I/O.

A store's suite subclasses `PolicyContract` (`durability.testing.conformance.limits`, which adds
the limits) and overrides `make_durables`: `count` durables over one fresh queue with a
scheduler lease of `lease`, each on connections of its own where the store has them (other
workers), and `offline`, the store's durable with no server behind it (`BoundsContract`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest

from durability.bodies import start
from durability.interfaces import Durable, Scheduler
from durability.testing.conformance.claims import LONG, fresh
from durability.values import Delivery, Limit

__all__ = [
    "BAD_LIMITS",
    "BAD_PRIORITIES",
    "PATIENT",
    "MakeDurables",
    "PriorityContract",
    "taken",
]

#: Makes `count` durables over one fresh queue whose scheduler lease is `lease`.
MakeDurables = Callable[[timedelta, int], Awaitable[Sequence[Durable]]]

#: How long a read may wait for what should come (never waited out when the store is right).
PATIENT = timedelta(seconds=8)
#: How long to look for what should not come.
QUIET = timedelta(milliseconds=300)

#: Priorities every store refuses, with the error each gets.
BAD_PRIORITIES = [
    pytest.param(1.5, TypeError, id="float"),
    pytest.param(True, TypeError, id="bool"),
    pytest.param("1", TypeError, id="text"),
    pytest.param(None, TypeError, id="none"),
    pytest.param(101, ValueError, id="one-too-high"),
    pytest.param(-101, ValueError, id="one-too-low"),
    pytest.param(10**30, ValueError, id="huge"),
]

#: Limits every store refuses, with the error each gets.
BAD_LIMITS = [
    pytest.param("gateway", TypeError, id="not-a-limit"),
    pytest.param(Limit(7, 1), TypeError, id="key-not-text"),  # type: ignore[arg-type]
    pytest.param(Limit(b"k", 1), TypeError, id="key-bytes"),  # type: ignore[arg-type]
    pytest.param(Limit("", 1), ValueError, id="key-empty"),
    pytest.param(Limit("a{b}", 1), ValueError, id="key-brace"),
    pytest.param(Limit("k", 0), ValueError, id="at-most-zero"),
    pytest.param(Limit("k", -1), ValueError, id="at-most-negative"),
    pytest.param(Limit("k", 1.0), TypeError, id="at-most-float"),  # type: ignore[arg-type]
    pytest.param(Limit("k", 1, per=timedelta(0)), ValueError, id="per-zero"),
]

_OK = "policies-ok"


async def taken(scheduler: Scheduler, workflow: str | None = None) -> Delivery:
    """The next delivery (waiting up to `PATIENT`), which must be `workflow`'s if given."""
    delivery = await scheduler.next_ready(PATIENT)
    assert delivery is not None, f"{workflow or 'a workflow'} should have been ready"
    if workflow is not None:
        assert delivery.workflow == workflow, f"{delivery.workflow} came before {workflow}"
    return delivery


async def _in_order(scheduler: Scheduler, count: int) -> list[Delivery]:
    """The next `count` deliveries, each answered as it comes."""
    got = []
    for _ in range(count):
        delivery = await taken(scheduler)
        got.append(delivery)
        await scheduler.done(delivery)
    return got


class PriorityContract:
    """Strict priority, the merge rule, a priority kept through a sleep, bad input refused.

    `ordered` says the store takes by priority across its whole queue. A sharded queue that
    orders each shard on its own (and reads the shards in turn) sets it False: the ordering
    tests then check that every wakeup is taken once with the priority it merged to, and leave
    the order across shards alone."""

    #: Whether priority orders the whole queue (False: within each shard of a sharded queue).
    ordered: ClassVar[bool] = True

    def _same(self, got: Sequence[object], expected: Sequence[object]) -> None:
        """`got` is `expected`: in that order if the queue is `ordered`, else as a multiset."""
        if self.ordered:
            assert list(got) == list(expected), f"taken in the order {got}"
        else:
            assert sorted(map(repr, got)) == sorted(map(repr, expected)), f"taken: {got}"

    @pytest.fixture
    def make_durables(self) -> MakeDurables:
        raise NotImplementedError(
            f"{type(self).__name__} must override `make_durables`: (lease, count) -> that many"
            " durables over one fresh queue, on connections of their own where the store has them"
        )

    @pytest.fixture
    def offline(self) -> Durable:
        raise NotImplementedError(
            f"{type(self).__name__} must override `offline`: the store's Durable with no server"
            " behind it, so any I/O would fail with the driver's own error"
        )

    async def _one(self, make_durables: MakeDurables) -> Scheduler:
        (durable,) = await make_durables(LONG, 1)
        return durable.scheduler

    async def test_a_delivery_carries_its_priority_and_limit(
        self, make_durables: MakeDurables
    ) -> None:
        scheduler = await self._one(make_durables)
        workflow, limit = fresh(), Limit(fresh("limit"), 3)
        await scheduler.make_ready(workflow, priority=7, limit=limit)
        delivery = await taken(scheduler, workflow)
        assert (delivery.priority, delivery.limit) == (7, limit)
        await scheduler.done(delivery)
        await scheduler.make_ready(workflow)  # the next wakeup gives its own
        plain = await taken(scheduler, workflow)
        assert (plain.priority, plain.limit) == (0, None)

    async def test_higher_priorities_first_and_equals_in_the_order_they_came(
        self, make_durables: MakeDurables
    ) -> None:
        scheduler = await self._one(make_durables)
        given = [("a", 0), ("b", 5), ("c", 0), ("d", 5), ("e", -3), ("f", 100), ("g", -100)]
        names = {label: fresh(label) for label, _ in given}
        for label, priority in given:
            await scheduler.make_ready(names[label], priority=priority)
        got = await _in_order(scheduler, len(given))
        expected = [(names[x], dict(given)[x]) for x in "fbdaceg"]
        self._same([(d.workflow, d.priority) for d in got], expected)

    async def test_a_low_priority_waits_while_higher_ones_keep_coming(
        self, make_durables: MakeDurables
    ) -> None:
        # Strict: no aging. A low wakeup is taken only when no higher one is ready.
        scheduler = await self._one(make_durables)
        low = fresh("low")
        await scheduler.make_ready(low, priority=-1)
        got, highs = [], []
        for _ in range(5):
            highs.append(fresh("high"))
            await scheduler.make_ready(highs[-1], priority=1)
            got.append(await taken(scheduler))
            await scheduler.done(got[-1])
        got.append(await taken(scheduler))
        await scheduler.done(got[-1])
        self._same([d.workflow for d in got], [*highs, low])

    async def test_a_merged_wakeup_keeps_the_higher_priority(
        self, make_durables: MakeDurables
    ) -> None:
        scheduler = await self._one(make_durables)
        other, raised, kept = fresh("other"), fresh("raised"), fresh("kept")
        await scheduler.make_ready(other, priority=3)
        await scheduler.make_ready(raised, priority=1)
        await scheduler.make_ready(raised, priority=6)  # merged: now ahead of `other`
        await scheduler.make_ready(kept, priority=4)
        await scheduler.make_ready(kept, priority=-4)  # merged: keeps 4
        got = await _in_order(scheduler, 3)
        self._same([(d.workflow, d.priority) for d in got], [(raised, 6), (kept, 4), (other, 3)])
        assert await scheduler.next_ready(QUIET) is None  # one wakeup each, not two

    async def test_a_merged_wakeup_keeps_its_limit_or_takes_the_new_one(
        self, make_durables: MakeDurables
    ) -> None:
        scheduler = await self._one(make_durables)
        first, second = Limit(fresh("first"), 5), Limit(fresh("second"), 5)
        keeps, takes = fresh("keeps"), fresh("takes")
        await scheduler.make_ready(keeps, limit=first)
        await scheduler.make_ready(keeps, limit=second)
        await scheduler.make_ready(takes)
        await scheduler.make_ready(takes, limit=second)
        got = {d.workflow: d.limit for d in await _in_order(scheduler, 2)}
        assert got == {keeps: first, takes: second}, f"taken with the limits {got}"

    async def test_a_sleep_keeps_the_deliverys_priority_and_limit(
        self, make_durables: MakeDurables
    ) -> None:
        scheduler = await self._one(make_durables)
        workflow, limit = fresh(), Limit(fresh("limit"), 2)
        await scheduler.make_ready(workflow, priority=4, limit=limit)
        delivery = await taken(scheduler, workflow)
        assert await scheduler.wake_at(delivery, datetime.now(UTC) - timedelta(seconds=1))
        await scheduler.done(delivery)
        await scheduler.wake_due()
        back = await taken(scheduler, workflow)
        assert (back.priority, back.limit) == (4, limit)  # it comes back as it went
        # A retry's backoff is a sleep too: through it, the same again.
        assert await scheduler.wake_at(back, datetime.now(UTC) - timedelta(seconds=1))
        await scheduler.done(back)
        await scheduler.wake_due()
        again = await taken(scheduler, workflow)
        assert (again.priority, again.limit) == (4, limit)
        await scheduler.done(again)

    async def test_a_woken_sleeper_is_taken_by_its_priority(
        self, make_durables: MakeDurables
    ) -> None:
        scheduler = await self._one(make_durables)
        sleeper, plain = fresh("sleeper"), fresh("plain")
        await scheduler.make_ready(sleeper, priority=9)
        delivery = await taken(scheduler, sleeper)
        assert await scheduler.wake_at(delivery, datetime.now(UTC) - timedelta(seconds=1))
        await scheduler.done(delivery)
        await scheduler.make_ready(plain)
        await scheduler.wake_due()
        got = await _in_order(scheduler, 2)
        self._same([(d.workflow, d.priority) for d in got], [(sleeper, 9), (plain, 0)])

    async def test_the_durables_moves_carry_priority_and_limit(
        self, make_durables: MakeDurables
    ) -> None:
        (durable,) = await make_durables(LONG, 1)
        limit = Limit(fresh("limit"), 4)
        arrived, delivered, started = fresh("arrived"), fresh("delivered"), fresh("started")
        await durable.arrive(arrived, "order", 1, priority=2, limit=limit)
        await durable.deliver(delivered, "hello", priority=3)
        assert await start(durable, "report", {"n": 1}, started, priority=5, limit=limit)
        got = [await durable.take(PATIENT, LONG, LONG) for _ in range(3)]
        seen = [(t.delivery.workflow, t.delivery.priority, t.delivery.limit) for t in got if t]
        self._same(seen, [(started, 5, limit), (delivered, 3, None), (arrived, 2, limit)])
        for one in got:
            assert one is not None and one.holder is not None
            await durable.finish(one.holder, one.delivery)

    async def test_the_durables_moves_merge_as_make_ready_does(
        self, make_durables: MakeDurables
    ) -> None:
        # A limited arrive or deliver on a workflow already waiting without a limit: one
        # wakeup, with the limit and the higher priority (on a sharded queue, across shards).
        (durable,) = await make_durables(LONG, 1)
        limit = Limit(fresh("limit"), 6)
        names = [fresh("merged") for _ in range(6)]
        for name in names:
            await durable.scheduler.make_ready(name, priority=2)
        for n, name in enumerate(names):
            if n % 2:
                await durable.arrive(name, "order", n, limit=limit)
            else:
                await durable.deliver(name, n, limit=limit)
        got = [await durable.take(PATIENT, LONG, LONG) for _ in names]
        seen = [(t.delivery.workflow, t.delivery.priority, t.delivery.limit) for t in got if t]
        # What a merge keeps is asked here, not the order: a merged wakeup on the sorted set
        # keeps its workflow's place by score, and wakeups made in one millisecond tie on it.
        expected = [(name, 2, limit) for name in names]
        assert sorted(map(repr, seen)) == sorted(map(repr, expected)), f"taken: {seen}"
        for one in got:
            assert one is not None and one.holder is not None
            await durable.finish(one.holder, one.delivery)
        assert await durable.take(QUIET, LONG, LONG) is None  # one wakeup each, not two

    @pytest.mark.parametrize(("priority", "error"), BAD_PRIORITIES)
    async def test_a_bad_priority_is_refused_before_any_io(
        self, offline: Durable, priority: Any, error: type[Exception]
    ) -> None:
        calls = [
            offline.scheduler.make_ready(_OK, priority=priority),
            offline.arrive(_OK, "k", 1, priority=priority),
            offline.deliver(_OK, 1, priority=priority),
            start(offline, "body", 1, _OK, priority=priority),
        ]
        for call in calls:
            with pytest.raises(error, match="priority"):
                await call

    @pytest.mark.parametrize(("limit", "error"), BAD_LIMITS)
    async def test_a_bad_limit_is_refused_before_any_io(
        self, offline: Durable, limit: Any, error: type[Exception]
    ) -> None:
        calls = [
            offline.scheduler.make_ready(_OK, limit=limit),
            offline.arrive(_OK, "k", 1, limit=limit),
            offline.deliver(_OK, 1, limit=limit),
            start(offline, "body", 1, _OK, limit=limit),
        ]
        for call in calls:
            with pytest.raises(error, match="limit"):
                await call

    async def test_a_refused_wakeup_writes_nothing(self, make_durables: MakeDurables) -> None:
        (durable,) = await make_durables(LONG, 1)
        workflow = fresh()
        with pytest.raises(ValueError, match="priority"):
            await durable.arrive(workflow, "order", 1, priority=1000)
        with pytest.raises(ValueError, match="limit"):
            await durable.deliver(workflow, "hello", limit=Limit("k", 0))
        assert await durable.checkpointer.load(workflow) == {}
        assert await durable.scheduler.next_ready(QUIET) is None
