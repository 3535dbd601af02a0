"""`RedisDurable`: the moves that cross the checkpoint and the queue, one script each.

On a single Redis node a script may touch any key, so the pairs `Durable` promises in order
run as one script (`shared/joined_template.lua` with a checkpoint body and then a scheduler
body): `arrive`, `deliver`, `finish`, `finish_settled`, and `take` (the queue's read, then
`claim.lua`). On a cluster, with `Acknowledged`, or over two clients they fall back to two
calls in order, as `SplitDurable` makes them (a cluster's pass ends in two scripts, not three).

The decision not to undo: one script, not a two-command pipeline. A pipeline does not stop at
an error, so a refused write would still be followed by its wakeup; `RedisDurable` says more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from redis.asyncio.cluster import RedisCluster

from durability.checks import positive
from durability.redis.checkpointer import RedisCheckpointer
from durability.redis.joining import Joined
from durability.redis.lua import ScriptCall
from durability.redis.marker import Marker
from durability.redis.policies import policy_text
from durability.redis.set_scheduler import RedisSetScheduler
from durability.redis.sharded import Sharded
from durability.redis.stream_scheduler import GLANCE, RedisStreamScheduler
from durability.redis.taking import Taker, claim_each, read_many
from durability.redis.wakeups import Wakeups
from durability.split import SplitDurable
from durability.storekit.outage import Unanswered, delivery_unknown, outcome_unknown
from durability.storekit.traffic import Traffic
from durability.values import Delivery, Entry, Limit, Pass, Recorded, Taken

__all__ = ["MOST_TAKEN", "RedisDurable"]

#: The most workflows one `take_up_to` takes: a worker's free slots, up to this.
MOST_TAKEN = 64


async def _joined_wake(
    scripts: Joined,
    scheduler: RedisStreamScheduler | RedisSetScheduler,
    write: ScriptCall,
    workflow: str,
    priority: int,
    limit: Limit | None,
) -> Any:
    """`write` and then the wakeup, as one script; `write`'s reply. On a sharded queue a limited
    wakeup is written where `make_ready` would write it, and the workflow's own shard is merged
    after, as `make_ready` merges it (`Sharded.placed`, `Sharded.merged_home`)."""
    sharded = scheduler if limit is not None and isinstance(scheduler, Sharded) else None
    there = scheduler if sharded is None else await sharded.placed(workflow, limit)
    reply = await scripts.run(write, there.wakeup_call(workflow, priority=priority, limit=limit))
    if sharded is not None:
        await sharded.merged_home(workflow, priority, limit, there)
    return reply


class RedisDurable(SplitDurable):
    """A `Durable` over a `RedisCheckpointer` and a Redis scheduler: `arrive`, `deliver` and
    `finish` are one round trip each when both share one client to a single node.

    | move | one script | two calls (a cluster, `Acknowledged`, two clients) |
    |---|---|---|
    | `arrive` | `supply.lua`, then the scheduler's wakeup | `supply`, then `make_ready` |
    | `deliver` | `append.lua`, then the scheduler's wakeup | `append`, then `make_ready` |
    | `finish` | `release.lua`, then the scheduler's done | `release`, then `done` |
    | `finish_settled` | `settle`, `release`, the done (`settled_template.lua`) | see below |
    | `take` | the scheduler's read (not blocking), then `claim.lua` | `next_ready`, `claim` |

    With `Acknowledged` the wakeup of `arrive` and `deliver` waits for the replicas too
    (`wakeups.Wakeups`); `finish`'s done does not: a lost done is one extra pass. A limited
    wakeup on a sharded queue merges across shards as `make_ready`'s does (`_joined_wake`).

    `take` tries the one script first; with nothing there it waits in a pipeline that ends in it
    (the stream's blocking read, the set's doorbell: `taking.Taker`), so a woken worker starts its
    pass one round trip after the wakeup lands. Without the doorbell the set polls on its beat.

    Every script goes through the checkpointer's `ScriptBatcher`: those that concurrent passes ask
    for in one turn of the event loop travel as one pipeline.

    A script, not a two-command pipeline: a pipeline goes on past an error, so a refused write
    would still be followed by its wakeup; in one script the error ends it first. Every value is
    encoded and every id checked before it is sent.

    On a cluster the workflow's keys and the queue's keys lie in different slots (the workflow id
    and the namespace are different hash tags), which no one script or ordered pipeline can span,
    so the moves fall back to two calls in order, as `SplitDurable` does; so do a checkpointer
    whose writes wait for replicas (`WAIT` must follow the write it counts) and a checkpointer and
    scheduler on different clients (different servers, perhaps). The standings and the queue do
    share a slot (the namespace's tag, or the workflow's shard's), so on a cluster a completed
    pass ends in two scripts, in order: `end_release.lua` on the workflow's slot, and only if it
    was still the pass's, the standing and the done as one (`stood_template.lua`); a pass that
    sleeps or waits ends in `release.lua`, then that same script (else: the three calls); a take of
    many on a queue of one shard reads them in one script (`read_many_template.lua`) and sends
    their claims together, one pipeline a node.
    """

    #: A worker reads as soon as a slot frees (`worker.loops.reader`): with its finishes.
    reads_with_finishes = True

    __slots__ = (
        "_busy", "_clustered", "_joined", "_redis_checkpointer", "_redis_scheduler", "_scripts",
        "_taker", "_wakeups",
    )

    def __init__(
        self,
        checkpointer: RedisCheckpointer,
        scheduler: RedisStreamScheduler | RedisSetScheduler,
        traffic: Traffic | None = None,
    ) -> None:
        if checkpointer.shards != scheduler.shards:
            raise ValueError(
                f"the checkpointer has shards={checkpointer.shards} and the scheduler"
                f" shards={scheduler.shards}: a namespace's standings and queue are split alike"
            )
        super().__init__(checkpointer, scheduler, traffic)
        self._redis_checkpointer = checkpointer
        self._redis_scheduler = scheduler
        client = checkpointer.redis
        self._joined = (
            client is scheduler.redis
            and not isinstance(client, RedisCluster)
            and checkpointer.acknowledged is None
        )
        if client is scheduler.redis:
            # The queue's scripts ride the checkpointer's batches: one pipeline per node a turn.
            scheduler.share(checkpointer.batcher)
        # One client to a cluster: a pass's end is the ending and release on the workflow's
        # slot, then the standing and the done in one script on the queue's (they share the
        # namespace's tags, or its shards': `stood_template.lua`); a take of many is one script.
        self._clustered = (
            client is scheduler.redis
            and isinstance(client, RedisCluster)
            and checkpointer.acknowledged is None
            and checkpointer.namespace == scheduler.namespace
        )
        self._scripts = Joined(checkpointer)
        # A sharded queue reads every shard (sharded.py): its take is the read, then the claim.
        taking = self._joined and scheduler.shards == 1
        self._taker = Taker(checkpointer, scheduler, self._scripts) if taking else None
        self._busy = False  # the last `take_up_to` that looked found work
        # Where writes wait for replicas, so does the wakeup an arrive or deliver answers for:
        # a record on the replica with its wakeup lost would be a workflow nobody runs.
        want = checkpointer.acknowledged
        self._wakeups = None if want is None else Wakeups(scheduler.redis, scheduler, want)

    async def close(self) -> None:
        """End what this durable, its queue and its checkpointer started (not the client)."""
        if self._taker is not None:
            await self._taker.close()
        if self._wakeups is not None:
            await self._wakeups.close()
        if isinstance(self._redis_scheduler, Sharded):
            await self._redis_scheduler.close()
        await self._redis_checkpointer.close()

    @property
    def marker(self) -> Marker:
        """The scheduler's wipe watch: `marker.wipes`, `marker.last_wipe`, `marker.on_wipe`."""
        return self._redis_scheduler.marker

    @property
    def joined(self) -> bool:
        """Whether `arrive`, `deliver` and `finish` each run as one script (else two calls)."""
        return self._joined

    async def arrive(
        self, workflow: str, key: str, value: object, *, priority: int = 0,
        limit: Limit | None = None,
    ) -> Recorded:
        """Supply `key` and wake the workflow at `priority` under `limit` (one script when
        joined, else the two calls in order: a lost answer means the same as there)."""
        policy_text(priority, limit)  # checked before anything is sent
        try:
            if not self._joined:
                recorded = await self._redis_checkpointer.supply(workflow, key, value)
                await self._wake(workflow, priority, limit)
                return recorded
            write, encoded = self._redis_checkpointer.calls.supply(workflow, key, value)
            reply = await _joined_wake(
                self._scripts, self._redis_scheduler, write, workflow, priority, limit
            )
        except Unanswered as error:
            raise outcome_unknown(error, "arrive", workflow, key) from error.__cause__
        return self._redis_checkpointer.calls.supplied(reply, encoded)

    async def deliver(
        self, workflow: str, value: object, *, priority: int = 0, limit: Limit | None = None
    ) -> Entry:
        """Append `value` to the inbox and wake the workflow at `priority` under `limit`."""
        policy_text(priority, limit)
        try:
            if not self._joined:
                entry = await self._redis_checkpointer.append(workflow, value)
                await self._wake(workflow, priority, limit)
                return entry
            write, encoded = self._redis_checkpointer.calls.append(workflow, value)
            reply = await _joined_wake(
                self._scripts, self._redis_scheduler, write, workflow, priority, limit
            )
        except Unanswered as error:
            raise delivery_unknown(error, workflow) from error.__cause__
        return self._redis_checkpointer.calls.appended(reply, encoded)

    async def _wake(self, workflow: str, priority: int, limit: Limit | None) -> None:
        """The wakeup of a move made as two calls: waiting for the replicas if the
        checkpointer's writes do (`wakeups.Wakeups`)."""
        if self._wakeups is not None:
            await self._wakeups.wake(workflow, priority=priority, limit=limit)
        elif priority == 0 and limit is None:  # a scheduler of one's own may not take them
            await self._redis_scheduler.make_ready(workflow)
        else:
            await self._redis_scheduler.make_ready(workflow, priority=priority, limit=limit)

    async def finish(self, holder: Pass, delivery: Delivery) -> None:
        if not self._joined:
            await super().finish(holder, delivery)
            return
        release = self._redis_checkpointer.calls.release(holder)
        done = self._redis_scheduler.done_call(delivery)
        # Sent again after a lost group, the release part runs twice: it is idempotent.
        await self._redis_scheduler.regrouped(self._scripts.run, release, done)

    async def finish_settled(
        self, holder: Pass, delivery: Delivery, state: str, detail: Mapping[str, object]
    ) -> bool:
        """The standing, the release and the done as one script (`settled_template.lua`) when
        joined; on a cluster the release, then `_stood`; else the three in order."""
        if self._clustered:
            # The release first: a pass claiming in between stands under a newer token, which
            # this standing leaves alone; standing (and done) first, a wakeup taken then would
            # meet the claim and wait a `contended`.
            stand = self._redis_checkpointer.calls.settle(holder, state, detail)  # checked first
            await self._redis_checkpointer.release(holder)
            return await self._stood(stand, delivery)
        if not self._joined:
            return await super().finish_settled(holder, delivery, state, detail)
        release = self._redis_checkpointer.calls.release(holder)
        stand = self._redis_checkpointer.calls.settle(holder, state, detail)
        done = self._redis_scheduler.done_call(delivery)
        script = self._scripts.settled(release.name, done.name)
        keys = [*release.keys, *stand.keys, *done.keys]
        args = [len(release.args), len(stand.args), *release.args, *stand.args, *done.args]
        # Sent again after a lost group, the standing and the release run twice: each is
        # idempotent under the same token.
        batcher = self._redis_checkpointer.batcher
        reply = await self._redis_scheduler.regrouped(batcher.queue, script, keys, args)
        return bool(int(reply[1]))

    async def finish_ended(
        self,
        holder: Pass,
        delivery: Delivery,
        key: str,
        value: object,
        state: str,
        detail: Mapping[str, object],
    ) -> bool:
        """The ending (under the pass's token), the release, the standing and the done as one
        script (`ended_template.lua`) when joined; else `end_release.lua` alone, then the
        standing on the namespace's slot, then the done (so on a cluster a status may read the
        standing from before the pass for a moment after its claim is released)."""
        ending = self._redis_checkpointer.end_release(holder, key, value)
        if self._clustered:  # then the standing and the done: one script on the queue's slot
            stand = self._redis_checkpointer.calls.settle(holder, state, detail)  # checked first
            if not int(await self._redis_checkpointer.run_call(ending)):
                return False
            await self._stood(stand, delivery)
            return True
        if not self._joined:
            if not int(await self._redis_checkpointer.run_call(ending)):
                return False
            await self._redis_checkpointer.settle(holder, state, detail)
            await self._redis_scheduler.done(delivery)
            return True
        stand = self._redis_checkpointer.calls.settle(holder, state, detail)
        done = self._redis_scheduler.done_call(delivery)
        script = self._scripts.ended(done.name)
        keys = [*ending.keys, *stand.keys, *done.keys]
        args = [len(ending.args), len(stand.args), *ending.args, *stand.args, *done.args]
        batcher = self._redis_checkpointer.batcher
        reply = await self._redis_scheduler.regrouped(batcher.queue, script, keys, args)
        return bool(int(reply[0]))

    async def _stood(self, stand: ScriptCall, delivery: Delivery) -> bool:
        """The standing `stand` (made, so checked, before the pass's first write) and the done
        as one script on the queue's slot (`stood_template.lua`)."""
        done = self._redis_scheduler.done_call(delivery)
        script = self._scripts.stood(done.name)
        keys = [*stand.keys, *done.keys]
        args = [len(stand.keys), len(stand.args), *stand.args, *done.args]
        # Sent again after a lost group, the standing runs twice: idempotent under one token.
        batcher = self._redis_checkpointer.batcher
        return bool(int(await self._redis_scheduler.regrouped(batcher.queue, script, keys, args)))

    async def take_up_to(
        self, room: Callable[[], int], within: timedelta, budget: timedelta, alive: timedelta
    ) -> list[Taken]:
        """`take` for up to `room()` workflows (at most `MOST_TAKEN`) at once (`TakingMany`):
        when joined, one script takes and claims them all (`take_many_template.lua`); else the
        looks are sent in one turn (one pipeline a node) and then the claims. With nothing
        there, it waits as `take` waits, for one."""
        positive("within", within)
        wanted = max(1, min(room(), MOST_TAKEN))
        if self._taker is not None:
            return await self._taker.take_many(wanted, within, budget, alive)
        positive("budget", budget)
        positive("alive", alive)
        scheduler = self._redis_scheduler
        if self._clustered and scheduler.shards == 1:
            # One shard on a cluster: the reads in one script on its slot, then the claims.
            found = await read_many(scheduler, self._scripts, wanted)
        else:
            found = await self._looks(wanted)
        if not found:
            if within <= GLANCE:
                return []
            taken = await super().take(within, budget, alive)
            return [] if taken is None else [taken]
        checkpointer = self._redis_checkpointer
        holders: list[Pass | None]
        if self._clustered:  # each claim a future of the turn's batches: no task apiece
            workflows = [delivery.workflow for delivery in found]
            holders = await claim_each(checkpointer, self._scripts, workflows, budget, alive)
        else:  # (a claim that waits for replicas is a call of its own)
            holders = await asyncio.gather(
                *(checkpointer.claim(delivery.workflow, budget, alive) for delivery in found)
            )
        return [Taken(delivery, holder) for delivery, holder in zip(found, holders, strict=True)]

    async def _looks(self, wanted: int) -> list[Delivery]:
        # After a read that found nothing, one look first: an idle worker's every read would
        # otherwise send a look per free slot (and a sharded look visits every shard).
        many = wanted if self._busy else 1
        looks = await asyncio.gather(*(self._glance() for _ in range(many)), return_exceptions=True)
        found = [look for look in looks if isinstance(look, Delivery)]
        self._busy = bool(found)
        if not found:
            failed = [look for look in looks if isinstance(look, BaseException)]
            if failed:
                raise failed[0]
        return found

    async def _glance(self) -> Delivery | None:
        scheduler = self._redis_scheduler
        if isinstance(scheduler, RedisSetScheduler):
            return (await scheduler.glance())[0]
        return await scheduler.glance()

    async def take(self, within: timedelta, budget: timedelta, alive: timedelta) -> Taken | None:
        """The read and the claim in one script a look when joined (`taking.Taker`), else
        `next_ready` then `claim` (`SplitDurable.take`)."""
        positive("within", within)
        if self._taker is None:
            return await super().take(within, budget, alive)
        return await self._taker.take(within, budget, alive)
