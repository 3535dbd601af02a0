"""What is specific to `RedisCheckpointer`: its scripts under real concurrency, its key layout,
its expiry, its refusals, and `LuaEffect`. The shared contract runs in `test_conformance`."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from durability.interfaces import INBOX, Effect, Fenced, claimed, inbox_key
from durability.redis import (
    MAX_WORKFLOW,
    LuaEffect,
    RedisCheckpointer,
    hash_tag,
    sweeping,
    workflow_keys,
    workflow_tag,
)
from durability.status import status
from durability.testing.conformance import (
    CheckpointerContract,
    CheckpointerModelContract,
    EffectKit,
)

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[3]
BUDGET = timedelta(minutes=1)
ALIVE = timedelta(seconds=30)
INCR = "return redis.call('INCRBY', KEYS[1], ARGV[1])"


@pytest.fixture
def store(redis: Redis) -> RedisCheckpointer:
    return RedisCheckpointer(redis=redis, ttl=timedelta(minutes=10))


# --- the fence under real concurrency ---------------------------------------------------------


async def test_fifty_concurrent_claims_yield_exactly_one_pass(
    redis: Redis, namespace: str
) -> None:
    # Fifty clients, so the claims really arrive on fifty connections at once.
    clients = [Redis(host=HOST, decode_responses=True) for _ in range(50)]
    try:
        stores = [RedisCheckpointer(redis=client, ttl=timedelta(minutes=10)) for client in clients]
        workflow = f"{namespace}-race"
        results = await asyncio.gather(*(s.claim(workflow, BUDGET, ALIVE) for s in stores))
    finally:
        await asyncio.gather(*(client.aclose() for client in clients))
    winners = [result for result in results if result is not None]
    assert len(winners) == 1
    claim = await redis.hgetall(workflow_keys(workflow)[1])
    assert int(claim["token"]) == winners[0].token


_CLAIMER = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from datetime import timedelta
    from redis.asyncio import Redis
    from durability.redis import RedisCheckpointer

    async def main(start, workflows):
        redis = Redis(host="127.0.0.1", decode_responses=True)
        store = RedisCheckpointer(redis=redis, ttl=timedelta(minutes=10))
        await redis.ping()
        await asyncio.sleep(max(0.0, start - time.time()))
        won = {}
        for workflow in workflows:
            held = await store.claim(workflow, timedelta(minutes=1), timedelta(seconds=30))
            won[workflow] = None if held is None else held.token
        await redis.aclose()
        print(json.dumps(won))

    asyncio.run(main(float(sys.argv[1]), sys.argv[2:]))
    """
)


