"""One suite, every store: each test here runs once per store, opened through `open_durable`.

`store_url` is the URL of an isolated store for one test: its own Redis queue namespace, its own
Postgres queue in a database this session created (and drops), its own SQLite file. Workflow ids
carry the test's unique `tag`, so checkpoints never meet another run's either.

`private_redis` and `throwaway_database` are stores a test may take away: a `redis-server` of
its own on a spare port (to freeze or kill), a Postgres database of its own (to lock or shut).

A server that does not answer skips the test locally and fails it when `CI` is set: CI must
never pass by silently skipping a store.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from durability import Durable
from durability.connect import open_durable
from experiments.harness.servers import free_port
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


# -- stores a test may take away -----------------------------------------------------------------


class PrivateRedis:
    """One `redis-server` of this test's own, which it may freeze, kill and start again.

    Every write is fsynced to its append-only file, so what was written survives a SIGKILL.
    """

    def __init__(self, home: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            unavailable("redis-server is not installed")
            raise AssertionError("unreachable")
        self.binary = binary
        self.home = home
        self.port = free_port()  # below the ephemeral range: free again after a kill
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--dir", str(self.home), "--save", "", "--appendonly", "yes"]
        command += ["--appendfsync", "always"]
        with (self.home / "server.log").open("ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        give_up = time.monotonic() + 10
        while time.monotonic() < give_up:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as probe:
                    probe.sendall(b"PING\r\n")
                    if probe.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        pytest.fail(f"the private redis-server did not start; see {self.home / 'server.log'}")

    def signal(self, signum: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()  # SIGKILL ends a stopped process too


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class ThrowawayDatabase:
    """A database made for one test, and the admin moves that take it away and back."""

    def __init__(self) -> None:
        import psycopg

        self.name = f"durability_outage_{uuid.uuid4().hex[:10]}"
        try:
            self.admin = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3)
        except psycopg.Error as error:
            unavailable(f"PostgreSQL at {POSTGRES_URL} does not answer: {error}")
            raise AssertionError("unreachable") from error
        self.admin.execute(f'CREATE DATABASE "{self.name}"')
        self.url = urlunsplit(urlsplit(POSTGRES_URL)._replace(path=f"/{self.name}"))

    def refuse_connections(self) -> None:
        """New connections are refused and every open one is terminated."""
        self.admin.execute(f'ALTER DATABASE "{self.name}" WITH ALLOW_CONNECTIONS false')
        self.admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (self.name,),
        )

    def allow_connections(self) -> None:
        self.admin.execute(f'ALTER DATABASE "{self.name}" WITH ALLOW_CONNECTIONS true')

    def drop(self) -> None:
        self.allow_connections()
        self.admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        self.admin.close()


@pytest.fixture
def throwaway_database() -> Iterator[ThrowawayDatabase]:
    database = ThrowawayDatabase()
    try:
        yield database
    finally:
        database.drop()


@pytest.fixture
async def durable_at(shared_store_url: str) -> AsyncIterator[Durable]:
    """The store `shared_store_url` names (one another process, or a command, can open too)."""
    async with open_durable(shared_store_url, lease=LEASE, poll=POLL) as opened:
        yield opened
