"""`PostgresTimetable`: a queue's schedules as rows of `schedules`, indexed by when each is next
due. A swap is one conditional statement (`timetable.sql`), atomic on its own. A change is
announced on the scheduler's channel (`NOTIFY`) under a payload of its own (`changed_payload`),
which every worker's listener hears and hands to its firer alone: an arrival's notification
wakes the readers and not the firer, and a schedule's wakes the firer and not the readers."""

from __future__ import annotations

import asyncio
from datetime import datetime

from durability.postgres.listener import Listener
from durability.postgres.statements import (
    DEFAULT_SCHEMA,
    Pool,
    channel,
    every,
    one,
    statements,
)

__all__ = ["PostgresTimetable", "changed_payload"]


def changed_payload(queue: str) -> str:
    """The payload `queue`'s schedule changes are announced with: the queue's name and a line
    of its own. A queue whose own name were this would only look once more for nothing."""
    return f"{queue}\nschedules"


class PostgresTimetable:
    """The `Timetable` of one queue of a Postgres schema."""

    __slots__ = ("_channel", "_listener", "_local", "_pool", "_queue", "_sql")

    def __init__(
        self,
        pool: Pool,
        queue: str,
        schema: str = DEFAULT_SCHEMA,
        listener: Listener | None = None,
    ) -> None:
        self._pool = pool
        self._queue = queue
        self._sql = statements("timetable.sql", schema)
        self._channel = channel(schema)
        #: The scheduler's listener, if it listens (made with `aside=changed_payload(queue)`).
        self._listener = listener
        self._local = asyncio.Event()

    async def changes(self) -> asyncio.Event:
        if self._listener is None:  # not listening: this process's changes alone
            if self._local.is_set():
                self._local = asyncio.Event()
            return self._local
        await self._listener.start()
        return self._listener.aside_mark()

    async def announce(self) -> None:
        self._local.set()
        if self._listener is not None:
            await one(self._pool, self._sql["announce"],
                      {"channel": self._channel, "payload": changed_payload(self._queue)})

    async def read(self, name: str) -> str | None:
        row = await one(self._pool, self._sql["read"], {"queue": self._queue, "name": name})
        return None if row is None else str(row[0])

    async def swap(self, name: str, old: str | None, new: str | None, due: datetime | None) -> bool:
        if old is None and new is None:
            return await self.read(name) is None
        statement = self._sql["insert" if old is None else "delete" if new is None else "update"]
        params = {"queue": self._queue, "name": name, "old": old, "new": new, "due": due}
        return await one(self._pool, statement, params) is not None

    async def due(self, now: datetime, limit: int) -> list[tuple[str, str]]:
        params = {"queue": self._queue, "now": now, "limit": limit}
        return [(str(n), str(r)) for n, r in await every(self._pool, self._sql["due"], params)]

    async def earliest(self) -> datetime | None:
        row = await one(self._pool, self._sql["earliest"], {"queue": self._queue})
        return None if row is None or row[0] is None else row[0]

    async def entries(self) -> list[tuple[str, str]]:
        rows = await every(self._pool, self._sql["entries"], {"queue": self._queue})
        return [(str(name), str(record)) for name, record in rows]
