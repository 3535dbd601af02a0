"""Durability for an ordinary async function: `Run` and `resume`.

A workflow is `async def body(run: Run) -> T`. Each effect lives in a named step; a step that is
already recorded hands back its value instead of running, so resuming a workflow means calling
the body again. The code between steps re-runs on every pass and must be pure.

The decision to keep: a suspension (`sleep`, `awaiting`, `receive`) is an exception that notes
itself on the `Run` before it is raised, because combinators lose exceptions on the way out;
`resume` reports what the `Run` noted, not what happened to propagate. `Suspended` and `resume`
say more.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Generic, TypeVar

from durability.checks import INBOX, check_key, positive
from durability.clock import Clock, utcnow
from durability.codec import Unencodable
from durability.failures import Retry
from durability.faults import patiently
from durability.interfaces import Checkpointer
from durability.lineage import Lineage
from durability.recording import Recorder
from durability.signals import Interruption
from durability.values import Effect, Entry, Pass

T = TypeVar("T")


# --- outcomes: what a pass came to --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Completed(Generic[T]):
    """The body returned: the workflow has nothing left to do."""

    value: T


@dataclass(frozen=True, slots=True)
class Sleeping:
    """The pass stopped on a recorded deadline; wake the workflow at `due`."""

    key: str
    due: datetime


@dataclass(frozen=True, slots=True)
class Blocked:
    """The pass stopped on input only the outside world can give.

    `waiting` holds keys a client answers with `arrive(workflow, key, value)`; `listening` names
    inbox reads that stopped, answered by `deliver(workflow, value)`.
    """

    waiting: frozenset[str] = frozenset()
    listening: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # An empty Blocked would park a workflow that nothing could ever wake.
        if not self.waiting and not self.listening:
            raise ValueError("a Blocked pass must name at least one key it waits or listens on")


Outcome = Completed[T] | Sleeping | Blocked


# --- suspensions: how a pass stops --------------------------------------------------------


class Suspended(BaseException):
    """A step cannot finish in this pass. Not a failure, so not an `Exception`.

    A step that cannot finish now suspends the pass instead of blocking it: `sleep` until a
    recorded deadline, `awaiting` a value someone will `arrive`, `receive` inbox entries
    someone will `deliver`. It is an exception because it has to unwind straight-line code.
    Each one notes itself on its `Run` before it is raised (a sleep before its deadline is even
    written), because combinators lose exceptions on the way out: a TaskGroup cancels the
    siblings, `gather` keeps the first, `wait` keeps none.
    """

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key
        #: The `Run` that raised it (set by the Run), so `resume` can refuse a stray one.
        self.origin: Run | None = None


class ScheduledWakeup(Suspended):
    """`run.sleep` reached a deadline still in the future."""

    def __init__(self, key: str, due: datetime) -> None:
        super().__init__(key)
        self.due = due


class InputNeeded(Suspended):
    """`run.awaiting` or `run.receive` found nothing to go on."""


class Swallowed(RuntimeError):
    """The body returned normally although it reached a suspension its own code caught.

    Reporting that pass as completed would mark a workflow finished while it still waits on
    the world, and nothing would ever wake it again.
    """

    def __init__(self, keys: frozenset[str]) -> None:
        super().__init__(
            f"the workflow returned after catching the suspension of {sorted(keys)}; a"
            " suspension may be reached but not handled (use run.pending for a read that"
            " does not suspend)"
        )
        self.keys = keys


async def _bounded(key: str, fn: Callable[[], object], limit: timedelta) -> object:
    """`fn()` (a coroutine function's awaited, a plain function's run in a thread), or
    `StepTimeout` once it has run `limit`."""
    bound = asyncio.timeout(limit.total_seconds())
    try:
        async with bound:
            if inspect.iscoroutinefunction(fn):
                return await fn()
            result = await asyncio.to_thread(fn)
            if inspect.isawaitable(result):  # a plain function that hands back a coroutine
                result = await result
            return result
    except TimeoutError as expired:
        if not bound.expired():
            raise  # the effect's own timeout (a socket's, say): its failure, not the step's
        raise StepTimeout(key, limit) from expired


class StepTimeout(TimeoutError):
    """A step's effect ran past its `timeout` and was cancelled: a failed attempt."""

    def __init__(self, key: str, timeout: timedelta) -> None:
        super().__init__(f"step {key!r} ran past its timeout of {timeout}")
        self.key = key
        self.timeout = timeout


