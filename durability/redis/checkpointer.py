"""`RedisCheckpointer`: a workflow's records and claim in Redis, every guarantee one Lua script.

Three keys per workflow under the checkpointer's `namespace`, hash-tagged `{<id>}` so they
share one cluster slot and a script may touch them together; `RedisCheckpointer` gives the
layout. Each operation is one script (`scripts/checkpoint/`, each after `prelude.lua`): times
come from the server's `TIME`, tokens are `max(now_ms, previous + 1)`.

The decision not to undo: the namespace stays outside the braces, so the tag is the id alone,
workflows still spread over a cluster's nodes, and an effect's keys need only carry `{<id>}`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from durability.cancelling import stop_if_cancelled
from durability.checks import (
    MAX_NAME,
    check_key,
    check_page,
    check_recorded_key,
    check_state,
    check_workflow,
    positive,
    to_ms,
)
from durability.codec import Codec, JsonCodec
from durability.redis.batching import ScriptBatcher
from durability.redis.checkpoint_calls import CheckpointCalls, from_server_ms, records_of
from durability.redis.effect import LuaEffect, hash_tag
from durability.redis.lua import named, script, source
from durability.redis.namespace import DEFAULT, check_namespace
from durability.redis.namespace import key as namespace_key
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

log = logging.getLogger(__name__)

#: The longest workflow id, in characters: every store's bound (it is part of key names here).
MAX_WORKFLOW = MAX_NAME

Client = Redis | RedisCluster

_FENCED = {-1: "a newer claim exists", -2: "the claim lapsed"}
_EFFECT_SLOT = "--[[EFFECT]]"


def workflow_tag(workflow: str) -> str:
    """The hash tag `{<id>}` every key of `workflow` carries, after `check_workflow` refused
    an id Redis keys cannot hold (empty, with a brace, too long, not valid text)."""
    return "{" + check_workflow(workflow) + "}"


def workflow_keys(workflow: str, namespace: str = DEFAULT) -> tuple[str, str, str]:
    """The records, claim and order keys of `workflow` under `namespace`, in the order every
    script takes them."""
    return _keys(f"{check_namespace(namespace)}:workflow:", workflow)


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


def _keys(prefix: str, workflow: str) -> tuple[str, str, str]:
    base = prefix + workflow_tag(workflow)
    return base, f"{base}:pass", f"{base}:order"


def _successor(prefix: bytes) -> bytes | None:
    """The least byte string above every string that starts with `prefix` (None: no bound)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


@dataclass(frozen=True, slots=True)
class Acknowledged:
    """Make each checkpoint write return only once `replicas` replicas acknowledged it within
    `timeout` (`WAIT`), and, with `aof`, once the primary and those replicas fsynced it to
    their append-only files (`WAITAOF`, Redis 7.2+; on an older server a warning is logged
    once and only `WAIT` applies).

    `aof` needs `appendonly yes` on the primary (else every write raises `NotAcknowledged`)
    and on each replica counted. Under the default `appendfsync everysec` a `WAITAOF` waits
    for the next once-a-second fsync, so each write can take up to a second; under
    `appendfsync always` it answers as soon as the write is on disk."""

    replicas: int = 1
    timeout: timedelta = timedelta(seconds=1)
    aof: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int):
            raise TypeError("replicas must be an int")
        if self.replicas < 0:
            raise ValueError(f"replicas must not be negative, got {self.replicas}")
        positive("timeout", self.timeout)


