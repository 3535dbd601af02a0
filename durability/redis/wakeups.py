"""`Wakeups`: a scheduler's wakeups sent so that they wait for replicas, as the checkpoint
writes of an `Acknowledged` checkpointer do, so an `arrive` or `deliver` acknowledged to its
caller has its record and its wakeup on a replica: a master that dies after answering loses
neither (`RedisDurable` uses it).
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript

from durability.redis.batching import ScriptBatcher
from durability.redis.lua import script
from durability.redis.node_waits import NodeWaits
from durability.redis.replicas import Acknowledged, held_for, waited
from durability.redis.sharded import Sharded
from durability.values import Limit

__all__ = ["Wakeups"]


class Wakeups:
    """A scheduler's wakeups, each returning once the replicas have it: on a single node a
    turn's wakeups share one pipeline and one `WAIT` (`batching.ScriptBatcher`), on a cluster
    each is a pipeline of its own with its `WAIT` (`replicas.waited`)."""

    __slots__ = ("_batcher", "_client", "_nodes", "_scheduler", "_scripts", "_want")

    def __init__(self, client: Any, scheduler: Any, want: Acknowledged) -> None:
        self._client, self._scheduler, self._want = client, scheduler, want
        self._scripts: dict[str, AsyncScript] = {}
        cluster = isinstance(client, RedisCluster)
        self._batcher = None if cluster or want.aof else ScriptBatcher(client, want)
        self._nodes = NodeWaits(client, held_for(want)) if cluster else None

    async def wake(self, workflow: str, *, priority: int = 0, limit: Limit | None = None) -> None:
        """`make_ready(workflow, ...)`, returning once `want.replicas` replicas have it. On a
        sharded queue a limited wakeup is written and merged as `make_ready` does it (the
        merge after it is not waited for: a wakeup it fails to withdraw is one extra pass)."""
        scheduler = there = self._scheduler
        if limit is not None and isinstance(scheduler, Sharded):
            there = await scheduler.placed(workflow, limit)
        call = there.wakeup_call(workflow, priority=priority, limit=limit)
        found = self._scripts.get(call.name)
        if found is None:
            found = self._scripts[call.name] = script(self._client, call.name)
        if self._batcher is not None:
            await self._batcher.run(found, call.keys, call.args)
        else:
            await waited(self._client, found, call.keys, call.args, self._want, nodes=self._nodes)
        if there is not scheduler:
            await scheduler.merged_home(workflow, priority, limit, there)

    async def close(self) -> None:
        """End the batches under way."""
        if self._batcher is not None:
            await self._batcher.close()
        if self._nodes is not None:
            await self._nodes.close()
