"""The scheduler against a model of its contract, one random operation at a time.

Schedulers may differ where the contract lets them: a stream keeps every wakeup as an entry
while a sorted set or a row keeps one per workflow, and a delivery may come back through
`reclaiming` or through `next_ready`. So `QueueModel` does not predict one answer: per workflow it
keeps what is *owed* and what is *allowed*, and a store fails only outside those. `QueueMachine`
drives a real scheduler and the model with the same random calls.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from durability.interfaces import Scheduler
from durability.testing.conformance.checkpoint_model import pick
from durability.testing.conformance.timeline import Span, Timeline, passed
from durability.values import Delivery

__all__ = ["QueueMachine", "QueueModel"]

T = TypeVar("T")
Run = Callable[[Awaitable[Any]], Any]
MakeScheduler = Callable[[timedelta], Awaitable[Scheduler]]

#: A long lease: nothing held with it lapses within an example.
LONG = timedelta(minutes=10)
#: How `wake_at` is asked to wake: certainly due, due within the example, certainly not.
WHENS = ("past", "soon", "far")


@dataclass(eq=False, slots=True)
class _Held:
    """One delivery the machine holds and has not answered for."""

    delivery: Delivery
    #: When its lease runs out, unless extended.
    lapse: Span
    #: Nothing else has touched its workflow's queue entry since it was taken (no new wakeup,
    #: no other delivery of it, no `wake_at`): while this holds every store must keep it for
    #: `extend` and honour its `wake_at` to the letter.
    current: bool = True
    #: Its lapse has been counted as a delivery the store may make again.
    credited: bool = False
    #: Cancelled, and nothing has woken the workflow since: `wake_at` must decline.
    pristine: bool = False


@dataclass(eq=False, slots=True)
class _Sleeper:
    when: datetime
    #: Scheduled through a current delivery: it must be delivered once due. Otherwise
    #: (scheduled through a stale delivery, or since overtaken by a pass) a store may drop it.
    owed: bool
    credited: bool = False


@dataclass(slots=True)
class _Queue:
    """What one workflow's queue entry must and may do."""

    #: A wakeup not yet delivered: `next_ready` must not say "nothing".
    ready: bool = False
    #: How many more deliveries the wakeups so far can account for.
    credits: int = 0
    sleepers: list[_Sleeper] = field(default_factory=list)
    held: list[_Held] = field(default_factory=list)
    cancelled: list[_Held] = field(default_factory=list)
    answered: list[_Held] = field(default_factory=list)
    #: It may have an entry hidden in the future (a held lease, a sleeper, a stale wake_at).
    hidden: bool = False


