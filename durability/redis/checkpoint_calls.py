"""`CheckpointCalls`: the checkpoint scripts a durable joins with a queue's, built and read here.

`RedisCheckpointer` sends `supply`, `append`, `release` and `settle` alone; `RedisDurable` runs
each inside one script with the scheduler's wakeup or done (the `shared/` templates), and its
take claims with `claim.lua` behind the queue's read. Both halves build the call and read the
reply through this one object, so an argument order or a reply's shape is written once, not
once per half. A call is checked and encoded when it is built, before anything is sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from durability.checks import (
    INBOX,
    INBOX_WIDTH,
    check_key,
    check_state,
    check_workflow,
    detail_text,
    inbox_key,
    positive,
    to_ms,
)
from durability.codec import Codec, decode_checkpoint
from durability.redis.lua import ScriptCall
from durability.values import STATES, Entry, Pass, Recorded

__all__ = ["CheckpointCalls", "from_server_ms", "records_of"]


def records_of(dumped: str) -> list[Any]:
    """The records as `dump` (prelude.lua) encodes them: [key, encoded, written_ms, ...]."""
    flat: list[Any] = json.loads(dumped) or []  # "{}" is cjson's empty array
    return flat


def from_server_ms(ms: int) -> datetime:
    """A time the server's `TIME` gave, in Unix milliseconds, as an aware datetime."""
    return datetime.fromtimestamp(ms / 1000, UTC)


class CheckpointCalls:
    """Builds one namespace's checkpoint calls and reads their replies (see the module doc).

    `keys(workflow)` gives a workflow's three keys (records, claim, order), `ttl_ms` the
    expiry every write pushes them to, `standing_keys(workflow)` the eight keys of the ledger
    of the workflow's shard."""

    __slots__ = ("_codec", "_keys", "standing_keys", "ttl_ms")

    def __init__(
        self,
        keys: Any,
        ttl_ms: int,
        codec: Codec,
        standing_keys: Callable[[str], tuple[str, ...]],
    ) -> None:
        self._keys = keys
        self._codec = codec
        self.ttl_ms = ttl_ms
        self.standing_keys = standing_keys

    def claim_args(self, budget: timedelta, alive: timedelta) -> tuple[int, int, int]:
        """claim.lua's ARGV: the budget, the liveness and the ttl, in ms."""
        return to_ms(positive("budget", budget)), to_ms(positive("alive", alive)), self.ttl_ms

    def claimed(self, workflow: str, alive: timedelta, reply: Any) -> Pass | None:
        """The `Pass` a claim.lua reply stands for (`None`/false: a live claim holds it)."""
        if not reply:
            return None
        token, deadline = int(reply[0]), int(reply[1])
        # The script read the checkpoint as it took the claim: the pass needs no `load`.
        flat = records_of(reply[2])
        pairs = ((flat[i], flat[i + 1]) for i in range(0, len(flat), 3))
        records, ordinals = decode_checkpoint(self._codec, pairs)
        return Pass(workflow, token, alive, from_server_ms(deadline), records, ordinals)

    def records(self, flat: list[Any]) -> dict[str, object]:
        """The decoded records of a `records_of` list, by key, in first-recorded order."""
        decode = self._codec.decode
        return {flat[i]: decode(flat[i + 1]) for i in range(0, len(flat), 3)}

    def supply(self, workflow: str, key: str, value: object) -> tuple[ScriptCall, str]:
        """supply.lua's run and the encoded value (`supplied` reads the reply with it)."""
        check_key(key)
        encoded = self._codec.encode(value)
        args = (key, encoded, self.ttl_ms)
        return ScriptCall("supply", self._keys(workflow), args, prelude=True), encoded

    def supplied(self, reply: Any, encoded: str) -> Recorded:
        """What the key holds after a supply.lua reply: this value, or the one first there."""
        if int(reply[0]) == 1:
            return Recorded(self._codec.decode(encoded), True)
        return Recorded(self._codec.decode(reply[1]), False)

    def append(self, workflow: str, value: object) -> tuple[ScriptCall, str]:
        """append.lua's run and the encoded value (`appended` reads the reply with it)."""
        encoded = self._codec.encode(value)
        args = (encoded, self.ttl_ms, INBOX, INBOX_WIDTH)
        return ScriptCall("append", self._keys(workflow), args, prelude=True), encoded

    def appended(self, reply: Any, encoded: str) -> Entry:
        """The inbox entry an append.lua reply minted."""
        key = str(reply[1])
        # The script formats the key itself (it must write under it atomically); it has to be
        # exactly the key the rest of the library would mint for that sequence number.
        if key != inbox_key(int(reply[0])):
            raise AssertionError(f"append.lua minted {key!r} for sequence {reply[0]}")
        return Entry(key, self._codec.decode(encoded))

    def release(self, holder: Pass) -> ScriptCall:
        """release.lua's run for this pass."""
        keys = self._keys(holder.workflow)
        return ScriptCall("release", keys, (holder.token, self.ttl_ms), prelude=True)

    def settle(self, holder: Pass, state: str, detail: Mapping[str, object]) -> ScriptCall:
        """settle.lua's run for this standing, checked and encoded; its reply is 1 if written."""
        check_state(state)
        check_workflow(holder.workflow)
        text = detail_text(detail)
        args = (holder.workflow, holder.token, 3 + STATES.index(state), state, text)
        return ScriptCall("settle", self.standing_keys(holder.workflow), args)
