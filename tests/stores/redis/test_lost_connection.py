"""A connection killed while a pass's record is in flight, and a worker started before its
server, each on a private `redis-server`.

The store's writes share one pipelined connection (`SharedConnection`). To kill it with the
record on it, and not merely before (a connection found closed while idle is reopened before
anything is written, which would hide the fault), `cut` pauses the server's writes (`CLIENT PAUSE
... WRITE`), waits until a script is held on a connection, kills that connection by its id
(`CLIENT KILL ID`), then lets the server go on. The record never ran; the pass must write it
again rather than report the step as failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from durability import as_text, work
from durability.interfaces import Durable
from durability.redis import (
    RedisCheckpointer,
    RedisDurable,
    RedisSetScheduler,
    RedisStreamScheduler,
)
from durability.stepwise import Run
from durability.testing import Observed
from durability.testing.conformance import Cut, StoreFaultContract
from tests.stores.redis.conftest import redis_server_on, spare_port

Clients = tuple[Redis, Redis]


@pytest.fixture
async def clients(
    spawn_redis: Callable[..., int], private_client: Callable[[int], Redis]
) -> AsyncIterator[Clients]:
    """The store's client and an operator's, to a server of this test's own."""
    port = spawn_redis()
    store, admin = private_client(port), private_client(port)
    try:
        yield store, admin
    finally:
        await store.aclose()
        await admin.aclose()


class KillMidScript:
    """`cut` for Redis: hold the server's writes, kill the connection a script is held on by
    its id, release the writes (see the module doc). `killed` lists the ids it killed."""

    def __init__(self, admin: Redis) -> None:
        self.admin = admin
        self.killed: list[int] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def __call__(self) -> None:
        await self.admin.client_pause(5000, all=False)  # writes wait on the server; reads go on
        self.tasks.append(asyncio.create_task(self._kill_the_held_script()))

    async def _kill_the_held_script(self) -> None:
        async with asyncio.timeout(5):
            while True:
                held = [
                    client
                    for client in await self.admin.client_list()
                    if client["cmd"] in ("evalsha", "eval") and "b" in client["flags"]
                ]
                if held:
                    break
                await asyncio.sleep(0.01)
        for client in held:
            await self.admin.client_kill_filter(_id=client["id"])
            self.killed.append(int(client["id"]))
        await self.admin.client_unpause()


class _KilledMidRecord(StoreFaultContract):
    kind: type[RedisStreamScheduler] | type[RedisSetScheduler]

    @pytest.fixture
    async def durable(self, clients: Clients) -> Durable:
        store, _ = clients
        lease = timedelta(seconds=5)
        scheduler = self.kind(redis=store, namespace="cut", lease=lease)
        await scheduler.prepare()
        return RedisDurable(RedisCheckpointer(redis=store), scheduler)

    @pytest.fixture
    async def cut(self, clients: Clients) -> AsyncIterator[Cut]:
        _, admin = clients
        kill = KillMidScript(admin)
        yield kill
        await asyncio.gather(*kill.tasks)
        assert kill.killed, "no connection was killed with a script held on it"


class TestStreamKilledMidRecord(_KilledMidRecord):
    kind = RedisStreamScheduler


class TestSetKilledMidRecord(_KilledMidRecord):
    kind = RedisSetScheduler


# --- a worker started before its server ---------------------------------------------------------


@pytest.mark.parametrize("kind", [RedisStreamScheduler, RedisSetScheduler], ids=["stream", "set"])
async def test_a_worker_started_before_its_server_waits_for_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: type[RedisStreamScheduler]
) -> None:
    port = spare_port()  # nothing listens there until the server below starts
    # No retries inside the client: redis-py's own would hide a short outage from the worker.
    client = Redis(host="127.0.0.1", port=port, decode_responses=True, retry=Retry(NoBackoff(), 0))
    scheduler = kind(redis=client, namespace="late", lease=timedelta(seconds=5))
    durable = RedisDurable(RedisCheckpointer(redis=client), scheduler)
    observed = Observed(15.0)

    async def body(run: Run) -> str:
        return await run.step("ran", lambda: "ran", as_text)

    tick = timedelta(milliseconds=100)
    with caplog.at_level(logging.WARNING, logger="durability.worker"):
        task = asyncio.create_task(
            work(durable, body, observer=observed, tick=tick, sweep=4 * tick)
        )
        try:
            await asyncio.sleep(1.0)
            assert not task.done(), "the worker must wait for its store, not exit"
            with redis_server_on(port, tmp_path):
                async with asyncio.timeout(10):
                    while True:
                        with contextlib.suppress(RedisConnectionError):
                            await durable.arrive("late-1", "go", True)
                            break
                        await asyncio.sleep(0.05)
                await observed.until(lambda: observed.completed("late-1"))
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await client.aclose()
    # It tried, logged, and tried again: preparing the stream's group, or reading the set.
    told = ("the store is not ready", "reading the queue failed")
    waited = [r for r in caplog.records if r.getMessage().startswith(told)]
    assert len(waited) >= 2
