"""`PostgresDurable`: the checkpointer and scheduler over one database, with `arrive`,
`deliver`, `delete`, `take` and `finish` each a single statement, so each commits whole or not
at all (and `take` and `finish`, which begin and end every pass, cost one round trip each
rather than two: a one-step pass is three statements, take, record and finish).

That closes the window `SplitDurable` has to order around: a value recorded with no wakeup
queued for it (arrive, deliver) or wakeups cancelled with records left (delete) cannot be
observed, even by a process that dies between the two halves, because there is no between.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from durability.checks import (
    INBOX,
    INBOX_WIDTH,
    check_key,
    check_recorded_key,
    check_state,
    check_workflow,
    detail_text,
    positive,
)
from durability.postgres.batching import StatementBatcher
from durability.postgres.checkpointer import RACES, PostgresCheckpointer
from durability.postgres.policy import delivered, giving_back, wakeup
from durability.postgres.scheduler import Look, PostgresScheduler
from durability.postgres.statements import Params, ended_channel, one, statements
from durability.status import Inspected
from durability.storekit.coalescing import Coalescer, Queued, fail, settle
from durability.storekit.outage import Unanswered, delivery_unknown, outcome_unknown
from durability.storekit.traffic import Traffic
from durability.values import Delivery, Entry, Limit, Pass, Recorded, Taken

log = logging.getLogger("durability.postgres")

#: The most takes one `take_many` statement answers; more in one turn are sent as several.
MOST_TAKEN = 64
#: The most finishes one `finish_many` statement carries.
MOST_FINISHED = 64

_TakeRow = tuple[object, ...]


class PostgresDurable(Inspected):
    """A `Durable` whose two halves share one pool, so one statement can cover both.

    A busy worker's takes of one turn are one statement (`take_many`), and so are its finishes
    (`finish_many`): a dozen passes ending together pay for one statement and one commit.

    `take` waits for work in the scheduler's own loop (`PostgresScheduler.waiting`): the same
    LISTEN/NOTIFY wake-up, the same poll fallback, and no statement at all while nothing has been
    announced since the last empty read. Only the statement it runs differs from `next_ready`'s.
    Like the scheduler's take and the claim, it commits without waiting for the WAL flush (the
    receipt is the clock, not a sequence step; see scheduler.py and durable.sql). A read that
    follows a wait (a notification, or the poll) is sent at once; the first goes through the
    batcher with whatever else the worker's passes ask for in that turn.
    """

    __slots__ = (
        "_checkpointer",
        "_ended_channel",
        "_finishes",
        "_scheduler",
        "_sql",
        "_takes",
        "_traffic",
    )

    #: How many takes `work` keeps in flight for this store unless told otherwise, when its
    #: one reader does not take many at once (`take_up_to`): the takes of one turn are one
    #: statement here (`_take_many`), so a busy worker's free slots are filled by one round
    #: trip rather than one per handful of readers.
    readers = MOST_TAKEN

    def __init__(
        self,
        checkpointer: PostgresCheckpointer,
        scheduler: PostgresScheduler,
        traffic: Traffic | None = None,
    ) -> None:
        if checkpointer.pool is not scheduler.pool:
            raise ValueError(
                "PostgresDurable needs the checkpointer and scheduler on the same pool: "
                "its moves are single transactions across both"
            )
        if checkpointer.schema != scheduler.schema:
            raise ValueError(
                f"PostgresDurable needs the checkpointer and scheduler in one schema, got "
                f"{checkpointer.schema!r} and {scheduler.schema!r}"
            )
        self._sql = statements("durable.sql", scheduler.schema)
        self._ended_channel = ended_channel(scheduler.schema)
        self._checkpointer = checkpointer
        self._scheduler = scheduler
        self._takes: Coalescer[Params, _TakeRow] = Coalescer(self._take_many, MOST_TAKEN)
        self._finishes: Coalescer[Params, bool] = Coalescer(
            self._finish_many, MOST_FINISHED
        )
        self._traffic = traffic if traffic is not None else Traffic()

    @property
    def checkpointer(self) -> PostgresCheckpointer:
        return self._checkpointer

    @property
    def scheduler(self) -> PostgresScheduler:
        return self._scheduler

    @property
    def traffic(self) -> Traffic:
        """What the pool's connections sent, if they count into it (`traffic.attach`: every
        pool `open_durable` makes does)."""
        return self._traffic

    def _params(self, workflow: str, **more: object) -> dict[str, object]:
        queue, channel = self._scheduler.queue, self._scheduler.channel
        return {"workflow": workflow, "queue": queue, "channel": channel, **more}

    async def arrive(
        self, workflow: str, key: str, value: object, *, priority: int = 0,
        limit: Limit | None = None,
    ) -> Recorded:
        check_workflow(workflow)
        check_key(key)
        policy = wakeup(priority, limit)
        codec = self._checkpointer.codec
        params = self._params(workflow, key=key, value=codec.encode(value), **policy)
        for _ in range(RACES):
            try:
                row = await one(self._checkpointer.pool, self._sql["arrive"], params)
            except Unanswered as error:
                raise outcome_unknown(error, "arrive", workflow, key) from error.__cause__
            self._scheduler.changed()
            assert row is not None
            written, held, _told = row
            if written is not None:
                return Recorded(codec.decode(written), True)
            if held is not None:
                return Recorded(codec.decode(held), False)
        raise RuntimeError(f"arrive {workflow!r}/{key!r}: lost {RACES} races in a row")

    async def deliver(
        self, workflow: str, value: object, *, priority: int = 0, limit: Limit | None = None
    ) -> Entry:
        check_workflow(workflow)
        policy = wakeup(priority, limit)
        codec = self._checkpointer.codec
        encoded = codec.encode(value)
        params = self._params(
            workflow, value=encoded, prefix=INBOX, width=INBOX_WIDTH, **policy
        )
        try:
            row = await one(self._checkpointer.pool, self._sql["deliver"], params)
        except Unanswered as error:
            raise delivery_unknown(error, workflow) from error.__cause__
        self._scheduler.changed()
        assert row is not None
        return Entry(row[0], codec.decode(encoded))

    async def delete(self, workflow: str) -> int:
        params = self._params(check_workflow(workflow))
        row = await one(self._checkpointer.pool, self._sql["delete"], params)
        self._scheduler.changed()
        assert row is not None
        return int(row[0])

    async def finish(self, holder: Pass, delivery: Delivery) -> None:
        """`release` then `done` as one statement (see `finish` in durable.sql)."""
        params = self._params(
            holder.workflow, token=holder.token, receipt=int(delivery.receipt),
            **giving_back(delivery),
        )
        name = "finish" if params["held_key"] is None else "finish_limited"
        await self._checkpointer.batcher.one(self._sql[name], params)
        self._scheduler.changed()

    async def finish_settled(
        self, holder: Pass, delivery: Delivery, state: str, detail: Mapping[str, object]
    ) -> bool:
        """`settle`, `release` and `done` as one statement (`finish_settled` in durable.sql),
        shared with the other finishes asked for in the same turn (`_finish_many`)."""
        stood = await self._finishes.queue(_finishing(holder, delivery, state, detail))
        self._scheduler.changed()
        return stood

    async def finish_ended(
        self, holder: Pass, delivery: Delivery, key: str, value: object, state: str,
        detail: Mapping[str, object],
    ) -> bool:
        """`finish_settled` with the workflow's ending written in the same statement under the
        pass's token, its waiters notified on commit; False if the token is not the pass's."""
        asked = _finishing(holder, delivery, state, detail)
        asked["ending_key"] = check_recorded_key(key)
        asked["ending_value"] = self._checkpointer.codec.encode(value)
        stood = await self._finishes.queue(asked)
        self._scheduler.changed()
        return stood

    async def _finish_alone(self, asked: Params) -> bool:
        # A pass holding no slot ends without the statements that give one back.
        name = "finish_settled" if "held_key" not in asked else "finish_settled_limited"
        scheduler = self._scheduler
        params = {**_ALONE, **asked, "queue": scheduler.queue, "channel": scheduler.channel,
                  "ended_channel": self._ended_channel}
        row = await self._checkpointer.batcher.one(self._sql[name], params)
        assert row is not None  # one row of counts, whatever the CTEs did
        return bool(row[0])

    async def _finish_many(self, calls: list[Queued[Params, bool]]) -> None:
        """The finishes of one turn as ONE statement (`finish_many`; `finish_many_plain` when
        none holds a slot); a lone one, or a group naming a workflow twice, as `finish_settled`
        each. A group whose statement fails is sent again one by one, so each caller gets its
        own answer or its own error: a finish is safe to send twice (its delete and release
        compare the receipt and token, and the standing is written again with the same
        state)."""
        calls = sorted(calls, key=lambda call: str(call[0]["workflow"]))  # the lock order
        workflows = [str(params["workflow"]) for params, _ in calls]
        if len(calls) > 1 and len(set(workflows)) == len(calls):
            # Each finish's own fields as they are (`_finishing`), one JSON text for them all.
            many_params = {
                "queue": self._scheduler.queue,
                "channel": self._scheduler.channel,
                "asked": json.dumps([params for params, _ in calls], separators=(",", ":")),
                "ended_channel": self._ended_channel,
            }
            # No slot to give back (the common path): the form without the limits CTEs.
            plain = all("held_key" not in params for params, _ in calls)
            name = "finish_many_plain" if plain else "finish_many"
            try:
                row = await self._checkpointer.batcher.one(self._sql[name], many_params)
            except Exception as error:
                log.info("%s failed (%s); sending its %d finishes one by one",
                         name, error, len(calls))
            else:
                assert row is not None
                stood = set(row[0] or ())
                for params, reply in calls:
                    settle(reply, params["workflow"] in stood)
                return
        await asyncio.gather(*(self._answer_alone(call) for call in calls))

    async def _answer_alone(self, call: Queued[Params, bool]) -> None:
        params, reply = call
        try:
            settle(reply, await self._finish_alone(params))
        except BaseException as error:
            fail([call], error)
            if not isinstance(error, Exception):
                raise

    async def take(self, within: timedelta, budget: timedelta, alive: timedelta) -> Taken | None:
        """`next_ready` then `claim` as one statement (`take` in durable.sql), waiting for work
        exactly as `next_ready` does: the scheduler's loop, with this statement as its read."""
        scheduler = self._scheduler
        params = self._taking(budget, alive)

        async def read(waited: bool) -> Look[Taken]:
            if waited:  # woken (or the poll came): nothing to batch with, send at once
                pool = self._checkpointer.pool
                row = await scheduler.taking(
                    lambda sql: one(pool, sql, params), self._sql, "take"
                )
            else:  # with the turn's other takes, as one statement (`_take_many`)
                row = await self._takes.queue(params)
            workflow, receipt, earliest, hidden_for, token, deadline, lapsed, *rest = row
            *policy, found = rest
            if workflow is None:
                return Look(None, earliest, hidden_for)
            delivery = delivered(workflow, receipt, lapsed, *policy)
            return Look(self._taken(delivery, token, deadline, found, alive), None, None)

        return await scheduler.waiting(within, read)

    async def take_up_to(
        self, room: Callable[[], int], within: timedelta, budget: timedelta, alive: timedelta
    ) -> list[Taken]:
        """`take` for up to `room()` workflows (at most `MOST_TAKEN`) as one statement
        (`take_many`), waiting for work exactly as `take` does (`TakingMany`). It goes through
        the batcher, so it shares a pipeline with the turn's records and finishes."""
        scheduler = self._scheduler
        params = self._taking(budget, alive)

        async def read(waited: bool) -> Look[list[Taken]]:
            wanted = {**params, "n": max(1, min(room(), MOST_TAKEN))}
            batcher = self._checkpointer.batcher
            row = await scheduler.taking(
                lambda sql: batcher.one(sql, wanted), self._sql, "take_many"
            )
            workflows, receipts, tokens, deadlines, founds, earliest, hidden_for, *rest = row
            if not workflows:
                return Look(None, earliest, hidden_for)
            rest = plainly(rest, len(workflows))
            taken = [
                self._taken(delivered(workflow, receipt, *policy), token, deadline, found, alive)
                for workflow, receipt, token, deadline, found, *policy
                in zip(workflows, receipts, tokens, deadlines, founds, *rest, strict=True)
            ]
            return Look(taken, None, None)

        return await scheduler.waiting(within, read) or []

    def _taking(self, budget: timedelta, alive: timedelta) -> Params:
        """The parameters every take of this queue sends, its durations checked first."""
        positive("budget", budget)
        positive("alive", alive)
        scheduler = self._scheduler
        return {"queue": scheduler.queue, "lease": scheduler.lease, "budget": budget,
                "alive": alive, "n": 1}

    def _taken(self, delivery: Delivery, token: int | None, deadline: datetime,
               found: list[list[str]] | None, alive: timedelta) -> Taken:
        """A taken row as the worker wants it: the delivery, and the claim unless a live pass
        holds the workflow (no token)."""
        if token is None:  # a live pass holds it
            return Taken(delivery, None)
        holder = self._checkpointer.claimed(
            delivery.workflow, token, alive, deadline.astimezone(UTC), found
        )
        return Taken(delivery, holder)

    async def _take_many(self, calls: list[Queued[Params, _TakeRow]]) -> None:
        """The takes asked for in one turn (a busy worker's readers), each group that asks
        alike as ONE statement (`take_many`), the groups side by side."""
        groups: dict[tuple[object, ...], list[Queued[Params, _TakeRow]]] = {}
        for call in calls:
            params = call[0]
            groups.setdefault((params["budget"], params["alive"]), []).append(call)
        batcher, sql = self._checkpointer.batcher, self._sql
        await asyncio.gather(*(
            _take_group(self._scheduler, batcher, sql, group) for group in groups.values()
        ))


