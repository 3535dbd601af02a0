"""The worker's loops, each a task in one task group over one `Crew`, riding out a failing store.

| loop | does | an idle worker's cost |
|---|---|---|
| `reader` | takes a workflow per free slot (more readers while work comes) | a `take` a `within` |
| `reclaimer` | takes over deliveries whose worker went quiet, at the lapse | a look a lease |
| `keeper` | renews the claim and delivery of every running pass together | nothing |
| `timer`, `firer` | wake due sleepers; start due schedules (`firer.py`) | a look a `sweep` each |
| `trimmer` | trims a stream's answered entries, every `trim_every` while passes end | nothing |
| `drain` | with `stop`: takes nothing new, waits `grace`, then ends the rest | nothing |
"""

from __future__ import annotations

import asyncio
import gc
import logging
from datetime import timedelta

from durability.cancelling import pause, stop_if_cancelled
from durability.interfaces import Taken, TakingMany, Trimmed
from durability.schedules.timetable import Timetabled
from durability.signals import Fenced
from durability.waits import set_within
from durability.worker.crew import Crew
from durability.worker.firer import firer
from durability.worker.passing import renew_delivery, run_pass
from durability.worker.running import Running
from durability.worker.settings import GLANCE

__all__ = ["freeze_first", "run"]

log = logging.getLogger("durability.worker")


class _Drained(Exception):
    """Raised by the drain once it is over, so the task group cancels what is left."""


async def run(crew: Crew, stop: asyncio.Event | None = None) -> None:
    """Run the loops until cancelled, or until `stop` is set and the drain is over.

    A store that fails is ridden out by each loop (logged, tried again), never by ending the
    worker; only a cancel ends the loops, even one a driver swallowed (`stop_if_cancelled`).
    """
    if not await _prepared(crew, stop):
        return
    freeze_first()
    crew.start_pass = lambda running: run_pass(crew, running)
    try:
        async with asyncio.TaskGroup() as passes:
            crew.passes = passes
            passes.create_task(reader(crew))
            quits = [passes.create_task(reclaimer(crew))]
            passes.create_task(keeper(crew))
            passes.create_task(timer(crew))
            if crew.trimmed is not None:
                passes.create_task(trimmer(crew, crew.trimmed))
            if isinstance(crew.scheduler, Timetabled):
                quits.append(passes.create_task(firer(crew, crew.scheduler.timetable)))
            if stop is not None:
                passes.create_task(drain(crew, stop, quits))
    except* _Drained:
        log.info("drained")


def freeze_first() -> bool:
    """Put what the process holds out of the garbage collector's sight, once, before its
    oldest generation has been collected (and with collection on): True if this did. `work`
    calls it before its first take, the store prepared.

    Until CPython (3.11, 3.12) has collected its oldest generation once, it has no count of the
    objects there to weigh new ones against, so it collects them all at its eleventh collection
    of the middle one: within the first thousand or so passes of a new worker process, a pause
    of 10 to 22 ms (a lab worker holds some 38,000 objects) during which every running pass
    waits. Collecting everything before the first take instead costs the same pause before any
    pass starts. So the young generations are collected (what the start-up left as garbage) and
    the rest frozen (`gc.freeze`: the modules, classes and functions that live as long as the
    process), so that first full collection, when it comes, looks only at what came since. A
    process that has collected its oldest generation before (a test run, a notebook) is left
    as it is."""
    if gc.isenabled() and gc.get_stats()[2]["collections"] == 0:
        gc.collect(1)
        gc.freeze()
        return True
    return False


async def _prepared(crew: Crew, stop: asyncio.Event | None) -> bool:
    """Prepare the queue, trying again with a growing pause (up to `sweep`) while the store
    is not there yet, so a worker may start before its store. False if `stop` came first."""
    failures = 0
    while True:
        try:
            await crew.scheduler.prepare()
            # A cancel swallowed here would start the loops under a task group that never
            # hears of it, and `work` would never stop.
            stop_if_cancelled()
            return True
        except Exception as error:
            failures += 1
            wait = min(crew.tick * 2 ** min(failures - 1, 10), crew.sweep)
            log.warning(
                "the store is not ready (try %d: %r); trying again in %s", failures, error, wait
            )
        stop_if_cancelled()
        if stop is None:
            await asyncio.sleep(wait.total_seconds())
            continue
        if await set_within(stop, wait.total_seconds()):
            return False


