"""`RedisCheckpointer`: a workflow's records and claim in Redis, every guarantee one Lua script.

Three keys per workflow under the checkpointer's `namespace`, hash-tagged `{<id>}` so they
share one cluster slot and a script may touch them together; `RedisCheckpointer` gives the
layout. Each operation is one script (`scripts/checkpoint/`, each after `prelude.lua`): times
come from the server's `TIME`, tokens are `max(now_ms, previous + 1)`.

The decision not to undo: the namespace stays outside the braces, so the tag is the id alone,
workflows still spread over a cluster's nodes, and an effect's keys need only carry `{<id>}`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any

from redis.commands.core import AsyncScript

from durability.checks import (
    MAX_NAME,
    check_key,
    check_recorded_key,
    check_workflow,
    positive,
    to_ms,
)
from durability.codec import Codec, JsonCodec
from durability.redis.batching import ScriptBatcher
from durability.redis.checkpoint_calls import CheckpointCalls, from_server_ms, records_of
from durability.redis.effect import LuaEffect, hash_tag
from durability.redis.lua import ScriptCall
from durability.redis.namespace import DEFAULT, check_namespace
from durability.redis.namespace import key as namespace_key
from durability.redis.sending import Acknowledged, Client, NotAcknowledged, Sender
from durability.redis.shards import check_shards, shard_of, tags
from durability.redis.standings import Standings
from durability.redis.watching import RedisBell, channel_of, watch
from durability.signals import Fenced
from durability.values import STATES, Effect, Entry, Look, Pass, Recorded, Standing, Written

__all__ = [
    "MAX_WORKFLOW",
    "Acknowledged",
    "NotAcknowledged",
    "RedisCheckpointer",
    "workflow_keys",
    "workflow_tag",
]


#: The longest workflow id, in characters: every store's bound (it is part of key names here).
MAX_WORKFLOW = MAX_NAME


_FENCED = {-1: "a newer claim exists", -2: "the claim lapsed"}


def workflow_tag(workflow: str) -> str:
    """The hash tag `{<id>}` every key of `workflow` carries, after `check_workflow` refused
    an id Redis keys cannot hold (empty, with a brace, too long, not valid text)."""
    return "{" + check_workflow(workflow) + "}"


def workflow_keys(workflow: str, namespace: str = DEFAULT) -> tuple[str, str, str]:
    """The records, claim and order keys of `workflow` under `namespace`, in the order every
    script takes them."""
    return _keys(f"{check_namespace(namespace)}:workflow:", workflow)


def _keys(prefix: str, workflow: str) -> tuple[str, str, str]:
    base = prefix + workflow_tag(workflow)
    return base, f"{base}:pass", f"{base}:order"


class RedisCheckpointer:
    """A `Checkpointer` over Redis (a `redis.asyncio` client or cluster client built with
    `decode_responses=True`). Every key it writes lies under `namespace`: two checkpointers
    with different namespaces never see or fence each other's workflows, whatever the ids.

    | key                         | type | holds                                                  |
    |-----------------------------|------|--------------------------------------------------------|
    | `<ns>:workflow:{id}`        | HASH | step key -> encoded value; nothing of the engine's      |
    | `<ns>:workflow:{id}:pass`   | HASH | `token`, `until`, `deadline` (ms), `appended` (inbox)   |
    | `<ns>:workflow:{id}:order`  | LIST | `"<ms>:<key>"` per first write, in first-recorded order |

    So `HGETALL <ns>:workflow:{id}` is exactly the user's records (an operator or a progress view
    can read it without filtering), while the order list keeps the first-recorded order a hash
    loses once it outgrows its compact encoding (128 fields), and the server time of each write.
    Keys written before namespaces (`workflow:{id}...`) are moved by `migration.move_checkpoints`.

    Each operation is one script (`scripts/checkpoint/*.lua`, each prefixed with `prelude.lua`):
    times come from the server's `TIME`, tokens are `max(now_ms, previous + 1)`, and every write
    pushes all three keys' expiry to at least `ttl` from now, never shortening it, so `hold` can
    keep a sleeping workflow past its TTL. `discard` keeps the claim hash (its token raised) so a
    pass still running is fenced.

    Workflow ids become part of key names; `check_workflow` (the bound every store shares) refuses
    before any key is built the ids Redis keys cannot hold: with `{` or `}` (they would redefine the
    hash tag), longer than `MAX_WORKFLOW` (`interfaces.MAX_NAME`) characters, or not valid text.

    With `durable=Acknowledged(...)` every write travels as one pipeline: the script, then `WAIT`
    (and `WAITAOF` on 7.2+ when asked), on one connection, because `WAIT` counts the writes of the
    connection it arrives on. Too few acknowledgements raise `NotAcknowledged`, and so does a server
    that refuses the `WAIT` or `WAITAOF` itself (`WAITAOF` on a primary without `appendonly yes`):
    either way the write was applied on the primary, but not with the durability asked for.

    Two collaborators hold what is not the checkpoint's own: `sending.Sender` registers and
    sends the scripts (batched, or acknowledged), and `standings.Standings` keeps the ledger
    (`settle`, `look`, `standings`, `sweep`).
    """

    def __init__(
        self,
        *,
        redis: Client,
        namespace: str = DEFAULT,
        ttl: timedelta = timedelta(days=1),
        codec: Codec | None = None,
        durable: Acknowledged | None = None,
        shards: int = 1,
    ) -> None:
        self._redis = redis
        self.namespace = check_namespace(namespace)
        #: How many shards the namespace's standings (like its queue) are split over; a
        #: workflow's standing is in its shard (shards.py).
        self.shards = check_shards(shards)
        #: What each workflow's keys start with; the id's `{<id>}` follows.
        self.prefix = f"{namespace}:workflow:"
        self.ttl = positive("ttl", ttl)
        self._ttl_ms = to_ms(ttl)
        self._codec: Codec = codec or JsonCodec()
        self._durable = durable
        self._sender = Sender(redis, durable)
        ledgers = tuple(
            (namespace_key(tag, "standings"),
             *(namespace_key(tag, f"state:{name}") for name in ("all", *STATES)))
            for tag in tags(self.namespace, shards)
        )

        def standing_keys(workflow: str) -> tuple[str, ...]:
            return ledgers[shard_of(workflow, shards)]

        #: The calls this checkpointer sends, built and read; `RedisDurable` joins them with
        #: a scheduler's (see checkpoint_calls.py).
        self.calls = CheckpointCalls(self.keys, self._ttl_ms, self._codec, standing_keys)
        self._standings = Standings(self._sender, self.calls, ledgers, self.keys)

    # --- running scripts --------------------------------------------------------------------

    def _script(self, name: str) -> AsyncScript:
        return self._sender.script(name)

    def _write(
        self, script: AsyncScript, keys: Sequence[str], args: Sequence[Any]
    ) -> Awaitable[Any]:
        return self._sender.write(script, keys, args)

    def _read(self, script: AsyncScript, keys: Sequence[str]) -> Awaitable[Any]:
        return self._sender.read(script, keys)

    def _fenced(self, holder: Pass, reply: list[Any]) -> None:
        code = int(reply[0])
        if code < 0:
            raise Fenced(holder.workflow, holder.token, _FENCED.get(code, "refused"))

    # --- the Checkpointer protocol ----------------------------------------------------------

    async def claim(self, workflow: str, budget: timedelta, alive: timedelta) -> Pass | None:
        positive("budget", budget)
        positive("alive", alive)
        keys = self.keys(workflow)
        reply = await self._write(
            self._script("claim"), keys, [to_ms(budget), to_ms(alive), self._ttl_ms]
        )
        return self.calls.claimed(workflow, alive, reply)

    async def _load(self, workflow: str) -> list[Any]:
        return records_of(await self._read(self._script("load"), self.keys(workflow)))

    async def load(self, workflow: str) -> dict[str, object]:
        return self.calls.records(await self._load(workflow))

    async def history(self, workflow: str) -> list[Written]:
        flat = await self._load(workflow)
        decode = self._codec.decode
        return [
            Written(flat[i], decode(flat[i + 1]), from_server_ms(int(flat[i + 2])))
            for i in range(0, len(flat), 3)
        ]

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        check_recorded_key(key)
        encoded = self._codec.encode(value)
        keys = self.keys(holder.workflow)
        args = [holder.token, to_ms(holder.alive), self._ttl_ms, key, encoded]
        reply = await self._write(self._script("record"), keys, args)
        self._fenced(holder, reply)
        if int(reply[0]) == 1:
            return Recorded(self._codec.decode(encoded), True)
        return Recorded(self._codec.decode(reply[1]), False)

    async def transact(self, holder: Pass, key: str, effect: Effect) -> Recorded:
        check_key(key)
        if not isinstance(effect, LuaEffect):
            raise TypeError(f"the Redis store performs LuaEffect, not {type(effect).__name__}")
        keys = self.keys(holder.workflow)
        tag = holder.workflow
        for touched in effect.keys:
            # Refused here, before anything is sent, so a single node (which would run it)
            # and a cluster (which would refuse or half-run it) behave the same.
            if hash_tag(touched) != tag:
                raise ValueError(
                    f"LuaEffect key {touched!r} does not carry the workflow's hash tag "
                    f"{workflow_tag(tag)}, so it may lie in another slot"
                )
            if touched in keys:
                raise ValueError(f"LuaEffect key {touched!r} is one of the checkpoint's own keys")
        args: list[Any] = [holder.token, to_ms(holder.alive), self._ttl_ms, key]
        args.extend(effect.args)
        reply = await self._write(
            self._sender.effect(effect.body), [*keys, *effect.keys], args
        )
        self._fenced(holder, reply)
        return Recorded(self._codec.decode(reply[1]), int(reply[0]) == 1)

    async def supply(self, workflow: str, key: str, value: object) -> Recorded:
        call, encoded = self.calls.supply(workflow, key, value)
        reply = await self._write(self._script(call.name), call.keys, call.args)
        return self.calls.supplied(reply, encoded)

    async def append(self, workflow: str, value: object) -> Entry:
        call, encoded = self.calls.append(workflow, value)
        reply = await self._write(self._script(call.name), call.keys, call.args)
        return self.calls.appended(reply, encoded)

    async def extend(self, holder: Pass, budget: timedelta, alive: timedelta) -> Pass:
        positive("budget", budget)
        positive("alive", alive)
        keys = self.keys(holder.workflow)
        args = [holder.token, to_ms(budget), to_ms(alive), self._ttl_ms]
        reply = await self._write(self._script("extend"), keys, args)
        self._fenced(holder, reply)
        return Pass(holder.workflow, holder.token, holder.alive, from_server_ms(int(reply[1])))

    async def renew(self, holder: Pass, alive: timedelta) -> None:
        positive("alive", alive)
        keys = self.keys(holder.workflow)
        args = [holder.token, to_ms(alive), self._ttl_ms]
        reply = await self._write(self._script("renew"), keys, args)
        self._fenced(holder, reply)

    async def discard(self, workflow: str) -> int:
        keys = self.keys(workflow)
        gone, token = await self._write(self._script("discard"), keys, [self._ttl_ms])
        # The standing is on the namespace's slot, so a second script: a crash between the two
        # leaves a standing for records that are gone, which `look` reports as it stood.
        await self._standings.unstand(workflow, int(token))
        return int(gone)

    async def conclude(self, workflow: str, key: str, value: object) -> Recorded:
        check_recorded_key(key)
        encoded = self._codec.encode(value)
        keys = self.keys(workflow)
        args = [key, encoded, self._ttl_ms, channel_of(keys[0])]
        reply = await self._write(self._script("conclude"), keys, args)
        if int(reply[0]) == 1:
            return Recorded(self._codec.decode(encoded), True)
        return Recorded(self._codec.decode(reply[1]), False)

    def end_release(self, holder: Pass, key: str, value: object) -> ScriptCall:
        """The call that writes a pass's ending and releases its claim, under its token only
        (`end_release.lua`; `RedisDurable.finish_ended` runs it)."""
        check_recorded_key(key)
        encoded = self._codec.encode(value)
        keys = self.keys(holder.workflow)
        args = (holder.token, self._ttl_ms, key, encoded, channel_of(keys[0]))
        return ScriptCall("end_release", keys, args)

    async def run_call(self, call: ScriptCall) -> Any:
        """Run one checkpoint `call` alone."""
        return await self._write(self._script(call.name), call.keys, call.args)

    def watch(self, workflow: str) -> AbstractAsyncContextManager[RedisBell]:
        """A bell rung by the ending's PUBLISH (`durability.redis.watching`)."""
        return watch(self._redis, channel_of(self.keys(workflow)[0]))

    # --- the ledger: where each workflow's last pass left it (standings.py) ----------------

    async def settle(self, holder: Pass, state: str, detail: Mapping[str, object]) -> bool:
        return await self._standings.settle(holder, state, detail)

    async def look(self, workflow: str) -> Look:
        return await self._standings.look(workflow)

    async def standings(
        self, state: str | None, prefix: str | None, limit: int, after: str | None
    ) -> list[Standing]:
        """A page of standings in id order. A standing whose checkpoint has expired is left out
        (and dropped, as `sweep` would): the page's standings older than the ttl are checked
        against their workflows' own keys (one more round trip, only when there are any), and
        the page reads on past what it left out until it is full."""
        return await self._standings.page(state, prefix, limit, after)

    async def tally(self, prefix: str | None = None) -> dict[str, int]:
        """Standings counted by state (`Tallied`): an index count. A standing whose checkpoint
        expired counts until a listing or `sweep` drops it."""
        return await self._standings.tally(prefix)

    async def sweep(self, count: int = 500) -> tuple[int, bool]:
        """One step of the walk over this namespace's standings (`HSCAN` of its one hash, never
        the keyspace) that drops those whose checkpoints have expired, and the tombstones of
        deleted workflows once their fence has expired too. Without it each finished workflow
        would leave its standing behind for good after its records expire.

        Looks at about `count` standings; returns how many it dropped and whether the walk
        has come round to its start (the next step begins a new one)."""
        return await self._standings.sweep(count)

    async def release(self, holder: Pass) -> None:
        call = self.calls.release(holder)
        await self._write(self._script(call.name), call.keys, call.args)

    # --- beyond the protocol ----------------------------------------------------------------

    async def close(self) -> None:
        """End what this checkpointer started: the batches under way are let finish (at most
        `storekit.chores.ENDING`), and their connection's reader stops. The client is the
        caller's to close, after."""
        await self._sender.close()

    def keys(self, workflow: str) -> tuple[str, str, str]:
        """The records, claim and order keys of `workflow` in this checkpointer's namespace."""
        return _keys(self.prefix, workflow)

    @property
    def redis(self) -> Client:
        """The client every script of this checkpointer runs on."""
        return self._redis

    @property
    def batcher(self) -> ScriptBatcher:
        """What every script of this checkpointer is sent through: a durable sends its joined
        scripts through it too, so a turn's passes share one pipeline whatever they ask."""
        return self._sender.batcher

    @property
    def acknowledged(self) -> Acknowledged | None:
        """The replication each write waits for (`durable=`), or None."""
        return self._durable

    async def hold(self, workflow: str, until: datetime | None = None) -> None:
        """Keep `workflow`'s checkpoint and claim at least until `until` + `ttl`.

        For a pass that ends asleep until `until`: its records must outlive the sleep however
        short the TTL. With no `until` (a pass blocked on input from outside, which has no
        deadline) the TTL is re-armed from now. Never shortens an expiry.
        """
        keys = self.keys(workflow)
        if until is not None and until.tzinfo is None:
            raise ValueError("hold needs a timezone-aware datetime")
        at = "" if until is None else str(int(until.timestamp() * 1000))
        await self._write(self._script("hold"), keys, [at, self._ttl_ms])