async def test_two_processes_claiming_at_once_never_both_win(
    redis: Redis, namespace: str
) -> None:
    workflows = [f"{namespace}-proc-{n}" for n in range(30)]
    start = time.time() + 1.0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", _CLAIMER, str(start), *workflows,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )
        for _ in range(2)
    ]
    outputs = [await process.communicate() for process in processes]
    for process, (_, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err.decode()
    first, second = (json.loads(out) for out, _ in outputs)
    for workflow in workflows:
        tokens = [first[workflow], second[workflow]]
        assert sum(token is not None for token in tokens) == 1, (workflow, tokens)
        claim = await redis.hgetall(workflow_keys(workflow)[1])
        assert int(claim["token"]) in tokens


async def test_a_stalled_pass_is_fenced_after_a_new_claim(
    store: RedisCheckpointer, namespace: str
) -> None:
    workflow = f"{namespace}-stale"
    old = await store.claim(workflow, BUDGET, timedelta(milliseconds=150))
    assert old is not None
    await asyncio.sleep(0.3)
    new = await claimed(store, workflow)
    assert new.token > old.token
    with pytest.raises(Fenced, match="newer claim"):
        await store.record(old, "late", 1)
    assert await store.load(workflow) == {}
    assert (await store.record(new, "late", 2)).first


async def test_a_claim_that_lapses_is_fenced(store: RedisCheckpointer, namespace: str) -> None:
    workflow = f"{namespace}-lapse"
    holder = await store.claim(workflow, BUDGET, timedelta(milliseconds=150))
    assert holder is not None
    await asyncio.sleep(0.3)
    with pytest.raises(Fenced, match="lapsed"):
        await store.record(holder, "k", 1)
    with pytest.raises(Fenced):
        await store.renew(holder, ALIVE)


async def test_tokens_rise_even_after_the_keys_expire(
    store: RedisCheckpointer, redis: Redis, namespace: str
) -> None:
    workflow = f"{namespace}-expired"
    first = await claimed(store, workflow)
    # What the TTL would do: every key of the workflow gone, fence included. (An expiry comes
    # at least a TTL after the claim, so the server clock has moved on; wait out one ms.)
    await asyncio.sleep(0.005)
    await redis.delete(*workflow_keys(workflow))
    second = await claimed(store, workflow)
    assert second.token > first.token
    with pytest.raises(Fenced):
        await store.record(first, "k", 1)


# --- layout -------------------------------------------------------------------------------


async def test_records_keep_first_recorded_order_past_the_compact_hash(
    store: RedisCheckpointer, redis: Redis, namespace: str
) -> None:
    workflow = f"{namespace}-order"
    holder = await claimed(store, workflow)
    names = [f"step-{n:03d}" for n in range(300)]
    random.Random(7).shuffle(names)
    for value, name in enumerate(names):
        await store.record(holder, name, value)
        await store.record(holder, name, -1)  # a losing write must not move it
    loaded = await store.load(workflow)
    assert list(loaded) == names
    assert list(loaded.values()) == list(range(300))
    # The records hash is the user's vocabulary only: nothing of the engine's in it.
    raw = await redis.hgetall(workflow_keys(workflow)[0])
    assert {key: json.loads(text) for key, text in raw.items()} == loaded


async def test_history_times_come_from_the_server_clock(
    store: RedisCheckpointer, redis: Redis, namespace: str
) -> None:
    workflow = f"{namespace}-history"
    seconds, micros = await redis.time()
    before = datetime.fromtimestamp(seconds + micros / 1e6, UTC).replace(microsecond=0)
    await store.supply(workflow, "a", 1)
    await store.supply(workflow, "b", [2])
    seconds, micros = await redis.time()
    after = datetime.fromtimestamp(seconds + micros / 1e6, UTC)
    history = await store.history(workflow)
    assert [(w.key, w.value) for w in history] == [("a", 1), ("b", [2])]
    for written in history:
        assert written.at.tzinfo is not None
        assert before <= written.at <= after
    assert history[0].at <= history[1].at


async def test_discard_keeps_the_claim_and_the_inbox_counter(
    store: RedisCheckpointer, redis: Redis, namespace: str
) -> None:
    workflow = f"{namespace}-discard"
    holder = await claimed(store, workflow)
    await store.record(holder, "k", 1)
    assert (await store.append(workflow, "hello")).key == inbox_key(1)
    assert await store.discard(workflow) == 2
    records, claim, order = workflow_keys(workflow)
    assert await redis.exists(records, order) == 0
    kept = await redis.hgetall(claim)
    assert int(kept["token"]) > holder.token
    assert kept["until"] == "0"
    assert await redis.pttl(claim) > 0
    with pytest.raises(Fenced):
        await store.record(holder, "k2", 2)
    assert (await store.append(workflow, "again")).key == inbox_key(2)
    assert await store.load(workflow) == {inbox_key(2): "again"}


async def test_append_steps_over_a_key_already_taken(
    store: RedisCheckpointer, redis: Redis, namespace: str
) -> None:
    workflow = f"{namespace}-inbox"
    await store.append(workflow, "one")
    # The counter lost (as if the claim key expired alone): the next key must not collide.
    await redis.hdel(workflow_keys(workflow)[1], "appended")
    entry = await store.append(workflow, "two")
    assert entry.key == inbox_key(2)
    assert await store.load(workflow) == {inbox_key(1): "one", inbox_key(2): "two"}
    assert all(key.startswith(INBOX) for key in await store.load(workflow))


# --- expiry ---------------------------------------------------------------------------------


async def test_every_write_rearms_the_ttl_on_every_key(
    redis: Redis, namespace: str
) -> None:
    store = RedisCheckpointer(redis=redis, ttl=timedelta(seconds=60))
    workflow = f"{namespace}-ttl"
    keys = workflow_keys(workflow)
    holder = await claimed(store, workflow)
    await store.record(holder, "a", 1)
    writes: list[Callable[[], Awaitable[object]]] = [
        lambda: store.record(holder, "b", 2),
        lambda: store.supply(workflow, "c", 3),
        lambda: store.append(workflow, 4),
        lambda: store.renew(holder, ALIVE),
        lambda: store.extend(holder, BUDGET, ALIVE),
        lambda: store.transact(holder, "d", LuaEffect(INCR, [f"n:{workflow_tag(workflow)}"], [1])),
    ]
    for write in writes:
        for key in keys:
            await redis.pexpire(key, 1000)
        await write()
        for key in keys:
            assert await redis.pttl(key) > 50_000, (key, write)


async def test_a_write_never_shortens_a_held_expiry(
    store: RedisCheckpointer, redis: Redis, namespace: str
) -> None:
    workflow = f"{namespace}-held"
    holder = await claimed(store, workflow)
    await store.record(holder, "a", 1)
    await store.hold(workflow, datetime.now(UTC) + timedelta(days=3))
    await store.record(holder, "b", 2)
    await store.supply(workflow, "c", 3)
    for key in workflow_keys(workflow):
        assert await redis.pttl(key) > timedelta(days=3).total_seconds() * 1000


async def test_hold_without_a_deadline_rearms_the_ttl(
    redis: Redis, namespace: str
) -> None:
    store = RedisCheckpointer(redis=redis, ttl=timedelta(seconds=60))
    workflow = f"{namespace}-blocked"
    holder = await claimed(store, workflow)
    await store.record(holder, "a", 1)
    for key in workflow_keys(workflow):
        await redis.pexpire(key, 1000)
    await store.hold(workflow)
    for key in workflow_keys(workflow):
        assert await redis.pttl(key) > 50_000


async def test_a_sleeping_workflow_outlives_its_ttl(redis: Redis, namespace: str) -> None:
    store = RedisCheckpointer(redis=redis, ttl=timedelta(seconds=1))
    asleep, forgotten = f"{namespace}-asleep", f"{namespace}-forgotten"
    wake = datetime.now(UTC) + timedelta(seconds=3)
    for workflow in (asleep, forgotten):
        holder = await claimed(store, workflow)
        await store.record(holder, "charged", "ch_1")
        await store.record(holder, "settling", wake.isoformat())
        await store.release(holder)
    await store.hold(asleep, wake)
    # The real clock is the point: a TTL of 1 s has passed twice over.
    await asyncio.sleep(2.5)
    assert await redis.exists(*workflow_keys(asleep)) == 3
    assert await store.load(asleep) == {"charged": "ch_1", "settling": wake.isoformat()}
    assert await redis.exists(*workflow_keys(forgotten)) == 0


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    ["", "a{b", "a}b", "{tag}", "x" * (MAX_WORKFLOW + 1)],
    ids=["empty", "open-brace", "close-brace", "tag", "too-long"],
)
async def test_bad_ids_are_refused_before_anything_is_sent(bad: str) -> None:
    # A client to a port nothing listens on: any attempt to send would be a ConnectionError.
    nowhere = Redis(host=HOST, port=1, decode_responses=True)
    store = RedisCheckpointer(redis=nowhere)
    calls = [
        store.claim(bad, BUDGET, ALIVE),
        store.load(bad),
        store.history(bad),
        store.supply(bad, "k", 1),
        store.append(bad, 1),
        store.discard(bad),
        store.hold(bad),
    ]
    for call in calls:
        with pytest.raises(ValueError):
            await call
    with pytest.raises(ValueError):
        workflow_keys(bad)
    await nowhere.aclose()


