"""`RedisDurable`: the moves that cross the checkpoint and the queue, one script each.

On a single Redis node a script may touch any key, so the pairs `Durable` promises in order
run as one script (`shared/joined_template.lua` with a checkpoint body and then a scheduler
body): `arrive`, `deliver`, `finish`, `finish_settled`, and `take` (the queue's read, then
`claim.lua`). On a cluster, with `Acknowledged`, or over two clients they fall back to two
calls in order, as `SplitDurable` makes them.

The decision not to undo: one script, not a two-command pipeline. A pipeline does not stop at
an error, so a refused write would still be followed by its wakeup; `RedisDurable` says more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, TypeVar

from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from durability.cancelling import stop_if_cancelled
from durability.checks import positive, to_ms
from durability.redis.checkpointer import RedisCheckpointer
from durability.redis.lua import ScriptCall, named, source
from durability.redis.marker import Marker, lost_group
from durability.redis.namespace import text
from durability.redis.set_scheduler import RedisSetScheduler, taken_delivery
from durability.redis.shared_connection import SharedConnection
from durability.redis.stream_scheduler import (
    FIELD,
    GROUP,
    RedisStreamScheduler,
    receipt_of,
)
from durability.split import SplitDurable
from durability.storekit.outage import Unanswered, delivery_unknown, outcome_unknown
from durability.storekit.traffic import Traffic
from durability.values import Delivery, Entry, Pass, Recorded, Taken
from durability.waits import beats

__all__ = ["RedisDurable"]

T = TypeVar("T")

#: A take asked to wait no longer than this only looks. Redis expires a blocked read's BLOCK
#: on its timer (every 1/hz seconds: 100 ms at the default hz 10), so a read that blocks for a
#: millisecond may sit there a hundred; the worker's extra readers, which only glance at the
#: queue, would each hold a blocked read that long.
_GLANCE = timedelta(milliseconds=5)


class RedisDurable(SplitDurable):
    """A `Durable` over a `RedisCheckpointer` and a Redis scheduler: `arrive`, `deliver` and
    `finish` are one round trip each when both share one client to a single node.

    | move | one script | two calls (a cluster, `Acknowledged`, two clients) |
    |---|---|---|
    | `arrive` | `supply.lua`, then the scheduler's wakeup | `supply`, then `make_ready` |
    | `deliver` | `append.lua`, then the scheduler's wakeup | `append`, then `make_ready` |
    | `finish` | `release.lua`, then the scheduler's done | `release`, then `done` |
    | `finish_settled` | `settle`, `release`, the done (`settled_template.lua`) | the three |
    | `take` | the scheduler's read (not blocking), then `claim.lua` | `next_ready`, `claim` |

    `take` tries the one script first (a busy worker starts each pass in one round trip). When it
    finds nothing, on the stream it waits in one pipeline on a connection kept for it (a
    `SharedConnection`): a blocking `XREADGROUP` under a waiting consumer of its own, and right
    behind it `stream_took.lua`, which Redis runs as soon as the read is served, handing the entry
    to the worker's consumer and claiming its workflow; so a woken worker also starts its pass one
    round trip after the wakeup lands, and after an empty wait the next take goes straight to that
    pipeline (an idle worker sends it once per `within`).
    A take that may wait only a few milliseconds never blocks (see `_GLANCE`). On the set
    scheduler with its doorbell (see set_scheduler.py) the take waits the same way: a `BLPOP` on the
    doorbell and right behind it the one script, which runs as soon as a ring (or the block's
    end) lets the read go, so a rung worker also starts its pass one round trip after the ring.
    Without the doorbell the take polls with the one script, on the scheduler's fixed beat
    (`durability.waits`), so a workflow found is also claimed in that round trip.

    Every script goes through the checkpointer's `ScriptBatcher`: those that concurrent passes ask
    for in one turn of the event loop travel as one pipeline.

    Why a script and not a two-command pipeline: a pipeline does not stop at an error, so a write
    the server refused (a flushed script cache, a key of the wrong type) would still be followed
    by its wakeup, a wakeup announcing a value that is not there. In one script an error in the
    first part ends it before the second runs, the order is kept by construction, and it is one
    command on one connection. Every value is encoded and every id checked before it is sent.

    On a cluster the workflow's keys and the queue's keys lie in different slots (the workflow id
    and the namespace are different hash tags), which no one script or ordered pipeline can span,
    so the moves fall back to two calls in order, as `SplitDurable` does; so do a checkpointer
    whose writes wait for replicas (`WAIT` must follow the write it counts) and a checkpointer and
    scheduler on different clients (different servers, perhaps).
    """

    __slots__ = (
        "_hidden_at",
        "_joined",
        "_redis_checkpointer",
        "_redis_scheduler",
        "_scripts",
        "_settled",
        "_waited",
        "_waiting_connection",
    )

    def __init__(
        self,
        checkpointer: RedisCheckpointer,
        scheduler: RedisStreamScheduler | RedisSetScheduler,
        traffic: Traffic | None = None,
    ) -> None:
        super().__init__(checkpointer, scheduler, traffic)
        self._redis_checkpointer = checkpointer
        self._redis_scheduler = scheduler
        client = checkpointer.redis
        self._joined = (
            client is scheduler.redis
            and not isinstance(client, RedisCluster)
            and checkpointer.acknowledged is None
        )
        self._scripts: dict[tuple[str, str], AsyncScript] = {}
        self._settled: dict[tuple[str, str], AsyncScript] = {}  # (release, done) -> settled
        # Whether the last read found the queue empty and waited: the next read then waits at
        # once rather than first looking without waiting (which would cost a round trip).
        self._waited = False
        # On the set: when (loop time) the earliest hidden member shows, as the last empty
        # look said; None if nothing was hidden.
        self._hidden_at: float | None = None
        # The connection a waiting take blocks on (the stream's XREADGROUP, the set's BLPOP),
        # kept apart from the batcher's: a blocked read holds up every command written behind
        # it. (It opens on first use.)
        waits = self._joined and (
            isinstance(scheduler, RedisStreamScheduler) or scheduler.doorbell is not None
        )
        self._waiting_connection = (
            SharedConnection(client.connection_pool)
            if waits and not isinstance(client, RedisCluster)  # (joined: never a cluster)
            else None
        )

    @property
    def marker(self) -> Marker:
        """The scheduler's wipe watch: `marker.wipes`, `marker.last_wipe`, `marker.on_wipe`."""
        return self._redis_scheduler.marker

    @property
    def joined(self) -> bool:
        """Whether `arrive`, `deliver` and `finish` each run as one script (else two calls)."""
        return self._joined

    async def arrive(self, workflow: str, key: str, value: object) -> Recorded:
        if not self._joined:  # two calls: SplitDurable says what a lost answer means
            return await super().arrive(workflow, key, value)
        try:
            write, encoded = self._redis_checkpointer.calls.supply(workflow, key, value)
            wakeup = self._redis_scheduler.wakeup_call(workflow)
            reply = await self._run(write, wakeup)
        except Unanswered as error:
            raise outcome_unknown(error, "arrive", workflow, key) from error.__cause__
        return self._redis_checkpointer.calls.supplied(reply, encoded)

    async def deliver(self, workflow: str, value: object) -> Entry:
        if not self._joined:
            return await super().deliver(workflow, value)
        try:
            write, encoded = self._redis_checkpointer.calls.append(workflow, value)
            wakeup = self._redis_scheduler.wakeup_call(workflow)
            reply = await self._run(write, wakeup)
        except Unanswered as error:
            raise delivery_unknown(error, workflow) from error.__cause__
        return self._redis_checkpointer.calls.appended(reply, encoded)

    async def finish(self, holder: Pass, delivery: Delivery) -> None:
        if not self._joined:
            await super().finish(holder, delivery)
            return
        release = self._redis_checkpointer.calls.release(holder)
        done = self._redis_scheduler.done_call(delivery)
        # Sent again after a lost group, the release part runs twice: it is idempotent.
        await self._redis_scheduler.regrouped(self._run, release, done)

    async def finish_settled(
        self, holder: Pass, delivery: Delivery, state: str, detail: Mapping[str, object]
    ) -> bool:
        """The standing, the release and the done as one script (`settled_template.lua`) when
        joined; else the three in that order (`SplitDurable.finish_settled`)."""
        if not self._joined:
            return await super().finish_settled(holder, delivery, state, detail)
        release = self._redis_checkpointer.calls.release(holder)
        stand = self._redis_checkpointer.calls.settle(holder, state, detail)
        done = self._redis_scheduler.done_call(delivery)
        script = self._settled_script(release.name, done.name)
        keys = [*release.keys, *stand.keys, *done.keys]
        args = [len(release.args), len(stand.args), *release.args, *stand.args, *done.args]
        # Sent again after a lost group, the standing and the release run twice: each is
        # idempotent under the same token.
        batcher = self._redis_checkpointer.batcher
        reply = await self._redis_scheduler.regrouped(batcher.run, script, keys, args)
        return bool(int(reply[1]))

    def _settled_script(self, release: str, done: str) -> AsyncScript:
        found = self._settled.get((release, done))  # every pass's path: one lookup
        if found is None:
            text_ = source("prelude") + (
                source("settled_template")
                .replace("--[[FIRST]]", source(release))
                .replace("--[[STAND]]", source("settle"))
                .replace("--[[THEN]]", source(done))
            )
            found = self._settled[(release, done)] = named(
                self._redis_checkpointer.redis.register_script(text_), f"{release}+settle+{done}"
            )
        return found

    async def take(self, within: timedelta, budget: timedelta, alive: timedelta) -> Taken | None:
        positive("within", within)
        if not self._joined:
            return await super().take(within, budget, alive)
        claim_args = self._redis_checkpointer.calls.claim_args(budget, alive)
        scheduler = self._redis_scheduler
        if isinstance(scheduler, RedisStreamScheduler):
            args: tuple[object, ...] = (GROUP, scheduler.consumer, FIELD)
            read = ScriptCall("stream_take", (scheduler.ready,), args)
        else:
            read = scheduler.take_call()
        script = self._take_script(read.name)
        batcher = self._redis_checkpointer.batcher
        prefix = self._redis_checkpointer.prefix
        keys, script_args = read.keys, [len(read.args), *read.args, prefix, *claim_args]
        if within <= _GLANCE:
            reply = await self._redis_scheduler.regrouped(batcher.run, script, keys, script_args)
            return self._taken(reply, alive) if reply and reply[0] else None
        if isinstance(scheduler, RedisStreamScheduler):
            if not self._waited:
                reply = await scheduler.regrouped(batcher.run, script, keys, script_args)
                if reply:
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

    def _taken(self, reply: Any, alive: timedelta) -> Taken:
        if isinstance(self._redis_scheduler, RedisStreamScheduler):
            # Read with ">" (or handed over): a first delivery, never a lapsed one.
            delivery = Delivery(text(reply[0][0]), receipt_of(text(reply[0][1]), 1))
        else:
            delivery = taken_delivery(reply[0])
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
        script = self._take_script("stream_took")
        waiter = f"{scheduler.consumer}~waiting"
        keys = [scheduler.ready]
        prefix = self._redis_checkpointer.prefix
        args: list[str | int] = [4, GROUP, scheduler.consumer, waiter, FIELD, prefix, *claim_args]
        shared = self._waiting_connection
        assert shared is not None  # a joined durable over a stream has one
        regrouped = False
        # Unsliced: the lane bounds the call by its block as well (`waits`).
        for block in scheduler.blocks(within, sliced=False):
            self._waited = True
            read = (
                "XREADGROUP", "GROUP", GROUP, waiter, "COUNT", 1, "BLOCK", max(to_ms(block), 1),
                "STREAMS", scheduler.ready, ">",
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
            if reply:
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

    def _take_script(self, read: str) -> AsyncScript:
        pair = (read, "claim")
        found = self._scripts.get(pair)
        if found is None:
            text_ = (
                source("take_template")
                .replace("--[[TAKE]]", source(read))
                .replace("--[[CLAIM]]", source("prelude") + source("claim"))
            )
            found = self._scripts[pair] = named(
                self._redis_checkpointer.redis.register_script(text_), f"{read}+claim"
            )
        return found

    async def _run(self, first: ScriptCall, then: ScriptCall) -> Any:
        """Run `first` (a checkpoint script) and then `then` (a scheduler script) as one script;
        return `first`'s reply. A NOSCRIPT reply means nothing ran: the script object loads the
        text and sends it again."""
        script = self._script(first, then)
        keys = [*first.keys, *then.keys]
        args = [len(first.args), *first.args, *then.args]
        return await self._redis_checkpointer.batcher.run(script, keys, args)

    def _script(self, first: ScriptCall, then: ScriptCall) -> AsyncScript:
        pair = (first.name, then.name)
        found = self._scripts.get(pair)
        if found is None:
            # The template reads the workflow's keys as KEYS[1..3] and hands the rest to `then`.
            if not first.prelude or len(first.keys) != 3 or then.prelude:
                raise AssertionError(f"cannot join {pair}: a checkpoint script goes first")
            text = (
                source("prelude")
                + source("joined_template")
                .replace("--[[FIRST]]", source(first.name))
                .replace("--[[THEN]]", source(then.name))
            )
            # Registered once per pair: the digest is computed here, not per call.
            found = self._scripts[pair] = named(
                self._redis_checkpointer.redis.register_script(text), f"{first.name}+{then.name}"
            )
        return found
