"""`PostgresScheduler`: a queue of one row per workflow, scored by when it becomes visible, and
woken by LISTEN/NOTIFY rather than found by polling.

| state    | the row                                   |
|----------|-------------------------------------------|
| ready    | visible_at <= now                         |
| sleeping | visible_at in the future (from wake_at)   |
| taken    | visible_at = taken + lease, a new receipt |

The receipt makes `done` a compare-and-delete: a wakeup that lands mid-pass is never thrown away.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from psycopg.rows import TupleRow

from durability.cancelling import stop_if_cancelled
from durability.checks import check_workflow, positive
from durability.postgres import libpq_pipeline
from durability.postgres.listener import Listener
from durability.postgres.policy import delivered, giving_back, held_key, wakeup
from durability.postgres.statements import DEFAULT_SCHEMA, Pool, channel, one, statements
from durability.postgres.timetable import PostgresTimetable, changed_payload
from durability.values import Backlog, Delivery, Footprint, Limit
from durability.visibility import Visibility
from durability.waits import set_within

T = TypeVar("T")

#: With notifications, how often an idle reader looks anyway (a row written with plain SQL):
#: most of what an idle worker costs here.
_POLL_LISTENING = timedelta(seconds=15)
#: How often it looks while its listening connection is down (and reconnecting).
_DEAF = timedelta(seconds=2)
_POLL_ALONE = timedelta(milliseconds=50)


@dataclass(frozen=True, slots=True)
class Look(Generic[T]):
    """What one read of the queue saw: what it took (None if nothing was visible) and, for the
    wait that follows an empty read, when the earliest hidden row becomes visible (the
    database's clock) and in how many seconds."""

    found: T | None
    earliest: datetime | None
    hidden_for: float | None


@dataclass(frozen=True, slots=True)
class _Quiet:
    """The queue had nothing visible, and nothing is due to change before `until` (loop time)
    unless somebody announces it, i.e. unless the listener's generation moves. `earliest` is
    when the earliest hidden row becomes visible (the database's clock), if there is one."""

    generation: int
    until: float
    earliest: datetime | None


class PostgresScheduler(Visibility):
    """A `Scheduler` over the `queue` table of `schema` (`durability` unless given), one
    `queue` name per independent queue. Queues of different schemas notify on channels of
    their own (`<schema>_ready`), so they never wake each other's workers.

    `next_ready` takes the earliest visible row with `FOR UPDATE SKIP LOCKED` and hides it for a
    lease in the same statement. The receipt makes `done` a compare-and-delete, so a wakeup that
    lands mid-pass (which must change the receipt) is never thrown away. A worker that dies simply
    stops extending: its row becomes visible when the lease runs out, so `reclaiming` has nothing
    to hand over, and there is no separate sleeping set for `wake_due` to move.

    Waiting (`waiting`, shared with `PostgresDurable.take`, which runs its own statement in the
    same loop). An idle `next_ready` does not poll at a fixed rate. It reads the queue once,
    learning both "nothing visible" and how long until the earliest hidden row becomes visible; then
    it waits on the scheduler's listening connection for the sooner of a notification for its queue,
    that row's time, and `poll`. `make_ready` and `wake_at` notify in the statement that commits
    them. `poll` is only the fallback for a change nobody announced (a row written with plain SQL,
    or a notification lost with a dropped connection); with `notify=True` it defaults to 15
    seconds, and a later `next_ready` or `wake_due` inside that quiet window, with nothing announced
    meanwhile (and nothing written by this scheduler itself: it does not wait to hear of its own
    writes), issues no statement at all (benchmarks/bench_postgres.py measures what an idle worker
    costs). With `notify=False` it defaults to 50 ms and is the floor under how fast anything
    starts.

    Which commits wait for the WAL flush: `take`, `done` and `extend` do not (a lost take or done
    is one extra pass; a lost extend shows the row sooner). `make_ready` and `wake_at` are wakeups
    and stay synchronous. A take's receipt is what makes skipping the flush safe: it is the
    database clock in microseconds (or the row's receipt + 1, if that is ahead), not a sequence
    step. A sequence step used by a commit the crash lost is handed out again after the restart,
    so a worker still holding a receipt from a lost take could match, and `done`, a later take of
    the same workflow; a clock reading cannot recur, because the clock has moved on by the
    restart (the same argument the claim tokens rest on). The synchronous writers keep minting
    receipts from the sequence, whose values stay far below any clock reading, so a receipt from
    one never equals a receipt from the other.

    `wake_due` returns the earliest hidden row's time, which for a sleeper is its wakeup and for a
    taken row its lease end; it moves nothing, because nothing needs moving.

    Priorities and limits (`make_ready(priority=, limit=)`): the row keeps both, and a take
    walks the priority levels present, highest first, then visibility within a level. A
    limited wakeup is admitted through its key's `limits` row (its upsert checks the newest
    holds under the row's lock, so two takers never both fill the last slot, and one take of
    many admits as many of a key's wakeups as it has room for); one over its limit stays
    ready and is passed over. A freed slot notifies as an arrival does; an idle read's
    earliest time covers a holder's lapse and a rate window's next opening. A key's row goes
    with its last hold (or, lapsed, with a later take's sweep).
    """

    def __init__(
        self,
        *,
        pool: Pool,
        lease: timedelta = timedelta(seconds=30),
        poll: timedelta | None = None,
        queue: str = "default",
        notify: bool = True,
        schema: str = DEFAULT_SCHEMA,
    ) -> None:
        if not isinstance(queue, str) or not queue:
            raise ValueError("queue must be a non-empty string")
        self._sql = statements("scheduler.sql", schema)
        self.schema = schema
        self.channel = channel(schema)
        self._pool = pool
        self.lease = positive("lease", lease)
        if poll is None:
            poll = _POLL_LISTENING if notify else _POLL_ALONE
        self.poll = positive("poll", poll)
        self.queue = queue
        self._listener = (
            Listener(pool, queue, self.channel, aside=changed_payload(queue)) if notify else None
        )
        #: The schedules kept beside this queue (`durability.schedules`).
        self.timetable = PostgresTimetable(pool, queue, schema, self._listener)
        self._quiet: _Quiet | None = None
        #: Whether the last take saw the queue plain (no wakeup of a priority other than 0 or
        #: under a limit): the next take is then sent in its plain form (see `taking`).
        self._plain = True

    @property
    def pool(self) -> Pool:
        return self._pool

    def _params(self, workflow: str, **more: object) -> dict[str, object]:
        return {"queue": self.queue, "workflow": workflow, "channel": self.channel, **more}

    async def prepare(self) -> None:
        """Fail now, with `NotMigrated`, if the tables are missing; otherwise nothing to do."""
        await one(self._pool, self._sql["probe"], {})

    async def close(self) -> None:
        """Close the listening connection, and settle the pool's connections a cancelled call
        left reading its answers (`libpq_pipeline.settled`, at most `SETTLE`): after this no
        task of the store runs, and the pool, the caller's, may be closed."""
        if self._listener is not None:
            await self._listener.close()
        await libpq_pipeline.settled(self._pool)

    def changed(self) -> None:
        """Forget the last empty read: this process has just written to the queue, and must
        not wait to hear of its own write (a notification lands a moment after its commit;
        `cancel`, `done` and `extend` send none). `PostgresDurable` calls it for its moves."""
        self._quiet = None

    async def make_ready(
        self, workflow: str, *, priority: int = 0, limit: Limit | None = None
    ) -> None:
        """Make `workflow` ready now, at `priority` (higher is taken first) under `limit`;
        a wakeup already pending keeps the higher priority and its own limit (or takes this
        one's if it had none)."""
        params = self._params(check_workflow(workflow), **wakeup(priority, limit))
        await one(self._pool, self._sql["make_ready"], params)
        self.changed()

    async def next_ready(self, within: timedelta) -> Delivery | None:
        return await self.waiting(within, self._take)

    async def _take(self, waited: bool = False) -> Look[Delivery]:
        params = {"queue": self.queue, "lease": self.lease, "n": 1}
        row = await self.taking(lambda sql: one(self._pool, sql, params), self._sql, "take")
        workflow, receipt, earliest, hidden_for, lapsed, *policy = row
        found = None if workflow is None else delivered(workflow, receipt, lapsed, *policy)
        return Look(found, earliest, hidden_for)

    async def taking(
        self,
        send: Callable[[str], Awaitable[TupleRow | None]],
        sql: Mapping[str, str],
        name: str,
    ) -> tuple[Any, ...]:
        """The answer of the take `name` of `sql`, sent by `send`, without its last column (whether
        the queue is plain now, which picks the next take's form).

        While the queue was last seen plain the take goes in its plain form (`<name>_plain`:
        the statement from before priorities and limits, behind one probe of an index that is
        empty on the common path). That form stands aside when the queue is not plain, taking
        nothing, and the full take is sent at once: one round trip more each time a queue
        starts using priorities or limits, none while it keeps to them or to neither."""
        plain = self._plain
        row = await send(sql[f"{name}_plain"] if plain else sql[name])
        assert row is not None  # FROM now ...: always one row
        *answer, now_plain = row
        self._plain = bool(now_plain)
        if plain and not now_plain:
            row = await send(sql[name])
            assert row is not None
            *answer, now_plain = row
            self._plain = bool(now_plain)
        return tuple(answer)

    async def waiting(
        self, within: timedelta, read: Callable[[bool], Awaitable[Look[T]]]
    ) -> T | None:
        """Run `read` (one statement that tries to take a row and says when the earliest hidden
        one becomes visible) until it finds something or `within` runs out, waiting between
        reads for a notification, that row's time or `poll`, whichever comes first. While the
        last empty read still describes the queue, nothing is announced and no row is due, no
        statement is sent at all. `read` is told whether it follows a wait (a woken reader
        should send at once rather than batch with others: nothing else is in flight).

        `next_ready` and `PostgresDurable.take` both wait here, differing only in `read`."""
        positive("within", within)
        loop = asyncio.get_running_loop()
        end = loop.time() + within.total_seconds()
        listener = self._listener
        if listener is not None:
            await listener.start()
        waited = False
        while True:
            listening = listener is not None and listener.listening
            generation, changed = listener.mark() if listener is not None else (0, None)
            quiet = self._still_quiet()
            if quiet is not None:
                look_again = quiet.until  # nothing announced since the last empty read
            else:
                look = await read(waited)
                stop_if_cancelled()
                if look.found is not None:
                    self._quiet = None
                    return look.found
                # No row hidden now can show before `hidden_for`; one another worker takes
                # after this read can show (its taker dead) no sooner than a lease from now,
                # and nobody announces that: so look again within a lease, whatever `poll` is.
                poll = self.poll if listening or listener is None else min(self.poll, _DEAF)
                wait = min(poll, self.lease).total_seconds()
                if look.hidden_for is not None:
                    wait = min(wait, max(look.hidden_for, 0.0))
                look_again = loop.time() + wait
                self._quiet = None
                if listening:
                    at = None if look.earliest is None else look.earliest.astimezone(UTC)
                    self._quiet = _Quiet(generation, look_again, at)
            if end <= loop.time():
                return None
            timeout = min(end, look_again) - loop.time()
            if timeout <= 0:
                continue
            waited = True
            if listening and changed is not None:
                await set_within(changed, timeout)
            else:
                await asyncio.sleep(timeout)

    def _still_quiet(self) -> _Quiet | None:
        """The last empty read, if it still describes the queue: we were listening throughout,
        nothing was announced since, and neither `poll` nor the earliest hidden row has come."""
        quiet, listener = self._quiet, self._listener
        if quiet is None or listener is None or not listener.listening:
            return None
        if quiet.generation != listener.generation:
            return None
        if asyncio.get_running_loop().time() >= quiet.until:
            return None
        return quiet

    async def done(self, delivery: Delivery) -> None:
        """Answer `delivery`; under a concurrency limit its slot is freed with it, and the
        readers waiting for that slot are told (`done_limited`)."""
        params = self._params(delivery.workflow, receipt=int(delivery.receipt))
        if held_key(delivery) is None:
            await one(self._pool, self._sql["done"], params)
        else:
            await one(self._pool, self._sql["done_limited"], {**params, **giving_back(delivery)})
        self.changed()

    async def wake_at(self, delivery: Delivery, when: datetime) -> bool:
        if when.tzinfo is None:
            raise ValueError("when must be a timezone-aware datetime")
        row = await one(
            self._pool,
            self._sql["wake_at"],
            self._params(
                delivery.workflow, receipt=int(delivery.receipt), when=when,
                **giving_back(delivery), **wakeup(delivery.priority, delivery.limit),
            ),
        )
        self.changed()
        return row is not None and row[0] > 0

    async def wake_due(self, now: datetime | None = None) -> datetime | None:
        """Nothing to move: a sleeper is a row whose visible_at is in the future, and
        `next_ready` already waits for the earliest one itself. Returns the earliest hidden
        row's time (a sleeper, or a taken row's lease end), or None if there is none.

        `now` is ignored: visibility is decided by the database's clock. An idle worker's timer
        costs nothing here: while the last empty `next_ready` read still describes the queue
        (see `_still_quiet`) its answer is returned without a statement."""
        quiet = self._still_quiet()
        if quiet is not None:
            return quiet.earliest
        row = await one(self._pool, self._sql["earliest"], {"queue": self.queue})
        if row is None or row[0] is None:
            return None
        moment: datetime = row[0]
        return moment.astimezone(UTC)

    async def extend(self, delivery: Delivery, within: timedelta) -> Delivery | None:
        positive("within", within)
        params = self._params(delivery.workflow, receipt=int(delivery.receipt), within=within)
        if held_key(delivery) is None:
            row = await one(self._pool, self._sql["extend"], params)
        else:  # its slot is kept as long as its lease
            limited = {**params, **giving_back(delivery)}
            row = await one(self._pool, self._sql["extend_limited"], limited)
        self.changed()
        return delivery if row is not None else None

    async def cancel(self, workflow: str) -> int:
        row = await one(self._pool, self._sql["cancel"], self._params(check_workflow(workflow)))
        self.changed()
        assert row is not None
        return int(row[0])

    async def footprint(self) -> Footprint:
        """This queue's rows, visible and hidden (sleeping or taken), and the bytes of the
        queue table with its indexes (every queue of the database shares the table)."""
        row = await one(self._pool, self._sql["footprint"], {"queue": self.queue})
        assert row is not None
        visible, hidden, size = row
        return Footprint({"visible": int(visible), "hidden": int(hidden)}, int(size))

    async def backlog(self) -> Backlog:
        """The visible rows, and how long ago the earliest became visible (made ready, due, or
        its lease lapsed), on the server's clock."""
        row = await one(self._pool, self._sql["backlog"], {"queue": self.queue})
        assert row is not None
        ready, seconds = row
        oldest = None if seconds is None else timedelta(seconds=max(float(seconds), 0.0))
        return Backlog(int(ready), oldest)
