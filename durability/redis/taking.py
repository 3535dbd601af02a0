"""`Taker`: `RedisDurable.take` when both halves share one client to one node: the queue's
read and the claim in one script, and between empty looks a wait that ends in that script.

On the stream the wait is one pipeline on a connection kept for it (a `SharedConnection`): a
blocking `XREADGROUP` under a waiting consumer of its own, and right behind it
`stream_took.lua`, which Redis runs as soon as the read is served. On the set with its doorbell
it is a `BLPOP` on the doorbell and the look behind it; without the doorbell the look polls on
the scheduler's beat. A take that may wait only a few milliseconds never blocks (`GLANCE`).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from durability.cancelling import stop_if_cancelled
from durability.checks import to_ms
from durability.redis.checkpointer import RedisCheckpointer
from durability.redis.joining import Joined
from durability.redis.marker import lost_group
from durability.redis.namespace import text
from durability.redis.set_scheduler import RedisSetScheduler, taken_delivery
from durability.redis.shared_connection import SharedConnection
from durability.redis.stream_levels import taken_entry
from durability.redis.stream_scheduler import FIELD, GLANCE, GROUP, RedisStreamScheduler
from durability.values import Delivery, Pass, Taken
from durability.waits import beats

__all__ = ["GLANCE", "Taker", "claim_each", "delivery_of", "read_many"]



class Taker:
    """Takes and claims for one joined `RedisDurable` (see the module doc). It remembers
    whether the last read found the queue empty and waited: the next read then waits at once
    rather than first looking without waiting (which would cost a round trip)."""

    __slots__ = (
        "_hidden_at",
        "_joined",
        "_redis_checkpointer",
        "_redis_scheduler",
        "_waited",
        "_waiting_connection",
    )

    def __init__(
        self,
        checkpointer: RedisCheckpointer,
        scheduler: RedisStreamScheduler | RedisSetScheduler,
        joined: Joined,
    ) -> None:
        self._redis_checkpointer = checkpointer
        self._redis_scheduler = scheduler
        self._joined = joined
        self._waited = False
        # On the set: when (loop time) the earliest hidden member shows, as the last empty
        # look said; None if nothing was hidden.
        self._hidden_at: float | None = None
        # The connection a waiting take blocks on (the stream's XREADGROUP, the set's BLPOP),
        # kept apart from the batcher's: a blocked read holds up every command written behind
        # it. (It opens on first use.)
        client = checkpointer.redis
        waits = isinstance(scheduler, RedisStreamScheduler) or scheduler.doorbell is not None
        self._waiting_connection = (
            SharedConnection(client.connection_pool)
            if waits and not isinstance(client, RedisCluster)  # (joined: never a cluster)
            else None
        )

    async def close(self) -> None:
        """Stop reading the connection kept for waiting (see `SharedConnection.close`)."""
        if self._waiting_connection is not None:
            await self._waiting_connection.close()

    async def take(self, within: timedelta, budget: timedelta, alive: timedelta) -> Taken | None:
        """`Durable.take` in one script a look (see the module doc); `within` is checked."""
        claim_args = self._redis_checkpointer.calls.claim_args(budget, alive)
        scheduler = self._redis_scheduler
        read = scheduler.take_call()
        script = self._joined.take(read.name)
        batcher = self._redis_checkpointer.batcher
        prefix = self._redis_checkpointer.prefix
        keys, script_args = read.keys, [len(read.args), *read.args, prefix, *claim_args]
        if within <= GLANCE:
            reply = await self._redis_scheduler.regrouped(batcher.queue, script, keys, script_args)
            return self._taken(reply, alive) if self._took(reply) else None
        if isinstance(scheduler, RedisStreamScheduler):
            if not self._waited or scheduler.reading.stale or scheduler.reading.due:
                reply = await scheduler.regrouped(batcher.queue, script, keys, script_args)
                if self._took(reply):
                    return self._taken(reply, alive)
            return await self._wait_and_take(scheduler, within, alive, claim_args)
        if scheduler.doorbell is not None:
            return await self._ring_and_take(
                scheduler, within, alive, script, list(keys), script_args
            )
        # Polled: every look is the one script, on the scheduler's beat.
        async for _ in beats(scheduler.poll, within):
            reply = await batcher.run(script, keys, script_args)
            stop_if_cancelled()
            if reply[0]:
                return self._taken(reply, alive)
        return None

    async def take_many(
        self, k: int, within: timedelta, budget: timedelta, alive: timedelta
    ) -> list[Taken]:
        """Up to `k` workflows taken and claimed in one script (`take_many_template.lua`); with
        none there, a wait as `take` waits, which takes one."""
        claim_args = self._redis_checkpointer.calls.claim_args(budget, alive)
        scheduler = self._redis_scheduler
        read = scheduler.take_call()
        script = self._joined.take_many(read.name)
        prefix = self._redis_checkpointer.prefix
        args = [k, len(read.args), *read.args, prefix, *claim_args]
        batcher = self._redis_checkpointer.batcher
        reply = await scheduler.regrouped(batcher.queue, script, read.keys, args)
        if reply and isinstance(reply[0], list):
            self._waited = False
            if isinstance(scheduler, RedisStreamScheduler):
                scheduler.reading.took(reply[-1][0])
            return [self._taken(pair, alive) for pair in reply]
        if isinstance(scheduler, RedisStreamScheduler):
            scheduler.reading.took(reply)
        if within <= GLANCE:
            return []
        if isinstance(scheduler, RedisSetScheduler) and reply:
            scheduler.looked(reply)  # the marker an empty look read, and when to look again
            hidden = reply[1]
            now = asyncio.get_running_loop().time()
            self._hidden_at = None if hidden is None else now + float(text(hidden)) / 1000
        self._waited = True  # this look found nothing: the take waits at once
        taken = await self.take(within, budget, alive)
        return [] if taken is None else [taken]

    def _took(self, reply: Any) -> bool:
        """Whether a take's reply took a workflow (the stream's also lists its levels)."""
        scheduler = self._redis_scheduler
        if isinstance(scheduler, RedisStreamScheduler):
            return scheduler.reading.took(reply[0] if reply and reply[0] else reply)
        return bool(reply and reply[0])

    def _taken(self, reply: Any, alive: timedelta) -> Taken:
        delivery = delivery_of(self._redis_scheduler, reply[0])
        holder = self._redis_checkpointer.calls.claimed(delivery.workflow, alive, reply[1])
        return Taken(delivery, holder)

    async def _wait_and_take(
        self,
        scheduler: RedisStreamScheduler,
        within: timedelta,
        alive: timedelta,
        claim_args: tuple[int, int, int],
    ) -> Taken | None:
        """Block for a new entry and claim its workflow in one round trip: the blocking read,
        under a consumer of its own, and right behind it on the same connection the script
        that hands what it read to the worker's consumer and claims it (`stream_took.lua`).
        Redis runs a connection's commands in order, so the script runs as the read is served.
        """
        script = self._joined.take("stream_took")
        waiter = f"{scheduler.consumer}~waiting"
        keys = [scheduler.ready]
        prefix = self._redis_checkpointer.prefix
        lease = to_ms(scheduler.lease)
        args: list[str | int] = [
            5, GROUP, scheduler.consumer, waiter, FIELD, lease, prefix, *claim_args
        ]
        shared = self._waiting_connection
        assert shared is not None  # a joined durable over a stream has one
        regrouped = False
        # Unsliced: the lane bounds the call by its block as well (`waits`).
        for block in scheduler.blocks(within, sliced=False):
            self._waited = True
            levels = scheduler.reading.levels
            read = (
                "XREADGROUP", "GROUP", GROUP, waiter, "COUNT", 1,
                "BLOCK", max(to_ms(scheduler.reading.bound(block)), 1),
                "STREAMS", *levels, *(">" for _ in levels),
            )
            took = ("EVALSHA", script.sha, len(keys), *keys, *args)
            # A take cancelled mid-wait closes the connection, which ends the blocked read
            # before it can hand an entry to a take that is gone.
            read, reply = await shared.execute(
                [read, took], drop_on_cancel=True, waits=block.total_seconds()
            )
            if lost_group(read) and not regrouped:
                # The server lost the queue (a wipe, or a read blocked when the key went): make
                # it again, once, and wait on in the time left. The script behind the read
                # failed the same way and is not looked at.
                regrouped = True
                await scheduler.regroup()
                continue
            if isinstance(read, Exception):
                raise read
            if isinstance(reply, NoScriptError):
                # The script cache was emptied: the read kept its entry pending for the waiting
                # consumer; the script, sent again alone (loading it), hands it over.
                reply = await script(keys=keys, args=args)
            elif isinstance(reply, Exception):
                raise reply
            if self._took(reply):
                self._waited = False
                return self._taken(reply, alive)
        return None

    async def _ring_and_take(
        self,
        scheduler: RedisSetScheduler,
        within: timedelta,
        alive: timedelta,
        script: AsyncScript,
        keys: list[str],
        args: list[Any],
    ) -> Taken | None:
        """Look, and between empty looks wait for the doorbell: a BLPOP and, right behind it on
        the same connection, the look (take and claim in one script), which Redis runs as soon
        as a ring or the block's end lets the BLPOP go. A wait too short to block for is a
        pause of at most `poll` (see `RedisSetScheduler.wait`). While it blocks, the scheduler
        answers its timer from the last look (`RedisSetScheduler.parked`)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + within.total_seconds()
        shared = self._waiting_connection
        assert shared is not None and scheduler.doorbell is not None
        reply: Any = None
        if not self._waited:
            reply = await self._redis_checkpointer.batcher.run(script, keys, args)
        while True:
            stop_if_cancelled()
            now = loop.time()
            if reply is not None:
                if reply[0]:
                    self._waited = False
                    return self._taken(reply, alive)
                scheduler.looked(reply)
                hidden_ms = reply[1]
                self._hidden_at = None if hidden_ms is None else now + float(text(hidden_ms)) / 1000
            left = end - now
            hidden = None if self._hidden_at is None else (self._hidden_at - now) * 1000
            if left <= 0 or scheduler.over(left, hidden):
                return None
            block, pause = scheduler.wait(left, hidden, sliced=False)  # the lane bounds it
            if block is None:
                await asyncio.sleep(pause)
                reply = await self._redis_checkpointer.batcher.run(script, keys, args)
                continue
            self._waited = True
            look = ("EVALSHA", script.sha, len(keys), *keys, *args)
            # Cancelled mid-wait, the connection is closed, ending the BLPOP before the look
            # behind it can claim a workflow for a take that is gone.
            with scheduler.parked(hidden):
                _, reply = await shared.execute(
                    [("BLPOP", scheduler.doorbell, f"{block:.3f}"), look],
                    drop_on_cancel=True,
                    waits=block,
                )
            if isinstance(reply, NoScriptError):  # the script cache was emptied: load it
                reply = await script(keys=keys, args=args)
            elif isinstance(reply, Exception):
                raise reply


