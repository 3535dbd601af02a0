"""How writes reach a SQLite file: each as one transaction, or many in one (a group commit).

Every write is a Python function run on the writer's thread between `BEGIN IMMEDIATE` and
`COMMIT` (`transaction`). `GroupCommit` puts the writes that pile up while the thread is busy
in one transaction, each behind a savepoint of its own, so one that raises is rolled back alone
while the others commit. Every caller still learns only after the `COMMIT` of its write, so
what it was told landed has landed. A lone write is its own transaction; nothing waits to
gather company.

A writer waits for another process's lock itself (`when_free`), not in SQLite's busy handler.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from durability.sqlite.counting import Counted
from durability.storekit.chores import Chores
from durability.storekit.coalescing import settle

__all__ = ["MOST", "GroupCommit", "Work", "Writer", "busy", "together", "transaction", "when_free"]

T = TypeVar("T")

#: The most writes one transaction carries: the file's lock is held while they run, and other
#: processes wait for it.
MOST = 64

#: The first pause of a writer that found the file locked (`when_free`), and the longest.
_FIRST_PAUSE = 0.0001
_LONGEST_PAUSE = 0.001

#: A write: statements run on the writer's connection, inside a transaction someone opened.
Work = Callable[[sqlite3.Connection], T]
#: What became of one write: (True, its result) or (False, what it raised).
Outcome = tuple[bool, Any]


class Writer(Counted):
    """The connection a process writes with: SQLite's busy handler is off (a zero timeout) and
    `when_free` waits up to `patience` seconds for another process's lock instead."""

    patience = 0.0


def busy(error: sqlite3.OperationalError) -> bool:
    """Whether `error` is another connection holding a lock (worth trying again)."""
    text = str(error)
    return "locked" in text or "busy" in text


def when_free(connection: sqlite3.Connection, step: Callable[[], T]) -> T:
    """`step()`, whose first statement takes the file's write lock (`BEGIN IMMEDIATE`, or a write
    run alone), tried again while another process holds the lock: after a tenth of a
    millisecond, doubling to at most one, for up to the `Writer`'s `patience`; then the lock
    error stands. SQLite's own busy handler sleeps 1, 2, 5, 10, 15 ms... between tries, so a
    lock held 3 ms cost a waiting writer 8, and a submission that met a pass's commit waited
    that long for its row (and the pass for the submission's). A connection that is not a
    `Writer` keeps its busy handler: `step()` once."""
    if not isinstance(connection, Writer):
        return step()
    give_up = time.monotonic() + connection.patience
    pause = _FIRST_PAUSE
    while True:
        try:
            return step()
        except sqlite3.OperationalError as error:
            # Inside a transaction the lock was ours: a lock error there is not a wait.
            if not busy(error) or connection.in_transaction or time.monotonic() >= give_up:
                raise
        time.sleep(pause)  # on the writer's thread, not the loop
        pause = min(pause * 2, _LONGEST_PAUSE)


def transaction(connection: sqlite3.Connection, work: Work[T]) -> T:
    """Run `work` inside `BEGIN IMMEDIATE` ... `COMMIT`, rolling back if it raises. Call it on
    the connection's own thread (`SqliteDatabase.write` does)."""
    when_free(connection, lambda: connection.execute("BEGIN IMMEDIATE"))
    try:
        result = work(connection)
        connection.execute("COMMIT")
    except BaseException:
        # Whatever went wrong (Fenced included), nothing of this transaction may remain.
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    return result


def together(connection: sqlite3.Connection, works: list[Work[Any]]) -> list[Outcome]:
    """Run every one of `works` in one write transaction, each behind a savepoint: what each
    returned or raised. One that raises leaves nothing; the others commit together."""
    outcomes: list[Outcome] = []
    try:
        when_free(connection, lambda: connection.execute("BEGIN IMMEDIATE"))
        for work in works:
            connection.execute("SAVEPOINT durability_write")
            try:
                outcomes.append((True, work(connection)))
            except BaseException as error:
                if not connection.in_transaction:
                    raise  # SQLite rolled the whole transaction back: the others went too
                connection.execute("ROLLBACK TO durability_write")
                outcomes.append((False, error))
            connection.execute("RELEASE durability_write")
        connection.execute("COMMIT")
    except BaseException as error:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        return [(False, error)] * len(works)
    return outcomes


