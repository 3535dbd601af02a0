"""The contracts every store and every runner talks through.

A workflow's state has two halves held by two interfaces: the `Checkpointer` holds what it has
recorded and who may write next (a claim with a fencing token), the `Scheduler` holds its right
to run (a queue of wakeups). `Durable` is the pair plus the moves that must cross both.

Values here are frozen; control flow that must not be swallowed by `except Exception`
(`Fenced`, `Contended`) descends from `BaseException`, like `asyncio.CancelledError`.

Every store refuses the same bad input, with a `ValueError` or `TypeError`, before any I/O:

- a workflow id is a `str` of 1 to `MAX_NAME` (256) characters, valid Unicode (no lone
  surrogate), without NUL, `{` or `}` (`check_workflow`);
- a step key is the same with braces allowed, not starting with `INBOX` (`check_key`);
- a duration is a `timedelta` above zero and at most `MAX_DURATION`, a century (`positive`).

The bound is one for every store, so an id that works on one works on all: ids are part of
Redis key names (braces would move the cluster hash tag), ids and keys sit in SQL primary keys
(256 characters is at most 1 KiB of UTF-8, inside every index's limit) and SQL text cannot
hold NUL. Values are the codec's to refuse (`durability.codec`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

#: Inbox entries are ordinary records whose keys the store mints under this prefix, fixed-width
#: so that lexical order is append order. Step keys may not start with it.
INBOX = "inbox:"
#: Width of the decimal sequence number in an inbox key: `inbox:00000000000000000042`.
INBOX_WIDTH = 20
#: Records the engine itself writes under a pass's claim (a failed attempt, an explicit retry:
#: `durability.failures`) live under this prefix. Step keys and supplied keys may not start
#: with it, so nothing from outside can forge or shadow one; only `record` takes them.
ENGINE = "engine:"


#: The longest workflow id or step key, in characters (see the module docstring).
MAX_NAME = 256
#: The longest duration any timing may be: a century. Far past any real budget, lease or
#: sleep, and far enough inside every store's clock arithmetic (datetime's year 9999, Lua's
#: 14 significant digits of milliseconds) that `now + duration` never overflows.
MAX_DURATION = timedelta(days=36_525)


def positive(name: str, value: timedelta) -> timedelta:
    """Return `value` if it is a positive duration of at most `MAX_DURATION`, else raise a
    `ValueError` (a `TypeError` if it is not a `timedelta`) naming it.

    None of the timings in this library has a meaningful zero, and a zero is how a duration
    read from an unset setting usually arrives, so it is refused where it enters. So is an
    absurd one: refused here, it never reaches a store that would write with it and then fail.
    """
    if not isinstance(value, timedelta):
        raise TypeError(f"{name} must be a timedelta, not {type(value).__name__}")
    if value <= timedelta(0):
        raise ValueError(f"{name} must be a positive duration, got {value!r}")
    if value > MAX_DURATION:
        raise ValueError(
            f"{name} must be at most MAX_DURATION ({MAX_DURATION.days} days), got {value!r}"
        )
    return value


def _check_name(what: str, name: str) -> None:
    """The checks ids and keys share; O(length), and O(1) for the length and ASCII tests."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, not {type(name).__name__}")
    if not name:
        raise ValueError(f"{what} must not be empty")
    if len(name) > MAX_NAME:  # before any scan, so a huge string costs nothing more
        raise ValueError(f"{what} is {len(name)} characters; the bound is {MAX_NAME}")
    if "\x00" in name:
        raise ValueError(f"{what} {name!r} holds a NUL character, which SQL text cannot hold")
    if not name.isascii():
        try:
            name.encode("utf-8")
        except UnicodeEncodeError as error:
            # A lone surrogate: what os.fsdecode makes of a file name that is not UTF-8.
            raise ValueError(
                f"{what} {name!r} is not valid Unicode text ({error.reason} at position"
                f" {error.start}), so no store can hold it"
            ) from None


#: How many names each check remembers as good (`_remembered`) before it starts afresh.
_REMEMBERED = 4096