def delivery_of(scheduler: RedisStreamScheduler | RedisSetScheduler, read: Any) -> Delivery:
    """The delivery one read of `scheduler`'s take part names (`stream_take.lua`,
    `set_take.lua`)."""
    if isinstance(scheduler, RedisStreamScheduler):
        # Read with ">" (or handed over): a first delivery, never a lapsed one.
        return taken_entry(read)
    return taken_delivery(read)


async def read_many(
    scheduler: RedisStreamScheduler | RedisSetScheduler, joined: Joined, k: int
) -> list[Delivery]:
    """Up to `k` workflows taken from `scheduler` (one shard) in one script on its slot
    (`read_many_template.lua`), not claimed: a cluster's take of many, whose claims go after,
    each on its workflow's own slot. None there: an empty list (on the set, the look's marker
    noted, as an empty look notes it)."""
    read = scheduler.take_call()
    script = joined.read_many(read.name)
    batcher = joined.batcher
    reply = await scheduler.regrouped(batcher.queue, script, read.keys, [k, *read.args])
    if reply and isinstance(reply[0], list):
        if isinstance(scheduler, RedisStreamScheduler):
            scheduler.reading.took(reply[-1])
        return [delivery_of(scheduler, one) for one in reply]
    if isinstance(scheduler, RedisStreamScheduler):
        scheduler.reading.took(reply)
    if isinstance(scheduler, RedisSetScheduler) and reply:
        scheduler.looked(reply)
    return []


async def claim_each(
    checkpointer: RedisCheckpointer,
    joined: Joined,
    workflows: list[str],
    budget: timedelta,
    alive: timedelta,
) -> list[Pass | None]:
    """`claim` for each of `workflows`, all queued in this turn (one pipeline a node) and
    awaited together, with no task each; if any failed, the first error is raised once every
    claim has answered. (For a checkpointer whose writes wait for no replicas.)"""
    args = checkpointer.calls.claim_args(budget, alive)
    script = joined.claim()
    batcher = checkpointer.batcher
    replies = await asyncio.gather(
        *(batcher.queue(script, checkpointer.keys(w), args) for w in workflows),
        return_exceptions=True,
    )
    for reply in replies:
        if isinstance(reply, BaseException):
            raise reply
    calls = checkpointer.calls
    return [calls.claimed(w, alive, reply) for w, reply in zip(workflows, replies, strict=True)]
