"""One pass, from its delivery to its answer: claimed → resumed → ended → answered.

`run_pass` claims the workflow (unless the reader took and claimed it in one move), runs the
body in the pass's own task (which the keeper may cancel), names how it ended (`endings`),
and has that answered. Cancelled (the worker is stopping), it hands the workflow back at
once, bounded in time.
Between the body's writes it renews the delivery a moment after each one (`written`), so a
takeover never waits on a delivery older than the claim.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from durability.cancelling import stop_if_cancelled
from durability.checks import ENGINE
from durability.endings import Ended, ending_key
from durability.failures import failed
from durability.faults import StoreDown
from durability.signals import Cancelled, Contended, Fenced, Interruption
from durability.stepwise import Blocked, Completed, Run, Sleeping, StepHook, resume
from durability.values import Pass
from durability.worker.concluding import AlreadyEnded
from durability.worker.crew import Crew
from durability.worker.endings import (
    AlreadyFailed,
    Busy,
    EndedBefore,
    Ending,
    FailedBefore,
    OtherHeld,
    Raised,
    Settled,
    Stopped,
    Superseded,
    Unreachable,
    Withdrawn,
    answer,
)
from durability.worker.events import Emit
from durability.worker.nudging import Nudges
from durability.worker.running import Running
from durability.worker.settings import NUDGE, SHUTDOWN

__all__ = ["Escaped", "extend", "renew_delivery", "run_pass", "written"]

log = logging.getLogger("durability.worker")


class Escaped(Exception):
    """A body raised a `BaseException` that is not the library's (`KeyboardInterrupt`,
    `SystemExit`, a cancellation nobody asked for, a third party's own): carried out of the
    pass as an ordinary failure, because raised as itself it would end the worker (asyncio
    re-raises the first two out of the event loop). The original is its `__cause__`."""


async def run_pass(crew: Crew, running: Running) -> None:
    """The whole pass of `running`'s delivery; it frees its slot whatever happens, and as soon
    as its body has ended: the answer's round trip to the store overlaps the next pass's take
    (a drain still waits for it)."""
    workflow = running.delivery.workflow
    crew.emit("delivered", workflow)
    try:
        holder, ending = await _ended(crew, running)
        crew.ended(running)
        await answer(crew, running, holder, ending)
    except asyncio.CancelledError:
        # Shutting down: hand the workflow back now rather than after a lease.
        await asyncio.shield(_shutdown(crew, running))
        raise
    except Exception:
        log.exception("the pass of %s could not be answered for", workflow)
    finally:
        crew.free(running)


async def _ended(crew: Crew, running: Running) -> tuple[Pass | None, Ending]:
    """Claim, run the body, and say how it ended."""
    workflow = running.delivery.workflow
    if running.claimed:
        holder = running.holder  # the reader took and claimed it in one move
    else:
        holder = await crew.checkpointer.claim(workflow, crew.budget, crew.lease)
    if holder is None and running.reclaimed:
        # Only a takeover asks again: a fresh wakeup that meets a claim met a live pass (it
        # came mid-pass), which holds it for as long as it runs.
        holder = await _claim_as_it_lapses(crew, workflow)
    if holder is None:
        return None, Busy()
    running.holder = holder
    crew.emit("started", workflow)
    # The body runs in this task, not one of its own: a task per pass cost a start, a turn of
    # the loop each way and a wait. The keeper stops it by cancelling this task (`halt`),
    # counted, so a cancel of the worker's own (shutdown) is still told apart below.
    current = asyncio.current_task()
    assert current is not None
    running.task = current
    asked = current.cancelling()  # cancels this task had before its body ran
    running.in_body = True
    try:
        try:
            outcome = await _resume(crew, running, holder, asked)
        finally:
            running.in_body = False
            for _ in range(running.halts):
                current.uncancel()  # the keeper's cancels end with the body they stopped
        return holder, Settled(outcome)
    except asyncio.CancelledError:
        if current.cancelling():
            raise
        return holder, Stopped()  # the keeper stopped it: the budget is spent or claim taken
    except Contended:
        return holder, OtherHeld()
    except Fenced as fenced:
        return holder, Superseded(fenced)
    except StoreDown as lost:
        return holder, Unreachable(lost)
    except AlreadyFailed as dead:
        return holder, FailedBefore(dead)
    except AlreadyEnded as before:
        return holder, EndedBefore(before)
    except Cancelled:
        return holder, Withdrawn()
    except Exception as error:
        failure = error.__cause__ if isinstance(error, Escaped) else error
        assert failure is not None
        return holder, Raised(failure)


async def _claim_as_it_lapses(crew: Crew, workflow: str) -> Pass | None:
    """Claim a workflow another pass holds, if its claim lapses soon after the delivery did.

    A delivery lapses a lease after its last renewal, but a write just before its worker died
    keeps the claim alive up to a lease past that write: at most a tick and the nudge later
    (the keeper renews both every tick; a write renews the delivery `NUDGE` after it). So a
    taken-over delivery (reclaimed, or a row the store says was taken again after its lease
    lapsed: `Delivery.lapsed`) meets a claim about to lapse. Asking again, soon and then less
    often (`_RETRY_CLAIM` doubling up to `_RETRY_CLAIM_MOST`), through that window takes it
    over within that much of the lapse, where looking again after `contended` would wait a
    tick more. A holder that still holds it at the end is alive after all: then the delivery
    is looked at again. A fresh wakeup never comes here (see `_ended`)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + (crew.tick + min(NUDGE, crew.tick)).total_seconds()
    pause = _RETRY_CLAIM
    while (left := until - loop.time()) > 0:
        await asyncio.sleep(min(pause.total_seconds(), left))
        holder = await crew.checkpointer.claim(workflow, crew.budget, crew.lease)
        if holder is not None:
            return holder
        pause = min(pause * 2, _RETRY_CLAIM_MOST)
    return None


