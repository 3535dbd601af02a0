"""`Standings`: the ledger half of `RedisCheckpointer`, where each workflow's last pass left
it, for `status` and listings. One HASH per namespace (`<ns>:standings`, id -> standing) and
one sorted index per state, all on the namespace's slot, beside the workflows' own keys.

The decision not to undo: a standing outlives nothing. Its checkpoint expires on its ttl while
the standing stays on another slot, so every read checks a standing older than the ttl against
the workflow's keys (`gone`) and drops it, and `sweep` walks the hash doing the same.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping

from durability.cancelling import stop_if_cancelled
from durability.checks import check_page, check_state
from durability.redis.checkpoint_calls import CheckpointCalls, from_server_ms
from durability.redis.namespace import key as namespace_key
from durability.redis.sending import Sender
from durability.values import STATES, Look, Pass, Standing

__all__ = ["Standings"]


class Standings:
    """One namespace's standings, read and written through its checkpointer's `sender`;
    `keys(workflow)` gives a workflow's own three keys (see the module doc)."""

    __slots__ = ("_calls", "_keys", "_namespace", "_sender", "_swept", "_ttl_ms")

    def __init__(
        self,
        sender: Sender,
        calls: CheckpointCalls,
        namespace: str,
        keys: Callable[[str], tuple[str, str, str]],
    ) -> None:
        self._sender = sender
        self._calls = calls
        self._namespace = namespace
        self._keys = keys
        self._ttl_ms = calls.ttl_ms
        self._swept = 0  # where `sweep`'s walk over the standings has got to

    async def settle(self, holder: Pass, state: str, detail: Mapping[str, object]) -> bool:
        call = self._calls.settle(holder, state, detail)
        # Through the batcher, like every other write of a pass: at capacity the standings of a
        # turn's passes go out in the same pipeline as their records and finishes.
        sender = self._sender
        return bool(int(await sender.write(sender.plain("settle"), call.keys, call.args)))

    async def unstand(self, workflow: str, token: int) -> None:
        """Drop `workflow`'s standing for a discard that raised its fence to `token`."""
        sender = self._sender
        await sender.write(sender.plain("unstand"), self._standing_keys(), [workflow, token])

    async def look(self, workflow: str) -> Look:
        sender = self._sender
        # Two slots (the workflow's, the namespace's): sent in the same turn, so the batcher
        # puts them in one pipeline on a single node (one round trip); a cluster sends each to
        # its own node, at once.
        (claimed, known, passed), held = await asyncio.gather(
            sender.read(sender.script("looked"), self._keys(workflow)),
            sender.batcher.run(sender.plain("standing"), [self._hash], [workflow]),
        )
        standing = _standing(workflow, None if held is None else str(held))
        if standing is not None and _vanished(known, passed):
            # The checkpoint expired (its ttl) while its standing, on the namespace's slot,
            # stayed: the workflow is gone, whatever the standing says (`sweep` drops it).
            standing = None
        return Look(standing, bool(int(claimed)), bool(int(known)))

    async def page(
        self, state: str | None, prefix: str | None, limit: int, after: str | None
    ) -> list[Standing]:
        """`RedisCheckpointer.standings`: a page in id order, without those whose checkpoint
        expired (dropped as they are found), read on past them until it is full."""
        check_state(state)
        check_page(prefix, limit, after)
        index = namespace_key(self._namespace, f"state:{state or 'all'}")
        low: str | bytes = "-"
        if after is not None and (not prefix or after >= prefix):
            low = "(" + after
        elif prefix:
            low = "[" + prefix
        high: str | bytes = "+"
        if prefix:
            above = _successor(prefix.encode())
            if above is not None:
                high = b"(" + above
        page: list[Standing] = []
        listing = self._sender.plain("standings")
        while True:
            wanted = limit - len(page)
            reply = await self._sender.batcher.run(
                listing, [self._hash, index], [low, high, wanted]
            )
            held = {str(reply[i]): str(reply[i + 1]) for i in range(0, len(reply), 2)}
            gone = await self.gone(held)
            stop_if_cancelled()
            for workflow, text in held.items():
                standing = None if workflow in gone else _standing(workflow, text)
                if standing is not None:
                    page.append(standing)
            if len(held) < wanted or not gone:
                return page
            low = "(" + str(reply[-2])

    async def tally(self, prefix: str | None) -> dict[str, int]:
        """`RedisCheckpointer.tally`: the state indexes counted (`tally.lua`). A standing whose
        checkpoint expired counts until a listing or `sweep` drops it."""
        check_page(prefix, 1, None)
        low: str | bytes = "-"
        high: str | bytes = "+"
        if prefix:
            low = "[" + prefix
            above = _successor(prefix.encode())
            if above is not None:
                high = b"(" + above
        keys = [namespace_key(self._namespace, f"state:{state}") for state in STATES]
        counts = await self._sender.batcher.run(self._sender.plain("tally"), keys, [low, high])
        return {state: int(n) for state, n in zip(STATES, counts, strict=True) if int(n)}

    async def gone(self, held: Mapping[str, str]) -> set[str]:
        """Which of these workflows (id -> the standing held) have no checkpoint any more;
        their standings are dropped, each only if no newer one has been written since.

        Only a standing older than the ttl can have outlived its checkpoint: the pass that
        wrote it re-armed the checkpoint's ttl as it ended (`release`), so its keys live at
        least a ttl past the standing's time. Younger ones are not asked about, so a listing
        or a sweep of fresh workflows costs no round trip per id."""
        horizon = time.time() * 1000 - self._ttl_ms
        ids = [id_ for id_, text in held.items() if _written_ms(text) < horizon]
        if not ids:
            return set()
        sender = self._sender
        looked = sender.script("looked")  # what `look` asks, for each id
        # One pipeline on a single node (the batcher); on a cluster, each to its own slot.
        seen = await asyncio.gather(*(sender.read(looked, self._keys(id_)) for id_ in ids))
        gone = {
            id_ for id_, (_, known, passed) in zip(ids, seen, strict=True)
            if _vanished(known, passed)
        }
        if gone:
            args: list[str] = []
            for id_ in sorted(gone):
                args += [id_, held[id_].split("\n", 1)[0]]
            await sender.write(sender.plain("forget"), self._standing_keys(), args)
        return gone

    async def sweep(self, count: int) -> tuple[int, bool]:
        """`RedisCheckpointer.sweep`: one `HSCAN` step over the hash."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be a positive number, got {count!r}")
        cursor, found = await self._sender.redis.hscan(self._hash, self._swept, count=count)
        self._swept = int(cursor)
        assert isinstance(found, dict)  # HSCAN without NOVALUES: field -> value
        held = {str(id_): str(text) for id_, text in found.items()}
        dropped = len(await self.gone(held))
        return dropped, self._swept == 0

    @property
    def _hash(self) -> str:
        return namespace_key(self._namespace, "standings")

    def _standing_keys(self) -> list[str]:
        return [*self._calls.standing_keys]


def _standing(workflow: str, held: str | None) -> Standing | None:
    if not held:
        return None
    _, state, at, detail = [*held.split("\n", 3), "", "", ""][:4]
    if not state:
        return None  # a tombstone: the workflow was discarded
    return Standing(workflow, state, json.loads(detail), from_server_ms(int(at)))


def _written_ms(held: str) -> float:
    """When a standing ("<token>\n<state>\n<ms>\n...", or a tombstone "<token>\n\n<ms>")
    was written, in server ms; a tombstone from before tombstones kept a time counts as old."""
    parts = held.split("\n", 3)
    try:
        return float(parts[2])
    except (IndexError, ValueError):
        return float("-inf")


def _vanished(known: object, passed: object) -> bool:
    """Whether `looked.lua` found neither records nor claim hash: the checkpoint has expired
    (its ttl) or never existed, and a standing that names it is stale."""
    return not int(str(known)) and not int(str(passed))


def _successor(prefix: bytes) -> bytes | None:
    """The least byte string above every string that starts with `prefix` (None: no bound)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])