#: A queued write: the function, whether it is one statement that may run without
#: `BEGIN IMMEDIATE` when alone (see `SqliteDatabase.alone`), and its caller's future.
_Item = tuple[Work[Any], bool, "asyncio.Future[Any]"]


class _Gathering:
    """The writes waiting for the writer's thread. The loop adds to it until the thread takes
    it (both under `lock`); a write that finds it taken starts the next one."""

    __slots__ = ("items", "lock", "taken")

    def __init__(self, first: _Item) -> None:
        self.items = [first]
        self.lock = threading.Lock()
        self.taken = False

    def join(self, item: _Item) -> bool:
        with self.lock:
            if self.taken or len(self.items) >= MOST:
                return False
            self.items.append(item)
            return True

    def take(self) -> list[_Item]:
        with self.lock:
            self.taken = True
            return self.items


class GroupCommit:
    """Writes on one connection, those waiting at the same time committed together.

    Why gather them: a worker at capacity has dozens of passes asking for a write at once, and
    each write costs a hop to the thread, the file's write lock (which other processes wait for,
    in SQLite's busy handler's sleeps of a millisecond and more) and a commit. Gathered, they
    pay for one. A write that raises (`Fenced`, a constraint, a bad effect) is rolled back to
    its savepoint and its caller gets its error, while the others commit. A lone write is its
    own transaction as before, with nothing added. If the commit fails, or an error ends the
    whole transaction (a full disk, an I/O error: SQLite rolls everything back), every member
    gets that error, as each would have alone.

    `hop(fn)` runs `fn` on the connection's thread after what was queued there before (and
    translates a failure of the whole hop); `translate` turns one write's own error into the
    one its caller should see (`NotMigrated`); `committed()`, if given, is called after each
    transaction the thread ran (rolled back or not), once however many writes it held.
    """

    __slots__ = ("_committed", "_connection", "_gathering", "_hop", "_hopping", "_translate")

    def __init__(
        self,
        connection: sqlite3.Connection,
        hop: Callable[[Callable[[], list[Outcome]]], Awaitable[list[Outcome]]],
        translate: Callable[[BaseException], BaseException],
        committed: Callable[[], None] | None = None,
    ) -> None:
        self._connection = connection
        self._committed = committed
        self._hop = hop
        self._translate = translate
        self._gathering: _Gathering | None = None
        self._hopping = Chores()  # the gatherings on their way to the thread

    async def write(self, work: Work[T], *, alone: bool = False) -> T:
        """`work`'s result once its transaction committed, or what it raised (rolled back)."""
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[T] = loop.create_future()
        item: _Item = (work, alone, reply)
        gathering = self._gathering
        if gathering is None or not gathering.join(item):
            gathering = self._gathering = _Gathering(item)
            # Held until done (the loop keeps only weak references to tasks). Its first step
            # queues the gathering on the thread; writes join it until the thread takes it.
            self._hopping.hold(loop.create_task(self._send(gathering)))
        return await reply

    async def drained(self) -> None:
        """Wait for the gatherings under way to commit (or fail), at most
        `storekit.chores.ENDING`, then cancel those left: a closing store's last writes."""
        await self._hopping.ended()

    async def _send(self, gathering: _Gathering) -> None:
        try:
            outcomes = await self._hop(functools.partial(self._commit, gathering))
        except asyncio.CancelledError:
            for _, _, reply in gathering.take():
                reply.cancel()
            raise
        except BaseException as error:
            # Taken here if the hop failed before the thread took it (the file gone, say):
            # else later writes would join a gathering nothing will ever send.
            for _, _, reply in gathering.take():
                if not reply.done():
                    reply.set_exception(error)
            return
        if self._committed is not None:
            self._committed()
        for (_, _, reply), (ok, value) in zip(gathering.items, outcomes, strict=True):
            if ok:
                settle(reply, value)
            elif not reply.done():
                reply.set_exception(self._translate(value))

    def _commit(self, gathering: _Gathering) -> list[Outcome]:
        """On the writer's thread: every write gathered so far, committed."""
        items = gathering.take()
        connection = self._connection
        if len(items) > 1:
            return together(connection, [work for work, _, _ in items])
        work, alone, _ = items[0]
        try:
            if alone:
                return [(True, when_free(connection, functools.partial(work, connection)))]
            return [(True, transaction(connection, work))]
        except BaseException as error:
            return [(False, error)]