async def reader(crew: Crew, primary: bool = True) -> None:
    """Take one workflow per free slot. The primary reader runs for the worker's life; the
    extra ones a busy queue calls up (`_call_readers`) leave at the first empty read, so an
    idle worker keeps one read in flight, and a busy one keeps several (a single reader
    caps a worker at one take per round trip, however many slots are free).

    A store that takes many in one move (`TakingMany`) has one reader and no extra ones: each
    read asks for as many workflows as there are free slots, so a busy worker fills them with
    one statement and no task, wait or future a delivery."""
    many = crew.taking_many if primary else None
    failures = 0
    while True:
        if not crew.slot_free():  # asked first: a busy reader's every take would await it
            await crew.wait_for_slot()
            if many is not None and not crew.reads_with_finishes:
                # The passes of one batch end in the same turn: let all of them free their
                # slots before asking, or the first freed slot would be taken alone. (A store
                # whose read joins that turn's finishes in one batch reads at once: Redis.)
                await asyncio.sleep(0)
        if crew.stopping:
            return
        crew.reading += 1
        try:
            taken = await _read(crew, primary, many)
        except Exception:
            if not primary:
                return
            failures += 1
            await _read_failed(crew, failures)
            continue
        finally:
            crew.reading -= 1
        failures = 0
        stop_if_cancelled()
        if not taken and not primary:
            return
        for one in taken:
            if crew.stopping:
                # Taken while the drain began: give it straight back rather than start it.
                await crew.give_back(one.delivery, one.holder)
            else:
                await crew.admit(one.delivery, holder=one.holder, claimed=True)
        if crew.stopping:
            return
        if taken and many is None:
            _call_readers(crew)


async def _read(crew: Crew, primary: bool, many: TakingMany | None) -> list[Taken]:
    """One read: as many as the slots free (`TakingMany`), else one take."""
    if many is not None:
        return await many.take_up_to(
            lambda: min(crew.pool - len(crew.running), crew.most_read),
            crew.wait, crew.budget, crew.lease,
        )
    # Only the primary reader waits for work; an extra one glances and leaves. Were the extra
    # ones to wait too, every wakeup would wake all of them at once (a Postgres notification
    # reaches every waiter), each taking its turn to read.
    within = crew.wait if primary else GLANCE
    taken = await crew.durable.take(within, crew.budget, crew.lease)
    return [] if taken is None else [taken]


async def _read_failed(crew: Crew, failures: int) -> None:
    """After the `failures`th read in a row failed (called where it is caught): a store that
    went away is logged and tried again, backing off to `sweep`, rather than ending the
    worker, since the queue still holds everything."""
    wait = min(crew.tick * 2 ** min(failures - 1, 10), crew.sweep)
    log.exception("reading the queue failed; trying again in %s", wait)
    await pause(wait.total_seconds())


def _call_readers(crew: Crew) -> None:
    """The queue had work: add a reader while slots are free and the cap allows."""
    if crew.passes is None or crew.stopping or crew.extra_readers + 1 >= crew.readers:
        return
    if len(crew.running) + crew.reading >= crew.pool:
        return
    crew.extra_readers += 1
    crew.passes.create_task(_extra_reader(crew))


async def _extra_reader(crew: Crew) -> None:
    try:
        await reader(crew, primary=False)
    finally:
        crew.extra_readers -= 1


async def reclaimer(crew: Crew) -> None:
    """Take over deliveries whose worker stopped answering, looking only when one can have
    lapsed: the store says how soon its quietest held delivery goes a lease without a sign of
    life (`Scheduler.reclaiming`), and one handed out after the look, by any process, lapses
    no sooner than a lease after it. So it sleeps until the sooner of the two, waking just
    after the exact lapse: a renewal that moved the lapse later is found by that look, which
    sleeps until the new one. (A delivery this worker hands out needs no nudge: it lapses a
    lease from now at the soonest, after the look already planned.)"""
    while True:
        wait = _reclaim_bound(crew)
        if len(crew.running) >= crew.pool:
            wait = crew.tick  # no slot to run one in: look again once one may be free
        else:
            try:
                wait = await _reclaim_all(crew)
            except Exception:
                log.exception("reclaim failed; trying again next tick")
                wait = crew.tick
        await pause(wait.total_seconds())


def _reclaim_bound(crew: Crew) -> timedelta:
    # Not `sweep`: whoever hands a delivery out, it goes a lease idle no sooner than a lease
    # after it was handed out, so a look a lease after the last one misses nothing.
    return crew.lease