@dataclass(frozen=True, slots=True)
class StepFailed:
    """A step whose effect raised in this pass, with the retry policy it asked for."""

    key: str
    retry: Retry | None
    error: BaseException


# --- the run ------------------------------------------------------------------------------


#: Told of each step that ran in a pass (not one replayed): its key, when it began (epoch
#: seconds) and what it raised, if it did; called as it ends, after its record landed.
StepHook = Callable[[str, float, BaseException | None], None]


def _timed(
    key: str, produce: Callable[[], Awaitable[object]], hook: StepHook
) -> Callable[[], Awaitable[object]]:
    """`produce`, telling `hook` when it began and how it ended (a step that ran)."""

    async def timed() -> object:
        began = time.time()
        try:
            value = await produce()
        except BaseException as error:
            hook(key, began, error)
            raise
        hook(key, began, None)
        return value

    return timed


#: Types whose values are never awaitable (exact types: a subclass may define `__await__`).
_PLAIN = frozenset({dict, list, str, int, float, bool, type(None)})


def _deadline(value: object) -> datetime:
    if not isinstance(value, str):
        raise TypeError(f"a recorded deadline is ISO-8601 text, found {type(value).__name__}")
    due = datetime.fromisoformat(value)
    return due if due.tzinfo else due.replace(tzinfo=UTC)


