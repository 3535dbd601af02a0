"""`Sender`: how a checkpointer's scripts reach the server: registered once each, then batched
with the turn's other calls (`ScriptBatcher`) or, when writes must be acknowledged
(`Acknowledged`), each sent with its `WAIT` (and `WAITAOF`) on the connection it ran on.

The decision not to undo: the acknowledged path is one pipeline per write, not the batcher's,
because `WAIT` counts the writes of the connection it arrives on and nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from durability.checks import positive, to_ms
from durability.redis.batching import ScriptBatcher
from durability.redis.lua import named, script, source

__all__ = ["Acknowledged", "Client", "NotAcknowledged", "Sender"]

log = logging.getLogger("durability.redis.checkpointer")

Client = Redis | RedisCluster

_EFFECT_SLOT = "--[[EFFECT]]"


@dataclass(frozen=True, slots=True)
class Acknowledged:
    """Make each checkpoint write return only once `replicas` replicas acknowledged it within
    `timeout` (`WAIT`), and, with `aof`, once the primary and those replicas fsynced it to
    their append-only files (`WAITAOF`, Redis 7.2+; on an older server a warning is logged
    once and only `WAIT` applies).

    `aof` needs `appendonly yes` on the primary (else every write raises `NotAcknowledged`)
    and on each replica counted. Under the default `appendfsync everysec` a `WAITAOF` waits
    for the next once-a-second fsync, so each write can take up to a second; under
    `appendfsync always` it answers as soon as the write is on disk."""

    replicas: int = 1
    timeout: timedelta = timedelta(seconds=1)
    aof: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int):
            raise TypeError("replicas must be an int")
        if self.replicas < 0:
            raise ValueError(f"replicas must not be negative, got {self.replicas}")
        positive("timeout", self.timeout)


class NotAcknowledged(RuntimeError):
    """A write reached the primary but not the durability `Acknowledged` asked for in time.

    The write may still survive (or may be lost in a failover); the caller was not promised it.
    `refused` is the server's error when it refused the `WAIT`/`WAITAOF` outright (then `got`
    is 0 and the error is also the exception's `__cause__`).
    """

    def __init__(self, what: str, wanted: int, got: int, *, refused: str | None = None) -> None:
        if refused is None:
            message = f"{what}: {got} of {wanted} acknowledgements before the timeout"
        else:
            message = f"{what} refused after the write was applied on the primary: {refused}"
        super().__init__(message)
        self.wanted = wanted
        self.got = got
        self.refused = refused


class Sender:
    """Sends one checkpointer's scripts on `redis` (see the module doc)."""

    __slots__ = ("_durable", "_effects", "_redis", "_scripts", "_version", "batcher")

    def __init__(self, redis: Client, durable: Acknowledged | None) -> None:
        self._redis = redis
        self._durable = durable
        self._scripts: dict[str, AsyncScript] = {}
        self._effects: dict[str, AsyncScript] = {}
        self._version: tuple[int, ...] | None = None
        #: Every script goes through it, but an acknowledged write (see the module doc).
        self.batcher = ScriptBatcher(redis)

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

    async def write(self, script: AsyncScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run a script that writes: batched, or acknowledged as `durable=` asks."""
        if self._durable is None:
            return await self.batcher.run(script, keys, args)
        return await self._acknowledged(script, keys, args, self._durable)

    async def read(self, script: AsyncScript, keys: Sequence[str]) -> Any:
        """Run a script that only reads: always batched."""
        return await self.batcher.run(script, keys, ())

    async def _acknowledged(
        self, script: AsyncScript, keys: Sequence[str], args: Sequence[Any], want: Acknowledged
    ) -> Any:
        waits: list[tuple[str, ...]] = [("WAIT", str(want.replicas), str(to_ms(want.timeout)))]
        if want.aof and await self._has_waitaof():
            waits.append(("WAITAOF", "1", str(want.replicas), str(to_ms(want.timeout))))
        # In a cluster the pipeline groups commands by node; naming the node that owns the
        # workflow's slot puts WAIT on the same connection as the script it must count.
        route: dict[str, Any] = {}
        if isinstance(self._redis, RedisCluster):
            route["target_nodes"] = self._redis.get_node_from_key(keys[0])
        for attempt in range(2):
            pipe = self._redis.pipeline(transaction=False)
            # EVALSHA by name: cluster pipelines block the evalsha() helper, not the command.
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            for wait in waits:
                pipe.execute_command(*wait, **route)
            results = await pipe.execute(raise_on_error=False)
            if isinstance(results[0], NoScriptError) and attempt == 0:
                # The server lost its script cache; nothing ran, so load and send again.
                await self._redis.script_load(script.script)
                continue
            if isinstance(results[0], Exception):
                raise results[0]
            _check_acknowledged(waits, results, want)
            return results[0]
        raise AssertionError("unreachable: the second attempt returns or raises")

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


def _check_acknowledged(
    waits: list[tuple[str, ...]], results: list[Any], want: Acknowledged
) -> None:
    """Raise `NotAcknowledged` unless the waits behind a write that ran say it has the
    acknowledgements `want` asks for."""
    for wait, result in zip(waits, results[1:], strict=True):
        if isinstance(result, Exception):
            # The script ran: a refused wait must not read as "nothing was written".
            wanted = want.replicas + (1 if wait[0] == "WAITAOF" else 0)
            raise NotAcknowledged(wait[0], wanted, 0, refused=str(result)) from result
    got = int(results[1])
    if got < want.replicas:
        raise NotAcknowledged("WAIT", want.replicas, got)
    if len(results) > 2:
        local, replicas = (int(n) for n in results[2])
        if local < 1:
            raise NotAcknowledged("WAITAOF (local fsync)", 1, local)
        if replicas < want.replicas:
            raise NotAcknowledged("WAITAOF (replica fsync)", want.replicas, replicas)
