"""The Redis stores: a checkpointer whose every guarantee is one Lua script, and the schedulers.

Import this subpackage only with the `redis` extra installed; `import durability` never needs it.
"""
