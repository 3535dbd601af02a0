"""The Redis stores: a checkpointer whose every guarantee is one Lua script, and the schedulers.

Import this subpackage only with the `redis` extra installed; `import durability` never needs it.
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
from durability.redis.sortedset import RedisSetScheduler
from durability.redis.stream import RedisStreamScheduler
from durability.redis.trimming import trimming

__all__ = [
    "MAX_WORKFLOW",
    "Acknowledged",
    "LuaEffect",
    "NotAcknowledged",
    "RedisCheckpointer",
    "RedisDurable",
    "RedisSetScheduler",
    "RedisStreamScheduler",
    "hash_tag",
    "trimming",
    "workflow_keys",
    "workflow_tag",
]