def _remembered(check: Callable[[str], str]) -> Callable[[str], str]:
    """`check`, remembering the names it passed: a pass checks its workflow's id at every call
    it makes and its step keys at each write, and a `str`'s validity never changes, so each is
    scanned once. Emptied when full, so it stays small."""
    good: set[str] = set()

    @functools.wraps(check)
    def checked(name: str) -> str:
        if type(name) is str and name in good:
            return name
        check(name)
        if len(good) >= _REMEMBERED:
            good.clear()
        good.add(name)
        return name

    return checked


@_remembered
def check_workflow(workflow: str) -> str:
    """Return `workflow` if every store can hold it as an id (see the module docstring)."""
    _check_name("workflow id", workflow)
    if "{" in workflow or "}" in workflow:
        raise ValueError(
            f"workflow id {workflow!r} contains a brace; Redis would read it as a hash tag"
        )
    return workflow


@_remembered
def check_key(key: str) -> str:
    """Return `key` if every store can hold it as a step key: the id rules without the brace
    rule (keys are never part of a Redis key name), outside the store-owned inbox key space and
    the engine's own (`ENGINE`)."""
    check_recorded_key(key)
    if key.startswith(ENGINE):
        raise ValueError(f"step key {key!r} lies in the engine's key space ({ENGINE!r}...)")
    return key


@_remembered
def check_recorded_key(key: str) -> str:
    """`check_key` for `Checkpointer.record`, which alone may also write the engine's keys
    (a pass records its own failure under its claim, fenced like any step)."""
    _check_name("step key", key)
    if key.startswith(INBOX):
        raise ValueError(f"step key {key!r} lies in the inbox key space ({INBOX!r}...)")
    return key


def inbox_key(sequence: int) -> str:
    """The key of the `sequence`-th inbox entry (1-based); lexical order is numeric order."""
    if sequence < 1 or sequence >= 10**INBOX_WIDTH:
        raise ValueError(f"inbox sequence out of range: {sequence}")
    return f"{INBOX}{sequence:0{INBOX_WIDTH}d}"


