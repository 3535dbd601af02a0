"""Fixtures for the Postgres store tests: one fresh database for the whole session.

The server on 127.0.0.1:5432 (or `POSTGRES_URL`) is shared with other test runs, so this run
creates its own database (`durability_<random>`) through the `postgres` maintenance database,
migrates it once, and drops it at the end; tests inside it isolate by unique workflow ids and
queue names. Tests that need a database without the tables (or a second one to migrate
concurrently) make throwaway databases of their own with `scratch_database`.

A server that does not answer skips the test locally, and fails it when `CI` is set: CI must
never pass by silently skipping a store.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

import pytest
from psycopg import AsyncCursor

from durability.postgres import (
    PostgresCheckpointer,
    PostgresDurable,
    PostgresScheduler,
    libpq_pipeline,
)

if TYPE_CHECKING:
    from durability.postgres.statements import Pool

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432"


def unavailable(reason: str) -> None:
    """Skip with `reason`, or fail when running in CI."""
    if os.environ.get("CI"):
        pytest.fail(f"CI requires this store: {reason}")
    pytest.skip(reason)


def url_for(server: str, database: str) -> str:
    from psycopg.conninfo import make_conninfo

    return make_conninfo(server, dbname=database)


def _admin(server: str, sql: str) -> None:
    import psycopg
    from psycopg import sql as psql

    with psycopg.connect(url_for(server, "postgres"), autocommit=True, connect_timeout=3) as conn:
        conn.execute(psql.SQL(sql))  # only ever our own fixed DDL with a generated name


def create_database(server: str, name: str | None = None) -> str:
    """Create a database (a fresh `durability_<random>` name unless given one); its name."""
    name = name or f"durability_{uuid.uuid4().hex[:12]}"
    assert name.startswith("durability_"), "only ever create a database this run can drop"
    _admin(server, f'CREATE DATABASE "{name}"')
    return name


def drop_database(server: str, name: str) -> None:
    assert name.startswith("durability_"), "only ever drop a database this run created"
    _admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def server() -> str:
    """The server's conninfo, or a skip (a failure in CI) if it does not answer."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        unavailable("psycopg / psycopg-pool are not installed (pip install durability[postgres])")
    url = os.environ.get("POSTGRES_URL", DEFAULT_URL)
    try:
        _admin(url, "SELECT 1")
    except Exception as error:
        unavailable(f"PostgreSQL at {url} does not answer: {error}")
    return url


async def _migrate(url: str) -> None:
    from psycopg_pool import AsyncConnectionPool

    from durability.postgres import migrate

    async with AsyncConnectionPool(url, min_size=1, max_size=1, open=False) as pool:
        await migrate(pool)


@pytest.fixture(scope="session")
def database_url(server: str) -> Iterator[str]:
    """A database made for this test session, migrated once, dropped at the end."""
    name = create_database(server)
    try:
        url = url_for(server, name)
        asyncio.run(_migrate(url))
        yield url
    finally:
        drop_database(server, name)


@pytest.fixture
def scratch_database(server: str) -> Iterator[Callable[[], str]]:
    """Make empty databases (no tables) on demand; every one is dropped after the test."""
    made: list[str] = []

    def make() -> str:
        made.append(create_database(server))
        return url_for(server, made[-1])

    yield make
    for name in made:
        drop_database(server, name)


MakePool = Callable[..., Awaitable["Pool"]]


@pytest.fixture
async def make_pool(database_url: str) -> AsyncIterator[MakePool]:
    """Open autocommit pools (on the session database unless given a url); all closed after."""
    from psycopg_pool import AsyncConnectionPool

    made: list[Pool] = []

    async def make(
        url: str | None = None, size: int = 8, **connect: object
    ) -> Pool:
        """`connect` adds connection options (application_name, cursor_factory, ...)."""
        opened: Pool = AsyncConnectionPool(
            url or database_url,
            min_size=1,
            max_size=size,
            kwargs={"autocommit": True, **connect},
            open=False,
        )
        await opened.open(wait=True)
        made.append(opened)
        return opened

    yield make
    for opened in made:
        await opened.close()


@pytest.fixture
async def pool(make_pool: MakePool) -> Pool:
    """An open autocommit pool on the session database, closed after the test."""
    return await make_pool()


@pytest.fixture
async def lone_durable(pool: Pool) -> AsyncIterator[PostgresDurable]:
    """A `PostgresDurable` on the session database with a queue of its own (a 30 s lease)."""
    scheduler = PostgresScheduler(pool=pool, lease=timedelta(seconds=30),
                                  queue=f"pg-lone-{uuid.uuid4().hex}")
    try:
        yield PostgresDurable(PostgresCheckpointer(pool=pool), scheduler)
    finally:
        await scheduler.close()


class Counting(AsyncCursor[Any]):
    """A cursor_factory that marks a pool whose statements are kept in `sent`, whichever way
    they go: through a cursor, or through `libpq_pipeline.exchange` (see the `counting` fixture).
    The listener's own LISTEN is left out."""

    sent: ClassVar[list[str]] = []

    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if not str(query).startswith("LISTEN"):
            type(self).sent.append(str(query))
        return await super().execute(query, params, **kwargs)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> type[Counting]:
    """`Counting`, emptied, with `libpq_pipeline.exchange` counting for its pools too."""
    Counting.sent.clear()
    exchange = libpq_pipeline.exchange

    async def counted(conn: Any, statements: Any, *more: Any) -> Any:
        if getattr(conn, "cursor_factory", None) is Counting:
            Counting.sent.extend(str(sql) for sql, _ in statements)
        return await exchange(conn, statements, *more)

    monkeypatch.setattr(libpq_pipeline, "exchange", counted)
    return Counting
