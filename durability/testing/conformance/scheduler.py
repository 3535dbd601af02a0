"""The scheduler half of the contract: deliveries, lost wakeups, sleepers, leases, cancel.

A store's suite subclasses `SchedulerContract` and overrides `make_scheduler`: an async factory
from a lease to a fresh, prepared scheduler on its own queue (its own stream, set, table rows or
namespace), so that "nothing is ready" is a fact a test can assert. Where a test needs a second
worker it uses the same scheduler object, the way two tasks of one worker would.

Schedulers differ in how they hold a taken wakeup (a pending list, a visibility score), so a test
that waits for a lease to run out accepts the workflow back through either `reclaiming` or
`next_ready`, and a test that expects nothing asks both.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durability.checks import MAX_NAME, check_workflow
from durability.interfaces import Scheduler
from durability.testing.conformance.bounds import (
    ABSURD_CASES,
    BAD_ID_CASES,
    PROPERTY,
    names,
    refusal,
)
from durability.testing.conformance.claims import fresh
from durability.testing.conformance.pace import Stalled, Stopwatch, at_any_pace
from durability.values import Delivery, Reclaimed

MakeScheduler = Callable[[timedelta], Awaitable[Scheduler]]

#: A lease no test outlives.
LONG_LEASE = timedelta(seconds=30)
#: How long to wait for something that should come, and for something that should not.
ARRIVES = timedelta(seconds=3)
QUIET = timedelta(milliseconds=250)


def _whole_ms(moment: datetime) -> datetime:
    # A store may keep times in milliseconds; a whole millisecond survives either rounding.
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


async def _take(scheduler: Scheduler, workflow: str) -> Delivery:
    delivery = await scheduler.next_ready(ARRIVES)
    assert delivery is not None, f"{workflow} should have been ready"
    assert delivery.workflow == workflow
    assert isinstance(delivery.receipt, str)
    return delivery


async def _nothing_to_take(scheduler: Scheduler, idle: timedelta) -> None:
    assert (await scheduler.reclaiming(idle)).delivery is None
    assert await scheduler.next_ready(QUIET) is None


async def _retaken(scheduler: Scheduler, idle: timedelta, patience: float = 3.0) -> Delivery | None:
    """Wait for a lapsed delivery to come back, by whichever door this scheduler uses."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + patience
    while loop.time() < give_up:
        delivery = (await scheduler.reclaiming(idle)).delivery
        if delivery is None:
            delivery = await scheduler.next_ready(timedelta(milliseconds=100))
        if delivery is not None:
            return delivery
    return None


class DeliveryContract:
    """A ready workflow goes to one reader, and a wakeup that lands mid-pass survives its
    `done`. Needs `make_scheduler`."""

    async def test_is_a_scheduler_with_its_lease(self, make_scheduler: MakeScheduler) -> None:
        scheduler = await make_scheduler(timedelta(seconds=7))
        assert isinstance(scheduler, Scheduler)
        assert scheduler.lease == timedelta(seconds=7)

    async def test_a_ready_workflow_is_delivered(self, make_scheduler: MakeScheduler) -> None:
        scheduler = await make_scheduler(LONG_LEASE)
        workflow = fresh()
        await scheduler.make_ready(workflow)
        await _take(scheduler, workflow)

    async def test_nothing_ready_returns_none(self, make_scheduler: MakeScheduler) -> None:
        scheduler = await make_scheduler(LONG_LEASE)
        assert await scheduler.next_ready(QUIET) is None

    async def test_make_ready_wakes_a_blocked_reader(self, make_scheduler: MakeScheduler) -> None:
        scheduler = await make_scheduler(LONG_LEASE)
        workflow = fresh()
        reader = asyncio.create_task(scheduler.next_ready(timedelta(seconds=5)))
        await asyncio.sleep(0.1)
        assert not reader.done()
        await scheduler.make_ready(workflow)
        delivery = await reader
        assert delivery is not None
        assert delivery.workflow == workflow

    async def test_done_answers_for_the_delivery(self, make_scheduler: MakeScheduler) -> None:
        lease = timedelta(milliseconds=300)
        scheduler = await make_scheduler(lease)
        workflow = fresh()
        await scheduler.make_ready(workflow)
        delivery = await _take(scheduler, workflow)
        await scheduler.done(delivery)
        # Past the lease too: an answered delivery is not a lapsed one waiting to be retaken.
        await asyncio.sleep(0.4)
        await _nothing_to_take(scheduler, lease)

    async def test_a_wakeup_during_a_pass_survives_done(
        self, make_scheduler: MakeScheduler
    ) -> None:
        scheduler = await make_scheduler(LONG_LEASE)
        workflow = fresh()
        await scheduler.make_ready(workflow)
        delivery = await _take(scheduler, workflow)
        await scheduler.make_ready(workflow)  # something arrived while the pass ran
        await scheduler.done(delivery)
        again = await _take(scheduler, workflow)
        await scheduler.done(again)

    async def test_each_ready_workflow_goes_to_one_of_many_readers(
        self, make_scheduler: MakeScheduler
    ) -> None:
        scheduler = await make_scheduler(LONG_LEASE)
        workflows = [fresh() for _ in range(24)]
        for workflow in workflows:
            await scheduler.make_ready(workflow)
        taken: list[str] = []

        async def reader() -> None:
            while (delivery := await scheduler.next_ready(QUIET)) is not None:
                taken.append(delivery.workflow)
                await scheduler.done(delivery)

        await asyncio.gather(*(reader() for _ in range(4)))
        assert sorted(taken) == sorted(workflows)


