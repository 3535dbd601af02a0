"""`SharedConnection`: callers pipeline commands on one kept connection and each gets exactly
its replies, whatever the others do (fail, get cancelled, lose the connection)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import pytest
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from durability.redis.shared_connection import KEEP_FROM, SharedConnection, Unsendable


async def _clients_named(redis: Redis, name: str) -> int:
    listed = await redis.client_list()
    return sum(1 for client in listed if client.get("name") == name)


async def test_concurrent_callers_each_get_their_replies_in_order(
    redis: Redis, namespace: str
) -> None:
    lane = SharedConnection(redis.connection_pool)
    counter = f"{namespace}:n"

    async def one(i: int) -> list[object]:
        return await lane.execute([("INCR", counter), ("ECHO", f"call-{i}")])

    replies = await asyncio.gather(*(one(i) for i in range(200)))
    assert [echo for _, echo in replies] == [f"call-{i}" for i in range(200)]
    # INCR's replies are 1..200 in the order the commands reached the server: the order of
    # the calls, since each is written in the step it is made.
    assert [count for count, _ in replies] == list(range(1, 201))


async def test_an_error_reply_is_its_commands_alone(redis: Redis, namespace: str) -> None:
    lane = SharedConnection(redis.connection_pool)
    key = f"{namespace}:text"
    await redis.set(key, "not a number")
    first, second = await asyncio.gather(
        lane.execute([("ECHO", "before"), ("INCR", key), ("ECHO", "after")]),
        lane.execute([("ECHO", "other")]),
    )
    assert first[0] == "before" and first[2] == "after"
    assert isinstance(first[1], ResponseError)
    assert second == ["other"]


async def test_a_call_that_cannot_be_packed_sends_nothing_and_shifts_no_reply(
    redis: Redis, namespace: str
) -> None:
    lane = SharedConnection(redis.connection_pool)
    counter = f"{namespace}:n"
    # A lone surrogate cannot be encoded as UTF-8: the call that carries one fails to pack.
    # Had its reply slot been queued anyway, every caller after it would get the next reply.
    bad = {7, 50, 51, 120}

    async def one(i: int) -> list[object]:
        text = f"call-{i}\ud800" if i in bad else f"call-{i}"
        return await lane.execute([("INCR", counter), ("ECHO", text)])

    outcomes = await asyncio.gather(*(one(i) for i in range(150)), return_exceptions=True)
    for i in bad:
        refused = outcomes[i]
        assert isinstance(refused, Unsendable) and isinstance(refused, ValueError)
        assert refused.index == 1  # the ECHO; the INCR before it packed, and was not sent
        assert isinstance(refused.__cause__, UnicodeEncodeError)
    good = [i for i in range(150) if i not in bad]
    assert [outcomes[i][1] for i in good] == [f"call-{i}" for i in good]  # type: ignore[index]
    assert [outcomes[i][0] for i in good] == list(range(1, len(good) + 1))  # type: ignore[index]
    # Nothing of a refused call reached the server, and the lane goes on as before.
    assert int(await redis.get(counter) or 0) == len(good)
    assert await lane.execute([("ECHO", "after")]) == ["after"]


async def test_a_tight_pool_gets_its_connection_back_after_an_unsendable_call(
    redis: Redis,
) -> None:
    pool = _capped(redis, 1)
    client = Redis(connection_pool=pool, decode_responses=True)
    try:
        lane = SharedConnection(pool)
        with pytest.raises(Unsendable):
            await lane.execute([("ECHO", "\udcff")])
        assert await client.ping()  # the pool's only connection was given back
        assert await lane.execute([("ECHO", "fine")]) == [b"fine"]
    finally:
        await client.aclose()
        await pool.aclose()


async def test_all_callers_share_one_connection(
    spawn_redis: Callable[..., int], private_client: Callable[[int], Redis]
) -> None:
    port = spawn_redis()
    client, observer = private_client(port), private_client(port)
    try:
        lane = SharedConnection(client.connection_pool)
        await lane.execute([("CLIENT", "SETNAME", "lane")])
        before = int((await observer.info("stats"))["total_connections_received"])
        await asyncio.gather(*(lane.execute([("PING",)]) for _ in range(100)))
        after = int((await observer.info("stats"))["total_connections_received"])
        assert after == before
        assert await _clients_named(observer, "lane") == 1
    finally:
        await client.aclose()
        await observer.aclose()


async def test_a_cancelled_caller_leaves_the_connection_to_the_others(
    redis: Redis, namespace: str
) -> None:
    lane = SharedConnection(redis.connection_pool)
    key = f"{namespace}:list"
    # The first caller blocks on the server; the second's command is written behind it.
    blocked = asyncio.create_task(lane.execute([("BLPOP", key, 5)]))
    behind = asyncio.create_task(lane.execute([("ECHO", "behind")]))
    await asyncio.sleep(0.05)
    blocked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocked
    await redis.rpush(key, "x")  # ends the block: its reply is read and dropped
    assert await asyncio.wait_for(behind, 5) == ["behind"]
    assert await lane.execute([("ECHO", "later")]) == ["later"]


async def test_drop_on_cancel_ends_a_blocked_read_on_the_server(
    redis: Redis, namespace: str
) -> None:
    lane = SharedConnection(redis.connection_pool)
    key = f"{namespace}:list"
    name = f"{namespace}-lane"
    await lane.execute([("CLIENT", "SETNAME", name)])
    blocked = asyncio.create_task(lane.execute([("BLPOP", key, 5)], drop_on_cancel=True))
    await asyncio.sleep(0.05)
    blocked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocked
    for _ in range(100):  # the server notices the closed socket within a few milliseconds
        if await _clients_named(redis, name) == 0:
            break
        await asyncio.sleep(0.01)
    assert await _clients_named(redis, name) == 0
    # Nothing popped what a cancelled caller would have lost; the lane opens a new connection.
    await redis.rpush(key, "kept")
    assert await lane.execute([("LPOP", key)]) == ["kept"]


async def test_a_connection_the_server_closed_while_idle_is_opened_again(redis: Redis) -> None:
    lane = SharedConnection(redis.connection_pool)
    [first] = await lane.execute([("CLIENT", "ID")])
    assert int(await redis.execute_command("CLIENT", "KILL", "ID", first)) == 1
    await asyncio.sleep(0.05)  # the close reaches the lane's idle socket
    # Not an error for a caller that wrote nothing on the dead connection: a new one serves it.
    again, second = await lane.execute([("ECHO", "again"), ("CLIENT", "ID")])
    assert again == "again"
    assert second != first


async def test_a_server_that_went_away_fails_every_caller_outstanding(
    spawn_redis: Callable[..., int],
) -> None:
    port = spawn_redis()
    client = Redis(port=port, retry=Retry(NoBackoff(), 0))
    killer = Redis(port=port, retry=Retry(NoBackoff(), 0))
    try:
        lane = SharedConnection(client.connection_pool)
        blocked = [
            asyncio.create_task(lane.execute([("BLPOP", "never", 5)])),
            asyncio.create_task(lane.execute([("ECHO", "behind")])),
        ]
        await asyncio.sleep(0.05)
        with contextlib.suppress(RedisConnectionError):
            await killer.shutdown(nosave=True)
        outcomes = await asyncio.gather(*blocked, return_exceptions=True)
        assert all(isinstance(o, RedisConnectionError) for o in outcomes), outcomes
        with pytest.raises(RedisConnectionError):
            await lane.execute([("PING",)])
    finally:
        await client.aclose()
        await killer.aclose()


def _capped(redis: Redis, most: int) -> BlockingConnectionPool:
    """A pool to `redis`'s server of at most `most` connections, waiting a second for one."""
    kwargs = redis.connection_pool.connection_kwargs
    return BlockingConnectionPool(
        host=kwargs["host"], port=kwargs["port"], max_connections=most, timeout=1
    )


async def test_a_tight_pool_gets_its_connection_back_between_calls(redis: Redis) -> None:
    pool = _capped(redis, 1)
    client = Redis(connection_pool=pool, decode_responses=True)
    try:
        lane = SharedConnection(pool)
        for i in range(3):
            assert await lane.execute([("ECHO", f"lane-{i}")]) == [f"lane-{i}".encode()]
            # The pool's only connection is back: the client's own command gets it at once
            # (kept by the lane, this would wait a second and fail).
            assert await client.ping()
    finally:
        await client.aclose()
        await pool.aclose()


async def test_a_roomy_pool_lends_the_lane_one_connection_for_good(redis: Redis) -> None:
    pool = _capped(redis, KEEP_FROM)
    try:
        lane = SharedConnection(pool)
        [first] = await lane.execute([("CLIENT", "ID")])
        [second] = await lane.execute([("CLIENT", "ID")])
        assert first == second
    finally:
        await pool.aclose()
