"""Waking whoever waits for a workflow's ending (`result`) on Postgres: the commit that writes
an ending notifies `<schema>_ended` with the workflow's id, and a watcher LISTENs on it through a
`Listener` of its own (a connection beside the pool for as long as it waits). While that
connection is down the bell says so, and `result` looks now and then instead."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta

from durability.postgres.listener import Listener
from durability.postgres.statements import Pool

__all__ = ["PostgresBell", "watch"]


class PostgresBell:
    """One watcher's bell over its listener's generation (`Watching`)."""

    __slots__ = ("_generation", "_listener")

    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        self._generation = listener.generation

    async def wait(self, within: timedelta) -> bool:
        listener = self._listener
        if not listener.listening:
            raise ConnectionError("not listening for endings")
        generation, changed = listener.mark()
        if generation == self._generation:
            try:
                async with asyncio.timeout(within.total_seconds()):
                    await changed.wait()
            except TimeoutError:
                return False
        self._generation = listener.generation
        return True


@contextlib.asynccontextmanager
async def watch(pool: Pool, channel: str, workflow: str) -> AsyncIterator[PostgresBell]:
    listener = Listener(pool, workflow, channel)
    await listener.start()  # LISTENing before the caller's first look (or not up: it polls)
    try:
        yield PostgresBell(listener)
    finally:
        await listener.close()