class QueueModel:
    """The contract of a `Scheduler`: owed and allowed deliveries per workflow.

    One store may deliver twice what another delivers once, so the model keeps bounds rather
    than one answer. *Owed* is a delivery that must come: a wakeup not yet delivered, a due
    sleeper, a lease that certainly lapsed. *Allowed* is a count of the deliveries the wakeups
    so far could account for. A store fails when it answers "nothing" while something is owed
    (a lost wakeup), or delivers more than its wakeups account for (a delivery from nothing),
    or breaks a promise about one delivery: `wake_at` declines after `cancel` and only then,
    `extend` keeps a live delivery and refuses an answered or cancelled one, `cancel` counts
    what was there.
    """

    def __init__(self, lease: timedelta, slack: timedelta) -> None:
        self.lease = lease
        self.slack = slack
        self.queues: dict[str, _Queue] = {}

    def of(self, workflow: str) -> _Queue:
        return self.queues.setdefault(workflow, _Queue())

    def credit(self, at: Span) -> None:
        """Count every sleeper that may have come due, and every lease that may have run out,
        by the time `at` ended, as a delivery the store may make."""
        for queue in self.queues.values():
            for sleeper in queue.sleepers:
                if not sleeper.credited and at.hi + self.slack >= sleeper.when:
                    sleeper.credited = True
                    queue.credits += 1
            for held in queue.held:
                if not held.credited and passed(held.lapse, at, self.slack) is not False:
                    held.credited = True
                    queue.credits += 1

    def make_ready(self, workflow: str) -> None:
        queue = self.of(workflow)
        queue.ready = True
        queue.credits += 1
        for held in queue.held:
            held.current = False
        for held in queue.cancelled:
            held.pristine = False
        for sleeper in queue.sleepers:
            sleeper.owed = False  # a store with one entry per workflow wakes it now instead

    def delivered(self, delivery: Delivery, at: Span) -> str | None:
        """A store handed out `delivery`; the complaint if the model allows no such thing."""
        self.credit(at)
        queue = self.queues.get(delivery.workflow)
        if queue is None:
            return f"delivered {delivery.workflow!r}, which nothing here ever woke"
        if queue.credits <= 0:
            return f"delivered {delivery.workflow!r} with no wakeup left to account for it"
        queue.credits -= 1
        queue.ready = False
        queue.hidden = True
        # A store with one entry per workflow has just hidden it for this pass: an earlier
        # delivery's receipt is dead, and a sleeper it had is forgotten.
        for held in queue.held:
            held.current = False
        for sleeper in queue.sleepers:
            sleeper.owed = False
        queue.held.append(_Held(delivery, at + self.lease))
        return None

    def deliverable(self) -> bool:
        """Whether some wakeup here may account for a delivery (as of the last look)."""
        return any(queue.credits > 0 for queue in self.queues.values())

    def owed_ready(self) -> list[str]:
        return [workflow for workflow, queue in self.queues.items() if queue.ready]

    def owed_back(self, at: Span) -> list[str]:
        """Workflows whose current delivery's lease had certainly run out when `at` ran."""
        return [
            workflow
            for workflow, queue in self.queues.items()
            for held in queue.held
            if held.current and passed(held.lapse, at, self.slack) is True
        ]

    def find(self, delivery: Delivery) -> tuple[_Queue, _Held]:
        queue = self.of(delivery.workflow)
        for held in (*queue.held, *queue.cancelled, *queue.answered):
            if held.delivery is delivery:
                return queue, held
        raise AssertionError(f"the model lost track of {delivery!r}")

    def kept(self, held: _Held, kept: Delivery, at: Span, within: timedelta) -> None:
        """`extend` kept `held` for `within` more: never shorter than it was, and (a stream
        cannot date a delivery in the future) at least up to one lease."""
        shortest = min(within, self.lease)
        held.lapse = Span(max(held.lapse.lo, at.lo + shortest), max(held.lapse.hi, at.hi + within))
        held.credited = False
        held.delivery = kept

    def answered(self, queue: _Queue, held: _Held) -> None:
        for part in (queue.held, queue.cancelled):
            if held in part:
                part.remove(held)
        if held not in queue.answered:
            queue.answered.append(held)

    def slept(self, queue: _Queue, held: _Held, when: datetime) -> None:
        """`wake_at` through `held` said yes."""
        queue.hidden = True
        if held.current:
            queue.sleepers.append(_Sleeper(when, owed=True))
            held.current = False  # its receipt has moved on in a store of one entry each
            return
        # Through a stale delivery a store may keep it, move it, or let the current pass's
        # `done` drop it; it may be delivered from now on, and the current delivery's entry
        # has been written over (its receipt moved on).
        queue.sleepers.append(_Sleeper(when, owed=False, credited=True))
        queue.credits += 1
        for other in queue.held:
            other.current = False

    def sleeping(self) -> bool:
        return any(queue.sleepers for queue in self.queues.values())

    def asleep(self, at: Span) -> list[datetime]:
        """The sleepers `wake_due` must report as still to come when it runs within `at`:
        owed ones certainly not due yet, unless the workflow is ready already or will wake
        earlier anyway (a store may keep one wakeup per workflow: the earliest)."""
        found = []
        for queue in self.queues.values():
            if queue.ready or not queue.sleepers:
                continue
            first = min(queue.sleepers, key=lambda sleeper: sleeper.when)
            if first.owed and first.when > at.hi + self.slack:
                found.append(first.when)
        return found

    def woken(self, at: Span) -> None:
        """`wake_due` ran within `at`: every sleeper certainly due by then is ready.

        A store may keep one sleeper per workflow, the earliest asked for, so a later one may
        have been folded into the one that just woke: it is no longer owed on its own.
        """
        self.credit(at)
        for queue in self.queues.values():
            due = [s for s in queue.sleepers if s.when <= at.lo - self.slack]
            if not due:
                continue
            for sleeper in due:
                queue.sleepers.remove(sleeper)
                queue.ready = queue.ready or sleeper.owed
            for sleeper in queue.sleepers:
                sleeper.owed = False

    def cancel(self, workflow: str) -> tuple[bool, bool]:
        """Whether something certainly, and whether something possibly, was there to cancel;
        then forget it all."""
        queue = self.of(workflow)
        certain = (
            queue.ready
            or any(held.current for held in queue.held)
            or any(sleeper.owed for sleeper in queue.sleepers)
        )
        possible = certain or bool(queue.credits or queue.held or queue.sleepers or queue.hidden)
        for held in queue.held:
            held.pristine, held.current = True, False
        queue.cancelled.extend(queue.held)
        queue.held.clear()
        queue.sleepers.clear()
        queue.ready = False
        queue.credits = 0
        queue.hidden = False
        return certain, possible


