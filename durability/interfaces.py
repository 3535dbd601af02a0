"""The contracts every store and every runner talks through.

A workflow's state has two halves held by two interfaces: the `Checkpointer` holds what it has
recorded and who may write next (a claim with a fencing token), the `Scheduler` holds its right
to run (a queue of wakeups). `Durable` is the pair plus the moves that must cross both.

The protocols alone live here. What they carry is in `durability.values`, what they raise in
`durability.signals`, and the checks every store makes of its input in `durability.checks`;
their names are importable from here too, as they always were.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from durability.checks import (
    ENGINE,
    INBOX,
    INBOX_WIDTH,
    MAX_DURATION,
    MAX_NAME,
    MAX_PAGE,
    check_key,
    check_page,
    check_recorded_key,
    check_state,
    check_workflow,
    detail_text,
    inbox_key,
    positive,
    to_ms,
)
from durability.signals import Contended, Fenced, Interruption, NotMigrated
from durability.values import (
    STATES,
    Backlog,
    Delivery,
    Effect,
    Entry,
    Footprint,
    Limit,
    Look,
    Pass,
    Reclaimed,
    Recorded,
    Standing,
    Taken,
    Written,
)

__all__ = [
    # the protocols, and the one helper over them
    "Bell",
    "Checkpointer",
    "Concluding",
    "Durable",
    "FinishingEnded",
    "Ledger",
    "Measured",
    "Retaining",
    "Scheduler",
    "Trimmed",
    "Settling",
    "SettlingRelease",
    "Tallied",
    "TakingMany",
    "Waiting",
    "Watching",
    "claimed",
    # durability.values
    "STATES",
    "Backlog",
    "Delivery",
    "Effect",
    "Entry",
    "Footprint",
    "Limit",
    "Look",
    "Pass",
    "Recorded",
    "Standing",
    "Taken",
    "Written",
    # durability.signals
    "Contended",
    "Fenced",
    "Interruption",
    "NotMigrated",
    # durability.checks
    "ENGINE",
    "INBOX",
    "INBOX_WIDTH",
    "MAX_DURATION",
    "MAX_NAME",
    "MAX_PAGE",
    "check_key",
    "check_page",
    "check_recorded_key",
    "check_state",
    "check_workflow",
    "detail_text",
    "inbox_key",
    "positive",
    "to_ms",
]


@runtime_checkable
class Checkpointer(Protocol):
    """A workflow's records, and the claim that says who may add to them.

    Records are first-writer-wins: a key, once written, keeps its value forever (until
    `discard`). Values go through the store's codec and must survive it unchanged.
    """

    async def claim(self, workflow: str, budget: timedelta, alive: timedelta) -> Pass | None:
        """Take the workflow if no live claim holds it; `None` if one does.

        The claim lives `alive` past each sign of life and never past `budget` from now.
        """
        ...

    async def load(self, workflow: str) -> dict[str, object]:
        """Every record, in the order each key was first recorded."""
        ...

    async def history(self, workflow: str) -> list[Written]:
        """Every record with the store's time of writing it, in first-recorded order."""
        ...

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        """Write `key` under the claim; raise `Fenced` (writing nothing) if it is not live.

        A write is a sign of life: it keeps the claim `holder.alive` longer, within budget.
        """
        ...

    async def transact(self, holder: Pass, key: str, effect: Effect) -> Recorded:
        """Perform `effect` and record its result as `key` in one atomic step.

        If `key` is already recorded the effect is not performed. A fenced pass performs
        neither the effect nor the record. Under a live claim it is a sign of life, as a
        `record` is, whether or not `key` was recorded before.
        """
        ...

    async def supply(self, workflow: str, key: str, value: object) -> Recorded:
        """Write `key` from outside any pass (first writer wins)."""
        ...

    async def append(self, workflow: str, value: object) -> Entry:
        """Add an inbox entry under a fresh store-minted key."""
        ...

    async def extend(self, holder: Pass, budget: timedelta, alive: timedelta) -> Pass:
        """Stretch the claim: its budget to at least `budget` from now, its liveness to at
        least `alive` from now. Never shortens either. Raises `Fenced` if the claim is gone."""
        ...

    async def renew(self, holder: Pass, alive: timedelta) -> None:
        """Keep the claim alive for `alive` more, but never past its budget.

        Raises `Fenced` if the claim is superseded, lapsed, or its budget is spent.
        """
        ...

    async def discard(self, workflow: str) -> int:
        """Forget every record; return how many went. Raises the fence so a pass still
        running is refused at its next write, and keeps the token rising for later claims."""
        ...

    async def release(self, holder: Pass) -> None:
        """End the claim so the next claim need not wait. A no-op if it was superseded."""
        ...


