"""One suite, every store: each test here runs once per store, opened through `open_durable`.

`store_url` is the URL of an isolated store for one test: its own Redis queue namespace, its own
Postgres queue in a database this session created (and drops), its own SQLite file. Workflow ids
carry the test's unique `tag`, so checkpoints never meet another run's either.

A server that does not answer skips the test locally and fails it when `CI` is set: CI must
never pass by silently skipping a store.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from durability import Durable
from durability.connect import open_durable
from integration.worker import serve
from integration.workflow import Effects

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")

STORES = ["memory", "redis-stream", "redis-set", "postgres", "sqlite"]
#: Stores a second process can share (memory lives in one process).
SHARED_STORES = [store for store in STORES if store != "memory"]

#: The lease every store in this suite is opened with: short, so a takeover is quick.
LEASE = timedelta(seconds=1)
POLL = timedelta(milliseconds=50)


def unavailable(reason: str) -> None:
    """Skip with `reason`, or fail when running in CI."""
    if os.environ.get("CI"):
        pytest.fail(f"CI requires this store: {reason}")
    pytest.skip(reason)


@pytest.fixture
def tag() -> str:
    """A prefix unique to this test, for workflow ids, queues and namespaces."""
    return f"it{uuid.uuid4().hex[:12]}"


def _redis_answers() -> str | None:
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_timeout=2)
    try:
        client.ping()
    except (redis.RedisError, OSError) as error:
        return f"Redis at {REDIS_URL} does not answer: {error}"
    finally:
        client.close()
    return None


def _forget_redis(tag: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"*{tag}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A database this session creates (and drops at the end): its URL."""
    import psycopg

    name = f"durability_it_{uuid.uuid4().hex[:10]}"
    try:
        admin = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as error:
        unavailable(f"PostgreSQL at {POSTGRES_URL} does not answer: {error}")
        raise AssertionError("unreachable") from error
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(POSTGRES_URL)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _url(store: str, tag: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if store == "memory":
        return "memory://"
    if store.startswith("redis-"):
        reason = _redis_answers()
        if reason:
            unavailable(reason)
        request.addfinalizer(lambda: _forget_redis(tag))
        kind = store.removeprefix("redis-")
        return f"{REDIS_URL}?scheduler={kind}&namespace={tag}"
    if store == "postgres":
        database: str = request.getfixturevalue("postgres_database")
        return f"{database}?queue={tag}"
    if store == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    raise AssertionError(f"unknown store {store}")


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tag: str, tmp_path: Path) -> str:
    """The URL of an isolated store, once per store."""
    return _url(request.param, tag, tmp_path, request)


@pytest.fixture(params=SHARED_STORES)
def shared_store_url(request: pytest.FixtureRequest, tag: str, tmp_path: Path) -> str:
    """The URL of an isolated store that several processes can share, once per such store."""
    return _url(request.param, tag, tmp_path, request)


@pytest.fixture
async def durable(store_url: str) -> AsyncIterator[Durable]:
    """The store `store_url` names, opened with a short lease and poll."""
    async with open_durable(store_url, lease=LEASE, poll=POLL) as opened:
        yield opened


Worker = Callable[[Durable, Effects], AbstractAsyncContextManager[None]]


@pytest.fixture
def worker() -> Worker:
    """`async with worker(durable, effects):` runs an in-process worker for the block."""

    @contextlib.asynccontextmanager
    async def running(durable: Durable, effects: Effects) -> AsyncIterator[None]:
        task = asyncio.create_task(
            serve(durable, effects, pool=4, tick=timedelta(milliseconds=100))
        )
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return running


Eventually = Callable[[Callable[[], Awaitable[bool]], str], Awaitable[None]]


@pytest.fixture
def eventually() -> Eventually:
    """`await eventually(check, what)`: poll `check` until true; fail naming `what` after a
    generous bound (a bound on a hang, not a timing assertion)."""

    async def wait(check: Callable[[], Awaitable[bool]], what: str) -> None:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + 20
        while not await check():
            if loop.time() > give_up:
                pytest.fail(f"never happened: {what}")
            await asyncio.sleep(0.05)

    return wait