#: The first pause before asking for a held claim again (`_claim_as_it_lapses`), and the most.
_RETRY_CLAIM = timedelta(milliseconds=20)
_RETRY_CLAIM_MOST = timedelta(milliseconds=100)


async def _resume(
    crew: Crew, running: Running, holder: Pass, asked: int
) -> Completed[object] | Sleeping | Blocked:
    """One pass of the body, on the worker's clock; `asked` is how many cancels the pass's
    task had before it, so a cancel raised inside is told ours (the keeper's, or shutdown's)
    or the body's own."""

    detail = crew.detail

    def seen(run: Run) -> Awaitable[object]:
        running.run = run  # so a failed pass can still tell which deadline it noted
        # A child's wakeup inherits its parent's priority (not its limit: a limit is the
        # parent body's own, and a child under it would wait on its parent's slot).
        priority = running.delivery.priority
        run.starter = crew.starter
        if priority != 0:
            run.starter = functools.partial(crew.starter, priority=priority)
        records = run.records
        if detail is not None:
            detail("loaded", run.workflow, token=holder.token, records=records)
        for key in records:
            if key.startswith(ENGINE):
                break
        else:  # no record of the engine's (most passes): nothing failed, retried or ended it
            running.ending_key = _FIRST_ENDING
            return crew.body(run)
        dead = failed(records)
        if dead is not None:
            raise AlreadyFailed(dead)
        # Completed or cancelled (a failed one is `dead` above). The key is asked once a pass:
        # the ending a completed pass writes goes under it (a body records no retry).
        key = running.ending_key = ending_key(records)
        over = records.get(key)
        if over is not None:
            raise AlreadyEnded(Ended.from_record(over))
        return crew.body(run)

    try:
        return await resume(
            holder,
            crew.checkpointer,
            seen,
            clock=crew.clock,
            kept=True,
            on_write=written(crew, running),
            on_step=None if detail is None else _step_told(detail, holder.workflow),
        )
    except (Exception, Interruption):
        raise
    except asyncio.CancelledError as cancelled:
        task = asyncio.current_task()
        if task is not None and task.cancelling() > asked:
            raise  # ours: the keeper, or shutdown
        raise Escaped(f"the body raised {cancelled!r} unasked") from cancelled
    except BaseException as foreign:
        raise Escaped(f"the body raised {foreign!r}") from foreign


