"""Waking whoever waits for a workflow's ending (`result`) on Postgres: the commit that writes
an ending notifies `<schema>_ended` with the workflow's id, and one `Listener` per store LISTENs
on it for every watcher in the process, ringing the bells of the id it hears. Not to undo: one
connection beside the pool while anyone waits, so a hundred `result` calls hold one, not a
hundred. While it is down a bell rings at least every `LOOK`, so `result` looks now and then,
and its coming back rings them all: no ending is missed, and none waits for a look after."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta

from durability.endings import LOOK
from durability.postgres.listener import Listener
from durability.postgres.statements import Pool

__all__ = ["Endings", "PostgresBell"]


class PostgresBell:
    """One watcher's bell, rung by its workflow's notification or by the shared connection
    coming or going (`Watching`)."""

    __slots__ = ("_listener", "_rung")

    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        self._rung = asyncio.Event()

    def ring(self) -> None:
        self._rung.set()

    async def wait(self, within: timedelta) -> bool:
        down = not self._listener.listening  # then no longer than a look apart
        rung = self._rung
        if not rung.is_set():  # rung since the caller's last look: look again at once
            try:
                async with asyncio.timeout((min(within, LOOK) if down else within).total_seconds()):
                    await rung.wait()
            except TimeoutError:
                return down
        rung.clear()
        return True


class Endings:
    """The watchers of one store's endings, over one listener kept while any of them waits."""

    def __init__(self, pool: Pool, channel: str) -> None:
        self._listener = Listener(pool, channel, channel, heard=self._heard)
        self._bells: dict[str, set[PostgresBell]] = {}
        self._watching = 0

    def _heard(self, workflow: str | None) -> None:
        if workflow is None:  # the connection came or went: every watcher looks again
            for bells in self._bells.values():
                for bell in bells:
                    bell.ring()
            return
        for bell in self._bells.get(workflow, ()):
            bell.ring()

    @contextlib.asynccontextmanager
    async def watch(self, workflow: str) -> AsyncIterator[PostgresBell]:
        bell = PostgresBell(self._listener)
        self._bells.setdefault(workflow, set()).add(bell)
        self._watching += 1
        try:
            await self._listener.start()  # LISTENing before the caller's first look, or not up
            yield bell
        finally:
            bells = self._bells.get(workflow)
            if bells is not None:
                bells.discard(bell)
                if not bells:
                    del self._bells[workflow]
            self._watching -= 1
            if self._watching == 0:  # nobody waits: the connection goes until somebody does
                await self._listener.close()