class _Verbatim:
    """A codec that hands text through unchecked, as a user's own codec might."""

    def encode(self, value: object) -> str:
        assert isinstance(value, str)
        return value

    def decode(self, text: str) -> object:
        return text


async def test_text_that_cannot_be_sent_fails_its_own_write_and_shifts_no_reply(
    redis: Redis, namespace: str
) -> None:
    # The default codec refuses a lone surrogate (Unencodable); a codec that lets one through
    # must still cost only its own write. Before, its reply slot was queued on the shared
    # connection with nothing sent for it, and every later caller got the next one's reply.
    store = RedisCheckpointer(redis=redis, ttl=timedelta(minutes=10), codec=_Verbatim())
    workflows = [f"{namespace}-{n}" for n in range(12)]
    holders = [await claimed(store, workflow) for workflow in workflows]
    outcomes = await asyncio.gather(
        *(
            store.record(holder, "k", f"value-{n}" + ("\ud800" if n in (0, 5) else ""))
            for n, holder in enumerate(holders)
        ),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], ValueError) and isinstance(outcomes[5], ValueError)
    loads = await asyncio.gather(*(store.load(workflow) for workflow in workflows))
    for n, (outcome, loaded) in enumerate(zip(outcomes, loads, strict=True)):
        if n in (0, 5):
            assert loaded == {}
        else:
            assert not isinstance(outcome, BaseException) and outcome.value == f"value-{n}"
            assert loaded == {"k": f"value-{n}"}