class NotAcknowledged(RuntimeError):
    """A write reached the primary but not the durability `Acknowledged` asked for in time.

    The write may still survive (or may be lost in a failover); the caller was not promised it.
    `refused` is the server's error when it refused the `WAIT`/`WAITAOF` outright (then `got`
    is 0 and the error is also the exception's `__cause__`).
    """

    def __init__(self, what: str, wanted: int, got: int, *, refused: str | None = None) -> None:
        if refused is None:
            message = f"{what}: {got} of {wanted} acknowledgements before the timeout"
        else:
            message = f"{what} refused after the write was applied on the primary: {refused}"
        super().__init__(message)
        self.wanted = wanted
        self.got = got
        self.refused = refused


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
    """

    def __init__(
        self,
        *,
        redis: Client,
        namespace: str = DEFAULT,
        ttl: timedelta = timedelta(days=1),
        codec: Codec | None = None,
        durable: Acknowledged | None = None,
    ) -> None:
        self._redis = redis
        self.namespace = check_namespace(namespace)
        #: What each workflow's keys start with; the id's `{<id>}` follows.
        self.prefix = f"{namespace}:workflow:"
        self.ttl = positive("ttl", ttl)
        self._ttl_ms = to_ms(ttl)
        self._codec: Codec = codec or JsonCodec()
        self._durable = durable
        self._scripts: dict[str, AsyncScript] = {}
        self._effects: dict[str, AsyncScript] = {}
        self._version: tuple[int, ...] | None = None
        self._batcher = ScriptBatcher(redis)
        standing_keys = (
            namespace_key(self.namespace, "standings"),
            *(namespace_key(self.namespace, f"state:{name}") for name in ("all", *STATES)),
        )
        #: The calls this checkpointer sends, built and read; `RedisDurable` joins them with
        #: a scheduler's (see checkpoint_calls.py).
        self.calls = CheckpointCalls(self.keys, self._ttl_ms, self._codec, standing_keys)
        self._swept = 0  # where `sweep`'s walk over the standings has got to

    # --- running scripts --------------------------------------------------------------------

    def _script(self, name: str) -> AsyncScript:
        found = self._scripts.get(name)
        if found is None:
            text = source("prelude") + source(name)
            found = self._scripts[name] = named(self._redis.register_script(text), name)
        return found

    def _effect_script(self, body: str) -> AsyncScript:
        # Composed once per body: registering computes the digest, and the server caches the
        # script by digest, so a hot effect costs one EVALSHA like any other write.
        found = self._effects.get(body)
        if found is None:
            template = source("prelude") + source("transact_template")
            text = template.replace(_EFFECT_SLOT, body)
            found = self._effects[body] = named(self._redis.register_script(text), "transact")
        return found

    async def _write(self, script: AsyncScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        if self._durable is None:
            return await self._batcher.run(script, keys, args)
        return await self._acknowledged(script, keys, args, self._durable)

    async def _read(self, script: AsyncScript, keys: Sequence[str]) -> Any:
        return await self._batcher.run(script, keys, ())

    async def _acknowledged(
        self, script: AsyncScript, keys: Sequence[str], args: Sequence[Any], want: Acknowledged
    ) -> Any:
        waits: list[tuple[str, ...]] = [("WAIT", str(want.replicas), str(to_ms(want.timeout)))]
        if want.aof and await self._has_waitaof():
            waits.append(("WAITAOF", "1", str(want.replicas), str(to_ms(want.timeout))))
        # In a cluster the pipeline groups commands by node; naming the node that owns the
        # workflow's slot puts WAIT on the same connection as the script it must count.
        route: dict[str, Any] = {}
        if isinstance(self._redis, RedisCluster):
            route["target_nodes"] = self._redis.get_node_from_key(keys[0])
        for attempt in range(2):
            pipe = self._redis.pipeline(transaction=False)
            # EVALSHA by name: cluster pipelines block the evalsha() helper, not the command.
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            for wait in waits:
                pipe.execute_command(*wait, **route)
            results = await pipe.execute(raise_on_error=False)
            if isinstance(results[0], NoScriptError) and attempt == 0:
                # The server lost its script cache; nothing ran, so load and send again.
                await self._redis.script_load(script.script)
                continue
            if isinstance(results[0], Exception):
                raise results[0]
            for wait, result in zip(waits, results[1:], strict=True):
                if isinstance(result, Exception):
                    # The script ran: a refused wait must not read as "nothing was written".
                    wanted = want.replicas + (1 if wait[0] == "WAITAOF" else 0)
                    raise NotAcknowledged(wait[0], wanted, 0, refused=str(result)) from result
            got = int(results[1])
            if got < want.replicas:
                raise NotAcknowledged("WAIT", want.replicas, got)
            if len(results) > 2:
                local, replicas = (int(n) for n in results[2])
                if local < 1:
                    raise NotAcknowledged("WAITAOF (local fsync)", 1, local)
                if replicas < want.replicas:
                    raise NotAcknowledged("WAITAOF (replica fsync)", want.replicas, replicas)
            return results[0]
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _has_waitaof(self) -> bool:
        if self._version is None:
            info = await self._redis.info("server")
            # A cluster client answers per node; the oldest node decides.
            found = [info] if "redis_version" in info else list(info.values())
            self._version = min(
                tuple(int(part) for part in str(node["redis_version"]).split(".")[:3])
                for node in found
            )
            if self._version < (7, 2):
                log.warning(
                    "Redis %s has no WAITAOF; acknowledged writes wait for replicas only",
                    ".".join(map(str, self._version)),
                )
        return self._version >= (7, 2)

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
            self._effect_script(effect.body), [*keys, *effect.keys], args
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
        await self._write(
            self._standings_script("unstand"), self._standing_keys(), [workflow, int(token)]
        )
        return int(gone)

    # --- the ledger: where each workflow's last pass left it -------------------------------

    def _standing_keys(self) -> list[str]:
        return [*self.calls.standing_keys]

    def _standings_script(self, name: str) -> AsyncScript:
        found = self._scripts.get(name)
        if found is None:
            found = self._scripts[name] = script(self._redis, name)
        return found

    async def settle(self, holder: Pass, state: str, detail: Mapping[str, object]) -> bool:
        call = self.calls.settle(holder, state, detail)
        # Through the batcher, like every other write of a pass: at capacity the standings of a
        # turn's passes go out in the same pipeline as their records and finishes.
        written = await self._write(self._standings_script("settle"), call.keys, call.args)
        return bool(int(written))

    def _standing(self, workflow: str, held: str | None) -> Standing | None:
        if not held:
            return None
        _, state, at, detail = [*held.split("\n", 3), "", "", ""][:4]
        if not state:
            return None  # a tombstone: the workflow was discarded
        return Standing(workflow, state, json.loads(detail), from_server_ms(int(at)))

    async def look(self, workflow: str) -> Look:
        keys = self.keys(workflow)
        # Two slots (the workflow's, the namespace's): sent in the same turn, so the batcher
        # puts them in one pipeline on a single node (one round trip); a cluster sends each to
        # its own node, at once.
        (claimed, known, passed), held = await asyncio.gather(
            self._read(self._script("looked"), keys),
            self._batcher.run(
                self._standings_script("standing"),
                [namespace_key(self.namespace, "standings")],
                [workflow],
            ),
        )
        standing = self._standing(workflow, None if held is None else str(held))
        if standing is not None and _vanished(known, passed):
            # The checkpoint expired (its ttl) while its standing, on the namespace's slot,
            # stayed: the workflow is gone, whatever the standing says (`sweep` drops it).
            standing = None
        return Look(standing, bool(int(claimed)), bool(int(known)))

    async def standings(
        self, state: str | None, prefix: str | None, limit: int, after: str | None
    ) -> list[Standing]:
        """A page of standings in id order. A standing whose checkpoint has expired is left out
        (and dropped, as `sweep` would): the page's standings older than the ttl are checked
        against their workflows' own keys (`_gone`, one more round trip, only when there are
        any), and the page reads on past what it left out until it is full."""
        check_state(state)
        check_page(prefix, limit, after)
        index = namespace_key(self.namespace, f"state:{state or 'all'}")
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
        while True:
            wanted = limit - len(page)
            reply = await self._batcher.run(
                self._standings_script("standings"),
                [namespace_key(self.namespace, "standings"), index],
                [low, high, wanted],
            )
            held = {str(reply[i]): str(reply[i + 1]) for i in range(0, len(reply), 2)}
            gone = await self._gone(held)
            stop_if_cancelled()
            for workflow, text in held.items():
                standing = None if workflow in gone else self._standing(workflow, text)
                if standing is not None:
                    page.append(standing)
            if len(held) < wanted or not gone:
                return page
            low = "(" + str(reply[-2])

    async def tally(self, prefix: str | None = None) -> dict[str, int]:
        """Counts of the state indexes. A standing whose checkpoint expired counts until a
        listing or `sweep` drops it."""
        check_page(prefix, 1, None)
        low: str | bytes = "-"
        high: str | bytes = "+"
        if prefix:
            low = "[" + prefix
            above = _successor(prefix.encode())
            if above is not None:
                high = b"(" + above
        keys = [namespace_key(self.namespace, f"state:{state}") for state in STATES]
        counts = await self._batcher.run(self._standings_script("tally"), keys, [low, high])
        return {state: int(n) for state, n in zip(STATES, counts, strict=True) if int(n)}

    async def _gone(self, held: Mapping[str, str]) -> set[str]:
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
        looked = self._script("looked")  # what `look` asks, for each id
        # One pipeline on a single node (the batcher); on a cluster, each to its own slot.
        seen = await asyncio.gather(*(self._read(looked, self.keys(id_)) for id_ in ids))
        gone = {
            id_ for id_, (_, known, passed) in zip(ids, seen, strict=True)
            if _vanished(known, passed)
        }
        if gone:
            args: list[str] = []
            for id_ in sorted(gone):
                args += [id_, held[id_].split("\n", 1)[0]]
            await self._write(self._standings_script("forget"), self._standing_keys(), args)
        return gone

    async def sweep(self, count: int = 500) -> tuple[int, bool]:
        """One step of the walk over this namespace's standings (`HSCAN` of its one hash, never
        the keyspace) that drops those whose checkpoints have expired, and the tombstones of
        deleted workflows once their fence has expired too. Without it each finished workflow
        would leave its standing behind for good after its records expire.

        Looks at about `count` standings; returns how many it dropped and whether the walk
        has come round to its start (the next step begins a new one)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be a positive number, got {count!r}")
        key = namespace_key(self.namespace, "standings")
        cursor, found = await self._redis.hscan(key, self._swept, count=count)
        self._swept = int(cursor)
        assert isinstance(found, dict)  # HSCAN without NOVALUES: field -> value
        held = {str(id_): str(text) for id_, text in found.items()}
        dropped = len(await self._gone(held))
        return dropped, self._swept == 0

    async def release(self, holder: Pass) -> None:
        call = self.calls.release(holder)
        await self._write(self._script(call.name), call.keys, call.args)

    # --- beyond the protocol ----------------------------------------------------------------

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
        return self._batcher

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

