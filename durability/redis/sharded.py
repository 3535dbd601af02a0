"""`ShardedStreamScheduler`, `ShardedSetScheduler`: a Redis queue split over shards (shards.py),
each an ordinary scheduler over keys of its own hash tag, one scheduler in front (`Sharded`).
A move on one workflow goes to its shard alone; a wakeup under a limit goes to its limit key's
shard, so one script sees every holder of a limit. A read looks at the shards in turn, each
read starting one further on (`Rotation`): none starves, and priority is strict within a shard.

The decision not to undo: an idle reader waits on every shard with one blocking command where
the server allows it (a single node: one `XREADGROUP` over every stream, one `BLPOP` over every
doorbell). A cluster runs no command across two slots: there a read per shard, the first answer
handed out, the others ended and what they brought kept (cluster_reads.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from redis.asyncio.cluster import RedisCluster

from durability.checks import check_workflow, positive, to_ms
from durability.redis.batching import ScriptBatcher
from durability.redis.cluster_reads import ClusterReads, Read
from durability.redis.lua import ScriptCall, script
from durability.redis.marker import Marker
from durability.redis.namespace import DEFAULT, block_slice, check_namespace, text
from durability.redis.policies import policy_text
from durability.redis.set_scheduler import RedisSetScheduler
from durability.redis.shards import Rotation, check_layout, check_shards, shard_of
from durability.redis.stream_levels import Entry, read_replies
from durability.redis.stream_scheduler import (
    FIELD,
    GROUP,
    TRIM_EVERY,
    RedisStreamScheduler,
    default_consumer,
)
from durability.values import Backlog, Delivery, Footprint, Limit, Reclaimed
from durability.waits import beats

__all__ = ["ShardedSetScheduler", "ShardedStreamScheduler"]

def _entries(replies: Sequence[Any]) -> list[Entry]:
    """The entries of the replies of several blocking stream reads."""
    return [one for reply in replies for one in read_replies(reply)]


def _earliest(moments: Sequence[datetime | None]) -> datetime | None:
    found = [moment for moment in moments if moment is not None]
    return min(found) if found else None


def _footprint(found: Sequence[Footprint]) -> Footprint:
    parts: dict[str, int] = {}
    for one in found:
        for name, count in one.parts.items():
            parts[name] = parts.get(name, 0) + count
    sizes = [one.bytes for one in found]
    return Footprint(parts, None if None in sizes else sum(s for s in sizes if s is not None))


def _backlog(found: Sequence[Backlog]) -> Backlog:
    ages = [one.oldest for one in found if one.oldest is not None]
    return Backlog(sum(one.ready for one in found), max(ages) if ages else None)


P = TypeVar("P", RedisStreamScheduler, RedisSetScheduler)


def _queue(part: RedisStreamScheduler | RedisSetScheduler) -> str:
    """The key a shard's queue scripts start from."""
    return part.schedule if isinstance(part, RedisSetScheduler) else part.ready


