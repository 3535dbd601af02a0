"""Writes that wait for replicas: what `Acknowledged` asks, sent, and read from a URL.

`waited` sends one script and, right behind it on the same connection, `WAIT` (and
`WAITAOF`), because `WAIT` counts only the writes of the connection it arrives on; on a
cluster through `NodeWaits`, on a connection to the primary of the script's first key. `replicated`
reads the one `WAIT` behind a single node's batch of writes (`batching.ScriptBatcher`).
`read` makes the URL's `replicas` and `replicas_timeout_ms` into an `Acknowledged`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from durability.checks import positive, to_ms
from durability.redis.node_waits import NodeWaits

__all__ = [
    "MOST_REPLICAS", "Acknowledged", "NotAcknowledged", "held_for", "read", "replicated", "waited",
]

#: The most replicas a write may wait for: a URL asking more names a count no deployment has.
MOST_REPLICAS = 16


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


def held_for(want: Acknowledged) -> float:
    """How long (seconds) the server may hold one write's waits: `WAIT`, and `WAITAOF`."""
    return want.timeout.total_seconds() * (2 if want.aof else 1)


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


def read(ours: Mapping[str, str], url: str) -> Acknowledged | None:
    """`replicas=N` (a whole number, 0 to `MOST_REPLICAS`; 0 or absent: no waiting) and
    `replicas_timeout_ms` (how long each write waits, 1000 unless given; only with replicas),
    or a `ValueError` naming the option at fault."""
    given = ours.get("replicas")
    timeout_ms = ours.get("replicas_timeout_ms")
    if given is None:
        if timeout_ms is not None:
            raise ValueError(f"replicas_timeout_ms needs replicas=N beside it: {url!r}")
        return None
    if not given.isascii() or not given.isdigit():
        raise ValueError(f"replicas must be a whole number from 0 to {MOST_REPLICAS}, got"
                         f" {given!r} in {url!r}")
    count = int(given)
    if count > MOST_REPLICAS:
        raise ValueError(f"replicas must be at most {MOST_REPLICAS}, got {count} in {url!r}")
    timeout = timedelta(seconds=1)
    if timeout_ms is not None:
        try:
            timeout = timedelta(milliseconds=float(timeout_ms))
        except (ValueError, OverflowError):
            raise ValueError(f"replicas_timeout_ms must be a number of milliseconds, got"
                             f" {timeout_ms!r} in {url!r}") from None
        if not timeout > timedelta(0) or timeout.total_seconds() != timeout.total_seconds():
            raise ValueError(f"replicas_timeout_ms must be positive, got {timeout_ms!r}"
                             f" in {url!r}")
    if count == 0:
        return None
    return Acknowledged(replicas=count, timeout=timeout)


async def waited(client: Any, sent: AsyncScript, keys: Sequence[str], args: Sequence[Any],
                 want: Acknowledged, aof: Callable[[], Any] | None = None,
                 nodes: NodeWaits | None = None) -> Any:
    """Run `sent` and then `WAIT` (and `WAITAOF` when `aof` says the server has it) on one
    connection; the script's reply, or `NotAcknowledged` if too few replicas had it in time
    (the write was applied on the primary either way). A cluster's go through its `nodes`,
    which never send one without the other (see node_waits.py)."""
    waits: list[tuple[str, ...]] = [("WAIT", str(want.replicas), str(to_ms(want.timeout)))]
    if want.aof and aof is not None and await aof():
        waits.append(("WAITAOF", "1", str(want.replicas), str(to_ms(want.timeout))))
    if isinstance(client, RedisCluster) and nodes is None:
        raise TypeError("a cluster's acknowledged writes need its NodeWaits")
    for attempt in range(2):
        # EVALSHA by name: the script objects' helper would load and retry on its own.
        commands = [("EVALSHA", sent.sha, len(keys), *keys, *args), *waits]
        if nodes is not None:
            results = await nodes.send(str(keys[0]), commands)
        else:
            pipe = client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            results = await pipe.execute(raise_on_error=False)
        if isinstance(results[0], NoScriptError) and attempt == 0:
            # The server lost its script cache; nothing ran, so load and send again.
            await client.script_load(sent.script)
            continue
        if isinstance(results[0], Exception):
            raise results[0]
        _check(waits, results, want)
        return results[0]
    raise AssertionError("unreachable: the second attempt returns or raises")


def replicated(reply: Any, want: Acknowledged) -> NotAcknowledged | None:
    """What a `WAIT` behind a batch of writes answered, as the error each write that ran
    gets (None: enough replicas have them)."""
    if isinstance(reply, Exception):
        return NotAcknowledged("WAIT", want.replicas, 0, refused=str(reply))
    got = int(reply)
    return None if got >= want.replicas else NotAcknowledged("WAIT", want.replicas, got)


def _check(waits: list[tuple[str, ...]], results: list[Any], want: Acknowledged) -> None:
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
