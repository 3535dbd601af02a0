"""`RedisSetScheduler`: the whole queue as one ZSET scored by when each workflow is visible.

Ready, asleep and held are one score, so there is no timer to move sleepers, no pending list
and nothing to trim: a workflow is one member however many wakeups it gets. The decision a
reader might undo: a ZSET has no blocking read for "a score at or before now", so an idle
reader waits on a doorbell LIST that each script making a member visible rings in the same
script, polling only as the fallback. A pass's score is its receipt, and `done` removes the
member only with that receipt: that is what keeps a wakeup landing mid-pass. The keys, the
scores and the doorbell's rules are in `RedisSetScheduler`'s docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Self, cast

from durability.cancelling import stop_if_cancelled
from durability.checks import check_workflow, positive, to_ms
from durability.redis.backlog import backlog
from durability.redis.batching import ScriptBatcher, SharesBatches
from durability.redis.lua import ScriptCall, script
from durability.redis.marker import Marker, Watched
from durability.redis.namespace import (
    DEFAULT,
    block_slice,
    check_namespace,
    footprint,
    from_ms,
    key,
    ms,
    ms_at_or_after,
    text,
)
from durability.redis.policies import policy_of, policy_text
from durability.redis.shards import check_layout, check_shards, shard_index, tags
from durability.redis.timetable import RedisTimetable
from durability.values import Backlog, Delivery, Footprint, Limit
from durability.visibility import Visibility
from durability.waits import beats

__all__ = ["RedisSetScheduler", "taken_delivery"]

#: With the doorbell, the longest an idle reader waits for a ring before looking anyway (for a
#: member some other code wrote without ringing). The lease is the shorter at its default: the
#: look that would find a dead worker's member shows it then too, so the two are one look.
_UNANNOUNCED = 60.0
#: The shortest wait worth a BLPOP: Redis ends a block on its clock tick (every 1/hz s: 100 ms
#: at the default hz 10), so a shorter one may last a whole tick longer than asked.
_SHORTEST_BLOCK = 0.25
#: What a block is cut short by so that, ending on the tick after it, it still ends in time.
_TICK = 0.1


@dataclass(frozen=True, slots=True)
class _Quiet:
    """What a reader waiting on the doorbell saw at its last look: nothing visible, and the
    earliest hidden member showing at `shows` (this host's clock; None if none is hidden)."""

    shows: datetime | None


def taken_delivery(taken: Any) -> Delivery:
    """The delivery a take (`set_take.lua`) handed out: its workflow, receipt, whether the
    member was a lapsed pass's (`Delivery.lapsed`), and the priority and limit it was kept
    with (`policies.py`)."""
    priority, limit = policy_of(taken[3] if len(taken) > 3 else "")
    return Delivery(
        text(taken[0]), text(taken[1]), int(taken[2]) == 1, priority=priority, limit=limit
    )


# The doorbell (on by default; `doorbell=False` is the design as published, polling alone) lifts
# the polling floor. `{ns}:doorbell` is a short LIST: every script that makes a member visible, or
# brings the earliest hidden one forward (`make_ready`, `wake_at`), pushes onto it in the same
# script, so a ring exists exactly when its change does. An idle reader blocks on it with `BLPOP`
# for as long as nothing is due: until the earliest hidden member shows (the empty look says
# when), `within` runs out, or `_UNANNOUNCED` passes (the fallback for a member some other code
# wrote with a plain ZADD). A ring wakes one waiting reader, which looks at once. An empty look
# clears the doorbell in the same script: whatever rang before it is already seen, so rings never
# pile up into wakeups for nothing, and with nobody waiting the list is capped at 64 anyway.
# Redis times a blocked command out on its clock tick (100 ms at the default hz), so a wait
# shorter than `_SHORTEST_BLOCK` is not blocked for: the reader polls every `poll` through it.
#
# Priorities and limits (`make_ready(..., priority=, limit=)`): a set per priority in use,
# `{ns}:schedule:<p>` beside `{ns}:schedule` for 0, read highest first; a limit's holders,
# rate window and parked wakeups are kept under `{ns}:schedule:*` and counted in the take's
# script (`scripts/shared/policy.lua`; docs/guide.md, "How each store keeps priorities").
class RedisSetScheduler(SharesBatches, Visibility, Watched):
    """A `Scheduler` over one Redis ZSET, woken by a doorbell LIST or, without it, polling;
    see below for the trade. `wipes` and `last_wipe` count the wipes of the server's
    data this scheduler noticed; `marker.on_wipe` hears of each (`marker.Wiped`).

    One key per queue, `{ns}:schedule` (the namespace is the cluster hash tag), beside the
    doorbell and the marker (`{ns}:marker`, which notices a wipe of the server's data: see
    marker.py; `wake_due` and an empty take read it). A score is Unix milliseconds of the
    server's clock:

    | state | score |
    |---|---|
    | ready | when it became ready (at or before now) |
    | asleep | its deadline (in the future, whole ms) |
    | held by a pass | taken-at + lease, plus a fraction: the receipt |

    What that buys: being due and being ready are the same score, so there is no timer to move
    sleepers, no pending list, nothing to reclaim (a lapsed lease just makes the score visible
    again) and nothing to trim: a workflow is one member however many wakeups it gets. What it
    costs: a ZSET has no blocking read for "a score at or before now", so the design's reader
    polls every `poll`, and that interval is a floor under how fast a submission starts.

    The doorbell, which lifts that floor, is described above the class.

    The one subtlety is the lost wakeup. A workflow is one member, so a wakeup landing mid-pass can
    only be written on top of the member the pass holds. The score a pass took is its receipt and
    `done` removes the member only while the score still equals it; every other writer writes a
    different score. Receipts have a fraction (the taking script's microsecond, so two takes of one
    member never hand out the same receipt, even within a millisecond) and every other score is
    whole, so `make_ready` can tell a held member from a waiting one and always steps off a receipt.
    """

    #: What a queue of more than one shard is made as: `sharded.ShardedSetScheduler`,
    #: which sets this as it is imported (the package imports it).
    sharded: ClassVar[type[RedisSetScheduler] | None] = None

    def __new__(cls, *, shards: int = 1, shard: int | None = None, **_: Any) -> Self:
        # `shards=N` (N > 1) makes a sharded queue, one of these per shard (sharded.py).
        if cls is RedisSetScheduler and check_shards(shards) > 1 and shard is None:
            assert cls.sharded is not None, "durability.redis.sharded sets it on import"
            return cast(Self, object.__new__(cls.sharded))
        return object.__new__(cls)

    def __init__(
        self,
        *,
        redis: Any,
        namespace: str = DEFAULT,
        lease: timedelta = timedelta(seconds=30),
        poll: timedelta = timedelta(milliseconds=50),
        doorbell: bool = True,
        shards: int = 1,
        shard: int | None = None,
    ) -> None:
        """`shards` splits the queue over that many hash tags (see shards.py): the result is a
        `sharded.ShardedSetScheduler`. `shard` is one shard of such a queue on its own."""
        self.lease = positive("lease", lease)
        self.poll = positive("poll", poll)
        self.namespace = check_namespace(namespace)
        #: How many shards the queue has, and which of them this scheduler is.
        self.shards = check_shards(shards)
        self.shard = shard_index(shard, shards)
        tag = tags(namespace, shards)[self.shard]
        self.schedule = key(tag, "schedule")
        self.doorbell = key(tag, "doorbell") if doorbell else None
        #: The KEYS of every script: the schedule, and the doorbell if there is one.
        self.keys = (self.schedule,) if self.doorbell is None else (self.schedule, self.doorbell)
        #: The wipe watch (see marker.py); `marker.on_wipe` may be set to hear of each wipe.
        self.marker = Marker(namespace, tag=tag)
        self._redis = redis
        #: The schedules kept beside this queue (`durability.schedules`).
        self.timetable = RedisTimetable(redis, self.namespace)
        self._slice = block_slice(redis)
        self._make_ready = script(redis, "set_make_ready")
        self._take = script(redis, "set_take")
        self._done = script(redis, "set_done")
        self._wake_at = script(redis, "set_wake_at")
        self._extend = script(redis, "set_extend")
        self._wake_due = script(redis, "set_wake_due")
        self._prepare = script(redis, "set_prepare")
        self._cancel = script(redis, "set_cancel")
        # While a reader waits on the doorbell: what its last look saw (see `parked`).
        self._quiet: _Quiet | None = None
        self._batcher: ScriptBatcher | None = None

    async def prepare(self) -> None:
        # A shard of a sharded queue is checked by the queue it belongs to (sharded.py).
        if self.shards == 1:
            await check_layout(self._redis, self.namespace, 1)
        await super().prepare()

    async def put_back(self) -> tuple[object, bool]:
        found = await self._prepare(keys=[self.marker.key], args=[self.marker.fresh()])
        return found, False

    async def make_ready(
        self, workflow: str, *, priority: int = 0, limit: Limit | None = None
    ) -> None:
        """Visible now, at `priority` under `limit` (merging: see `set_make_ready.lua`)."""
        call = self.wakeup_call(workflow, priority=priority, limit=limit)
        await self._send(self._make_ready, call.keys, call.args)

    async def glance(self) -> tuple[Delivery | None, object]:
        """One look, without waiting: the workflow taken, if any, and the ms until the earliest
        hidden member shows (None: none is hidden), as an empty take says."""
        take = self.take_call()
        taken = await self._send(self._take, take.keys, take.args)
        if taken[0]:
            return taken_delivery(taken), None
        self.looked(taken)
        return None, taken[1]

    async def next_ready(self, within: timedelta) -> Delivery | None:
        """Take the longest-visible workflow, waiting at most `within`: on the doorbell (see
        the module docstring), or without one looking every `poll` (on a fixed beat: see
        `durability.waits`) and once more when `within` is up."""
        positive("within", within)
        take = self.take_call()
        if self.doorbell is None:
            async for _ in beats(self.poll, within):
                taken = await self._send(self._take, take.keys, take.args)
                if taken and taken[0]:
                    return taken_delivery(taken)
            return None
        loop = asyncio.get_running_loop()
        end = loop.time() + within.total_seconds()
        while True:
            taken = await self._send(self._take, take.keys, take.args)
            stop_if_cancelled()
            if taken[0]:
                return taken_delivery(taken)
            self.looked(taken)
            left = end - loop.time()
            if left <= 0 or self.over(left, taken[1]):
                return None
            block, pause = self.wait(left, taken[1])
            if block is None:
                await asyncio.sleep(pause)
            else:
                with self.parked(taken[1]):
                    await self._redis.blpop([self.doorbell], timeout=block)
                stop_if_cancelled()

    def take_call(self) -> ScriptCall:
        """The take every reader sends (`set_take.lua`), alone or inside `RedisDurable`'s take:
        with the doorbell it also reads the marker when it finds nothing (see `looked`)."""
        if self.doorbell is None:
            return ScriptCall("set_take", self.keys, (to_ms(self.lease),))
        keys = (*self.keys, self.marker.key)
        return ScriptCall("set_take", keys, (to_ms(self.lease), self.marker.fresh()))

    def looked(self, taken: Any) -> None:
        """Note the marker an empty take read (with the doorbell): a wipe is noticed by the
        reader's looks, so the timer need not look while the reader waits (`parked`)."""
        if len(taken) > 2:
            self.marker.saw(taken[2], "take")

    @contextlib.contextmanager
    def parked(self, hidden_ms: object) -> Iterator[None]:
        """For the block of a reader that waits on the doorbell after an empty look that found
        the earliest hidden member `hidden_ms` away (None: none). Until it ends, `wake_due`
        answers from that look without a round trip while its `now` is before that member
        shows: every change that makes a member visible or brings the earliest forward rings,
        which ends the wait, and the reader's look read the marker. (On the set the timer has
        nothing to move; it only watches for wipes and for a clock ahead of the server's.)"""
        shows = None
        if hidden_ms is not None:
            shows = datetime.now(UTC) + timedelta(milliseconds=float(text(hidden_ms)))
        self._quiet = _Quiet(shows)
        try:
            yield
        finally:
            self._quiet = None

    def wait(
        self, left: float, hidden_ms: object, sliced: bool = True
    ) -> tuple[float | None, float]:
        """How an empty look is followed, given `left` seconds of the read's `within` and the
        look's ms until the earliest hidden member shows (None if none): a BLPOP on the
        doorbell for (seconds, 0), or no block and a pause of (None, seconds) before looking
        again, when the wait is too short for Redis to time a block out on time. Unless
        `sliced` is False (a lane's call, bounded by its block too), a block is cut to fit the
        client's socket timeout."""
        # A member another worker takes after this look shows, its taker dead, a lease later.
        wait = min(left, _UNANNOUNCED, self.lease.total_seconds())
        if hidden_ms is not None:
            wait = min(wait, max(float(text(hidden_ms)) / 1000, 0.0))
        if wait < _SHORTEST_BLOCK:
            return None, min(wait, self.poll.total_seconds())
        block = wait - _TICK
        if self._slice is None or not sliced:
            return block, 0.0
        return min(block, self._slice.total_seconds()), 0.0

    def over(self, left: float, hidden_ms: object) -> bool:
        """Whether a read with `left` seconds to go ends now: too little is left to block for
        and no hidden member shows before the end. Polled out at `poll`, that last moment
        would cost a look or three every read; the caller reads again at once instead."""
        if left >= _SHORTEST_BLOCK:
            return False
        return hidden_ms is None or float(text(hidden_ms)) / 1000 > left

    async def done(self, delivery: Delivery) -> None:
        """Remove the workflow unless rescheduled since its take; a held slot goes back."""
        call = self.done_call(delivery)
        await self._send(self._done, call.keys, call.args)

    def _policy(self, delivery: Delivery) -> tuple[object, ...]:
        """The ARGV that tell a script the delivery's policy (none for the default)."""
        policy = policy_text(delivery.priority, delivery.limit)
        return (policy, to_ms(self.lease)) if policy else ()

    # What `RedisDurable` runs in one script after a checkpoint write (see durable.py).

    @property
    def redis(self) -> Any:
        """The client this queue's commands run on."""
        return self._redis

    def wakeup_call(
        self, workflow: str, *, priority: int = 0, limit: Limit | None = None
    ) -> ScriptCall:
        """The wakeup `make_ready` sends, as a call to run behind a checkpoint write."""
        policy = policy_text(priority, limit)
        args = (check_workflow(workflow), policy) if policy else (check_workflow(workflow),)
        return ScriptCall("set_make_ready", self.keys, args)

    def done_call(self, delivery: Delivery) -> ScriptCall:
        """The answer `done` sends, as a call to run behind a claim's release."""
        workflow = check_workflow(delivery.workflow)
        policy = self._policy(delivery)
        keys = self.keys if policy else (self.schedule,)  # a freed slot rings the doorbell
        return ScriptCall("set_done", keys, (workflow, delivery.receipt, *policy))

    async def wake_at(self, delivery: Delivery, when: datetime) -> bool:
        """Score the workflow `when`; keeps an earlier wakeup that landed mid-pass. Declines if
        the member is gone (cancelled)."""
        woken = await self._send(
            self._wake_at,
            self.keys,
            [
                check_workflow(delivery.workflow), delivery.receipt, ms_at_or_after(when),
                *self._policy(delivery),
            ],
        )
        return bool(woken)

    async def wake_due(self, now: datetime | None = None) -> datetime | None:
        """The earliest deadline still sleeping after `now` (the server's clock if None).

        Nothing moves: a sleeper becomes ready when the clock reaches its score. One round
        trip, so the worker's timer can sleep until the answer instead of ticking blind. A
        `now` ahead of the server's clock pulls the sleepers due by then forward to be ready.
        The same script reads the marker: the worker's timer is the low-rate watch for a wipe.
        While a reader of this scheduler waits on the doorbell (`parked`) and `now` is before
        the earliest hidden member its look found shows, no round trip: it answers when that
        member shows (a sleeper's deadline, or a lease's end).
        """
        quiet = self._quiet
        if quiet is not None:
            at = datetime.now(UTC) if now is None else from_ms(ms(now))
            if quiet.shows is None or at < quiet.shows:
                return quiet.shows
        moment = "" if now is None else str(ms(now))
        keys = [self.schedule, self.marker.key, *self.keys[1:]]
        earliest, marker = await self._wake_due(keys=keys, args=[moment, self.marker.fresh()])
        self.marker.saw(marker, "wake_due")
        return None if earliest is None else from_ms(earliest)

    async def extend(self, delivery: Delivery, within: timedelta) -> Delivery | None:
        """Hide the workflow `within` more from now (never less than it already was); the
        receipt changes with the score. None if the receipt is no longer the score."""
        positive("within", within)
        receipt = await self._send(
            self._extend,
            [self.schedule],
            [
                check_workflow(delivery.workflow), delivery.receipt, to_ms(within),
                *self._policy(delivery)[:1],
            ],
        )
        return None if receipt is None else replace(delivery, receipt=text(receipt), lapsed=False)

    async def cancel(self, workflow: str) -> int:
        args = (check_workflow(workflow), to_ms(self.lease))  # a held slot goes back too
        return int(await self._cancel(keys=self.keys, args=args))

    async def backlog(self) -> Backlog:
        """Members visible now, and how long ago the earliest became visible
        (`durability.redis.backlog`)."""
        return await backlog(self._redis, "set_backlog", [self.schedule], [])

    async def footprint(self) -> Footprint:
        """The members of every priority level and the wakeups parked for a limit's room, one
        per workflow (`footprint.lua`); the doorbell's bytes count, its rings do not."""
        parts = {"schedule": (self.schedule, "queue:zset")}
        if self.doorbell is not None:
            parts["doorbell"] = (self.doorbell, "list")
        found = await footprint(self._redis, parts)
        return Footprint({"schedule": found.parts["schedule"]}, found.bytes)