#: The ending's key in a workflow never retried.
_FIRST_ENDING = ending_key({})


def _step_told(detail: Emit, workflow: str) -> StepHook:
    """A pass's `on_step`: each step that ran, as a "step" event."""

    def told(key: str, began: float, error: BaseException | None) -> None:
        detail("step", workflow, key=key, began=began, error=error)

    return told


async def _shutdown(crew: Crew, running: Running) -> None:
    """Hand a running workflow back at shutdown, bounded in time: a store that hangs must
    not keep the worker from stopping (the lease hands the workflow back then instead)."""
    running.unnudge()
    # The body ran in the pass's own task, so it has ended by now: only a renewal is left.
    extending = running.extending
    pending = [extending] if extending is not None and not extending.done() else []
    for task in pending:
        task.cancel()
    try:
        if pending:
            await asyncio.wait(pending, timeout=SHUTDOWN.total_seconds())
        await asyncio.wait_for(
            crew.hand_back(running.delivery, running.holder), SHUTDOWN.total_seconds()
        )
    except (Exception, asyncio.CancelledError):
        log.exception("handing back %s at shutdown failed", running.delivery.workflow)


# -- renewing the delivery after a write ------------------------------------------------


async def extend(crew: Crew, running: Running) -> None:
    """Renew the pass's delivery for a lease (the keeper's, and a write's)."""
    kept = await crew.scheduler.extend(running.delivery, crew.lease)
    if kept is not None:
        running.delivery = kept


def written(crew: Crew, running: Running) -> Callable[[], None]:
    """A write renews the claim; renew the delivery with it, or a takeover would wait for
    the delivery's older deadline and then for the claim's newer one.

    Not at once: most passes end a moment after their last write, and `done` then makes
    the renewal moot. So it waits `NUDGE` first and is dropped if the pass ends meanwhile.
    (A worker that dies inside that moment is still taken over just after its claim lapses:
    a taken-over delivery that meets a held claim asks for it again for a while,
    `_claim_as_it_lapses`.)

    A place in the worker's queue of `Nudges`, not a task that sleeps nor a timer of its
    own: most passes drop it, and an entry in that queue costs an append to drop.
    """
    nudges = crew.nudges
    if nudges is None:  # the worker's first write
        delay = min(NUDGE, crew.tick).total_seconds()
        nudges = crew.nudges = Nudges(delay, functools.partial(_start_extending, crew))
    return functools.partial(nudges.add, running)


def _start_extending(crew: Crew, running: Running) -> None:
    running.nudging = None
    extending = running.extending
    if extending is not None and not extending.done():
        running.again = True  # the keeper's renewal is on its way: once more after it
        return
    running.extending = asyncio.create_task(_extend_after_write(crew, running))


async def renew_delivery(crew: Crew, running: Running) -> None:
    """The keeper's renewal of the pass's delivery, made as a write's is: one at a time, as
    `running.extending`, so the pass's answer lets it land first (`Running.quiet`) and answers
    with the receipt it gave. A renewal the answer did not wait for could change the receipt
    (the set's does) after the answer was sent with the old one: the workflow would then stay
    held for a lease, and a limit's slot with it."""
    extending = running.extending
    if extending is None or extending.done():
        extending = running.extending = asyncio.create_task(_extend_after_write(crew, running))
    await asyncio.wait([extending])


async def _extend_after_write(crew: Crew, running: Running) -> None:
    while True:
        running.again = False
        running.sending = True
        try:
            await extend(crew, running)
        except Exception:
            log.exception("extending the delivery of %s failed", running.delivery.workflow)
        finally:
            running.sending = False
        stop_if_cancelled()
        if not running.again:
            return
