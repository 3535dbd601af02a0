"""`SplitDurable`: a `Durable` over a checkpointer and a scheduler that are separate stores
(the memory stores, or any pair that cannot act in one step), with `status`, `list` and
`retry` from `durability.status.Inspected`, as every shipped `Durable` has them."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from durability.checks import check_limit, check_priority, positive
from durability.interfaces import Checkpointer, Ledger, Scheduler, SettlingRelease
from durability.signals import Fenced
from durability.status import Inspected
from durability.storekit.outage import Unanswered, delivery_unknown, outcome_unknown
from durability.storekit.traffic import Traffic
from durability.values import Delivery, Entry, Limit, Pass, Recorded, Taken
from durability.wakeups import make_ready

__all__ = ["SplitDurable", "take_then_claim"]


class SplitDurable(Inspected):
    """A `Durable` over two separate stores, ordered so the crash window is the survivable one.

    `arrive` and `deliver` write then queue: a crash between leaves a value with nothing to
    wake it, which a retry fixes. `delete` cancels then discards: a crash between leaves records
    with nothing to wake them, rather than a wakeup that would re-run every effect from nothing.
    """

    __slots__ = (
        "_checkpointer",
        "_end_settle_release",
        "_ledger",
        "_scheduler",
        "_settle_release",
        "_traffic",
    )

    def __init__(
        self, checkpointer: Checkpointer, scheduler: Scheduler, traffic: Traffic | None = None
    ) -> None:
        self._checkpointer = checkpointer
        # Asked once: a runtime protocol check costs more than the call it guards.
        self._ledger = checkpointer if isinstance(checkpointer, Ledger) else None
        self._settle_release = (
            checkpointer.settle_release if isinstance(checkpointer, SettlingRelease) else None
        )
        self._end_settle_release = getattr(checkpointer, "end_settle_release", None)
        self._scheduler = scheduler
        self._traffic = traffic if traffic is not None else Traffic()

    @property
    def checkpointer(self) -> Checkpointer:
        return self._checkpointer

    @property
    def scheduler(self) -> Scheduler:
        return self._scheduler

    @property
    def traffic(self) -> Traffic:
        """What the two stores count of what they send, if they count into this `Traffic`
        (every store `open_durable` opens does; `durability.storekit.traffic`)."""
        return self._traffic

    async def arrive(
        self,
        workflow: str,
        key: str,
        value: object,
        *,
        priority: int = 0,
        limit: Limit | None = None,
    ) -> Recorded:
        check_priority(priority)  # before the supply: a refused wakeup must write nothing
        check_limit(limit)
        try:
            recorded = await self._checkpointer.supply(workflow, key, value)
            await make_ready(self._scheduler, workflow, priority, limit)
        except Unanswered as error:  # it may have landed: say so, and that a resend is safe
            raise outcome_unknown(error, "arrive", workflow, key) from error.__cause__
        return recorded

    async def deliver(
        self, workflow: str, value: object, *, priority: int = 0, limit: Limit | None = None
    ) -> Entry:
        check_priority(priority)
        check_limit(limit)
        try:
            entry = await self._checkpointer.append(workflow, value)
            await make_ready(self._scheduler, workflow, priority, limit)
        except Unanswered as error:
            raise delivery_unknown(error, workflow) from error.__cause__
        return entry

    async def delete(self, workflow: str) -> int:
        await self._scheduler.cancel(workflow)
        return await self._checkpointer.discard(workflow)

    async def finish_ended(
        self,
        holder: Pass,
        delivery: Delivery,
        key: str,
        value: object,
        state: str,
        detail: Mapping[str, object],
    ) -> bool:
        """The ending recorded under the claim, then `finish_settled`: one call where the
        checkpointer can (the memory store's `end_settle_release`), else a `record` first,
        whose fence refuses a pass a cancel or a newer claim has superseded."""
        ending = self._end_settle_release
        if ending is not None:
            if not await ending(holder, key, value, state, detail):
                return False
        else:
            try:
                await self._checkpointer.record(holder, key, value)
            except Fenced:
                return False
            if self._ledger is not None:
                await self._ledger.settle(holder, state, detail)
            await self._checkpointer.release(holder)
        await self._scheduler.done(delivery)
        return True

    async def take(self, within: timedelta, budget: timedelta, alive: timedelta) -> Taken | None:
        return await take_then_claim(self._checkpointer, self._scheduler, within, budget, alive)

    async def finish(self, holder: Pass, delivery: Delivery) -> None:
        await self._checkpointer.release(holder)
        await self._scheduler.done(delivery)

    async def finish_settled(
        self, holder: Pass, delivery: Delivery, state: str, detail: Mapping[str, object]
    ) -> bool:
        """`settle`, then `finish`: three calls in order over two stores (the standing first,
        while the claim still holds, so no one sees the claim gone and the standing old).
        A checkpointer that keeps no standings settles nothing (False)."""
        if self._settle_release is not None:
            stood = await self._settle_release(holder, state, detail)
        else:
            stood = self._ledger is not None and await self._ledger.settle(holder, state, detail)
            await self._checkpointer.release(holder)
        await self._scheduler.done(delivery)
        return stood


async def take_then_claim(
    checkpointer: Checkpointer,
    scheduler: Scheduler,
    within: timedelta,
    budget: timedelta,
    alive: timedelta,
) -> Taken | None:
    """`Durable.take` as two calls, for a store that cannot do both in one step."""
    # Checked before the delivery is taken: a claim refused after it would leave the delivery
    # held by nobody until its lease ran out.
    positive("budget", budget)
    positive("alive", alive)
    delivery = await scheduler.next_ready(within)
    if delivery is None:
        return None
    return Taken(delivery, await checkpointer.claim(delivery.workflow, budget, alive))

