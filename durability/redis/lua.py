"""Loading the Lua scripts that make each Redis guarantee one atomic step.

Every script is a `.lua` file in a folder of `scripts/` grouped by what it serves (see
`_folders`). A script is named by its file's stem alone, unique across the folders, so
`script(client, name)` and `source(name)` need no folder, and a count of what was sent names
the script as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

__all__ = ["ScriptCall", "command_name", "named", "script", "script_name", "source"]

#: Every script registered through this module, by digest: what `durability.Traffic` calls it.
_NAMES: dict[str, str] = {}


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """One run of `<name>.lua` with these KEYS and ARGV, not yet sent. `prelude` says whether
    the script is a checkpointer body (which runs after `prelude.lua`).

    The checkpointer and the schedulers hand these to `RedisDurable`, which joins two of them
    into one script (`shared/joined_template.lua`)."""

    name: str
    keys: tuple[str, ...]
    args: tuple[Any, ...]
    prelude: bool = False


@cache
def _folders(package: str) -> dict[str, Traversable]:
    """Each script of `package`'s `scripts/` folder by its stem (one walk, on first use).

    The folders group the scripts by what they serve: `checkpoint/` (the records, the claim,
    the ledger, and `prelude.lua`, the fence every checkpoint script starts with), `stream/`
    and `set/` (the two schedulers), `schedules/` (the timetable of `durability.schedules`),
    and `shared/` (what spans them: the templates
    `RedisDurable` fills with a checkpoint body and a queue body, and `footprint.lua`)."""
    found: dict[str, Traversable] = {}
    for folder in files(package).joinpath("scripts").iterdir():
        for entry in folder.iterdir() if folder.is_dir() else ():
            if entry.name.endswith(".lua"):
                stem = entry.name.removesuffix(".lua")
                if stem in found:
                    raise AssertionError(f"two scripts are named {stem!r}")
                found[stem] = entry
    return found


#: A line `-- include: <piece>` in a script stands for the text of `<piece>.lua` (a piece of
#: Lua several scripts share, such as `policy.lua`), put in its place when the script is read.
_INCLUDE = re.compile(r"^-- include: (\w+)$", re.MULTILINE)


@cache
def source(name: str, package: str = __package__ or "durability.redis") -> str:
    """The text of the script `name` (`scripts/*/<name>.lua`) from `package` (default: this
    one), read once, each `-- include: <piece>` line replaced by that piece's text."""
    found = _folders(package).get(name)
    if found is None:
        raise FileNotFoundError(f"no script {name}.lua under {package}'s scripts/")
    text = found.read_text(encoding="utf-8")
    return _INCLUDE.sub(lambda line: source(line.group(1), package), text)


def script(client: Any, name: str, package: str = __package__ or "durability.redis") -> AsyncScript:
    """`<name>.lua` registered with `client` (a `redis.asyncio` Redis or RedisCluster).

    Calling the result with `keys=` and `args=` runs it by digest, loading it on `NOSCRIPT`:
    redis-py's script object sends `EVALSHA` and, on `NOSCRIPT` (a restarted server, a
    `SCRIPT FLUSH`, a cluster node that never saw it), loads the text and retries, so a script
    costs one round trip in the steady state.
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


def command_name(args: tuple[Any, ...]) -> str:
    """A command's name for counting: its first word, or a script's name for EVALSHA."""
    first = args[0]
    if first == "EVALSHA" and len(args) > 1:  # every script a pass sends: asked first
        sha = args[1]
        return _NAMES.get(sha, "EVALSHA ?") if type(sha) is str else script_name(sha)
    name = (first.decode("ascii") if isinstance(first, bytes) else str(first)).upper()
    if name == "EVALSHA" and len(args) > 1:
        return script_name(args[1])
    return name
