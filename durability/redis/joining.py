"""`Joined`: the scripts `RedisDurable` makes by joining a checkpoint script and a queue's,
registered once per pair and run through the checkpointer's batcher.

Templates under `scripts/shared/`: `joined_template` (a checkpoint write, then the queue's
wakeup or done), `settled_template` (the release, the standing, then the done),
`take_template` (the queue's read, then `claim.lua`) and `take_many_template` (that, k times);
on a cluster, where no script spans the two, `stood_template` (the standing, then the done)
and `read_many_template` (the read, k times). Each is made on first use and kept.
"""

from __future__ import annotations

from typing import Any

from redis.commands.core import AsyncScript

from durability.redis.batching import ScriptBatcher
from durability.redis.checkpointer import RedisCheckpointer
from durability.redis.lua import ScriptCall, named, source

__all__ = ["Joined"]


class Joined:
    """The joined scripts of one checkpointer's client (see the module doc)."""

    __slots__ = ("_checkpointer", "_ended", "_scripts", "_settled", "_stood")

    def __init__(self, checkpointer: RedisCheckpointer) -> None:
        self._checkpointer = checkpointer
        self._scripts: dict[tuple[str, str], AsyncScript] = {}
        self._settled: dict[tuple[str, str], AsyncScript] = {}  # (release, done) -> settled
        self._ended: dict[str, AsyncScript] = {}  # done -> the ending's finish
        self._stood: dict[str, AsyncScript] = {}  # done -> the standing, then the done

    @property
    def batcher(self) -> ScriptBatcher:
        """What every joined script is sent through: the checkpointer's batcher."""
        return self._checkpointer.batcher

    async def run(self, first: ScriptCall, then: ScriptCall) -> Any:
        """Run `first` (a checkpoint script) and then `then` (a scheduler script) as one script;
        return `first`'s reply. A NOSCRIPT reply means nothing ran: the script object loads the
        text and sends it again."""
        script = self.pair(first, then)
        keys = [*first.keys, *then.keys]
        args = [len(first.args), *first.args, *then.args]
        return await self._checkpointer.batcher.queue(script, keys, args)

    def pair(self, first: ScriptCall, then: ScriptCall) -> AsyncScript:
        """`first` then `then` as one script (`joined_template.lua`)."""
        pair = (first.name, then.name)
        found = self._scripts.get(pair)
        if found is None:
            # The template reads the workflow's keys as KEYS[1..3] and hands the rest to `then`.
            if not first.prelude or len(first.keys) != 3 or then.prelude:
                raise AssertionError(f"cannot join {pair}: a checkpoint script goes first")
            text = (
                source("prelude")
                + source("joined_template")
                .replace("--[[FIRST]]", source(first.name))
                .replace("--[[THEN]]", source(then.name))
            )
            found = self._scripts[pair] = self._registered(text, f"{first.name}+{then.name}")
        return found

    def settled(self, release: str, done: str) -> AsyncScript:
        """The release, the standing and the done as one script (`settled_template.lua`)."""
        found = self._settled.get((release, done))  # every pass's path: one lookup
        if found is None:
            text = source("prelude") + (
                source("settled_template")
                .replace("--[[FIRST]]", source(release))
                .replace("--[[STAND]]", source("settle"))
                .replace("--[[THEN]]", source(done))
            )
            found = self._settled[(release, done)] = self._registered(
                text, f"{release}+settle+{done}"
            )
        return found

    def ended(self, done: str) -> AsyncScript:
        """The ending with the release, then the standing and the done, as one script
        (`ended_template.lua`)."""
        found = self._ended.get(done)
        if found is None:
            text = source("prelude") + (
                source("ended_template")
                .replace("--[[FIRST]]", source("end_release"))
                .replace("--[[STAND]]", source("settle"))
                .replace("--[[THEN]]", source(done))
            )
            found = self._ended[done] = self._registered(text, f"end_release+settle+{done}")
        return found

    def stood(self, done: str) -> AsyncScript:
        """The standing and then the done, as one script on the queue's slot
        (`stood_template.lua`): a cluster's end of a pass, after `end_release.lua`."""
        found = self._stood.get(done)
        if found is None:
            text = (
                source("stood_template")
                .replace("--[[STAND]]", source("settle"))
                .replace("--[[THEN]]", source(done))
            )
            found = self._stood[done] = self._registered(text, f"settle+{done}")
        return found

    def read_many(self, read: str) -> AsyncScript:
        """The queue's read `read`, up to k times, as one script (`read_many_template.lua`):
        a cluster's take of many, whose claims follow on the workflows' own slots."""
        pair = (read, "*")
        found = self._scripts.get(pair)
        if found is None:
            text = source("read_many_template").replace("--[[TAKE]]", source(read))
            found = self._scripts[pair] = self._registered(text, f"{read}*")
        return found

    def claim(self) -> AsyncScript:
        """`claim.lua` alone (after `prelude.lua`), for claims sent apart from their read."""
        pair = ("claim", "")
        found = self._scripts.get(pair)
        if found is None:
            text = source("prelude") + source("claim")
            found = self._scripts[pair] = self._registered(text, "claim")
        return found

    def take(self, read: str) -> AsyncScript:
        """The queue's read `read` and then `claim.lua`, as one script (`take_template.lua`)."""
        pair = (read, "claim")
        found = self._scripts.get(pair)
        if found is None:
            text = (
                source("take_template")
                .replace("--[[TAKE]]", source(read))
                .replace("--[[CLAIM]]", source("prelude") + source("claim"))
            )
            found = self._scripts[pair] = self._registered(text, f"{read}+claim")
        return found

    def take_many(self, read: str) -> AsyncScript:
        """The queue's read `read` and then `claim.lua`, up to k times, as one script
        (`take_many_template.lua`)."""
        pair = (read, "claim*")
        found = self._scripts.get(pair)
        if found is None:
            text = (
                source("take_many_template")
                .replace("--[[TAKE]]", source(read))
                .replace("--[[CLAIM]]", source("prelude") + source("claim"))
            )
            found = self._scripts[pair] = self._registered(text, f"{read}+claim*")
        return found

    def _registered(self, text: str, name: str) -> AsyncScript:
        # Registered once per pair: the digest is computed here, not per call.
        return named(self._checkpointer.redis.register_script(text), name)
