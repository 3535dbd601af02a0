"""The worker's defaults, in one place (how often it renews, how long it waits), and
`Settings`: what `work` was given, checked and with the defaults filled in."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from durability.checks import positive
from durability.failures import Retry
from durability.interfaces import Durable

__all__ = [
    "GLANCE", "GRACE", "NUDGE", "READERS", "SHUTDOWN", "SWEEP", "TICK", "WITHIN", "Settings",
]

#: How often claims and deliveries are renewed, unless the lease is short.
TICK = timedelta(seconds=1)
#: How long one blocking read waits for work: a wakeup ends it at once, so this is only how
#: often an idle worker's read comes round again (a request or two each time). A store that
#: must look for lapsed rows itself looks sooner (the Redis set once a lease, Postgres every
#: `poll`, SQLite at its fallback).
WITHIN = timedelta(seconds=60)
#: How often the timer looks for deadlines nobody told it of (another worker's sleepers, if
#: that worker died): the one look of an idle worker that is not driven by what the store said.
SWEEP = timedelta(seconds=15)
#: How long shutdown waits for a running pass to stop and hand its workflow back.
SHUTDOWN = timedelta(seconds=5)
#: How many takes a busy worker keeps in flight at once, for a store that does not say
#: (`work`'s `readers`): each is a script or statement of its own on most stores.
READERS = 8
#: How long after a write the delivery is renewed, unless the pass has ended by then.
NUDGE = timedelta(milliseconds=100)
#: How long a drain (`work`'s `stop`) waits for running passes by default.
GRACE = timedelta(seconds=30)
#: How long an extra reader waits for work: it is there for a busy queue, not to wait.
GLANCE = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class Settings:
    """`work`'s settings, each checked (`checked`): what every loop and pass of one worker
    reads from its `Crew`."""

    pool: int
    budget: timedelta
    tick: timedelta
    within: timedelta
    contended: timedelta
    sweep: timedelta
    readers: int
    grace: timedelta
    retry: Retry

    @classmethod
    def checked(
        cls,
        durable: Durable,
        *,
        pool: int,
        budget: timedelta,
        tick: timedelta | None,
        within: timedelta,
        contended: timedelta | None,
        sweep: timedelta,
        readers: int | None,
        grace: timedelta,
        retry: Retry,
    ) -> Settings:
        """The settings `work` was given over `durable`, defaults filled in (`tick` from the
        scheduler's lease, `contended` from `tick`, `readers` from the store), or a
        `ValueError` / `TypeError` naming the one at fault."""
        lease = positive("lease", durable.scheduler.lease)
        if tick is None:
            # Renewal must keep up with the lease, or a live pass's claim lapses between ticks.
            tick = min(TICK, lease / 4)
        elif positive("tick", tick) > lease / 2:
            raise ValueError(
                f"tick ({tick}) must be at most half the scheduler's lease ({lease}): the"
                " keeper renews every tick, and a renewal that fails needs a second try inside"
                " the lease"
            )
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
        assert isinstance(readers, int)
        return cls(pool, budget, tick, within, contended, sweep, min(readers, pool), grace, retry)