class SleepContract:
    """A wakeup set for later waits until `wake_due` finds it due; `cancel` takes back what is
    queued, asleep or held. Needs `make_scheduler`."""

    @pytest.mark.parametrize("ago", [timedelta(0), timedelta(seconds=5)])
    async def test_a_due_wakeup_is_ready_after_wake_due(
        self, make_scheduler: MakeScheduler, ago: timedelta
    ) -> None:
        scheduler = await make_scheduler(LONG_LEASE)
        workflow = fresh()
        await scheduler.make_ready(workflow)
        delivery = await _take(scheduler, workflow)
        assert await scheduler.wake_at(delivery, _whole_ms(datetime.now(UTC)) - ago)
        await scheduler.done(delivery)
        await scheduler.wake_due()
        await _take(scheduler, workflow)

    async def test_a_future_wakeup_waits_until_it_is_due(
        self, make_scheduler: MakeScheduler
    ) -> None:
        async def scenario(scale: float) -> None:
            scheduler = await make_scheduler(LONG_LEASE)
            workflow = fresh()
            await scheduler.make_ready(workflow)
            delivery = await _take(scheduler, workflow)
            when = _whole_ms(datetime.now(UTC) + timedelta(seconds=scale))
            assert await scheduler.wake_at(delivery, when)
            await scheduler.done(delivery)
            due = await scheduler.wake_due()
            assert due is not None, "a sleeper must be reported by wake_due"
            assert due <= when
            early = await scheduler.next_ready(QUIET)
            if early is not None and datetime.now(UTC) >= when:
                raise Stalled("the look before the wakeup was due ended after it")
            assert early is None
            await asyncio.sleep(max(0.0, (when - datetime.now(UTC)).total_seconds()) + 0.1)
            await scheduler.wake_due()
            await _take(scheduler, workflow)

        await at_any_pace(scenario)

    async def test_wake_at_declines_after_cancel(self, make_scheduler: MakeScheduler) -> None:
        lease = timedelta(milliseconds=300)
        scheduler = await make_scheduler(lease)
        workflow = fresh()
        await scheduler.make_ready(workflow)
        delivery = await _take(scheduler, workflow)
        await scheduler.cancel(workflow)
        assert not await scheduler.wake_at(delivery, datetime.now(UTC) - timedelta(seconds=1))
        await scheduler.done(delivery)
        assert await scheduler.wake_due() is None
        await asyncio.sleep(0.4)  # past the lease, so a held delivery would be back by now
        assert await scheduler.wake_due() is None
        await _nothing_to_take(scheduler, lease)


    async def test_cancel_removes_a_ready_wakeup_and_only_that(
        self, make_scheduler: MakeScheduler
    ) -> None:
        scheduler = await make_scheduler(LONG_LEASE)
        workflow, bystander = fresh(), fresh()
        await scheduler.make_ready(workflow)
        await scheduler.make_ready(bystander)
        assert await scheduler.cancel(workflow) > 0
        await _take(scheduler, bystander)
        assert await scheduler.next_ready(QUIET) is None

    async def test_cancel_removes_a_sleeping_wakeup(self, make_scheduler: MakeScheduler) -> None:
        scheduler = await make_scheduler(LONG_LEASE)
        workflow = fresh()
        await scheduler.make_ready(workflow)
        delivery = await _take(scheduler, workflow)
        assert await scheduler.wake_at(delivery, datetime.now(UTC) + timedelta(hours=1))
        await scheduler.done(delivery)
        assert await scheduler.wake_due() is not None
        assert await scheduler.cancel(workflow) > 0
        assert await scheduler.wake_due() is None
        assert await scheduler.next_ready(QUIET) is None

    async def test_cancel_removes_a_due_wakeup_before_the_timer_moves_it(
        self, make_scheduler: MakeScheduler
    ) -> None:
        scheduler = await make_scheduler(LONG_LEASE)
        workflow = fresh()
        await scheduler.make_ready(workflow)
        delivery = await _take(scheduler, workflow)
        assert await scheduler.wake_at(delivery, datetime.now(UTC) - timedelta(seconds=1))
        await scheduler.done(delivery)
        assert await scheduler.cancel(workflow) > 0
        await scheduler.wake_due()
        assert await scheduler.next_ready(QUIET) is None

    async def test_cancel_of_an_unknown_workflow_removes_nothing(
        self, make_scheduler: MakeScheduler
    ) -> None:
        scheduler = await make_scheduler(LONG_LEASE)
        await scheduler.make_ready(fresh())
        assert await scheduler.cancel(fresh()) == 0

    async def test_extend_of_a_cancelled_delivery_returns_none(
        self, make_scheduler: MakeScheduler
    ) -> None:
        scheduler = await make_scheduler(LONG_LEASE)
        workflow = fresh()
        await scheduler.make_ready(workflow)
        delivery = await _take(scheduler, workflow)
        await scheduler.cancel(workflow)
        assert await scheduler.extend(delivery, LONG_LEASE) is None


