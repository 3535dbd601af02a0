"""The worker's defaults, in one place: how often it renews, how long it waits."""

from __future__ import annotations

from datetime import timedelta

__all__ = ["GLANCE", "GRACE", "NUDGE", "READERS", "SHUTDOWN", "SWEEP", "TICK", "WITHIN"]

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