class Sharded(Generic[P]):
    """What both sharded queues share: the shards (`parts`), routing a move to its shard, and
    asking every shard where the queue as a whole is asked.

    A workflow belongs to the shard of its id; a wakeup with a `Limit` to the shard of the
    limit's key (`part`), so a limit's holders, rate window and parked wakeups are all on one
    slot and its take is one script there. The price: a workflow's wakeup under a limit and its
    wakeup without one may be pending on two shards at once: `make_ready` withdraws the one
    without (found by its record, or on the stream a default one by its shard's index: see
    `stream_policy.lua`). `cancel` asks every shard for that reason."""

    parts: tuple[P, ...]
    shards: int
    _rotation: Rotation

    def _shard(self, parts: tuple[P, ...], namespace: str, redis: Any) -> None:
        """Set what every sharded queue holds, from its `parts`."""
        self.parts, self.shards = parts, len(parts)
        first = parts[0]
        self.lease = first.lease
        #: The schedules, one timetable for every shard: under the namespace's own tag.
        self.timetable = first.timetable
        self.namespace, self.shard = check_namespace(namespace), 0
        self.marker = Marker(namespace)
        for part in parts:
            part.marker.count_on(self.marker)
        self._redis = redis
        self._slice = block_slice(redis)
        self._cluster = isinstance(redis, RedisCluster)
        self._rotation = Rotation(self.shards)
        #: A cluster's blocking reads, one per shard (None on a single node: one read does).
        self._reads = ClusterReads(redis) if self._cluster else None
        # A limited wakeup's merge with the workflow's others (`make_ready`).
        kind = "set" if isinstance(first, RedisSetScheduler) else "stream"
        self._waiting_limit = script(redis, f"{kind}_waiting_limit")
        self._withdraw = script(redis, f"{kind}_withdraw")

    async def close(self) -> None:
        """End the blocking reads a wait on a cluster left (`ClusterReads`)."""
        if self._reads is not None:
            await self._reads.close()

    def share(self, batcher: ScriptBatcher) -> None:
        for part in self.parts:
            part.share(batcher)

    def part(self, workflow: str, limit: Limit | None = None) -> P:
        """The shard `workflow` belongs to, or with a limit, the limit key's."""
        name = check_workflow(workflow) if limit is None else limit.key
        return self.parts[shard_of(name, self.shards)]

    def ordered(self) -> list[P]:
        """The shards in this look's order (each look starts one further on)."""
        return [self.parts[i] for i in self._rotation.order()]

    async def prepare(self) -> None:
        await check_layout(self._redis, self.namespace, self.shards)
        await asyncio.gather(*(part.prepare() for part in self.parts))

    async def verify(self) -> bool:
        return any(await asyncio.gather(*(part.verify() for part in self.parts)))

    async def make_ready(
        self, workflow: str, *, priority: int = 0, limit: Limit | None = None
    ) -> None:
        """On its shard (see the class doc). A limited wakeup merges into one with a limit
        waiting on another limit's shard (every shard is asked), else it withdraws the
        workflow's waiting one without a limit from its own shard, after the new one is written
        (a crash between leaves two wakeups, never none), keeping the higher priority."""
        policy_text(priority, limit)
        there = await self.placed(workflow, limit)
        await there.make_ready(workflow, priority=priority, limit=limit)
        await self.merged_home(workflow, priority, limit, there)

    async def placed(self, workflow: str, limit: Limit | None) -> P:
        """The shard `make_ready` writes a wakeup of `workflow` under `limit` on: the
        workflow's own without a limit; with one, the shard of a limited wakeup of it already
        waiting on another limit's shard (it keeps its own limit), else the limit key's.
        `RedisDurable`'s joined moves write there too, then call `merged_home`."""
        there = self.part(workflow, limit)
        if limit is None:
            return there
        others = [part for part in self.parts if part is not there]
        waits = await asyncio.gather(
            *(self._waiting_limit(keys=[_queue(part)], args=[workflow]) for part in others)
        )
        return next((part for part, w in zip(others, waits, strict=True) if int(w)), there)

    async def merged_home(
        self, workflow: str, priority: int, limit: Limit | None, there: P
    ) -> None:
        """After a wakeup under `limit` at `priority` is written on `there` (`placed`): the
        workflow's waiting wakeup without a limit withdrawn from its own shard, its priority
        kept if higher. Nothing to do without a limit, or on the workflow's own shard."""
        home = self.part(workflow)
        if limit is None or home is there:
            return
        # Withdrawn: the highest priority it had; None if none waited there (see the scripts).
        had = await self._withdraw(keys=[_queue(home)], args=[workflow, FIELD])
        if had is not None and int(had) > priority:
            await there.make_ready(workflow, priority=int(had), limit=limit)

    def wakeup_call(
        self, workflow: str, *, priority: int = 0, limit: Limit | None = None
    ) -> ScriptCall:
        """The wakeup on the shard of `workflow` or of `limit`, without the merge across
        shards `make_ready` makes: a limited one goes through `placed` and `merged_home`."""
        return self.part(workflow, limit).wakeup_call(workflow, priority=priority, limit=limit)

    async def done(self, delivery: Delivery) -> None:
        await self.part(delivery.workflow, delivery.limit).done(delivery)

    def done_call(self, delivery: Delivery) -> ScriptCall:
        return self.part(delivery.workflow, delivery.limit).done_call(delivery)

    async def wake_at(self, delivery: Delivery, when: datetime) -> bool:
        return await self.part(delivery.workflow, delivery.limit).wake_at(delivery, when)

    async def extend(self, delivery: Delivery, within: timedelta) -> Delivery | None:
        return await self.part(delivery.workflow, delivery.limit).extend(delivery, within)

    async def cancel(self, workflow: str) -> int:
        check_workflow(workflow)
        return sum(await asyncio.gather(*(part.cancel(workflow) for part in self.parts)))

    async def wake_due(self, now: datetime | None = None) -> datetime | None:
        """Every shard's sleepers due by `now` moved; the earliest deadline still sleeping."""
        return _earliest(await asyncio.gather(*(part.wake_due(now) for part in self.parts)))

    async def footprint(self) -> Footprint:
        return _footprint(await asyncio.gather(*(part.footprint() for part in self.parts)))

    async def backlog(self) -> Backlog:
        return _backlog(await asyncio.gather(*(part.backlog() for part in self.parts)))