async def test_the_longest_id_is_accepted(store: RedisCheckpointer, namespace: str) -> None:
    workflow = (namespace + "-" + "x" * MAX_WORKFLOW)[:MAX_WORKFLOW]
    assert (await store.supply(workflow, "k", 1)).first
    assert await store.load(workflow) == {"k": 1}


# --- LuaEffect ------------------------------------------------------------------------------


async def test_a_lua_effect_runs_once_and_its_result_is_recorded(
    store: RedisCheckpointer, redis: Redis, namespace: str
) -> None:
    workflow = f"{namespace}-effect"
    counter = f"stock:{workflow_tag(workflow)}"
    holder = await claimed(store, workflow)
    effect = LuaEffect(INCR, [counter], [5])
    first = await store.transact(holder, "reserved", effect)
    assert (first.value, first.first) == (5, True)
    assert await redis.get(counter) == "5"
    again = await store.transact(holder, "reserved", LuaEffect(INCR, [counter], [100]))
    assert (again.value, again.first) == (5, False)
    assert await redis.get(counter) == "5"
    assert await store.load(workflow) == {"reserved": 5}


async def test_a_fenced_transact_runs_no_effect(
    store: RedisCheckpointer, redis: Redis, namespace: str
) -> None:
    workflow = f"{namespace}-fenced-effect"
    counter = f"stock:{workflow_tag(workflow)}"
    old = await claimed(store, workflow)
    await store.discard(workflow)
    with pytest.raises(Fenced):
        await store.transact(old, "reserved", LuaEffect(INCR, [counter], [1]))
    assert await redis.get(counter) is None
    assert await store.load(workflow) == {}


async def test_effect_keys_must_carry_the_workflow_tag(
    store: RedisCheckpointer, redis: Redis, namespace: str
) -> None:
    workflow = f"{namespace}-tag"
    holder = await claimed(store, workflow)
    elsewhere = [
        f"stock:{namespace}",  # no tag at all
        f"stock:{{{namespace}-other}}",  # another workflow's tag
        f"{{x}}{workflow_tag(workflow)}",  # Redis hashes the first tag only
    ]
    for key in elsewhere:
        with pytest.raises(ValueError, match="hash tag"):
            await store.transact(holder, "k", LuaEffect(INCR, [key], [1]))
        assert await redis.exists(key) == 0
    with pytest.raises(ValueError, match="own keys"):
        await store.transact(holder, "k", LuaEffect(INCR, [workflow_keys(workflow)[0]], [1]))
    assert await store.load(workflow) == {}


