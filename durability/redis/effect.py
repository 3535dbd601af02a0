"""`LuaEffect`: a Redis write the checkpointer performs in the same script as its record.

A Lua body runs inside the record script, between the fence check and the `HSETNX` of its
result, so the effect and its record commit together or not at all: the only exactly-once
effect Redis can offer. That is why every key it touches must carry the workflow's hash tag
(see `LuaEffect`): one script, one slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from durability.values import Effect

__all__ = ["LuaEffect", "hash_tag"]


def hash_tag(key: str) -> str | None:
    """The part of `key` Redis Cluster hashes, if the key has a hash tag: the text between the
    first `{` and the first `}` after it, when that text is not empty."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end <= start + 1:
        return None
    return key[start + 1 : end]


@dataclass(frozen=True, slots=True)
class LuaEffect(Effect):
    """A Lua body over its own `KEYS` and `ARGV`, run and recorded in one script.

    The body is written as a script of its own would be. `args` are passed as its `ARGV`, as
    strings. Whatever it returns is recorded as `cjson.encode(result)` and comes back through
    the checkpointer's codec (so that codec must read JSON, as `JsonCodec` does).

    Every key the body touches must be declared in `keys`, and every declared key must carry
    the workflow's hash tag `{<id>}`: a script may only touch keys in one slot, and the
    workflow's own keys fix which. The checkpointer refuses any other key before it sends
    anything.

    Caveats the body owns: Redis does not roll back a script that errors midway, so a body
    should decide before it writes; `cjson` encodes an empty table as `{}` and numbers with 14
    significant digits.
    """

    body: str
    keys: Sequence[str]
    args: Sequence[str | int | float] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.body, str) or not self.body.strip():
            raise ValueError("a LuaEffect needs a non-empty Lua body")
        keys = tuple(self.keys)
        for key in keys:
            if not isinstance(key, str) or not key:
                raise TypeError(f"LuaEffect keys must be non-empty str, got {key!r}")
        args = tuple(self.args)
        for arg in args:
            if isinstance(arg, bool) or not isinstance(arg, (str, int, float)):
                raise TypeError(f"LuaEffect args must be str, int or float, got {arg!r}")
        # Frozen: normalise to tuples so an effect is a value (hashable, unchanged by its
        # caller mutating the list it was built from).
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "args", args)
