"""`PostgresCheckpointer`: a workflow's records and its claim as two tables.

Every operation except `transact` is one statement (`checkpointer.sql`), so on an autocommit
pool it is one round trip and one implicit transaction; the fence check and the write it guards
are never two steps a newer claim could come between. `transact` is one transaction of three
statements (fence and reserve the key; the effect; fill the record).

The database's `clock_timestamp()` is the only clock, so workers on hosts whose clocks disagree
still agree on who holds a claim. `PostgresCheckpointer` says which commits skip the WAL flush.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta

from psycopg.rows import TupleRow

from durability.checks import (
    INBOX,
    INBOX_WIDTH,
    MAX_NAME,
    check_key,
    check_page,
    check_recorded_key,
    check_state,
    check_workflow,
    detail_text,
    positive,
)
from durability.codec import Codec, JsonCodec, decode_checkpoint
from durability.postgres.batching import StatementBatcher
from durability.postgres.effect import PostgresEffect
from durability.postgres.libpq_pipeline import GROUP_LOCK_WAIT
from durability.postgres.statements import (
    DEFAULT_SCHEMA,
    Params,
    Pool,
    borrowed,
    ended_channel,
    every,
    one,
    run,
    statements,
)
from durability.postgres.watching import Endings, PostgresBell
from durability.signals import Fenced
from durability.storekit.coalescing import Coalescer, Queued, fail, settle
from durability.values import Effect, Entry, Look, Pass, Recorded, Standing, Written

#: How many times a first-writer-wins write is retried when it lost a race it cannot see: a
#: concurrent writer of the same key committed after this statement's snapshot was taken, so
#: the statement neither wrote nor could read the winner. The next attempt always sees it.
#: (`PostgresDurable.arrive`, a supply of its own, retries the same way.)
RACES = 8

log = logging.getLogger("durability.postgres")

#: The most records one `record_many` statement carries.
MOST_RECORDED = 64

_RecordRow = tuple[bool, str | None, str | None]


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)


_ONE_US = timedelta(microseconds=1)


def _microseconds(duration: object) -> int:
    assert isinstance(duration, timedelta)
    return duration // _ONE_US



#: Above every workflow id in code point order (ids are at most `MAX_NAME` characters).
_ABOVE_ALL = "\U0010ffff" * (MAX_NAME + 1)


async def _concluded(pool: Pool, sql: str, params: Params) -> TupleRow:
    """`conclude`'s row, the statement sent again while it answers that the claim row changed
    after its snapshot (it then wrote nothing: an ending it could not see may be written)."""
    for _ in range(RACES):
        row = await one(pool, sql, params)
        assert row is not None
        if row[4]:
            return row
    raise RuntimeError(f"conclude {params['workflow']!r}: lost {RACES} races in a row")


def page_bounds(prefix: str | None, after: str | None) -> tuple[str, str]:
    """A listing page's ids as a range: from `low` (inclusive) to `high` (exclusive), `after`
    itself to be left out. In code point order, which the "C" collation keeps."""
    low = prefix or ""
    if after is not None and after > low:
        low = after
    trimmed = (prefix or "").rstrip("\U0010ffff")
    if not trimmed:
        return low, _ABOVE_ALL  # no prefix, or one no id can sort past
    point = ord(trimmed[-1]) + 1
    if 0xD800 <= point <= 0xDFFF:  # surrogates are not text
        point = 0xE000
    return low, trimmed[:-1] + chr(point)


class PostgresCheckpointer:
    """A `Checkpointer` over the `records` and `claims` tables of `schema` (`durability` unless
    given; `migrate(pool, schema)` creates them).

    `pool` should hand out autocommit connections (`kwargs={"autocommit": True}`) for one round
    trip per operation; a non-autocommit pool works too, at the cost of a BEGIN and a COMMIT.

    `claim` also returns the checkpoint it found (`Pass.records`), so a pass costs no `load`; the
    statement hands back None instead when the claim row changed under its snapshot (see the
    comment on `claim` in checkpointer.sql), and the pass then loads as before.

    Which commits wait for the WAL flush. A flush is most of a commit's cost; `claim`, `release`,
    `renew` and `extend` skip it, per statement (`set_config('synchronous_commit', 'off', true)` in
    the statement itself). What a server crash can then lose is harmless: WAL is flushed in order,
    so any later synchronous write of the pass (a record) flushes its claim too; a pass with no such
    write whose claim is lost is fenced at its first write after the restart, because its token is
    no longer on the row (the new claim's token is max(now_ms, prev + 1), and now_ms has moved on by
    the restart). A lost release, renew or extend only makes a claim lapse sooner or later than
    asked. The one price: a pass whose claim was lost may run a step alongside the next claimer
    until its first write is refused, as when a lease lapses. `record`, `transact`, `supply`,
    `append` and `discard` stay synchronous: they are the checkpoint itself.
    """

    def __init__(
        self, *, pool: Pool, codec: Codec | None = None, schema: str = DEFAULT_SCHEMA
    ) -> None:
        self._sql = statements("checkpointer.sql", schema)
        self.schema = schema
        self._pool = pool
        self._codec: Codec = codec or JsonCodec()
        self._batcher = StatementBatcher(pool)
        self._records: Coalescer[dict[str, object], _RecordRow] = Coalescer(
            self._record_many, MOST_RECORDED
        )
        self._endings = Endings(pool, ended_channel(schema), self._sql)

    @property
    def pool(self) -> Pool:
        return self._pool

    @property
    def batcher(self) -> StatementBatcher:
        """What this checkpointer's single statements are sent through: a durable sends its
        own (take, finish) through it too, so a turn's passes share one connection."""
        return self._batcher

    @property
    def codec(self) -> Codec:
        return self._codec

    async def claim(self, workflow: str, budget: timedelta, alive: timedelta) -> Pass | None:
        check_workflow(workflow)
        positive("budget", budget)
        positive("alive", alive)
        row = await one(
            self._pool, self._sql["claim"], {"workflow": workflow, "budget": budget, "alive": alive}
        )
        if row is None:
            return None
        token, deadline, found = row
        # None: the claim row moved under the statement's snapshot, so `resume` loads instead.
        return self.claimed(workflow, token, alive, _utc(deadline), found)

    def claimed(
        self, workflow: str, token: int, alive: timedelta, deadline: datetime,
        found: list[list[str]] | None,
    ) -> Pass:
        """The `Pass` of a claim that read the checkpoint as `[key, value]` pairs in
        first-recorded order (`None`: the claim row moved under the statement's snapshot, so
        `resume` loads instead)."""
        if found is None:
            return Pass(workflow, token, alive, deadline)
        records, ordinals = decode_checkpoint(self._codec, found)
        return Pass(workflow, token, alive, deadline, records, ordinals)

    async def load(self, workflow: str) -> dict[str, object]:
        rows = await every(self._pool, self._sql["load"], {"workflow": check_workflow(workflow)})
        return {key: self._codec.decode(value) for key, value in rows}

    async def history(self, workflow: str) -> list[Written]:
        rows = await every(self._pool, self._sql["history"], {"workflow": check_workflow(workflow)})
        return [Written(key, self._codec.decode(value), _utc(at)) for key, value, at in rows]

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        check_recorded_key(key)
        encoded = self._codec.encode(value)
        params = {
            "workflow": holder.workflow,
            "token": holder.token,
            "alive": holder.alive,
            "key": key,
            "value": encoded,
        }
        for _ in range(RACES):
            # One statement with the turn's other records: they share one commit's WAL flush.
            live, written, held = await self._records.queue(params)
            if not live:
                raise Fenced(holder.workflow, holder.token)
            if written is not None:
                return Recorded(self._codec.decode(written), True)
            if held is not None:
                return Recorded(self._codec.decode(held), False)
        raise RuntimeError(f"record {holder.workflow!r}/{key!r}: lost {RACES} races in a row")

    async def _record_many(self, calls: list[Queued[dict[str, object], _RecordRow]]) -> None:
        """The records asked for in one turn as ONE statement (`record_many`) when each is of a
        different workflow; otherwise, or if that statement fails (a lock it would wait for
        past `GROUP_LOCK_WAIT`, say), each as `record`, the turn's ones in one transaction. A
        record is safe to send again: its write is first-writer-wins and its renewal only
        ever lengthens the claim."""
        workflows = {str(params["workflow"]) for params, _ in calls}
        if len(calls) > 1 and len(workflows) == len(calls):
            ordered = sorted(calls, key=lambda call: str(call[0]["workflow"]))  # the lock order
            asked = [
                {
                    "workflow": params["workflow"],
                    "token": params["token"],
                    "key": params["key"],
                    "value": params["value"],
                    "alive_us": _microseconds(params["alive"]),
                    "n": n,
                }
                for n, (params, _) in enumerate(ordered)
            ]
            try:
                row = await self._batcher.one(
                    self._sql["record_many"],
                    {"asked": json.dumps(asked), "lock_wait": GROUP_LOCK_WAIT},
                )
            except Exception as error:
                log.info("record_many failed (%s); sending its %d records one by one",
                         error, len(calls))
            else:
                assert row is not None  # one row of arrays, whatever the CTEs did
                for (_, reply), live, written, held in zip(ordered, *row, strict=True):
                    settle(reply, (bool(live), written, held))
                return
        await asyncio.gather(*(self._record_alone(call) for call in calls))

    async def _record_alone(self, call: Queued[dict[str, object], _RecordRow]) -> None:
        params, reply = call
        try:
            # With the turn's other such records as one transaction: one WAL flush between them.
            row = await self._batcher.one(self._sql["record"], params, together=True)
        except BaseException as error:
            fail([call], error)
            if not isinstance(error, Exception):
                raise
            return
        assert row is not None  # a SELECT of three scalars always yields a row
        live, written, held = row
        settle(reply, (bool(live), written, held))

    async def transact(self, holder: Pass, key: str, effect: Effect) -> Recorded:
        if not isinstance(effect, PostgresEffect):
            kind = type(effect).__name__
            raise TypeError(f"the Postgres store performs PostgresEffect, not {kind}")
        check_key(key)
        params = {"workflow": holder.workflow, "token": holder.token, "alive": holder.alive,
                  "key": key}
        for _ in range(RACES):
            async with borrowed(self._pool) as conn, conn.transaction():
                cursor = await run(conn, self._sql["reserve"], params)
                row = await cursor.fetchone()
                assert row is not None
                live, reserved, held = row
                if not live:
                    raise Fenced(holder.workflow, holder.token)
                if reserved:
                    result = await effect.perform(conn)
                    # Encoded inside the transaction: a result the codec refuses rolls the
                    # effect back with it, rather than leaving it done and unrecorded.
                    encoded = self._codec.encode(result)
                    await run(conn, self._sql["fill"], {**params, "value": encoded})
                    return Recorded(self._codec.decode(encoded), True)
                if held is not None:
                    return Recorded(self._codec.decode(held), False)
        raise RuntimeError(f"transact {holder.workflow!r}/{key!r}: lost {RACES} races in a row")

    async def supply(self, workflow: str, key: str, value: object) -> Recorded:
        check_workflow(workflow)
        check_key(key)
        encoded = self._codec.encode(value)
        params = {"workflow": workflow, "key": key, "value": encoded}
        for _ in range(RACES):
            row = await one(self._pool, self._sql["supply"], params)
            assert row is not None
            written, held = row
            if written is not None:
                return Recorded(self._codec.decode(written), True)
            if held is not None:
                return Recorded(self._codec.decode(held), False)
        raise RuntimeError(f"supply {workflow!r}/{key!r}: lost {RACES} races in a row")

    async def append(self, workflow: str, value: object) -> Entry:
        check_workflow(workflow)
        encoded = self._codec.encode(value)
        row = await one(
            self._pool,
            self._sql["append"],
            {"workflow": workflow, "value": encoded, "prefix": INBOX, "width": INBOX_WIDTH},
        )
        assert row is not None
        return Entry(row[0], self._codec.decode(encoded))

    async def extend(self, holder: Pass, budget: timedelta, alive: timedelta) -> Pass:
        positive("budget", budget)
        positive("alive", alive)
        row = await one(
            self._pool,
            self._sql["extend"],
            {"workflow": holder.workflow, "token": holder.token, "budget": budget, "alive": alive},
        )
        if row is None:
            raise Fenced(holder.workflow, holder.token)
        return Pass(holder.workflow, holder.token, holder.alive, _utc(row[0]))

    async def renew(self, holder: Pass, alive: timedelta) -> None:
        positive("alive", alive)
        row = await one(
            self._pool,
            self._sql["renew"],
            {"workflow": holder.workflow, "token": holder.token, "alive": alive},
        )
        if row is None:
            raise Fenced(holder.workflow, holder.token)

    async def discard(self, workflow: str) -> int:
        row = await one(self._pool, self._sql["discard"], {"workflow": check_workflow(workflow)})
        assert row is not None
        return int(row[0])

    async def conclude(self, workflow: str, key: str, value: object) -> Recorded:
        check_workflow(workflow)
        check_recorded_key(key)
        encoded = self._codec.encode(value)
        params = {"workflow": workflow, "key": key, "value": encoded,
                  "channel": ended_channel(self.schema)}
        row = await _concluded(self._pool, self._sql["conclude"], params)
        written, held = row[0], row[1]
        if written is not None:
            return Recorded(self._codec.decode(written), True)
        if held is None:
            # The winner committed while this statement waited on its key: this statement's
            # snapshot predates it, so read it in a statement of its own.
            return Recorded((await self.load(workflow))[key], False)
        return Recorded(self._codec.decode(held), False)

    def watch(self, workflow: str) -> AbstractAsyncContextManager[PostgresBell]:
        """A bell rung by an ending's NOTIFY, on the one LISTEN its watchers share (`watching`)."""
        return self._endings.watch(check_workflow(workflow))

    # -- the ledger: where each workflow's last pass left it ----------------------------------

    async def settle(self, holder: Pass, state: str, detail: Mapping[str, object]) -> bool:
        check_state(state)
        params = {
            "workflow": check_workflow(holder.workflow),
            "token": holder.token,
            "state": state,
            "detail": detail_text(detail),
        }
        # With the turn's records: it touches only this workflow's rows, so it may share their
        # commit (and their WAL flush).
        return await self._batcher.one(self._sql["settle"], params, together=True) is not None

    async def look(self, workflow: str) -> Look:
        row = await one(self._pool, self._sql["look"], {"workflow": check_workflow(workflow)})
        assert row is not None  # one row from `now`, whatever the joins find
        state, detail, at, claimed, known = row
        standing = None
        if state is not None:
            standing = Standing(workflow, state, json.loads(detail), _utc(at))
        return Look(standing, bool(claimed), bool(known))

    async def standings(
        self, state: str | None, prefix: str | None, limit: int, after: str | None
    ) -> list[Standing]:
        check_state(state)
        check_page(prefix, limit, after)
        low, high = page_bounds(prefix, after)
        params = {"state": state, "low": low, "high": high, "after": after or "", "limit": limit}
        sql = self._sql["standings_all" if state is None else "standings_in"]
        rows = await every(self._pool, sql, params)
        return [
            Standing(workflow, found, json.loads(detail), _utc(at))
            for workflow, found, detail, at in rows
        ]

    async def tally(self, prefix: str | None = None) -> dict[str, int]:
        check_page(prefix, 1, None)
        low, high = page_bounds(prefix, None)
        rows = await every(self._pool, self._sql["tally"], {"low": low, "high": high})
        return {str(state): int(count) for state, count in rows}

    async def release(self, holder: Pass) -> None:
        await one(
            self._pool, self._sql["release"], {"workflow": holder.workflow, "token": holder.token}
        )
