"""`RedisTimetable`: a queue's schedules as a hash of records and a sorted set by when each is
next due, both under the namespace's hash tag (one slot, so one script touches both, on a
cluster too). A swap is one script (`timetable_swap.lua`); the earliest is one `ZRANGE`. A
change is PUBLISHed on the namespace's schedules channel, which a running firer subscribes to
(`Subscribing`), so a schedule added by another process wakes it at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from durability.cancelling import stop_if_cancelled
from durability.redis.lua import script
from durability.redis.namespace import from_ms, key, ms, ms_at_or_after, text

__all__ = ["RedisTimetable"]

log = logging.getLogger("durability.redis")


class _Listener:
    """One subscription to the schedules channel, shared by every firer of a timetable in this
    process: a task that sets the current event at each message, and again when it fails."""

    __slots__ = ("_channel", "_event", "_opening", "_pubsub", "_redis", "_task", "users")

    def __init__(self, redis: Any, channel: str) -> None:
        self._redis = redis
        self._channel = channel
        self._event = asyncio.Event()
        self._pubsub: Any = None
        self._task: asyncio.Task[None] | None = None
        # Two firers (two workers on one durable) may ask at once: one subscribes, the other
        # waits for it. Without it the second closed the first's connection mid-subscribe
        # (handing its unread handshake reply back to the shared pool) and both read one.
        self._opening = asyncio.Lock()
        self.users = 0

    async def changes(self) -> asyncio.Event:
        async with self._opening:
            if self._task is None or self._task.done():  # first use, or the connection failed
                await self._close()
                pubsub = self._pubsub = self._redis.pubsub()
                await pubsub.subscribe(self._channel)
                self._task = asyncio.create_task(self._hear(pubsub))
        return self._event

    async def _hear(self, pubsub: Any) -> None:
        try:
            while True:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
                # redis-py can swallow a cancel (its reads under `wait_for` on 3.11): without
                # this the loop would read on for good and its closer would wait for it.
                stop_if_cancelled()
                if message is not None:
                    self._ring()
        except Exception:
            log.warning("the schedules channel failed; subscribing again", exc_info=True)
            self._ring()  # the firer looks, and its next `changes` subscribes again

    def _ring(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def _close(self) -> None:
        task, pubsub, self._task, self._pubsub = self._task, self._pubsub, None, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    async def close(self) -> None:
        async with self._opening:  # not while a caller of `changes` subscribes
            await self._close()


class RedisTimetable:
    """The `Timetable` beside a Redis queue of `namespace`."""

    __slots__ = ("_channel", "_keys", "_listener", "_redis")

    def __init__(self, redis: Any, namespace: str) -> None:
        self._redis = redis
        self._keys = [key(namespace, "schedules"), key(namespace, "schedules:due")]
        self._channel = key(namespace, "schedules:changed")
        self._listener: _Listener | None = None

    @contextlib.asynccontextmanager
    async def subscribed(self) -> AsyncIterator[None]:
        if self._listener is None:
            self._listener = _Listener(self._redis, self._channel)
        listener = self._listener
        listener.users += 1
        try:
            yield
        finally:
            listener.users -= 1
            if listener.users == 0:
                self._listener = None
                await listener.close()

    async def changes(self) -> asyncio.Event:
        if self._listener is None:
            raise RuntimeError("changes() is heard only inside subscribed()")
        return await self._listener.changes()

    async def announce(self) -> None:
        await self._redis.publish(self._channel, "changed")

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
