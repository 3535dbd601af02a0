"""`open_durable`: one function chooses the store by URL, refuses a URL it cannot serve before
connecting (an unknown or repeated option, by name), and says where a store it cannot reach
was looked for, at once."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest

from durability import MemoryCheckpointer, MemoryScheduler
from durability.connect import StoreUnavailable, open_durable, unavailable
from experiments.harness.servers import free_port


async def test_memory_url_opens_a_fresh_memory_store_with_the_lease_given() -> None:
    async with open_durable("memory://", lease=timedelta(seconds=7)) as durable:
        assert isinstance(durable.checkpointer, MemoryCheckpointer)
        assert isinstance(durable.scheduler, MemoryScheduler)
        assert durable.scheduler.lease == timedelta(seconds=7)
        await durable.arrive("w", "k", 1)
    async with open_durable("memory://") as other:
        assert await other.checkpointer.load("w") == {}


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("mysql://localhost/db", "'mysql'"),
        ("localhost:6379", "'localhost'"),
        ("/tmp/file.db", "no scheme"),
        ("memory://somewhere", "memory://"),
        ("redis://127.0.0.1:6379/0?scheduler=list", "'list'"),
        ("sqlite://", "file path"),
        ("sqlite:///tmp/x.db?journal=wal", "journal"),
        ("redis://127.0.0.1:6379/0?cluster=maybe", "cluster"),
        ("postgresql://postgres@127.0.0.1:5432/test?notify=sometimes", "notify"),
        ("redis://127.0.0.1:1/0?call_timeout_ms=0", "call_timeout_ms"),
        ("postgresql://postgres@127.0.0.1:1/test?call_timeout_ms=-5", "call_timeout_ms"),
        ("sqlite:///tmp/x.db?call_timeout_ms=soon", "call_timeout_ms"),
    ],
)
async def test_a_url_no_store_answers_is_refused_by_name(url: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        async with open_durable(url):
            pass


async def test_timings_are_refused_unless_positive() -> None:
    with pytest.raises(ValueError, match="lease"):
        async with open_durable("memory://", lease=timedelta(0)):
            pass


def test_importing_the_library_and_connect_needs_no_driver() -> None:
    check = (
        "import sys, durability, durability.connect, integration.workflow;"
        "loaded = {'redis', 'psycopg', 'psycopg_pool', 'aiosqlite', 'fastapi'} & set(sys.modules);"
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", check], check=True)


async def test_postgres_notify_off_polls_alone(postgres_database: str) -> None:
    store_url = f"{postgres_database}?queue=notify-off"
    async with open_durable(f"{store_url}&notify=off", poll=timedelta(milliseconds=20)) as off:
        scheduler = off.scheduler
        assert scheduler.poll == timedelta(milliseconds=20)  # type: ignore[attr-defined]
        assert scheduler._listener is None  # type: ignore[attr-defined]
    async with open_durable(store_url) as on:
        assert on.scheduler._listener is not None  # type: ignore[attr-defined]


# -- URL options: checked before anything connects -------------------------------------------

#: A port nothing listens on: a URL refused with ValueError here was refused before connecting.
NOWHERE = "127.0.0.1:1"


@pytest.mark.parametrize(
    ("url", "named", "listed"),
    [
        (f"redis://{NOWHERE}/0?schedular=set", "'schedular'", ["scheduler", "socket_timeout"]),
        # A TLS option is redis-py's, but not for a plain connection: it would be a TypeError.
        (f"redis://{NOWHERE}/0?ssl_ca_certs=ca.pem", "'ssl_ca_certs'", ["namespace", "db"]),
        (f"redis://{NOWHERE}/0?timeout=1", "'timeout'", ["socket_connect_timeout"]),
        (f"postgresql://postgres@{NOWHERE}/db?bogus=1", "'bogus'", ["queue", "connect_timeout"]),
        (f"postgresql://postgres@{NOWHERE}/db?queues=a", "'queues'", ["queue", "sslmode"]),
    ],
)
async def test_an_unknown_option_is_refused_by_name_with_the_allowed_ones(
    url: str, named: str, listed: list[str]
) -> None:
    with pytest.raises(ValueError, match=named) as refused:
        async with open_durable(url):
            pass
    for option in listed:
        assert option in str(refused.value)


@pytest.mark.parametrize(
    ("url", "named"),
    [
        # redis-py reads a path that is not a number as database 0, and a ?db= over the path.
        (f"redis://{NOWHERE}/3x", "database"),
        (f"redis://{NOWHERE}/abc", "database"),
        (f"redis://{NOWHERE}/-1", "database"),
        (f"redis://{NOWHERE}/3?db=4", "database"),
        (f"redis://{NOWHERE}/0/1", "database"),
        # No host is not "localhost": a URL that forgot its host must not find a server.
        ("redis:///0?namespace=nohost-refused", "host"),
        (f"redis://{NOWHERE.split(':')[0]}:port/0", "port"),
        # A space pasted around a URL is dropped by the URL parser and never seen again.
        (f" redis://{NOWHERE}/0", "space"),
        (f"redis://{NOWHERE}/0 ", "space"),
        (f"postgresql://postgres@{NOWHERE}/db\n", "space"),
        ("sqlite:///tmp/x.db\t", "space"),
        (f"redis://{NOWHERE}/0?namespace=a\nb", "control"),
        # libpq would say only "missing '='" about what the URL parser left of it.
        ("postgresql://", "host"),
        ("postgres://", "host"),
        # A namespace is part of every key: bounded, printable, no hash-tag braces.
        (f"redis://{NOWHERE}/0?namespace=", "namespace"),
        (f"redis://{NOWHERE}/0?namespace=a%00b", "namespace"),
        (f"redis://{NOWHERE}/0?namespace=a%1Bb", "namespace"),
        (f"redis://{NOWHERE}/0?namespace=a%7Fb", "namespace"),
        (f"redis://{NOWHERE}/0?namespace={'n' * 201}", "namespace"),
        (f"redis://{NOWHERE}/0?namespace=a%7Bb%7D", "namespace"),
    ],
)
async def test_a_setting_the_driver_would_misread_is_refused_by_name(url: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        async with open_durable(url):
            pass


async def test_a_postgres_url_with_no_host_in_it_keeps_its_meaning(postgres_database: str) -> None:
    # `postgresql:///db?host=...` (the form a local socket takes): the URL must reach libpq
    # whole, not as `postgresql:/db`, which libpq cannot read.
    parts = urlsplit(postgres_database)
    url = f"postgresql:///{parts.path.strip('/')}?host={parts.hostname}&user={parts.username}"
    if parts.port:
        url += f"&port={parts.port}"
    async with open_durable(f"{url}&queue=nohost") as durable:
        await durable.arrive("nohost-w", "k", 1)
        assert await durable.checkpointer.load("nohost-w") == {"k": 1}


@pytest.mark.parametrize(
    "url",
    [
        f"redis://{NOWHERE}/0?scheduler=set&scheduler=stream",
        f"redis://{NOWHERE}/0?socket_timeout=1&socket_timeout=2",
        f"postgresql://postgres@{NOWHERE}/db?queue=a&queue=b",
        f"postgresql://postgres@{NOWHERE}/db?sslmode=disable&sslmode=require",
        "sqlite:///tmp/x.db?queue=a&queue=b",
    ],
)
async def test_a_repeated_option_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="more than once"):
        async with open_durable(url):
            pass


async def test_a_password_never_appears_in_a_refusal() -> None:
    for url in (
        f"redis://:sekret@{NOWHERE}/0?bogus=1",
        f"postgresql://postgres:sekret@{NOWHERE}/db?bogus=1",
        f"postgresql://postgres:sekret@{NOWHERE}/db",
    ):
        with pytest.raises((ValueError, StoreUnavailable)) as refused:
            async with open_durable(url):
                pass
        assert "sekret" not in str(refused.value)


async def test_driver_options_reach_the_driver(
    tag: str, private_redis: Any, postgres_database: str
) -> None:
    import psycopg
    import redis.asyncio

    redis_url = f"redis://127.0.0.1:{private_redis.port}/0?client_name={tag}&socket_timeout=5"
    async with open_durable(redis_url) as durable:
        await durable.arrive(f"{tag}-w", "k", 1)
        async with redis.asyncio.Redis(port=private_redis.port) as probe:
            named = {client["name"] for client in await probe.client_list()}
        assert tag in named
    postgres_url = f"{postgres_database}?queue={tag}&application_name={tag}&connect_timeout=5"
    async with open_durable(postgres_url) as durable:
        await durable.arrive(f"{tag}-w", "k", 1)
        with psycopg.connect(postgres_database) as admin:
            names = admin.execute("SELECT application_name FROM pg_stat_activity").fetchall()
        assert (tag,) in names


# -- connecting: a prompt error that says where --------------------------------------------


def _refused_port() -> int:
    return free_port()  # nothing listens there: connecting to it is refused


async def _unavailable(url: str, **options: Any) -> StoreUnavailable:
    # The bound is on a hang (a pool would wait out its 30 s timeout), not a timing claim.
    async with asyncio.timeout(20):
        with pytest.raises(StoreUnavailable) as raised:
            async with open_durable(url, **options):
                pass
    assert isinstance(raised.value, ConnectionError) and unavailable(raised.value)
    return raised.value


async def test_a_refused_port_or_unknown_database_fails_at_once_saying_where(
    postgres_database: str, private_redis: Any
) -> None:
    import psycopg
    from psycopg_pool import PoolTimeout

    port = _refused_port()
    error = await _unavailable(f"postgresql://postgres@127.0.0.1:{port}/orders")
    assert f"127.0.0.1:{port}/orders" in str(error) and "refused" in str(error)
    assert isinstance(error.__cause__, psycopg.OperationalError)
    assert not isinstance(error.__cause__, PoolTimeout)

    missing = postgres_database.rsplit("/", 1)[0] + "/durability_no_such_database"
    error = await _unavailable(missing)
    assert "durability_no_such_database" in str(error) and "does not exist" in str(error)

    error = await _unavailable(f"redis://127.0.0.1:{port}/0")
    assert f"127.0.0.1:{port}/0" in str(error)
    error = await _unavailable(f"redis://127.0.0.1:{private_redis.port}/9999")  # no such db
    assert f"127.0.0.1:{private_redis.port}/9999" in str(error) and "out of range" in str(error)

    error = await _unavailable("sqlite:///no/such/directory/store.db")
    assert "/no/such/directory/store.db" in str(error) and "does not exist" in str(error)


async def test_a_frozen_redis_fails_the_open_once_the_connect_timeout_passes(
    private_redis: Any,
) -> None:
    private_redis.signal(signal.SIGSTOP)
    try:
        error = await _unavailable(
            f"redis://127.0.0.1:{private_redis.port}/0",
            connect_timeout=timedelta(milliseconds=500),
        )
    finally:
        private_redis.signal(signal.SIGCONT)
    assert "did not answer within" in str(error)
    async with open_durable(f"redis://127.0.0.1:{private_redis.port}/0") as durable:
        await durable.arrive("w", "k", 1)  # and it opens once the server answers again


def test_only_the_errors_of_an_absent_store_count_as_unavailable() -> None:
    import psycopg
    import redis.exceptions

    assert unavailable(StoreUnavailable("nowhere"))
    assert unavailable(TimeoutError())
    assert unavailable(redis.exceptions.ConnectionError("reset"))
    assert unavailable(psycopg.OperationalError("terminated"))
    assert not unavailable(ValueError("bad id"))
    assert not unavailable(redis.exceptions.ResponseError("WRONGTYPE"))
    assert not unavailable(psycopg.ProgrammingError("syntax"))
