"""`PostgresTimetable`: a queue's schedules as rows of `schedules`, indexed by when each is next
due. A swap is one conditional statement (`timetable.sql`), atomic on its own."""

from __future__ import annotations

from datetime import datetime

from durability.postgres.statements import DEFAULT_SCHEMA, Pool, every, one, statements

__all__ = ["PostgresTimetable"]


class PostgresTimetable:
    """The `Timetable` of one queue of a Postgres schema."""

    __slots__ = ("_pool", "_queue", "_sql")

    def __init__(self, pool: Pool, queue: str, schema: str = DEFAULT_SCHEMA) -> None:
        self._pool = pool
        self._queue = queue
        self._sql = statements("timetable.sql", schema)

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