def to_ms(value: timedelta) -> int:
    """A duration in whole milliseconds, rounded up so a positive duration never becomes 0."""
    micros = value // timedelta(microseconds=1)
    return -(-micros // 1000)


# --- values -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pass:
    """The right to write to one workflow's checkpoint, as long as the claim lasts.

    `token` is the fencing token: it rises on every claim of the workflow (a hybrid logical
    clock, `max(now_ms, previous + 1)`), so a write carrying an older token is refused.
    `alive` is how long one sign of life keeps the claim (a write is one); `budget_ends` is the
    claimer's estimate of the deadline renewal cannot lift, used only to skip needless extends.
    `records` is the checkpoint as the claim found it, for a store that can read it in the same
    round trip as the claim (`None` if it did not): a pass then starts without a second trip.
    """

    workflow: str
    token: int
    alive: timedelta
    budget_ends: datetime
    records: Mapping[str, object] | None = field(default=None, repr=False, compare=False)


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
class Delivery:
    """One wakeup handed to one worker. `receipt` is the scheduler's proof of which wakeup it
    is (a stream entry id, a visibility score); `done`, `wake_at` and `extend` compare it."""

    workflow: str
    receipt: str


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


#: The states a pass can leave a workflow in, as a `Ledger` holds them. "queued" is written by
#: `durable.retry`; the others by the worker as each pass ends. (A running workflow is one a
#: live claim holds, and a status says so; it is never a stored state.)
STATES = ("queued", "sleeping", "blocked", "failed", "completed")
#: The most workflows one `Ledger.standings` call returns.
MAX_PAGE = 1000


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


def detail_text(detail: Mapping[str, object]) -> str:
    """A standing's `detail` as the JSON text a store keeps (`TypeError` for what JSON cannot
    hold). A completed pass has none: its "{}" costs no encoding."""
    return json.dumps(dict(detail)) if detail else "{}"


def check_state(state: str | None) -> str | None:
    """Return `state` if it is `None` or one of `STATES`; refuse anything else by name."""
    if state is not None and state not in STATES:
        raise ValueError(f"state must be one of {', '.join(STATES)}; got {state!r}")
    return state


def check_page(prefix: str | None, limit: int, after: str | None) -> None:
    """Refuse a listing's bad prefix (not a str, or longer than an id), limit (not a count from
    1 to `MAX_PAGE`) or cursor (not a workflow id), before any I/O."""
    if prefix is not None:
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
        if prefix:
            check_workflow(prefix)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, not {type(limit).__name__}")
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be from 1 to {MAX_PAGE}, got {limit}")
    if after is not None:
        check_workflow(after)


class Effect:
    """Something a store can do itself in the same atomic step as recording its result.

    Each store defines its own kind (`MemoryEffect`, `LuaEffect`, `SqlEffect`, ...) and refuses
    the others with a `TypeError`.
    """

    __slots__ = ()


# --- signals ------------------------------------------------------------------------------


class Interruption(BaseException):
    """A pass must stop for a reason that is not a failure of its work.

    Descends from `BaseException` so that `except Exception` in a workflow, or a saga's
    rollback net, never absorbs it.
    """


class Fenced(Interruption):
    """The pass no longer holds its claim: a newer claim exists, or the claim lapsed."""

    def __init__(self, workflow: str, token: int, reason: str = "claim superseded or lapsed"):
        super().__init__(f"{workflow!r} (token {token}): {reason}")
        self.workflow = workflow
        self.token = token


class Contended(Interruption):
    """Somebody else holds a live claim on the workflow."""

    def __init__(self, workflow: str):
        super().__init__(f"{workflow!r} is claimed by a live pass")
        self.workflow = workflow


class NotMigrated(RuntimeError):
    """A SQL store was used before `migrate` created its tables."""


# --- protocols ----------------------------------------------------------------------------


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
        neither the effect nor the record.
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
class Scheduler(Protocol):
    """The queue of wakeups: a workflow's right to run."""

    #: How long a delivery stays with its worker without a sign of life.
    lease: timedelta

    async def prepare(self) -> None:
        """Create whatever the queue needs before the first read (idempotent)."""
        ...

    async def make_ready(self, workflow: str) -> None:
        """Ask for a pass of `workflow` as soon as possible. Never lost, even mid-pass."""
        ...

    async def next_ready(self, within: timedelta) -> Delivery | None:
        """Take one ready workflow, waiting at most `within`; `None` if none came."""
        ...

    async def done(self, delivery: Delivery) -> None:
        """Answer for a delivery. A wakeup that arrived after it was taken survives."""
        ...

    async def wake_at(self, delivery: Delivery, when: datetime) -> bool:
        """Schedule another pass of the delivery's workflow at `when`.

        Declines (returns False, schedules nothing) if the workflow was cancelled meanwhile.
        """
        ...

    async def wake_due(self, now: datetime | None = None) -> datetime | None:
        """Make every wakeup due by `now` ready; return the earliest one still sleeping."""
        ...

    async def reclaim(self, idle: timedelta) -> Delivery | None:
        """Take one delivery whose worker showed no sign of life for `idle`, if any."""
        ...

    async def reclaiming(self, idle: timedelta) -> Reclaimed:
        """`reclaim(idle)`, and in the same call how long until the earliest delivery still
        held goes `idle` without a sign of life: nothing can be taken over before then, and a
        delivery handed out after this call no sooner than `idle` from now. A store where a
        lapsed delivery is simply visible again to `next_ready` (a visibility score) has
        nothing to reclaim and answers `Reclaimed(None, None)` without a round trip."""
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
class Durable(Protocol):
    """A checkpointer and a scheduler, plus the moves that must cross both."""

    @property
    def checkpointer(self) -> Checkpointer: ...

    @property
    def scheduler(self) -> Scheduler: ...

    async def arrive(self, workflow: str, key: str, value: object) -> Recorded:
        """Supply `key` then make the workflow ready."""
        ...

    async def deliver(self, workflow: str, value: object) -> Entry:
        """Append an inbox entry then make the workflow ready."""
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
