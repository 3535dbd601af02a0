"""`Sender`: how a checkpointer's scripts reach the server: registered once each, then batched
with the turn's other calls (`ScriptBatcher`) or, when writes must be acknowledged
(`Acknowledged`), sent with a `WAIT` (and `WAITAOF`) on the connection they ran on.

The decision not to undo: an acknowledged write's `WAIT` travels on its own connection, because
`WAIT` counts the writes of the connection it arrives on and nothing else. On a single node a
turn's acknowledged writes share one pipeline and one `WAIT` (a batcher of their own); on a
cluster, or with `WAITAOF`, each write is a pipeline of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript

from durability.redis.batching import ScriptBatcher
from durability.redis.lua import named, script, source
from durability.redis.node_waits import NodeWaits
from durability.redis.replicas import Acknowledged, NotAcknowledged, held_for, waited

__all__ = ["Acknowledged", "Client", "NotAcknowledged", "Sender"]

log = logging.getLogger("durability.redis.checkpointer")

Client = Redis | RedisCluster

_EFFECT_SLOT = "--[[EFFECT]]"


class Sender:
    """Sends one checkpointer's scripts on `redis` (see the module doc)."""

    __slots__ = (
        "_durable", "_effects", "_nodes", "_redis", "_scripts", "_version", "_waiting", "batcher",
    )

    def __init__(self, redis: Client, durable: Acknowledged | None) -> None:
        self._redis = redis
        self._durable = durable
        self._scripts: dict[str, AsyncScript] = {}
        self._effects: dict[str, AsyncScript] = {}
        self._version: tuple[int, ...] | None = None
        #: Every script goes through it, but an acknowledged write (see the module doc).
        self.batcher = ScriptBatcher(redis)
        #: A turn's acknowledged writes, one pipeline and one WAIT (a single node, no WAITAOF).
        self._waiting = (ScriptBatcher(redis, durable) if durable is not None and not durable.aof
                         and not isinstance(redis, RedisCluster) else None)
        #: A cluster's acknowledged writes, each with its waits on one connection.
        self._nodes = (NodeWaits(redis, held_for(durable)) if durable is not None
                       and isinstance(redis, RedisCluster) else None)

    async def close(self) -> None:
        """End the batches under way (see `ScriptBatcher.close`)."""
        await self.batcher.close()
        if self._waiting is not None:
            await self._waiting.close()
        if self._nodes is not None:
            await self._nodes.close()

    @property
    def redis(self) -> Client:
        """The client every script is sent on."""
        return self._redis

    def script(self, name: str) -> AsyncScript:
        """A checkpoint script (`prelude.lua` then `name`), registered once."""
        found = self._scripts.get(name)
        if found is None:
            text = source("prelude") + source(name)
            found = self._scripts[name] = named(self._redis.register_script(text), name)
        return found

    def plain(self, name: str) -> AsyncScript:
        """A script that stands alone (the standings' scripts), registered once."""
        found = self._scripts.get(name)
        if found is None:
            found = self._scripts[name] = script(self._redis, name)
        return found

    def effect(self, body: str) -> AsyncScript:
        """`transact_template.lua` around an effect's `body`, registered once per body."""
        # Registering computes the digest, and the server caches the script by digest, so a
        # hot effect costs one EVALSHA like any other write.
        found = self._effects.get(body)
        if found is None:
            template = source("prelude") + source("transact_template")
            text = template.replace(_EFFECT_SLOT, body)
            found = self._effects[body] = named(self._redis.register_script(text), "transact")
        return found

    def write(
        self, script: AsyncScript, keys: Sequence[str], args: Sequence[Any]
    ) -> Awaitable[Any]:
        """Run a script that writes: batched, or acknowledged as `durable=` asks. (What to
        await, handed back rather than awaited here: a frame less on every pass's writes.)"""
        if self._durable is None:
            return self.batcher.queue(script, keys, args)
        if self._waiting is not None:
            return self._waiting.queue(script, keys, args)
        return self._acknowledged(script, keys, args, self._durable)

    def read(self, script: AsyncScript, keys: Sequence[str]) -> Awaitable[Any]:
        """Run a script that only reads: always batched."""
        return self.batcher.queue(script, keys, ())

    async def _acknowledged(
        self, script: AsyncScript, keys: Sequence[str], args: Sequence[Any], want: Acknowledged
    ) -> Any:
        return await waited(self._redis, script, keys, args, want, self._has_waitaof,
                            self._nodes)

    async def _has_waitaof(self) -> bool:
        if self._version is None:
            info = await self._redis.info("server")
            # A cluster client answers per node; the oldest node decides.
            found = [info] if "redis_version" in info else list(info.values())
            self._version = min(
                tuple(int(part) for part in str(node["redis_version"]).split(".")[:3])
                for node in found
            )
            if self._version < (7, 2):
                log.warning(
                    "Redis %s has no WAITAOF; acknowledged writes wait for replicas only",
                    ".".join(map(str, self._version)),
                )
        return self._version >= (7, 2)