class QueueMachine(RuleBasedStateMachine):
    """Random operations on a real `Scheduler` and on `QueueModel`, compared.

    `scheduler` is a fresh, prepared queue of its own (so "nothing is ready" is a fact), with
    the `lease` it was made with; `run` runs a coroutine on the loop the store lives on.
    """

    def __init__(self, make: MakeScheduler, time: Timeline, run: Run) -> None:
        super().__init__()
        self.make = make
        self.time = time
        self.run = run
        self.store: Scheduler | None = None
        self.lease = LONG
        self.model = QueueModel(self.lease, time.slack)
        prefix = f"model-{uuid.uuid4().hex[:12]}"
        self.ids = [f"{prefix}-{n}" for n in range(3)]
        #: An empty look costs this much real time on every store: keep it short.
        self.quiet = timedelta(milliseconds=10)
        #: Something that could wrongly bring a delivery back (an answer, a cancel, a sleep)
        #: happened since the last read that expected nothing.
        self.unread = True

    @initialize(data=st.data())
    def open(self, data: st.DataObject) -> None:
        """A fresh queue, its lease short enough to run out within the example, or not."""
        short = data.draw(st.booleans(), label="short lease")
        self.lease = self.time.short if short else LONG
        self.model = QueueModel(self.lease, self.time.slack)
        self.store = self.run(self.make(self.lease))
        assert self.queue.lease == self.lease

    @property
    def queue(self) -> Scheduler:
        assert self.store is not None, "the queue is opened first"
        return self.store

    def _call(self, coroutine: Awaitable[T]) -> tuple[T, Span]:
        lo = self.time.now()
        outcome: T = self.run(coroutine)
        return outcome, Span(lo, self.time.now())

    def _deliveries(self, *parts: str) -> list[Delivery]:
        return [
            held.delivery
            for queue in self.model.queues.values()
            for part in parts
            for held in getattr(queue, part)
        ]

    def _took(self, delivery: object, at: Span, how: str) -> None:
        assert isinstance(delivery, Delivery), f"{how} returned {delivery!r}"
        assert isinstance(delivery.receipt, str), f"{how}: receipt {delivery.receipt!r}"
        complaint = self.model.delivered(delivery, at)
        assert complaint is None, f"{how}: {complaint}"
        self.unread = True

    # --- rules ----------------------------------------------------------------------------

    @rule(data=st.data())
    def make_ready(self, data: st.DataObject) -> None:
        workflow = data.draw(st.sampled_from(self.ids), label="workflow")
        self.run(self.queue.make_ready(workflow))
        self.model.make_ready(workflow)

    def _next_ready(self) -> Delivery | None:
        delivery, at = self._call(self.queue.next_ready(self.quiet))
        if delivery is None:
            owed = self.model.owed_ready()
            assert not owed, f"next_ready found nothing though {owed} were made ready (lost)"
            return None
        self._took(delivery, at, "next_ready")
        return delivery

    @rule(data=st.data())
    def next_ready(self, data: st.DataObject) -> None:
        # An empty read is the dear one (a blocked XREADGROUP ends on Redis's clock tick, up
        # to 100 ms), and a second one in a row, with nothing deliverable, learns nothing.
        if self.model.deliverable() or self.unread:
            self.unread = False
            self._next_ready()

    @rule(data=st.data())
    def a_pass(self, data: st.DataObject) -> None:
        """What a worker does in one go: take, perhaps sleep, answer for the delivery; and
        what may land meanwhile: a new wakeup (an arrival), or a cancel (a delete)."""
        meanwhile = data.draw(
            st.sampled_from(["nothing", "a wakeup", "a cancel"]), label="meanwhile"
        )
        sleeps = data.draw(st.booleans(), label="sleeps")
        when = data.draw(st.sampled_from(WHENS), label="when")
        if not (self.model.deliverable() or self.unread):
            return
        self.unread = False
        delivery = self._next_ready()
        if delivery is None:
            return
        if meanwhile == "a wakeup":
            self.run(self.queue.make_ready(delivery.workflow))
            self.model.make_ready(delivery.workflow)
        elif meanwhile == "a cancel":
            self._cancel(delivery.workflow)
        if sleeps:
            self._wake_at(delivery, when)
        self._done(delivery)

    @rule(data=st.data())
    def look(self, data: st.DataObject) -> None:
        """Both doors a lapsed delivery may come back through, as a worker tries them."""
        if not self._deliveries("held"):
            return  # nothing held that could come back: next_ready's business
        lo = self.time.now()
        look, at = self._call(self.queue.reclaiming(self.lease))
        delivery = look.delivery
        if delivery is None:
            delivery, _ = self._call(self.queue.next_ready(self.quiet))
        if delivery is None:
            owed = self.model.owed_ready() + self.model.owed_back(Span(lo, at.hi))
            assert not owed, f"reclaiming and next_ready found nothing though {owed} are owed"
            return
        self._took(delivery, Span(lo, self.time.now()), "reclaiming or next_ready")

    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        delivery = pick(data, self._deliveries("held", "cancelled", "answered"), "delivery")
        if delivery is None:
            return
        self._done(delivery)

    def _done(self, delivery: Delivery) -> None:
        queue, held = self.model.find(delivery)
        outcome, _ = self._call(self.queue.done(delivery))
        assert outcome is None, f"done answered {outcome!r}"
        self.unread = True
        self.model.answered(queue, held)

    @rule(data=st.data())
    def wake_at(self, data: st.DataObject) -> None:
        when = data.draw(st.sampled_from(WHENS), label="when")
        delivery = pick(data, self._deliveries("held", "cancelled"), "delivery")
        if delivery is None:
            return
        self._wake_at(delivery, when)

    def _wake_at(self, delivery: Delivery, when: str) -> None:
        queue, held = self.model.find(delivery)
        now = self.time.now()
        moment = {
            "past": now - timedelta(seconds=1),
            "soon": now + self.time.short,
            "far": now + timedelta(hours=1),
        }[when]
        # Whole milliseconds: a store may keep times at that grain, and the model must agree
        # on which side of a moment a deadline falls.
        moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
        woken, _ = self._call(self.queue.wake_at(delivery, moment))
        assert isinstance(woken, bool), f"wake_at answered {woken!r}"
        self.unread = True
        if held in queue.cancelled and held.pristine:
            assert not woken, "wake_at accepted a delivery whose workflow was cancelled"
            return
        if held in queue.held and held.current:
            assert woken, "wake_at declined the delivery a worker still holds"
        if woken:
            self.model.slept(queue, held, moment)

    @rule(data=st.data())
    def wake_due(self, data: st.DataObject) -> None:
        earliest, at = self._call(self.queue.wake_due())
        owed = self.model.asleep(at)
        if owed:
            assert earliest is not None, (
                f"wake_due reported no sleeper, though one is due {min(owed)}"
            )
            assert earliest <= min(owed) + self.time.slack, (
                f"wake_due reported {earliest}, after the sleeper due {min(owed)}"
            )
        if earliest is not None:
            assert isinstance(earliest, datetime) and earliest.utcoffset() is not None
            assert any(q.sleepers or q.hidden for q in self.model.queues.values()), (
                f"wake_due reported {earliest} though nothing here sleeps or is held"
            )
            assert earliest > at.lo - self.time.slack, (
                f"wake_due reported {earliest} as still sleeping at {at.lo}"
            )
        self.model.woken(at)

    @rule(data=st.data())
    def extend(self, data: st.DataObject) -> None:
        longer = data.draw(st.booleans(), label="a whole lease")
        delivery = pick(data, self._deliveries("held", "cancelled", "answered"), "delivery")
        if delivery is None:
            return
        queue, held = self.model.find(delivery)
        within = self.lease if longer else min(self.time.short, self.lease)
        kept, at = self._call(self.queue.extend(delivery, within))
        if held in queue.cancelled or held in queue.answered:
            assert kept is None, "extend kept a delivery that was cancelled or answered for"
            return
        if held.current:
            assert kept is not None, "extend refused the delivery a worker still holds"
        if kept is not None:
            assert isinstance(kept, Delivery) and kept.workflow == delivery.workflow, kept
            self.model.kept(held, kept, at, within)

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        self._cancel(data.draw(st.sampled_from(self.ids), label="workflow"))

    def _cancel(self, workflow: str) -> None:
        gone, _ = self._call(self.queue.cancel(workflow))
        certain, possible = self.model.cancel(workflow)
        self.unread = self.unread or possible
        assert isinstance(gone, int) and gone >= 0, f"cancel answered {gone!r}"
        if certain:
            assert gone > 0, f"cancel of {workflow} removed nothing, though it was queued"
        if not possible:
            assert gone == 0, f"cancel of {workflow} removed {gone}, though nothing was queued"

    @rule(data=st.data())
    def advance(self, data: st.DataObject) -> None:
        """Let time pass, when something here runs on it: a lease, a sleeper."""
        by = data.draw(st.sampled_from(self.time.steps), label="by")
        if self._deliveries("held") or self.model.sleeping():
            self.run(self.time.advance(by))

    def teardown(self) -> None:
        if self.store is None:
            return
        for workflow in self.ids:
            self.run(self.store.cancel(workflow))
        close = getattr(self.store, "close", None)
        if close is not None:
            self.run(close())