async def test_transact_refuses_other_effects(store: RedisCheckpointer, namespace: str) -> None:
    holder = await claimed(store, f"{namespace}-type")
    with pytest.raises(TypeError):
        await store.transact(holder, "k", Effect())


async def test_a_failing_effect_records_nothing(
    store: RedisCheckpointer, namespace: str
) -> None:
    workflow = f"{namespace}-boom"
    holder = await claimed(store, workflow)
    with pytest.raises(ResponseError, match="boom"):
        await store.transact(holder, "k", LuaEffect("error('boom')", []))
    assert await store.load(workflow) == {}


async def test_effect_results_come_back_as_json_values(
    store: RedisCheckpointer, namespace: str
) -> None:
    workflow = f"{namespace}-shapes"
    holder = await claimed(store, workflow)
    body = "return {ARGV[1], tonumber(ARGV[2]), {name = ARGV[1]}}"
    recorded = await store.transact(holder, "k", LuaEffect(body, [], ["a", 2]))
    assert recorded.value == ["a", 2, {"name": "a"}]
    assert await store.load(workflow) == {"k": ["a", 2, {"name": "a"}]}


def test_hash_tag_follows_the_cluster_rule() -> None:
    assert hash_tag("a:{wf}:b") == "wf"
    assert hash_tag("{}{wf}") is None
    assert hash_tag("{a}{b}") == "a"
    assert hash_tag("plain") is None
    assert hash_tag("a{b") is None


def test_a_lua_effect_is_a_value() -> None:
    keys = ["k:{w}"]
    effect = LuaEffect("return 1", keys, [1, "x", 2.5])
    keys.append("other")
    assert effect.keys == ("k:{w}",)
    assert effect == LuaEffect("return 1", ("k:{w}",), (1, "x", 2.5))
    with pytest.raises(ValueError):
        LuaEffect("  ", [])
    with pytest.raises(TypeError):
        LuaEffect("return 1", [], [True])


# --- scripts the server forgot ----------------------------------------------------------------


async def test_scripts_are_reloaded_after_script_flush(
    spawn_redis: Callable[..., int], private_client: Callable[[int], Redis]
) -> None:
    # SCRIPT FLUSH only on a server of our own: the shared one's cache is other runs' too.
    client = private_client(spawn_redis())
    try:
        store = RedisCheckpointer(redis=client)
        holder = await claimed(store, "wf")
        await store.record(holder, "a", 1)
        await store.transact(holder, "e", LuaEffect(INCR, ["n:{wf}"], [1]))
        await client.script_flush()
        assert (await store.record(holder, "b", 2)).first
        assert (await store.transact(holder, "f", LuaEffect(INCR, ["n:{wf}"], [1]))).value == 2
        assert await store.load("wf") == {"a": 1, "e": 1, "b": 2, "f": 2}
    finally:
        await client.aclose()


# --- the shared contract --------------------------------------------------------------------


class TestRedisCheckpointer(CheckpointerContract):
    @pytest.fixture
    def checkpointer(self, redis: Redis) -> RedisCheckpointer:
        return RedisCheckpointer(redis=redis, ttl=timedelta(minutes=10))

    @pytest.fixture
    def effect_kit(self, redis: Redis, lua_counter: Callable[[Redis], EffectKit]) -> EffectKit:
        return lua_counter(redis)


class TestRedisCheckpointerModel(CheckpointerModelContract):
    checkpointer = TestRedisCheckpointer.checkpointer
    effect_kit = TestRedisCheckpointer.effect_kit


