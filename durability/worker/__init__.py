"""The queue worker: `work` runs passes of a workflow body; nothing a body raises ends it.

| module | owns |
|---|---|
| `loops` | the reader, reclaimer, keeper, timer and drain, as tasks of one group |
| `passing` | one pass: claimed → resumed → ended → answered; the renewal after a write |
| `nudging` | the renewals writes asked for, waiting for their moment on one timer |
| `endings` | how a pass can end, one type each, and the table of what each tells the store |
| `failing` | a pass whose body raised: the failure recorded, then a retry or the failed state |
| `crew` | what the loops and passes share: settings, running passes, slots, hand-backs |
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta

from durability.bodies import by_name
from durability.clock import utcnow
from durability.failures import ONCE, Retry
from durability.interfaces import Durable
from durability.stepwise import Run
from durability.worker.crew import Crew
from durability.worker.events import Event, Kind, Observer
from durability.worker.loops import freeze_first, run
from durability.worker.settings import (
    GLANCE,
    GRACE,
    NUDGE,
    READERS,
    SHUTDOWN,
    SWEEP,
    TICK,
    WITHIN,
    Settings,
)

__all__ = [
    "GLANCE",
    "GRACE",
    "NUDGE",
    "READERS",
    "SHUTDOWN",
    "SWEEP",
    "TICK",
    "WITHIN",
    "Event",
    "Kind",
    "Observer",
    "freeze_first",
    "utcnow",
    "work",
]


async def work(
    durable: Durable,
    body: Callable[[Run], Awaitable[object]] | Mapping[str, Callable[[Run], Awaitable[object]]],
    *,
    pool: int = 16,
    budget: timedelta = timedelta(minutes=5),
    tick: timedelta | None = None,
    within: timedelta = WITHIN,
    contended: timedelta | None = None,
    sweep: timedelta = SWEEP,
    readers: int | None = None,
    observer: Observer | None = None,
    clock: Callable[[], datetime] = utcnow,
    stop: asyncio.Event | None = None,
    grace: timedelta = GRACE,
    retry: Retry = ONCE,
    trim: bool = True,
) -> None:
    """Run passes of `body` for every workflow `durable`'s scheduler hands out, until cancelled
    or drained.

        take (a wakeup + its claim) ─▶ up to `pool` passes ─▶ Sleeping  ─▶ wake_at(due)
            ▲                                              ├ Blocked   ─▶ nothing: only a write
            │                                              └ Completed ─▶ nothing   from outside
        a take per free slot (or one for all: `TakingMany`); reclaim abandoned ones as they lapse;
        then finish (release + done), its slot already free for the next take

    `pool` bounds the bodies running at once (a pass whose body has ended frees its slot while
    its finish is on its way to the store, and a drain waits for that finish); `budget` is how
    long one pass may hold a workflow however alive it looks (a step that knows better passes
    `within` to `run.step`); `tick` is how often
    claims and deliveries are renewed (by default a second, or a quarter of the lease if that is
    shorter: tick follows lease; one above half the lease is refused, since a renewal that fails
    must have a second try inside the lease); `within` bounds one blocking read (a wakeup
    ends it; a store whose reader finds lapsed rows looks when one can lapse, by itself);
    `contended` is how long to wait before looking again at a workflow another live pass
    holds (one tick unless given); `sweep` is how often the timer looks for deadlines it was
    not told about (set by other workers). Idle, a worker looks for abandoned deliveries only
    when the store says the earliest held one can lapse (and a lease after its last look, for
    one handed out since), and wakes sleepers when the earliest deadline it knows of comes
    (and every `sweep`), so it costs a few requests a minute. `readers` caps
    how many takes a busy worker keeps in flight at once (an idle one keeps one): by default the
    store's own `readers` attribute if it has one, else `READERS`. A store that takes many in
    one move (`TakingMany`: Postgres, Redis) is read by one reader that asks for as many as there
    are free slots, and `readers` does not apply. `clock` is the time of the timer and of
    every pass (the deadlines `run.sleep` records), so a test can move both.

    `retry` is how a failed pass is tried again, unless the step that failed names its own
    (`run.step(..., retry=...)`): after a failure with attempts left the workflow is woken after
    the policy's pause (`wake_at`, never a busy loop), and after the last, or a failure the
    policy does not retry, it has failed: recorded so, and not run again until `durable.retry`.
    The default, `ONCE`, retries nothing. Attempts are counted in the store (`failures`).

    `trim`: over a queue that keeps answered wakeups until trimmed (`Trimmed`: the Redis stream),
    the worker trims it once as it starts and then, while passes end, every `trim_every` of the
    scheduler (a second by default; `trim_every_ms` in the URL, `off` for never). `trim=False`
    leaves the queue to something else.

    `body` may map names to bodies: each workflow runs the one it was `durable.start`ed as.

    Nothing a body raises ends the worker: it is recorded (`durability.failures`). Only these
    two stop it:

    - Setting `stop` drains: `work` takes nothing new, gives the passes running then up to
      `grace` to end on their own (each finishes its steps, so a deploy re-runs none), hands
      back whatever is still running after that, and returns.
    - Cancelling `work` hands every running workflow back to the queue at once, waiting at
      most `SHUTDOWN` for a store that does not answer.

    A store that is not there yet when `work` starts is tried again, with a growing pause,
    until it answers (or `stop` is set); one that fails while `work` runs is ridden out by
    each loop, and a pass whose writes it keeps failing is handed back, not failed.
    """
    settings = Settings.checked(
        durable, pool=pool, budget=budget, tick=tick, within=within, contended=contended,
        sweep=sweep, readers=readers, grace=grace, retry=retry,
    )
    run_body = by_name(body) if isinstance(body, Mapping) else body
    crew = Crew(durable, run_body, settings, observer=observer, clock=clock, trim=trim)
    await run(crew, stop)