class LeaseContract:
    """A held delivery stays its worker's for its lease and is taken over after it, by
    `reclaiming` or by `next_ready`, whichever this scheduler uses. Needs `make_scheduler`."""

    async def test_a_held_delivery_is_not_retaken_within_its_lease(
        self, make_scheduler: MakeScheduler
    ) -> None:
        lease = timedelta(seconds=5)
        scheduler = await make_scheduler(lease)
        workflow = fresh()
        await scheduler.make_ready(workflow)
        await _take(scheduler, workflow)
        await _nothing_to_take(scheduler, lease)

    async def test_an_abandoned_delivery_is_retaken_after_its_lease(
        self, make_scheduler: MakeScheduler
    ) -> None:
        lease = timedelta(milliseconds=300)
        scheduler = await make_scheduler(lease)
        workflow = fresh()
        await scheduler.make_ready(workflow)
        await _take(scheduler, workflow)
        # The holder never extends: it died.
        retaken = await _retaken(scheduler, lease)
        assert retaken is not None, "a delivery nobody extends must come back after its lease"
        assert retaken.workflow == workflow
        await scheduler.done(retaken)
        assert await scheduler.next_ready(QUIET) is None

    async def test_only_a_delivery_taken_again_after_its_lease_lapsed_says_it_lapsed(
        self, make_scheduler: MakeScheduler
    ) -> None:
        # What lets a worker ask again soon for a claim a dead pass's last write still holds,
        # and not for one a live pass holds (`Delivery.lapsed`).
        lease = timedelta(milliseconds=300)
        scheduler = await make_scheduler(lease)
        workflow = fresh()
        await scheduler.make_ready(workflow)
        first = await _take(scheduler, workflow)
        assert not first.lapsed, "a fresh wakeup is no takeover"
        await scheduler.make_ready(workflow)  # lands mid-pass
        await scheduler.done(first)
        again = await _take(scheduler, workflow)
        assert not again.lapsed, "a wakeup that landed mid-pass is no takeover either"
        moment = datetime.now(UTC)
        assert await scheduler.wake_at(again, moment)  # handed back, as a worker does
        await scheduler.done(again)
        await scheduler.wake_due(moment + timedelta(seconds=1))
        handed = await _take(scheduler, workflow)
        assert not handed.lapsed, "nor is a workflow handed back"
        # Its holder answers no more: taken again after the lease, it is a takeover.
        retaken = await _retaken(scheduler, lease)
        assert retaken is not None and retaken.workflow == workflow
        assert retaken.lapsed, "a delivery taken again after its lease lapsed must say so"
        await scheduler.done(retaken)

    async def test_reclaiming_counts_silence_against_idle_not_the_lease(
        self, make_scheduler: MakeScheduler
    ) -> None:
        lease = timedelta(milliseconds=300)
        scheduler = await make_scheduler(lease)
        workflow = fresh()
        await scheduler.make_ready(workflow)
        await _take(scheduler, workflow)
        await asyncio.sleep(0.45)  # past the lease, well short of the idle asked for below
        look = await scheduler.reclaiming(LONG_LEASE)
        assert look.delivery is None, "reclaiming(idle) must wait out `idle`"
        # Not lost either: it still comes back, by this scheduler's own door.
        retaken = await _retaken(scheduler, lease)
        assert retaken is not None and retaken.workflow == workflow
        await scheduler.done(retaken)

    async def test_reclaiming_takes_a_delivery_silent_for_idle_within_its_lease(
        self, make_scheduler: MakeScheduler
    ) -> None:
        lease = timedelta(milliseconds=800)
        idle = timedelta(milliseconds=200)
        scheduler = await make_scheduler(lease)
        workflow = fresh()
        await scheduler.make_ready(workflow)
        await _take(scheduler, workflow)
        await asyncio.sleep(0.35)  # silent for more than `idle`, well inside the lease
        taken = (await scheduler.reclaiming(idle)).delivery
        if taken is not None:
            # A scheduler with a pending list hands it over on `idle`, whatever its lease.
            assert taken.workflow == workflow
            await scheduler.done(taken)
            return
        # A visibility-scored one never hands anything over through `reclaiming`: the lease makes
        # the row visible again. It must not be using its lease for `idle` instead.
        assert await scheduler.next_ready(QUIET) is None  # still inside the lease
        await asyncio.sleep(0.6)  # past the lease
        assert await scheduler.reclaiming(idle) == Reclaimed(None, None)
        again = await scheduler.next_ready(ARRIVES)
        assert again is not None and again.workflow == workflow
        await scheduler.done(again)

    async def test_reclaiming_an_empty_queue_finds_nothing_to_wait_for(
        self, make_scheduler: MakeScheduler
    ) -> None:
        scheduler = await make_scheduler(LONG_LEASE)
        assert await scheduler.reclaiming(LONG_LEASE) == Reclaimed(None, None)

    async def test_reclaiming_says_when_a_held_delivery_lapses_and_takes_it_then(
        self, make_scheduler: MakeScheduler
    ) -> None:
        lease = timedelta(milliseconds=600)
        scheduler = await make_scheduler(LONG_LEASE)
        workflow = fresh()
        await scheduler.make_ready(workflow)
        await _take(scheduler, workflow)
        look = await scheduler.reclaiming(lease)
        assert look.delivery is None, "nothing was silent for `idle` yet"
        if look.lapses_in is None:
            # A visibility-scored scheduler: its reader finds a lapsed row, not `reclaiming`.
            assert await scheduler.reclaiming(lease) == Reclaimed(None, None)
            return
        # Never later than `idle` after the take, which came before the look.
        assert timedelta(0) <= look.lapses_in <= lease
        await asyncio.sleep(look.lapses_in.total_seconds() + 0.05)
        taken = await scheduler.reclaiming(lease)
        assert taken.delivery is not None, "the delivery lapsed when the look said it would"
        assert taken.delivery.workflow == workflow
        await scheduler.done(taken.delivery)
        assert await scheduler.reclaiming(lease) == Reclaimed(None, None)

    async def test_reclaiming_after_an_extend_waits_for_the_later_lapse(
        self, make_scheduler: MakeScheduler
    ) -> None:
        idle = timedelta(seconds=20)
        scheduler = await make_scheduler(LONG_LEASE)
        workflow = fresh()
        await scheduler.make_ready(workflow)
        delivery = await _take(scheduler, workflow)
        loop = asyncio.get_running_loop()
        looked = loop.time()
        first = await scheduler.reclaiming(idle)
        if first.lapses_in is None:
            return  # visibility-scored: nothing for `reclaiming` to say
        await asyncio.sleep(0.3)
        kept = await scheduler.extend(delivery, LONG_LEASE)
        assert kept is not None
        again = loop.time()
        later = await scheduler.reclaiming(idle)
        assert later.delivery is None and later.lapses_in is not None
        # The extension was a sign of life at least 0.3 s after the first look: the moment of
        # the lapse moved later by about that (each measured from before its own look).
        moved = (again + later.lapses_in.total_seconds()) - (
            looked + first.lapses_in.total_seconds()
        )
        assert moved > 0.15, f"the lapse moved by {moved:.3f} s"
        await scheduler.done(kept)

    async def test_extend_keeps_a_delivery_past_its_first_lease(
        self, make_scheduler: MakeScheduler
    ) -> None:
        async def scenario(scale: float) -> None:
            lease = timedelta(seconds=scale)
            limit = lease.total_seconds()
            scheduler = await make_scheduler(lease)
            workflow = fresh()
            await scheduler.make_ready(workflow)
            taking = Stopwatch()
            delivery = await _take(scheduler, workflow)
            await asyncio.sleep(limit * 0.6)
            extending = Stopwatch()
            extended = await scheduler.extend(delivery, lease)
            if extended is None:
                taking.within(limit, "the take and the extend")
            assert extended is not None
            assert extended.workflow == workflow
            await asyncio.sleep(limit * 0.6)  # past the first lease, inside the extended one
            found = (await scheduler.reclaiming(lease)).delivery
            found = found or await scheduler.next_ready(QUIET)
            if found is not None:
                extending.within(limit, "the extend and the look after it")
            assert found is None
            await scheduler.done(extended)

        await at_any_pace(scenario)

    @pytest.mark.parametrize("zero", [timedelta(0), timedelta(seconds=-1)])
    async def test_durations_must_be_positive(
        self, make_scheduler: MakeScheduler, zero: timedelta
    ) -> None:
        scheduler = await make_scheduler(LONG_LEASE)
        workflow = fresh()
        with pytest.raises(ValueError, match="within"):
            await scheduler.next_ready(zero)
        with pytest.raises(ValueError, match="idle"):
            await scheduler.reclaiming(zero)
        await scheduler.make_ready(workflow)
        delivery = await _take(scheduler, workflow)
        with pytest.raises(ValueError, match="within"):
            await scheduler.extend(delivery, zero)


