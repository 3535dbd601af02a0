"""`RedisStreamScheduler`: wakeups as a stream read by a consumer group, sleepers as a ZSET.

An idle worker parks inside Redis on `XREADGROUP BLOCK`, so waiting costs nothing and a wakeup
is picked up the moment it is appended; the price is a stream that keeps acknowledged entries
until it is trimmed, and a `cancel` that scans it. A receipt carries the entry's delivery
count, so a worker that stalled past its lease holds a dead receipt and its late writes are
refused; each check and the write it guards are one Lua script. A priority is a stream of its
own, read highest first (stream_levels.py), and a limit is counted in the look's script.
The keys, the receipts and a wipe of the server's data: `RedisStreamScheduler`'s docstring.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any, ClassVar, Self, TypeVar, cast

from durability.checks import check_workflow, positive, to_ms
from durability.deprecation import Reclaim
from durability.redis.batching import ScriptBatcher, SharesBatches
from durability.redis.lua import ScriptCall, script
from durability.redis.marker import Marker, Watched, lost_group
from durability.redis.namespace import (
    DEFAULT,
    block_slice,
    check_namespace,
    from_ms,
    key,
    ms,
    ms_at_or_after,
    text,
)
from durability.redis.policies import policy_text
from durability.redis.shards import check_layout, check_shards, shard_index, tags
from durability.redis.stream_keeping import StreamKeeping
from durability.redis.stream_levels import (
    Levels,
    read_replies,
    taken_entry,
)
from durability.redis.timetable import RedisTimetable
from durability.values import Delivery, Limit

__all__ = ["GLANCE", "GROUP", "TRIM_EVERY", "RedisStreamScheduler", "lost_group", "read_entries"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: The consumer group every worker of a queue reads through.
GROUP = "workers"
#: The stream field that names the workflow an entry wakes.
FIELD = "workflow"
#: Most sleepers one `wake_due` moves; a fuller set is drained by the next call at once.
_WAKE_BATCH = 1000
#: How often a worker trims the stream while it answers deliveries, by default: short enough
#: that a workload of a few seconds leaves a short stream too.
TRIM_EVERY = timedelta(seconds=1)
#: A read asked to wait no longer than this only looks. Redis expires a blocked read's BLOCK
#: on its timer (every 1/hz seconds: 100 ms at the default hz 10), so a read that blocks for a
#: millisecond may sit there a hundred; the worker's extra readers, which only glance at the
#: queue, would each hold a blocked read that long.
GLANCE = timedelta(milliseconds=5)


def default_consumer() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def receipt_of(entry: str, count: object) -> str:
    return f"{entry}/{text(count)}"


def _parse(receipt: str) -> tuple[str, str]:
    entry, sep, count = receipt.rpartition("/")
    if not sep or not entry or not count.isdigit():
        raise ValueError(f"not a stream receipt: {receipt!r}")
    return entry, count


def read_entries(reply: Any) -> list[Delivery]:
    """Every entry naming a workflow in an XREADGROUP reply (RESP2 list or RESP3 map), of every
    stream read, as first deliveries (an entry read with ">" is on its first delivery)."""
    return [found.delivery() for found in read_replies(reply) if found.workflow is not None]


class RedisStreamScheduler(SharesBatches, Reclaim, Watched, StreamKeeping):
    """A `Scheduler` over a Redis stream, its consumer group and a ZSET of sleepers. (`Reclaim`
    keeps the deprecated `reclaim` for a release; `StreamKeeping` its cold paths: reclaiming,
    trimming, its size and backlog.)

    `consumer` names this scheduler inside the group (one per worker process; a fresh unique
    name by default). `lease` is how long a delivery may go without a sign of life before
    `reclaiming(lease)` in another worker takes it over. `trim_every` is how often a worker reading
    the stream trims it while it answers deliveries (None: it never does; see `trim`). `wipes`
    and `last_wipe` count the wipes of the server's data this scheduler noticed;
    `marker.on_wipe` hears of each (`marker.Wiped`).

    Three keys per queue, all tagged with the namespace so one Lua script may touch them together
    on a cluster:

    | key | type | holds |
    |---|---|---|
    | `{ns}:ready` | STREAM + group `workers` | an entry per wakeup; pending: who holds what |
    | `{ns}:sleeping` | ZSET | a member per sleeping workflow, scored by when due (ms) |
    | `{ns}:marker` | STRING | a random value `prepare` writes, to notice a wipe (marker.py) |

    Why a stream: `XREADGROUP BLOCK` parks an idle worker inside Redis, so waiting costs nothing
    and a wakeup is picked up the moment it is appended. What it costs: acknowledged entries stay
    in the stream until `trim` removes them, and `cancel` must scan the stream to find a workflow's
    entries.

    A receipt is `<entry id>/<delivery count>`. The count rises each time the entry is claimed by
    another worker (`reclaiming`), so a worker that stalled past its lease holds a dead receipt: its
    late `done`, `wake_at` or `extend` is refused rather than acting on its successor's delivery.
    Every check of a receipt and the write it guards run as one Lua script.

    A server that lost its data (a restart without persistence, `FLUSHALL`, a failover to an empty
    replica) has no group: every read and every receipt check is answered `NOGROUP`. Each command
    that needs the group catches that reply, prepares the queue again and sends itself once more
    (`regrouped`), so the normal path costs nothing extra and a worker carries on with whatever
    is submitted after the wipe; the marker says the wipe happened (see marker.py).

    Blocking reads and redis-py: the client gives every reply `socket_timeout` seconds (5 by
    default) and drops the connection when one is late, so `next_ready` blocks in slices that end a
    margin before that timeout and loops until `within` is spent; a client built with
    `socket_timeout=None` gets a single block.
    """

    #: What a queue of more than one shard is made as: `sharded.ShardedStreamScheduler`,
    #: which sets this as it is imported (the package imports it).
    sharded: ClassVar[type[RedisStreamScheduler] | None] = None

    def __new__(cls, *, shards: int = 1, shard: int | None = None, **_: Any) -> Self:
        # `shards=N` (N > 1) makes a sharded queue, one of these per shard (sharded.py).
        if cls is RedisStreamScheduler and check_shards(shards) > 1 and shard is None:
            assert cls.sharded is not None, "durability.redis.sharded sets it on import"
            return cast(Self, object.__new__(cls.sharded))
        return object.__new__(cls)

    def __init__(
        self,
        *,
        redis: Any,
        namespace: str = DEFAULT,
        lease: timedelta = timedelta(seconds=30),
        consumer: str | None = None,
        trim_every: timedelta | None = TRIM_EVERY,
        shards: int = 1,
        shard: int | None = None,
    ) -> None:
        """`shards` splits the queue over that many hash tags (see shards.py): the result is a
        `sharded.ShardedStreamScheduler`. `shard` is one shard of such a queue on its own."""
        self.lease = positive("lease", lease)
        #: How often a worker reading this stream trims it while it answers deliveries
        #: (`durability.interfaces.Trimmed`); None: never (something else trims, or nothing).
        self.trim_every = None if trim_every is None else positive("trim_every", trim_every)
        self.namespace = check_namespace(namespace)
        self.consumer = consumer if consumer is not None else default_consumer()
        if not self.consumer:
            raise ValueError("consumer name must not be empty")
        #: How many shards the queue has, and which of them this scheduler is.
        self.shards = check_shards(shards)
        self.shard = shard_index(shard, shards)
        tag = tags(namespace, shards)[self.shard]
        self.ready = key(tag, "ready")
        self.sleeping = key(tag, "sleeping")
        #: The wipe watch (see marker.py); `marker.on_wipe` may be set to hear of each wipe.
        self.marker = Marker(namespace, tag=tag)
        self._redis = redis
        #: The schedules kept beside this queue (`durability.schedules`).
        self.timetable = RedisTimetable(redis, self.namespace)
        self._slice = block_slice(redis)
        self._done = script(redis, "stream_done")
        self._wake_at = script(redis, "stream_wake_at")
        self._wake_due = script(redis, "stream_wake_due")
        self._reclaim = script(redis, "stream_reclaiming")
        self._extend = script(redis, "stream_extend")
        self._cancel = script(redis, "stream_cancel")
        self._trim = script(redis, "stream_trim")
        self._prepare = script(redis, "stream_prepare")
        self._make_ready = script(redis, "stream_make_ready")
        self._take = script(redis, "stream_take")
        #: What this reader knows of the queue's levels (see stream_levels.py).
        self.reading = Levels(redis, self.ready, to_ms(self.lease))
        self._acked: bool | None = None
        self._batcher: ScriptBatcher | None = None
        self._waited = False  # the last read found nothing and waited

    async def prepare(self) -> None:
        # A shard of a sharded queue is checked by the queue it belongs to (sharded.py).
        if self.shards == 1:
            await check_layout(self._redis, self.namespace, 1)
        await super().prepare()

    async def put_back(self) -> tuple[object, bool]:
        marker, created = await self._prepare(
            keys=[self.ready, self.marker.key], args=[GROUP, self.marker.fresh()]
        )
        return marker, bool(int(created))

    async def make_ready(
        self, workflow: str, *, priority: int = 0, limit: Limit | None = None
    ) -> None:
        """A new entry on the stream of `priority` (a wakeup that lands mid-pass is its own
        entry, so the pass that is running cannot swallow it); one still waiting with a
        policy merges with it instead (`stream_policy.lua`)."""
        call = self.wakeup_call(workflow, priority=priority, limit=limit)
        await self._send(self._make_ready, call.keys, call.args)

    def take_call(self) -> ScriptCall:
        """The look every reader sends (`stream_take.lua`), alone or inside `RedisDurable`'s."""
        return ScriptCall("stream_take", (self.ready,), (GROUP, self.consumer, FIELD, self._ms))

    async def glance(self) -> Delivery | None:
        """Take one new entry if there is one, the highest priority first, without waiting."""
        kept = self.reading.kept()
        if kept is not None:
            return kept
        call = self.take_call()
        took = await self.regrouped(self._send, self._take, list(call.keys), list(call.args))
        return taken_entry(took) if self.reading.took(took) else None

    async def next_ready(self, within: timedelta) -> Delivery | None:
        """Take one new entry, waiting at most `within`. Sharing a batcher (`share`), it first
        glances in the turn's batch, unless the last read found nothing and waited: a blocking
        read is served at once when an entry is already there. A reader that has not looked
        for `LEVELS_KNOWN` looks first, which lists the levels its blocking read waits on (a
        level made new also nudges one blocked reader: see stream_levels.py)."""
        if positive("within", within) <= GLANCE:
            return await self.glance()  # a blocked read would last a server tick, not `within`
        reading = self.reading
        kept = reading.kept()
        if kept is not None:
            return kept
        # With levels in use a look comes first too: it reads them highest first, where a read
        # served at once would hand one entry of each level that has one.
        shared = self._batcher is not None or len(reading.levels) > 1
        if reading.stale or reading.due or (shared and not self._waited):
            found = await self.glance()
            if found is not None:
                return found
        for block in self.blocks(within):
            self._waited = True
            reply = await self.regrouped(
                self._redis.xreadgroup,
                GROUP,
                self.consumer,
                {level: ">" for level in reading.levels},
                count=1,
                block=to_ms(reading.bound(block)),
            )
            delivery, nudged = await reading.admitted(read_replies(reply))
            if delivery is None and (nudged or reading.due):
                # A level made new (look at every level), or a limit's room may have come (the
                # look puts its parked wakeups back).
                delivery = await self.glance()
            if delivery is not None:
                self._waited = False
                return delivery
        return None

    @property
    def _ms(self) -> int:
        return to_ms(self.lease)

    @property
    def _indexed(self) -> tuple[str, ...]:
        """The flag that has a shard of a sharded queue index each workflow's waiting plain
        wakeup (`{ns}:ready:plain`, stream_policy.lua), so that a limited wakeup written on
        another shard withdraws it with one lookup (`Sharded.merged_home`); none alone."""
        return ("1",) if self.shards > 1 else ()

    def blocks(self, within: timedelta, sliced: bool = True) -> Iterator[timedelta]:
        """The `BLOCK` of each blocking read that together wait `within`: one, or slices of
        it short enough for this client's socket timeout (see `block_slice`). A caller whose
        call is bounded by its block as well (a lane's `waits`) asks for it unsliced: each
        slice is a request more of an idle worker."""
        positive("within", within)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within.total_seconds()
        while (remaining := deadline - loop.time()) > 0:
            block = timedelta(seconds=remaining)
            yield block if self._slice is None or not sliced else min(block, self._slice)

    async def done(self, delivery: Delivery) -> None:
        call = self.done_call(delivery)
        await self.regrouped(self._send, self._done, list(call.keys), list(call.args))

    def _policy(self, delivery: Delivery) -> tuple[object, ...]:
        """The ARGV that tell a script the delivery's policy (none for the default)."""
        policy = policy_text(delivery.priority, delivery.limit)
        return (policy, check_workflow(delivery.workflow), self._ms) if policy else ()

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
        args: tuple[str, ...] = (FIELD, check_workflow(workflow))
        if self.shards > 1:  # a shard indexes its plain wakeups (see `_indexed`)
            args = (*args, policy, "1")
        elif policy:
            args = (*args, policy)
        return ScriptCall("stream_make_ready", (self.ready,), args)

    def done_call(self, delivery: Delivery) -> ScriptCall:
        """The answer `done` sends, as a call to run behind a claim's release."""
        entry, count = _parse(delivery.receipt)
        policy = self._policy(delivery)
        if not policy and self.shards > 1:  # its plain wakeup's index goes with it
            policy = ("", check_workflow(delivery.workflow))
        return ScriptCall("stream_done", (self.ready,), (GROUP, entry, count, *policy))

    async def wake_at(self, delivery: Delivery, when: datetime) -> bool:
        entry, count = _parse(delivery.receipt)
        workflow = check_workflow(delivery.workflow)
        due = ms_at_or_after(when)
        policy = self._policy(delivery)
        keys = [self.ready, self.sleeping]
        args = [GROUP, entry, count, workflow, due, *(policy[:1] + policy[2:])]
        woken = await self.regrouped(self._send, self._wake_at, keys, args)
        return bool(woken)

    async def wake_due(self, now: datetime | None = None) -> datetime | None:
        """Append a wakeup for every sleeper due by `now` (the server's clock if None) and
        return the earliest deadline still sleeping. A returned moment at or before `now` means
        more sleepers were due than one call moves: call again. The marker is read too (and
        the queue prepared again if it is gone): the worker's timer is the low-rate watch for
        a wipe.

        Given a `now`, it first glances at the marker and the earliest sleeper, two plain reads
        in one round trip: with the marker there and nobody due (an idle worker's every look)
        that is the answer, and the script that moves sleepers runs only when one is due."""
        if now is not None:
            pipe = self._redis.pipeline(transaction=False)
            pipe.get(self.marker.key)
            # (A limit's parked wakeups are a sleeper here too: see stream_wake_due.lua.)
            pipe.zrange(self.sleeping, 0, 0, withscores=True)
            found, first = await pipe.execute()
            if found is not None and (not first or first[0][1] > ms(now)):
                self.marker.saw(found, "wake_due")
                return from_ms(first[0][1]) if first else None
        moment = "" if now is None else str(ms(now))
        earliest, marker = await self._wake_due(
            keys=[self.ready, self.sleeping, self.marker.key],
            args=[moment, _WAKE_BATCH, self.marker.fresh(), GROUP, self._ms, *self._indexed],
        )
        self.marker.saw(marker, "wake_due")
        return None if earliest is None else from_ms(earliest)

    async def extend(self, delivery: Delivery, within: timedelta) -> Delivery | None:
        """Keep the delivery from `reclaiming(lease)` for `within` more, up to one lease (Redis
        will not date a delivery in the future). The receipt does not change."""
        positive("within", within)
        entry, count = _parse(delivery.receipt)
        idle = max(0, to_ms(self.lease) - to_ms(within))
        args = [GROUP, entry, count, self.consumer, idle, *self._policy(delivery)[:1]]
        if len(args) > 5:
            args.append(self._ms)
        kept = await self.regrouped(self._send, self._extend, [self.ready], args)
        return delivery if kept else None

    async def cancel(self, workflow: str) -> int:
        """Remove the workflow's queued and held entries and its sleeper; return how many.

        Costs a scan of the stream (entries are found by content, not id): run `trimming`.
        """
        gone = await self._cancel(
            keys=[self.ready, self.sleeping], args=[GROUP, check_workflow(workflow), self._ms]
        )
        return int(gone)