class ShardedStreamScheduler(Sharded[RedisStreamScheduler], RedisStreamScheduler):
    """A `RedisStreamScheduler` made with `shards=N` (N > 1): one stream scheduler per shard
    (`parts`, the same consumer name in each shard's group) behind one (see the module doc).

    A blocking read over several streams may bring one entry of each stream that has one: the
    first is the delivery, the others wait in their shard for its next reads (they are this
    consumer's, so one not read again within a lease is taken over by `reclaiming`)."""

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
        consumer = consumer if consumer is not None else default_consumer()
        self._shard(
            tuple(
                RedisStreamScheduler(
                    redis=redis, namespace=namespace, lease=lease, consumer=consumer,
                    trim_every=trim_every, shards=shards, shard=i,
                )
                for i in range(check_shards(shards))
            ),
            namespace,
            redis,
        )
        self.trim_every, self.consumer = self.parts[0].trim_every, consumer
        self._waited = False

    async def regroup(self) -> None:
        await asyncio.gather(*(part.regroup() for part in self.parts))

    async def glance(self) -> Delivery | None:
        """Take one new entry, looking at the shards in this read's order, without waiting."""
        for part in self.ordered():
            found = await part.glance()
            if found is not None:
                return found
        return None

    async def next_ready(self, within: timedelta) -> Delivery | None:
        """A glance at each shard in turn, then a wait on all of them (see the module doc).
        A read after one that waited in vain waits at once: a blocking read is served at once
        when an entry is already there. On a cluster, what the reads an earlier wait ended
        brought comes first."""
        positive("within", within)
        if self._reads is not None and self._reads.leaving:
            found = await self._admitted(self.ordered(), _entries(await self._reads.left()))
            if found is not None:
                return found
        if not self._waited or any(
            part.reading.stale or part.reading.due for part in self.parts
        ):
            found = await self.glance()
            if found is not None:
                return found
        for block in self.blocks(within):
            self._waited = True
            # No longer than until some shard's parked wakeups may have room (a look then).
            found = await self._wait(min(part.reading.bound(block) for part in self.parts))
            if found is None and any(part.reading.due for part in self.parts):
                found = await self.glance()
            if found is not None:
                self._waited = False
                return found
        return None

    async def _wait(self, block: timedelta) -> Delivery | None:
        order = self.ordered()
        if self._reads is None:
            streams = {level: ">" for part in order for level in part.reading.levels}
            reply = await self.regrouped(
                self._redis.xreadgroup, GROUP, self.consumer, streams, count=1,
                block=max(to_ms(block), 1),
            )
            return await self._admitted(order, read_replies(reply))

        ms = max(to_ms(block), 1)
        reads = [
            Read(part.ready, (
                "XREADGROUP", "GROUP", GROUP, self.consumer, "COUNT", 1, "BLOCK", ms, "STREAMS",
                *part.reading.levels, *(">" for _ in part.reading.levels),
            ))
            for part in order
        ]
        replies = await self.regrouped(self._reads.first, reads, block)
        return await self._admitted(order, _entries(replies))

    async def _admitted(
        self, order: list[RedisStreamScheduler], read: list[Entry]
    ) -> Delivery | None:
        """Each shard's share of a read, as its `admitted` takes it; the first found."""
        found: Delivery | None = None
        for part in order:
            mine = [entry for entry in read if entry.stream in part.reading.levels]
            if mine:
                taken, nudged = await part.reading.admitted(mine)
                if nudged and taken is None:
                    taken = await part.glance()  # a level made new: look at every level
                if found is None:
                    found = taken
                elif taken is not None:
                    part.reading.keep(taken)
        return found

    async def reclaiming(self, idle: timedelta) -> Reclaimed:
        """One lapsed delivery taken over, from the shards in this look's order; else how soon
        the quietest held one in any shard lapses."""
        positive("idle", idle)
        soonest: timedelta | None = None
        for part in self.ordered():
            found = await part.reclaiming(idle)
            if found.delivery is not None:
                return found
            if found.lapses_in is not None:
                soonest = found.lapses_in if soonest is None else min(soonest, found.lapses_in)
        return Reclaimed(None, soonest)

    async def trim(self) -> int:
        return sum(await asyncio.gather(*(part.trim() for part in self.parts)))


