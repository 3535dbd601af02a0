"""`Crew`: what a worker's loops and passes share: its settings, its running passes and free
slots, and the few things any of them tells the queue (hand a workflow back, look again later,
finish with a standing). Each loop (`loops`) and each pass (`passing`) holds the crew and no
other worker state; nothing here runs on its own."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from typing import Any

from durability.bodies import start
from durability.checks import positive
from durability.faults import StoreDown, patiently
from durability.interfaces import (
    Checkpointer,
    Durable,
    FinishingEnded,
    Ledger,
    Retaining,
    Scheduler,
    Settling,
    TakingMany,
    Trimmed,
)
from durability.stepwise import Run
from durability.values import Delivery, Pass
from durability.worker.events import Emit, Observer, detailed, emitter
from durability.worker.nudging import Nudges
from durability.worker.running import Running
from durability.worker.settings import Settings

__all__ = ["Crew"]

log = logging.getLogger("durability.worker")


class Crew:
    """One worker's shared state; built by `work` from its `Settings`, each checked."""

    def __init__(
        self,
        durable: Durable,
        body: Callable[[Run], Awaitable[object]],
        settings: Settings,
        *,
        observer: Observer | None,
        clock: Callable[[], datetime],
        trim: bool = True,
    ) -> None:
        self.durable = durable
        #: How a pass starts a child workflow (`Run.child`).
        self.starter = functools.partial(start, durable)
        self.checkpointer: Checkpointer = durable.checkpointer
        self.scheduler: Scheduler = durable.scheduler
        self.lease = positive("lease", self.scheduler.lease)
        self.body = body
        self.pool = settings.pool
        self.budget = settings.budget
        self.tick = settings.tick
        # The primary reader's wait, whole: a wakeup ends it on every store, and a delivery
        # whose lease lapses is found at the lapse without cutting it short (the reclaimer,
        # or on a visibility-scored queue the store's own look, which comes when the earliest
        # hidden row shows and a lease after the last look at the latest).
        self.wait = settings.within
        self.within = settings.within
        self.contended = settings.contended
        self.sweep = settings.sweep
        self.emit = emitter(observer)
        # The per-step kinds, for an observer that asks; None spares every pass the asking.
        self.detail: Emit | None = self.emit if detailed(observer) else None
        self.clock = clock
        self.grace = settings.grace
        self.retry = settings.retry
        self.readers = settings.readers
        self.running: set[Running] = set()  # passes whose body runs or is about to: the slots
        # Passes whose body has ended, their answer (a finish, a wakeup, a hand-back) still on
        # its way to the store: out of the slots, so the next delivery need not wait on that
        # round trip, but still waited for by a drain.
        self.answering: set[Running] = set()
        # Who waits for a pass to free its slot (`until_freed`), woken all at once by `free`.
        # Plain futures, not an `asyncio.Condition`: nothing here needs its lock, and taking
        # it cost every pass an acquire and a release on each side.
        self.freed: list[asyncio.Future[None]] = []
        self.reading = 0  # reads in flight: each holds a slot until it returns
        self.extra_readers = 0
        self.stopping = False  # draining: take nothing new
        self.passes: asyncio.TaskGroup | None = None  # where passes run, once the loops do
        self.start_pass: Callable[[Running], Coroutine[Any, Any, None]] | None = None
        self.nudges: Nudges | None = None  # renewals writes asked for (`passing.written`)
        # The timer's hint: the earliest deadline it knows of, and a nudge when one is sooner.
        self.earlier = asyncio.Event()
        self.known_due: datetime | None = None
        # Asked once, not per pass: a runtime protocol check costs more than the call it guards.
        self.ledger = self.checkpointer if isinstance(self.checkpointer, Ledger) else None
        self.taking_many = durable if isinstance(durable, TakingMany) else None
        # A store whose take of many goes in one batch with the finishes of the turn it is
        # asked in says so (`RedisDurable`): its reader asks as soon as a slot frees.
        self.reads_with_finishes = bool(getattr(durable, "reads_with_finishes", False))
        # Such a read takes at most half the pool: the passes of one read end together, and
        # their finishes go with the next read, so a read of the whole pool would leave the
        # worker idle for that round trip and the store idle while the passes run; two halves
        # keep one running while the other's finishes and read are on the wire.
        self.most_read = max(1, self.pool // 2) if self.reads_with_finishes else self.pool
        # (A checkpointer that keeps no standings has none to write: its passes just finish.)
        self.settling: Settling | None = None
        if self.ledger is not None and isinstance(durable, Settling):
            self.settling = durable
        self.retaining = self.checkpointer if isinstance(self.checkpointer, Retaining) else None
        #: Writes a completed pass's ending with its finish (`concluding`), else None.
        self.ending: FinishingEnded | None = (
            durable if isinstance(durable, FinishingEnded) else None
        )
        # A queue that keeps answered wakeups until trimmed (the stream) is trimmed by the
        # worker that answers them, after it has, so an idle worker sends no trims at all.
        self.trimmed: Trimmed | None = None
        if trim and isinstance(self.scheduler, Trimmed) and self.scheduler.trim_every is not None:
            self.trimmed = self.scheduler
        self.answered = asyncio.Event()  # a pass ended since the last trim

    # -- slots -------------------------------------------------------------------------

    def slot_free(self) -> bool:
        # A slot counts as taken while a reader is reading for it, so readers never take
        # more deliveries between them than there are free slots.
        return len(self.running) + self.reading < self.pool

    async def wait_for_slot(self) -> None:
        await self.until_freed(self.slot_free)

    async def until_freed(self, ready: Callable[[], bool]) -> None:
        """Return once `ready()` holds, asking again each time a pass frees its slot."""
        while not ready():
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.freed.append(waiter)
            try:
                await waiter
            finally:
                # Cancelled before a pass freed a slot: still listed, unless a `free` since
                # took the list (and passed it over, as it does every waiter already done).
                if waiter.cancelled() and waiter in self.freed:
                    self.freed.remove(waiter)

    def ended(self, running: Running) -> None:
        """The body of `running` is over: its slot frees now, while its answer goes on."""
        self.running.discard(running)
        self.answering.add(running)
        self._wake_waiters()

    def free(self, running: Running) -> None:
        # The Run holds the pass's `written` hook, which holds `running`: break that cycle, or every
        # pass's Run and records would wait for the cyclic collector instead of going now.
        running.run = None
        self.running.discard(running)
        self.answering.discard(running)
        self.answered.set()
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        waiters, self.freed = self.freed, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def admit(
        self,
        delivery: Delivery,
        *,
        reclaimed: bool = False,
        holder: Pass | None = None,
        claimed: bool = False,
    ) -> None:
        """Run a delivery if a slot is free; otherwise hand it straight back to the queue."""
        if len(self.running) < self.pool:
            assert self.passes is not None and self.start_pass is not None
            # A delivery the store says lapsed (a row taken again after its lease ran out) is
            # a takeover as much as one the reclaimer found.
            reclaimed = reclaimed or delivery.lapsed
            running = Running(delivery, holder=holder, reclaimed=reclaimed, claimed=claimed)
            self.running.add(running)
            self.passes.create_task(self.start_pass(running))
            return
        # Only reachable when the reader and the reclaimer both filled the last slot at once.
        # A store that fails the hand-back must not end the loop that took it (the reader's,
        # the reclaimer's).
        await self.give_back(delivery, holder)

    # -- the timer's hint --------------------------------------------------------------

    def scheduled(self, due: datetime) -> None:
        """A wakeup was set for `due`: the timer wakes sooner if it did not know of it."""
        if self.known_due is None or due < self.known_due:
            self.known_due = due
            self.earlier.set()

    # -- what the queue and the checkpoint are told --------------------------------------

    async def wake(self, delivery: Delivery, due: datetime) -> None:
        """Have the queue hand the workflow out again at `due` (declined if it was deleted)."""
        if await self.scheduler.wake_at(delivery, due):
            self.scheduled(due)

    async def retain(self, workflow: str, until: datetime) -> None:
        """A store that forgets idle checkpoints must keep a suspended one past its wait."""
        if self.retaining is not None:
            await self.retaining.hold(workflow, until)

    async def hand_back(self, delivery: Delivery, holder: Pass | None) -> None:
        """Give a workflow back to the queue at once (declined if it was deleted meanwhile)."""
        if holder is not None:
            try:
                await self.checkpointer.release(holder)
            except Exception:
                log.exception("releasing %s failed", holder.workflow)
        await self.wake(delivery, self.clock())
        await self.scheduler.done(delivery)

    async def give_back(self, delivery: Delivery, holder: Pass | None) -> None:
        """`hand_back`, for a caller the store's failure must not stop: a hand-back that
        fails is logged, and the delivery lapses and is reclaimed like any other."""
        try:
            await self.hand_back(delivery, holder)
        except Exception:
            log.exception("handing %s back failed; its lease will", delivery.workflow)

    async def look_again(self, delivery: Delivery, reclaimed: bool) -> None:
        """Another live pass holds the workflow: wake it again later rather than drop it (the
        wakeup may carry input that pass will not see)."""
        self.emit("contended", delivery.workflow)
        # A reclaimed delivery's holder went quiet for a lease, but a write it made just
        # before dying kept the claim alive up to a lease past that write: the delivery
        # lapsed first. That claim ends within about a tick, so look again each tick
        # rather than after `contended`, or a takeover would wait for the preference.
        wait = min(self.contended, self.tick) if reclaimed else self.contended
        await self.wake(delivery, self.clock() + wait)
        await self.scheduler.done(delivery)

    async def finish(
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
