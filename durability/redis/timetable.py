"""`RedisTimetable`: a queue's schedules as a hash of records and a sorted set by when each is
next due, both under the namespace's hash tag (one slot, so one script touches both, on a
cluster too). A swap is one script (`timetable_swap.lua`); the earliest is one `ZRANGE`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from durability.redis.lua import script
from durability.redis.namespace import from_ms, key, ms, ms_at_or_after, text

__all__ = ["RedisTimetable"]


class RedisTimetable:
    """The `Timetable` beside a Redis queue of `namespace`."""

    __slots__ = ("_keys", "_redis")

    def __init__(self, redis: Any, namespace: str) -> None:
        self._redis = redis
        self._keys = [key(namespace, "schedules"), key(namespace, "schedules:due")]

    async def read(self, name: str) -> str | None:
        found = await self._redis.hget(self._keys[0], name)
        return None if found is None else text(found)

    async def swap(self, name: str, old: str | None, new: str | None, due: datetime | None) -> bool:
        args = [name, "0" if old is None else "1", old or "", "0" if new is None else "1",
                new or "", "" if due is None else str(ms_at_or_after(due))]
        return bool(int(await script(self._redis, "timetable_swap")(keys=self._keys, args=args)))

    async def due(self, now: datetime, limit: int) -> list[tuple[str, str]]:
        args = [str(ms(now)), str(limit)]
        found = await script(self._redis, "timetable_due")(keys=self._keys, args=args)
        return [(text(found[i]), text(found[i + 1])) for i in range(0, len(found), 2)]

    async def earliest(self) -> datetime | None:
        found = await self._redis.zrange(self._keys[1], 0, 0, withscores=True)
        return from_ms(int(found[0][1])) if found else None

    async def entries(self) -> list[tuple[str, str]]:
        found = await self._redis.hgetall(self._keys[0])
        return sorted((text(name), text(record)) for name, record in found.items())