class ShardedSetScheduler(Sharded[RedisSetScheduler], RedisSetScheduler):
    """A `RedisSetScheduler` made with `shards=N` (N > 1): one set scheduler per shard
    (`parts`) behind one (see the module doc). A look takes from the first shard in its order
    with a visible member; an idle reader waits on every shard's doorbell at once."""

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
        self._shard(
            tuple(
                RedisSetScheduler(
                    redis=redis, namespace=namespace, lease=lease, poll=poll,
                    doorbell=doorbell, shards=shards, shard=i,
                )
                for i in range(check_shards(shards))
            ),
            namespace,
            redis,
        )
        self.poll = self.parts[0].poll
        #: Every shard's doorbell (None: polling alone).
        self.doorbells = (
            tuple(part.doorbell for part in self.parts if part.doorbell is not None)
            if doorbell else None
        )
        self.doorbell = None if self.doorbells is None else self.doorbells[0]
        self._quiet = None

    async def glance(self) -> tuple[Delivery | None, object]:
        """One look at each shard in this read's order until one has a visible member; with
        none, the ms until the earliest hidden member of any shard shows (None: none)."""
        hidden: float | None = None
        for part in self.ordered():
            found, shows = await part.glance()
            if found is not None:
                return found, None
            if shows is not None:
                ms = float(text(shows))
                hidden = ms if hidden is None else min(hidden, ms)
        return None, hidden

    async def next_ready(self, within: timedelta) -> Delivery | None:
        positive("within", within)
        if self.doorbells is None:
            async for _ in beats(self.poll, within):
                found, _hidden = await self.glance()
                if found is not None:
                    return found
            return None
        loop = asyncio.get_running_loop()
        end = loop.time() + within.total_seconds()
        first = self.parts[0]  # every shard waits by the same rules
        while True:
            found, hidden = await self.glance()
            if found is not None:
                return found
            left = end - loop.time()
            if left <= 0 or first.over(left, hidden):
                return None
            block, pause = first.wait(left, hidden)
            if block is None:
                await asyncio.sleep(pause)
            else:
                await self._ring(block)

    async def _ring(self, block: float) -> None:
        """Wait up to `block` seconds for a ring on any shard's doorbell."""
        assert self.doorbells is not None
        if self._reads is None:
            await self._redis.blpop(list(self.doorbells), timeout=block)
            return
        rings = [Read(doorbell, ("BLPOP", doorbell, block)) for doorbell in self.doorbells]
        await self._reads.first(rings, timedelta(seconds=block))

    def take_call(self) -> ScriptCall:
        raise TypeError("a sharded queue has no one take: its reads look at every shard")


RedisStreamScheduler.sharded = ShardedStreamScheduler
RedisSetScheduler.sharded = ShardedSetScheduler
