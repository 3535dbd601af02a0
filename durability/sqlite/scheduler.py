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
from durability.sqlite.policy import delivered, held_key, wakeup
from durability.sqlite.timetable import SqliteTimetable
from durability.values import Backlog, Delivery, Footprint, Limit
from durability.visibility import Visibility
from durability.waits import set_within

__all__ = [
    "SqliteScheduler", "cancel_step", "done_step", "next_look_step", "ready_step", "take_step",
]

T = TypeVar("T")

_SQL = queries("scheduler")
_MICRO = timedelta(microseconds=1)
#: A wakeup with the default priority and no limit.
_PLAIN = wakeup(0, None)
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


def ready_step(
    connection: sqlite3.Connection,
    queue: str,
    workflow: str,
    policy: dict[str, object] | None = None,
) -> None:
    """`make_ready` inside an open write transaction (the caller notifies after commit), with
    the wakeup's priority and limit (`policy.wakeup`, checked; none given: 0 and no limit)."""
    connection.execute(
        _SQL["ready"],
        {"queue": queue, "workflow": workflow, "now": now_us(), "receipt": _receipt(),
         **(policy or _PLAIN)},
    )


def cancel_step(connection: sqlite3.Connection, queue: str, workflow: str) -> tuple[int, bool]:
    """`cancel` inside an open write transaction: how many rows went (0 or 1), and whether a
    concurrency slot the workflow held went with them (the caller rings for it after the
    commit, as for an arrival)."""
    params = {"queue": queue, "workflow": workflow}
    gone: int = connection.execute(_SQL["cancel"], params).rowcount
    freed: int = connection.execute(_SQL["cancel_holds"], params).rowcount
    return gone, freed > 0


