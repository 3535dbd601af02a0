"""`Recorder`: what a `Run` writes under its pass's claim, and how.

Three rules every write of a pass keeps, in one place rather than in each of `Run`'s methods:
a key is produced at most once in a pass however many branches ask for it (the others wait
for the first), a write the store fails for a passing reason is sent again (`patiently`), and
a step that says how long it may take has the claim stretched to cover it before it starts.
What the pass reached, in which order, and whether its body still matches its history is the
`Trail`'s (`durability.determinism`); a record is stamped with its ordinal here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta

from durability.clock import Clock
from durability.codec import Stamped
from durability.determinism import Trail
from durability.endings import ended
from durability.faults import patiently
from durability.interfaces import Checkpointer
from durability.signals import Cancelled, Fenced
from durability.values import Effect, Pass, Recorded

__all__ = ["Recorder"]


class Recorder:
    """One pass's records (as loaded, plus its own writes) and its writes under `holder`.
    `kept`: a driver renews the claim meanwhile; `on_write` is called after each write."""

    __slots__ = (
        "_checkpointer",
        "_clock",
        "_inflight",
        "_kept",
        "_on_write",
        "cancelled",
        "holder",
        "records",
        "trail",
    )

    def __init__(
        self,
        holder: Pass,
        checkpointer: Checkpointer,
        records: Mapping[str, object],
        clock: Clock,
        kept: bool,
        on_write: Callable[[], None] | None,
        ordinals: Mapping[str, int | None] | None = None,
    ) -> None:
        #: The pass's claim (stretched by `stretch`, so read it each time).
        self.holder = holder
        #: What this pass knows: the checkpoint as loaded, plus this pass's own writes.
        self.records = dict(records)
        #: What the pass reached and in which order (`ordinals`: the claim's stamps).
        self.trail = Trail(records, ordinals)
        self._checkpointer = checkpointer
        self._clock = clock
        self._kept = kept
        self._on_write = on_write
        # Keys whose write is on its way, with the future a second branch waits on (made
        # only when one asks: most steps are asked for once).
        self._inflight: dict[str, asyncio.Future[object] | None] = {}
        #: The workflow was cancelled: every step from here raises `Cancelled` unrun.
        self.cancelled = False

    async def withdrawn(self) -> bool:
        """Whether the workflow has been cancelled, asked of the store (after a write or a
        renewal was refused); once True, every step this pass reaches raises `Cancelled`."""
        if not self.cancelled:
            workflow = self.holder.workflow
            records = await patiently(
                self._checkpointer, workflow, lambda: self._checkpointer.load(workflow)
            )
            ending = ended(records)
            self.cancelled = ending is not None and ending.state == "cancelled"
        return self.cancelled

    async def once(self, key: str, produce: Callable[[], Awaitable[object]]) -> object:
        """Run `produce` for `key` at most once in this pass, even if two branches ask; the
        recorded value if there is one. A new key is checked against the history first
        (`Trail.new`: it may raise `Nondeterministic`, and then nothing is produced)."""
        if self.cancelled:
            raise Cancelled(self.holder.workflow)
        trail = self.trail
        ordinal = trail.reach(key)
        if key in self.records:
            return self.records[key]
        if key in self._inflight:
            running = self._inflight[key]
            if running is None:
                running = self._inflight[key] = asyncio.get_running_loop().create_future()
            return await asyncio.shield(running)
        if trail.checks:  # a flag first: most passes have nothing to check (`Trail.checks`)
            trail.new(self.holder.workflow, key, ordinal)
        self._inflight[key] = None
        try:
            value = await produce()
        except BaseException as exc:
            future = self._inflight.pop(key, None)
            if future is not None and not future.done():
                future.set_exception(exc)
                future.exception()  # a branch that never awaits it must not warn
            raise
        future = self._inflight.pop(key, None)
        self.records[key] = value
        if future is not None:
            future.set_result(value)
        if self._on_write is not None:
            self._on_write()
        return value

    async def write(self, call: Callable[[], Awaitable[Recorded]]) -> object:
        """A store write of this pass, tried again through a passing fault of the store (a lost
        connection is not the step failing; see `durability.faults`); the value it kept. A
        write refused because the workflow was cancelled raises `Cancelled`."""
        try:
            return (await patiently(self._checkpointer, self.holder.workflow, call)).value
        except Fenced as fenced:
            if await self.withdrawn():
                raise Cancelled(self.holder.workflow) from fenced
            raise

    async def record(self, key: str, value: object) -> object:
        """`key` recorded as `value` under the claim (first writer wins: what it kept), stamped
        with the ordinal its reach was given where the store reads stamps back."""
        trail = self.trail
        if trail.stamps:  # the ordinal `Trail.stamp` gives, read in place: every step's write
            value = Stamped(value, trail.placed.get(key))
        return await self.write(lambda: self._checkpointer.record(self.holder, key, value))

    async def mark(self, key: str, value: object) -> object:
        """`key` recorded as `value` outside the order of steps (a patch), and kept."""
        if self.trail.stamps:
            value = Stamped(value, None)
        self.trail.touch(key)
        kept = await self.write(lambda: self._checkpointer.record(self.holder, key, value))
        self.records[key] = kept
        return kept

    async def transact(self, key: str, effect: Effect) -> object:
        """`effect` performed by the store and recorded as `key`, in one step."""
        # Tried again only when the store failed: a transact that landed answers the second
        # time with its recorded result and does not perform the effect again.
        return await self.write(lambda: self._checkpointer.transact(self.holder, key, effect))

    async def stretch(self, within: timedelta) -> None:
        """Make sure the claim's budget covers `within` before an effect starts.

        Skipped when the budget left already covers it, so annotating cheap steps is free.
        Under a worker that renews the claim every tick, liveness stays the lease; a caller
        driving `resume` alone has nobody to renew it, so the window is its sign of life.
        """
        holder = self.holder
        if holder.budget_ends - self._clock() >= within:
            return
        alive = holder.alive if self._kept else max(within, holder.alive)
        try:
            self.holder = await patiently(
                self._checkpointer,
                holder.workflow,
                lambda: self._checkpointer.extend(holder, within, alive),
            )
        except Fenced as fenced:
            if await self.withdrawn():
                raise Cancelled(holder.workflow) from fenced
            raise
