"""Found by the chaos run (`python -m experiments chaos`): Redis closing a worker's or an API's
connections (`CLIENT KILL`) while their commands were outstanding once left the lane those
commands went out on waiting for good on the old socket, so every call after it hung: an API
whose `arrive` never answered, a worker that stopped working. However the kills fall, every
call must end (answered, or failed with a connection error that the caller may try again) and
the store must serve again afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable
from datetime import timedelta

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from durability.connect import open_durable, unavailable

#: Far beyond any answer on a loaded machine: a call this slow is a hang.
HUNG = 30.0


@pytest.mark.slow
async def test_every_call_ends_however_the_connections_are_killed(
    spawn_redis: Callable[..., int],
) -> None:
    port = spawn_redis()
    url = f"redis://127.0.0.1:{port}/0?scheduler=stream&namespace=killed"
    killer = Redis(port=port)
    rng = random.Random(7)
    outcomes = {"answered": 0, "failed": 0, "hung": 0}
    done = asyncio.Event()
    async with open_durable(url, lease=timedelta(seconds=2)) as durable:

        async def caller(n: int) -> None:
            i = 0
            while not done.is_set():
                i += 1
                try:
                    async with asyncio.timeout(HUNG):
                        await durable.arrive(f"w{n}-{i}", "order", {"n": i})
                    outcomes["answered"] += 1
                except TimeoutError:
                    outcomes["hung"] += 1
                    return
                except Exception as error:
                    assert unavailable(error), repr(error)
                    outcomes["failed"] += 1
                await asyncio.sleep(rng.random() * 0.01)

        async def kills() -> None:
            for _ in range(200):
                await asyncio.sleep(rng.uniform(0.01, 0.06))
                with contextlib.suppress(RedisConnectionError):
                    await killer.execute_command("CLIENT", "KILL", "TYPE", "normal",
                                                 "SKIPME", "yes")
            done.set()

        try:
            await asyncio.gather(kills(), *(caller(n) for n in range(20)))
            assert outcomes["hung"] == 0, outcomes
            assert outcomes["answered"] > 0 and outcomes["failed"] > 0, outcomes
            async with asyncio.timeout(HUNG):
                assert (await durable.arrive("after", "order", {})).first
        finally:
            await killer.aclose()
