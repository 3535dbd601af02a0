"""`ScriptBatcher`: scripts asked for in one turn of the event loop travel as one pipeline, and each
caller still gets exactly its own reply or error."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from durability.redis.batching import MOST, ScriptBatcher
from durability.redis.shared_connection import Unsendable

# Counts its calls in KEYS[1] and answers with what it was given, so a reply that reached the
# wrong caller shows; ARGV[2] == "fail" makes it raise instead.
ECHO = """
if ARGV[2] == 'fail' then return redis.error_reply('asked to fail: ' .. ARGV[1]) end
redis.call('INCR', KEYS[1])
return {ARGV[1], KEYS[1]}
"""


async def test_each_caller_gets_its_own_reply(redis: Redis, namespace: str) -> None:
    batcher = ScriptBatcher(redis)
    echo = redis.register_script(ECHO)
    counter = f"{namespace}:calls"
    n = 3 * MOST + 5  # more than one pipeline's worth in a single turn

    async def one(i: int) -> list[str]:
        reply: list[str] = await batcher.run(echo, [counter], [f"call-{i}", "ok"])
        return reply

    replies = await asyncio.gather(*(one(i) for i in range(n)))
    assert replies == [[f"call-{i}", counter] for i in range(n)]
    assert int(await redis.get(counter) or 0) == n


async def test_one_error_stays_with_its_caller(redis: Redis, namespace: str) -> None:
    batcher = ScriptBatcher(redis)
    echo = redis.register_script(ECHO)
    counter = f"{namespace}:calls"
    calls = [
        batcher.run(echo, [counter], [f"call-{i}", "fail" if i == 3 else "ok"]) for i in range(8)
    ]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(outcomes[3], ResponseError)
    assert "asked to fail: call-3" in str(outcomes[3])
    assert [o for i, o in enumerate(outcomes) if i != 3] == [
        [f"call-{i}", counter] for i in range(8) if i != 3
    ]
    assert int(await redis.get(counter) or 0) == 7  # the failing one wrote nothing


async def test_a_call_that_cannot_be_packed_fails_alone_and_shifts_no_reply(
    redis: Redis, namespace: str
) -> None:
    batcher = ScriptBatcher(redis)
    echo = redis.register_script(ECHO)
    counter = f"{namespace}:calls"
    bad = {0, 5, 6, MOST + 2}  # first, adjacent, and in the second pipeline of the turn
    n = MOST + 10
    calls = [
        batcher.run(echo, [counter], [f"call-{i}" + ("\ud800" if i in bad else ""), "ok"])
        for i in range(n)
    ]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    for i in bad:
        assert isinstance(outcomes[i], Unsendable)
    assert [o for i, o in enumerate(outcomes) if i not in bad] == [
        [f"call-{i}", counter] for i in range(n) if i not in bad
    ]
    assert int(await redis.get(counter) or 0) == n - len(bad)


async def test_a_cancelled_caller_leaves_the_others_their_replies(
    redis: Redis, namespace: str
) -> None:
    batcher = ScriptBatcher(redis)
    echo = redis.register_script(ECHO)
    counter = f"{namespace}:calls"
    tasks = [
        asyncio.create_task(batcher.run(echo, [counter], [f"call-{i}", "ok"])) for i in range(6)
    ]
    await asyncio.sleep(0)  # queued, not yet sent
    tasks[2].cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(outcomes[2], asyncio.CancelledError)
    assert [o for i, o in enumerate(outcomes) if i != 2] == [
        [f"call-{i}", counter] for i in range(6) if i != 2
    ]


async def test_a_burst_shares_one_connection(
    spawn_redis: Callable[..., int], private_client: Callable[[int], Redis]
) -> None:
    port = spawn_redis()
    client, observer = private_client(port), private_client(port)
    try:
        batcher = ScriptBatcher(client)
        echo = client.register_script(ECHO)
        await batcher.run(echo, ["n"], ["warm", "ok"])  # loads the script, opens a connection
        before = int((await observer.info("stats"))["total_connections_received"])
        await asyncio.gather(*(batcher.run(echo, ["n"], [str(i), "ok"]) for i in range(50)))
        # Sent one by one, fifty concurrent calls would each have checked out a connection;
        # as one pipeline they reuse the one the warm-up opened.
        after = int((await observer.info("stats"))["total_connections_received"])
        assert after == before
        assert await observer.get("n") == "51"
    finally:
        await client.aclose()
        await observer.aclose()


async def test_a_flushed_script_cache_is_reloaded_and_nothing_runs_twice(
    spawn_redis: Callable[..., int], private_client: Callable[[int], Redis]
) -> None:
    port = spawn_redis()
    client = private_client(port)
    try:
        batcher = ScriptBatcher(client)
        echo = client.register_script(ECHO)
        await batcher.run(echo, ["n"], ["warm", "ok"])
        await client.script_flush()
        calls = [batcher.run(echo, ["n"], [str(i), "ok"]) for i in range(10)]
        replies = await asyncio.gather(*calls)
        assert replies == [[str(i), "n"] for i in range(10)]
        assert await client.get("n") == "11"  # each ran exactly once: NOSCRIPT ran nothing
    finally:
        await client.aclose()


async def test_a_server_that_went_away_fails_every_caller(
    spawn_redis: Callable[..., int],
) -> None:
    port = spawn_redis()
    # No retries: redis-py's default backs off for seconds before giving up.
    client, killer = (Redis(port=port, retry=Retry(NoBackoff(), 0)) for _ in range(2))
    try:
        batcher = ScriptBatcher(client)
        echo = client.register_script(ECHO)
        await batcher.run(echo, ["n"], ["warm", "ok"])
        with contextlib.suppress(RedisConnectionError):
            await killer.shutdown(nosave=True)
        outcomes = await asyncio.gather(
            *(batcher.run(echo, ["n"], [str(i), "ok"]) for i in range(5)), return_exceptions=True
        )
        assert all(isinstance(o, RedisConnectionError) for o in outcomes), outcomes
    finally:
        await client.aclose()
        await killer.aclose()