@runtime_checkable
class Retaining(Protocol):
    """A checkpointer that forgets idle workflows (a Redis TTL) and so must be told when one is
    suspended: its records must outlive `until` by the store's retention."""

    async def hold(self, workflow: str, until: datetime) -> None: ...


@runtime_checkable
class Concluding(Protocol):
    """A checkpointer that can end a workflow from outside any pass (every one here): what
    `durability.endings.cancel` needs."""

    async def conclude(self, workflow: str, key: str, value: object) -> Recorded:
        """Write `key` (an ending; an engine key is allowed) from outside any pass, first
        writer wins, and if this write won, raise the fence in the same atomic step, keeping
        every record: a pass still running is refused at its next write or renewal, and the
        next claim is stamped above every token handed out before."""
        ...


class Bell(Protocol):
    """A wakeup for one workflow's ending (`Watching.watch`)."""

    async def wait(self, within: timedelta) -> bool:
        """Wait until the workflow's ending may have been written (True) or `within` passed
        (False). Raises if the store's channel is down (the caller then looks instead), or
        says True at least every `endings.LOOK` while it is (a channel that comes back)."""
        ...


@runtime_checkable
class Watching(Protocol):
    """A checkpointer that rings whoever watches a workflow when its ending is written, so
    `result` waits without polling (every one here)."""

    def watch(self, workflow: str) -> AbstractAsyncContextManager[Bell]:
        """Listen for `workflow`'s ending from the moment the block is entered."""
        ...


@runtime_checkable
class Ledger(Protocol):
    """A checkpointer that also holds where each workflow's last pass left it, indexed by state,
    so `status` is one look and a listing by state is an index read (every store here is one).
    """

    async def settle(self, holder: Pass, state: str, detail: Mapping[str, object]) -> bool:
        """Write the workflow's standing under the pass's claim; False (writing nothing) if a
        pass of a newer claim has settled it, or the workflow was discarded since the claim
        was taken (the SQL and memory stores refuse any claim but the current one; Redis keeps
        the standing on the namespace's slot, apart from the claim, and compares tokens). A
        lapsed claim may still settle: what its pass came to is still true of the checkpoint.
        """
        ...

    async def look(self, workflow: str) -> Look:
        """The workflow's standing, whether a live claim holds it, whether it has records."""
        ...

    async def standings(
        self, state: str | None, prefix: str | None, limit: int, after: str | None
    ) -> list[Standing]:
        """Up to `limit` standings in workflow id order (by code point), past `after`, whose
        ids start with `prefix` and, if `state` is given, in that state. A page read while
        others write never repeats a workflow or skips one that stayed in the state."""
        ...


@runtime_checkable
class Tallied(Protocol):
    """A `Ledger` that counts its standings by state without reading them (every one here)."""

    async def tally(self, prefix: str | None = None) -> dict[str, int]:
        """How many workflows stand in each of `STATES` (a state none stands in is left out),
        of those whose ids start with `prefix`: an index count, not a read of every standing."""
        ...


@runtime_checkable
class SettlingRelease(Protocol):
    """A `Ledger` that writes a standing and releases the claim in one call (the memory store):
    `SplitDurable.finish_settled` uses it rather than `settle` then `release`."""

    async def settle_release(
        self, holder: Pass, state: str, detail: Mapping[str, object]
    ) -> bool:
        """`settle(holder, state, detail)` then `release(holder)`; what `settle` returned."""
        ...


