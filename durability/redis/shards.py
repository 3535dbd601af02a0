"""How a Redis queue is split into shards, each under a hash tag of its own.

A queue of one shard keeps the layout it always had: every key tagged `{<ns>}`. A queue of N
shards tags shard i's keys `{<ns>:<i>}`, so the shards spread over a cluster's slots and no one
node carries the whole queue. A workflow belongs to one shard for good, chosen by the CRC-32 of
its id (`shard_of`), so everything promised about one workflow is promised by one shard.

The decision not to undo: the count is part of the data. Another count would send a workflow's
wakeups to a shard its earlier ones are not in, so a namespace remembers the count it was made
with (`{<ns>}:shards`) and `check_layout` refuses to open it with another.
"""

from __future__ import annotations

import zlib
from typing import Any

from durability.redis.namespace import key

__all__ = [
    "MOST_SHARDS",
    "Rotation",
    "check_layout",
    "check_shards",
    "shard_index",
    "shard_of",
    "tags",
]

#: The most shards a queue may have: past this an idle worker's looks cost more than the
#: spread over a cluster's nodes can win back (every shard is looked at by every reader).
MOST_SHARDS = 256


def check_shards(shards: object) -> int:
    """`shards` if it is a whole number from 1 to `MOST_SHARDS`, else a precise error."""
    if isinstance(shards, bool) or not isinstance(shards, int):
        raise TypeError(f"shards must be an int, not {type(shards).__name__}: {shards!r}")
    if not 1 <= shards <= MOST_SHARDS:
        raise ValueError(f"shards must be 1 to {MOST_SHARDS}, got {shards}")
    return shards


def shard_index(shard: int | None, shards: int) -> int:
    """Which shard of `shards` a scheduler of one shard is (None: the only one, 0)."""
    if shard is None:
        return 0
    if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < shards:
        raise ValueError(f"shard must be 0 to {shards - 1} of shards={shards}, got {shard!r}")
    return shard


def tags(namespace: str, shards: int) -> tuple[str, ...]:
    """The hash tag of each shard: the namespace alone for one shard (the layout of a queue
    made before shards), else `<ns>:<i>`."""
    if check_shards(shards) == 1:
        return (namespace,)
    return tuple(f"{namespace}:{i}" for i in range(shards))


def shard_of(workflow: str, shards: int) -> int:
    """The shard `workflow` belongs to: the CRC-32 of its UTF-8 id, modulo `shards`. Stable
    across processes, machines and Python versions (unlike `hash`)."""
    if shards == 1:
        return 0
    return zlib.crc32(workflow.encode("utf-8", "surrogatepass")) % shards


class Rotation:
    """The order a reader looks at the shards in: each look starts one shard further on, so
    every shard comes first once every `shards` looks and none starves behind a busy one."""

    __slots__ = ("_next", "_shards")

    def __init__(self, shards: int) -> None:
        self._shards = shards
        self._next = 0

    def order(self) -> list[int]:
        start = self._next
        self._next = (start + 1) % self._shards
        return [(start + i) % self._shards for i in range(self._shards)]


async def check_layout(redis: Any, namespace: str, shards: int) -> None:
    """Refuse to open `namespace` with a count of shards other than the one it was made with
    (`{<ns>}:shards`, written by the first to prepare it; a queue made before shards has
    keys but no count, and counts as one shard)."""
    from durability.redis.lua import script

    evidence = [key(namespace, name) for name in ("ready", "schedule", "sleeping", "standings")]
    made = await script(redis, "shards")(keys=[key(namespace, "shards"), *evidence], args=[shards])
    made_with = int(made)
    if made_with != shards:
        raise ValueError(
            f"namespace {namespace!r} was made with shards={made_with}; it cannot be opened with"
            f" shards={shards} (every workflow's wakeups would move to another shard): open it"
            f" with shards={made_with}, or drain it and use a new namespace"
        )
