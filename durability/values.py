"""The values stores and runners hand each other: frozen, compared by value.

A claim (`Pass`), what a write left (`Recorded`, `Written`, `Entry`), a wakeup (`Delivery`,
`Taken`), a queue's size (`Footprint`), where a workflow stands (`Standing`, `Look`, in one
of `STATES`), and the base of every store's own kind of effect (`Effect`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

__all__ = [
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
]


@dataclass(frozen=True, slots=True)
class Pass:
    """The right to write to one workflow's checkpoint, as long as the claim lasts.

    `token` is the fencing token: it rises on every claim of the workflow (a hybrid logical
    clock, `max(now_ms, previous + 1)`), so a write carrying an older token is refused.
    `alive` is how long one sign of life keeps the claim (a write is one); `budget_ends` is the
    claimer's estimate of the deadline renewal cannot lift, used only to skip needless extends.
    `records` is the checkpoint as the claim found it, for a store that can read it in the same
    round trip as the claim (`None` if it did not): a pass then starts without a second trip.
    `ordinals` is, beside `records`, the ordinal each record the workflow stamped carries
    (`durability.codec.Stamped`); `None` if the store did not read stamps.
    """

    workflow: str
    token: int
    alive: timedelta
    budget_ends: datetime
    records: Mapping[str, object] | None = field(default=None, repr=False, compare=False)
    ordinals: Mapping[str, int | None] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Recorded:
    """What a key holds after a write: the winning value and whether this write was it."""

    value: object
    first: bool


@dataclass(frozen=True, slots=True)
class Written:
    """One record with the store's own time of writing it."""

    key: str
    value: object
    at: datetime


@dataclass(frozen=True, slots=True)
class Entry:
    """One inbox entry: a store-minted key (sorting in append order) and its value."""

    key: str
    value: object


@dataclass(frozen=True, slots=True)
class Limit:
    """A bound shared by every wakeup that names the same `key`, kept by the store where the
    take happens, so it holds across all workers and processes.

    With `per` None it bounds concurrency: at most `at_most` deliveries of the key are held
    (taken, lease live) at once; a crashed holder's slot comes back when its lease lapses.
    With `per` a duration it bounds the rate: at most `at_most` deliveries of the key are
    taken in any window of `per`. A wakeup over its limit stays queued (not lost, not
    polled for) and is taken when the limit has room. Checked by `checks.check_limit`."""

    key: str
    at_most: int
    per: timedelta | None = None


@dataclass(frozen=True, slots=True)
class Delivery:
    """One wakeup handed to one worker. `receipt` is the scheduler's proof of which wakeup it
    is (a stream entry id, a visibility score); `done`, `wake_at` and `extend` compare it.

    `lapsed` says the store handed this wakeup out before and its holder's lease ran out
    unanswered: a takeover, whose claim a last write may keep a moment longer, as opposed to a
    fresh wakeup, which a live pass may hold for as long as it runs. A hint for the worker,
    never needed for correctness (and not part of the value's equality: the receipt is)."""

    workflow: str
    receipt: str
    lapsed: bool = field(default=False, compare=False)
    #: The wakeup's priority and limit (`Scheduler.make_ready`), as the store kept them: a
    #: `wake_at` of this delivery keeps both, so a workflow that sleeps comes back as it went.
    priority: int = field(default=0, compare=False)
    limit: Limit | None = field(default=None, compare=False)


def held_key(delivery: Delivery) -> str | None:
    """The key of the concurrency slot `delivery` holds (freed by its done, wake_at or finish,
    stretched by its extend), or None: no limit, or a rate limit (nothing to give back)."""
    limit = delivery.limit
    return limit.key if limit is not None and limit.per is None else None


@dataclass(frozen=True, slots=True)
class Taken:
    """A delivery and, if the workflow was free, the claim taken on it in the same move."""

    delivery: Delivery
    holder: Pass | None


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """One look for abandoned deliveries (`Scheduler.reclaiming`): the delivery it took over,
    if any, and how long until the earliest delivery still held could be taken over, measured
    by the store when it looked (`None`: nothing is held that a later look could take, until
    something new is handed out). A worker sleeps until then instead of looking every tick."""

    delivery: Delivery | None
    lapses_in: timedelta | None


@dataclass(frozen=True, slots=True)
class Footprint:
    """How big a queue is right now: its entries by part (a stream's entries, a sorted set's
    members, rows) and, where the store can say, the bytes they take."""

    parts: Mapping[str, int]
    bytes: int | None = None

    @property
    def entries(self) -> int:
        return sum(self.parts.values())


@dataclass(frozen=True, slots=True)
class Backlog:
    """The workflows ready to run and not yet taken: how many, and how long ago the oldest of
    them became ready (`None` when there is none, or the store cannot say cheaply)."""

    ready: int
    oldest: timedelta | None = None


#: The states a pass can leave a workflow in, as a `Ledger` holds them. "queued" is written by
#: `durable.retry`; the others by the worker as each pass ends. (A running workflow is one a
#: live claim holds, and a status says so; it is never a stored state.)
STATES = ("queued", "sleeping", "blocked", "failed", "completed", "cancelled")


@dataclass(frozen=True, slots=True)
class Standing:
    """Where the last pass (or an explicit retry) left a workflow, as the store holds it:
    `state` (one of `STATES`), its JSON `detail` (`until`; `waiting` and `listening`; the
    `failure` record), and the store's time of writing it."""

    workflow: str
    state: str
    detail: Mapping[str, object]
    at: datetime


@dataclass(frozen=True, slots=True)
class Look:
    """One workflow as the store sees it now: its standing, whether a live claim holds it, and
    whether it has any records at all (a workflow supplied and never yet run has no standing)."""

    standing: Standing | None
    claimed: bool
    known: bool


class Effect:
    """Something a store can do itself in the same atomic step as recording its result.

    Each store defines its own kind (`MemoryEffect`, `LuaEffect`, `PostgresEffect`, ...) and refuses
    the others with a `TypeError`.
    """

    __slots__ = ()
