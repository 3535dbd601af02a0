"""`StreamKeeping`: the stream queue's cold paths, over every level's stream (stream_levels.py):
taking over a lapsed delivery, trimming, and the queue's size and backlog. Apart from
`RedisStreamScheduler` because none of them is on a pass's path; it mixes them in.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from durability.cancelling import stop_if_cancelled
from durability.checks import positive, to_ms
from durability.redis.backlog import MOST_COUNTED, backlog
from durability.redis.namespace import footprint, text
from durability.redis.stream_levels import Levels, taken_entry
from durability.values import Backlog, Footprint, Reclaimed

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

__all__ = ["StreamKeeping"]

T = TypeVar("T")

#: The consumer group every worker of a queue reads through (`stream_scheduler.GROUP`).
GROUP = "workers"
#: How many pending deliveries `reclaiming` reads for the quietest (a busy group's pending list
#: can be long; one past these lapses no sooner than a lease after the look, the worker's bound).
_PENDING_READ = 1000
#: `XTRIM ... ACKED` arrived in this server version.
_ACKED_SINCE = (8, 2)


def _version(info: Any) -> tuple[int, ...]:
    """The lowest `redis_version` in an INFO reply (one node's dict, or a dict per node)."""
    if isinstance(info, dict) and "redis_version" in info:
        return tuple(int(part) for part in text(info["redis_version"]).split(".")[:2])
    if isinstance(info, dict) and info:
        return min(_version(node) for node in info.values())
    raise ValueError(f"INFO server reply carries no redis_version: {info!r}")


class StreamKeeping:
    """Mixed into `RedisStreamScheduler`: see the module doc."""

    ready: str
    sleeping: str
    consumer: str
    lease: timedelta
    reading: Levels
    _redis: Any
    _reclaim: AsyncScript
    _trim: AsyncScript
    _acked: bool | None

    if TYPE_CHECKING:

        async def regrouped(self, send: Callable[..., Awaitable[T]], /, *a: Any, **k: Any) -> T:
            ...

    async def reclaiming(self, idle: timedelta) -> Reclaimed:
        """Take over one delivery that went `idle` without a sign of life (`extend` is one); with
        nothing to take, say how soon the quietest pending delivery (of the first
        `_PENDING_READ`) will have been `idle`.

        First one plain `XPENDING` of the pending list: if it holds all of it and nothing has
        been idle that long (an idle worker's every look), that is the answer; otherwise one
        script takes a lapsed delivery over (`stream_reclaiming.lua`). Each level's stream
        is asked in turn, highest first."""
        positive("idle", idle)
        soonest: timedelta | None = None
        for level in self.reading.levels:
            found = await self._reclaiming(level, to_ms(idle))
            if found.delivery is not None:
                return found
            if found.lapses_in is not None:
                soonest = found.lapses_in if soonest is None else min(soonest, found.lapses_in)
        return Reclaimed(None, soonest)

    async def _reclaiming(self, level: str, limit: int) -> Reclaimed:
        pending = await self.regrouped(
            self._redis.xpending_range, level, GROUP, "-", "+", _PENDING_READ
        )
        stop_if_cancelled()
        idles = [int(held["time_since_delivered"]) for held in pending]
        if len(idles) < _PENDING_READ and all(idled < limit for idled in idles):
            if not idles:
                return Reclaimed(None, None)
            return Reclaimed(None, timedelta(milliseconds=limit - max(idles)))
        args = [GROUP, self.consumer, limit, _PENDING_READ, self.ready, to_ms(self.lease)]
        reply = await self.regrouped(self._reclaim, keys=[level], args=args)
        stop_if_cancelled()
        if reply[0] is not None:
            found = replace(taken_entry([reply[1], reply[0], *reply[3:]], reply[2]), lapsed=True)
            return Reclaimed(found, None)
        if reply[1] is None:
            return Reclaimed(None, None)
        return Reclaimed(None, timedelta(milliseconds=int(reply[1])))


    async def footprint(self) -> Footprint:
        """The entries of every priority level's stream (acknowledged ones included, until
        trimmed) with the wakeups parked for a limit's room, and the sleepers (`footprint.lua`)."""
        parts = {"stream": (self.ready, "queue:stream"), "sleeping": (self.sleeping, "zset")}
        return await footprint(self._redis, parts)

    async def backlog(self) -> Backlog:
        """Wakeups not yet read by the group (a workflow made ready twice counts twice), and
        the age of the oldest (`durability.redis.backlog`)."""
        found = [
            await backlog(self._redis, "stream_backlog", [level], [GROUP, MOST_COUNTED])
            for level in self.reading.levels
        ]
        ages = [one.oldest for one in found if one.oldest is not None]
        return Backlog(sum(one.ready for one in found), max(ages) if ages else None)

    async def trim(self) -> int:
        """Remove entries every consumer group has acknowledged; return how many went.

        On Redis 8.2+ (read once from `INFO server`) the server decides (`XTRIM ... ACKED`).
        Older servers get `XTRIM MINID` at the oldest entry any group still holds pending or
        has not been handed yet, so an entry a group still owes is never trimmed; one stuck
        pending entry holds back everything behind it until `reclaiming` moves it on.
        """
        if self._acked is None:
            self._acked = _version(await self._redis.info("server")) >= _ACKED_SINCE
        mode = "acked" if self._acked else "minid"
        levels = self.reading.levels
        return sum([int(await self._trim(keys=[level], args=[mode])) for level in levels])