def _finishing(
    holder: Pass, delivery: Delivery, state: str, detail: Mapping[str, object]
) -> dict[str, object]:
    """A finish's own fields, each checked: what `finish_many` sends for it in its `asked` JSON
    (`finishing_many` in durable.sql), where a field left out reads as NULL. So only what the
    pass brings goes: no ending (`finish_ended` adds one), no hold under no limit, and none of
    the store's names (queue, channels), which the statement takes once, as parameters of its
    own. Under a busy worker a turn's finishes are one statement of tens of them, and this JSON
    is most of what it sends: with all twelve parameters a finish's (about 12 KB for 32 of
    them), the write took ten times as long (libpq sends what passes 8 KB within the call)."""
    asked: dict[str, object] = {
        "workflow": check_workflow(holder.workflow),
        "token": holder.token,
        "receipt": int(delivery.receipt),
        "state": check_state(state),
        "detail": detail_text(detail),
    }
    hold = giving_back(delivery)
    if hold["held_key"] is not None:
        asked.update(hold)
    return asked


#: What a finish sent alone (`finish_settled`) reads that `_finishing` leaves out: no ending, no
#: hold, unless the finish brings them.
_ALONE: Final[Params] = {"ending_key": None, "ending_value": None, "held_key": None, "hold": None}


