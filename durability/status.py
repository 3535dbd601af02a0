"""What a workflow is doing, asked of the store: `status`, listing by state, and `retry`.

Every store keeps a workflow's standing (`interfaces.Ledger`): the worker writes it as each pass
ends, under the pass's claim, and `retry` writes "queued". A status is that standing read
together with the claim, so "running" needs no write at the start of every pass (`derive` has
the table). A standing says what the last pass came to, so the status is never ahead of the
store, and never wrong about a failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal, Protocol, cast, runtime_checkable

from durability.bodies import start
from durability.checks import (
    check_limit,
    check_page,
    check_priority,
    check_state,
    check_workflow,
)
from durability.clock import utcnow
from durability.endings import cancel, ended, result
from durability.failures import RETRY, Failure, failed, next_key
from durability.interfaces import Checkpointer, Durable, Ledger, Scheduler, claimed
from durability.signals import Contended
from durability.values import Limit, Look, Standing
from durability.wakeups import make_ready

if TYPE_CHECKING:
    from durability.schedules.handle import Schedules

State = Literal[
    "queued", "running", "sleeping", "blocked", "failed", "completed", "cancelled", "unknown"
]


@dataclass(frozen=True, slots=True)
class Status:
    """One workflow's state. `until` is set when sleeping, `waiting`/`listening` when blocked,
    `failure` when failed (and when sleeping out a retry's backoff), `at` whenever the store
    holds a standing (when it was written)."""

    workflow: str
    state: State
    until: datetime | None = None
    waiting: frozenset[str] = field(default=frozenset())
    listening: frozenset[str] = field(default=frozenset())
    failure: Failure | None = None
    at: datetime | None = None

    @classmethod
    def of(cls, standing: Standing) -> Status:
        """The status a standing states, as stored (no clock, no claim)."""
        detail = standing.detail
        until = detail.get("until")
        failure = detail.get("failure")
        return cls(
            standing.workflow,
            cast(State, standing.state),
            until=None if until is None else datetime.fromisoformat(str(until)),
            waiting=frozenset(_names(detail.get("waiting"))),
            listening=frozenset(_names(detail.get("listening"))),
            failure=None if failure is None else Failure.from_record(failure),
            at=standing.at,
        )

    def to_json(self) -> dict[str, object]:
        """The status as JSON's types, for an API."""
        return {
            "workflow": self.workflow,
            "state": self.state,
            "until": None if self.until is None else self.until.isoformat(),
            "waiting": sorted(self.waiting),
            "listening": sorted(self.listening),
            "failure": None if self.failure is None else self.failure.to_record(),
            "at": None if self.at is None else self.at.isoformat(),
        }


def _names(value: object) -> list[str]:
    return [str(name) for name in value] if isinstance(value, list) else []


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing, and the cursor of the next (`None` when this one was the last:
    fewer than the limit came back)."""

    statuses: list[Status]
    after: str | None


def ledger(checkpointer: Checkpointer) -> Ledger:
    """The checkpointer as a `Ledger`, or a `TypeError` saying it keeps no standings."""
    if not isinstance(checkpointer, Ledger):
        raise TypeError(
            f"{type(checkpointer).__name__} keeps no standings (it is not a Ledger), so it"
            " cannot say a workflow's status or list workflows by state"
        )
    return checkpointer


def derive(workflow: str, look: Look, now: datetime) -> Status:
    """A status from what the store holds:

    | the store holds ...                         | the status is                              |
    |---------------------------------------------|--------------------------------------------|
    | a live claim                                | running                                    |
    | failed / completed / blocked                | the same (with the failure / the keys)     |
    | sleeping until T, T still ahead             | sleeping until T (with the failure if the  |
    |                                             | sleep is a retry's backoff)                |
    | sleeping until a T that has passed; queued; | queued                                     |
    | records but no standing (never run yet)     |                                            |
    | nothing at all                              | unknown                                    |

    A standing says what the last pass came to, so input that arrives after it (an approval for a
    blocked workflow) shows once a worker takes the pass it wakes (running; with no worker up, the
    status stays blocked, though the input is recorded and the pass queued): the status is never
    ahead of the store, and never wrong about a failure.
    """
    standing = look.standing
    at = None if standing is None else standing.at
    if look.claimed:
        return Status(workflow, "running", at=at)
    if standing is None:
        return Status(workflow, "queued" if look.known else "unknown")
    stated = Status.of(standing)
    if stated.state == "sleeping" and stated.until is not None and stated.until <= now:
        return Status(workflow, "queued", failure=stated.failure, at=at)
    return stated


async def status(checkpointer: Checkpointer, workflow: str) -> Status:
    """`workflow`'s status, from one look at the store (`Ledger.look`)."""
    check_workflow(workflow)
    return derive(workflow, await ledger(checkpointer).look(workflow), utcnow())


async def listing(
    checkpointer: Checkpointer,
    *,
    state: str | None = None,
    prefix: str | None = None,
    limit: int = 100,
    after: str | None = None,
) -> Page:
    """Up to `limit` workflows in id order past `after`, by stored state (`Status.of`)."""
    check_state(state)
    check_page(prefix, limit, after)
    found = await ledger(checkpointer).standings(state, prefix, limit, after)
    statuses = [Status.of(standing) for standing in found]
    return Page(statuses, statuses[-1].workflow if len(statuses) == limit else None)


#: How long a retry's own claim lasts if the caller dies holding it: a retry is two writes.
RETRY_HOLD = timedelta(seconds=10)


def pending(records: Mapping[str, object]) -> bool:
    """Whether the last thing recorded is an explicit retry: no pass has recorded anything
    since, so (unless a pass has ended since: `_unsettled`) the wakeup it asked for may not
    have come: the caller may have died, or lost the reply."""
    keys = list(records)
    return bool(keys) and keys[-1].startswith(RETRY)


async def _unsettled(keeper: Ledger, workflow: str) -> bool:
    """Whether no pass has ended since a recorded retry: the standing is the retry's (queued),
    or still the failure's (the retry was cut off before it wrote queued), or missing."""
    standing = (await keeper.look(workflow)).standing
    return standing is None or standing.state in ("queued", "failed", "cancelled")


async def retry(
    checkpointer: Checkpointer,
    scheduler: Scheduler,
    workflow: str,
    *,
    cancelled: bool = False,
    priority: int = 0,
    limit: Limit | None = None,
) -> bool:
    """Run a failed workflow again from its last recorded step: record a retry (which starts every
    attempt count again, and opens a new epoch whose ending is yet to be written), mark it queued
    and make it ready. True too when a retry is recorded
    and no pass has ended since (it stands queued, or still failed if the retry was cut off
    before writing queued), finishing it: so a caller whose retry failed halfway (its store cut
    off after the record, before the wakeup) just asks again. False, changing nothing, if it has
    not failed; `Contended` if a live pass holds it. A cancelled workflow is run again only if
    asked (`cancelled=True`), from its last recorded step, as a failed one is. Its wakeup is a
    new one, of `priority` under `limit` (the failed pass's are not kept)."""
    check_workflow(workflow)
    check_priority(priority)
    check_limit(limit)
    keeper = ledger(checkpointer)
    holder = await claimed(checkpointer, workflow, alive=RETRY_HOLD)
    try:
        records = holder.records
        if records is None:
            records = await checkpointer.load(workflow)
        ending = ended(records)
        revived = cancelled and ending is not None and ending.state == "cancelled"
        if failed(records) is not None or revived:
            key = next_key(records, RETRY)
            await checkpointer.record(holder, key, {"at": utcnow().isoformat()})
        elif not pending(records) or not await _unsettled(keeper, workflow):
            return False
        if not await keeper.settle(holder, "queued", {}):
            raise Contended(workflow)
    finally:
        await checkpointer.release(holder)
    await make_ready(scheduler, workflow, priority, limit)
    return True


@runtime_checkable
class Inspectable(Protocol):
    """A `Durable` that answers `status`, `list` and `retry` (every one this package ships)."""

    async def status(self, workflow: str) -> Status: ...

    async def list(
        self,
        *,
        state: str | None = None,
        prefix: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> Page: ...

    async def retry(
        self,
        workflow: str,
        *,
        cancelled: bool = False,
        priority: int = 0,
        limit: Limit | None = None,
    ) -> bool: ...

    async def cancel(self, workflow: str) -> bool: ...

    async def start(
        self,
        body: str,
        value: object,
        *,
        workflow: str,
        priority: int = 0,
        limit: Limit | None = None,
    ) -> bool: ...

    async def result(self, workflow: str, *, within: timedelta) -> object: ...


class Inspected:
    """`status`, `list` and `retry` for a `Durable`, over its `checkpointer` and `scheduler`
    (every `Durable` this package ships has them)."""

    __slots__ = ()

    @property
    def checkpointer(self) -> Checkpointer:
        raise NotImplementedError

    @property
    def scheduler(self) -> Scheduler:
        raise NotImplementedError

    async def status(self, workflow: str) -> Status:
        """What `workflow` is doing now, from the store (`durability.status`)."""
        return await status(self.checkpointer, workflow)

    async def list(
        self,
        *,
        state: str | None = None,
        prefix: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> Page:
        """A page of workflows by stored state, in id order; pass the page's `after` back for
        the next one."""
        return await listing(
            self.checkpointer, state=state, prefix=prefix, limit=limit, after=after
        )

    async def retry(
        self,
        workflow: str,
        *,
        cancelled: bool = False,
        priority: int = 0,
        limit: Limit | None = None,
    ) -> bool:
        """Run a failed workflow again from its last recorded step (False if it has not
        failed); a cancelled one too, if `cancelled` is True; its wakeup of `priority` under
        `limit`."""
        return await retry(
            self.checkpointer,
            self.scheduler,
            workflow,
            cancelled=cancelled,
            priority=priority,
            limit=limit,
        )

    async def start(
        self,
        body: str,
        value: object,
        *,
        workflow: str,
        priority: int = 0,
        limit: Limit | None = None,
    ) -> bool:
        """Start `workflow` as the body named `body` with input `value` (`durability.bodies`),
        its wakeup of `priority` under `limit`: False if it was started before as that body;
        `ValueError` if as another."""
        durable = cast(Durable, self)
        return await start(durable, body, value, workflow, priority=priority, limit=limit)

    async def cancel(self, workflow: str) -> bool:
        """Cancel `workflow` (`durability.endings.cancel`): False if it had ended already."""
        return await cancel(cast(Durable, self), workflow)

    async def result(self, workflow: str, *, within: timedelta) -> object:
        """What `workflow` completed with, waiting up to `within` for its ending
        (`durability.endings.result`)."""
        return await result(self.checkpointer, workflow, within)

    @property
    def schedules(self) -> Schedules:
        """The schedules kept in this store (`durability.schedules.Schedules`)."""
        from durability.schedules.handle import Schedules

        return Schedules(cast(Durable, self))