class Run(Lineage):
    """One pass's view of one workflow: the records loaded at its start, and the means to
    add to them under its claim."""

    def __init__(
        self,
        holder: Pass,
        checkpointer: Checkpointer,
        records: Mapping[str, object],
        *,
        clock: Clock = utcnow,
        kept: bool = False,
        on_write: Callable[[], None] | None = None,
        on_step: StepHook | None = None,
        ordinals: Mapping[str, int | None] | None = None,
    ) -> None:
        # The records and every write under the claim (at most once a key, tried again
        # through a passing fault, the claim stretched for a long step): recording.py. The
        # order steps were reached in, checked against `ordinals`: determinism.py.
        self._recorder = Recorder(holder, checkpointer, records, clock, kept, on_write, ordinals)
        self._on_step = on_step
        self._clock = clock
        self._sleeps: dict[str, datetime] = {}  # sleeps that raised
        self._noted: dict[str, datetime] = {}  # deadlines being written, not yet read back
        self._waiting: set[str] = set()
        self._listening: set[str] = set()
        self._failed: list[StepFailed] = []  # steps whose effect raised, in order
        #: How this pass starts a child (`child`): the worker sets it to its durable's
        #: `start`, called as `starter(body, value, workflow, parent=..., key=...)`.
        self.starter: Callable[..., Awaitable[object]] | None = None

    @property
    def workflow(self) -> str:
        return self._recorder.holder.workflow

    @property
    def holder(self) -> Pass:
        return self._recorder.holder

    @property
    def records(self) -> Mapping[str, object]:
        """What this pass knows: the checkpoint as loaded, plus this pass's own writes."""
        return self._recorder.records

    async def cancelled(self) -> bool:
        """Whether the workflow has been cancelled, asked of the store; once True, every step
        this pass reaches raises `Cancelled` without running (a driver asks it when a renewal
        of the claim is refused, so the body stops at its next step, not mid-effect)."""
        return await self._recorder.withdrawn()

    def now(self) -> datetime:
        return self._clock()

    @property
    def deadline(self) -> Sleeping | None:
        """The earliest deadline this pass noted and has not slept past, or `None`.

        A sleep notes its deadline before writing it, so this covers a deadline whose write was
        cut short by a sibling's failure or cancellation: the store may hold it, and a driver
        whose pass then failed should still wake the workflow at it.
        """
        deadlines = self._noted | self._sleeps
        if not deadlines:
            return None
        key = min(deadlines, key=lambda k: deadlines[k])
        return Sleeping(key, deadlines[key])

    def _suspend(self, suspension: Suspended) -> Suspended:
        suspension.origin = self
        return suspension

    def _step_failed(self, key: str, error: Exception) -> None:
        self._failed.append(StepFailed(key, None, error))

    @property
    def failed_steps(self) -> tuple[StepFailed, ...]:
        """The steps of this pass whose effect raised, in the order they did."""
        return tuple(self._failed)

    async def step(
        self,
        key: str,
        fn: Callable[[], object],
        parse: Callable[[object], T],
        *,
        within: timedelta | None = None,
        retry: Retry | None = None,
        # The name the issue and every caller use; it bounds the effect, not this await.
        timeout: timedelta | None = None,  # noqa: ASYNC109
    ) -> T:
        """Run `fn` (sync or async) and record its result as `key`; every later pass gets
        the recorded value back without running it. `fn` runs at least once: a pass that dies
        between `fn` and its record runs it again (`transact` is the exactly-once form).

        `within` says how long the step may take, so the claim is stretched before it starts.
        `retry` is how this step is tried again when `fn` raises (the worker's `retry` if
        `None`). `timeout` bounds how long `fn` may run: past it the step raises `StepTimeout`,
        a failed attempt like any other. An async `fn` is cancelled then; a synchronous one
        runs in a thread of its own under a timeout (so it cannot block the worker's loop
        past it), and a thread cannot be stopped: it is abandoned, runs on to its end in the
        background, and what it returns is dropped (give it a timeout of its own where it can
        take one, such as a socket's). A
        `timeout` longer than the claim's budget left stretches the claim to cover it, as a
        `within` would, so the step is ended by its own timeout rather than by the budget.
        """
        check_key(key)
        if within is not None:
            positive("within", within)
        if timeout is not None:
            positive("timeout", timeout)
        if retry is not None and not isinstance(retry, Retry):
            raise TypeError(f"retry must be a Retry, not {type(retry).__name__}")
        window = within if timeout is None else timeout if within is None else max(within, timeout)

        async def produce() -> object:
            if window is not None:
                await self._recorder.stretch(window)
            try:
                if timeout is None:
                    # The effect inline, not in a coroutine of its own: every step's path.
                    result = fn()
                    # JSON's own types first: never awaitable, and asked far more cheaply
                    # than `isawaitable`'s look through the `Awaitable` ABC.
                    if type(result) not in _PLAIN and inspect.isawaitable(result):
                        result = await result
                else:
                    result = await _bounded(key, fn, timeout)
            except Exception as error:
                self._failed.append(StepFailed(key, retry, error))
                raise
            try:
                return await self._recorder.record(key, result)
            except Unencodable as error:
                # What the step returned cannot be kept: the step failed, not the body around it.
                self._failed.append(StepFailed(key, retry, error))
                raise

        if self._on_step is not None:
            return parse(await self._recorder.once(key, _timed(key, produce, self._on_step)))
        return parse(await self._recorder.once(key, produce))

    async def transact(self, key: str, effect: Effect, parse: Callable[[object], T]) -> T:
        """Have the store perform `effect` and record its result in one atomic step."""
        check_key(key)
        recorder = self._recorder
        if self._on_step is not None:
            timed = _timed(key, lambda: recorder.transact(key, effect), self._on_step)
            return parse(await recorder.once(key, timed))
        return parse(await recorder.once(key, lambda: recorder.transact(key, effect)))

    # -- suspending --------------------------------------------------------------------

    async def sleep(self, key: str, duration: timedelta) -> None:
        """Suspend until `duration` after the first pass that reached this step.

        The deadline is recorded, not the duration, so a pass resumed after a crash sleeps
        until the same moment rather than starting the clock again.
        """
        positive("duration", duration)
        check_key(key)

        async def produce() -> object:
            return await self._note_then_record(key, self._clock() + duration)

        await self._until(key, _deadline(await self._recorder.once(key, produce)))

    async def sleep_until(self, key: str, when: datetime) -> None:
        """Suspend until `when` (recorded on first reach, like `sleep`)."""
        check_key(key)
        if when.tzinfo is None:
            raise ValueError("sleep_until needs a timezone-aware datetime")

        async def produce() -> object:
            return await self._note_then_record(key, when)

        await self._until(key, _deadline(await self._recorder.once(key, produce)))

    async def _note_then_record(self, key: str, due: datetime) -> object:
        # Noted before the write: a sibling's failure can cancel this branch while the write is
        # in flight, and the store may then hold a deadline nothing else would report.
        self._noted[key] = due.astimezone(UTC)
        return await self._recorder.record(key, due.astimezone(UTC).isoformat())

    async def _until(self, key: str, due: datetime) -> None:
        self._noted.pop(key, None)  # read back: from here on it is `_sleeps` or nothing
        if self._clock() >= due:
            return
        self._sleeps[key] = due
        raise self._suspend(ScheduledWakeup(key, due))

    async def awaiting(self, key: str, parse: Callable[[object], T]) -> T:
        """The value someone supplied as `key`; suspends the pass until there is one."""
        check_key(key)
        trail = self._recorder.trail
        ordinal = trail.awaited(key)
        if key in self.records:
            return parse(self.records[key])
        trail.new(self.workflow, key, ordinal)  # a wait a changed body added stops here too
        self._waiting.add(key)
        raise self._suspend(InputNeeded(key))

    async def _read(
        self, key: str, after: str | None, limit: int | None, suspend: bool
    ) -> list[Entry]:
        check_key(key)
        if limit is not None and (isinstance(limit, bool) or limit < 1):
            raise ValueError(f"limit must be a positive count, got {limit!r}")
        if after is not None and not after.startswith(INBOX):
            raise ValueError(f"after must be an inbox entry key, got {after!r}")
        records = self.records
        if key not in records and not _inbox(records, after, None, 1) and suspend:
            trail = self._recorder.trail
            trail.new(self.workflow, key, trail.reach(key))
            self._listening.add(key)
            raise self._suspend(InputNeeded(key))

        async def produce() -> object:
            taken = _inbox(records, after, None, limit)
            return await self._recorder.record(key, taken[-1].key if taken else None)

        # What is recorded is the key of the last entry taken: a reference, sound because
        # entries never change, and free to replay because every entry is already loaded.
        upto = await self._recorder.once(key, produce)
        if upto is None:
            return []
        if not isinstance(upto, str):
            raise TypeError(f"{key!r} does not hold an inbox position")
        return _inbox(records, after, upto, None)

    async def receive(
        self, key: str, *, after: str | None = None, limit: int | None = None
    ) -> list[Entry]:
        """At least one inbox entry past `after` (at most `limit`); suspends if there is none.

        The result is never empty, so `entries[-1].key` is always the next cursor.
        """
        return await self._read(key, after, limit, suspend=True)

    async def pending(
        self, key: str, *, after: str | None = None, limit: int | None = None
    ) -> list[Entry]:
        """The inbox entries past `after` this pass can see, possibly none; never suspends."""
        return await self._read(key, after, limit, suspend=False)

    # -- what the pass came to ---------------------------------------------------------

    @property
    def suspended_on(self) -> frozenset[str]:
        """The keys this pass suspended on so far (sleeps, waits, listens), caught or not."""
        if not (self._sleeps or self._waiting or self._listening):
            return frozenset()  # every pass that completes asks this
        return frozenset(self._sleeps) | frozenset(self._waiting) | frozenset(self._listening)

    def suspension(self) -> Sleeping | Blocked:
        """What this pass comes to if it stopped on its suspensions: `resume`'s answer."""
        # Sleeping wins: it alone carries something the driver must act on (a deadline);
        # the branches that wait on input are reached again by the pass the wakeup brings.
        deadline = self.deadline
        if deadline is not None:
            return deadline
        return Blocked(frozenset(self._waiting), frozenset(self._listening))