class QueueBoundsContract:
    """A bad id or duration is refused and changes nothing; any id accepted comes back
    exactly. Needs `make_scheduler`."""

    async def test_a_bad_workflow_id_is_refused_and_queues_nothing(
        self, make_scheduler: MakeScheduler
    ) -> None:
        scheduler = await make_scheduler(LONG_LEASE)
        for workflow, error, _ in BAD_ID_CASES:
            with pytest.raises(error, match="workflow id"):
                await scheduler.make_ready(workflow)
            with pytest.raises(error, match="workflow id"):
                await scheduler.cancel(workflow)
        await _nothing_to_take(scheduler, LONG_LEASE)

    async def test_an_absurd_duration_is_refused_and_changes_nothing(
        self, make_scheduler: MakeScheduler
    ) -> None:
        scheduler = await make_scheduler(LONG_LEASE)
        workflow = fresh()
        await scheduler.make_ready(workflow)
        for duration, error, _ in ABSURD_CASES:
            with pytest.raises(error, match="lease"):
                await make_scheduler(duration)
            with pytest.raises(error, match="within"):
                await scheduler.next_ready(duration)
            with pytest.raises(error, match="idle"):
                await scheduler.reclaiming(duration)
        delivery = await _take(scheduler, workflow)  # still ready: the refused reads took nothing
        for duration, error, _ in ABSURD_CASES:
            with pytest.raises(error, match="within"):
                await scheduler.extend(delivery, duration)
        kept = await scheduler.extend(delivery, LONG_LEASE)  # still held, as it was
        assert kept is not None and kept.workflow == workflow
        await scheduler.done(kept)
        await _nothing_to_take(scheduler, LONG_LEASE)

    @pytest.fixture
    async def one_queue(self, make_scheduler: MakeScheduler) -> Scheduler:
        """One scheduler for all of a property's examples (each takes back what it queued)."""
        return await make_scheduler(LONG_LEASE)

    @PROPERTY
    @given(data=st.data())
    async def test_any_accepted_id_comes_back_exactly_from_the_queue(
        self, one_queue: Scheduler, data: st.DataObject
    ) -> None:
        head = f"p-{uuid.uuid4().hex[:12]}-"
        workflow = head + data.draw(names(MAX_NAME - len(head)), label="id")
        bad = refusal(check_workflow, workflow)
        if bad is not None:
            with pytest.raises(bad):
                await one_queue.make_ready(workflow)
            return
        await one_queue.make_ready(workflow)
        delivery = await _take(one_queue, workflow)
        await one_queue.done(delivery)


class SchedulerContract(DeliveryContract, SleepContract, LeaseContract, QueueBoundsContract):
    """What every `Scheduler` must do. Subclass and override `make_scheduler`."""

    @pytest.fixture
    def make_scheduler(self) -> MakeScheduler:
        raise NotImplementedError(
            f"{type(self).__name__} must override the `make_scheduler` fixture: an async"
            " factory from a lease to a fresh, prepared scheduler on its own queue"
        )
