"""`SqliteScheduler`: a queue of wakeups as one row per workflow, scored by visibility.

Ready, asleep and held are one score, so there is no timer, no pending list and nothing to
reclaim: a dead worker's row becomes visible when its lease lapses. A receipt that every other
writer replaces is what keeps a wakeup landing mid-pass. An idle reader waits for a ring
(`doorbell`) rather than polling; what each call writes, and how a reader waits, are in
`SqliteScheduler`'s docstring.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import sqlite3
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TypeVar

from durability.cancelling import stop_if_cancelled
from durability.checks import check_workflow, positive
from durability.sqlite.batching import when_free
from durability.sqlite.database import (
    SqliteDatabase,
    from_us,
    now_us,
    queries,
    to_us,
    transaction,
)
from durability.sqlite.timetable import SqliteTimetable
from durability.values import Backlog, Delivery, Footprint
from durability.visibility import Visibility
from durability.waits import set_within

__all__ = ["SqliteScheduler", "cancel_step", "done_step", "ready_step", "take_step"]

T = TypeVar("T")

_SQL = queries("scheduler")
_MICRO = timedelta(microseconds=1)
#: How often a waiter that hears the other processes' rings looks anyway, in case one went
#: missing (a process that started listening as another committed).
LOOK_AGAIN = timedelta(seconds=2)


def _receipt() -> int:
    """A receipt for a wakeup (`ready`, `wake_at`): random, and even."""
    return secrets.randbits(63) & ~1


def _taken_receipt() -> int:
    """A receipt for a take: random, and odd, so a take can tell a row whose holder's lease
    lapsed (its receipt is still a take's) from one a wakeup wrote since."""
    return secrets.randbits(63) | 1


def ready_step(connection: sqlite3.Connection, queue: str, workflow: str) -> None:
    """`make_ready` inside an open write transaction (the caller notifies after commit)."""
    connection.execute(
        _SQL["ready"],
        {"queue": queue, "workflow": workflow, "now": now_us(), "receipt": _receipt()},
    )


def cancel_step(connection: sqlite3.Connection, queue: str, workflow: str) -> int:
    """`cancel` inside an open write transaction; how many rows went (0 or 1)."""
    gone: int = connection.execute(
        _SQL["cancel"], {"queue": queue, "workflow": workflow}
    ).rowcount
    return gone


def take_step(connection: sqlite3.Connection, queue: str, lease: timedelta) -> Delivery | None:
    """Take the earliest visible row for `lease`, under a fresh receipt; `None` if none is.
    The delivery is `lapsed` if the row was a take's whose lease ran out (`Delivery.lapsed`).

    One statement that reads the clock (`durability_now_us()`) after the write lock is taken:
    run it alone, or inside an open write transaction.
    """
    fresh = _taken_receipt()
    lapsed = fresh ^ 2  # odd too, and never the same: which one the row got says which it was
    rows = connection.execute(
        _SQL["take"],
        {"queue": queue, "lease": lease // _MICRO, "fresh": fresh, "lapsed": lapsed},
    ).fetchall()
    if not rows:
        return None
    workflow, receipt = rows[0]
    return Delivery(workflow, str(receipt), lapsed=receipt == lapsed)


def done_step(connection: sqlite3.Connection, queue: str, delivery: Delivery) -> None:
    """`done` as one statement: delete the row only if the receipt is still the delivery's."""
    connection.execute(
        _SQL["done"], {"queue": queue, "workflow": delivery.workflow, "held": _held(delivery)}
    )


def _held(delivery: Delivery) -> int:
    try:
        return int(delivery.receipt)
    except ValueError:
        raise ValueError(f"not a SQLite scheduler receipt: {delivery.receipt!r}") from None


class SqliteScheduler(Visibility):
    """A `Scheduler` over a `SqliteDatabase` (call `migrate` on it first).

    `queue` names an independent queue in the same table; `lease` is how long a taken row
    stays invisible without `extend`; `poll` how often an idle `next_ready` looks again.

        make_ready   ─▶ visible = min(visible, now), new receipt
        next_ready   ─▶ earliest visible row: visible = now + lease, new receipt (the delivery's)
        wake_at(D)   ─▶ visible = D if the receipt is still ours, new receipt
        done         ─▶ delete, but only if the receipt is still the delivery's

    Ready, asleep and held are all one score, so there is no timer and no pending list: `wake_due`
    only reports the earliest future score, `reclaiming` has nothing to do (a dead worker's row
    becomes visible when its lease lapses, and `next_ready` takes it like any other), and a
    workflow is queued once however many wakeups arrive. The receipt is what keeps a wakeup that
    lands mid-pass: it replaces the receipt, so the pass's `done` no longer matches and leaves the
    row. Receipts are random 63-bit integers, so one minted after a row was deleted and inserted
    again does not repeat the old one.

    `next_ready` waits for a ring: a `make_ready` or a sooner `wake_at` in any process on the file
    wakes it at once (the database's signal here, `doorbell` for the others). Between rings it
    looks only when the earliest hidden row shows, and every `LOOK_AGAIN` in case a ring went
    missing; without a doorbell it polls every `poll`. A look reads without the write lock, which
    is taken only to take a row. That waiting is `when_ready`, shared with `SqliteDurable.take`.
    """

    def __init__(
        self,
        database: SqliteDatabase,
        *,
        lease: timedelta = timedelta(seconds=30),
        poll: timedelta = timedelta(milliseconds=50),
        queue: str = "default",
    ) -> None:
        if not isinstance(queue, str) or not queue:
            raise ValueError("queue must be a non-empty str")
        self.database = database
        self.lease = positive("lease", lease)
        self.poll = positive("poll", poll)
        self.queue = queue
        #: Whether the queue looked busy at the last take (a hint: see `next_ready`).
        self._busy = False
        #: Seconds from the last look until its earliest hidden row shows (see `_attempt`).
        self._shows_in: float | None = None
        #: How long a waiter the doorbell reaches goes without looking, at most.
        self._fallback = max(self.poll, LOOK_AGAIN).total_seconds()
        #: The schedules kept beside this queue (`durability.schedules`).
        self.timetable = SqliteTimetable(database, queue)

    async def prepare(self) -> None:
        """Check the table is there (raises `NotMigrated` if not); nothing to create."""
        await self.database.read(
            lambda connection: connection.execute(
                _SQL["earliest"], {"queue": self.queue, "now": 0}
            ).fetchall()
        )

    async def make_ready(self, workflow: str) -> None:
        check_workflow(workflow)
        await self.database.write(lambda connection: ready_step(connection, self.queue, workflow))
        self.database.notify(self.queue)

    def _attempt(
        self,
        take: Callable[[sqlite3.Connection], T | None],
        alone: bool,
        connection: sqlite3.Connection,
    ) -> T | None:
        """On the writer's thread: `take` (alone or in a transaction of its own), unless the
        look without the write lock finds no row visible. Notes in `_shows_in` how soon the
        earliest hidden row shows (None: no row at all; 0: look again at once)."""
        (earliest,) = connection.execute(_SQL["probe"], {"queue": self.queue}).fetchone()
        now = now_us()
        if earliest is None or earliest > now:
            self._shows_in = None if earliest is None else (earliest - now) / 1_000_000
            return None
        if alone:
            found = when_free(connection, functools.partial(take, connection))
        else:
            found = transaction(connection, take)
        # Visible a moment ago, gone now: another process took it, and it shows again when
        # that taker's lease lapses, which only a new look can tell.
        self._shows_in = 0.0 if found is None else None
        return found

    async def when_ready(
        self,
        within: timedelta,
        take: Callable[[sqlite3.Connection], T | None],
        *,
        alone: bool = False,
    ) -> T | None:
        """Run `take` as a write whenever a row may be ready, until it returns something or
        `within` runs out (then `None`).

        `take` is the body of a write transaction (or, with `alone`, one statement that may run
        as its own) that takes a row; `None` means it found none. Between tries it waits up to
        `poll`, or less if this process makes a row ready. While the queue looks idle each try
        first looks without the write lock, so an idle waiter never holds up the other
        processes' writers; while it is busy a take is a write like any other, and shares a
        commit with the writes waiting beside it. `next_ready` and `SqliteDurable.take` both
        wait here.
        """
        positive("within", within)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + within.total_seconds()
        database = self.database
        while True:
            # Taken before looking, so a make_ready committed after the look still wakes us.
            signal = database.signal(self.queue)
            # The unlocked look keeps an idle waiter off the write lock. It is skipped while the
            # queue is known to be busy (the last take found a row) or a ring just said a row is
            # ready: there it would only cost a statement before the take.
            looked = not self._busy
            if looked:
                found = await database.writer(functools.partial(self._attempt, take, alone))
            elif alone:
                found = await database.alone(take)
            else:
                found = await database.write(take)
            self._busy = found is not None
            if found is not None:
                return found
            stop_if_cancelled()
            remaining = give_up - loop.time()
            if remaining <= 0:
                return None
            # Rung by every process on the file, a waiter only looks again when the earliest
            # hidden row shows (a sleeper's deadline, a dead taker's lease), and now and then in
            # case a ring went missing; deaf, it polls.
            wait = self._fallback if database.hears_others else self.poll.total_seconds()
            shows = self._shows_in if looked else 0.0  # a take that missed: look at once
            if shows is not None:
                wait = min(wait, shows)
            if await set_within(signal, min(wait, remaining)):
                self._busy = signal.ready

    async def next_ready(self, within: timedelta) -> Delivery | None:
        queue, lease = self.queue, self.lease
        # Alone, not in BEGIN IMMEDIATE: SQLite takes the write lock for the statement before
        # it reads `durability_now_us()`, and commits when its rows are read (all of them).
        return await self.when_ready(
            within, lambda connection: take_step(connection, queue, lease), alone=True
        )

    async def done(self, delivery: Delivery) -> None:
        _held(delivery)  # refuse a foreign receipt here, not on the writer's thread
        await self.database.alone(lambda connection: done_step(connection, self.queue, delivery))

    async def wake_at(self, delivery: Delivery, when: datetime) -> bool:
        held = _held(delivery)
        at = to_us(when)
        changed = await self.database.alone(
            lambda connection: connection.execute(
                _SQL["wake_at"],
                {
                    "queue": self.queue,
                    "workflow": delivery.workflow,
                    "held": held,
                    "when": at,
                    "receipt": _receipt(),
                },
            ).rowcount
        )
        if changed:
            # A deadline sooner than the waiters last saw: they look again when it comes.
            self.database.notify(self.queue, ready=at <= now_us())
        return bool(changed)

    async def wake_due(self, now: datetime | None = None) -> datetime | None:
        """Nothing to move (due and ready are the same score): the earliest future score."""
        moment = now_us() if now is None else to_us(now)
        rows = await self.database.read(
            lambda connection: connection.execute(
                _SQL["earliest"], {"queue": self.queue, "now": moment}
            ).fetchall()
        )
        earliest = rows[0][0] if rows else None
        return None if earliest is None else from_us(earliest)

    async def extend(self, delivery: Delivery, within: timedelta) -> Delivery | None:
        positive("within", within)
        held = _held(delivery)
        changed = await self.database.write(
            lambda connection: connection.execute(
                _SQL["extend"],
                {
                    "queue": self.queue,
                    "workflow": delivery.workflow,
                    "held": held,
                    "now": now_us(),
                    "within": within // _MICRO,
                },
            ).rowcount
        )
        return delivery if changed else None

    async def cancel(self, workflow: str) -> int:
        check_workflow(workflow)
        return await self.database.alone(
            lambda connection: cancel_step(connection, self.queue, workflow)
        )

    async def footprint(self) -> Footprint:
        """This queue's rows, visible and hidden (sleeping or taken), and the bytes of the queue
        table with its indexes where SQLite has its `dbstat` table (else `bytes` is None)."""

        def read(connection: sqlite3.Connection) -> Footprint:
            visible, hidden = connection.execute(
                _SQL["footprint"], {"queue": self.queue, "now": now_us()}
            ).fetchone()
            try:
                (size,) = connection.execute(_SQL["footprint_bytes"]).fetchone()
            except sqlite3.OperationalError:  # built without dbstat
                size = None
            return Footprint(
                {"visible": int(visible), "hidden": int(hidden)},
                None if size is None else int(size),
            )

        return await self.database.read(read)

    async def backlog(self) -> Backlog:
        """The visible rows, and how long ago the earliest became visible (made ready, due, or
        its lease lapsed)."""

        def read(connection: sqlite3.Connection) -> Backlog:
            now = now_us()
            ready, earliest = connection.execute(
                _SQL["backlog"], {"queue": self.queue, "now": now}
            ).fetchone()
            oldest = None if earliest is None else timedelta(microseconds=now - int(earliest))
            return Backlog(int(ready), oldest)

        return await self.database.read(read)

    def __repr__(self) -> str:
        return f"SqliteScheduler({self.database!r}, queue={self.queue!r})"
