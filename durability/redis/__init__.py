"""The Redis stores: a checkpointer whose every guarantee is one Lua script, and the schedulers.

Import this subpackage only with the `redis` extra installed; `import durability` never needs it.

Every key lies under the namespace the store was opened with (`durability` unless given):
namespace.py names them, and `patterns(ns)` gives the SCAN patterns that find them all. A
queue split over shards (`shards=N`: shards.py, sharded.py) keeps each shard under a hash tag
of its own.
Checkpoints written before namespaces are moved under one by `move_checkpoints`
(migration.py), once, with the processes stopped.
"""

from durability.redis.checkpointer import (
    MAX_WORKFLOW,
    Acknowledged,
    NotAcknowledged,
    RedisCheckpointer,
    workflow_keys,
    workflow_tag,
)
from durability.redis.durable import RedisDurable
from durability.redis.effect import LuaEffect, hash_tag
from durability.redis.marker import Marker, Wiped
from durability.redis.migration import Moved, move_checkpoints
from durability.redis.namespace import patterns
from durability.redis.set_scheduler import RedisSetScheduler
from durability.redis.sharded import ShardedSetScheduler, ShardedStreamScheduler
from durability.redis.shards import MOST_SHARDS
from durability.redis.stream_scheduler import RedisStreamScheduler
from durability.redis.trimming import sweeping, trimming

__all__ = [
    "MAX_WORKFLOW",
    "MOST_SHARDS",
    "Acknowledged",
    "LuaEffect",
    "Marker",
    "Moved",
    "NotAcknowledged",
    "RedisCheckpointer",
    "RedisDurable",
    "RedisSetScheduler",
    "RedisStreamScheduler",
    "ShardedSetScheduler",
    "ShardedStreamScheduler",
    "Wiped",
    "hash_tag",
    "move_checkpoints",
    "patterns",
    "sweeping",
    "trimming",
    "workflow_keys",
    "workflow_tag",
]
