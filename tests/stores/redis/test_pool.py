"""The pool `open_durable` gives a Redis client (`durability.redis.pooling`): it never holds more
connections than its bound, and it lets go of the ones the server closed and of spare ones left
idle, so a worker's sockets come back to what its calls use after every fault (the soak saw
redis-py's own pool keep its high-water mark and its half-closed sockets)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import redis as sync_redis
from redis.asyncio import Redis

from durability.connect import open_durable, unavailable
from durability.redis.bounds import TimedOut
from durability.redis.pooling import TidyPool

from .conftest import HOST, PORT

#: /proc/net/tcp's state of a socket whose far end has closed it and this end has not.
CLOSE_WAIT = "08"
#: Far beyond what a loaded machine needs for the server's close to reach this process.
SETTLES = 30.0


def _sockets(port: int) -> list[str]:
    """The states of this process's TCP sockets whose far end is `port` (any state: a socket
    the server closed and this process still holds counts)."""
    if not Path("/proc/self/net/tcp").exists():
        pytest.skip("needs Linux's /proc to see this process's sockets")
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    states = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                parts = line.split()
                if parts[9] in inodes and int(parts[2].rsplit(":", 1)[1], 16) == port:
                    states.append(parts[3])
    return states


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(SETTLES):
        while not condition():  # noqa: ASYNC110 - the kernel announces nothing: look again
            await asyncio.sleep(0.02)


def _cut_all(port: int) -> int:
    """Close every client connection of the private server on `port` but this one's."""
    killer = sync_redis.Redis(host=HOST, port=port, socket_timeout=10)
    try:
        return int(killer.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"))
    finally:
        killer.close()


async def test_after_each_cut_the_pool_keeps_no_connection_the_server_closed(
    spawn_redis: Callable[..., int],
) -> None:
    port = spawn_redis()
    url = f"redis://{HOST}:{port}/0?scheduler=set&namespace=pooled&max_connections=6"
    async with open_durable(url) as durable:
        client = durable.checkpointer.redis  # type: ignore[attr-defined]
        for _ in range(3):
            # More callers at once than the pool has connections: they take turns.
            assert all(await asyncio.gather(*(client.ping() for _ in range(40))))
            held = _sockets(port)
            assert 0 < len(held) <= 6
            assert await asyncio.to_thread(_cut_all, port) >= len(held)
            await _until(lambda: all(state == CLOSE_WAIT for state in _sockets(port)))
            assert await client.ping()
            after = _sockets(port)
            assert CLOSE_WAIT not in after, after
            assert len(after) <= len(held)
        assert (await durable.arrive("after-the-cuts", "order", {})).first


async def test_a_caller_past_the_bound_waits_for_a_connection_then_times_out(
    spawn_redis: Callable[..., int],
) -> None:
    port = spawn_redis()
    base = f"redis://{HOST}:{port}/0?scheduler=set&namespace=bound&max_connections=1"
    async with open_durable(f"{base}&call_timeout_ms=300") as durable:
        client: Redis = durable.checkpointer.redis  # type: ignore[attr-defined]
        pool = client.connection_pool
        taken = await pool.get_connection()
        try:
            with pytest.raises(TimedOut) as raised:
                await client.ping()
            assert unavailable(raised.value)
        finally:
            await pool.release(taken)
        assert await client.ping()
    async with open_durable(base) as durable:
        client = durable.checkpointer.redis  # type: ignore[attr-defined]
        pool = client.connection_pool
        taken = await pool.get_connection()
        waiting = asyncio.create_task(client.ping())
        await asyncio.sleep(0)
        await pool.release(taken)  # goes to the caller waiting for it
        assert await asyncio.wait_for(waiting, SETTLES)
        assert len(_sockets(port)) == 1


async def test_spare_connections_idle_past_the_limit_are_closed(redis: Redis) -> None:
    name = f"tidy-{uuid.uuid4().hex[:8]}"
    now = [0.0]
    pool = TidyPool(host=HOST, port=PORT, client_name=name, max_connections=8,
                    idle=timedelta(seconds=30), clock=lambda: now[0])

    async def ours() -> int:
        return sum(1 for c in await redis.client_list() if c.get("name") == name)

    try:
        taken = [await pool.get_connection() for _ in range(4)]
        for connection in taken:
            await pool.release(connection)
        now[0] = 29.0
        again = await pool.get_connection()  # none idle for long yet: all four kept
        await pool.release(again)
        assert await ours() == 4
        now[0] = 60.0
        again = await pool.get_connection()  # the spares aged out; the last given back stays
        assert await ours() == 1
        await pool.release(again)
    finally:
        await pool.aclose()
