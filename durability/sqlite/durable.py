"""`SqliteDurable`: the moves that cross the checkpoint and the queue, each one transaction.

`arrive` (supply, then make ready), `deliver` (append, then make ready), `delete` (cancel,
then discard), `take` (next ready, then claim) and `finish` (release, then done) each commit
both halves together on the shared database, so there is no window in which a value waits
with no wakeup, a wakeup outlives its records, a taken row waits for its claim, or a finished
pass's wakeup is answered while its claim still holds. The waiters of this process are woken
after the commit, never before.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from datetime import timedelta

from durability.checks import check_key, check_recorded_key, check_workflow, positive
from durability.interfaces import Checkpointer, Scheduler
from durability.sqlite.checkpointer import (
    Claimed,
    SqliteCheckpointer,
    append_step,
    claim_step,
    claimed_pass,
    discard_step,
    end_step,
    release_step,
    settle_params,
    settle_step,
    supply_step,
)
from durability.sqlite.policy import wakeup
from durability.sqlite.scheduler import (
    SqliteScheduler,
    cancel_step,
    done_step,
    ready_step,
    take_step,
)
from durability.sqlite.watching import ended_signal
from durability.status import Inspected
from durability.storekit.outage import Unanswered, delivery_unknown, outcome_unknown
from durability.storekit.traffic import Traffic
from durability.values import Delivery, Entry, Limit, Pass, Recorded, Taken

__all__ = ["SqliteDurable"]


class SqliteDurable(Inspected):
    """A `Durable` whose checkpointer and scheduler share one `SqliteDatabase`."""

    __slots__ = ("_checkpointer", "_scheduler")

    def __init__(self, checkpointer: SqliteCheckpointer, scheduler: SqliteScheduler) -> None:
        if checkpointer.database is not scheduler.database:
            # One transaction needs one connection: two database objects cannot share it.
            raise ValueError("checkpointer and scheduler must share one SqliteDatabase")
        self._checkpointer = checkpointer
        self._scheduler = scheduler

    @property
    def checkpointer(self) -> Checkpointer:
        return self._checkpointer

    @property
    def scheduler(self) -> Scheduler:
        return self._scheduler

    @property
    def traffic(self) -> Traffic:
        """What this process sent the file: statements by leading keyword, and hops to the
        database's threads as round trips (`SqliteDatabase.traffic`)."""
        return self._checkpointer.database.traffic

    async def arrive(
        self, workflow: str, key: str, value: object, *, priority: int = 0,
        limit: Limit | None = None,
    ) -> Recorded:
        check_workflow(workflow)
        check_key(key)
        policy = wakeup(priority, limit)
        codec = self._checkpointer.codec
        encoded = codec.encode(value)
        queue = self._scheduler.queue

        def work(connection: sqlite3.Connection) -> tuple[str, bool]:
            recorded = supply_step(connection, workflow, key, encoded)
            ready_step(connection, queue, workflow, policy)
            return recorded

        try:
            text, first = await self._checkpointer.database.write(work)
        except Unanswered as error:
            raise outcome_unknown(error, "arrive", workflow, key) from error.__cause__
        self._checkpointer.database.notify(queue)
        return Recorded(codec.decode(text), first)

    async def deliver(
        self, workflow: str, value: object, *, priority: int = 0, limit: Limit | None = None
    ) -> Entry:
        check_workflow(workflow)
        policy = wakeup(priority, limit)
        codec = self._checkpointer.codec
        encoded = codec.encode(value)
        queue = self._scheduler.queue

        def work(connection: sqlite3.Connection) -> str:
            key = append_step(connection, workflow, encoded)
            ready_step(connection, queue, workflow, policy)
            return key

        try:
            key = await self._checkpointer.database.write(work)
        except Unanswered as error:
            raise delivery_unknown(error, workflow) from error.__cause__
        self._checkpointer.database.notify(queue)
        return Entry(key, codec.decode(encoded))

    async def delete(self, workflow: str) -> int:
        check_workflow(workflow)
        queue = self._scheduler.queue

        def work(connection: sqlite3.Connection) -> tuple[int, bool]:
            _, freed = cancel_step(connection, queue, workflow)
            return discard_step(connection, workflow), freed

        gone, freed = await self._checkpointer.database.write(work)
        if freed:
            self._checkpointer.database.notify(queue)  # a slot freed: as an arrival
        return gone

    async def finish(self, holder: Pass, delivery: Delivery) -> None:
        check_workflow(holder.workflow)
        queue = self._scheduler.queue

        def work(connection: sqlite3.Connection) -> bool:
            # Release first, in the same commit: the next wakeup cannot find the claim held.
            release_step(connection, holder)
            return done_step(connection, queue, delivery)

        if await self._checkpointer.database.write(work):
            self._checkpointer.database.notify(queue)  # a slot freed: as an arrival

    async def finish_settled(
        self, holder: Pass, delivery: Delivery, state: str, detail: Mapping[str, object]
    ) -> bool:
        """The standing, the release and the done in one write transaction: one commit."""
        params = settle_params(holder, state, detail)
        queue = self._scheduler.queue

        def work(connection: sqlite3.Connection) -> tuple[bool, bool]:
            # The standing while the claim it is fenced by is still this pass's, then `finish`.
            stood = settle_step(connection, params)
            release_step(connection, holder)
            return stood, done_step(connection, queue, delivery)

        stood, freed = await self._checkpointer.database.write(work)
        if freed:
            self._checkpointer.database.notify(queue)  # a slot freed: as an arrival
        return stood

    async def finish_ended(
        self,
        holder: Pass,
        delivery: Delivery,
        key: str,
        value: object,
        state: str,
        detail: Mapping[str, object],
    ) -> bool:
        """The ending, the standing, the release and the done in one write transaction, if the
        claim's token is still the pass's; then whoever waits for the ending is rung."""
        check_recorded_key(key)
        params = settle_params(holder, state, detail)
        encoded = self._checkpointer.codec.encode(value)
        queue = self._scheduler.queue

        def work(connection: sqlite3.Connection) -> tuple[bool, bool]:
            if not end_step(connection, params, key, encoded):
                return False, False
            release_step(connection, holder)
            return True, done_step(connection, queue, delivery)

        database = self._checkpointer.database
        ours, freed = await database.write(work)
        if ours:
            database.notify(ended_signal(holder.workflow), ended=True)
        if freed:
            database.notify(queue)  # a slot freed: as an arrival
        return ours

    async def take(self, within: timedelta, budget: timedelta, alive: timedelta) -> Taken | None:
        """Take a ready row and claim its workflow in one write transaction, waiting as
        `next_ready` does (polling, woken at once by a `make_ready` in this process). The claim
        brings the checkpoint it found; `holder` is `None` if a live pass holds the workflow,
        and the row is taken either way (the worker looks again later)."""
        positive("within", within)
        positive("budget", budget)
        positive("alive", alive)
        scheduler = self._scheduler
        queue, lease = scheduler.queue, scheduler.lease

        def work(connection: sqlite3.Connection) -> tuple[Delivery, Claimed | None] | None:
            delivery = take_step(connection, queue, lease)
            if delivery is None:
                return None  # an empty commit: the lock was taken, nothing was written
            return delivery, claim_step(connection, delivery.workflow, budget, alive)

        # One transaction, not next_ready then claim: one commit and one hop to the writer's
        # thread fewer a pass, and no moment where the row is taken but the claim not yet tried.
        found = await scheduler.when_ready(within, work)
        if found is None:
            return None
        delivery, claimed = found
        holder = claimed_pass(self._checkpointer.codec, delivery.workflow, alive, claimed)
        return Taken(delivery, holder)