@runtime_checkable
class Settling(Protocol):
    """A `Durable` that can end a pass and write its standing in the same step (one script,
    one statement, one transaction): the worker's end of every pass, one round trip rather
    than two. Every `Durable` this package ships over a `Ledger` is one."""

    async def finish_settled(
        self, holder: Pass, delivery: Delivery, state: str, detail: Mapping[str, object]
    ) -> bool:
        """`Ledger.settle(holder, state, detail)` and then `Durable.finish(holder, delivery)`,
        atomically where the store can (else in that order). Returns what `settle` returns:
        False if the standing was refused (a newer claim's pass, or a discard, has it); the
        pass is finished either way."""
        ...


@runtime_checkable
class FinishingEnded(Protocol):
    """A `Durable` that writes a pass's ending with its finish, in one step (the worker's end
    of a completed pass): a workflow that ends costs no more round trips than a pass that
    sleeps."""

    async def finish_ended(
        self,
        holder: Pass,
        delivery: Delivery,
        key: str,
        value: object,
        state: str,
        detail: Mapping[str, object],
    ) -> bool:
        """Record the ending `key` as `value` under the claim and, only if the claim is still
        the pass's, write the standing, release, and answer for the delivery. False (recording
        nothing, standing nothing) if it is not (a cancel's fence, a newer claim, or, where the
        store checks it, a lapse); the delivery may have been answered then, and the caller
        answers or hands it back (either is safe after an answer). An ending already recorded
        is kept (first writer wins)."""
        ...


@runtime_checkable
class TakingMany(Protocol):
    """A `Durable` that takes several ready workflows in one move (one statement): a worker
    reads it with one reader that asks for as many as it has free slots, rather than one
    reader a slot whose takes the store gathers, which costs a task, a wait and a future a
    delivery."""

    async def take_up_to(
        self, room: Callable[[], int], within: timedelta, budget: timedelta, alive: timedelta
    ) -> list[Taken]:
        """`Durable.take` for up to `room()` workflows at once (asked before each read, so a
        read that follows a wait takes as many as are free by then): every one taken and
        claimed as `take` does it, in one step. Empty if nothing came within `within`. A
        batch never holds more of one `Limit` than it has room for."""
        ...


@runtime_checkable
class Scheduler(Protocol):
    """The queue of wakeups: a workflow's right to run."""

    #: How long a delivery stays with its worker without a sign of life.
    lease: timedelta

    async def prepare(self) -> None:
        """Create whatever the queue needs before the first read (idempotent)."""
        ...

    async def make_ready(
        self, workflow: str, *, priority: int = 0, limit: Limit | None = None
    ) -> None:
        """Ask for a pass of `workflow` as soon as possible. Never lost, even mid-pass.

        `priority` (`checks.check_priority`): strict, higher first; equal priorities go in the
        order they became ready, and nothing ages (a low one waits while higher ones come).
        A wakeup already pending for `workflow` merges with this one: it keeps the higher
        priority of the two and its own limit (this one's if it had none). `limit`: the
        delivery counts against it while held (`Limit`); over it, the wakeup stays queued,
        without a poll, while wakeups behind it are taken, and is taken once there is room
        (a holder's answer or lapse, a rate window's room). Both are checked before any I/O;
        a caller passes them only when not default, so an older scheduler still works.
        """
        ...

    async def next_ready(self, within: timedelta) -> Delivery | None:
        """Take one ready workflow (the highest priority whose limit has room), waiting at most
        `within`; `None` if none came. The delivery carries the priority and limit kept."""
        ...

    async def done(self, delivery: Delivery) -> None:
        """Answer for a delivery. A wakeup that arrived after it was taken survives."""
        ...

    async def wake_at(self, delivery: Delivery, when: datetime) -> bool:
        """Schedule another pass of the delivery's workflow at `when`, with the priority and
        limit the store kept for the delivery (a workflow that sleeps comes back as it went).

        Declines (returns False, schedules nothing) if the workflow was cancelled meanwhile.
        """
        ...

    async def wake_due(self, now: datetime | None = None) -> datetime | None:
        """Make every wakeup due by `now` ready; return the earliest one still sleeping."""
        ...

    async def reclaiming(self, idle: timedelta) -> Reclaimed:
        """Take over one delivery whose worker showed no sign of life for `idle`, if any, and
        in the same call say how long until the earliest delivery still held goes `idle`:
        nothing can be taken over before then, and a delivery handed out after this call no
        sooner than `idle` from now. A store where a lapsed delivery is simply visible again
        to `next_ready` (a visibility score) has nothing to take over and answers
        `Reclaimed(None, None)` without a round trip."""
        ...

    async def extend(self, delivery: Delivery, within: timedelta) -> Delivery | None:
        """Keep the delivery for `within` more; return it (its receipt may change), or `None`
        if it is no longer this worker's to keep (cancelled, or superseded)."""
        ...

    async def cancel(self, workflow: str) -> int:
        """Remove every pending wakeup of `workflow`; return how many went."""
        ...


