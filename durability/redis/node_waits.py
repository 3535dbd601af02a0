"""`NodeWaits`: a Redis Cluster's acknowledged writes, each sent with its `WAIT` on one
connection to the primary that holds the write's slot, and never one without the other.

The decision not to undo: they do not go through redis-py's cluster pipeline. Its retries send
again only what went unanswered, so when a primary died between the script's reply and
`WAIT`'s, the `WAIT` alone went again, on a new connection or to another node, where it counts
no write and answers at once: a write acknowledged that no replica had, lost in the failover.
Here a redirect (nothing ran) is sent again, whole, once the cluster's slots are learned anew;
a lost connection fails the write as a single node's would (it may have run).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import ConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import SlotNotCoveredError
from redis.exceptions import TimeoutError as RedisTimeoutError

from durability.redis.bounds import Lost, TimedOut, bound_kept_in, call_bound, where
from durability.redis.cluster_lanes import redirected
from durability.storekit.outage import Unanswered

__all__ = ["NodeWaits"]

#: How many times a write the cluster redirected (it did not run) is sent again, each after the
#: slots are learned anew and a pause that grows by `PAUSE`: a failover's promotion takes a
#: second or two, and `CLUSTERDOWN` answers until it is done.
REDIRECTS = 8
PAUSE = 0.1


class NodeWaits:
    """The acknowledged writes of one cluster client (see the module doc)."""

    __slots__ = ("_client", "_nodes", "_stale", "_waits")

    def __init__(self, client: RedisCluster, waits: float) -> None:
        self._client = client
        #: How long (seconds) the server may hold a write's waits on purpose.
        self._waits = waits
        self._nodes: dict[str, Redis] = {}
        self._stale = False

    async def send(self, key: str, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """The replies to `commands` (a write on `key`'s slot, then its waits), sent as one
        pipeline on one connection to that slot's primary; an error reply is its exception."""
        for attempt in range(REDIRECTS + 1):
            if self._stale:
                await self._learn()
            if not self._client.nodes_manager.slots_cache:  # a client not yet started
                await self._client.initialize()
            try:
                node = self._client.get_node_from_key(key)
            except SlotNotCoveredError:
                node = None
            if node is None:  # no primary known for the slot: a failover under way
                if attempt == REDIRECTS:
                    raise Lost(f"no primary of the Redis cluster holds the slot of {key!r}")
                self._stale = True
                await asyncio.sleep(PAUSE * (attempt + 1))
                continue
            pipe = self._node(node).pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            place = where(node.connection_kwargs)
            try:
                results: list[Any] = await pipe.execute(raise_on_error=False)
            except Unanswered:
                self._stale = True
                raise
            except RedisTimeoutError as error:
                self._stale = True
                raise TimedOut(f"Redis at {place} did not answer a write and its WAIT"
                               f" ({error})") from error
            except RedisConnectionError as error:
                self._stale = True
                raise Lost(f"Redis at {place} went away: {error}") from error
            if not redirected(results[0]) or attempt == REDIRECTS:
                return results
            self._stale = True  # not run there: the slot moved, or the cluster is failing over
            await asyncio.sleep(PAUSE * (attempt + 1))
        raise AssertionError("unreachable: the last attempt returns")

    def _node(self, node: Any) -> Redis:
        """A client of `node` alone, made once: its pool's connections are the node's own, with
        no retries (a write sent twice would be counted by a `WAIT` only once), and a read
        bound that leaves room for the waits."""
        found = self._nodes.get(node.name)
        if found is None:
            kwargs = dict(node.connection_kwargs)
            kwargs["retry"] = Retry(NoBackoff(), 0)
            bound = call_bound(kwargs)
            if bound is not None:  # the waits come on top of the bound, wherever it is kept
                kwargs[bound_kept_in(kwargs)] = bound + self._waits
            pool = ConnectionPool(connection_class=node.connection_class, **kwargs)
            found = self._nodes[node.name] = Redis(connection_pool=pool)
        return found

    async def _learn(self) -> None:
        """Ask the cluster where its slots live now (a failed look is left for the next)."""
        self._stale = False
        try:
            await self._client.nodes_manager.initialize()
        except Exception:
            self._stale = True

    async def close(self) -> None:
        """Close every node's connections."""
        nodes, self._nodes = list(self._nodes.values()), {}
        for node in nodes:
            with contextlib.suppress(Exception):
                await node.connection_pool.disconnect()

