"""`PostgresDurable`: the checkpointer and scheduler over one database, with `arrive`,
`deliver`, `delete` and `finish` each a single statement, so each commits whole or not at all
(and `finish`, which ends every pass, costs one round trip rather than two).

That closes the window `SplitDurable` has to order around: a value recorded with no wakeup
queued for it (arrive, deliver) or wakeups cancelled with records left (delete) cannot be
observed, even by a process that dies between the two halves, because there is no between.
"""

from __future__ import annotations

from datetime import timedelta

from durability.interfaces import (
    INBOX,
    INBOX_WIDTH,
    Delivery,
    Entry,
    Pass,
    Recorded,
    Taken,
    check_key,
    check_workflow,
    take_then_claim,
)
from durability.postgres.checkpointer import _RACES, PostgresCheckpointer
from durability.postgres.listener import CHANNEL
from durability.postgres.scheduler import PostgresScheduler
from durability.postgres.statements import one, statements

_SQL = statements("durable.sql")


class PostgresDurable:
    """A `Durable` whose two halves share one pool, so one statement can cover both."""

    __slots__ = ("_checkpointer", "_scheduler")

    def __init__(self, checkpointer: PostgresCheckpointer, scheduler: PostgresScheduler) -> None:
        if checkpointer.pool is not scheduler.pool:
            raise ValueError(
                "PostgresDurable needs the checkpointer and scheduler on the same pool: "
                "its moves are single transactions across both"
            )
        self._checkpointer = checkpointer
        self._scheduler = scheduler

    @property
    def checkpointer(self) -> PostgresCheckpointer:
        return self._checkpointer

    @property
    def scheduler(self) -> PostgresScheduler:
        return self._scheduler

    def _params(self, workflow: str, **more: object) -> dict[str, object]:
        return {"workflow": workflow, "queue": self._scheduler.queue, "channel": CHANNEL, **more}

    async def arrive(self, workflow: str, key: str, value: object) -> Recorded:
        check_workflow(workflow)
        check_key(key)
        codec = self._checkpointer.codec
        params = self._params(workflow, key=key, value=codec.encode(value))
        for _ in range(_RACES):
            row = await one(self._checkpointer.pool, _SQL["arrive"], params)
            assert row is not None
            written, held, _told = row
            if written is not None:
                return Recorded(codec.decode(written), True)
            if held is not None:
                return Recorded(codec.decode(held), False)
        raise RuntimeError(f"arrive {workflow!r}/{key!r}: lost {_RACES} races in a row")

    async def deliver(self, workflow: str, value: object) -> Entry:
        check_workflow(workflow)
        codec = self._checkpointer.codec
        encoded = codec.encode(value)
        params = self._params(workflow, value=encoded, prefix=INBOX, width=INBOX_WIDTH)
        row = await one(self._checkpointer.pool, _SQL["deliver"], params)
        assert row is not None
        return Entry(row[0], codec.decode(encoded))

    async def delete(self, workflow: str) -> int:
        params = self._params(check_workflow(workflow))
        row = await one(self._checkpointer.pool, _SQL["delete"], params)
        assert row is not None
        return int(row[0])

    async def finish(self, holder: Pass, delivery: Delivery) -> None:
        """`release` then `done` as one statement (see `finish` in durable.sql)."""
        params = self._params(holder.workflow, token=holder.token, receipt=int(delivery.receipt))
        await one(self._checkpointer.pool, _SQL["finish"], params)

    async def take(self, within: timedelta, budget: timedelta, alive: timedelta) -> Taken | None:
        return await take_then_claim(self._checkpointer, self._scheduler, within, budget, alive)
