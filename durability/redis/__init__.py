"""The Redis stores: a checkpointer whose every guarantee is one Lua script, and the schedulers.

Import this subpackage only with the `redis` extra installed; `import durability` never needs it.

Every key lies under the namespace the store was opened with (`durability` unless given):
`{<ns>}:ready`, `{<ns>}:sleeping`, `{<ns>}:schedule`, `{<ns>}:doorbell` and `{<ns>}:marker`
(which notices a wipe of the server's data: marker.py) for the queue, `<ns>:workflow:{<id>}`,
`...:pass` and `...:order` for each workflow; `patterns(ns)` gives the two SCAN patterns that
find them all. Migrating: checkpoints written before this layout are `workflow:{<id>}...` in
every application; with the processes stopped, run `await move_checkpoints(redis, namespace)`
once (a rename per workflow, expiry kept), or in `redis-cli`, per workflow:
`RENAME workflow:{ID} NS:workflow:{ID}` and the same for `:pass` and `:order`.
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
from durability.redis.stream_scheduler import RedisStreamScheduler
from durability.redis.trimming import sweeping, trimming

__all__ = [
    "MAX_WORKFLOW",
    "Acknowledged",
    "LuaEffect",
    "Marker",
    "Moved",
    "NotAcknowledged",
    "RedisCheckpointer",
    "RedisDurable",
    "RedisSetScheduler",
    "RedisStreamScheduler",
    "Wiped",
    "hash_tag",
    "move_checkpoints",
    "patterns",
    "sweeping",
    "trimming",
    "workflow_keys",
    "workflow_tag",
]