def _inbox(
    records: Mapping[str, object], after: str | None, upto: str | None, limit: int | None
) -> list[Entry]:
    """The inbox entries among `records` past `after` and up to `upto`, in key order, at most
    `limit` of them."""
    entries = [
        Entry(k, v)
        for k, v in records.items()
        if k.startswith(INBOX) and (after is None or k > after) and (upto is None or k <= upto)
    ]
    entries.sort(key=lambda entry: entry.key)
    return entries if limit is None else entries[:limit]


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


async def resume(
    holder: Pass,
    checkpointer: Checkpointer,
    body: Callable[[Run], Awaitable[T]],
    *,
    clock: Clock = utcnow,
    kept: bool = False,
    on_write: Callable[[], None] | None = None,
    records: Mapping[str, object] | None = None,
    on_step: StepHook | None = None,
) -> Completed[T] | Sleeping | Blocked:
    """Run one pass of `body` under `holder` and return what it came to.

    This is the boundary where suspensions become a value: it reports everything the pass
    reached (noted on its `Run`), not whatever happened to propagate. A failure beside
    suspensions is still a failure (the last row), so `except Exception` around `resume` stays
    the right net.

    | the body ...                                      | `resume` ...                       |
    |---------------------------------------------------|------------------------------------|
    | returns, having reached no suspension             | returns `Completed(value)`         |
    | raises suspensions only (alone or in groups)      | returns `Sleeping` (the earliest   |
    |                                                   | deadline noted) or `Blocked` (all) |
    | returns after its own code caught a suspension    | raises `Swallowed`                 |
    | raises an `Interruption` (`Fenced`, `Contended`,  | raises the first one, unwrapped    |
    | `StoreDown`), alone or anywhere in a group |                                    |
    | raises a suspension another `Run` raised          | raises `TypeError`                 |
    | raises a failure                                  | raises it unchanged                |
    | raises a group of failures and suspensions        | raises the failures alone: the     |
    |                                                   | group split, suspensions stripped  |
    | met `Nondeterministic` (caught by it or not)      | raises it                          |

    The failures alone are an `ExceptionGroup` (a `BaseExceptionGroup` only if the body itself
    raised a non-`Exception` such as `KeyboardInterrupt`), so `except Exception` catches every
    failure and nothing else. Cancelling the pass propagates `CancelledError`.

    `clock` is the pass's time (deadlines are recorded on it); `kept` says a driver renews the
    claim meanwhile; `on_write` is called after each write, `on_step` after each step that ran
    (`StepHook`). A store that fails a write
    transiently is tried again (`durability.faults`), and raises `StoreDown` past that.
    """
    ordinals = None
    if records is None:
        records, ordinals = holder.records, holder.ordinals
    if records is None:
        records = await patiently(
            checkpointer, holder.workflow, lambda: checkpointer.load(holder.workflow)
        )
    run = Run(
        holder,
        checkpointer,
        records,
        clock=clock,
        kept=kept,
        on_write=on_write,
        on_step=on_step,
        ordinals=ordinals,
    )
    try:
        value = await body(run)
    except BaseException as exc:
        stopped = exc
    else:
        if run.broken is not None:  # the body caught it: the pass fails all the same
            raise run.broken
        if run.suspended_on:
            raise Swallowed(run.suspended_on)
        return Completed(value)
    # Outside the `except`, so what is raised below carries its own context, not `stopped`'s.
    return _stopped_on(run, stopped)


def _stopped_on(run: Run, stopped: BaseException) -> Sleeping | Blocked:
    """What a pass whose body raised `stopped` came to, or what `resume` raises instead."""
    leaves = _leaves(stopped)
    for leaf in leaves:
        if isinstance(leaf, Interruption):
            if leaf is stopped:
                raise stopped
            raise leaf from stopped
    if run.broken is not None and run.broken not in leaves:
        raise run.broken from stopped
    for leaf in leaves:
        if isinstance(leaf, Suspended) and leaf.origin is not run:
            raise TypeError(
                f"the pass of {run.workflow!r} stopped on a suspension of {leaf.key!r} that"
                " its own Run did not raise (a Run of another pass?); a body suspends only"
                " through the Run it was given"
            ) from stopped
    if all(isinstance(leaf, Suspended) for leaf in leaves):
        return run.suspension()
    if isinstance(stopped, BaseExceptionGroup):
        _, failures = stopped.split(Suspended)
        assert failures is not None  # not every leaf was a suspension
        raise failures
    raise stopped