async def test_a_standing_outliving_its_expired_checkpoint_is_not_a_status(redis: Redis) -> None:
    # The checkpoint's keys expire on their ttl; the standing (on the namespace's slot) has
    # none. Before: status went on saying "failed" for a workflow whose records were gone, and
    # retry answered False. Now the workflow is unknown.
    store = RedisCheckpointer(redis=redis, ttl=timedelta(seconds=1))
    workflow = f"expiring-{uuid.uuid4().hex[:8]}"
    holder = await store.claim(workflow, BUDGET, timedelta(milliseconds=200))
    assert holder is not None
    await store.record(holder, "charged", 1)
    assert await store.settle(holder, "failed", {"failure": None})
    await store.release(holder)
    assert (await status(store, workflow)).state == "failed"
    async with asyncio.timeout(30):
        while True:
            if not await redis.exists(*store.keys(workflow)):
                break
            await asyncio.sleep(0.1)
    assert (await status(store, workflow)).state == "unknown"


async def test_a_status_is_one_round_trip_on_one_node(redis: Redis, namespace: str) -> None:
    # The look (the workflow's slot) and the standing (the namespace's) were two commands on
    # two connections, two round trips; through the batcher they share one pipeline.
    from durability.redis.packed_connection import PackedConnection
    from durability.storekit.traffic import Traffic

    traffic = Traffic()
    where = redis.connection_pool.connection_kwargs
    client = Redis.from_url(f"redis://{where['host']}:{where['port']}/0", decode_responses=True,
                            connection_class=PackedConnection, traffic=traffic)
    try:
        store = RedisCheckpointer(redis=client, namespace=namespace, ttl=timedelta(minutes=10))
        await _stood(store, f"{namespace}-one", "failed")
        assert (await status(store, f"{namespace}-one")).state == "failed"  # connections made
        before = traffic.snapshot()
        found = await status(store, f"{namespace}-one")
        sent = traffic.snapshot() - before
        assert found.state == "failed"
        assert sent.round_trips == 1, sent
    finally:
        await client.aclose()


# --- standings whose checkpoints expired: left out of listings, swept -----------------------

#: A ttl short enough to wait out: a standing older than it may have outlived its checkpoint.
SHORT = timedelta(milliseconds=500)
AN_HOUR = timedelta(hours=1)


async def _stood(store: RedisCheckpointer, workflow: str, state: str) -> None:
    holder = await store.claim(workflow, BUDGET, timedelta(milliseconds=200))
    assert holder is not None
    await store.record(holder, "charged", 1)
    assert await store.settle(holder, state, {})
    await store.release(holder)


async def _keep(store: RedisCheckpointer, *workflows: str) -> None:
    """Keep these checkpoints an hour past their ttl, as a long sleep does."""
    for workflow in workflows:
        await store.hold(workflow, datetime.now(UTC) + AN_HOUR)


async def _past_the_ttl() -> None:
    # Every standing is now older than the ttl, and every checkpoint not kept has expired
    # (EXISTS sees an expired key as gone, whether or not the server has reaped it yet).
    await asyncio.sleep(2 * SHORT.total_seconds())


async def test_a_listing_leaves_out_and_drops_standings_whose_checkpoints_expired(
    redis: Redis, namespace: str
) -> None:
    store = RedisCheckpointer(redis=redis, namespace=namespace, ttl=SHORT)
    names = [f"w{i}" for i in range(6)]
    for name in names:
        await _stood(store, name, "completed")
        if name in names[4:]:
            await _keep(store, name)
    await _past_the_ttl()
    standings = f"{{{namespace}}}:standings"
    assert await redis.hlen(standings) == 6  # the standings have no ttl of their own

    # A page of two reads on past the four gone ones, so it is still full.
    page = await store.standings("completed", None, 2, None)
    assert [s.workflow for s in page] == names[4:]
    assert [s.workflow for s in await store.standings(None, None, 10, None)] == names[4:]
    # ... and the gone ones' standings were dropped on the way, from every index.
    assert sorted(await redis.hkeys(standings)) == names[4:]
    assert await redis.zcard(f"{{{namespace}}}:state:all") == 2
    assert await redis.zcard(f"{{{namespace}}}:state:completed") == 2


