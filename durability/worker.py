"""The queue worker: `work` runs passes of a workflow body as wakeups arrive.

    take (a wakeup + its claim) ─▶ up to `pool` passes ─▶ Sleeping  ─▶ wake_at(due)
        ▲                                              ├ Blocked   ─▶ nothing: only a write
        │                                              └ Completed ─▶ nothing   from outside
    one take per free slot; reclaim abandoned ones every tick; then finish (release + done)

Four kinds of task share one task group: the readers (`Durable.take`, only while a slot is
free, so a full worker leaves work in the queue for others; one while idle, up to `readers`
while the queue keeps answering), the reclaimer (abandoned deliveries, on its own schedule
rather than before every read), the keeper (renews the claim and the delivery of every running
pass together, every tick), and the timer (moves due sleepers to the queue, sleeping until the
earliest deadline it knows of rather than polling); with `stop`, a fifth waits to drain.

An idle worker with nothing asleep therefore costs its store one `reclaim` per tick, one
`take` per `within`, and one `wake_due` per `sweep`.

Nothing a body raises ends the worker: a failure (an `Exception`, a group of them, or a
`BaseException` that is not the library's, such as a `KeyboardInterrupt` a step raised) is
recorded in the checkpoint (`durability.failures`), logged once, and either retried after the
policy's backoff or left failed; only cancelling `work` stops it, or `stop` (a drain). Each
pass ends by writing where it left the workflow (`Ledger.settle`), for `status` and listings.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, TypeVar, assert_never

from durability.cancelling import pause as paused
from durability.cancelling import stop_if_cancelled
from durability.failures import FAILURE, ONCE, Failure, Retry, attempt, describe, failed, leaves
from durability.failures import next_key as next_engine_key
from durability.faults import StoreDown, patiently
from durability.interfaces import (
    Checkpointer,
    Contended,
    Delivery,
    Durable,
    Fenced,
    Interruption,
    Ledger,
    Pass,
    Retaining,
    Scheduler,
    Settling,
    positive,
)
from durability.polling import set_within
from durability.stepwise import Blocked, Completed, Run, Sleeping, resume

T = TypeVar("T")
#: How often claims are renewed and abandoned deliveries looked for, unless the lease is short.
TICK = timedelta(seconds=1)
#: How long shutdown waits for a running pass to stop and hand its workflow back.
SHUTDOWN = timedelta(seconds=5)
#: How many takes a busy worker keeps in flight at once, for a store that does not say
#: (`work`'s `readers`): each is a script or statement of its own on most stores.
READERS = 8
#: How long after a write the delivery is renewed, unless the pass has ended by then.
NUDGE = timedelta(milliseconds=100)
#: How long a drain (`work`'s `stop`) waits for running passes by default.
GRACE = timedelta(seconds=30)
log = logging.getLogger("durability.worker")

Kind = Literal[
    "delivered",
    "started",
    "outcome",
    "failed",
    "retrying",
    "dead",
    "contended",
    "fenced",
    "expired",
    "unavailable",
]


@dataclass(frozen=True, slots=True)
class Event:
    """One moment in a delivery's life, for an observer (the lab measures through these).

    `at` is wall-clock seconds since the epoch (comparable across processes); `outcome` is set
    on "outcome", `error` on "failed", "fenced" and "unavailable" (the store kept failing the
    pass's writes: the workflow is handed back, not failed). A failed attempt is "failed"
    (with its `attempt`), then "retrying" (with `due`, when it is tried again) or "dead" (the
    workflow has failed, and only `durable.retry` brings it back); a pass that finds its
    workflow already failed is "dead" alone.
    """

    kind: Kind
    workflow: str
    at: float
    outcome: Completed[object] | Sleeping | Blocked | None = None
    error: BaseException | None = None
    attempt: int | None = None
    due: datetime | None = None


Observer = Callable[[Event], None]


#: How long an extra reader waits for work: it is there for a busy queue, not to wait.
GLANCE = timedelta(milliseconds=1)


@dataclass(slots=True, eq=False)
class _Running:
    delivery: Delivery
    holder: Pass | None = None
    body: asyncio.Task[Completed[object] | Sleeping | Blocked] | None = None
    nudging: asyncio.TimerHandle | None = None  # a renewal waiting for its moment (`NUDGE`)
    extending: asyncio.Task[None] | None = None  # a renewal on its way
    again: bool = False
    sending: bool = False
    claimed: bool = False
    reclaimed: bool = False
    run: Run | None = None  # the body's Run, once the pass has started it

    def unnudge(self) -> None:
        """Drop a renewal still waiting for its moment (the pass is ending)."""
        if self.nudging is not None:
            self.nudging.cancel()
            self.nudging = None


class _Escaped(Exception):
    """A body raised a `BaseException` that is not the library's (`KeyboardInterrupt`,
    `SystemExit`, a cancellation nobody asked for, a third party's own): carried out of the
    pass as an ordinary failure, because raised as itself it would end the worker (asyncio
    re-raises the first two out of the event loop). The original is its `__cause__`."""


class _AlreadyFailed(Interruption):
    """The pass found its workflow failed (a final failure recorded, no retry since): nothing
    is run, whatever woke it."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(f"failed: {failure.type}: {failure.message}")
        self.failure = failure


class _Drained(Exception):
    """Raised by the drain once it is over, so the task group cancels what is left."""


def utcnow() -> datetime:
    return datetime.now(UTC)


class _Worker:
    def __init__(
        self,
        durable: Durable,
        body: Callable[[Run], Awaitable[object]],
        *,
        pool: int,
        budget: timedelta,
        tick: timedelta,
        within: timedelta,
        contended: timedelta,
        sweep: timedelta,
        readers: int,
        observer: Observer | None,
        clock: Callable[[], datetime],
        grace: timedelta = GRACE,
        retry: Retry = ONCE,
    ) -> None:
        self.durable = durable
        self.checkpointer: Checkpointer = durable.checkpointer
        self.scheduler: Scheduler = durable.scheduler
        self.lease = positive("lease", self.scheduler.lease)
        self.body = body
        self.pool = pool
        self.budget = budget
        self.tick = tick
        # A row that becomes visible because a dead worker's lease ran out rings no doorbell
        # and sends no notification: an idle reader on a visibility-scored queue (the set,
        # Postgres, SQLite) finds it only at its next look. So no wait outlasts half a lease,
        # and such a takeover waits at most that much past the lease (costless at the
        # default lease, where `within` is the shorter).
        self.wait = min(within, self.lease / 2)
        self.within = within
        self.contended = contended
        self.sweep = sweep
        self.observer = observer
        self.clock = clock
        self.running: set[_Running] = set()
        self.freed = asyncio.Condition()
        self.earlier = asyncio.Event()
        self.known_due: datetime | None = None
        self.passes: asyncio.TaskGroup | None = None
        self.readers = readers
        self.reading = 0
        self.extra_readers = 0
        self.grace = grace
        self.stopping = False  # draining: take nothing new
        self.retry = retry
        # Asked once, not per pass: a runtime protocol check costs more than the call it guards.
        self.ledger = self.checkpointer if isinstance(self.checkpointer, Ledger) else None
        # (A checkpointer that keeps no standings has none to write: its passes just finish.)
        self.settling: Settling | None = None
        if self.ledger is not None and isinstance(durable, Settling):
            self.settling = durable
        self.retaining = self.checkpointer if isinstance(self.checkpointer, Retaining) else None

    # -- events ------------------------------------------------------------------------

    def emit(
        self,
        kind: Kind,
        workflow: str,
        outcome: Completed[object] | Sleeping | Blocked | None = None,
        error: BaseException | None = None,
        attempt: int | None = None,
        due: datetime | None = None,
    ) -> None:
        if self.observer is None:
            return
        try:
            self.observer(Event(kind, workflow, time.time(), outcome, error, attempt, due))
        except Exception:
            log.exception("observer failed on %s for %s", kind, workflow)

    # -- slots -------------------------------------------------------------------------

    async def _wait_for_slot(self) -> None:
        # A slot counts as taken while a reader is reading for it, so readers never take
        # more deliveries between them than there are free slots.
        async with self.freed:
            await self.freed.wait_for(lambda: len(self.running) + self.reading < self.pool)

    async def _free(self, running: _Running) -> None:
        # The Run holds `_written(running)`, which holds `running`: break that cycle, or every
        # pass's Run and records would wait for the cyclic collector instead of going now.
        running.run = None
        self.running.discard(running)
        async with self.freed:
            self.freed.notify_all()

    def _start(
        self, delivery: Delivery, reclaimed: bool, holder: Pass | None, claimed: bool
    ) -> None:
        assert self.passes is not None
        running = _Running(delivery, holder=holder, reclaimed=reclaimed, claimed=claimed)
        self.running.add(running)
        self.passes.create_task(self._pass(running))

    async def _admit(
        self,
        delivery: Delivery,
        *,
        reclaimed: bool = False,
        holder: Pass | None = None,
        claimed: bool = False,
    ) -> None:
        """Run a delivery if a slot is free; otherwise hand it straight back to the queue."""
        if len(self.running) < self.pool:
            self._start(delivery, reclaimed, holder, claimed)
            return
        # Only reachable when the reader and the reclaimer both filled the last slot at once.
        # A store that fails the hand-back must not end the loop that took it (the reader's,
        # the reclaimer's).
        await self._give_back(delivery, holder)

    # -- the loops ---------------------------------------------------------------------

    async def reader(self, primary: bool = True) -> None:
        """Take one workflow per free slot. The primary reader runs for the worker's life; the
        extra ones a busy queue calls up (`_call_readers`) leave at the first empty read, so an
        idle worker keeps one read in flight, and a busy one keeps several (a single reader
        caps a worker at one take per round trip, however many slots are free)."""
        failures = 0
        while True:
            await self._wait_for_slot()
            if self.stopping:
                return
            self.reading += 1
            try:
                # Only the primary reader waits for work; an extra one glances and leaves. Were
                # the extra ones to wait too, every wakeup would wake all of them at once (a
                # Postgres notification reaches every waiter), each taking its turn to read.
                within = self.wait if primary else GLANCE
                taken = await self.durable.take(within, self.budget, self.lease)
            except Exception:
                if not primary:
                    return
                # A store that went away is logged and tried again, backing off to `sweep`,
                # rather than ending the worker: the queue still holds everything.
                failures += 1
                pause = min(self.tick * 2 ** min(failures - 1, 10), self.sweep)
                log.exception("reading the queue failed; trying again in %s", pause)
                await paused(pause.total_seconds())
                continue
            finally:
                self.reading -= 1
            failures = 0
            stop_if_cancelled()
            if taken is None:
                if not primary:
                    return
                continue
            if self.stopping:
                # Taken while the drain began: give it straight back rather than start it.
                await self._give_back(taken.delivery, taken.holder)
                return
            await self._admit(taken.delivery, holder=taken.holder, claimed=True)
            self._call_readers()

    def _call_readers(self) -> None:
        """The queue had work: add a reader while slots are free and the cap allows."""
        if self.passes is None or self.stopping or self.extra_readers + 1 >= self.readers:
            return
        if len(self.running) + self.reading >= self.pool:
            return
        self.extra_readers += 1
        self.passes.create_task(self._extra_reader())

    async def _extra_reader(self) -> None:
        try:
            await self.reader(primary=False)
        finally:
            self.extra_readers -= 1

    async def reclaimer(self) -> None:
        while True:
            await paused(self.tick.total_seconds())
            while len(self.running) < self.pool:
                try:
                    delivery = await self.scheduler.reclaim(self.lease)
                except Exception:
                    log.exception("reclaim failed; trying again next tick")
                    break
                stop_if_cancelled()
                if delivery is None:
                    break
                log.info("reclaimed %s from a worker that stopped answering", delivery.workflow)
                await self._admit(delivery, reclaimed=True)

    async def keeper(self) -> None:
        while True:
            await paused(self.tick.total_seconds())
            if self.running:
                await asyncio.gather(*(self._keep(r) for r in list(self.running)))

    async def _keep(self, running: _Running) -> None:
        """Renew one pass's claim and delivery together, so they lapse together."""
        holder = running.holder
        if holder is None or running.body is None or running.body.done():
            return
        try:
            await asyncio.gather(
                self.checkpointer.renew(holder, self.lease), self._extend(running)
            )
        except Fenced as fenced:
            if running.body.done():
                return  # the pass ended and released its claim while the renewal was on its way
            # The budget is spent or someone else claimed it: the pass may be wedged in a step
            # that will never return, so stop it and let the workflow be looked at again.
            running.body.cancel()
            log.warning("pass of %s stopped: %s", holder.workflow, fenced)
        except Exception:
            log.exception("renewing %s failed; trying again next tick", holder.workflow)

    async def _extend(self, running: _Running) -> None:
        kept = await self.scheduler.extend(running.delivery, self.lease)
        if kept is not None:
            running.delivery = kept

    def _written(self, running: _Running) -> Callable[[], None]:
        """A write renews the claim; renew the delivery with it, or a takeover would wait for
        the delivery's older deadline and then for the claim's newer one.

        Not at once: most passes end a moment after their last write, and `done` then makes
        the renewal moot. So it waits `NUDGE` first and is dropped if the pass ends meanwhile.
        (A worker that dies inside that moment is still taken over within a tick of its claim
        lapsing: a reclaimed delivery re-looks at a held claim every tick.)

        A timer, not a task that sleeps: most passes cancel it, and a timer costs the loop one
        handle to drop where a task costs a start, a cancel and a wait.
        """
        loop = asyncio.get_running_loop()
        delay = min(NUDGE, self.tick).total_seconds()

        def start() -> None:
            running.nudging = None
            running.extending = asyncio.create_task(self._extend_after_write(running))

        def nudge() -> None:
            if running.extending is not None and not running.extending.done():
                running.again = True
                return
            if running.nudging is None:
                running.nudging = loop.call_later(delay, start)

        return nudge

    async def _extend_after_write(self, running: _Running) -> None:
        while True:
            running.again = False
            running.sending = True
            try:
                await self._extend(running)
            except Exception:
                log.exception("extending the delivery of %s failed", running.delivery.workflow)
            finally:
                running.sending = False
            stop_if_cancelled()
            if not running.again:
                return

    async def timer(self) -> None:
        while True:
            try:
                self.known_due = await self.scheduler.wake_due(self.clock())
            except Exception:
                log.exception("waking due workflows failed; trying again next tick")
                self.known_due = self.clock() + self.tick
            stop_if_cancelled()
            self.earlier.clear()
            while True:
                wait = self.sweep.total_seconds()
                if self.known_due is not None:
                    wait = min(wait, (self.known_due - self.clock()).total_seconds())
                if wait <= 0:
                    break
                if not await set_within(self.earlier, wait):
                    break
                self.earlier.clear()

    def _scheduled(self, due: datetime) -> None:
        if self.known_due is None or due < self.known_due:
            self.known_due = due
            self.earlier.set()

    # -- one pass ----------------------------------------------------------------------

    async def _retain(self, workflow: str, until: datetime) -> None:
        """A store that forgets idle checkpoints must keep a suspended one past its wait."""
        if self.retaining is not None:
            await self.retaining.hold(workflow, until)

    async def _finish(
        self, holder: Pass, delivery: Delivery, state: str, detail: dict[str, object]
    ) -> None:
        """End the pass and write where it left its workflow, for `status` and listings: in the
        same step where the durable can (`Settling`), else the standing and then `finish`.

        A store that fails the write for its own reasons (a cut connection, a restart) is asked
        again (`patiently`); if it stays down, the pass is left unanswered, so the delivery
        lapses and the next pass writes the standing: a finish never lands without its
        standing, or `status` would say the workflow is still what it was (running, sleeping)
        after it failed or completed. A standing the store refuses outright (not a passing
        fault) is logged, and the pass finishes without it."""
        workflow = holder.workflow
        if self.settling is None and self.ledger is None:
            await self.durable.finish(holder, delivery)
            return
        try:
            if self.settling is not None:
                settling = self.settling
                stood = await patiently(
                    self.checkpointer,
                    workflow,
                    lambda: settling.finish_settled(holder, delivery, state, detail),
                )
            else:
                assert self.ledger is not None
                ledger = self.ledger
                stood = await patiently(
                    self.checkpointer, workflow, lambda: ledger.settle(holder, state, detail)
                )
                await self.durable.finish(holder, delivery)
        except StoreDown as lost:
            self.emit("unavailable", workflow, error=lost)
            log.warning(
                "finishing %s (%s) failed; its delivery lapses and the next pass finishes it: %s",
                workflow,
                state,
                lost,
            )
            return
        except Exception:
            log.exception(
                "the store refused the standing of %s (%s); finishing without it", workflow, state
            )
            await self.durable.finish(holder, delivery)
            return
        if stood is False:
            log.info("%s: a newer pass has its standing; %s not written", workflow, state)

    async def _hand_back(self, delivery: Delivery, holder: Pass | None) -> None:
        """Give a workflow back to the queue at once (declined if it was deleted meanwhile)."""
        if holder is not None:
            try:
                await self.checkpointer.release(holder)
            except Exception:
                log.exception("releasing %s failed", holder.workflow)
        now = self.clock()
        if await self.scheduler.wake_at(delivery, now):
            self._scheduled(now)
        await self.scheduler.done(delivery)

    async def _give_back(self, delivery: Delivery, holder: Pass | None) -> None:
        """`_hand_back`, for a caller the store's failure must not stop: a hand-back that
        fails is logged, and the delivery lapses and is reclaimed like any other."""
        try:
            await self._hand_back(delivery, holder)
        except Exception:
            log.exception("handing %s back failed; its lease will", delivery.workflow)

    async def _contended(self, running: _Running) -> None:
        workflow = running.delivery.workflow
        self.emit("contended", workflow)
        # A reclaimed delivery's holder went quiet for a lease, but a write it made just
        # before dying kept the claim alive up to a lease past that write: the delivery
        # lapsed first. That claim ends within about a tick, so look again each tick
        # rather than after `contended`, or a takeover would wait for the preference.
        wait = min(self.contended, self.tick) if running.reclaimed else self.contended
        due = self.clock() + wait
        if await self.scheduler.wake_at(running.delivery, due):
            self._scheduled(due)
        await self.scheduler.done(running.delivery)

    async def _settle(self, running: _Running) -> None:
        """Let a delivery renewal in flight land before the delivery is answered for; drop one
        that has not started."""
        running.unnudge()
        extending = running.extending
        if extending is None or extending.done():
            return
        if not running.sending:
            extending.cancel()
        await asyncio.wait([extending])

    async def _pass(self, running: _Running) -> None:
        delivery = running.delivery
        workflow = delivery.workflow
        self.emit("delivered", workflow)
        try:
            await self._claimed_pass(running)
        except asyncio.CancelledError:
            # Shutting down: hand the workflow back now rather than after a lease.
            await asyncio.shield(self._shutdown(running))
            raise
        except Exception:
            log.exception("the pass of %s could not be answered for", workflow)
        finally:
            await self._free(running)

    async def _shutdown(self, running: _Running) -> None:
        """Hand a running workflow back at shutdown, bounded in time: a store that hangs must
        not keep the worker from stopping (the lease hands the workflow back then instead)."""
        running.unnudge()
        pending = [
            task
            for task in (running.body, running.extending)
            if task is not None and not task.done()
        ]
        for task in pending:
            task.cancel()
        try:
            if pending:
                await asyncio.wait(pending, timeout=SHUTDOWN.total_seconds())
            await asyncio.wait_for(
                self._hand_back(running.delivery, running.holder), SHUTDOWN.total_seconds()
            )
        except (Exception, asyncio.CancelledError):
            log.exception("handing back %s at shutdown failed", running.delivery.workflow)

    async def _claimed_pass(self, running: _Running) -> None:
        workflow = running.delivery.workflow
        if running.claimed:
            holder = running.holder  # the reader took and claimed it in one move
        else:
            holder = await self.checkpointer.claim(workflow, self.budget, self.lease)
        if holder is None:
            # A live pass holds it. The wakeup may carry input that pass will not see, so look
            # again later instead of dropping it.
            await self._contended(running)
            return
        running.holder = holder
        self.emit("started", workflow)
        running.body = asyncio.create_task(self._resume(running, holder))
        try:
            outcome = await running.body
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            # The keeper stopped it: the budget is spent or the claim was taken.
            self.emit("expired", workflow)
            await self._settle(running)
            await self._hand_back(running.delivery, None)
            return
        except Contended:
            # The body claimed another workflow (a rollback, say) that a live pass holds.
            log.info("a pass of %s found another workflow held; looking again", workflow)
            await self._settle(running)
            await self.checkpointer.release(holder)
            await self._contended(running)
            return
        except Fenced as fenced:
            self.emit("fenced", workflow, error=fenced)
            log.warning("pass of %s was fenced: %s", workflow, fenced)
            await self._settle(running)
            await self._hand_back(running.delivery, None)
            return
        except StoreDown as lost:
            # Not the workflow's failure: what it recorded stands, and the step whose record
            # did not land runs again on the next pass.
            self.emit("unavailable", workflow, error=lost)
            log.warning("pass of %s stopped: %s", workflow, lost)
            await self._settle(running)
            await self._give_back(running.delivery, holder)
            return
        except _AlreadyFailed as dead:
            self.emit("dead", workflow, error=dead, attempt=dead.failure.attempt)
            log.info("%s has failed; not running it (durable.retry brings it back)", workflow)
            await self._settle(running)
            # Written again: the pass that failed it may have died before its standing landed.
            await self._finish(
                holder, running.delivery, "failed", {"failure": dead.failure.to_record()}
            )
            return
        except Exception as error:
            failure = error.__cause__ if isinstance(error, _Escaped) else error
            assert failure is not None
            await self._settle(running)
            await self._failed(running, holder, failure)
            return
        self.emit("outcome", workflow, outcome=outcome)
        await self._settle(running)
        # The standing is written with the finish (`_finish`), while the claim still holds
        # or in the same step as its release: a status reads "running" until it lands.
        state: str
        detail: dict[str, object]
        match outcome:
            case Completed():
                state, detail = "completed", {}
            case Sleeping(due=due):
                state, detail = "sleeping", {"until": due.isoformat()}
                await self._retain(workflow, due)
                if await self.scheduler.wake_at(running.delivery, due):
                    self._scheduled(due)
            case Blocked(waiting=waiting, listening=listening):
                state = "blocked"
                detail = {"waiting": sorted(waiting), "listening": sorted(listening)}
                await self._retain(workflow, self.clock())
            case _:
                assert_never(outcome)
        await self._finish(holder, running.delivery, state, detail)

    async def _failed(self, running: _Running, holder: Pass, failure: BaseException) -> None:
        """Record a failed attempt under the pass's claim, then wake the workflow after its
        backoff or leave it failed. The record comes first: a pass that cannot write it (fenced,
        or its store down) decides nothing, and the workflow is handed back as it would be for
        any other refused write."""
        workflow = running.delivery.workflow
        run = running.run
        records = dict(run.records) if run is not None else await self.checkpointer.load(workflow)
        ours = {id(leaf) for leaf in leaves(failure)}
        step = next(
            (noted for noted in (run.failed_steps if run is not None else ()) if id(noted.error)
             in ours),
            None,
        )
        policy = step.retry if step is not None and step.retry is not None else self.retry
        key = step.key if step is not None else None
        tried = attempt(records, key)
        now = self.clock()
        due: datetime | None = None
        if policy.retries(failure) and tried < policy.attempts:
            due = now + policy.pause(tried)
        kind, message, trace = describe(failure)
        noted = Failure(key, kind, message, trace, tried, now, due)
        self.emit("failed", workflow, error=failure, attempt=tried, due=due)
        log.error(
            "workflow %s failed on attempt %d (%s): %s",
            workflow,
            tried,
            "body" if key is None else f"step {key!r}",
            f"trying again at {due.isoformat()}" if due else "it has failed for good",
            exc_info=failure,
        )
        name = next_engine_key(records, FAILURE)
        try:
            await patiently(
                self.checkpointer,
                workflow,
                lambda: self.checkpointer.record(holder, name, noted.to_record()),
            )
        except Fenced as fenced:
            self.emit("fenced", workflow, error=fenced)
            log.warning("pass of %s was fenced recording its failure: %s", workflow, fenced)
            await self._hand_back(running.delivery, None)
            return
        except StoreDown as lost:
            self.emit("unavailable", workflow, error=lost)
            log.warning("pass of %s could not record its failure: %s", workflow, lost)
            await self._give_back(running.delivery, holder)
            return
        if due is not None:
            # A sleep this pass reached may be recorded too: wake at whichever comes first (the
            # pass that comes sleeps on, or tries the step again).
            deadline = run.deadline if run is not None else None
            wake = due if deadline is None else min(due, deadline.due)
            self.emit("retrying", workflow, attempt=tried, due=due)
            state = "sleeping"
            detail: dict[str, object] = {"until": wake.isoformat(), "failure": noted.to_record()}
            await self._retain(workflow, wake)
            if await self.scheduler.wake_at(running.delivery, wake):
                self._scheduled(wake)
        else:
            state, detail = "failed", {"failure": noted.to_record()}
            # A store that forgets idle checkpoints keeps a failed one a full retention from
            # now, so the failure is there to read (and to retry) for that long at least.
            await self._retain(workflow, now)
            self.emit("dead", workflow, error=failure, attempt=tried)
        await self._finish(holder, running.delivery, state, detail)

    async def _resume(
        self, running: _Running, holder: Pass
    ) -> Completed[object] | Sleeping | Blocked:
        """One pass of the body, on the worker's clock, as the task the keeper may cancel."""

        def seen(run: Run) -> Awaitable[object]:
            running.run = run  # so a failed pass can still tell which deadline it noted
            dead = failed(run.records)
            if dead is not None:
                raise _AlreadyFailed(dead)
            return self.body(run)

        try:
            return await resume(
                holder,
                self.checkpointer,
                seen,
                clock=self.clock,
                kept=True,
                on_write=self._written(running),
            )
        except (Exception, Interruption):
            raise
        except asyncio.CancelledError as cancelled:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # ours: the keeper, or shutdown
            raise _Escaped(f"the body raised {cancelled!r} unasked") from cancelled
        except BaseException as foreign:
            raise _Escaped(f"the body raised {foreign!r}") from foreign

    # -- all together ------------------------------------------------------------------

    async def _prepared(self, stop: asyncio.Event | None) -> bool:
        """Prepare the queue, trying again with a growing pause (up to `sweep`) while the store
        is not there yet, so a worker may start before its store. False if `stop` came first."""
        failures = 0
        while True:
            try:
                await self.scheduler.prepare()
                # A cancel swallowed here would start the loops under a task group that never
                # hears of it, and `work` would never stop.
                stop_if_cancelled()
                return True
            except Exception as error:
                failures += 1
                pause = min(self.tick * 2 ** min(failures - 1, 10), self.sweep)
                log.warning(
                    "the store is not ready (try %d: %r); trying again in %s",
                    failures,
                    error,
                    pause,
                )
            stop_if_cancelled()
            if stop is None:
                await asyncio.sleep(pause.total_seconds())
                continue
            if await set_within(stop, pause.total_seconds()):
                return False

    async def _drain(self, stop: asyncio.Event, quits: list[asyncio.Task[None]]) -> None:
        """Once `stop` is set: take nothing new, give the running passes `grace` to end on their
        own, then end (raising `_Drained`), which cancels what is left and so hands it back."""
        await stop.wait()
        self.stopping = True
        for task in quits:  # the reclaimer only ever brings new work (the timer brings it to
            task.cancel()  # the queue, for every worker, so it goes on)
        log.info("draining: %d pass(es) running, %s to finish", len(self.running), self.grace)
        try:
            async with asyncio.timeout(self.grace.total_seconds()), self.freed:
                await self.freed.wait_for(lambda: not self.running)
        except TimeoutError:
            log.warning("drain: grace over, handing back %d pass(es)", len(self.running))
        raise _Drained

    async def run(self, stop: asyncio.Event | None = None) -> None:
        if not await self._prepared(stop):
            return
        try:
            async with asyncio.TaskGroup() as passes:
                self.passes = passes
                passes.create_task(self.reader())
                quits = [passes.create_task(self.reclaimer())]
                passes.create_task(self.keeper())
                passes.create_task(self.timer())
                if stop is not None:
                    passes.create_task(self._drain(stop, quits))
        except* _Drained:
            log.info("drained")


async def work(
    durable: Durable,
    body: Callable[[Run], Awaitable[object]],
    *,
    pool: int = 16,
    budget: timedelta = timedelta(minutes=5),
    tick: timedelta | None = None,
    within: timedelta = timedelta(seconds=5),
    contended: timedelta | None = None,
    sweep: timedelta = timedelta(seconds=5),
    readers: int | None = None,
    observer: Observer | None = None,
    clock: Callable[[], datetime] = utcnow,
    stop: asyncio.Event | None = None,
    grace: timedelta = GRACE,
    retry: Retry = ONCE,
) -> None:
    """Run passes of `body` for every workflow `durable`'s scheduler hands out, until cancelled
    or drained.

    `pool` bounds concurrent passes; `budget` is how long one pass may hold a workflow however
    alive it looks (a step that knows better passes `within` to `run.step`); `tick` is how often
    claims and deliveries are renewed and abandoned deliveries looked for (by default a second,
    or a quarter of the lease if that is shorter: tick follows lease); `within` bounds one
    blocking read (and no wait outlasts half a lease, so an idle worker finds a dead worker's
    workflow soon after its lease runs out); `contended` is how long to wait before looking
    again at a workflow another live pass holds (one tick unless given); `sweep` is how often
    the timer looks for deadlines it was not told about (set by other workers); `readers` caps
    how many takes a busy worker keeps in flight at once (an idle one keeps one): by default the
    store's own `readers` attribute if it has one (Postgres answers a turn's takes with one
    statement, so it asks for many), else `READERS`. `clock` is the time of the timer and of
    every pass (the deadlines `run.sleep` records), so a test can move both.

    `retry` is how a failed pass is tried again, unless the step that failed names its own
    (`run.step(..., retry=...)`): after a failure with attempts left the workflow is woken after
    the policy's pause (`wake_at`, never a busy loop), and after the last, or a failure the
    policy does not retry, it has failed: recorded so, and not run again until `durable.retry`.
    The default, `ONCE`, retries nothing. Attempts are counted in the store (`failures`).

    Stopping, two ways:

    - Setting `stop` drains: `work` takes nothing new, gives the passes running then up to
      `grace` to end on their own (each finishes its steps, so a deploy re-runs none), hands
      back whatever is still running after that, and returns.
    - Cancelling `work` hands every running workflow back to the queue at once, waiting at
      most `SHUTDOWN` for a store that does not answer.

    A store that is not there yet when `work` starts is tried again, with a growing pause,
    until it answers (or `stop` is set); one that fails while `work` runs is ridden out by
    each loop, and a pass whose writes it keeps failing is handed back, not failed.
    """
    if tick is None:
        # Renewal must keep up with the lease, or a live pass's claim lapses between ticks.
        tick = min(TICK, positive("lease", durable.scheduler.lease) / 4)
    if contended is None:
        contended = tick
    if readers is None:
        readers = getattr(durable, "readers", READERS)
    for name, count in (("pool", pool), ("readers", readers)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"{name} must be a positive count, got {count!r}")
    if not isinstance(retry, Retry):
        raise TypeError(f"retry must be a Retry, not {type(retry).__name__}")
    for name, value in (
        ("budget", budget),
        ("tick", tick),
        ("within", within),
        ("contended", contended),
        ("sweep", sweep),
        ("grace", grace),
    ):
        positive(name, value)
    worker = _Worker(
        durable,
        body,
        pool=pool,
        budget=budget,
        tick=tick,
        within=within,
        contended=contended,
        sweep=sweep,
        readers=min(readers, pool),
        observer=observer,
        clock=clock,
        grace=grace,
        retry=retry,
    )
    await worker.run(stop)
