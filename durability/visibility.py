"""`Visibility`: what a queue scored by visibility answers when asked to take over.

On such a queue (the Redis set, Postgres, SQLite) a taken delivery is a score a lease ahead,
so one whose worker went quiet shows again by itself and its readers take it like any other:
there is nothing for `reclaiming` to hand over and nothing for the reclaimer to wait for. The
three schedulers share that answer here rather than each keeping a copy.
"""

from __future__ import annotations

from datetime import timedelta

from durability.checks import positive
from durability.deprecation import Reclaim
from durability.values import Reclaimed

__all__ = ["Visibility"]


class Visibility(Reclaim):
    """`reclaiming` for a scheduler whose lapsed deliveries show again to its readers:
    nothing, at once, without a round trip (the duration is still checked). (`Reclaim` keeps
    the deprecated `reclaim` for a release: always None here.)"""

    __slots__ = ()

    async def reclaiming(self, idle: timedelta) -> Reclaimed:
        """Nothing, and nothing to wait for: a lapsed delivery is the reader's to take (its
        take says when the earliest hidden one shows)."""
        positive("idle", idle)
        return Reclaimed(None, None)
