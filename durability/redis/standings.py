"""`Standings`: the ledger half of `RedisCheckpointer`, where each workflow's last pass left
it, for `status` and listings. One HASH per shard of the namespace (`{<tag>}:standings`, id ->
standing) and one sorted index per state, all on the shard's slot, beside the workflows' own
keys; a workflow's standing is in its shard (shards.py), and a listing merges the shards' pages
in id order, so its cursor (the last id) means the same whatever the count of shards.

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
from durability.redis.sending import Sender
from durability.values import STATES, Look, Pass, Standing

__all__ = ["Standings"]


class Standings:
    """One namespace's standings, read and written through its checkpointer's `sender`;
    `keys(workflow)` gives a workflow's own three keys (see the module doc)."""

    __slots__ = ("_calls", "_keys", "_ledgers", "_sender", "_swept", "_ttl_ms")

    def __init__(
        self,
        sender: Sender,
        calls: CheckpointCalls,
        ledgers: tuple[tuple[str, ...], ...],
        keys: Callable[[str], tuple[str, str, str]],
    ) -> None:
        self._sender = sender
        self._calls = calls
        # Each shard's keys: the hash, then the index of every standing, then one per state.
        self._ledgers = ledgers
        self._keys = keys
        self._ttl_ms = calls.ttl_ms
        self._swept = (0, 0)  # where `sweep`'s walk has got to: (shard, HSCAN cursor)

    async def settle(self, holder: Pass, state: str, detail: Mapping[str, object]) -> bool:
        call = self._calls.settle(holder, state, detail)
        # Through the batcher, like every other write of a pass: at capacity the standings of a
        # turn's passes go out in the same pipeline as their records and finishes.
        sender = self._sender
        return bool(int(await sender.write(sender.plain("settle"), call.keys, call.args)))

    async def unstand(self, workflow: str, token: int) -> None:
        """Drop `workflow`'s standing for a discard that raised its fence to `token`."""
        sender = self._sender
        keys = self._calls.standing_keys(workflow)
        await sender.write(sender.plain("unstand"), keys, [workflow, token])

    async def look(self, workflow: str) -> Look:
        sender = self._sender
        # Two slots (the workflow's, the namespace's): sent in the same turn, so the batcher
        # puts them in one pipeline on a single node (one round trip); a cluster sends each to
        # its own node, at once.
        (claimed, known, passed), held = await asyncio.gather(
            sender.read(sender.script("looked"), self._keys(workflow)),
            # (Queued as the look is, at once: both go in the same turn's batch.)
            sender.batcher.queue(
                sender.plain("standing"), [self._calls.standing_keys(workflow)[0]], [workflow]
            ),
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
        expired (dropped as they are found), read on past them until it is full. Sharded, each
        shard's first page after `after` is read and the first `limit` of them all kept."""
        check_state(state)
        check_page(prefix, limit, after)
        slot = 1 if state is None else 2 + STATES.index(state)
        if len(self._ledgers) == 1:
            return await self._page(self._ledgers[0], slot, prefix, limit, after)
        pages = await asyncio.gather(
            *(self._page(ledger, slot, prefix, limit, after) for ledger in self._ledgers)
        )
        merged = sorted(
            (one for page in pages for one in page), key=lambda one: _ordered(one.workflow)
        )
        return merged[:limit]

    async def _page(
        self,
        ledger: tuple[str, ...],
        slot: int,
        prefix: str | None,
        limit: int,
        after: str | None,
    ) -> list[Standing]:
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
                listing, [ledger[0], ledger[slot]], [low, high, wanted]
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
        tally = self._sender.plain("tally")
        counted = await asyncio.gather(
            *(self._sender.batcher.run(tally, list(ledger[2:]), [low, high])
              for ledger in self._ledgers)
        )
        sums = [sum(int(counts[i]) for counts in counted) for i in range(len(STATES))]
        return {state: n for state, n in zip(STATES, sums, strict=True) if n}

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
        by_ledger: dict[tuple[str, ...], list[str]] = {}
        for id_ in sorted(gone):
            args = by_ledger.setdefault(self._calls.standing_keys(id_), [])
            args += [id_, held[id_].split("\n", 1)[0]]
        for ledger, args in by_ledger.items():
            await sender.write(sender.plain("forget"), ledger, args)
        return gone

    async def sweep(self, count: int) -> tuple[int, bool]:
        """`RedisCheckpointer.sweep`: one `HSCAN` step over a shard's hash; a round ends
        when the last shard's hash has been walked."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be a positive number, got {count!r}")
        shard, at = self._swept
        hashed = self._ledgers[shard][0]
        cursor, found = await self._sender.redis.hscan(hashed, at, count=count)
        if int(cursor):
            self._swept = (shard, int(cursor))
        else:
            self._swept = ((shard + 1) % len(self._ledgers), 0)
        assert isinstance(found, dict)  # HSCAN without NOVALUES: field -> value
        held = {str(id_): str(text) for id_, text in found.items()}
        dropped = len(await self.gone(held))
        return dropped, self._swept == (0, 0)


def _ordered(workflow: str) -> bytes:
    """A workflow id as the indexes order it: by its UTF-8 bytes (ZRANGEBYLEX)."""
    return workflow.encode("utf-8", "surrogatepass")


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
