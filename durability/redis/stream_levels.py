"""The stream's priorities: a stream per level in use, read highest first (`stream_policy.lua`).

Level 0 keeps the key a queue had before priorities (`{ns}:ready`), so existing data and the
common path are unchanged; a level in use is `{ns}:ready:<p>`, listed in `{ns}:ready:levels`.
A reader learns the levels from each look and blocks on all of them with one `XREADGROUP`; a
level made new appends a `nudge` entry to level 0, which wakes a reader blocked on the old list.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from durability.redis.lua import script
from durability.redis.namespace import text
from durability.redis.policies import policy_of
from durability.values import Delivery

__all__ = [
    "LEVELS_KNOWN", "Entry", "Levels", "level_key", "level_keys", "read_replies", "taken_entry",
]

#: How long a reader trusts the levels its last look listed before it looks again (a level
#: made new nudges one blocked reader, not every one).
LEVELS_KNOWN = 10.0
#: The shortest block a bounded read waits (Redis ends a block on its clock tick anyway).
_SHORTEST = timedelta(milliseconds=100)
#: The consumer group (as `stream_scheduler.GROUP`).
_GROUP = "workers"

#: The stream fields an entry may carry.
WORKFLOW, POLICY, NUDGE = "workflow", "policy", "nudge"


def level_key(ready: str, priority: int) -> str:
    """The stream of `priority`'s wakeups in the queue whose level-0 stream is `ready`."""
    return ready if priority == 0 else f"{ready}:{priority}"


def level_keys(ready: str, levels: object) -> tuple[str, ...]:
    """Every level's stream, highest priority first, from a look's list of the levels other
    than 0 in use (`'5,-1'`; '' or None: none)."""
    found = {int(part) for part in text(levels).split(",") if part} if levels else set()
    return tuple(level_key(ready, p) for p in sorted(found | {0}, reverse=True))


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry an XREADGROUP handed out: its stream, its id, and what it carries."""

    stream: str
    entry: str
    workflow: str | None
    policy: str
    nudge: bool

    def delivery(self, count: object = 1) -> Delivery:
        """The delivery this entry is, on its `count`th delivery (first, when read with ">")."""
        assert self.workflow is not None
        priority, limit = policy_of(self.policy)
        receipt = f"{self.entry}/{text(count)}"
        return Delivery(self.workflow, receipt, priority=priority, limit=limit)


def read_replies(reply: Any) -> list[Entry]:
    """Every entry of an XREADGROUP reply (RESP2 list or RESP3 map), of every stream read, in
    the order of the streams asked for."""
    if not reply:
        return []
    # RESP2: [[stream, entries]]; RESP3: {stream: [entries]}.
    streams: Sequence[tuple[Any, Any]] = (
        [(name, entries) for name, wrapped in reply.items() for entries in wrapped]
        if isinstance(reply, dict)
        else [(item[0], item[1]) for item in reply]
    )
    found = []
    for stream, entries in streams:
        for entry_id, fields in entries:
            named = {text(name): text(value) for name, value in (fields or {}).items()}
            found.append(
                Entry(
                    text(stream), text(entry_id), named.get(WORKFLOW), named.get(POLICY, ""),
                    NUDGE in named,
                )
            )
    return found


def taken_entry(taken: Any, count: object = 1) -> Delivery:
    """The delivery a take script (`stream_take.lua`, `stream_took.lua`) handed out."""
    priority, limit = policy_of(taken[2] if len(taken) > 2 else "")
    receipt = f"{text(taken[1])}/{text(count)}"
    return Delivery(text(taken[0]), receipt, priority=priority, limit=limit)


class Levels:
    """What one reader of a stream queue knows of its levels (`levels`, from its last look),
    and the entries a blocking read over several levels brought beyond the one handed out."""

    __slots__ = (
        "_admit", "_kept", "_lease_ms", "_looked", "_redis", "_room_at", "levels", "ready"
    )

    def __init__(self, redis: Any, ready: str, lease_ms: int) -> None:
        self._redis, self.ready, self._lease_ms = redis, ready, lease_ms
        #: Every level's stream, highest first, as the last look said.
        self.levels: tuple[str, ...] = (ready,)
        self._kept: collections.deque[Delivery] = collections.deque()
        self._looked = -LEVELS_KNOWN  # (loop time) when a look last listed the levels
        self._room_at: float | None = None  # (loop time) when a parked wakeup may have room
        self._admit = script(redis, "stream_admit")

    @property
    def stale(self) -> bool:
        """Whether the levels the last look listed are older than `LEVELS_KNOWN`."""
        return asyncio.get_running_loop().time() - self._looked > LEVELS_KNOWN

    def took(self, reply: Any) -> bool:
        """Note the levels a look's reply lists, and when a limit's parked wakeups may have
        room (a look that took says so too: a rate window frees by time alone, and only a
        look puts its parked wakeups back); whether it took an entry."""
        now = asyncio.get_running_loop().time()
        self._looked = now
        took = bool(reply and reply[0])
        self.levels = level_keys(self.ready, (reply[3] if took else reply[1]) if reply else None)
        at = 4 if took else 2
        room = int(reply[at]) if reply and len(reply) > at else -1
        self._room_at = None if room < 0 else now + room / 1000
        return took

    def bound(self, block: timedelta) -> timedelta:
        """`block`, cut short so a blocking read ends when a limit's parked wakeups may have
        room (the look after it puts them back), but never below a read's shortest block."""
        if self._room_at is None:
            return block
        left = self._room_at - asyncio.get_running_loop().time()
        return max(min(block, timedelta(seconds=left)), _SHORTEST)

    @property
    def due(self) -> bool:
        """Whether a limit's parked wakeups may have room by now (a look puts them back)."""
        return self._room_at is not None and asyncio.get_running_loop().time() >= self._room_at

    def kept(self) -> Delivery | None:
        """The first entry kept from an earlier read, if any."""
        return self._kept.popleft() if self._kept else None

    def keep(self, delivery: Delivery) -> None:
        """Hold `delivery` (this consumer's, read beside another) for the next read."""
        self._kept.append(delivery)

    async def admitted(self, read: list[Entry]) -> tuple[Delivery | None, bool]:
        """What a blocking read brought: the delivery to hand out (the highest), and whether a
        look should follow (a nudge came: a level made new; or an entry was parked, and the
        look says when its limit may have room). A limited entry is counted or parked by its
        limit (`stream_admit.lua`); beyond the first the rest are kept, highest first (they are
        this consumer's; one not read again within a lease is taken over by `reclaiming`)."""
        found: list[Delivery] = []
        nudged = False
        for entry in read:
            if entry.nudge:
                nudged = True
                await self._redis.xack(entry.stream, _GROUP, entry.entry)
            elif entry.workflow is not None:
                if not entry.policy or await self._admits(entry):
                    found.append(entry.delivery())
                else:
                    nudged = True  # parked: a look says when its limit may have room
        found.sort(key=lambda delivery: -delivery.priority)
        self._kept.extend(found[1:])
        return (found[0] if found else None), nudged

    async def _admits(self, entry: Entry) -> bool:
        args: list[str | int] = [
            entry.stream, entry.entry, entry.workflow or "", entry.policy, self._lease_ms
        ]
        return bool(int(await self._admit(keys=[self.ready], args=args)))
