"""Waking whoever waits for a workflow's ending (`result`) on Postgres: the commit that writes
an ending notifies `<schema>_ended` with the workflow's id, while anyone waits (a row in
`watchers`, written after LISTEN and before the first look: schema.sql says how a finish in
flight cannot be missed), and one `Listener` per store LISTENs on it for every watcher in the
process, ringing the bells of the id it hears. Not to undo: one connection beside the pool
while anyone waits, so a hundred `result` calls hold one, not a hundred. While it is down, or
the watcher's row could not be written, a bell rings at least every `LOOK`, so `result` looks
now and then, and the listener's coming back rings them all: no ending is missed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta

from durability.endings import LOOK
from durability.postgres import libpq_pipeline
from durability.postgres.listener import Listener
from durability.postgres.statements import Pool, one

__all__ = ["KEEP", "Endings", "PostgresBell"]

#: How often a process marks its waiters' rows alive: well inside the three minutes after which
#: a row is taken for a dead process's and deleted (checkpointer.sql's `unwatch`, `migrate`).
KEEP = timedelta(seconds=30)

log = logging.getLogger("durability.postgres")


class PostgresBell:
    """One watcher's bell, rung by its workflow's notification or by the shared connection
    coming or going (`Watching`)."""

    __slots__ = ("_listener", "_rung", "watched")

    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        self._rung = asyncio.Event()
        #: Whether its waiter's row is written: a finish notifies only while one is.
        self.watched = False

    def ring(self) -> None:
        self._rung.set()

    async def wait(self, within: timedelta) -> bool:
        down = not (self._listener.listening and self.watched)  # then a look apart at most
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
    """The watchers of one store's endings, over one listener kept while any of them waits.

    A watcher's row (`watchers`) is deleted after its `result` has returned, off the caller's
    way, and kept marked alive while it waits: one statement every `KEEP` for all of this
    process's. A row whose process died (or whose loop closed before the delete ran) goes
    unmarked; the next waiter's delete, or the next `migrate`, takes it three minutes on. Till
    then finishes notify, as they all did before the rows."""

    def __init__(self, pool: Pool, channel: str, sql: Mapping[str, str]) -> None:
        self._pool = pool
        self._listener = Listener(pool, channel, channel, heard=self._heard)
        self._sql = sql
        self._bells: dict[str, set[PostgresBell]] = {}
        self._watching = 0
        self._rows: set[uuid.UUID] = set()  # this process's rows, kept alive by `_keep`
        self._keeping: asyncio.Task[None] | None = None

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
        watcher = uuid.uuid4()
        params = {"workflow": workflow, "watcher": watcher}
        try:
            await self._listener.start()  # LISTENing before the caller's first look, or not up
            try:  # then watching (after LISTEN, before the look: a finish between is heard)
                await one(self._pool, self._sql["watch"], params)
                bell.watched = True
                self._rows.add(watcher)
                if self._keeping is None or self._keeping.done():
                    self._keeping = asyncio.get_running_loop().create_task(self._keep())
            except Exception as error:  # unwritten: the bell rings a look apart instead
                log.warning("watching %s for its ending failed (%r); looking now and then",
                            workflow, error)
            yield bell
        finally:
            bells = self._bells.get(workflow)
            if bells is not None:
                bells.discard(bell)
                if not bells:
                    del self._bells[workflow]
            self._watching -= 1
            if self._watching == 0:  # nobody waits: the connection goes until somebody does
                if self._keeping is not None:
                    self._keeping.cancel()
                    self._keeping = None
                # Closed off the caller's way too (its close is a round trip on a slow
                # spell): a waiter that comes meanwhile connects anew.
                self._leave(self._listener.let_go())
            if bell.watched:  # once the caller has its answer
                self._rows.discard(watcher)
                self._leave(asyncio.get_running_loop().create_task(self._unwatch(params)))

    def _leave(self, task: asyncio.Task[None] | None) -> None:
        """Keep `task` (a row's delete, the listener's close) until it ends, or until the
        store closes (`libpq_pipeline.settled`, which the scheduler's close awaits), so none
        is left pending with the loop."""
        if task is not None:
            libpq_pipeline.hold(self._pool, task)

    async def _unwatch(self, params: Mapping[str, object]) -> None:
        try:
            await one(self._pool, self._sql["unwatch"], params)
        except Exception as error:  # left behind: a later delete takes it once it is stale
            log.warning("unwatching %s failed: %r", params["workflow"], error)

    async def _keep(self) -> None:
        """Every `KEEP`, mark this process's rows alive, while it has any."""
        while self._rows:
            await asyncio.sleep(KEEP.total_seconds())
            try:
                await one(self._pool, self._sql["keep"], {"watchers": list(self._rows)})
            except Exception as error:  # tried again next time, well inside three minutes
                log.warning("keeping %d watchers alive failed: %r", len(self._rows), error)
