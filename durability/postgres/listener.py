"""The one connection a `PostgresScheduler` keeps LISTENing, so an idle worker is woken by the
commit that makes a workflow ready instead of finding it on its next poll.

It is deliberately not a pooled connection: it sits in LISTEN for the scheduler's whole life,
which would take a pool slot forever, and a pool may reset or recycle a connection under it.

`generation` is the whole interface: a waiter notes it (and the event paired with it) *before*
reading the queue, then waits for it to move. A notification that lands between the read and
the wait has already moved it, so no wakeup falls in that gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
from collections.abc import Callable
from typing import Any

import psycopg

from durability.cancelling import stop_if_cancelled
from durability.postgres.statements import Pool
from durability.waits import set_within

log = logging.getLogger(__name__)

#: The channel the schedulers of the default schema notify and listen on; the payload names
#: the queue. Another schema's is `<schema>_ready` (`statements.channel`). LISTEN takes no bound
#: parameter, so the name goes into the statement: only ever a plain lower-case identifier
#: (checked here), written unquoted so the statement reads as it always has.
CHANNEL = "durability_ready"

_PLAIN = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_RETRY_FIRST = 0.05
_RETRY_MOST = 2.0
_FIRST_ATTEMPT = 1.0


class Listener:
    """A background LISTEN on `channel` that counts notifications for one queue.

    One background task owns the connection: it connects (lazily, on the first `next_ready`),
    LISTENs, and bumps `generation` on every notification for this scheduler's queue. A dropped
    connection is reconnected with a capped backoff; while it is down `listening` is False and
    the scheduler polls, and reconnecting bumps the generation too, so waiters re-read whatever
    they missed.
    """

    def __init__(
        self,
        pool: Pool,
        queue: str,
        channel: str = CHANNEL,
        heard: Callable[[str | None], None] | None = None,
        aside: str | None = None,
    ) -> None:
        if not _PLAIN.fullmatch(channel):
            raise ValueError(f"a channel must be a plain lower-case identifier, got {channel!r}")
        self._pool = pool
        self._queue = queue
        self._channel = channel
        #: Told every notification's payload instead of counting the queue's, and `None` as the
        #: connection comes or goes: for one listener shared by waiters of many payloads.
        self._heard = heard
        #: A second payload on the channel (the queue's schedules changed): it sets the event
        #: `aside_mark` returns and wakes none of the queue's readers, so an arrival does not
        #: send the firer to look at the timetable, nor a schedule change the readers to read.
        self._aside = aside
        self._aside_changed = asyncio.Event()
        self.generation = 0
        self.listening = False
        self._changed = asyncio.Event()
        self._attempted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start listening if not already; return once the first attempt to connect is over
        (connected or not: a scheduler that cannot listen still polls)."""
        task = self._task
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            self.listening = False
            self._changed = asyncio.Event()
            self._aside_changed = asyncio.Event()
            self._attempted = asyncio.Event()
            self._task = asyncio.create_task(self._run(), name=f"listen:{self._queue}")
        # Bounded: a server that accepts no connection must not stall a read past its `within`
        # here; the scheduler polls until the listener gets through.
        await set_within(self._attempted, _FIRST_ATTEMPT)

    def mark(self) -> tuple[int, asyncio.Event]:
        """The current generation and the event that fires when it next moves."""
        return self.generation, self._changed

    def aside_mark(self) -> asyncio.Event:
        """The event that fires on the next notification of the `aside` payload, or as the
        connection comes or goes (what was missed meanwhile must be looked at again)."""
        return self._aside_changed

    async def close(self) -> None:
        """Stop listening, and return once the connection is closed."""
        task = self.let_go()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def let_go(self) -> asyncio.Task[None] | None:
        """Stop listening now, without waiting for the connection to close: return the task
        that closes it as it ends (to await, or to leave), or None if there is none. A `start`
        after this makes a new connection, and the old one's end changes nothing of it."""
        task, self._task = self._task, None
        if self.listening:
            self.listening = False
            self._moved()  # waiters stop trusting notifications and poll
        if task is None or task.done():
            return None
        task.cancel()
        return task

    def _bump(self) -> None:
        self.generation += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        if self._heard is not None:
            self._heard(None)

    def _bump_aside(self) -> None:
        changed, self._aside_changed = self._aside_changed, asyncio.Event()
        changed.set()

    def _moved(self) -> None:
        """The connection came or went: what either payload's waiters missed, they look at."""
        self._bump()
        self._bump_aside()

    async def _run(self) -> None:
        delay = _RETRY_FIRST
        while True:
            try:
                conn = await _connect_beside(self._pool)
            except psycopg.Error as error:
                log.warning("cannot connect to listen for %r: %s", self._queue, error)
            else:
                try:
                    await conn.execute(f"LISTEN {self._channel}")
                    self.listening = True
                    delay = _RETRY_FIRST
                    self._attempted.set()
                    self._moved()  # whatever was missed while not listening: look again
                    async for note in conn.notifies():
                        stop_if_cancelled()
                        if self._heard is not None:
                            self._heard(note.payload)
                        elif note.payload == self._queue:
                            self._bump()
                            # Let the woken readers send their reads before this task goes
                            # back to waiting on the socket, which costs a while to set up.
                            await asyncio.sleep(0)
                        elif note.payload == self._aside:
                            self._bump_aside()
                except psycopg.Error as error:
                    log.warning("lost the listening connection for %r: %s", self._queue, error)
                finally:
                    # Only while it is still the listener's task: one let go (`let_go`) may
                    # end after a new one has connected, and must not say it is down.
                    if self.listening and self._task is asyncio.current_task():
                        self.listening = False
                        self._moved()  # waiters stop trusting notifications and poll
                    with contextlib.suppress(psycopg.Error):
                        await conn.close()
            self._attempted.set()
            stop_if_cancelled()
            await asyncio.sleep(delay)
            delay = min(delay * 2, _RETRY_MOST)


async def _connect_beside(pool: Pool) -> psycopg.AsyncConnection[Any]:
    """A new connection to the pool's database, made the way the pool makes its own (its
    conninfo and kwargs may be callables, so credentials can rotate), but not from the pool."""
    conninfo: Any = pool.conninfo
    kwargs: Any = pool.kwargs
    if callable(conninfo):
        conninfo = conninfo()
        if inspect.isawaitable(conninfo):
            conninfo = await conninfo
    if callable(kwargs):
        kwargs = kwargs()
        if inspect.isawaitable(kwargs):
            kwargs = await kwargs
    options = {**(kwargs or {}), "autocommit": True}
    return await psycopg.AsyncConnection.connect(conninfo, **options)
