"""`MemoryScheduler`: the queue of wakeups over dicts, the reference the other schedulers match.

Shaped like the Redis stream scheduler rather than the sorted set: ready wakeups in line
(`memory_ready.Ready`: strict priority, then the order they became ready), a pending list of
deliveries held by workers, and sleepers that `wake_due` moves into line. That keeps the
worker's timer and reclaimer honest in tests. Every method does its work between two awaits,
so on one event loop each is atomic, as a Lua script is: a limit's check and its take are one
step. A reader that finds only full limits sleeps until a holder answers or lapses or a rate's
window has room (one timer for the queue, `_arm`): never a poll.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from durability.checks import check_limit, check_priority, check_workflow, positive
from durability.clock import Clock, utcnow
from durability.deprecation import Reclaim
from durability.memory_ready import Held, Limits, Ready, merged
from durability.schedules.timetable import MemoryTimetable
from durability.storekit.traffic import Traffic, counted
from durability.values import Backlog, Delivery, Footprint, Limit, Reclaimed

__all__ = ["MemoryScheduler"]


def _settle(waiter: asyncio.Future[None]) -> bool:
    if waiter.done():
        return False
    waiter.set_result(None)
    return True


@dataclass(slots=True)
class _Sleeper:
    when: datetime
    priority: int
    limit: Limit | None


class MemoryScheduler(Reclaim):
    """A `Scheduler` over a line of ready wakeups, a pending list and a set of sleepers.
    (`Reclaim` keeps the deprecated `reclaim` for a release.)"""

    def __init__(
        self,
        *,
        lease: timedelta = timedelta(seconds=30),
        clock: Clock = utcnow,
        traffic: Traffic | None = None,
    ) -> None:
        self.lease = positive("lease", lease)
        self._clock = clock
        #: Every call, counted (`durability.storekit.traffic`).
        self.traffic = traffic if traffic is not None else Traffic()
        self._ready = Ready()
        self._pending: dict[str, Held] = {}
        self._sleeping: dict[str, _Sleeper] = {}
        self._limits = Limits(self.lease)
        self._opens: dict[str, datetime] = {}  # when each parked key may have room again
        self._alarm: asyncio.TimerHandle | None = None
        self._alarm_at: datetime | None = None
        self._alarm_loop: asyncio.AbstractEventLoop | None = None
        self._ids = itertools.count(1)
        self._waiters: deque[asyncio.Future[None]] = deque()
        #: The schedules kept beside this queue (`durability.schedules`).
        self.timetable = MemoryTimetable()

    @counted
    async def prepare(self) -> None:
        return None

    def _wake(self) -> None:
        """Wake one waiting reader; a reader that finds nothing it may take waits again."""
        while self._waiters:
            if _settle(self._waiters.popleft()):
                break

    def _enqueue(self, workflow: str, priority: int, limit: Limit | None) -> None:
        # One queued wakeup already covers every later one until a worker takes it: merged.
        self._ready.add(workflow, priority, limit)
        self._wake()

    @counted
    async def make_ready(
        self, workflow: str, *, priority: int = 0, limit: Limit | None = None
    ) -> None:
        check_workflow(workflow)
        if type(priority) is not int or priority != 0:  # the common case spared the call
            check_priority(priority)
        if limit is not None:
            check_limit(limit)
        self._ready.add(workflow, priority, limit)  # `_enqueue`, inline: every arrival
        if self._waiters:
            self._wake()

    # -- limits: what a full one waits for --------------------------------------------------

    def _fits(self, limit: Limit, now: datetime) -> bool:
        """Whether `limit` has room now; if not, note when it may, and wake a reader then."""
        if self._limits.room(limit, now):
            return True
        opens = self._limits.opens(limit, now)
        held = self._opens.get(limit.key)
        self._opens[limit.key] = opens if held is None else min(held, opens)
        self._arm(opens)
        return False

    def _arm(self, at: datetime) -> None:
        """Wake a reader at `at` (the queue's one timer, kept at the soonest opening)."""
        loop = asyncio.get_running_loop()
        alarm, soonest = self._alarm, self._alarm_at
        if alarm is not None and self._alarm_loop is loop and soonest is not None and soonest <= at:
            return
        if alarm is not None:
            alarm.cancel()
        delay = max((at - self._clock()).total_seconds(), 0.0)
        self._alarm_at, self._alarm_loop = at, loop  # (a loop of a former test's is not ours)
        self._alarm = loop.call_later(delay, self._ring)

    def _ring(self) -> None:
        self._alarm = self._alarm_at = None
        self._wake()

    def _reopen(self, now: datetime) -> None:
        """Put back in line the wakeups parked under a key whose opening has come."""
        for key, at in list(self._opens.items()):
            if at <= now:
                del self._opens[key]
                self._ready.unpark(key)

    def _free(self, receipt: str, held: Held) -> None:
        """A held delivery is answered or gone: its slot frees, and a reader parked on it
        is woken as an arrival wakes one."""
        limit = held.limit
        if limit is not None and self._limits.release(receipt, held) and self._ready.unpark(
            limit.key
        ):
            self._opens.pop(limit.key, None)
            self._wake()

    def _hand_out(self, workflow: str, held: Held, now: datetime, lapsed: bool) -> Delivery:
        receipt = str(next(self._ids))
        self._pending[receipt] = held
        if held.limit is not None:
            self._limits.hold(receipt, held, now)
        return Delivery(workflow, receipt, lapsed, held.priority, held.limit)

    def _take(self) -> Delivery | None:
        now = self._clock()
        if self._opens:
            self._reopen(now)
        picked = self._ready.pick(self._fits, now)
        if self._opens:  # a reader is woken at the next opening, whichever key it is
            self._arm(min(self._opens.values()))
        if picked is None:
            return None
        workflow, wakeup = picked
        held = Held(workflow, now, wakeup.priority, wakeup.limit)
        return self._hand_out(workflow, held, now, False)

    # -- the scheduler ------------------------------------------------------------------

    @counted
    async def next_ready(self, within: timedelta) -> Delivery | None:
        positive("within", within)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within.total_seconds()
        while (delivery := self._take()) is None:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            # Wait on a bare future with a timer rather than wait_for, which would wrap the
            # wait in a task of its own: one loop turn less between make_ready and the reader.
            arrived = loop.create_future()
            self._waiters.append(arrived)
            timer = loop.call_later(remaining, _settle, arrived)
            try:
                await arrived
            finally:
                timer.cancel()
                if arrived in self._waiters:
                    self._waiters.remove(arrived)
        return delivery

    @counted
    async def glance(self) -> Delivery | None:
        """`next_ready` without the wait: a ready wakeup taken now, or None (`MemoryDurable`'s
        take of many asks this after its first take)."""
        return self._take()

    @counted
    async def done(self, delivery: Delivery) -> None:
        held = self._pending.pop(delivery.receipt, None)
        if held is not None and held.limit is not None:  # no limit: no slot to free
            self._free(delivery.receipt, held)

    @counted
    async def wake_at(self, delivery: Delivery, when: datetime) -> bool:
        """Sleep the workflow until `when` with the priority and limit kept for the delivery
        (merged, as a ready wakeup is, with any sleep already set: the sooner time)."""
        held = self._pending.get(delivery.receipt)
        if held is None:
            return False
        sleeper = self._sleeping.get(delivery.workflow)
        if sleeper is None:
            self._sleeping[delivery.workflow] = _Sleeper(when, held.priority, held.limit)
        else:
            sleeper.when = min(sleeper.when, when)
            sleeper.priority = max(sleeper.priority, held.priority)
            sleeper.limit = merged(sleeper.limit, held.limit)
        return True

    @counted
    async def wake_due(self, now: datetime | None = None) -> datetime | None:
        moment = now or self._clock()
        for workflow, sleeper in list(self._sleeping.items()):
            if sleeper.when <= moment:
                del self._sleeping[workflow]
                self._enqueue(workflow, sleeper.priority, sleeper.limit)
        return min((sleeper.when for sleeper in self._sleeping.values()), default=None)

    @counted
    async def reclaiming(self, idle: timedelta) -> Reclaimed:
        """Take a delivery silent for `idle` (not for the lease: the caller says how long), and
        say how long until the quietest delivery left goes `idle`. A silent delivery whose
        limit is full (its slot given to another since it lapsed) goes back in line instead,
        to be taken when the limit has room, as any wakeup is."""
        positive("idle", idle)
        now = self._clock()
        taken: Delivery | None = None
        soonest: timedelta | None = None
        for receipt, held in list(self._pending.items()):
            lapses_in = held.quiet_from + idle - now
            if taken is None and lapses_in <= timedelta(0):
                del self._pending[receipt]
                limit = held.limit
                if limit is not None and not self._limits.room(limit, now, mine=receipt):
                    self._limits.release(receipt, held)
                    self._enqueue(held.workflow, held.priority, limit)
                    continue
                self._limits.release(receipt, held)  # taken over: its slot is its own
                again = Held(held.workflow, now, held.priority, limit)
                taken = self._hand_out(held.workflow, again, now, True)
                lapses_in = idle
            if soonest is None or lapses_in < soonest:
                soonest = lapses_in
        return Reclaimed(taken, soonest)

    @counted
    async def extend(self, delivery: Delivery, within: timedelta) -> Delivery | None:
        """Keep the delivery from `reclaiming(lease)` for `within` more (never less than
        before)."""
        positive("within", within)
        held = self._pending.get(delivery.receipt)
        if held is None:
            return None
        held.quiet_from = max(held.quiet_from, self._clock() + within - self.lease)
        return delivery

    @counted
    async def cancel(self, workflow: str) -> int:
        check_workflow(workflow)
        gone = 1 if self._ready.remove(workflow) else 0
        for receipt, held in list(self._pending.items()):
            if held.workflow == workflow:
                del self._pending[receipt]
                self._free(receipt, held)
                gone += 1
        if self._sleeping.pop(workflow, None) is not None:
            gone += 1
        return gone

    @counted
    async def footprint(self) -> Footprint:
        parts = {"ready": len(self._ready), "pending": len(self._pending)}
        return Footprint({**parts, "sleeping": len(self._sleeping)})

    @counted
    async def backlog(self) -> Backlog:
        """How many are ready (those waiting on a full limit too); not how long they waited:
        the queue keeps no times (a stamp per wakeup would cost every `make_ready`)."""
        return Backlog(len(self._ready))