async def _reclaim_all(crew: Crew) -> timedelta:
    """Take over every lapsed delivery a free slot can run; how long until the next can lapse."""
    while len(crew.running) < crew.pool:
        look = await crew.scheduler.reclaiming(crew.lease)
        stop_if_cancelled()
        if look.delivery is None:
            wait = _reclaim_bound(crew)
            if look.lapses_in is not None:
                # Just past the lapse: the store rounds to its own millisecond.
                wait = min(wait, look.lapses_in + _PAST_LAPSE)
            return wait
        log.info("reclaimed %s from a worker that stopped answering", look.delivery.workflow)
        await crew.admit(look.delivery, reclaimed=True)
    return crew.tick


#: How long past a delivery's lapse the reclaimer looks, so the look does not come a
#: millisecond early (the store's clock and rounding) and find it still held.
_PAST_LAPSE = timedelta(milliseconds=2)


async def keeper(crew: Crew) -> None:
    while True:
        await pause(crew.tick.total_seconds())
        if crew.running:
            await asyncio.gather(*(_keep(crew, r) for r in list(crew.running)))


async def _keep(crew: Crew, running: Running) -> None:
    """Renew one pass's claim and delivery together, so they lapse together."""
    holder = running.holder
    if holder is None or not running.in_body:
        return
    try:
        await asyncio.gather(
            crew.checkpointer.renew(holder, crew.lease), renew_delivery(crew, running)
        )
    except Fenced as fenced:
        if not running.in_body:
            return  # the pass ended and released its claim while the renewal was on its way
        if await _cancelled(running) and crew.clock() < holder.budget_ends:
            # Cancelled: never stopped mid-effect (within its budget). Its next step raises
            # `Cancelled`; the step it is in, if any, has its result refused (the fence).
            return
        # The budget is spent or someone else claimed it: the pass may be wedged in a step
        # that will never return, so stop it and let the workflow be looked at again.
        running.halt()
        log.warning("pass of %s stopped: %s", holder.workflow, fenced)
    except Exception:
        log.exception("renewing %s failed; trying again next tick", holder.workflow)


async def _cancelled(running: Running) -> bool:
    """Whether a pass whose renewal was refused was refused by a cancel (asked of the store)."""
    run = running.run
    try:
        return run is not None and await run.cancelled()
    except Exception:
        log.exception("asking whether %s was cancelled failed", running.delivery.workflow)
        return False


async def timer(crew: Crew) -> None:
    while True:
        # Forget what the last look knew, so that a deadline scheduled while the store is
        # asked (`Crew.scheduled`) is kept even if it is later than that: the store may have
        # read before the pass's sleep was written, and its answer alone would lose it.
        crew.known_due = None
        crew.earlier.clear()
        try:
            found = await crew.scheduler.wake_due(crew.clock())
        except Exception:
            log.exception("waking due workflows failed; trying again next tick")
            found = crew.clock() + crew.tick
        stop_if_cancelled()
        heard = crew.known_due
        crew.known_due = found if heard is None or (found is not None and found < heard) else heard
        crew.earlier.clear()
        while True:
            wait = crew.sweep.total_seconds()
            if crew.known_due is not None:
                wait = min(wait, (crew.known_due - crew.clock()).total_seconds())
            if wait <= 0:
                break
            if not await set_within(crew.earlier, wait):
                break
            crew.earlier.clear()


async def trimmer(crew: Crew, trimmed: Trimmed) -> None:
    """Trim the queue once at the start (what an earlier run left), then after passes end, at
    most every `trim_every`: a short workload's stream stays short, an idle worker sends none."""
    every = trimmed.trim_every
    assert every is not None
    while True:
        try:
            removed = await trimmed.trim()
        except Exception:
            log.warning("trimming the queue failed; trying again in %s", every, exc_info=True)
        else:
            if removed:
                log.debug("trimmed %d answered entries", removed)
        stop_if_cancelled()
        await pause(every.total_seconds())
        await crew.answered.wait()
        crew.answered.clear()


async def drain(crew: Crew, stop: asyncio.Event, quits: list[asyncio.Task[None]]) -> None:
    """Once `stop` is set: take nothing new, give the running passes `grace` to end on their
    own, then end (raising `_Drained`), which cancels what is left and so hands it back."""
    await stop.wait()
    crew.stopping = True
    for task in quits:  # the reclaimer only ever brings new work (the timer brings it to
        task.cancel()  # the queue, for every worker, so it goes on)
    log.info("draining: %d pass(es) running, %s to finish", len(crew.running) + len(crew.answering),
             crew.grace)
    try:
        async with asyncio.timeout(crew.grace.total_seconds()):
            await crew.until_freed(lambda: not crew.running and not crew.answering)
    except TimeoutError:
        log.warning("drain: grace over, handing back %d pass(es)",
                    len(crew.running) + len(crew.answering))
    raise _Drained
