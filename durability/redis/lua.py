"""Loading the Lua scripts that make each Redis guarantee one atomic step.

Every script lives in a `.lua` file beside the Python that runs it, so it can be read and
diffed as Lua. `script(client, name)` reads `<name>.lua` from this package once (cached) and
registers it with the client: redis-py's script object sends `EVALSHA` and, on `NOSCRIPT`
(a restarted server, a `SCRIPT FLUSH`, a cluster node that never saw it), loads the text and
retries, so a script costs one round trip in the steady state.

`ScriptCall` is one script run described rather than sent: the checkpointer and the schedulers
hand these to `RedisDurable`, which joins two of them into one script (`joined.lua`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

__all__ = ["ScriptCall", "named", "script", "script_name", "source"]

#: Every script registered through this module, by digest: what `durability.Traffic` calls it.
_NAMES: dict[str, str] = {}


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """One run of `<name>.lua` with these KEYS and ARGV, not yet sent. `prelude` says whether
    the script is a checkpointer body (which runs after `prelude.lua`)."""

    name: str
    keys: tuple[str, ...]
    args: tuple[Any, ...]
    prelude: bool = False


@cache
def source(name: str, package: str = __package__ or "durability.redis") -> str:
    """The text of `<name>.lua` from `package` (default: this one), read once."""
    return files(package).joinpath(f"{name}.lua").read_text(encoding="utf-8")


def script(client: Any, name: str, package: str = __package__ or "durability.redis") -> AsyncScript:
    """`<name>.lua` registered with `client` (a `redis.asyncio` Redis or RedisCluster).

    Calling the result with `keys=` and `args=` runs it by digest, loading it on `NOSCRIPT`.
    """
    registered: AsyncScript = client.register_script(source(name, package))
    return named(registered, name)


def named(registered: AsyncScript, name: str) -> AsyncScript:
    """Remember `registered`'s digest as `name`, so a count of what was sent names it."""
    _NAMES[str(registered.sha)] = name
    return registered


def script_name(sha: object) -> str:
    """The name a script was registered under, by its digest (`EVALSHA ?` if unknown)."""
    digest = sha.decode("ascii") if isinstance(sha, bytes) else str(sha)
    return _NAMES.get(digest, "EVALSHA ?")