@runtime_checkable
class Trimmed(Protocol):
    """A scheduler whose queue keeps answered wakeups until trimmed (the Redis stream): a worker
    reading it trims it (`work`'s `trim`) every `trim_every` while it answers deliveries, and
    not at all while `trim_every` is None."""

    trim_every: timedelta | None

    async def trim(self) -> int:
        """Remove the entries every reader has answered for; return how many went."""
        ...


@runtime_checkable
class Measured(Protocol):
    """A scheduler that can say how big its queue is (every scheduler this package ships):
    what grows with wakeups, and what a trimmer or a visibility score keeps bounded."""

    async def footprint(self) -> Footprint:
        """The queue's size now, read from the store in one round trip where it can."""
        ...


@runtime_checkable
class Waiting(Protocol):
    """A scheduler that can say how many workflows are ready and not yet taken, and how long
    the oldest of them has been: a queue's depth and its worst wait, for an operator."""

    async def backlog(self) -> Backlog:
        """The ready workflows now, read in one round trip."""
        ...


@runtime_checkable
class Durable(Protocol):
    """A checkpointer and a scheduler, plus the moves that must cross both."""

    @property
    def checkpointer(self) -> Checkpointer: ...

    @property
    def scheduler(self) -> Scheduler: ...

    async def arrive(
        self,
        workflow: str,
        key: str,
        value: object,
        *,
        priority: int = 0,
        limit: Limit | None = None,
    ) -> Recorded:
        """Supply `key` then make the workflow ready (`Scheduler.make_ready`'s `priority` and
        `limit`, checked before any I/O)."""
        ...

    async def deliver(
        self, workflow: str, value: object, *, priority: int = 0, limit: Limit | None = None
    ) -> Entry:
        """Append an inbox entry then make the workflow ready (with `priority` and `limit`, as
        `arrive`)."""
        ...

    async def delete(self, workflow: str) -> int:
        """Cancel every wakeup, then discard the records; return how many records went."""
        ...

    async def take(self, within: timedelta, budget: timedelta, alive: timedelta) -> Taken | None:
        """Take one ready workflow (waiting at most `within`) and claim it: `next_ready` then
        `claim`, in one step where the store can. `None` if nothing came; a `Taken` whose
        `holder` is `None` if a live pass holds the workflow."""
        ...

    async def finish(self, holder: Pass, delivery: Delivery) -> None:
        """End a pass: release its claim, then answer for its delivery (in that order, so the
        next wakeup never finds the claim still held). One step where the store can."""
        ...


async def claimed(
    checkpointer: Checkpointer,
    workflow: str,
    budget: timedelta = timedelta(minutes=5),
    alive: timedelta = timedelta(seconds=30),
) -> Pass:
    """Claim `workflow` or raise `Contended`: for code that drives a pass by hand."""
    holder = await checkpointer.claim(workflow, budget, alive)
    if holder is None:
        raise Contended(workflow)
    return holder
