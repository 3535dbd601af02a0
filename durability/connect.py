"""`open_durable`: the one place a store is chosen, by URL.

| URL | Durable |
|---|---|
| `memory://` | `SplitDurable(MemoryCheckpointer, MemoryScheduler)`: this process only |
| `redis://host:port/db?scheduler=stream` | `RedisDurable(RedisCheckpointer, RedisStreamScheduler)`|
| `redis://host:port/db?scheduler=set` | `RedisDurable(RedisCheckpointer, RedisSetScheduler)` |
| `postgresql://user@host:port/db` | `PostgresDurable`, tables created on open (`migrate`) |
| `sqlite:///path/to/file.db` | `SqliteDurable` over that file, migrated on open |

Query parameters the URL may carry (anything else is refused, so a typo is not ignored):

- Redis: `scheduler` (`stream`, the default, or `set`), `namespace` (what every key of the
  queue and of the checkpoints starts with, default `durability`) and, for the set,
  `doorbell` (`on`, the default, or `off` to poll alone); the rest of the URL goes to
  `redis.asyncio.Redis.from_url`.
- Postgres: `queue` (the queue's name, default `default`) and `schema` (the schema the tables
  live in, created on open, default `durability`: one per application sharing a database);
  the rest goes to libpq.
- SQLite: `queue`, and nothing else: the file is the application's own (the namespace).

`sqlite:///path` names an absolute path; `sqlite://relative/file.db` a path relative to the
working directory.

The API, the worker, the lab and the tests all open their store here. Each driver is imported
inside its own branch, so `import durability` (and `memory://`) needs none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from durability.interfaces import Durable, SplitDurable, positive
from durability.memory import MemoryCheckpointer, MemoryScheduler

__all__ = ["SCHEMES", "open_durable"]

#: Every scheme `open_durable` accepts.
SCHEMES = ("memory", "redis", "rediss", "postgresql", "postgres", "sqlite")


def _options(query: str, allowed: tuple[str, ...]) -> tuple[dict[str, str], str]:
    """Split our options out of a query string; return them and the query left for the driver
    (Redis and Postgres pass the rest to their driver, which refuses what it does not know)."""
    ours: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name in allowed:
            ours[name] = value
        else:
            rest.append((name, value))
    return ours, urlencode(rest)


def _refuse_rest(rest: str, url: str, allowed: tuple[str, ...]) -> None:
    if rest:
        names = sorted({name for name, _ in parse_qsl(rest, keep_blank_values=True)})
        raise ValueError(f"unknown option(s) {names} in store URL {url!r}; allowed: {allowed}")


@contextlib.asynccontextmanager
async def open_durable(
    url: str,
    *,
    lease: timedelta = timedelta(seconds=30),
    poll: timedelta | None = None,
    housekeeping: bool = False,
) -> AsyncIterator[Durable]:
    """Open the store `url` names and yield its `Durable`; close it on exit.

    `lease` is the scheduler's lease (how soon a dead worker's workflow is taken over); `poll`
    how often a polling scheduler looks again (the store's default when `None`; the stream
    scheduler blocks instead). With `housekeeping`, the store's background upkeep runs while the
    context is open (trimming the Redis stream): a worker asks for it, an API need not.

    Raises `ValueError` naming the scheme for a URL no store answers to.
    """
    positive("lease", lease)
    if poll is not None:
        positive("poll", poll)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "memory":
        if parts.netloc or parts.path.strip("/") or parts.query:
            raise ValueError(f"memory:// takes no host, path or options, got {url!r}")
        yield SplitDurable(MemoryCheckpointer(), MemoryScheduler(lease=lease))
    elif scheme in ("redis", "rediss"):
        async with _redis(url, lease, poll, housekeeping) as durable:
            yield durable
    elif scheme in ("postgresql", "postgres"):
        async with _postgres(url, lease, poll) as durable:
            yield durable
    elif scheme == "sqlite":
        async with _sqlite(url, lease, poll) as durable:
            yield durable
    else:
        shown = f"{scheme!r}" if scheme else "no scheme"
        raise ValueError(
            f"unknown store scheme {shown} in {url!r}; use memory://, redis://,"
            " postgresql:// or sqlite:///path"
        )


@contextlib.asynccontextmanager
async def _redis(
    url: str, lease: timedelta, poll: timedelta | None, housekeeping: bool
) -> AsyncIterator[Durable]:
    from redis.asyncio import Redis

    from durability.redis import (
        RedisCheckpointer,
        RedisDurable,
        RedisSetScheduler,
        RedisStreamScheduler,
        trimming,
    )
    from durability.redis.packing import PackedConnection

    parts = urlsplit(url)
    ours, rest = _options(parts.query, ("scheduler", "namespace", "doorbell"))
    kind = ours.get("scheduler", "stream")
    doorbell = ours.get("doorbell", "on")
    if doorbell not in ("on", "off") or (kind != "set" and "doorbell" in ours):
        raise ValueError(f"doorbell must be 'on' or 'off', and only with scheduler=set: {url!r}")
    namespace = ours.get("namespace", "durability")
    # redis-py 8 gives every command a 5 s socket timeout, which it enforces by wrapping each
    # send in a task of its own: a fifth of a worker's CPU per round trip. A URL that wants a
    # bound says so (`?socket_timeout=5`); otherwise a call waits on the server like a blocking
    # read does, and a peer that went away is still noticed by the connection closing.
    timeouts: dict[str, Any] = {} if "socket_timeout" in rest else {"socket_timeout": None}
    # Plain TCP only: rediss:// and unix:// keep the connection class their scheme picks.
    packed: dict[str, Any] = {}
    if parts.scheme == "redis":
        packed["connection_class"] = PackedConnection
    client = Redis.from_url(
        urlunsplit(parts._replace(query=rest)), decode_responses=True, **timeouts, **packed
    )
    try:
        scheduler: RedisStreamScheduler | RedisSetScheduler
        if kind == "stream":
            scheduler = RedisStreamScheduler(redis=client, namespace=namespace, lease=lease)
        elif kind == "set":
            scheduler = RedisSetScheduler(
                redis=client,
                namespace=namespace,
                lease=lease,
                doorbell=doorbell == "on",
                **({} if poll is None else {"poll": poll}),
            )
        else:
            raise ValueError(f"redis scheduler must be 'stream' or 'set', got {kind!r} in {url!r}")
        await client.ping()
        await scheduler.prepare()
        # One client for both halves, so arrive, deliver and finish are one script each.
        checkpointer = RedisCheckpointer(redis=client, namespace=namespace)
        durable = RedisDurable(checkpointer, scheduler)
        if housekeeping and isinstance(scheduler, RedisStreamScheduler):
            async with _beside(trimming(scheduler)):
                yield durable
        else:
            yield durable
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def _beside(upkeep: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    """Run `upkeep` as a task while the block runs; cancel it after."""
    task = asyncio.create_task(upkeep)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def _postgres(url: str, lease: timedelta, poll: timedelta | None) -> AsyncIterator[Durable]:
    from psycopg_pool import AsyncConnectionPool

    from durability.postgres import (
        PostgresCheckpointer,
        PostgresDurable,
        PostgresScheduler,
        migrate,
    )
    from durability.postgres.statements import check_schema

    parts = urlsplit(url)
    ours, rest = _options(parts.query, ("queue", "schema"))
    queue = ours.get("queue", "default")
    schema = check_schema(ours.get("schema", "durability"))  # refused before connecting
    conninfo = urlunsplit(parts._replace(query=rest))
    pool: AsyncConnectionPool = AsyncConnectionPool(
        conninfo, kwargs={"autocommit": True}, min_size=1, max_size=8, open=False
    )
    await pool.open(wait=True)
    scheduler: PostgresScheduler | None = None
    try:
        await migrate(pool, schema)
        scheduler = PostgresScheduler(pool=pool, lease=lease, poll=poll, queue=queue, schema=schema)
        await scheduler.prepare()
        yield PostgresDurable(PostgresCheckpointer(pool=pool, schema=schema), scheduler)
    finally:
        if scheduler is not None:
            await scheduler.close()
        await pool.close()


@contextlib.asynccontextmanager
async def _sqlite(url: str, lease: timedelta, poll: timedelta | None) -> AsyncIterator[Durable]:
    from durability.sqlite import (
        SqliteCheckpointer,
        SqliteDurable,
        SqliteScheduler,
        migrate,
        open_database,
    )

    parts = urlsplit(url)
    ours, rest = _options(parts.query, ("queue",))
    _refuse_rest(rest, url, ("queue",))
    path = parts.netloc + parts.path
    if not path or path == "/":
        raise ValueError(f"sqlite:// needs a file path (sqlite:///path/to/file.db), got {url!r}")
    queue = ours.get("queue", "default")
    database = await open_database(path)
    try:
        await migrate(database)
        extra = {} if poll is None else {"poll": poll}
        scheduler = SqliteScheduler(database, lease=lease, queue=queue, **extra)
        await scheduler.prepare()
        yield SqliteDurable(SqliteCheckpointer(database), scheduler)
    finally:
        await database.close()