async def test_a_fresh_standing_is_listed_without_asking_after_its_checkpoint(
    redis: Redis, namespace: str
) -> None:
    # Younger than the ttl, a standing's checkpoint cannot have expired (its pass re-armed it
    # as it ended): the listing asks nothing more. Shown by a checkpoint deleted by hand,
    # which a listing of fresh standings does not notice.
    store = RedisCheckpointer(redis=redis, namespace=namespace, ttl=AN_HOUR)
    await _stood(store, "fresh", "completed")
    await redis.delete(*store.keys("fresh"))
    listed = await store.standings("completed", None, 10, None)
    assert [s.workflow for s in listed] == ["fresh"]


async def test_a_sweep_drops_expired_standings_and_spent_tombstones_and_nothing_else(
    redis: Redis, namespace: str
) -> None:
    store = RedisCheckpointer(redis=redis, namespace=namespace, ttl=SHORT)
    kept = [f"kept{i:03d}" for i in range(300)]  # past one HSCAN step's few hundred
    gone = [f"gone{i:03d}" for i in range(300)]
    for name in (*kept, *gone):
        await _stood(store, name, "failed")
        if name in kept:  # at once: a ttl this short runs out while the rest are written
            await _keep(store, name)
    # A deleted workflow leaves a tombstone (its fence) that goes once its claim hash expires;
    # one whose claim hash is still there keeps it, so a late pass stays fenced.
    await _stood(store, "deleted-spent", "completed")
    await _stood(store, "deleted-fenced", "completed")
    await store.discard("deleted-spent")
    await store.discard("deleted-fenced")
    await _keep(store, "deleted-fenced")
    await _past_the_ttl()

    dropped, rounds = 0, 0
    while True:
        gone_now, round_ = await store.sweep(count=100)
        dropped += gone_now
        rounds += 1
        if round_:
            break
    assert rounds > 1  # it walked in steps
    assert dropped == len(gone) + 1
    standings = f"{{{namespace}}}:standings"
    assert sorted(await redis.hkeys(standings)) == sorted([*kept, "deleted-fenced"])
    assert await redis.zcard(f"{{{namespace}}}:state:failed") == len(kept)
    assert (await status(store, kept[0])).state == "failed"
    # A second walk finds nothing more to drop.
    while True:
        gone_now, round_ = await store.sweep()
        assert gone_now == 0
        if round_:
            break


async def test_a_standing_written_again_after_its_id_was_seen_gone_is_not_dropped(
    redis: Redis, namespace: str
) -> None:
    # Between a sweep seeing a checkpoint gone and dropping its standing, the id may be used
    # again and its new pass settle: the drop is fenced by the token it saw.
    store = RedisCheckpointer(redis=redis, namespace=namespace, ttl=SHORT)
    standings = f"{{{namespace}}}:standings"
    await _stood(store, "again", "failed")
    await _past_the_ttl()
    seen = {"again": str(await redis.hget(standings, "again"))}
    await _stood(store, "again", "completed")  # the id used again, a newer token
    assert await store._standings.gone(seen) == set()  # its checkpoint is there again
    await _past_the_ttl()
    assert await store._standings.gone(seen) == {"again"}  # gone, but not the standing seen
    assert await redis.hexists(standings, "again")  # so the newer standing was not dropped
    # A listing that finds that one gone drops it in its turn.
    assert (await store.standings("completed", None, 10, None)) == []
    assert not await redis.hexists(standings, "again")


async def test_housekeeping_sweeps_on_its_own(redis: Redis, namespace: str) -> None:
    store = RedisCheckpointer(redis=redis, namespace=namespace, ttl=SHORT)
    for name in ("a", "b"):
        await _stood(store, name, "completed")
    await _keep(store, "b")
    await _past_the_ttl()
    task = asyncio.create_task(
        sweeping(store, every=timedelta(milliseconds=50), step=timedelta(milliseconds=10))
    )
    try:
        async with asyncio.timeout(30):
            while True:
                if not await redis.hexists(f"{{{namespace}}}:standings", "a"):
                    break
                await asyncio.sleep(0.02)
    finally:
        task.cancel()
    assert await redis.hkeys(f"{{{namespace}}}:standings") == ["b"]