async def _take_group(
    scheduler: PostgresScheduler,
    batcher: StatementBatcher,
    sql: Mapping[str, str],
    group: list[Queued[Params, _TakeRow]],
) -> None:
    """One statement for takes that ask alike (in its plain form while the queue is plain:
    `PostgresScheduler.taking`), its rows dealt out one to a caller in the shape of `take`'s
    row; callers beyond the rows taken get the "nothing visible" answer. A lone take is
    `take` itself."""
    params = group[0][0]
    lone = len(group) == 1
    try:
        if lone:
            row = await scheduler.taking(lambda text: batcher.one(text, params), sql, "take")
        else:
            many = {**params, "n": len(group)}
            row = await scheduler.taking(
                lambda text: batcher.one(text, many), sql, "take_many"
            )
    except BaseException as error:
        fail(group, error)
        if not isinstance(error, Exception):
            raise
        return
    assert row is not None  # FROM now LEFT JOIN the rest: always one row
    if lone:
        settle(group[0][1], row)
        return
    workflows, receipts, tokens, deadlines, founds, earliest, hidden_for, *rest = row
    taken = len(workflows or ())
    rest = plainly(rest, taken)
    for index, (_, reply) in enumerate(group):
        if index < taken:  # in the shape of `take`'s row (lapsed, the policy, found)
            settle(reply, (workflows[index], receipts[index], None, None, tokens[index],
                           deadlines[index], *(column[index] for column in rest),
                           founds[index]))
        else:
            settle(reply, (None, None, earliest, hidden_for, *[None] * 8))


def plainly(columns: list[Any], taken: int) -> list[Any]:
    """`take_many`'s per-row columns after the found ones, a column the plain take leaves
    NULL (a policy column: all its rows are at priority 0 with no limit) as one None a row."""
    return [[None] * taken if column is None else column for column in columns]