def take_step(connection: sqlite3.Connection, queue: str, lease: timedelta) -> Delivery | None:
    """Take the best ready row for `lease` (priority, then visibility, within its limit),
    under a fresh receipt; `None` if none is. The delivery is `lapsed` if the row was a take's
    whose lease ran out (`Delivery.lapsed`), and carries the row's priority and limit.

    Its statements read the clock (`durability_now_us()`) after the write lock is taken, and
    a limited row's hold is written beside the take: run it inside an open write transaction.
    """
    fresh = _taken_receipt()
    lapsed = fresh ^ 2  # odd too, and never the same: which one the row got says which it was
    rows = connection.execute(
        _SQL["take"],
        {"queue": queue, "lease": lease // _MICRO, "fresh": fresh, "lapsed": lapsed},
    ).fetchall()
    if not rows:
        return None
    workflow, receipt, visible, *policy = rows[0]
    delivery = delivered(workflow, receipt, receipt == lapsed, *policy)
    limit = delivery.limit
    if limit is not None:  # its hold, in the take's transaction (no one counts between)
        per = policy[-1]
        now = visible - lease // _MICRO
        params = {"queue": queue, "key": limit.key, "now": now, "per_us": per,
                  "workflow": workflow, "receipt": receipt,
                  "until": visible if per is None else now + per}
        connection.execute(_SQL["hold"], params)
        connection.execute(_SQL["held"], params)
    return delivery


def next_look_step(connection: sqlite3.Connection, queue: str) -> float | None:
    """After a take found nothing to take: seconds until the earliest hidden row shows or a
    hold ends under a key whose ready rows were passed over (None: neither)."""
    now = now_us()
    (at,) = connection.execute(_SQL["next_look"], {"queue": queue, "now": now}).fetchone()
    return None if at is None else max(at - now, 0) / 1_000_000


def done_step(connection: sqlite3.Connection, queue: str, delivery: Delivery) -> bool:
    """`done`: delete the row only if the receipt is still the delivery's; under a concurrency
    limit free the delivery's slot too (run it in a write transaction then). Whether a slot
    was freed: the caller rings for it after the commit, as for an arrival."""
    held = _held(delivery)
    connection.execute(_SQL["done"], {"queue": queue, "workflow": delivery.workflow, "held": held})
    return give_back_step(connection, queue, delivery)


def give_back_step(connection: sqlite3.Connection, queue: str, delivery: Delivery) -> bool:
    """Free the concurrency slot `delivery` holds, if it holds one; whether it did."""
    key = held_key(delivery)
    if key is None:
        return False
    freed: int = connection.execute(
        _SQL["give_back"], {"queue": queue, "key": key, "held": _held(delivery)}
    ).rowcount
    return freed > 0


def _held(delivery: Delivery) -> int:
    try:
        return int(delivery.receipt)
    except ValueError:
        raise ValueError(f"not a SQLite scheduler receipt: {delivery.receipt!r}") from None


class SqliteScheduler(Visibility):
    """A `Scheduler` over a `SqliteDatabase` (call `migrate` on it first).

    `queue` names an independent queue in the same table; `lease` is how long a taken row
    stays invisible without `extend`; `poll` how often an idle `next_ready` looks again.

        make_ready   ─▶ visible = min(visible, now), new receipt, priority and limit merged
        next_ready   ─▶ best ready row (priority, then visibility, within its limit's holds):
                        visible = now + lease, new receipt (the delivery's), a hold if limited
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

    async def make_ready(
        self, workflow: str, *, priority: int = 0, limit: Limit | None = None
    ) -> None:
        """Make `workflow` ready now, at `priority` (higher is taken first) under `limit`;
        a wakeup already pending keeps the higher priority and its own limit (or takes this
        one's if it had none)."""
        check_workflow(workflow)
        policy = wakeup(priority, limit)
        await self.database.write(
            lambda connection: ready_step(connection, self.queue, workflow, policy)
        )
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
        # Nothing to take under the lock: another process took what was visible, or every
        # visible row waits for its limit. What shows next is the earliest hidden row (that
        # taker's lease, a sleeper) or a hold ending under a full limit; a change before then
        # rings (an arrival, a freed slot).
        self._shows_in = next_look_step(connection, self.queue) if found is None else None
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
        # In BEGIN IMMEDIATE: a limited row's hold is written beside the take, and nobody may
        # count the key's holds between the two.
        return await self.when_ready(
            within, lambda connection: take_step(connection, queue, lease)
        )

    async def done(self, delivery: Delivery) -> None:
        """Answer `delivery`; under a concurrency limit its slot is freed in the same
        transaction, and the waiters are rung for it, as for an arrival."""
        _held(delivery)  # refuse a foreign receipt here, not on the writer's thread
        if held_key(delivery) is None:
            await self.database.alone(
                lambda connection: done_step(connection, self.queue, delivery)
            )
        elif await self.database.write(
            lambda connection: done_step(connection, self.queue, delivery)
        ):
            self.database.notify(self.queue)

    async def wake_at(self, delivery: Delivery, when: datetime) -> bool:
        held = _held(delivery)
        at = to_us(when)
        params = {
            "queue": self.queue, "workflow": delivery.workflow, "held": held, "when": at,
            "receipt": _receipt(), **wakeup(delivery.priority, delivery.limit),
        }

        def work(connection: sqlite3.Connection) -> tuple[int, bool]:
            changed: int = connection.execute(_SQL["wake_at"], params).rowcount
            return changed, give_back_step(connection, self.queue, delivery)

        if held_key(delivery) is None:
            changed, freed = await self.database.alone(work)
        else:  # the slot goes back in the same transaction
            changed, freed = await self.database.write(work)
        if changed or freed:
            # A deadline sooner than the waiters last saw (they look again when it comes), or
            # a slot a passed-over wakeup waits for.
            self.database.notify(self.queue, ready=freed or at <= now_us())
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
        key = held_key(delivery)
        params = {
            "queue": self.queue, "workflow": delivery.workflow, "held": _held(delivery),
            "within": within // _MICRO, "key": key,
        }

        def work(connection: sqlite3.Connection) -> int:
            now = now_us()
            if key is not None:  # its slot lasts as long as its lease, the row moved on or not
                connection.execute(_SQL["keep_hold"], {**params, "now": now})
            changed: int = connection.execute(_SQL["extend"], {**params, "now": now}).rowcount
            return changed

        changed = await self.database.write(work)
        return delivery if changed else None

    async def cancel(self, workflow: str) -> int:
        """Remove `workflow`'s wakeup; a concurrency slot a pass of it holds is freed in the
        same transaction, and the waiters are rung for it, as for an arrival."""
        check_workflow(workflow)
        gone, freed = await self.database.write(
            lambda connection: cancel_step(connection, self.queue, workflow)
        )
        if freed:
            self.database.notify(self.queue)
        return gone

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
