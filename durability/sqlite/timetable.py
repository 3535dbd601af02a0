"""`SqliteTimetable`: a queue's schedules as rows of `durability_schedules`, indexed by when
each is next due. A swap is one conditional statement (`timetable.sql`), its own transaction.
A change is announced through the file's doorbell, as a wakeup is, under a name of its own."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import datetime

from durability.sqlite.database import SqliteDatabase, from_us, queries, to_us

__all__ = ["SqliteTimetable"]

_SQL = queries("timetable")


class SqliteTimetable:
    """The `Timetable` of one queue of a SQLite file."""

    __slots__ = ("_bell", "_database", "_queue")

    def __init__(self, database: SqliteDatabase, queue: str) -> None:
        self._database = database
        self._queue = queue
        # The doorbell's name for this queue's schedules: no queue's own name holds a newline
        # that a reader would wake for.
        self._bell = f"{queue}\nschedules"

    async def changes(self) -> asyncio.Event:
        return self._database.signal(self._bell)

    async def announce(self) -> None:
        self._database.notify(self._bell, ready=False)

    async def read(self, name: str) -> str | None:
        rows = await self._database.read(
            lambda c: c.execute(_SQL["read"], {"queue": self._queue, "name": name}).fetchall()
        )
        return str(rows[0][0]) if rows else None

    async def swap(self, name: str, old: str | None, new: str | None, due: datetime | None) -> bool:
        params = {"queue": self._queue, "name": name, "old": old, "new": new,
                  "due": None if due is None else to_us(due)}
        statement = _SQL["insert" if old is None else "delete" if new is None else "update"]
        if old is None and new is None:
            return await self.read(name) is None

        def step(connection: sqlite3.Connection) -> bool:
            return connection.execute(statement, params).rowcount == 1

        return await self._database.alone(step)

    async def due(self, now: datetime, limit: int) -> list[tuple[str, str]]:
        params = {"queue": self._queue, "now": to_us(now), "limit": limit}
        rows = await self._database.read(lambda c: c.execute(_SQL["due"], params).fetchall())
        return [(str(name), str(record)) for name, record in rows]

    async def earliest(self) -> datetime | None:
        rows = await self._database.read(
            lambda c: c.execute(_SQL["earliest"], {"queue": self._queue}).fetchall()
        )
        return None if rows[0][0] is None else from_us(int(rows[0][0]))

    async def entries(self) -> list[tuple[str, str]]:
        rows = await self._database.read(
            lambda c: c.execute(_SQL["entries"], {"queue": self._queue}).fetchall()
        )
        return [(str(name), str(record)) for name, record in rows]
